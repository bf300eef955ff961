// SPDX-License-Identifier: Apache-2.0
// The general fused prologue kernel: every case the streaming kernel
// (streaming.cuh) does not take: float32 input, int32 input with a bias,
// float32 outputs, any even D and R, unaligned rows, beta, unfused-parity
// mode, q written twice.
//
// Work split. A block owns a tile of `tile_tokens` tokens x `tile_heads` heads of those
// tokens (heads = q heads, then k heads, then v heads when v is written). The
// tile's tasks (token, head) go to groups of G lanes (G a power of two <= 32,
// several groups per warp for small heads); a group loops over its tasks with
// a stride of groups-per-block, and loads the next task's input before it
// computes the current one, so two 16-byte loads per lane are in flight.
// Lane l of a group owns NV vectors of VEC consecutive elements of the head,
// vector v at element (v * G + l) * VEC, so every warp-wide access is
// contiguous. VEC is 16 bytes of the input type on aligned rows and 1
// otherwise (any even D, any alignment).
//
// Decode (few tasks): tile_tokens = 1 and tile_heads = groups per block, one task per group,
// as many blocks as possible in flight. Prefill: tile_heads = all heads and tile_tokens a
// few tokens, so the per-token tables are built once per tile; the grid is a
// few blocks per multiprocessor and each block walks tiles grid-stride, so the
// RMSNorm weights are loaded once per block.
//
// Per block, shared memory holds what every head of the tile reuses, in
// float32: the RMSNorm weights (gamma with the (1 + g) offset applied, beta),
// and for each token of the tile its validity, its cache destination and its
// RoPE cos/sin expanded to R elements (one source-dependent code path, run
// once per token instead of once per head). Each group also has R floats to
// exchange RoPE partners, which serves every R, partial split and style.
//
// Data-dependent errors never read or write out of bounds: a token whose
// position or slot is outside its table, or whose act_scale is not finite,
// writes nothing and sets a bit of *error_flags; a head with a non-finite
// weight_scale writes nothing, one whose cache scale or offset is bad skips
// its cache row, and with a bad q_scale the q heads write no q_out.
#ifndef QKVFUSE_CUDA_GENERAL_CUH
#define QKVFUSE_CUDA_GENERAL_CUH

#include "cuda/device/address.cuh"
#include "cuda/device/elem.cuh"
#include "cuda/device/ptx.cuh"
#include "cuda/device/quantize.cuh"
#include "cuda/device/report.cuh"
#include "cuda/device/rope.cuh"
#include "cuda/params.h"

namespace qf {

constexpr int kBlock = 256;
constexpr int kGeneralBlocksPerSm = 4; /* general_kernel's resident blocks (launch bounds); the grid's cap */

// Head h of token t's input: heads 0..Nq-1 are q's, then Nkv of k, then Nkv of v.
template <typename T>
__device__ __forceinline__ const T *input_head(const qf_cu_problem &P, int64_t t, int h) {
  const int kind = h < P.Nq ? 0 : (h < P.Nq + P.Nkv ? 1 : 2);
  const int first = kind == 0 ? 0 : (kind == 1 ? P.Nq : P.Nq + P.Nkv);
  return reinterpret_cast<const T *>(P.in[kind].data) + t * P.in[kind].ld + (int64_t)(h - first) * P.D;
}

// Per-token state of a tile, in shared memory.
// 16-byte aligned: the float tables that follow the tile's tokens are read as float4.
struct __align__(16) tile_token {
  int64_t cblock, crow; // cache destination
  int32_t ok;           // 0: a data error, the token writes nothing
  int32_t dest;         // 1: write the cache rows
};
static_assert(sizeof(tile_token) % 16 == 0, "the float tables after the tokens must stay 16-byte aligned");

// Byte size of the shared memory of a block (tables + group scratch).
__host__ __device__ inline size_t general_smem_bytes(int D, int R, int tile_tokens, int groups) {
  return sizeof(tile_token) * (size_t)tile_tokens +
         sizeof(float) * (4 * (size_t)D + 2 * (size_t)tile_tokens * R + (size_t)groups * R);
}

// The raw bytes of one lane's share of a head, as loaded.
template <typename TIn, int VEC, int NV>
struct __align__(16) head_raw {
  TIn e[NV][VEC];
};

template <typename TIn, int VEC, int NV>
__device__ __forceinline__ void load_raw(const TIn *in, int lane, int G, int nvec, head_raw<TIn, VEC, NV> &r) {
#pragma unroll
  for (int v = 0; v < NV; v++) {
    const int vi = v * G + lane;
    if (vi >= nvec) continue;
    if constexpr (VEC * sizeof(TIn) == 16)
      *reinterpret_cast<uint4 *>(r.e[v]) = *reinterpret_cast<const uint4 *>(in + vi * VEC);
    else
#pragma unroll
      for (int k = 0; k < VEC; k++) r.e[v][k] = in[vi * VEC + k];
  }
}

// One (token, head) task of a group: x holds the lane's share of the head
// (input converted to float32); j is the token's index in the tile, t the
// token, h the head (q, then k, then v heads).
template <typename TIn, int VEC, int NV>
__device__ __forceinline__ void process_task(const qf_cu_general_params &params, float (&x)[NV][VEC], int j, int64_t t,
                                             int h, int lane, unsigned gmask, const tile_token *tok, const float *g_q,
                                             const float *g_k, const float *b_q, const float *b_k,
                                             const float *cos_t, const float *sin_t, float *ys, bool parity) {
  const qf_cu_problem &P = params.problem;
  const int D = P.D, R = P.R, G = params.group;
  const int kind = h < P.Nq ? 0 : (h < P.Nq + P.Nkv ? 1 : 2); /* q, k, v */

  // stage 1: dequantize; a head with a non-finite weight scale writes nothing
  if (P.weight_scale) {
    const float as = P.act_scale ? __ldg(P.act_scale + t) : 1.0f;
    const float *ws = P.weight_scale + (int64_t)h * D;
    bool ok = true;
#pragma unroll
    for (int v = 0; v < NV; v++) {
      const int vi = v * G + lane;
      if (vi >= params.nvec) continue;
#pragma unroll
      for (int k = 0; k < VEC; k++) {
        const int c = vi * VEC + k;
        const float w = __ldg(ws + c);
        ok &= isfinite(w);
        float y = __fmul_rn(x[v][k], w);
        if (P.act_scale) y = __fmul_rn(y, as);
        if (P.bias.data) y = __fadd_rn(y, ld(P.bias.data, P.bias.dtype, (int64_t)h * D + c));
        x[v][k] = parity ? round_to(y, P.io_dtype) : y;
      }
    }
    if (!__all_sync(gmask, ok)) {
      if (lane == 0) report(P, QKVFUSE_DATA_ERROR_SCALE);
      return;
    }
  }

  if (kind < 2) {
    // stage 2: RMSNorm: rsqrtf (as torch's rms_norm on CUDA), except in parity
    // mode, which computes 1 / sqrtf like the CPU backends and the unfused path
    if (kind == 0 ? P.q_norm : P.k_norm) {
      float ss = 0.0f;
#pragma unroll
      for (int v = 0; v < NV; v++)
#pragma unroll
        for (int k = 0; k < VEC; k++) ss = __fadd_rn(ss, __fmul_rn(x[v][k], x[v][k]));
      for (int off = G >> 1; off > 0; off >>= 1) ss += __shfl_xor_sync(gmask, ss, off, G);
      const float inv = parity ? 1.0f / sqrtf(ss / (float)D + P.eps) : rsqrtf(ss / (float)D + P.eps);
      const float *gw = kind == 0 ? g_q : g_k, *bw = kind == 0 ? b_q : b_k;
      const bool beta = (kind == 0 ? P.q_beta.data : P.k_beta.data) != nullptr;
#pragma unroll
      for (int v = 0; v < NV; v++) {
        const int vi = v * G + lane;
        if (vi >= params.nvec) continue;
        float gv[VEC], bv[VEC];
#pragma unroll
        for (int k = 0; k < VEC; k++) gv[k] = gw[vi * VEC + k], bv[k] = bw[vi * VEC + k];
        if (beta) {
#pragma unroll
          for (int k = 0; k < VEC; k++) {
            // parity: a composition stores the norm (rounded) before the bias add reads it
            const float n = __fmul_rn(__fmul_rn(x[v][k], inv), gv[k]);
            x[v][k] = __fadd_rn(parity ? round_to(n, P.io_dtype) : n, bv[k]);
          }
        } else {
#pragma unroll
          for (int k = 0; k < VEC; k++) x[v][k] = x[v][k] * inv * gv[k];
        }
        if (parity) {
#pragma unroll
          for (int k = 0; k < VEC; k++) x[v][k] = round_to(x[v][k], P.io_dtype);
        }
      }
    }
    // stage 3: RoPE on the first R dims: partners through shared memory (any R, any split)
    if (R > 0) {
      __syncwarp(gmask); /* the previous task's partner reads are done */
#pragma unroll
      for (int v = 0; v < NV; v++) {
        const int vi = v * G + lane;
#pragma unroll
        for (int k = 0; k < VEC; k++) {
          const int d = vi * VEC + k;
          if (vi < params.nvec && d < R) ys[d] = x[v][k];
        }
      }
      __syncwarp(gmask);
      const int half = R >> 1;
      const float *cj = cos_t + j * R, *sj = sin_t + j * R;
#pragma unroll
      for (int v = 0; v < NV; v++) {
        const int vi = v * G + lane;
#pragma unroll
        for (int k = 0; k < VEC; k++) {
          const int d = vi * VEC + k;
          if (vi >= params.nvec || d >= R) continue;
          const bool first = P.interleaved ? (d & 1) == 0 : d < half;
          const int partner = P.interleaved ? (d ^ 1) : (first ? d + half : d - half);
          const float y = x[v][k], yp = ys[partner], c = cj[d], s = sj[d];
          x[v][k] = first ? __fsub_rn(__fmul_rn(y, c), __fmul_rn(yp, s)) : __fadd_rn(__fmul_rn(y, c), __fmul_rn(yp, s));
        }
      }
    }
    // parity: the RoPE result is a tensor of the I/O dtype for every later stage
    if (parity) {
#pragma unroll
      for (int v = 0; v < NV; v++)
#pragma unroll
        for (int k = 0; k < VEC; k++) x[v][k] = round_to(x[v][k], P.io_dtype);
    }
  }

  // stage 5: outputs
  const int kvh = kind == 0 ? h : (kind == 1 ? h - P.Nq : h - P.Nq - P.Nkv);
  const int ocol = kvh * D;
  const qf_cu_mat &out = kind == 0 ? P.q_out : (kind == 1 ? P.k_out : P.v_out);
  if (kind == 0 && P.q_quant) {
    // a quantized q: fp8(q / q_scale) into q_out (and q_copy, of its dtype);
    // a bad q_scale leaves the head unwritten
    uint8_t q[NV][VEC];
    bool ok = true;
#pragma unroll
    for (int v = 0; v < NV; v++) {
      const int vi = v * G + lane;
      if (vi < params.nvec) ok &= quantize<VEC>(P.q_quant, x[v], P.q_scale, nullptr, 0, 0, q[v]);
    }
    if (!__all_sync(gmask, ok)) {
      if (lane == 0) report(P, QKVFUSE_DATA_ERROR_SCALE);
      return;
    }
    const qf_cu_mat *dst[2] = {&P.q_out, &P.q_copy};
    for (int m = 0; m < 2; m++) {
      if (!dst[m]->data) continue;
      uint8_t *row = static_cast<uint8_t *>(dst[m]->data) + t * dst[m]->ld + ocol;
#pragma unroll
      for (int v = 0; v < NV; v++) {
        const int vi = v * G + lane;
        if (vi < params.nvec) store_bytes<VEC>(row + vi * VEC, q[v]);
      }
    }
    return;
  }
  if (out.data) {
    const int64_t row = t * out.ld + ocol;
#pragma unroll
    for (int v = 0; v < NV; v++) {
      const int vi = v * G + lane;
      if (vi >= params.nvec) continue;
      store_floats<VEC>(out.data, out.dtype, row + vi * VEC, x[v]);
    }
  }
  if (kind == 0 && P.q_copy.data) {
    const int64_t row = t * P.q_copy.ld + ocol;
#pragma unroll
    for (int v = 0; v < NV; v++) {
      const int vi = v * G + lane;
      if (vi < params.nvec) store_floats<VEC>(P.q_copy.data, P.q_copy.dtype, row + vi * VEC, x[v]);
    }
  }
  if (kind == 0 || !tok[j].dest) return;

  // stage 4 + scatter: quantize into the cache row
  const qf_cu_cache &C = kind == 1 ? P.k_cache : P.v_cache;
  const int64_t row0 = cache_row(C, tok[j].cblock, tok[j].crow);
  const int chunk = (int)C.chunk;
  if (C.quant == QKVFUSE_QUANT_NONE) {
#pragma unroll
    for (int v = 0; v < NV; v++) {
      const int vi = v * G + lane, jj = ocol + vi * VEC;
      if (vi < params.nvec) store_floats<VEC>(C.data, C.dtype, cache_element(C, row0, jj, chunk), x[v]);
    }
    return;
  }
  const float *scale = kind == 1 ? P.k_scale : P.v_scale;
  const float *offset = kind == 1 ? P.k_offset : P.v_offset;
  const int pc = kind == 1 ? P.k_scale_pc : P.v_scale_pc, ph = kind == 1 ? P.k_scale_ph : P.v_scale_ph;
  uint8_t q[NV][VEC];
  bool ok = true;
#pragma unroll
  for (int v = 0; v < NV; v++) {
    const int vi = v * G + lane;
    if (vi < params.nvec)
      ok &= quantize<VEC>(C.quant, x[v], scale, offset, pc, pc ? ocol + vi * VEC : ph ? kvh : 0, q[v]);
  }
  if (!__all_sync(gmask, ok)) {
    if (lane == 0) report(P, QKVFUSE_DATA_ERROR_SCALE);
    return;
  }
#pragma unroll
  for (int v = 0; v < NV; v++) {
    const int vi = v * G + lane, jj = ocol + vi * VEC;
    if (vi < params.nvec)
      store_bytes<VEC>(static_cast<uint8_t *>(C.data) + cache_element(C, row0, jj, chunk), q[v]);
  }
}

template <typename TIn, int VEC, int NV>
__global__ void __launch_bounds__(kBlock, kGeneralBlocksPerSm) general_kernel(const qf_cu_general_params params) {
  const qf_cu_problem &P = params.problem;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const int D = P.D, R = P.R, G = params.group, gpb = kBlock / G;
  const int lane = threadIdx.x & (G - 1), grp = threadIdx.x / G;
  const unsigned gmask = G == 32 ? 0xffffffffu : (((1u << G) - 1u) << ((threadIdx.x & 31) & ~(G - 1)));
  tile_token *tok = reinterpret_cast<tile_token *>(smem_raw);
  float *g_q = reinterpret_cast<float *>(tok + params.tile_tokens), *g_k = g_q + D, *b_q = g_k + D, *b_k = b_q + D;
  float *cos_t = b_k + D, *sin_t = cos_t + (size_t)params.tile_tokens * R,
        *ys = sin_t + (size_t)params.tile_tokens * R + (size_t)grp * R;
  grid_dependency_wait();

  // ---- once per block: the RMSNorm weights; block 0 also checks every
  // scale and offset (reported even if no token uses them)
  for (int d = threadIdx.x; d < D; d += kBlock) {
    if (P.q_norm) {
      const float g = ld(P.q_gamma.data, P.q_gamma.dtype, d);
      g_q[d] = P.gamma_offset ? 1.0f + g : g;
      b_q[d] = P.q_beta.data ? ld(P.q_beta.data, P.q_beta.dtype, d) : 0.0f;
    }
    if (P.k_norm) {
      const float g = ld(P.k_gamma.data, P.k_gamma.dtype, d);
      g_k[d] = P.gamma_offset ? 1.0f + g : g;
      b_k[d] = P.k_beta.data ? ld(P.k_beta.data, P.k_beta.dtype, d) : 0.0f;
    }
  }
  if (blockIdx.x == 0) {
    const int width = P.Nkv * D;
    const int nk = P.k_scale_pc ? width : P.k_scale_ph ? P.Nkv : 1;
    const int nv = P.v_scale_pc ? width : P.v_scale_ph ? P.Nkv : 1;
    const float *sc[5] = {P.k_scale, P.v_scale, P.q_scale, P.k_offset, P.v_offset};
    const int n[5] = {nk, nv, 1, nk, nv};
    bool bad = false;
    for (int a = 0; a < 5; a++)
      for (int i = threadIdx.x; sc[a] && i < n[a]; i += kBlock) {
        const float v = __ldg(sc[a] + i);
        bad |= !isfinite(v) || (a < 3 && v == 0.0f);
      }
    if (__syncthreads_or(bad) && threadIdx.x == 0) report(P, QKVFUSE_DATA_ERROR_SCALE);
  }

  // ---- the tiles of this block (a grid-stride loop: the grid is at most a
  // few blocks per multiprocessor)
  const int64_t ntiles = (P.T + params.tile_tokens - 1) / params.tile_tokens * params.head_tiles;
  const bool parity = P.parity != 0;
  for (int64_t b = blockIdx.x; b < ntiles; b += gridDim.x) {
    const int64_t tile = b / params.head_tiles;
    const int h0 = (int)(b - tile * params.head_tiles) * params.tile_heads;
    const int64_t t0 = tile * params.tile_tokens;
    const int tokens = (int)min((int64_t)params.tile_tokens, P.T - t0);
    const int heads = min(params.tile_heads, P.heads_per_token - h0);
    const int tasks = tokens * heads;

    // the group's first task's input, in flight while the tables build
    head_raw<TIn, VEC, NV> raw;
    int task = grp;
    if (task < tasks)
      load_raw<TIn, VEC, NV>(input_head<TIn>(P, t0 + task / heads, h0 + task % heads), lane, G, params.nvec, raw);
    __syncthreads(); /* the previous tile's tables are no longer read */

    // tables: token validity and cache destination
    for (int j = threadIdx.x; j < tokens; j += kBlock) {
      const int64_t t = t0 + j;
      tile_token tt = {0, 0, 1, 0};
      if (P.act_scale && !isfinite(__ldg(P.act_scale + t))) { /* the token's every head is undefined */
        tt.ok = 0;
        if (h0 == 0) report(P, QKVFUSE_DATA_ERROR_SCALE);
      }
      if (P.positions.data) {
        const int64_t pos = ld_index(P.positions.data, P.positions.dtype, t);
        if (pos < 0 || pos >= P.max_pos) {
          tt.ok = 0;
          if (h0 == 0) report(P, QKVFUSE_DATA_ERROR_POSITION);
        }
      }
      if (P.layout != QKVFUSE_CACHE_NONE) {
        const qf_cu_cache &C = P.k_cache;
        if (P.layout == QKVFUSE_CACHE_CONTIGUOUS) {
          const int64_t bb = t / P.S, i = t - bb * P.S;
          const int64_t start = ld_index(P.slot_mapping.data, P.slot_mapping.dtype, bb);
          if (start != -1) {
            if ((uint64_t)start >= (uint64_t)P.slot_lim) { /* start in [0, block_size - S] */
              tt.ok = 0;
              if (h0 == 0) report(P, QKVFUSE_DATA_ERROR_SLOT);
            } else {
              tt.dest = 1, tt.cblock = bb, tt.crow = start + i;
            }
          }
        } else {
          const int64_t sl = P.page_table ? qf_page_table_slot(&P.pt, t) /* -2: a data error */
                                          : ld_index(P.slot_mapping.data, P.slot_mapping.dtype, t);
          if (sl != -1) {
            if ((uint64_t)sl >= (uint64_t)P.slot_lim) { /* sl in [0, blocks * block_size) */
              tt.ok = 0;
              if (h0 == 0) report(P, QKVFUSE_DATA_ERROR_SLOT);
            } else {
              tt.dest = 1, tt.cblock = sl / C.block_size, tt.crow = sl - tt.cblock * C.block_size;
            }
          }
        }
      }
      tok[j] = tt;
    }
    // tables: each token's cos/sin, expanded to R elements (positions are read
    // here too, so the tables need one barrier)
    if (R > 0) {
      const int half = R >> 1;
      if (P.rope_source == QKVFUSE_ROPE_COS_SIN) {
        for (int idx = threadIdx.x; idx < tokens * R; idx += kBlock) {
          const int j = idx / R, e = idx - j * R;
          const int64_t t = t0 + j;
          cos_t[idx] = ld(P.cos.data, P.cos.dtype, t * P.cos.ld + e);
          sin_t[idx] = ld(P.sin.data, P.sin.dtype, t * P.sin.ld + e);
        }
      } else {
        for (int idx = threadIdx.x; idx < tokens * half; idx += kBlock) {
          const int j = idx / half, i = idx - j * half;
          const int64_t pos = ld_index(P.positions.data, P.positions.dtype, t0 + j);
          if (pos < 0 || pos >= P.max_pos) continue; /* never read: the token is invalid */
          float c, sn;
          half_cos_sin(P, pos, i, c, sn);
          const int a = P.interleaved ? 2 * i : i, bb = P.interleaved ? 2 * i + 1 : i + half;
          cos_t[j * R + a] = cos_t[j * R + bb] = c;
          sin_t[j * R + a] = sin_t[j * R + bb] = sn;
        }
      }
    }
    __syncthreads();

    // the tasks: (j, h) advance by counters, no division per task
    const int dj = gpb / heads, dh = gpb % heads;
    int j = task / heads, h = h0 + task % heads;
    while (task < tasks) {
      int nj = j + dj, nh = h + dh;
      if (nh >= h0 + heads) nh -= heads, nj++;
      float x[NV][VEC];
#pragma unroll
      for (int v = 0; v < NV; v++)
#pragma unroll
        for (int k = 0; k < VEC; k++) x[v][k] = v * G + lane < params.nvec ? io<TIn>::f(raw.e[v][k]) : 0.0f;
      if (task + gpb < tasks)
        load_raw<TIn, VEC, NV>(input_head<TIn>(P, t0 + nj, nh), lane, G, params.nvec, raw);
      if (tok[j].ok)
        process_task<TIn, VEC, NV>(params, x, j, t0 + j, h, lane, gmask, tok, g_q, g_k, b_q, b_k, cos_t, sin_t, ys,
                                         parity);
      task += gpb, j = nj, h = nh;
    }
  }
}


}  // namespace qf

#endif  // QKVFUSE_CUDA_GENERAL_CUH
