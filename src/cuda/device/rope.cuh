// SPDX-License-Identifier: Apache-2.0
// RoPE's cos and sin of one pair, from a cos_sin_cache or computed.
#ifndef QKVFUSE_CUDA_DEVICE_ROPE_CUH
#define QKVFUSE_CUDA_DEVICE_ROPE_CUH

#include <stdint.h>

#include "cuda/device/elem.cuh"
#include "cuda/params.h"

namespace qf {

// Cosine and sine of pair index i (< R/2) of a token, for the table sources.
__device__ __forceinline__ void half_cos_sin(const qf_cu_problem &P, int64_t pos, int i, float &c, float &s) {
  if (P.rope_source == QKVFUSE_ROPE_COS_SIN_CACHE) {
    const int64_t base = pos * P.cos_sin_cache.ld;
    c = ld(P.cos_sin_cache.data, P.cos_sin_cache.dtype, base + i);
    s = ld(P.cos_sin_cache.data, P.cos_sin_cache.dtype, base + (P.R >> 1) + i);
  } else {
    // Angle in turns, exactly: pos * f_i mod 1 in 0.64 fixed point (the
    // multiply wraps modulo 2^64), then sin/cos of 2*pi*turns with the turns
    // taken in [-1/2, 1/2).
    const uint64_t turns = (uint64_t)pos * P.turns[i];
    const float f = (float)(int64_t)turns * 0x1p-64f;
    sincospif(2.0f * f, &s, &c);
    c *= P.mscale;
    s *= P.mscale;
  }
}

}  // namespace qf

#endif  // QKVFUSE_CUDA_DEVICE_ROPE_CUH
