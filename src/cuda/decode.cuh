// SPDX-License-Identifier: Apache-2.0
// The streaming kernel's decode form (streaming.cuh: the kernel, its
// forms and lane layout).
#ifndef QKVFUSE_CUDA_DECODE_CUH
#define QKVFUSE_CUDA_DECODE_CUH

#include "cuda/streaming.cuh"

namespace qf {

// The decode form's scales: a lane's 8 NV, in registers.
template <int NV>
struct lane_scales {
  const float (&r)[8 * NV], (&of)[8 * NV];
  bool bad; /* a scale or offset of the head is bad */
  __device__ bool ok() const { return !bad; }
  __device__ void get(int v, float *rv, float *ov) const {
#pragma unroll
    for (int k = 0; k < 8; k++) rv[k] = r[8 * v + k], ov[k] = of[8 * v + k];
  }
};

// cos/sin of the 8 elements of vector w (the one-vector decode form's lane)
// for token t at position pos, in two phases like the tables' (ld_table /
// cvt_table): vec_cs_load issues the table loads (where rope: the token is
// valid and the vector rotates), vec_cs_get converts them (or computes
// them: COMPUTED), so the row's normalization runs during their round trip.
// neox: the pair index of element 8w + k is 8w + k in the first half (R/16
// vectors), 8w + k - R/2 in the second; a first-half vector's sin comes
// negated, so that both halves rotate as x c + x' s, x' the partner's value.
// Interleaved: pairs (2i, 2i+1) inside the vector. COS_SIN_ROWS: per token and
// element, as given.
struct vec_cs_raw {
  table_raw c, s;
};

// The element of a cos/sin cache row (position pos) holding the cos of
// vector w's pairs (the sin: R/2 further): cos_at's, where a neox vector of
// the second half (w >= R/16) takes its first-half partner's pairs.
template <bool INTERLEAVED>
__device__ __forceinline__ int64_t vec_cos_at(const qf_cu_mat &csc, int64_t pos, int w, int R) {
  const int hv = R >> 4;
  return cos_at<INTERLEAVED>(csc, pos, INTERLEAVED || w < hv ? w : w - hv);
}

template <bool INTERLEAVED, bool COS_SIN_ROWS, int COS_SIN_DTYPE = 0>
__device__ __forceinline__ vec_cs_raw vec_cs_load(const qf_cu_problem &P, int64_t t, int pos, int w, bool rope) {
  vec_cs_raw r = {};
  if (!rope) return r;
  const int R = P.R;
  const qf_cu_mat &csc = P.cos_sin_cache;
  const int csdt = COS_SIN_DTYPE ? COS_SIN_DTYPE : csc.dtype;
  const int cdt = COS_SIN_DTYPE ? COS_SIN_DTYPE : P.cos.dtype, sdt = COS_SIN_DTYPE ? COS_SIN_DTYPE : P.sin.dtype;
  if (COS_SIN_ROWS) {
    r.c = ld_table<8>(P.cos.data, cdt, t * P.cos.ld + 8 * w);
    r.s = ld_table<8>(P.sin.data, sdt, t * P.sin.ld + 8 * w);
  } else if (COS_SIN_DTYPE || P.rope_source == QKVFUSE_ROPE_COS_SIN_CACHE) {
    const int64_t base = vec_cos_at<INTERLEAVED>(csc, pos, w, R);
    r.c = ld_table<INTERLEAVED ? 4 : 8>(csc.data, csdt, base);
    r.s = ld_table<INTERLEAVED ? 4 : 8>(csc.data, csdt, base + (R >> 1));
  }
  return r;
}

template <bool INTERLEAVED, bool COS_SIN_ROWS, int COS_SIN_DTYPE = 0>
__device__ __forceinline__ void vec_cs_get(const qf_cu_problem &P, const vec_cs_raw &r, int pos, int w, bool rope,
                                           float (&c)[8], float (&s)[8]) {
  if (!rope) return;
  const int hv = P.R >> 4;
  const bool first = !INTERLEAVED && w < hv;
  const bool cache_src = COS_SIN_DTYPE || P.rope_source == QKVFUSE_ROPE_COS_SIN_CACHE;
  const int csdt = COS_SIN_DTYPE ? COS_SIN_DTYPE : P.cos_sin_cache.dtype;
  const int cdt = COS_SIN_DTYPE ? COS_SIN_DTYPE : P.cos.dtype, sdt = COS_SIN_DTYPE ? COS_SIN_DTYPE : P.sin.dtype;
  if (COS_SIN_ROWS) {
    cvt_table<8>(r.c, cdt, c);
    cvt_table<8>(r.s, sdt, s);
  } else if (cache_src && !INTERLEAVED) {
    cvt_table<8>(r.c, csdt, c);
    cvt_table<8>(r.s, csdt, s);
  } else if (cache_src) {
    float c4[4], s4[4];
    cvt_table<4>(r.c, csdt, c4);
    cvt_table<4>(r.s, csdt, s4);
#pragma unroll
    for (int k = 0; k < 8; k++) c[k] = c4[k >> 1], s[k] = s4[k >> 1];
  } else { /* COMPUTED */
#pragma unroll
    for (int k = 0; k < 8; k += INTERLEAVED ? 2 : 1) {
      half_cos_sin(P, pos, INTERLEAVED ? 4 * w + (k >> 1) : 8 * (first ? w : w - hv) + k, c[k], s[k]);
      if (INTERLEAVED) c[k + 1] = c[k], s[k + 1] = s[k];
    }
  }
  if (first) {
#pragma unroll
    for (int k = 0; k < 8; k++) s[k] = -s[k];
  }
}

// The decode form's norm weights and cache scales of a lane's NV vectors,
// raw (as loaded: load_weights) and ready (ready_weights: the norm weights
// as float32, 1 + g with gamma_offset; the reciprocal scales and the
// offsets; bad: a scale or offset is bad).
template <int NV>
struct weights_raw {
  table_raw g[NV], s[NV], o[NV];
};
template <int NV>
struct lane_weights {
  float g[8 * NV], r[8 * NV], of[8 * NV];
  bool bad;
};

// Loads the raw weights where norm (the lane's head is normalized, with gw)
// and quant (its cache is quantized, scales sc / offsets so, per channel: pc,
// from channel ch0 of the head) ; L2ONLY: through L2 only (before the grid
// dependency wait: ld_l2).
template <int NV, bool L2ONLY, int GAMMA_DTYPE = 0>
__device__ __forceinline__ weights_raw<NV> load_weights(const qf_cu_vec &gw, const float *sc, const float *so, bool pc,
                                                        bool norm, bool quant, int ch0, const int (&wv)[NV]) {
  weights_raw<NV> w = {};
#pragma unroll
  for (int v = 0; v < NV; v++) {
    if (norm) w.g[v] = ld_table<8, L2ONLY>(gw.data, GAMMA_DTYPE ? GAMMA_DTYPE : gw.dtype, 8 * wv[v]);
    if (quant && pc) {
      w.s[v] = ld_table<8, L2ONLY>(sc, QKVFUSE_DTYPE_FLOAT32, ch0 + 8 * wv[v]);
      if (so) w.o[v] = ld_table<8, L2ONLY>(so, QKVFUSE_DTYPE_FLOAT32, ch0 + 8 * wv[v]);
    } else if (quant) { /* one scale (and offset) for the tensor */
      uint32_t s0, o0 = 0;
      if (L2ONLY) {
        asm volatile("ld.global.cg.u32 %0, [%1];" : "=r"(s0) : "l"(sc));
        if (so) asm volatile("ld.global.cg.u32 %0, [%1];" : "=r"(o0) : "l"(so));
      } else {
        s0 = __float_as_uint(__ldg(sc)), o0 = so ? __float_as_uint(__ldg(so)) : 0u;
      }
      w.s[v].a = w.s[v].b = make_uint4(s0, s0, s0, s0);
      w.o[v].a = w.o[v].b = make_uint4(o0, o0, o0, o0);
    }
  }
  return w;
}

template <int NV>
__device__ __forceinline__ void ready_weights(const weights_raw<NV> &w, int gdt, bool gamma_offset, bool norm,
                                              bool quant, lane_weights<NV> &o) {
  if (norm) {
#pragma unroll
    for (int v = 0; v < NV; v++) cvt_table<8>(w.g[v], gdt, o.g + 8 * v);
    if (gamma_offset) {
#pragma unroll
      for (int k = 0; k < 8 * NV; k++) o.g[k] += 1.0f;
    }
  }
  o.bad = false;
  if (!quant) return;
#pragma unroll
  for (int v = 0; v < NV; v++) {
    cvt_table<8>(w.s[v], QKVFUSE_DTYPE_FLOAT32, o.r + 8 * v);
    cvt_table<8>(w.o[v], QKVFUSE_DTYPE_FLOAT32, o.of + 8 * v);
  }
  o.bad = ready_scales<8 * NV>(o.r, o.of);
}

// Whether two raw loads of the weights read the same bits: the words'
// differences ORed into four independent chains (after the wait, on the k
// and v warps' path: one chain of dependent ORs would be long).
template <int NV>
__device__ __forceinline__ bool same_weights(const weights_raw<NV> &a, const weights_raw<NV> &b) {
  uint32_t d[4] = {0, 0, 0, 0};
  auto acc = [&](const uint4 &x, const uint4 &y) {
    d[0] |= x.x ^ y.x, d[1] |= x.y ^ y.y, d[2] |= x.z ^ y.z, d[3] |= x.w ^ y.w;
  };
#pragma unroll
  for (int v = 0; v < NV; v++) {
    acc(a.g[v].a, b.g[v].a), acc(a.g[v].b, b.g[v].b);
    acc(a.s[v].a, b.s[v].a), acc(a.s[v].b, b.s[v].b);
    acc(a.o[v].a, b.o[v].a), acc(a.o[v].b, b.o[v].b);
  }
  return ((d[0] | d[1]) | (d[2] | d[3])) == 0;
}

// The streaming kernel for decode-sized calls: one (token, head) per group,
// one pass, NV 16-byte vectors per lane:
// - NV = 1 (the smallest calls: the shortest instruction chain per lane):
//   L = decode_lanes(D) lanes, lane l holds [8l, 8l+8) (lanes past the head
//   read lane l - D/8's tables and write nothing); a neox lane gets its
//   rotation partner's normalized vector (R/16 lanes away) by shuffles;
//   interleaved pairs sit inside a vector;
// - NV = 2: L = D/16 rounded up to a power of two, the prefill form's lane
//   layout (lane_layout: rotation pairs inside a lane).
// Blocks [0, decode_blocks_q) do q, then decode_blocks_k blocks do k, the rest v
// (the kind is uniform per block); a block's groups take consecutive (token,
// head) pairs of its kind, token-major. Every line the call reads first (the
// row, the position and slot, the norm weights, the cache scales, the cos/sin
// of the position as it reads then, or the token's own cos/sin rows) is
// prefetched into L2 before the grid dependency wait; after it, every load
// that does not depend on another is issued at once, and cos/sin as soon as
// the position is in. Cache
// scales are read per lane (no shared table): every (k or v) head has a group
// for token 0, which checks the head's scales and offsets (reported, used or
// not); a head with a bad one skips its cache rows. PRELOAD: the k and v
// blocks also read and ready their norm weights and scales before the wait
// (preload). ENGINE: what the kernel knows of its call (kEngine, | kEngineCache
// with PRELOAD, | kEngineRows with I32, or 0). I32: int32 input (T: the
// outputs' type), each vector two 16-byte pieces, dequantized by the lane's
// weight scales and the token's act_scale, both read with the row; a token
// whose act_scale is not finite writes nothing (reported by its first q
// group), and neither does a head with a weight scale that is not finite
// (reported by its groups of token 0).
template <typename T, int L, int NV, bool INTERLEAVED, bool COS_SIN_ROWS, bool PRELOAD, int ENGINE, bool I32 = false>
__global__ void __launch_bounds__(kStreamingBlock, decode_min_blocks(ENGINE, NV))
    decode_kernel(const __grid_constant__ qf_cu_decode_params params) {
#if QF_STREAMING_DEVICE_CODE
  const qf_cu_problem &P = params.problem;
  constexpr int GPB = kStreamingBlock / L, COS_SIN_VECS = cos_sin_vecs(INTERLEAVED, COS_SIN_ROWS), N = 8 * NV;
  static_assert(!ENGINE || COS_SIN_ROWS == ((ENGINE & kEngineRows) != 0), "ENGINE: cos/sin rows with kEngineRows only");
  static_assert(!I32 || !PRELOAD, "I32: no PRELOAD");
  using TIn = typename input_elem<T, I32>::type;
  constexpr int VP = I32 ? 2 : 1; /* 16-byte pieces of a vector */
  constexpr int TABLE_DTYPE = ENGINE ? h16<T>::dtype : 0; /* ENGINE: the norm weights' dtype (T) */
  constexpr int CS_DTYPE = engine_table_dtype<T>(ENGINE); /* ENGINE: the cos/sin table's dtype */
  const int D = P.D, R = P.R, data_lanes = D >> (NV == 1 ? 3 : 4); /* lanes with data */
  const int lane = threadIdx.x & (L - 1), grp = threadIdx.x / L;
  lane_vecs lv = {0, 0, false, false};
  int wv[NV]; /* the lane's vectors */
  if constexpr (NV == 1) {
    wv[0] = lane < data_lanes ? lane : lane - data_lanes;
  } else {
    lv = lane_layout<INTERLEAVED>(lane, data_lanes, R);
    wv[0] = lv.a, wv[NV - 1] = lv.b;
  }
  unsigned b = blockIdx.x;
  int kind = 0;
  qf_cu_div Nd = params.div_q_heads;
  if (b >= (unsigned)params.decode_blocks_q) {
    b -= params.decode_blocks_q, kind = 1, Nd = params.div_kv_heads;
    if (b >= (unsigned)params.decode_blocks_k) b -= params.decode_blocks_k, kind = 2;
  }
  const unsigned idx = b * GPB + grp, tu = div_fixed(idx, Nd);
  const int h = (int)(idx - tu * Nd.d);
  const int64_t t = tu;
  const bool live = t < P.T, act = live && lane < data_lanes;
  const bool norm = norm_of(ENGINE, P, kind);
  const qf_cu_cache &C = kind == 1 ? P.k_cache : P.v_cache;
  const float *sc = kind == 1 ? P.k_scale : P.v_scale, *so = kind == 1 ? P.k_offset : P.v_offset;
  const bool quant = kind > 0 && C.data && C.quant != QKVFUSE_QUANT_NONE && sc;
  constexpr bool ONE_SCALE = (ENGINE & kEngineAppend) != 0; /* the append call: one scale per cache */
  const bool pc = !ONE_SCALE && (kind == 1 ? P.k_scale_pc : P.v_scale_pc) != 0;
  /* one scale (and offset) per kv head: the head's, read below as a tensor's one */
  if (!ONE_SCALE && quant && (kind == 1 ? P.k_scale_ph : P.v_scale_ph)) sc += h, so = so ? so + h : so;
  const TIn *in = reinterpret_cast<const TIn *>(P.in[kind].data) + (act ? t : 0) * P.in[kind].ld + (int64_t)h * D;
  /* I32: the head's weight scales */
  const float *wsc = I32 ? P.weight_scale + (int64_t)((kind == 0 ? 0 : kind == 1 ? P.Nq : P.Nq + P.Nkv) + h) * D
                         : nullptr;

  // the row, position and slot start their way while the previous kernel
  // finishes; the setup above reads only parameters; memory waits. The
  // lines a token's groups share (position, slot, act_scale) by a few of
  // them: prefetched by every group, they queue at the line's L2 slice;
  // with 16-bit input by the token's lead (its q head 0 group), with int32
  // input by the token's first group in each block (the faster of the two
  // for each: the token_lines_ab rows of docs/bench/h100.jsonl).
  const bool lead = live && kind == 0 && h == 0;
  if (act) {
#pragma unroll
    for (int v = 0; v < NV; v++) prefetch_l2(in + 8 * wv[v]);
  }
  /* page table: the token's batch index and (the append call) kv position
     as read before the wait (index_hint) */
  constexpr bool APPEND = (ENGINE & kEngineAppend) != 0;
  int64_t bh = -1, ph = -1;
  if ((I32 ? live && (h == 0 || grp == 0) : lead) && lane == 0) {
    if (I32 && P.act_scale) prefetch_l2(P.act_scale + t);
    if (has_positions(ENGINE, P))
      prefetch_l2(index_at(P.positions.data, ENGINE ? engine_pos_dtype(ENGINE) : P.positions.dtype, t));
    if (page_table_of(ENGINE, P)) { /* the token's own entries; its kv_indptr entries below */
      bh = index_hint(P.pt.batch, P.pt.batch_dtype, t);
      if constexpr (APPEND)
        ph = index_hint(P.pt.pos, P.pt.pos_dtype, t);
      else
        prefetch_l2(index_at(P.pt.pos, P.pt.pos_dtype, t));
    } else if ((ENGINE & kEngineCache) || P.layout != QKVFUSE_CACHE_NONE) {
      prefetch_l2(index_at(P.slot_mapping.data, ENGINE ? QKVFUSE_DTYPE_INT64 : P.slot_mapping.dtype,
                           !ENGINE && P.layout == QKVFUSE_CACHE_CONTIGUOUS ? div_by<true>(t, P.S, &params.batch_div)
                                                                           : t));
    }
  }
  // Pairs from the cos/sin cache: the lead alone reads the position as it
  // is now (index_hint: a line many tokens share, as above) and
  // prefetches the cos/sin lines of that row into L2 (its lanes cover the
  // row); the loads after the wait then find them there. Prefetched, not
  // loaded: after the wait their round trip is hidden behind the
  // normalization anyway
  const bool rot = NV == 1 ? (INTERLEAVED ? 8 * wv[0] < R : wv[0] < (R >> 3)) : (lv.rot_a || lv.rot_b);
  if (!COS_SIN_ROWS && lead && R > 0 && act && rot &&
      (ENGINE || P.rope_source == QKVFUSE_ROPE_COS_SIN_CACHE) && has_positions(ENGINE, P)) {
    const int64_t hp = index_hint(P.positions.data, ENGINE ? engine_pos_dtype(ENGINE) : P.positions.dtype, t);
    if (hp >= 0 && hp < P.max_pos) {
      if constexpr (NV == 1) {
        const qf_cu_mat &csc = P.cos_sin_cache;
        const int64_t e = vec_cos_at<INTERLEAVED>(csc, hp, wv[0], R);
        const int es = (ENGINE ? CS_DTYPE : csc.dtype) == QKVFUSE_DTYPE_FLOAT32 ? 4 : 2;
        prefetch_l2(static_cast<const char *>(csc.data) + e * es);
        prefetch_l2(static_cast<const char *>(csc.data) + (e + (R >> 1)) * es);
      } else {
        prefetch_cos_sin<INTERLEAVED, CS_DTYPE>(P, hp, lv);
      }
    }
  }
  // under a page table, the lines of the token's kv_indptr entries, as its
  // batch index read above chooses them: after the wait the walk
  // (page_table_slot) then finds its first two steps in L2; the append
  // call's kernels read kv_indptr[b] as a hint and prefetch its kv_indices
  // entry too (the third step; the other kernels keep two: the third was
  // measured for the append call only). Used here, after the position's
  // read, so that both round trips overlap
  if (page_table_of(ENGINE, P) && bh >= 0 && bh < P.pt.nseq) {
    if constexpr (APPEND) {
      const int64_t lo = index_hint(P.pt.indptr, P.pt.indptr_dtype, bh);
      prefetch_l2(index_at(P.pt.indptr, P.pt.indptr_dtype, bh + 1));
      prefetch_page_entry(P.pt, lo, ph, &params.page_div);
    } else {
      prefetch_l2(index_at(P.pt.indptr, P.pt.indptr_dtype, bh));
      prefetch_l2(index_at(P.pt.indptr, P.pt.indptr_dtype, bh + 1));
    }
  }
  // COS_SIN_ROWS: the token's own cos/sin rows (no position), by every
  // group that rotates: lines of one token, few requests each, and faster
  // so than by the lead alone
  if (COS_SIN_ROWS && kind < 2 && R > 0 && act) {
#pragma unroll
    for (int v = 0; v < NV; v++)
      if (NV == 1 ? rot : v ? lv.rot_b : lv.rot_a) prefetch_cos_sin_rows(P, t, wv[v]);
  }
  // the lines of the norm weights and cache scales into L2 as well, by the
  // groups of token 0 only: every token's groups read the same lines, and
  // prefetched by all of them they queue at one L2 slice. Their loads wait
  // for the previous kernel, which may write them.
  if (act && t == 0) {
    const qf_cu_vec &gw = kind == 0 ? P.q_gamma : P.k_gamma;
    const int ges = !ENGINE && gw.dtype == QKVFUSE_DTYPE_FLOAT32 ? 4 : 2;
#pragma unroll
    for (int v = 0; v < NV; v++) {
      if (norm) prefetch_l2(static_cast<const char *>(gw.data) + 8 * wv[v] * ges);
      if (I32) prefetch_l2(wsc + 8 * wv[v]);
      if (quant && pc) {
        prefetch_l2(sc + h * D + 8 * wv[v]);
        if (so) prefetch_l2(so + h * D + 8 * wv[v]);
      }
    }
    if (quant && !pc && h == 0 && lane == 0) {
      prefetch_l2(sc);
      if (so) prefetch_l2(so);
    }
  }
  // PRELOAD (one vector per lane and a quantized cache: choose.cu): the norm
  // weights and cache scales preloaded: read (through L2 only) and readied
  // before the wait (they are the model's, which a previous kernel seldom
  // writes; their conversion then overlaps it), read again after the wait,
  // and readied again unless both reads have the same bits (test_cuda_pdl).
  // Only the k and v blocks preload: the q blocks' weights are a norm's
  // alone, converted in a few instructions, so preloading them costs more
  // than it saves. The kernels without PRELOAD keep their inline loads
  // below, which are faster for them than these helpers.
  const qf_cu_vec &gws = kind == 0 ? P.q_gamma : P.k_gamma;
  const bool wnorm = norm && act, wquant = quant && act, preload = PRELOAD && kind > 0;
  weights_raw<NV> wpreload = {};
  lane_weights<NV> lw;
  if (preload) {
    wpreload = load_weights<NV, true, TABLE_DTYPE>(gws, sc, ENGINE ? nullptr : so, pc, wnorm, wquant, h * D, wv);
    ready_weights<NV>(wpreload, TABLE_DTYPE ? TABLE_DTYPE : gws.dtype, P.gamma_offset, norm, wquant, lw);
  }
  // ENGINE: the mean's 1 / D (an IEEE division) readied before the wait, off the
  // normalization's critical path
  float rDh = 0.0f;
  if (ENGINE) {
    rDh = 1.0f / (float)D;
    asm volatile("" : "+f"(rDh));
  }
  grid_dependency_wait();

  // 1. every independent load at once
  uint4 raw[VP * NV];
#pragma unroll
  for (int p = 0; p < VP * NV; p++)
    raw[p] = act ? ld_stream(in + 8 * wv[p / VP] + 4 * (p % VP)) : make_uint4(0, 0, 0, 0);
  const token_ix ix = load_token_ix<true, ENGINE>(P, &params.batch_div, t);
  float ws[I32 ? N : 1], as = 1.0f; /* I32: the lane's weight scales, the token's act_scale */
  if constexpr (I32) {
#pragma unroll
    for (int p = 0; p < 2 * NV; p++) {
      const float4 w = act ? __ldg(reinterpret_cast<const float4 *>(wsc + 8 * wv[p / 2] + 4 * (p % 2)))
                           : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      ws[4 * p] = w.x, ws[4 * p + 1] = w.y, ws[4 * p + 2] = w.z, ws[4 * p + 3] = w.w;
    }
    if (live && P.act_scale) as = __ldg(P.act_scale + t);
  }
  const bool qq = kind == 0 && q_quant_of<ENGINE>(P) && act; /* a quantized q: its scale */
  const float q_scale = qq ? __ldg(P.q_scale) : 1.0f;
  const weights_raw<NV> wraw =
      PRELOAD ? load_weights<NV, false, TABLE_DTYPE>(gws, sc, ENGINE ? nullptr : so, pc, wnorm, wquant, h * D, wv)
              : weights_raw<NV>{};
  table_raw graw[NV] = {}, sraw[NV] = {}, oraw[NV] = {}; /* !PRELOAD */
  /* !PRELOAD: gws's twin, declared here, not above: the non-PRELOAD
     kernels' code depends on its place */
  const qf_cu_vec &gw = kind == 0 ? P.q_gamma : P.k_gamma;
  if (!PRELOAD && norm && act) {
#pragma unroll
    for (int v = 0; v < NV; v++) graw[v] = ld_table<8>(gw.data, TABLE_DTYPE ? TABLE_DTYPE : gw.dtype, 8 * wv[v]);
  }
  if (!PRELOAD && quant && act) {
#pragma unroll
    for (int v = 0; v < NV; v++) {
      const int ch = h * D + 8 * wv[v];
      if (pc) {
        sraw[v] = ld_table<8>(sc, QKVFUSE_DTYPE_FLOAT32, ch);
        if (!ENGINE && so) oraw[v] = ld_table<8>(so, QKVFUSE_DTYPE_FLOAT32, ch);
      } else {
        const uint32_t s0 = __float_as_uint(__ldg(sc)), o0 = !ENGINE && so ? __float_as_uint(__ldg(so)) : 0u;
        sraw[v].a = sraw[v].b = make_uint4(s0, s0, s0, s0);
        oraw[v].a = oraw[v].b = make_uint4(o0, o0, o0, o0);
      }
    }
  }

  // 2. cos/sin: issued as soon as the position is in (and in range: the
  // slot's check and page come after, during their round trip; a token with a
  // bad slot writes nothing either way); NV = 1: converted after the
  // normalization
  const bool pos_ok = !has_positions(ENGINE, P) || (ix.pos >= 0 && ix.pos < P.max_pos);
  const bool rope = kind < 2 && R > 0 && pos_ok && act && rot;
  const int pos = (int)ix.pos; /* < max_pos <= 2^31 when used */
  float cs[COS_SIN_VECS][8];
  vec_cs_raw csraw = {};
  if constexpr (NV == 1)
    csraw = vec_cs_load<INTERLEAVED, COS_SIN_ROWS, CS_DTYPE>(P, t, pos, wv[0], rope);
  else
    load_cos_sin<INTERLEAVED, COS_SIN_ROWS, CS_DTYPE>(P, t, pos, lv, rope, cs);

  // 3. the token: position and cache destination checked; the norm weights,
  // the scales
  const token_dest td =
      check_token<true, ENGINE>(P, &params.page_div, &params.batch_div, t, ix, kind, live,
                                [&] { return kind == 0 && h == 0 && lane == 0; });
  bool ok = td.ok;
  bool wbad = false; /* I32: a weight scale of the lane is not finite */
  if constexpr (I32) {
    if (live && !isfinite(as)) {
      ok = false;
      if (kind == 0 && h == 0 && lane == 0) report(P, QKVFUSE_DATA_ERROR_SCALE);
    }
#pragma unroll
    for (int k = 0; k < N; k++) wbad |= act && !isfinite(ws[k]);
    if (wbad && t == 0) report(P, QKVFUSE_DATA_ERROR_SCALE);
  }
  float g[N], r[N], of[N]; /* !PRELOAD */
  bool bad = false;
  if (PRELOAD) {
    if (!preload || !same_weights<NV>(wraw, wpreload))
      ready_weights<NV>(wraw, TABLE_DTYPE ? TABLE_DTYPE : gws.dtype, P.gamma_offset, norm, wquant, lw);
    if (lw.bad) report(P, QKVFUSE_DATA_ERROR_SCALE);
  } else {
    if (norm) {
#pragma unroll
      for (int v = 0; v < NV; v++) cvt_table<8>(graw[v], TABLE_DTYPE ? TABLE_DTYPE : gw.dtype, g + 8 * v);
      if (P.gamma_offset) {
#pragma unroll
        for (int k = 0; k < N; k++) g[k] += 1.0f;
      }
    }
    if (quant && act) {
#pragma unroll
      for (int v = 0; v < NV; v++) {
        cvt_table<8>(sraw[v], QKVFUSE_DTYPE_FLOAT32, r + 8 * v);
        cvt_table<8>(oraw[v], QKVFUSE_DTYPE_FLOAT32, of + 8 * v);
      }
      bad = ready_scales<N>(r, of);
      if (bad) report(P, QKVFUSE_DATA_ERROR_SCALE);
    }
  }
  const float(&gk)[N] = PRELOAD ? lw.g : g, (&rk)[N] = PRELOAD ? lw.r : r, (&ofk)[N] = PRELOAD ? lw.of : of;
  // a bad scale of any lane skips the head's cache row (the group's lanes)
  const unsigned gmask = (L == 32 ? 0xffffffffu : (1u << L) - 1u) << (threadIdx.x & 31 & ~(L - 1));
  const bool gbad = (__ballot_sync(0xffffffffu, PRELOAD ? lw.bad : bad) & gmask) != 0;
  // I32: a bad weight scale of any lane drops the head
  const bool hbad = I32 && (__ballot_sync(0xffffffffu, wbad) & gmask) != 0;

  // 4. the head: normalized over the group, rotated
  float x[N];
  if constexpr (I32)
    dequant<N>(raw, ws, as, x);
  if constexpr (NV == 1) {
    if constexpr (!I32) unpack8<T>(raw[0], x);
    if (norm) {
      float s2[2] = {0.0f, 0.0f}; /* two chains: latency */
#pragma unroll
      for (int k = 0; k < 8; k++) s2[k & 1] = fmaf(x[k], x[k], s2[k & 1]);
      const float inv = rsqrtf(fmaf(group_sum<L>(s2[0] + s2[1]), ENGINE ? rDh : 1.0f / (float)D, P.eps));
#pragma unroll
      for (int k = 0; k < 8; k++) x[k] = x[k] * inv * gk[k];
    }
    float c[8], s[8];
    vec_cs_get<INTERLEAVED, COS_SIN_ROWS, CS_DTYPE>(P, csraw, pos, wv[0], rope, c, s);
    if (!INTERLEAVED && kind < 2 && R > 0) { /* uniform per block: the partners' values by shuffles */
      const int hv = R >> 4, src = rot && act ? (wv[0] < hv ? lane + hv : lane - hv) : lane;
      float xp[8];
#pragma unroll
      for (int k = 0; k < 8; k++) xp[k] = __shfl_sync(0xffffffffu, x[k], src, L);
      if (rope) {
#pragma unroll
        for (int k = 0; k < 8; k++) x[k] = fmaf(x[k], c[k], xp[k] * s[k]);
      }
    } else if (INTERLEAVED && rope) {
      rotate_pairs8(x, c, s);
    }
  } else if constexpr (I32) {
    norm_rope_values<L, INTERLEAVED, COS_SIN_VECS>(norm, gk, 1.0f / (float)D, P.eps, rope, cs, lv, x);
  } else {
    norm_rope<T, L, INTERLEAVED, COS_SIN_VECS>(raw[0], raw[NV - 1], norm, gk, ENGINE ? rDh : 1.0f / (float)D, P.eps,
                                               rope, cs, lv, x);
  }
  // a quantized q: its scale's reciprocal; a bad one is reported by the
  // first q group of token 0, and no q is written
  float q_r = q_scale;
  if (qq && ready_scale(q_r)) {
    if (t == 0 && h == 0 && lane == 0) report(P, QKVFUSE_DATA_ERROR_SCALE);
    return;
  }
  if (!(ok && act) || hbad) return;
  const qf_cu_mat &out = kind == 0 ? P.q_out : (kind == 1 ? P.k_out : P.v_out);
  store_head<T, NV, ENGINE>(out, C, C.quant != QKVFUSE_QUANT_NONE, true, kind > 0 && td.dest && C.data, t, td.row0, h,
                            D, wv, x, lane_scales<NV>{rk, ofk, gbad}, false,
                            out_quant{qq ? q_quant_of<ENGINE>(P) : 0, qq ? q_r : 0.0f});
#else
  __trap();
#endif
}

}  // namespace qf

#endif  // QKVFUSE_CUDA_DECODE_CUH
