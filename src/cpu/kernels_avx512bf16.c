/* SPDX-License-Identifier: Apache-2.0 */
/* The CPU kernels for AVX-512 with AVX512_BF16: simd_avx512.h compiled with
 * -mavx512bf16, so bfloat16 stores use VCVTNEPS2BF16 (chosen at run time only
 * on CPUs that have it). */
#include "cpu/simd_avx512.h"

#define QF_CPU_KERNELS_TABLE qf_cpu_kernels_avx512bf16
#define QF_CPU_KERNELS_ISA QF_CPU_ISA_AVX512BF16
#include "cpu/kernels.h"
