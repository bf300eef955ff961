/* SPDX-License-Identifier: Apache-2.0 */
/* The CPU kernels for AVX-512 F/BW/VL/DQ, 16 lanes (compiled with -mavx512f
 * -mavx512bw -mavx512vl -mavx512dq -mf16c; chosen at run time only on CPUs
 * that have them). */
#include "cpu/simd_avx512.h"

#define QF_CPU_KERNELS_TABLE qf_cpu_kernels_avx512
#define QF_CPU_KERNELS_ISA QF_CPU_ISA_AVX512
#include "cpu/kernels.h"
