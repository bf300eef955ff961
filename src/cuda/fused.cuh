// The fused prologue kernel: one group of G lanes per (token, head) task.
//
// Work split: task = t * heads_per_token + h enumerates (token, head) pairs,
// q heads then k heads then (when v is written) v heads, so consecutive groups
// read consecutive bytes of a qkv row. A group of G lanes (a power of two <= 32,
// several groups per warp for small heads) holds the head's D values: lane l
// owns NV vectors of VEC consecutive elements, vector v at element
// (v * G + l) * VEC, so each warp-wide load is contiguous. VEC is 16 bytes of
// the input type (8 bf16/fp16, 4 fp32/int32) on the aligned fast path, or 1 on
// the generic path (any even D, any element alignment).
//
// The RMSNorm sum of squares is a shuffle reduction inside the group; RoPE
// partners (i, i + R/2) or (2i, 2i + 1) are exchanged through shared memory,
// which serves every R and every partial-RoPE split the same way.
//
// Data-dependent errors never read or write out of bounds: a token whose
// position or slot is outside its table writes nothing and sets a bit of
// *error_flags; a head whose scale is zero or non-finite skips its cache row.
#ifndef QKVFUSE_CUDA_FUSED_CUH
#define QKVFUSE_CUDA_FUSED_CUH

#include "cuda/elem.cuh"
#include "cuda/params.h"

namespace qf {

constexpr int kBlock = 256;

__device__ __forceinline__ void report(const qf_cu_params &P, uint32_t bit) {
  if (P.error_flags) atomicOr(P.error_flags, bit);
}

// cos and sin of rotary element e (< R) of token t.
__device__ __forceinline__ void rope_cos_sin(const qf_cu_params &P, int64_t t, int64_t pos, int e, float &c,
                                             float &s) {
  const int half = P.R >> 1;
  const int i = P.interleaved ? (e >> 1) : (e < half ? e : e - half);
  switch (P.rope_source) {
    case QKVFUSE_ROPE_COS_SIN_CACHE: {
      const int64_t base = pos * P.cos_sin_cache.ld;
      c = ld(P.cos_sin_cache.data, P.cos_sin_cache.dtype, base + i);
      s = ld(P.cos_sin_cache.data, P.cos_sin_cache.dtype, base + half + i);
      break;
    }
    case QKVFUSE_ROPE_COS_SIN:
      c = ld(P.cos.data, P.cos.dtype, t * P.cos.ld + e);
      s = ld(P.sin.data, P.sin.dtype, t * P.sin.ld + e);
      break;
    default: {
      // Angle in turns, exactly: pos * f_i mod 1 in 0.64 fixed point (the
      // multiply wraps modulo 2^64), then sin/cos of 2*pi*turns with the
      // turns taken in [-1/2, 1/2).
      const uint64_t turns = (uint64_t)pos * P.turns[i];
      const float f = (float)(int64_t)turns * 0x1p-64f;
      sincospif(2.0f * f, &s, &c);
      c *= P.mscale;
      s *= P.mscale;
      break;
    }
  }
}

// Quantize VEC values (channels ch0..ch0+VEC-1) and store them at element
// offset off of a cache.
template <int VEC>
__device__ __forceinline__ void store_cache(const qf_cu_cache &C, int64_t off, const float (&v)[VEC],
                                            const float *scale, const float *offset, int per_channel, int64_t ch0) {
  if (C.quant == QKVFUSE_QUANT_NONE) {
    store_floats<VEC>(C.data, C.dtype, off, v);
    return;
  }
  uint8_t q[VEC];
#pragma unroll
  for (int k = 0; k < VEC; k++) {
    const int64_t ch = per_channel ? ch0 + k : 0;
    if (isnan(v[k])) {  // decided on the input: the division's NaN need not keep the sign
      q[k] = C.quant == QKVFUSE_QUANT_FP8_E4M3 ? (signbit(v[k]) ? 0xff : 0x7f) : 0;
      continue;
    }
    float x = v[k] / __ldg(scale + ch);
    if (C.quant == QKVFUSE_QUANT_INT8_ASYM) x = x + __ldg(offset + ch);
    q[k] = C.quant == QKVFUSE_QUANT_FP8_E4M3 ? to_e4m3(x) : (uint8_t)to_int8(x);
  }
  store_bytes<VEC>(static_cast<uint8_t *>(C.data) + off, q);
}

template <typename TIn, int VEC, int NV>
__global__ void __launch_bounds__(kBlock) fused_kernel(const qf_cu_params P) {
  extern __shared__ float smem[];
  const int G = P.group;
  const int lane = threadIdx.x & (G - 1);
  const int grp = threadIdx.x / G;
  const int64_t task = (int64_t)blockIdx.x * (kBlock / G) + grp;
  if (task >= P.num_tasks) return;
  const unsigned gmask = G == 32 ? 0xffffffffu : (((1u << G) - 1u) << ((threadIdx.x & 31) & ~(G - 1)));
  const int64_t t = task / P.heads_per_token;
  const int h = (int)(task - t * P.heads_per_token);
  const int kind = h < P.Nq ? 0 : (h < P.Nq + P.Nkv ? 1 : 2); /* q, k, v */
  const int D = P.D;

  // ---- data-dependent guards: the token writes nothing if any fails
  int64_t pos = 0;
  if (P.positions.data) {
    pos = ld_index(P.positions.data, P.positions.dtype, t);
    if (pos < 0 || pos >= P.max_pos) {
      if (h == 0 && lane == 0) report(P, QKVFUSE_DATA_ERROR_POSITION);
      return;
    }
  }
  bool dest = false;
  int64_t cblock = 0, crow = 0;
  if (P.layout != QKVFUSE_CACHE_NONE) {
    const qf_cu_cache &C = P.k_cache;
    if (P.layout == QKVFUSE_CACHE_CONTIGUOUS) {
      const int64_t b = t / P.S, i = t - b * P.S;
      const int64_t start = ld_index(P.slot_mapping.data, P.slot_mapping.dtype, b);
      if (start != -1) {
        if (start < 0 || start > C.block_size - P.S) {
          if (h == 0 && lane == 0) report(P, QKVFUSE_DATA_ERROR_SLOT);
          return;
        }
        dest = true;
        cblock = b;
        crow = start + i;
      }
    } else {
      const int64_t s = ld_index(P.slot_mapping.data, P.slot_mapping.dtype, t);
      if (s != -1) {
        if (s < 0 || s >= C.blocks * C.block_size) {
          if (h == 0 && lane == 0) report(P, QKVFUSE_DATA_ERROR_SLOT);
          return;
        }
        dest = true;
        cblock = s / C.block_size;
        crow = s - cblock * C.block_size;
      }
    }
  }

  // ---- stage 1: load (and dequantize) the head
  const int64_t col0 = (int64_t)h * D;
  const TIn *in = reinterpret_cast<const TIn *>(P.qkv.data) + t * P.qkv.ld + col0;
  float x[NV][VEC];
#pragma unroll
  for (int v = 0; v < NV; v++) {
    const int vi = v * G + lane;
    if (vi < P.nvec) {
      load_vec<TIn, VEC>(in + vi * VEC, x[v]);
    } else {
#pragma unroll
      for (int k = 0; k < VEC; k++) x[v][k] = 0.0f;
    }
  }
  if (P.weight_scale) {
    const float as = P.act_scale ? __ldg(P.act_scale + t) : 1.0f;
#pragma unroll
    for (int v = 0; v < NV; v++) {
      const int vi = v * G + lane;
      if (vi >= P.nvec) continue;
#pragma unroll
      for (int k = 0; k < VEC; k++) {
        const int64_t c = col0 + vi * VEC + k;
        float y = x[v][k] * __ldg(P.weight_scale + c);
        if (P.act_scale) y = y * as;
        if (P.bias.data) y = y + ld(P.bias.data, P.bias.dtype, c);
        x[v][k] = P.parity ? round_to(y, P.io_dtype) : y;
      }
    }
  }

  if (kind < 2) {
    // ---- stage 2: RMSNorm
    if (kind == 0 ? P.q_norm : P.k_norm) {
      float ss = 0.0f;
#pragma unroll
      for (int v = 0; v < NV; v++)
#pragma unroll
        for (int k = 0; k < VEC; k++) ss += x[v][k] * x[v][k];
      for (int off = G >> 1; off > 0; off >>= 1) ss += __shfl_xor_sync(gmask, ss, off, G);
      const float inv = 1.0f / sqrtf(ss / (float)D + P.eps);
      const qf_cu_vec &g = kind == 0 ? P.q_gamma : P.k_gamma;
      const qf_cu_vec &b = kind == 0 ? P.q_beta : P.k_beta;
#pragma unroll
      for (int v = 0; v < NV; v++) {
        const int vi = v * G + lane;
        if (vi >= P.nvec) continue;
#pragma unroll
        for (int k = 0; k < VEC; k++) {
          const int d = vi * VEC + k;
          float gv = ld(g.data, g.dtype, d);
          if (P.gamma_offset) gv = 1.0f + gv;
          float y = x[v][k] * inv * gv;
          if (b.data) y = y + ld(b.data, b.dtype, d);
          x[v][k] = P.parity ? round_to(y, P.io_dtype) : y;
        }
      }
    }
    // ---- stage 3: RoPE on the first R dims, partners through shared memory
    if (P.R > 0) {
      float *ys = smem + grp * P.R;
#pragma unroll
      for (int v = 0; v < NV; v++) {
        const int vi = v * G + lane;
#pragma unroll
        for (int k = 0; k < VEC; k++) {
          const int d = vi * VEC + k;
          if (vi < P.nvec && d < P.R) ys[d] = x[v][k];
        }
      }
      __syncwarp(gmask);
      const int half = P.R >> 1;
#pragma unroll
      for (int v = 0; v < NV; v++) {
        const int vi = v * G + lane;
#pragma unroll
        for (int k = 0; k < VEC; k++) {
          const int d = vi * VEC + k;
          if (vi >= P.nvec || d >= P.R) continue;
          float c, s;
          rope_cos_sin(P, t, pos, d, c, s);
          const bool first = P.interleaved ? (d & 1) == 0 : d < half;
          const int partner = P.interleaved ? (d ^ 1) : (first ? d + half : d - half);
          const float y = x[v][k], yp = ys[partner];
          x[v][k] = first ? y * c - yp * s : y * c + yp * s;
        }
      }
    }
    // parity: the RoPE result is a tensor of the I/O dtype for every later stage
    if (P.parity) {
#pragma unroll
      for (int v = 0; v < NV; v++)
#pragma unroll
        for (int k = 0; k < VEC; k++) x[v][k] = round_to(x[v][k], P.io_dtype);
    }
  }

  // ---- stage 5: outputs
  const int kvh = kind == 0 ? h : (kind == 1 ? h - P.Nq : h - P.Nq - P.Nkv);
  const int64_t ocol = (int64_t)kvh * D;
  const qf_cu_mat &out = kind == 0 ? P.q_out : (kind == 1 ? P.k_out : P.v_out);
  if (out.data) {
#pragma unroll
    for (int v = 0; v < NV; v++) {
      const int vi = v * G + lane;
      if (vi < P.nvec) store_floats<VEC>(out.data, out.dtype, t * out.ld + ocol + vi * VEC, x[v]);
    }
  }
  if (kind == 0 || !dest) return;

  // ---- stage 4 + scatter: quantize into the cache row
  const qf_cu_cache &C = kind == 1 ? P.k_cache : P.v_cache;
  const float *scale = kind == 1 ? P.k_scale : P.v_scale;
  const float *offset = kind == 1 ? P.k_offset : P.v_offset;
  const int pc = kind == 1 ? P.k_scale_pc : P.v_scale_pc;
  if (C.quant != QKVFUSE_QUANT_NONE) {
    bool bad = false;
#pragma unroll
    for (int v = 0; v < NV; v++) {
      const int vi = v * G + lane;
      if (vi >= P.nvec) continue;
#pragma unroll
      for (int k = 0; k < VEC; k++) {
        const int64_t ch = pc ? ocol + vi * VEC + k : 0;
        const float sc = __ldg(scale + ch);
        bad |= !isfinite(sc) || sc == 0.0f;
        if (offset) bad |= !isfinite(__ldg(offset + ch));
      }
    }
    if (__any_sync(gmask, bad)) {
      if (lane == 0) report(P, QKVFUSE_DATA_ERROR_SCALE);
      return;
    }
  }
#pragma unroll
  for (int v = 0; v < NV; v++) {
    const int vi = v * G + lane;
    if (vi >= P.nvec) continue;
    const int64_t j = ocol + vi * VEC;
    const int64_t off = cblock * C.s_block + crow * C.s_row + (j / C.chunk) * C.s_chunk + (j % C.chunk);
    store_cache<VEC>(C, off, x[v], scale, offset, pc, j);
  }
}

}  // namespace qf

#endif  // QKVFUSE_CUDA_FUSED_CUH
