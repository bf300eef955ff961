// SPDX-License-Identifier: Apache-2.0
// The streaming kernel's prefill form (streaming.cuh: the kernel, its
// forms and lane layout).
#ifndef QKVFUSE_CUDA_PREFILL_CUH
#define QKVFUSE_CUDA_PREFILL_CUH

#include "cuda/schedule.h"
#include "cuda/streaming.cuh"

namespace qf {

// The prefill form stages its rows in shared memory with asynchronous
// copies (cp.async, sm_80 and later), kPrefillStages units deep per block, so
// the next unit's rows stream in while the current one is computed; the
// copies carry an L2 evict-first policy and ask for 256-byte fetches, like
// ld_stream. A thread reads back the vectors it copied itself, so
// cp.async.wait_group is the only synchronization they need, except in the
// v items of a quantized cache (prefill_kernel: v_adjacent), whose lanes read their
// group's copies after a warp barrier. Two stages of four heads take 32 KB
// (plus a quantized cache's scale table); a third would pass the 48 KB of
// dynamic shared memory a launch gets without opting in and leave room for
// four blocks per multiprocessor, not five.
constexpr int kPrefillStages = 2;

// A block's table fill ends here: `mine` (bit i: this thread read a bad
// value of the item's head i) reported, then OR-ed over the block, one
// barrier per head, after which every thread may read the table.
__device__ __forceinline__ unsigned head_votes(const qf_cu_problem &P, unsigned mine) {
  if (mine) report(P, QKVFUSE_DATA_ERROR_SCALE);
  unsigned bad = 0;
#pragma unroll
  for (int i = 0; i < kMaxHeadsPerItem; i++)
    if (__syncthreads_or((int)(mine >> i & 1u))) bad |= 1u << i;
  return bad;
}

// The prefill form's quantization table, in shared memory, built once per
// block for the block's item (nh heads of kind 1 k or 2 v, from head h0):
// reciprocal scales [nh * D], then (int8 asymmetric) offsets [nh * D], each
// head's D values in lane order: the 8 channels of vector u (8u .. 8u+7) as
// two quads at quad (2 s + half) data_lanes + o of the head (table_quad), o the lane
// that holds u and s its place (0: A, 1: B; lane_layout), so that a group's
// lanes read each quad of theirs as consecutive 16-byte pieces, free of
// bank conflicts (in channel order, lanes 32 bytes apart: 2-way conflicts
// at least). Returns bit i set when a scale or offset of head h0 + i is bad
// (each bad value read is reported); the block-wide votes are also the
// barrier after which every thread may read the table.
template <bool INTERLEAVED>
__device__ __forceinline__ int table_quad(int u, int data_lanes, int R, bool adj) {
  const int hr = R >> 4; /* neox: lanes below hr hold rotation pairs (u, u + hr) */
  int o, s;
  if (adj) { /* v_adjacent (neox only): lane o holds 2o and 2o + 1 */
    o = u >> 1, s = u & 1;
  } else if (INTERLEAVED || u < 2 * hr) {
    const int w = INTERLEAVED ? data_lanes : hr;
    s = u >= w, o = u - (s ? w : 0);
  } else {
    o = hr + ((u - 2 * hr) >> 1), s = (u - 2 * hr) & 1;
  }
  return 2 * s * data_lanes + o;
}

template <int ENGINE, bool INTERLEAVED>
__device__ __forceinline__ unsigned fill_qtable(const qf_cu_problem &P, float *tab, int kind, int h0, int nh,
                                                bool adj) {
  const int D = P.D, n = nh * D, data_lanes = D >> 4;
  const float *sc = kind == 1 ? P.k_scale : P.v_scale, *of = ENGINE ? nullptr : kind == 1 ? P.k_offset : P.v_offset;
  const bool pc = (kind == 1 ? P.k_scale_pc : P.v_scale_pc) != 0;
  const bool ph = (kind == 1 ? P.k_scale_ph : P.v_scale_ph) != 0; /* one per kv head */
  unsigned mine = 0;
  // groups of 8 channels (inside one head: D % 16 == 0), two per thread per
  // round, every load of a round issued before any is used
  for (int c0 = 8 * (int)threadIdx.x; c0 < n; c0 += 16 * (int)blockDim.x) {
    float s[2][8], o[2][8];
#pragma unroll
    for (int h = 0; h < 2; h++) {
      const int c = c0 + 8 * h * (int)blockDim.x;
      if (c >= n) continue;
      if (pc) {
        ld_floats<8>(sc, QKVFUSE_DTYPE_FLOAT32, h0 * D + c, s[h]);
        if (of) ld_floats<8>(of, QKVFUSE_DTYPE_FLOAT32, h0 * D + c, o[h]);
      } else { /* one scale (and offset) for the 8 channels: their head's, or the tensor's */
        const int si = ph ? h0 + c / D : 0;
        const float s0 = __ldg(sc + si), o0 = of ? __ldg(of + si) : 0.0f;
#pragma unroll
        for (int k = 0; k < 8; k++) s[h][k] = s0, o[h][k] = o0;
      }
      if (!of) {
#pragma unroll
        for (int k = 0; k < 8; k++) o[h][k] = 0.0f;
      }
    }
#pragma unroll
    for (int h = 0; h < 2; h++) {
      const int c = c0 + 8 * h * (int)blockDim.x;
      if (c >= n) continue;
      const int hi = c / D, at = hi * D + 4 * table_quad<INTERLEAVED>((c - hi * D) >> 3, data_lanes, P.R, adj);
      if (ready_scales<8>(s[h], o[h])) mine |= 1u << hi; /* s: now the reciprocals */
#pragma unroll
      for (int k = 0; k < 8; k++) {
        const int e = at + (k < 4 ? k : 4 * data_lanes + k - 4); /* the second quad data_lanes quads further */
        tab[e] = s[h][k];
        if (of) tab[n + e] = o[h][k];
      }
    }
  }
  return head_votes(P, mine);
}

// The prefill form's dequantization table (int32 input), in shared memory,
// built once per block: the weight_scale of the block's item (nh <= 2 heads
// of kind `kind` from head h0, at most 1024 values: two 16-byte pieces per
// thread) in channel order [nh * D] (16-byte aligned rows: eligible.cu). In
// two phases, so that the loads are in flight while the quantization table
// builds: load_wtable, then fill_wtable, which returns bit i set when a
// value of head h0 + i is not finite (each reported); its block-wide votes
// are also the barrier after which every thread may read the table.
struct wtable_raw {
  float4 w[2];
};

__device__ __forceinline__ wtable_raw load_wtable(const qf_cu_problem &P, int kind, int h0, int nh) {
  const int D = P.D, n = nh * D, first = kind == 0 ? 0 : kind == 1 ? P.Nq : P.Nq + P.Nkv;
  const float *ws = P.weight_scale + (int64_t)(first + h0) * D;
  wtable_raw r;
#pragma unroll
  for (int k = 0; k < 2; k++) {
    const int c = 4 * ((int)threadIdx.x + k * kStreamingBlock);
    r.w[k] = c < n ? __ldg(reinterpret_cast<const float4 *>(ws + c)) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  }
  return r;
}

__device__ __forceinline__ unsigned fill_wtable(const qf_cu_problem &P, const wtable_raw &r, float *tab, int nh) {
  const int D = P.D, n = nh * D;
  unsigned mine = 0;
#pragma unroll
  for (int k = 0; k < 2; k++) {
    const int c = 4 * ((int)threadIdx.x + k * kStreamingBlock);
    if (c >= n) continue;
    const float4 w = r.w[k];
    *reinterpret_cast<float4 *>(tab + c) = w;
    if (!(isfinite(w.x) && isfinite(w.y) && isfinite(w.z) && isfinite(w.w))) mine |= 1u << (c / D);
  }
  return head_votes(P, mine);
}

// 8 floats of the shared-memory table: two quads, at p and at p + qs.
__device__ __forceinline__ void ld_shared8(const float *p, int qs, float *o) {
  const float4 a = *reinterpret_cast<const float4 *>(p), b = *reinterpret_cast<const float4 *>(p + qs);
  o[0] = a.x, o[1] = a.y, o[2] = a.z, o[3] = a.w, o[4] = b.x, o[5] = b.y, o[6] = b.z, o[7] = b.w;
}

// The ENGINE prefill kernels' cos/sin of a lane for one token, as loaded from
// the cos_sin_cache (of dtype TDT: the input's type T or float32; cs_fetch,
// a run ahead: the run's first heads cover the round trip) and converted
// when the run starts (cs_ready), to the values load_cos_sin gives. neox:
// the cos and the sin of the lane's 8 pairs; interleaved: of vector A's 4
// pairs and of B's (16-bit: the halves x, y and z, w of c; float32: c.a and
// c.b).
template <int TDT>
struct cs_bits {
  uint4 c, s;
};
template <>
struct cs_bits<QKVFUSE_DTYPE_FLOAT32> {
  table_raw c, s;
};

// LATE: the position at is read only here (the empty asm keeps the compiler
// from moving that read ahead), clamped into the table; its range is checked
// with the token (check_token), so a bad position still writes nothing.
// Otherwise at is in the table (checked by the caller in rope).
template <int TDT, bool INTERLEAVED, bool LATE>
__device__ __forceinline__ cs_bits<TDT> cs_fetch(const qf_cu_problem &P, int64_t at, const lane_vecs &lv, bool rope) {
  constexpr bool F32 = TDT == QKVFUSE_DTYPE_FLOAT32;
  cs_bits<TDT> r = {};
  if (!rope) return r;
  if constexpr (LATE) asm volatile("" : "+l"(at));
  const int pos = (int)(!LATE || (uint64_t)at < (uint64_t)P.max_pos ? at : P.max_pos - 1);
  const qf_cu_mat &csc = P.cos_sin_cache;
  const int R = P.R;
  if constexpr (!INTERLEAVED) {
    const int64_t base = cos_at<false>(csc, pos, lv.a);
    if constexpr (F32) {
      r.c = ld_table<8>(csc.data, TDT, base);
      r.s = ld_table<8>(csc.data, TDT, base + (R >> 1));
    } else {
      r.c = ld_table<8>(csc.data, TDT, base).a;
      r.s = ld_table<8>(csc.data, TDT, base + (R >> 1)).a;
    }
  } else {
#pragma unroll
    for (int v = 0; v < 2; v++) {
      const int w = v ? lv.b : lv.a;
      if (8 * w >= R) continue;
      const int64_t base = cos_at<true>(csc, pos, w);
      const uint4 c = ld_table<4>(csc.data, TDT, base).a, sn = ld_table<4>(csc.data, TDT, base + (R >> 1)).a;
      if constexpr (F32) {
        if (v) r.c.b = c, r.s.b = sn;
        else r.c.a = c, r.s.a = sn;
      } else if (v) {
        r.c.z = c.x, r.c.w = c.y, r.s.z = sn.x, r.s.w = sn.y;
      } else {
        r.c.x = c.x, r.c.y = c.y, r.s.x = sn.x, r.s.y = sn.y;
      }
    }
  }
  return r;
}

template <typename T, int TDT, bool INTERLEAVED, int COS_SIN_VECS>
__device__ __forceinline__ void cs_ready(const cs_bits<TDT> &r, float (&cs)[COS_SIN_VECS][8]) {
  if constexpr (!INTERLEAVED) {
    if constexpr (TDT == QKVFUSE_DTYPE_FLOAT32) {
      cvt_table<8>(r.c, TDT, cs[0]);
      cvt_table<8>(r.s, TDT, cs[1]);
    } else {
      unpack8<T>(r.c, cs[0]);
      unpack8<T>(r.s, cs[1]);
    }
  } else {
    float c[8], sn[8];
    if constexpr (TDT == QKVFUSE_DTYPE_FLOAT32) {
      cvt_table<8>(r.c, TDT, c);
      cvt_table<8>(r.s, TDT, sn);
    } else {
      unpack8<T>(r.c, c);
      unpack8<T>(r.s, sn);
    }
#pragma unroll
    for (int v = 0; v < 2; v++)
#pragma unroll
      for (int k = 0; k < 8; k++) cs[2 * v][k] = c[4 * v + (k >> 1)], cs[2 * v + 1][k] = sn[4 * v + (k >> 1)];
  }
}

// The prefill form's scales: the block's shared-memory table (fill_qtable,
// lane order: the lane's vector v in quads 2v and 2v + 1 of its own).
struct table_scales {
  const float *rtab, *otab; /* the item's reciprocal scales and offsets, [nh * D] */
  int e0;                   /* the lane's first quad of the head: ch0 + 4 (its lane, less data_lanes past the head) */
  int qs;                   /* floats from one of the lane's quads to its next: 4 data_lanes */
  bool bad, offsets;        /* a scale or offset of the head is bad; int8 asymmetric */
  __device__ bool ok() const { return !bad; }
  __device__ void get(int v, float *r, float *of) const {
    const int e = e0 + 2 * v * qs;
    ld_shared8(rtab + e, qs, r);
    if (offsets) ld_shared8(otab + e, qs, of);
  }
};

// The append call's cache scale (one per cache, eligible.cu): its
// reciprocal for every channel, and whether it is bad (the cache rows are
// then skipped).
struct one_scale {
  float r;
  bool bad;
  __device__ bool ok() const { return !bad; }
  __device__ void get(int, float *rv, float *ov) const {
#pragma unroll
    for (int k = 0; k < 8; k++) rv[k] = r, ov[k] = 0.0f;
  }
};

// A scale every thread of the block reads (one line they share): its
// reciprocal and whether it is bad, reported by the block's first thread.
__device__ __forceinline__ one_scale block_scale(const qf_cu_problem &P, const float *p) {
  float s = __ldg(p);
  const bool bad = ready_scale(s);
  const one_scale r = {s, bad};
  if (r.bad && threadIdx.x == 0) report(P, QKVFUSE_DATA_ERROR_SCALE);
  return r;
}

// The prefill form. Block b owns an item (schedule.h: qf_cuda_schedule_block; its kind, heads, norm
// weights and quantization table are the block's for the whole launch) and
// walks its token runs (GPB tokens, one per group). The rows of the next
// run are copied into shared memory (cp.async) while the current run is
// computed, and the next run's position and slot are loaded ahead. COS_SIN_ROWS:
// cos/sin given per token at full length (COS_SIN source). ENGINE: kEngine (|
// kEngineQuant, | kEngineF32, | kEngineAppend; I32: | kEngineRows) or 0
// (what the kernel knows of its call). I32: int32 input (T: the outputs'
// type), dequantized as it leaves the stage: times the block's weight scales
// (fill_wtable) and the token's act_scale, loaded a run ahead; a token whose
// act_scale is not finite writes nothing, and neither does a head whose
// weight scales are not all finite.
template <typename T, int L, bool INTERLEAVED, bool COS_SIN_ROWS, int ENGINE, bool I32 = false>
__global__ void __launch_bounds__(kStreamingBlock, prefill_blocks_per_sm(ENGINE))
    prefill_kernel(const qf_cu_prefill_params params) {
#if QF_STREAMING_DEVICE_CODE
  const qf_cu_problem &P = params.problem;
  constexpr int GPB = prefill_groups_per_block(L), NH = max_heads_per_item(COS_SIN_ROWS || I32),
                COS_SIN_VECS = cos_sin_vecs(INTERLEAVED, COS_SIN_ROWS);
  static_assert(!ENGINE || COS_SIN_ROWS == ((ENGINE & kEngineRows) != 0), "ENGINE: cos/sin rows with kEngineRows only");
  using TIn = typename input_elem<T, I32>::type;
  constexpr int VP = I32 ? 4 : 2; /* 16-byte pieces of a lane's two vectors */
  constexpr int GAMMA_DTYPE = ENGINE ? h16<T>::dtype : 0; /* ENGINE: the norm weights' dtype (T) */
  constexpr int TABLE_DTYPE = engine_table_dtype<T>(ENGINE); /* ENGINE: the cos/sin table's dtype */
  /* ENGINE from a cos_sin_cache: a run's cos/sin fetched a run ahead (cs_fetch) */
  constexpr bool CS_AHEAD = ENGINE && !(ENGINE & kEngineRows);
  constexpr bool QUANT = (ENGINE & kEngineQuant) != 0; /* the kernel of a call with a quantized cache */
  constexpr bool APPEND = (ENGINE & kEngineAppend) != 0; /* FlashInfer's append call */
  static_assert(!APPEND || QUANT, "kEngineAppend: a quantized cache");
  // shared memory: the row stages [kPrefillStages][heads_per_item][VP][kStreamingBlock] (a
  // warp's vectors consecutive: no bank conflicts), then (I32) the item's
  // dequantization table, then its quantization table
  extern __shared__ __align__(16) uint4 smem[];
  const int D = P.D, R = P.R, data_lanes = D >> 4, heads_per_item = params.heads_per_item;
  const float rD = 1.0f / (float)D; /* mean of squares: a multiply, off the critical path */
  const group_lane gl = group_lane_of<L>(threadIdx.x);
  const int lane = gl.lane, grp = gl.grp;
  const bool idle = gl.idle; /* a lane in no group (L not a power of two) */
  const lane_vecs ll = lane_layout<INTERLEAVED>(lane, data_lanes, R);
  const qf_prefill_item it = qf_cuda_schedule_block<QUANT>(&params, blockIdx.x);
  const int kind = it.kind, h0 = it.h0, nh = it.nh;
  // v items of a quantized cache (params.v_adjacent; neox kernels): the lanes
  // copy vectors l and l + D/16 of each row into the stage (copy_vecs: whole
  // 16-byte pieces of a group's half row per copy) but take the adjacent
  // vectors 2l and 2l + 1 from it (lv; v has no rotation pairs), where other
  // lanes of the group copied them (a warp barrier after the wait and one
  // before the next copy), so that a lane's cache bytes are one 16-byte
  // store and a group's one run of whole sectors
  const bool v_adjacent = !I32 && !INTERLEAVED && kind == 2 && params.v_adjacent;
  const int lr = lane < data_lanes ? lane : lane - data_lanes;
  const lane_vecs copy_vecs = v_adjacent ? lane_vecs{lr, lr + data_lanes, false, false} : ll;
  const lane_vecs lv = v_adjacent ? lane_vecs{2 * lr, 2 * lr + 1, false, false} : copy_vecs;
  // where a lane takes 16-byte piece u of a row that other lanes copied:
  // lane u % data_lanes of the group copied it into its entry u / data_lanes
  // (the offset from the lane's own entry)
  auto copied_at = [&](int u) { return u % data_lanes - lane + u / data_lanes * kStreamingBlock; };
  // the stage entries of lv's vectors (v_adjacent: copied by other lanes)
  const int sa = v_adjacent ? copied_at(2 * lr) : 0;
  const int sb = v_adjacent ? copied_at(2 * lr + 1) : kStreamingBlock;
  // I32: a head's row is 4 data_lanes 16-byte pieces; the lanes copy pieces
  // p data_lanes + lane (p = 0..3: each copy a contiguous run of the row,
  // every sector fetched once) and take their vectors' pieces 2a, 2a + 1,
  // 2b, 2b + 1 from the lanes that copied them, after a warp barrier
  int si[4] = {0, 0, 0, 0};
  if constexpr (I32) {
#pragma unroll
    for (int k = 0; k < 4; k++) si[k] = copied_at(2 * (k < 2 ? lv.a : lv.b) + (k & 1));
  }
  const unsigned stride = it.stride, end = it.end;
  unsigned c = it.run;

  const TIn *rows = reinterpret_cast<const TIn *>(P.in[kind].data) + (int64_t)h0 * D;
  const int64_t ld = P.in[kind].ld;
  const qf_cu_mat &out = kind == 0 ? P.q_out : (kind == 1 ? P.k_out : P.v_out);
  const qf_cu_cache &C = kind == 1 ? P.k_cache : P.v_cache;
  const bool norm = norm_of(ENGINE, P, kind);
  const bool quant = kind > 0 && C.data && C.quant != QKVFUSE_QUANT_NONE;
  uint4 *const stage = smem + threadIdx.x;
  float *const wtab = reinterpret_cast<float *>(smem + kPrefillStages * heads_per_item * VP * kStreamingBlock);
  float *const qtab = wtab + (I32 ? heads_per_item * D : 0);
  const bool offsets = !ENGINE && C.quant == QKVFUSE_QUANT_INT8_ASYM;

  // the lane's vectors of run cc's token, copied into stage st (nothing
  // past the block's runs or the last token); one commit group per run
  // either way
  const uint64_t policy = evict_first_policy();
  auto issue = [&](unsigned cc, int st) {
    const int64_t t = (int64_t)cc * GPB + grp;
    if (!idle && cc < end && t < P.T && lane < data_lanes) {
      const TIn *in = rows + t * ld;
#pragma unroll
      for (int i = 0; i < NH; i++) {
        if (i >= nh) break;
        uint4 *sv = stage + (st * heads_per_item + i) * VP * kStreamingBlock;
        if constexpr (I32) { /* the row's chunks p data_lanes + lane (si above) */
#pragma unroll
          for (int p = 0; p < 4; p++)
            cp_async16(sv + p * kStreamingBlock, in + i * D + 4 * (p * data_lanes + lane), policy);
        } else {
          cp_async16(sv, in + i * D + 8 * copy_vecs.a, policy);
          cp_async16(sv + kStreamingBlock, in + i * D + 8 * copy_vecs.b, policy);
        }
      }
    }
    cp_async_commit();
  };

  // the first run's rows start their way to L2 while the previous kernel
  // finishes (I32: and its act_scale and cos/sin rows, read before the
  // first run can start)
  {
    const int64_t t = (int64_t)c * GPB + grp;
    if (!idle && t < P.T && lane < data_lanes) {
      const TIn *in = rows + t * ld;
      for (int i = 0; i < nh; i++) prefetch_l2(in + i * D + 8 * copy_vecs.a), prefetch_l2(in + i * D + 8 * copy_vecs.b);
      // CS_AHEAD: the run's positions (a line) and, in the run's first q
      // item, the cos/sin lines of each token's position as read now
      // (index_hint), so that the first run's cos/sin, which waits for its
      // position, finds both in L2
      if constexpr (CS_AHEAD) {
        if (kind < 2 && R > 0) {
          if (lane == 0 && grp == 0) prefetch_l2(index_at(P.positions.data, engine_pos_dtype(ENGINE), t));
          if (kind == 0 && h0 == 0 && (lv.rot_a || lv.rot_b)) {
            const int64_t hp = index_hint(P.positions.data, engine_pos_dtype(ENGINE), t);
            if (hp >= 0 && hp < P.max_pos) prefetch_cos_sin<INTERLEAVED, TABLE_DTYPE>(P, hp, lv);
          }
        }
      }
      if constexpr (I32) {
        if (lane == 0 && P.act_scale) prefetch_l2(P.act_scale + t);
        if (COS_SIN_ROWS && kind < 2 && R > 0) {
#pragma unroll
          for (int v = 0; v < 2; v++)
            if (v ? lv.rot_b : lv.rot_a) prefetch_cos_sin_rows(P, t, v ? lv.b : lv.a);
        }
      }
    }
  }
  // PT_RUNS: under a page table the loop walks the slots L runs at a time
  // (pt, below); the int32 kernels' load_token_ix walks each run's, a run
  // ahead (the lanes' slots would spill their registers). The first walk's
  // lines start their way too, a lane of group 0 for each of its runs: the
  // token entries (batch index, position: the run's GPB tokens in a line)
  // and the kv_indptr entries of the run's first and last token as their
  // batch indices read now choose them (index_hint)
  constexpr bool PT_RUNS = (!ENGINE || APPEND) && !I32;
  if (PT_RUNS && page_table_of(ENGINE, P) && threadIdx.x < L) {
    const uint64_t r = (uint64_t)c + (uint64_t)threadIdx.x * stride;
    const int64_t t0 = (int64_t)r * GPB, t1 = t0 + GPB - 1 < P.T ? t0 + GPB - 1 : P.T - 1;
    if (r < end && t0 < P.T) {
      const int64_t b0 = index_hint(P.pt.batch, P.pt.batch_dtype, t0);
      const int64_t b1 = index_hint(P.pt.batch, P.pt.batch_dtype, t1);
      prefetch_l2(index_at(P.pt.pos, P.pt.pos_dtype, t0));
      if (b0 >= 0 && b0 < P.pt.nseq) prefetch_l2(index_at(P.pt.indptr, P.pt.indptr_dtype, b0));
      if (b1 >= 0 && b1 < P.pt.nseq) prefetch_l2(index_at(P.pt.indptr, P.pt.indptr_dtype, b1 + 1));
    }
  }
  grid_dependency_wait();
  issue(c, 0);
  // POS32 (the append call's int32 positions): the next run's position kept
  // as loaded, from a token clamped into the call (no branch), and widened
  // where it is used, so that the wait for its load falls there: a 64-bit
  // value merged after a branch makes every warp wait for the next run's
  // position at the top of this run (next, the position and slot of the
  // other kernels, is then not loaded: under the page table the walk below
  // gives the slot)
  constexpr bool POS32 = engine_pos_dtype(ENGINE) == QKVFUSE_DTYPE_INT32;
  auto load_pos32 = [&](int64_t t) {
    return __ldg(static_cast<const int32_t *>(P.positions.data) + (t < P.T ? t : P.T - 1));
  };
  int32_t pos32 = 0;
  if constexpr (POS32) pos32 = load_pos32((int64_t)c * GPB + grp);
  token_ix next = {0, -1};
  if constexpr (!POS32) next = load_token_ix<false, ENGINE, !PT_RUNS>(P, nullptr, (int64_t)c * GPB + grp);
  // I32: the token's act_scale, loaded with its position and slot
  auto load_act_scale = [&](int64_t t) { return I32 && P.act_scale && t < P.T ? __ldg(P.act_scale + t) : 1.0f; };
  float as_next = load_act_scale((int64_t)c * GPB + grp);

  // per block: norm weights, quantization table
  float g[16];
  if (norm) load_gamma<GAMMA_DTYPE>(P, kind == 0 ? P.q_gamma : P.k_gamma, lv, g);
  wtable_raw wraw = {};
  if constexpr (I32) wraw = load_wtable(P, kind, h0, nh);
  // the append call reads its cache's one scale; the other calls build the
  // item's table
  const one_scale os = APPEND && quant ? block_scale(P, kind == 1 ? P.k_scale : P.v_scale) : one_scale{1.0f, false};
  const unsigned bad = quant && !APPEND ? fill_qtable<ENGINE, INTERLEAVED>(P, qtab, kind, h0, nh, v_adjacent) : 0u;
  const unsigned wbad = I32 ? fill_wtable(P, wraw, wtab, nh) : 0u;
  // a quantized q: its scale's reciprocal; a bad scale leaves the block's q
  // heads unwritten
  const one_scale qsc = kind == 0 && q_quant_of<ENGINE>(P) ? block_scale(P, P.q_scale) : one_scale{0.0f, false};
  const out_quant oq = {kind == 0 ? q_quant_of<ENGINE>(P) : 0, qsc.r};
  const bool q_bad = qsc.bad;
  // CS_AHEAD: the cos/sin of the lane's token in run cc, fetched a run ahead
  // (where it rotates: its position in the table; checked again with the
  // token when the run is computed). The compiler evaluates part of this
  // range check ahead of the first head, so every block, v's too, waits
  // there for the position loaded at the run's top. With a quantized
  // cache (QUANT) the position is read only after the first head,
  // clamped, its check left to the token (cs_fetch LATE), so that the wait
  // overlaps the first head. The other calls keep the early wait: without
  // it their v blocks gain less than their q and k blocks lose.
  auto fetch_cs = [&](unsigned cc, const token_ix &x) {
    const bool r = kind < 2 && R > 0 && !idle && lane < data_lanes && (lv.rot_a || lv.rot_b) && cc < end &&
                   (int64_t)cc * GPB + grp < P.T && (QUANT || (x.pos >= 0 && x.pos < P.max_pos));
    return cs_fetch<TABLE_DTYPE, INTERLEAVED, QUANT>(P, POS32 ? (int64_t)pos32 : x.pos, lv, r);
  };
  cs_bits<TABLE_DTYPE> csb = {};
  if constexpr (CS_AHEAD) csb = fetch_cs(c, next);
  // not ENGINE, from a cos_sin_cache: the next run's cos/sin lines into L2,
  // its position loaded at the top of this run (COS_SIN_ROWS: registers)
  auto prefetch_cs = [&](unsigned cc, const token_ix &x) {
    if (kind < 2 && R > 0 && !idle && lane < data_lanes && cc < end && (int64_t)cc * GPB + grp < P.T &&
        P.rope_source == QKVFUSE_ROPE_COS_SIN_CACHE && x.pos >= 0 && x.pos < P.max_pos)
      prefetch_cos_sin<INTERLEAVED>(P, x.pos, lv);
  };
  // under a page table (PT_RUNS): the slots of the group's token in the
  // block's runs n .. n + L - 1, lane j holding run n + j's, resolved every L
  // runs (page_table_slot), so that its chain of dependent loads stalls the
  // thread once per L runs, not every run; a run takes its slot by a
  // shuffle
  const bool pt = PT_RUNS && page_table_of(ENGINE, P);
  const int group_base = (int)(threadIdx.x & 31) - lane; /* the group's first lane in the warp */
  int64_t pt_slot = -1;
  unsigned n = 0; /* the block's runs done */

  for (int st = 0; c < end; c += stride, st ^= 1, n++) {
    const unsigned cn = c + stride;
    issue(cn, st ^ 1);
    token_ix ix = next;
    if constexpr (POS32) ix.pos = pos32, pos32 = load_pos32((int64_t)cn * GPB + grp);
    const float as = as_next;
    if (!POS32 && cn < end) {
      next = load_token_ix<false, ENGINE, !PT_RUNS>(P, nullptr, (int64_t)cn * GPB + grp);
      if constexpr (I32) as_next = load_act_scale((int64_t)cn * GPB + grp);
    }
    if (pt) {
      if (n % L == 0) {
        const uint64_t r = (uint64_t)c + (uint64_t)lane * stride; /* the lane's run */
        const int64_t tl = (int64_t)r * GPB + grp;
        pt_slot = !idle && r < end && tl < P.T ? page_table_slot<APPEND>(P.pt, tl) : -1;
      }
      ix.slot = __shfl_sync(0xffffffffu, pt_slot, group_base + (int)(n % L));
    }

    const int64_t t = (int64_t)c * GPB + grp;
    const bool live = !idle && t < P.T; /* the group has a token */
    const bool act = live && lane < data_lanes; /* the lane holds data */

    // the token: position and cache destination checked (reported by the
    // first q item's blocks: one per token)
    token_dest td = check_token<false, ENGINE>(P, nullptr, nullptr, t, ix, kind, live,
                                               [&] { return kind == 0 && h0 == 0 && lane == 0; });
    if constexpr (I32) {
      if (live && !isfinite(as)) {
        td.ok = false;
        if (kind == 0 && h0 == 0 && lane == 0) report(P, QKVFUSE_DATA_ERROR_SCALE);
      }
    }

    // cos/sin of the lane's elements
    const bool rope = kind < 2 && R > 0 && td.ok && act && (lv.rot_a || lv.rot_b);
    float cs[COS_SIN_VECS][8];
    if constexpr (CS_AHEAD)
      cs_ready<T, TABLE_DTYPE, INTERLEAVED, COS_SIN_VECS>(csb, cs);
    else
      load_cos_sin<INTERLEAVED, COS_SIN_ROWS, TABLE_DTYPE>(P, t, (int)ix.pos /* < max_pos <= 2^31 when used */, lv,
                                                           rope, cs);

    // the heads, from this run's stage
    cp_async_wait<1>();
    if (I32 || v_adjacent) __syncwarp(); /* the group's copies, for the lanes that take them */
    const bool to_cache = kind > 0 && td.dest && C.data;
#pragma unroll
    for (int i = 0; i < NH; i++) {
      if (i >= nh) break; /* uniform per block */
      const uint4 *sv = stage + (st * heads_per_item + i) * VP * kStreamingBlock;
      float x[16];
      if constexpr (I32) { /* x = input * weight_scale * act_scale */
        uint4 r[VP];
#pragma unroll
        for (int p = 0; p < VP; p++) r[p] = act ? sv[si[p]] : make_uint4(0, 0, 0, 0);
        float ws[16];
        ld_shared8(wtab + i * D + 8 * lv.a, 4, ws);
        ld_shared8(wtab + i * D + 8 * lv.b, 4, ws + 8);
        dequant<16>(r, ws, as, x);
        norm_rope_values<L, INTERLEAVED, COS_SIN_VECS>(norm, g, rD, P.eps, rope, cs, lv, x);
      } else {
        uint4 ra = make_uint4(0, 0, 0, 0), rb = ra;
        if (act) {
          ra = sv[sa];
          rb = sv[sb];
        }
        norm_rope<T, L, INTERLEAVED, COS_SIN_VECS>(ra, rb, norm, g, rD, P.eps, rope, cs, lv, x);
      }
      const int w[2] = {lv.a, lv.b};
      const bool write = td.ok && act && !q_bad && !(I32 && (wbad >> i & 1u));
      if constexpr (APPEND)
        store_head<T, 2, ENGINE, !INTERLEAVED>(out, C, quant, write, to_cache, t, td.row0, h0 + i, D, w, x, os,
                                               v_adjacent, oq);
      else
        store_head<T, 2, ENGINE, !INTERLEAVED>(out, C, quant, write, to_cache, t, td.row0, h0 + i, D, w, x,
                                               table_scales{qtab, qtab + nh * D, i * D + 4 * lr, 4 * data_lanes,
                                                            (bad >> i & 1u) != 0, offsets},
                                               v_adjacent, oq);
      if (i == 0) { /* the next run's cos/sin, its position loaded at the top of this one */
        if constexpr (CS_AHEAD)
          csb = fetch_cs(cn, next);
        else if constexpr (!COS_SIN_ROWS)
          prefetch_cs(cn, next);
      }
    }
    if (I32 || v_adjacent) __syncwarp(); /* read before the next copy into the stage */
  }
#else
  __trap();
#endif
}

}  // namespace qf

#endif  // QKVFUSE_CUDA_PREFILL_CUH
