// SPDX-License-Identifier: Apache-2.0
// The streaming kernel: the common case of the fused prologue compiled tight.
//
// When. 16-bit input (bf16 or fp16) with 16-byte aligned rows, outputs of the
// input's dtype or a quantized q (fp8), D a multiple of 16 in [32, 512], R a
// multiple of 16, caches of the input's dtype or int8/fp8 (e4m3, e5m2; scales
// per tensor, per kv head or per channel), RoPE tables readable as aligned
// vectors, no beta, not unfused-parity mode (the plan checks; general.cuh does
// the rest). Int32 input (dequantized by weight_scale and act_scale, no bias)
// likewise, computed in and written as its outputs' 16-bit type (each
// 8-element vector two 16-byte pieces of input).
//
// Work split, in two forms chosen per call (choose.cu: qf_cuda_choose).
// Prefill form (prefill_kernel): a group of L = prefill_lanes(D) lanes (D/16
// rounded up to a power of two, or 6 for D = 96) does one item, two 16-byte
// vectors per lane per head; an item is (token, up to 4 heads of one kind:
// q, k or v). The grid's first blocks are the resident ones: each keeps one
// item for the launch (kind, heads, norm weights in registers, the item's
// reciprocal cache scales in a shared-memory table) and walks that item's
// token runs (prefill_groups_per_block(L) tokens, one per group); where
// blocks walk enough runs, the last quarter of them (or a tenth: a quantized
// cache) goes to late blocks of one or two runs each, which the hardware
// starts as resident blocks end, so the multiprocessors that move bytes
// faster take more (schedule.h). The rows of the next run are copied into
// shared memory by cp.async while the current run is normalized, rotated and
// stored head by head; its position and slot are loaded a run ahead (under a
// page table the slots of L runs at once, one per lane), and once the
// current run's first head is stored its cos/sin (the engine call's kernels,
// ENGINE: cs_fetch) or, from a cos_sin_cache, its cos/sin lines into L2.
// Decode form (decode_kernel), for calls too small to fill the device with
// two heads per item: one (token, head) per group, one pass, every
// independent load (row, position, slot, norm weights, cache scales) issued
// at once, the scales read per lane (no table, no barrier); the smallest
// calls (D <= 256) with one 16-byte vector per lane (the shortest
// instruction chain: the call's latency), the others with two.
//
// Prefill lane layout. Lane l holds two vectors of 8 elements, A = [8a, 8a+8) and
// B = [8b, 8b+8): neox with R = D: a = l, b = l + D/16, so a rotation pair
// (i, i + R/2) sits in one lane; neox with R < D: lanes l < R/16 hold pairs
// (a = l, b = l + R/16), the others two unrotated vectors past R;
// interleaved: a = l, b = l + D/16, pairs (2i, 2i+1) inside a vector; v
// items of a quantized cache (neox kernels, v_adjacent): the lanes copy a = l,
// b = l + D/16 into the stage but compute a = 2l, b = 2l + 1 (one 16-byte
// cache store). Lanes past the head (D/16 <= l < L) take lane l - D/16's
// vectors: their reads stay inside the tables; they write nothing.
//
// Errors: a token whose position or slot is outside its table writes nothing
// and sets a bit of *error_flags; a head whose cache scale or offset is zero
// or not finite skips its cache row. Bad scales and offsets are reported by
// the blocks that build the quantization table (prefill) or by the groups of
// token 0 (decode): either way every head's are checked for T >= 1, so each
// bad value is reported, used or not.
#ifndef QKVFUSE_CUDA_STREAMING_CUH
#define QKVFUSE_CUDA_STREAMING_CUH

#include "cuda/backend.h"
#include "cuda/device/address.cuh"
#include "cuda/device/divide.cuh"
#include "cuda/device/elem.cuh"
#include "cuda/device/ptx.cuh"
#include "cuda/device/quantize.cuh"
#include "cuda/device/report.cuh"
#include "cuda/device/rope.cuh"
#include "cuda/device/vec16.cuh"
#include "cuda/params.h"
#include "cuda/state.h"

// The streaming kernels' device code exists for QF_CUDA_STREAMING_MIN_CC and
// later (their PTX needs sm_80); an older architecture's image holds a trap
// in each kernel's place, which the dispatch never launches there
// (state.h: qf_cuda_streaming).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < QF_CUDA_STREAMING_MIN_CC * 10
#define QF_STREAMING_DEVICE_CODE 0
#else
#define QF_STREAMING_DEVICE_CODE 1
#endif

namespace qf {

constexpr int kStreamingBlock = 128;
// What a kernel knows of its call at compile time (variant.h: engine; eligible.cu:
// qf_cuda_engine_call): ENGINE = 0, nothing: every dtype and layout is read from the
// parameters; kEngine: the call an inference engine makes: int64 positions into
// a cos_sin_cache of the input's dtype, norm weights of that dtype, and a
// cache, if any, that is paged with whole rows (slot_lin, a head's D
// channels contiguous), int64 slots, no int8 offsets and no e5m2; | kEngineCache: and
// the call has a cache; | kEngineQuant (prefill form): and the call writes a
// quantized cache; | kEngineF32: the cos_sin_cache is float32 (vLLM takes
// one; FlashInfer's and SGLang's RoPE take nothing else); | kEngineAppend
// (with kEngineF32): the call is FlashInfer's append instead
// (rope_quantize_fp8_append_paged_kv_cache): int32 positions, q written as
// fp8 e4m3, k and v through a page table into e4m3 caches (any paged
// layout) whose heads' D channels are contiguous, one scale per cache (its
// kernels read no scale table), and no norm (FlashInfer's
// call has none: its kernels hold no norm weights, so that they fit more
// blocks per multiprocessor); | kEngineNorm (with kEngineAppend): the same
// with a norm of q or k; | kEngineRows: the int32 call instead (I32,
// COS_SIN_ROWS): no positions, cos and sin given per token as rows of the
// outputs' dtype, norm weights of that dtype and a cache as the engine
// call's. Their branches on dtypes and layouts fold away.
constexpr int kEngine = 1, kEngineCache = 2, kEngineQuant = 4, kEngineAppend = 8, kEngineF32 = 16, kEngineRows = 32,
              kEngineNorm = 64;
// What an ENGINE kernel knows (0: read from the call): whether the call has
// positions and their dtype, the cos/sin table's dtype (T: the input's
// element, or the outputs' for int32 input) and whether a page table places
// the cache rows.
__device__ __forceinline__ bool has_positions(int e, const qf_cu_problem &P) {
  return e ? !(e & kEngineRows) : P.positions.data != nullptr;
}
__host__ __device__ constexpr int engine_pos_dtype(int e) {
  return !e ? 0 : (e & kEngineAppend) ? QKVFUSE_DTYPE_INT32 : QKVFUSE_DTYPE_INT64;
}
template <typename T>
__host__ __device__ constexpr int engine_table_dtype(int e) {
  return !e ? 0 : (e & kEngineF32) ? QKVFUSE_DTYPE_FLOAT32 : h16<T>::dtype;
}
__device__ __forceinline__ bool page_table_of(int e, const qf_cu_problem &P) {
  return e ? (e & kEngineAppend) != 0 : P.page_table != 0;
}
// Whether heads of kind (0 q, 1 k, 2 v) are normalized: never in the append
// call without kEngineNorm.
__device__ __forceinline__ bool norm_of(int e, const qf_cu_problem &P, int kind) {
  return (!(e & kEngineAppend) || (e & kEngineNorm)) && (kind == 0 ? P.q_norm : (kind == 1 && P.k_norm));
}
// The cache's quantizer an ENGINE kernel knows (0: the call's, `call`):
// int8 symmetric or e4m3; kEngineAppend: e4m3.
template <int E>
__device__ __forceinline__ int engine_cache_quant(int call) {
  return !E                               ? call
         : (E & kEngineAppend)            ? QKVFUSE_QUANT_FP8_E4M3
         : call == QKVFUSE_QUANT_FP8_E4M3 ? call
                                          : QKVFUSE_QUANT_INT8_SYM;
}
// q_out's quantizer a kernel knows (0: q_out of the outputs' dtype): the
// append call's e4m3, none in the other ENGINE calls, else the call's.
template <int E>
__device__ __forceinline__ int q_quant_of(const qf_cu_problem &P) {
  return (E & kEngineAppend) ? (int)QKVFUSE_QUANT_FP8_E4M3 : E ? 0 : P.q_quant;
}
// The kernel bits of each call qf_cuda_engine_call names (backend.h).
__host__ __device__ constexpr int engine_bits(qf_cuda_engine e) {
  return e == QF_CUDA_ENGINE_CALL       ? kEngine
         : e == QF_CUDA_ENGINE_CALL_F32 ? kEngine | kEngineF32
         : e == QF_CUDA_ENGINE_APPEND   ? kEngine | kEngineF32 | kEngineAppend
         : e == QF_CUDA_ENGINE_APPEND_NORM ? kEngine | kEngineF32 | kEngineAppend | kEngineNorm
         : e == QF_CUDA_ENGINE_DEQUANT  ? kEngine | kEngineRows
                                        : 0;
}
// The prefill form's resident blocks per multiprocessor (ENGINE: the
// kernel's bits): its launch bound and its grid. Its kernels that know the
// engine call with a 16-bit table fit five blocks in their registers
// without spills; the others (kEngineF32's too: float32 cos/sin held a run
// ahead; kEngineRows': int32 input) spill at five, so run four.
__host__ __device__ constexpr int prefill_blocks_per_sm(int engine) {
  return engine && !(engine & (kEngineF32 | kEngineRows)) ? 5 : 4;
}
// The two-vector decode form's resident blocks per multiprocessor, as its
// registers on sm_90 allow (ptxas: 71 for the append call's kernels without
// norm, 86 for the engine call's, 88-96 for the append call's with norm,
// 111-126 for the other 16-bit ones): how many of its blocks one wave holds
// (choose.cu). The narrow form's kernels of the same call fit at least as
// many (ptxas: 48-56 and 64-70 registers for the append call's without and
// with norm, 47-78 for the engine call's, 116-118 for the other 16-bit ones,
// 64-69 for the int32 call's, 92-96 for other int32 input), so the count
// bounds both forms' waves. A launch bound for the append call's kernels
// without norm (decode_min_blocks: they fit seven without spills); the
// others have none (one would change their code).
__host__ __device__ constexpr bool append_without_norm(int engine) {
  return (engine & kEngineAppend) && !(engine & kEngineNorm);
}
__host__ __device__ constexpr int decode_blocks_per_sm(int engine) {
  return append_without_norm(engine) ? 7 : engine ? 5 : 4;
}
__host__ __device__ constexpr int decode_min_blocks(int engine, int nv) {
  return nv == 2 && append_without_norm(engine) ? decode_blocks_per_sm(engine) : 0; /* 0: no bound */
}
constexpr int kMaxHeadsPerItem = 4; /* most heads per item (2 with per-token cos/sin: registers) */
__host__ __device__ constexpr int max_heads_per_item(bool sep) { return sep ? 2 : kMaxHeadsPerItem; }

__host__ __device__ constexpr int pow2_at_least(int n) { return n <= 1 ? 1 : 2 * pow2_at_least((n + 1) / 2); }

// The prefill form's lanes per group: D / 16 (two vectors per lane) where
// that count has its own instantiation although it is not a power of two
// (6: D = 96, five groups in 30 of a warp's 32 lanes, where 8-lane groups
// would leave a quarter of the lanes idle), else the next power of two.
__host__ __device__ constexpr int prefill_lanes(int D) { return D / 16 == 6 ? 6 : pow2_at_least(D / 16); }
// Groups per block: 32 / L per warp (L need not divide 32; the warp's
// remaining lanes are idle).
__host__ __device__ constexpr int prefill_groups_per_block(int L) { return kStreamingBlock / 32 * (32 / L); }
// The decode form's lanes per group with NV vectors per lane (decode_kernel):
// one (D <= 256; else 0: none) or two.
__host__ __device__ constexpr int decode_lanes(int D, int nv) {
  return nv == 1 ? (D > 256 ? 0 : pow2_at_least(D / 8)) : pow2_at_least(D / 16);
}

// The streaming kernel's input element: the 16-bit type T, or int32 (I32:
// T is then the outputs' type).
template <typename T, bool I32>
struct input_elem {
  using type = T;
};
template <typename T>
struct input_elem<T, true> {
  using type = int32_t;
};

// x = input * weight_scale * act_scale of n int32 values (I32), as loaded:
// n / 4 16-byte pieces.
template <int n>
__device__ __forceinline__ void dequant(const uint4 (&raw)[n / 4], const float (&ws)[n], float as, float (&x)[n]) {
  const int32_t *e = reinterpret_cast<const int32_t *>(raw);
#pragma unroll
  for (int k = 0; k < n; k++) x[k] = (float)e[k] * ws[k] * as;
}

// A token's raw position and slot (or contiguous start index): what the
// next work unit needs first, loaded one unit ahead. FIXED (the decode
// form): a contiguous token's batch by batch_div (div_by), which is
// otherwise not read (may be null). Under a page table (of the ENGINE
// kernels, kEngineAppend's only) the slot is page_table_slot's, a chain
// of three dependent loads: WALK, here; otherwise the caller's (x.slot -1
// until then: the prefill form resolves several runs' at once).
struct token_ix {
  int64_t pos, slot;
};

template <bool FIXED, int ENGINE = 0, bool WALK = true>
__device__ __forceinline__ token_ix load_token_ix(const qf_cu_problem &P, const qf_cu_div *batch_div, int64_t t) {
  token_ix x = {0, -1};
  if (t >= P.T) return x;
  if (has_positions(ENGINE, P))
    x.pos = ld_index(P.positions.data, ENGINE ? engine_pos_dtype(ENGINE) : P.positions.dtype, t);
  if (page_table_of(ENGINE, P)) {
    if (WALK) x.slot = page_table_slot<(ENGINE & kEngineAppend) != 0>(P.pt, t);
  } else if ((ENGINE & kEngineCache) || P.layout != QKVFUSE_CACHE_NONE) {
    const int64_t at = !ENGINE && P.layout == QKVFUSE_CACHE_CONTIGUOUS ? div_by<FIXED>(t, P.S, batch_div) : t;
    x.slot = ld_index(P.slot_mapping.data, ENGINE ? QKVFUSE_DTYPE_INT64 : P.slot_mapping.dtype, at);
  }
  return x;
}

// Entry i of an int32 / int64 index vector read before the grid dependency
// wait, as a hint only: the previous kernel may still be writing it, so the
// value (a relaxed load: a defined result either way) only chooses which
// lines to prefetch into L2 (a position: its cos/sin; a batch index: its
// kv_indptr entries); the entry used is read again after the wait.
__device__ __forceinline__ int64_t index_hint(const void *p, int dt, int64_t i) {
  if (dt == QKVFUSE_DTYPE_INT64) {
    long long v;
    asm volatile("ld.relaxed.gpu.global.s64 %0, [%1];" : "=l"(v) : "l"(static_cast<const long long *>(p) + i));
    return v;
  }
  int v;
  asm volatile("ld.relaxed.gpu.global.s32 %0, [%1];" : "=r"(v) : "l"(static_cast<const int32_t *>(p) + i));
  return v;
}

// The page-table walk's last step ahead of the wait (the append call's
// decode form): the kv_indices entry of kv position p's page prefetched
// into L2, lo = kv_indptr[b] and p read as hints (index_hint), so that the
// walk after the wait (page_table_slot) finds all three of its steps there.
// The entry is one qf_page_table_dest reads for those values: inside the
// table. page_div: the block size's divisor (div_by).
__device__ __forceinline__ void prefetch_page_entry(const qf_page_table &pt, int64_t lo, int64_t p,
                                                    const qf_cu_div *page_div) {
  if (lo < 0 || p < 0 || pt.block_size <= 0) return;
  const int64_t page = div_by<true>(p, pt.block_size, page_div);
  if (page < pt.nindices - lo) prefetch_l2(index_at(pt.indices, pt.indices_dtype, lo + page));
}

// A token's position and slot checked: ok is false if the group has no
// token (live false) or either is outside its table (reported where
// reporter() is true: one lane per token); dest says whether the token has a
// cache row (kind 1 k or 2 v and a slot other than -1) and row0 is its
// element offset in that cache. The slot's range check is one unsigned
// compare (slot_lim: params.cu), and a cache of whole rows (slot_lin) places
// slot s at s * s_row without a division: both shorten the decode form's
// critical path. The position's check stays two signed compares (here and
// for the decode form's rope flag): they tell the compiler the position is
// not negative, which one unsigned compare does not. FIXED: the divisions
// by page_div and batch_div (div_by), which are otherwise not read (may be
// null). The reporter is a callable so that it is evaluated only on the
// error path.
struct token_dest {
  bool ok, dest;
  int64_t row0;
};

template <bool FIXED, int ENGINE = 0, typename Reporter>
__device__ __forceinline__ token_dest check_token(const qf_cu_problem &P, const qf_cu_div *page_div,
                                                  const qf_cu_div *batch_div, int64_t t, const token_ix &ix, int kind,
                                                  bool live, const Reporter &reporter) {
  token_dest d = {live, false, 0};
  if (live && has_positions(ENGINE, P) && (ix.pos < 0 || ix.pos >= P.max_pos)) {
    d.ok = false;
    if (reporter()) report(P, QKVFUSE_DATA_ERROR_POSITION);
  }
  if (live && ((ENGINE & kEngineCache) || P.layout != QKVFUSE_CACHE_NONE) && ix.slot != -1) {
    if ((uint64_t)ix.slot >= (uint64_t)P.slot_lim) {
      d.ok = false;
      if (reporter()) report(P, QKVFUSE_DATA_ERROR_SLOT);
    } else if (kind > 0) {
      const qf_cu_cache &CC = kind == 1 ? P.k_cache : P.v_cache;
      int64_t blk, row;
      if ((ENGINE && !(ENGINE & kEngineAppend)) || P.slot_lin) {
        blk = 0, row = ix.slot;
      } else if (!ENGINE && P.layout == QKVFUSE_CACHE_CONTIGUOUS) {
        blk = div_by<FIXED>(t, P.S, batch_div), row = ix.slot + (t - blk * P.S);
      } else {
        blk = div_by<FIXED>(ix.slot, CC.block_size, page_div), row = ix.slot - blk * CC.block_size;
      }
      d.dest = true, d.row0 = cache_row(CC, blk, row);
    }
  }
  return d;
}

// A thread's lane in its group and its group in the block. L a power of two:
// consecutive L-thread groups. Otherwise a warp holds 32 / L groups from its
// lane 0, and its last 32 % L lanes are idle (no token; lane numbers that
// keep their table reads in bounds).
struct group_lane {
  int lane, grp;
  bool idle;
};

template <int L>
__device__ __forceinline__ group_lane group_lane_of(int tid) {
  if ((L & (L - 1)) == 0) return group_lane{tid & (L - 1), tid / L, false};
  const int u = tid & 31, gi = u / L;
  return group_lane{u - gi * L, (tid >> 5) * (32 / L) + gi, gi >= 32 / L};
}

// The sum of v over the calling lane's group of L lanes, bit-identical on
// every lane of the group (every lane of the warp calls it: shuffles). L = P2
// * M (P2 a power of two, M odd): a butterfly inside each aligned P2 lanes,
// then the M partial sums added in one order.
template <int L>
__device__ __forceinline__ float group_sum(float v) {
  if ((L & (L - 1)) == 0) {
#pragma unroll
    for (int off = L >> 1; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off, L);
    return v;
  }
  constexpr int P2 = L & -L, M = L / P2;
#pragma unroll
  for (int off = P2 >> 1; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  const int base = (int)(threadIdx.x & 31) / L * L; /* idle lanes: sources past 31 wrap (harmless) */
  float s = __shfl_sync(0xffffffffu, v, base);
#pragma unroll
  for (int j = 1; j < M; j++) s += __shfl_sync(0xffffffffu, v, base + j * P2);
  return s;
}

// The lane's two vectors (A = [8a, 8a+8), B = [8b, 8b+8), see "Lane layout")
// and whether it rotates each.
struct lane_vecs {
  int a, b;
  bool rot_a, rot_b;
};

template <bool INTERLEAVED>
__device__ __forceinline__ lane_vecs lane_layout(int lane, int data_lanes, int R) {
  lane_vecs v;
  if (lane >= data_lanes)
    lane -= data_lanes; /* past the head (D < 16 L; L < 2 data_lanes): a lane's vectors, read, never written */
  if (INTERLEAVED) {
    v.a = lane, v.b = lane + data_lanes;
    v.rot_a = 8 * v.a < R, v.rot_b = 8 * v.b < R;
  } else if (lane < (R >> 4)) {
    v.a = lane, v.b = lane + (R >> 4);
    v.rot_a = v.rot_b = true;
  } else {
    v.a = (R >> 3) + 2 * (lane - (R >> 4)), v.b = v.a + 1;
    v.rot_a = v.rot_b = false;
  }
  return v;
}

// cos/sin vectors a lane keeps: cos A, sin A (, cos B, sin B: interleaved
// pairs, or COS_SIN_ROWS: cos/sin given per token at full length, so a neox lane's two
// halves have their own; otherwise B shares A's).
__host__ __device__ constexpr int cos_sin_vecs(bool inter, bool sep) { return inter || sep ? 4 : 2; }

// The norm weights of the lane's 16 elements ((1 + g) with gamma_offset).
// GAMMA_DTYPE: their dtype, known at compile time (else 0: gw's).
template <int GAMMA_DTYPE = 0>
__device__ __forceinline__ void load_gamma(const qf_cu_problem &P, const qf_cu_vec &gw, const lane_vecs &lv,
                                           float (&g)[16]) {
  const int gdt = GAMMA_DTYPE ? GAMMA_DTYPE : gw.dtype;
  table_raw raw[2]; /* both loads in flight before either converts */
  raw[0] = ld_table<8>(gw.data, gdt, 8 * lv.a);
  raw[1] = ld_table<8>(gw.data, gdt, 8 * lv.b);
  cvt_table<8>(raw[0], gdt, g);
  cvt_table<8>(raw[1], gdt, g + 8);
  if (P.gamma_offset) {
#pragma unroll
    for (int k = 0; k < 16; k++) g[k] += 1.0f;
  }
}

// The element of a cos/sin cache row (position pos) holding the cos of the
// pairs of vector w, a rotated one: neox, its 8 pairs 8w .. 8w+7 (w < R/16);
// interleaved, its 4 pairs 4w .. 4w+3. The sin is R/2 further.
template <bool INTERLEAVED>
__device__ __forceinline__ int64_t cos_at(const qf_cu_mat &csc, int64_t pos, int w) {
  return pos * csc.ld + (INTERLEAVED ? 4 * w : 8 * w);
}

// The lines of token t's own cos and sin (COS_SIN_ROWS) of vector w into
// L2: they need no position, so they are fetched before the grid wait.
__device__ __forceinline__ void prefetch_cos_sin_rows(const qf_cu_problem &P, int64_t t, int w) {
  prefetch_l2(elem_at(P.cos.data, P.cos.dtype, t * P.cos.ld + 8 * w));
  prefetch_l2(elem_at(P.sin.data, P.sin.dtype, t * P.sin.ld + 8 * w));
}

// The lines of the cos_sin_cache row at position pos that load_cos_sin
// reads for the lane's rotated vectors, into L2: the prefill form's kernels
// that load them as a run starts (not ENGINE) prefetch the next run's; the
// decode form's lead and the prefill form's first q item (CS_AHEAD) those
// of the position hint read before the grid dependency wait.
// COS_SIN_DTYPE: as load_cos_sin's.
template <bool INTERLEAVED, int COS_SIN_DTYPE = 0>
__device__ __forceinline__ void prefetch_cos_sin(const qf_cu_problem &P, int64_t pos, const lane_vecs &lv) {
  const qf_cu_mat &csc = P.cos_sin_cache;
  const int csdt = COS_SIN_DTYPE ? COS_SIN_DTYPE : csc.dtype;
#pragma unroll
  for (int v = 0; v < (INTERLEAVED ? 2 : 1); v++) { /* neox: one row serves both vectors */
    if (!(v ? lv.rot_b : lv.rot_a)) continue;
    const int64_t e = cos_at<INTERLEAVED>(csc, pos, v ? lv.b : lv.a);
    prefetch_l2(elem_at(csc.data, csdt, e));
    prefetch_l2(elem_at(csc.data, csdt, e + (P.R >> 1)));
  }
}

// cos/sin of the lane's rotated elements for token t at position pos (when
// rope: the token is valid and the lane rotates). COS_SIN_DTYPE: the call's
// cos_sin_cache dtype, or with COS_SIN_ROWS its cos and sin rows', known at
// compile time (else 0: read).
template <bool INTERLEAVED, bool COS_SIN_ROWS, int COS_SIN_DTYPE = 0>
__device__ __forceinline__ void load_cos_sin(const qf_cu_problem &P, int64_t t, int pos, const lane_vecs &lv, bool rope,
                                             float (&cs)[cos_sin_vecs(INTERLEAVED, COS_SIN_ROWS)][8]) {
  constexpr int COS_SIN_VECS = cos_sin_vecs(INTERLEAVED, COS_SIN_ROWS);
  const int R = P.R;
  const bool cache_src = COS_SIN_DTYPE || P.rope_source == QKVFUSE_ROPE_COS_SIN_CACHE;
  const qf_cu_mat &csc = P.cos_sin_cache;
  const int csdt = COS_SIN_DTYPE ? COS_SIN_DTYPE : csc.dtype;
  if (rope && (COS_SIN_ROWS || cache_src)) {
    // tables, one (cos, sin) pair per lane vector, the loads of a pair
    // before their conversion (registers allow no more): COS_SIN_ROWS (COS_SIN, as
    // given) for the rotated vectors; a neox cache row serves both vectors
#pragma unroll
    for (int v = 0; v < (COS_SIN_ROWS || INTERLEAVED ? 2 : 1); v++) {
      const int w = v ? lv.b : lv.a;
      if (COS_SIN_ROWS ? !(v ? lv.rot_b : lv.rot_a) : (INTERLEAVED && 8 * w >= R)) continue;
      table_raw c2[2];
      if (COS_SIN_ROWS) {
        const int cdt = COS_SIN_DTYPE ? COS_SIN_DTYPE : P.cos.dtype, sdt = COS_SIN_DTYPE ? COS_SIN_DTYPE : P.sin.dtype;
        c2[0] = ld_table<8>(P.cos.data, cdt, t * P.cos.ld + 8 * w);
        c2[1] = ld_table<8>(P.sin.data, sdt, t * P.sin.ld + 8 * w);
        cvt_table<8>(c2[0], cdt, cs[2 * v]);
        cvt_table<8>(c2[1], sdt, cs[2 * v + 1]);
      } else if (!INTERLEAVED) { /* pairs 8a .. 8a+7 */
        const int64_t base = cos_at<false>(csc, pos, lv.a);
        c2[0] = ld_table<8>(csc.data, csdt, base);
        c2[1] = ld_table<8>(csc.data, csdt, base + (R >> 1));
        cvt_table<8>(c2[0], csdt, cs[0]);
        cvt_table<8>(c2[1], csdt, cs[1]);
      } else { /* vector w holds pairs 4w .. 4w+3 */
        const int64_t base = cos_at<true>(csc, pos, w);
        c2[0] = ld_table<4>(csc.data, csdt, base);
        c2[1] = ld_table<4>(csc.data, csdt, base + (R >> 1));
        float c[4], sn[4];
        cvt_table<4>(c2[0], csdt, c);
        cvt_table<4>(c2[1], csdt, sn);
#pragma unroll
        for (int k = 0; k < 8; k++) cs[2 * v][k] = c[k >> 1], cs[2 * v + 1][k] = sn[k >> 1];
      }
    }
  } else if (rope) { /* COMPUTED */
#pragma unroll
    for (int v = 0; v < COS_SIN_VECS / 2; v++) {
      const int w = v ? lv.b : lv.a;
      if (INTERLEAVED && 8 * w >= R) continue;
#pragma unroll
      for (int k = 0; k < 8; k += INTERLEAVED ? 2 : 1) {
        float c, sn;
        half_cos_sin(P, pos, INTERLEAVED ? (8 * w + k) >> 1 : 8 * w + k, c, sn);
        cs[2 * v][k] = c, cs[2 * v + 1][k] = sn;
        if (INTERLEAVED) cs[2 * v][k + 1] = c, cs[2 * v + 1][k + 1] = sn;
      }
    }
  }
}

// Interleaved RoPE of one vector: pairs (2i, 2i+1) by cos c and sin sn (per
// element; both elements of a pair carry the pair's).
__device__ __forceinline__ void rotate_pairs8(float *y, const float *c, const float *sn) {
#pragma unroll
  for (int k = 0; k < 8; k += 2) {
    const float a = y[k], b = y[k + 1];
    y[k] = fmaf(a, c[k], -b * sn[k]);
    y[k + 1] = fmaf(b, c[k + 1], a * sn[k + 1]);
  }
}

// One head of a lane: its 16 values (vectors A and B) RMS-normalized over
// the group's L lanes (every lane of the warp calls it: shuffles) and rotated.
template <int L, bool INTERLEAVED, int COS_SIN_VECS>
__device__ __forceinline__ void norm_rope_values(bool norm, const float (&g)[16], float rD, float eps, bool rope,
                                                 const float (&cs)[COS_SIN_VECS][8], const lane_vecs &lv,
                                                 float (&x)[16]) {
  if (norm) {
    float s4[4] = {0.0f, 0.0f, 0.0f, 0.0f}; /* four chains: latency */
#pragma unroll
    for (int k = 0; k < 16; k++) s4[k & 3] = fmaf(x[k], x[k], s4[k & 3]);
    const float ss = group_sum<L>((s4[0] + s4[1]) + (s4[2] + s4[3]));
    const float inv = rsqrtf(fmaf(ss, rD, eps));
#pragma unroll
    for (int k = 0; k < 16; k++) x[k] = x[k] * inv * g[k];
  }
  if (!rope) return;
  if (!INTERLEAVED) {
#pragma unroll
    for (int k = 0; k < 8; k++) {
      const float a = x[k], b = x[8 + k];
      x[k] = fmaf(a, cs[0][k], -b * cs[1][k]);
      x[8 + k] = fmaf(b, cs[COS_SIN_VECS - 2][k], a * cs[COS_SIN_VECS - 1][k]);
    }
  } else {
#pragma unroll
    for (int v = 0; v < 2; v++)
      if (v ? lv.rot_b : lv.rot_a) rotate_pairs8(x + 8 * v, cs[(2 * v) % COS_SIN_VECS], cs[(2 * v + 1) % COS_SIN_VECS]);
  }
}

// norm_rope_values on a head's two 16-bit input vectors, unpacked.
template <typename T, int L, bool INTERLEAVED, int COS_SIN_VECS>
__device__ __forceinline__ void norm_rope(const uint4 &ra, const uint4 &rb, bool norm, const float (&g)[16],
                                          float rD, float eps, bool rope, const float (&cs)[COS_SIN_VECS][8],
                                          const lane_vecs &lv, float (&x)[16]) {
  unpack8<T>(ra, x);
  unpack8<T>(rb, x + 8);
  norm_rope_values<L, INTERLEAVED, COS_SIN_VECS>(norm, g, rD, eps, rope, cs, lv, x);
}

// A quantized q output (of the ENGINE kernels, kEngineAppend's only: e4m3):
// q_out = fp8(q * r), r the reciprocal of *q_scale; mode 0: q_out of the
// input's dtype, or a k or v head.
struct out_quant {
  int mode;
  float r;
};

// Stores a lane's NV vectors (8 values each, vector v at element 8 w[v] of
// the head) of head kvh of token t (where `write`: the token is valid and the
// lane holds data): to `out` (if given; as oq.mode's fp8 bytes where it is
// set) and to the token's cache row
// (to_cache; row0 from check_token), quantized with the reciprocal scales and
// offsets of a Scales object: ok() false skips the row (a bad scale or offset
// of the head), get(v, r, of) gives vector v's (fetched per vector:
// registers); `quant`: the cache is quantized. RUNS (the neox prefill
// kernels): both vectors are quantized first, then stored as one 16-byte
// run where `run` (NV = 2, w[1] = w[0] + 1: v_adjacent) or as two pieces; the
// other kernels store each vector as soon as it is quantized. (The prefill
// loop passes `write` rather than skipping the call: skipping it spills.)
template <typename T, int NV, int ENGINE = 0, bool RUNS = false, typename Scales>
__device__ __forceinline__ void store_head(const qf_cu_mat &out, const qf_cu_cache &C, bool quant, bool write,
                                           bool to_cache, int64_t t, int64_t row0, int kvh, int D,
                                           const int (&w)[NV], const float (&x)[8 * NV], const Scales &scales,
                                           bool run = false, out_quant oq = {0, 0.0f}) {
  constexpr bool append = (ENGINE & kEngineAppend) != 0;
  if ((!ENGINE || append) && write && out.data && oq.mode) {
    uint8_t *o = static_cast<uint8_t *>(out.data) + t * out.ld + kvh * D;
    float r[8];
#pragma unroll
    for (int k = 0; k < 8; k++) r[k] = oq.r;
#pragma unroll
    for (int v = 0; v < NV; v++) /* fp8 reads no offsets: r stands in */
      st_stream(o + 8 * w[v], quantize_bytes8(append ? QKVFUSE_QUANT_FP8_E4M3 : oq.mode, x + 8 * v, r, r));
  } else if (write && out.data) {
    T *o = reinterpret_cast<T *>(out.data) + t * out.ld + kvh * D;
#pragma unroll
    for (int v = 0; v < NV; v++) st_stream(o + 8 * w[v], pack8<T>(x + 8 * v));
  }
  if (!(write && to_cache)) return;
  if (!quant) {
    T *c = reinterpret_cast<T *>(C.data);
#pragma unroll
    for (int v = 0; v < NV; v++) st_stream(c + cache_at<ENGINE>(C, row0, kvh, 8 * w[v], D), pack8<T>(x + 8 * v));
    return;
  }
  if (!scales.ok()) return;
  uint8_t *c = static_cast<uint8_t *>(C.data);
  /* ENGINE: no offsets (int8 symmetric or e4m3: engine_cache_quant; qm: computed in each loop) */
  if constexpr (RUNS) {
    uint2 q[NV];
#pragma unroll
    for (int v = 0; v < NV; v++) {
      float r[8], of[8];
      scales.get(v, r, of);
      const int qm = engine_cache_quant<ENGINE>(C.quant);
      q[v] = quantize_bytes8(qm, x + 8 * v, r, of);
    }
    if (NV == 2 && run) { /* w[1] = w[0] + 1 */
      st_stream(c + cache_at<ENGINE>(C, row0, kvh, 8 * w[0], D), make_uint4(q[0].x, q[0].y, q[NV - 1].x, q[NV - 1].y));
    } else {
#pragma unroll
      for (int v = 0; v < NV; v++) st_stream(c + cache_at<ENGINE>(C, row0, kvh, 8 * w[v], D), q[v]);
    }
  } else { /* each vector stored as soon as it is quantized (the scales fetched per vector: registers) */
#pragma unroll
    for (int v = 0; v < NV; v++) {
      float r[8], of[8];
      scales.get(v, r, of);
      const int qm = engine_cache_quant<ENGINE>(C.quant);
      st_stream(c + cache_at<ENGINE>(C, row0, kvh, 8 * w[v], D), quantize_bytes8(qm, x + 8 * v, r, of));
    }
  }
}

}  // namespace qf

#endif  // QKVFUSE_CUDA_STREAMING_CUH
