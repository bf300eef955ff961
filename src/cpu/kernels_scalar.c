/* SPDX-License-Identifier: Apache-2.0 */
/* The CPU kernels in portable C, one lane: the template reduces to the
 * reference's scalar loops (no ISA flags). */
#include "cpu/simd_scalar.h"

#define QF_CPU_KERNELS_TABLE qf_cpu_kernels_scalar
#define QF_CPU_KERNELS_ISA QF_CPU_ISA_SCALAR
#include "cpu/kernels.h"
