// SPDX-License-Identifier: Apache-2.0
// Integer division on the kernels' critical paths: by a 32-bit division
// where the operands fit, or by a multiply-high and a shift for a divisor
// fixed for the launch (qf_cu_div).
#ifndef QKVFUSE_CUDA_DEVICE_DIVIDE_CUH
#define QKVFUSE_CUDA_DEVICE_DIVIDE_CUH

#include <stdint.h>

#include "cuda/params.h"

namespace qf {

// a / b for 0 <= a and 0 < b, by a 32-bit division when both fit (a 64-bit
// division is a long subroutine on the decode critical path).
__device__ __forceinline__ int64_t div_small(int64_t a, int64_t b) {
  if (((uint64_t)a | (uint64_t)b) >> 32 == 0) return (int64_t)((uint32_t)a / (uint32_t)b);
  return a / b;
}

// Fast 32-bit division by a divisor fixed for the launch (qf_cu_div):
// n / d for n < 2^31.
__device__ __forceinline__ unsigned div_fixed(unsigned n, const qf_cu_div &d) {
  return (__umulhi(n, d.mul) + n) >> d.shift;
}

// a / b for 0 <= a and 0 < b. FIXED (the decode form): with *d = b's divisor
// (choose.cu: divisor_or_none; d->d = 0: none), a multiply where a < 2^31
// (any result for a < 0); otherwise d is not read (may be null). Not in the
// prefill form, whose token check one run ahead is off its critical path:
// there the multiply's extra code only costs.
template <bool FIXED>
__device__ __forceinline__ int64_t div_by(int64_t a, int64_t b, const qf_cu_div *d) {
  if (FIXED && d->d != 0 && (uint64_t)a < 0x80000000ull) return div_fixed((unsigned)a, *d);
  return div_small(a, b);
}

}  // namespace qf

#endif  // QKVFUSE_CUDA_DEVICE_DIVIDE_CUH
