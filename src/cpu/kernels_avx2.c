/* SPDX-License-Identifier: Apache-2.0 */
/* The CPU kernels for AVX2 + F16C, 8 lanes (compiled with -mavx2 -mf16c;
 * chosen at run time only on CPUs that have them). */
#include "cpu/simd_avx2.h"

#define QF_CPU_KERNELS_TABLE qf_cpu_kernels_avx2
#define QF_CPU_KERNELS_ISA QF_CPU_ISA_AVX2
#include "cpu/kernels.h"
