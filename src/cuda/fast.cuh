// SPDX-License-Identifier: Apache-2.0
// The streaming kernel: the common case of the fused prologue compiled tight.
//
// When. 16-bit input (bf16 or fp16) with 16-byte aligned rows, outputs of the
// input's dtype (q not quantized), D a multiple of 16 in [32, 512], R a
// multiple of 16, caches of the input's dtype or int8/fp8 (e4m3, e5m2; scales
// per tensor, per kv head or per channel), RoPE tables readable as aligned
// vectors, no beta, not unfused-parity mode (the plan checks; fused.cuh does
// the rest).
//
// Work split, in two forms chosen per call (backend.cu: fast_split).
// Prefill form (fast_kernel): a group of L = fast_lanes(D) lanes (D/16
// rounded up to a power of two, or 6 for D = 96) does one item, two 16-byte
// vectors per lane per head; an item is (token, up to 4 heads of one kind:
// q, k or v). The grid's first blocks are the resident ones: each keeps one
// item for the launch (kind, heads, norm weights in registers, the item's
// reciprocal cache scales in a shared-memory table) and walks that item's
// token chunks (fast_gpb(L) tokens, one per group); where blocks walk enough
// chunks, the last quarter of them (or a tenth: a quantized cache) goes to
// further blocks of one or two chunks each, which the hardware starts as
// resident blocks end, so the multiprocessors that move bytes faster take
// more (block_item). The rows of the next chunk are copied into shared
// memory by cp.async while the current chunk is normalized, rotated and
// stored head by head; its position
// and slot are loaded a chunk ahead, and (kernels that know their call, HOT)
// its cos/sin once the current chunk's first head is stored (cs_fetch).
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
// items of a quantized cache (neox kernels, vadj): the lanes copy a = l,
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
#ifndef QKVFUSE_CUDA_FAST_CUH
#define QKVFUSE_CUDA_FAST_CUH

#include "cuda/fused.cuh"
#include "cuda/launch_plan.h"

// The streaming kernels' device code exists for QF_CUDA_STREAMING_MIN_CC and
// later (their PTX needs sm_80); an older architecture's image holds a trap
// in each kernel's place, which the dispatch never launches there
// (backend.cu: qf_cuda_streaming).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < QF_CUDA_STREAMING_MIN_CC * 10
#define QF_FAST_DEVICE_CODE 0
#else
#define QF_FAST_DEVICE_CODE 1
#endif

namespace qf {

constexpr int kFastBlock = 128;
// What a kernel knows of its call at compile time (QF_FAST_HOT; backend.cu:
// fast_hot): HOT = 0, nothing: every dtype and layout is read from the
// parameters; kHot: the call an inference engine makes: int64 positions into
// a cos_sin_cache of the input's dtype, norm weights of that dtype, and a
// cache, if any, that is paged with whole rows (slot_lin, a head's D
// channels contiguous), int64 slots and no int8 offsets; | kHotCache: and
// the call has a cache; | kHotQuant (prefill form): and the call writes a
// quantized cache. Their branches on dtypes and layouts fold away.
constexpr int kHot = 1, kHotCache = 2, kHotQuant = 4;
// The prefill form's resident blocks per multiprocessor: its launch bound
// and its grid. Its kernels that know their call (HOT, below) fit five
// blocks in their registers without spills; the others spill at five, so
// run four.
__host__ __device__ constexpr int fast_blocks_per_sm(bool hot) { return hot ? 5 : 4; }
constexpr int kFastHeads = 4; /* most heads per item (2 with per-token cos/sin: registers) */
__host__ __device__ constexpr int fast_max_heads(bool sep) { return sep ? 2 : kFastHeads; }

__host__ __device__ constexpr int pow2_at_least(int n) { return n <= 1 ? 1 : 2 * pow2_at_least((n + 1) / 2); }

// The prefill form's lanes per group: D / 16 (two vectors per lane) where
// that count has its own instantiation although it is not a power of two
// (6: D = 96, five groups in 30 of a warp's 32 lanes, where 8-lane groups
// would leave a quarter of the lanes idle), else the next power of two.
__host__ __device__ constexpr int fast_lanes(int D) { return D / 16 == 6 ? 6 : pow2_at_least(D / 16); }
// Groups per block: 32 / L per warp (L need not divide 32; the warp's
// remaining lanes are idle).
__host__ __device__ constexpr int fast_gpb(int L) { return kFastBlock / 32 * (32 / L); }
// The decode form's lanes per group with NV vectors per lane (decode_kernel):
// one (D <= 256; else 0: none) or two.
__host__ __device__ constexpr int decode_lanes(int D, int nv) {
  return nv == 1 ? (D > 256 ? 0 : pow2_at_least(D / 8)) : pow2_at_least(D / 16);
}

// The input rows are read once and the outputs written once: streaming
// loads and stores (evict-first) keep them from displacing the tables and
// the next rows in L2. The loads ask L2 to fetch 256-byte blocks (a
// group's 8-lane half-row is 128 or 256 bytes). Volatile: never moved
// above the grid dependency wait.
__device__ __forceinline__ uint4 ld_stream(const void *p) {
  uint4 v;
  asm volatile("ld.global.cs.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}
template <typename V>
__device__ __forceinline__ void st_stream(void *p, V v) {
  __stcs(reinterpret_cast<V *>(p), v);
}

// The prefill form stages its rows in shared memory with asynchronous
// copies (cp.async, sm_80 and later), kFastStages units deep per block, so
// the next unit's rows stream in while the current one is computed; the
// copies carry an L2 evict-first policy and ask for 256-byte fetches, like
// ld_stream. A thread reads back the vectors it copied itself, so
// cp.async.wait_group is the only synchronization they need, except in the
// v items of a quantized cache (fast_kernel: vadj), whose lanes read their
// group's copies after a warp barrier. Two stages of four heads take 32 KB
// (plus a quantized cache's scale table); a third would pass the 48 KB of
// dynamic shared memory a launch gets without opting in and leave room for
// four blocks per multiprocessor, not five.
constexpr int kFastStages = 2;

__device__ __forceinline__ uint64_t evict_first_policy() {
  uint64_t p;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(p));
  return p;
}
__device__ __forceinline__ void cp_async16(void *dst, const void *src, uint64_t policy) {
  asm volatile("cp.async.cg.shared.global.L2::cache_hint.L2::256B [%0], [%1], 16, %2;" ::"r"(
                   (unsigned)__cvta_generic_to_shared(dst)),
               "l"(src), "l"(policy)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

// An L2 prefetch, issued before the grid dependency wait for inputs the
// previous kernel may still be writing: it returns no data, and L2 is the
// point of coherence of device memory, so the loads after the wait still see
// that kernel's writes; it only starts the DRAM fetch early.
__device__ __forceinline__ void prefetch_l2(const void *p) { asm volatile("prefetch.global.L2 [%0];" ::"l"(p)); }

// Two 16-bit values of a 32-bit word to and from float32.
template <typename T>
struct h16;
template <>
struct h16<__nv_bfloat16> {
  static constexpr int dtype = QKVFUSE_DTYPE_BFLOAT16;
  __device__ static void unpack(uint32_t w, float &lo, float &hi) {
    lo = __uint_as_float(w << 16);
    hi = __uint_as_float(w & 0xffff0000u);
  }
  __device__ static uint32_t pack(float lo, float hi) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t *>(&v);
  }
};
template <>
struct h16<__half> {
  static constexpr int dtype = QKVFUSE_DTYPE_FLOAT16;
  __device__ static void unpack(uint32_t w, float &lo, float &hi) {
    const float2 f = __half22float2(*reinterpret_cast<const __half2 *>(&w));
    lo = f.x;
    hi = f.y;
  }
  __device__ static uint32_t pack(float lo, float hi) {
    const __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t *>(&v);
  }
};

template <typename T>
__device__ __forceinline__ void unpack8(const uint4 &r, float *x) {
  h16<T>::unpack(r.x, x[0], x[1]);
  h16<T>::unpack(r.y, x[2], x[3]);
  h16<T>::unpack(r.z, x[4], x[5]);
  h16<T>::unpack(r.w, x[6], x[7]);
}

template <typename T>
__device__ __forceinline__ uint4 pack8(const float *x) {
  return make_uint4(h16<T>::pack(x[0], x[1]), h16<T>::pack(x[2], x[3]), h16<T>::pack(x[4], x[5]),
                    h16<T>::pack(x[6], x[7]));
}

// N (4 or 8) consecutive elements [i, i + N) of a float32 / bfloat16 / float16
// table, read in two phases: ld_table issues the aligned vector loads (the
// plan checks the alignment) and keeps the raw bits, cvt_table converts them
// to float32. An item issues the loads of a pair (its two norm-weight
// vectors; the cos and the sin of a vector) before it converts either, so
// their round trips overlap instead of adding up on the decode critical path
// (all pairs at once would not fit the registers).
struct table_raw {
  uint4 a, b; /* float32: N floats in a (, b); 16-bit: N halves in a */
};

// A 16-byte load through L2 only (ld.global.cg: nothing it reads stays in
// L1, where a load after the grid dependency wait could find it stale), kept
// where it is written (volatile: before that wait).
__device__ __forceinline__ uint4 ld_l2(const void *p) {
  uint4 v;
  asm volatile("ld.global.cg.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}

template <int N, bool L2ONLY = false>
__device__ __forceinline__ table_raw ld_table(const void *p, int dt, int64_t i) {
  static_assert(N == 4 || N == 8, "4 or 8 elements");
  static_assert(N == 8 || !L2ONLY, "L2-only loads: 8 elements");
  table_raw r = {make_uint4(0, 0, 0, 0), make_uint4(0, 0, 0, 0)};
  if (L2ONLY) {
    const uint4 *q = reinterpret_cast<const uint4 *>(static_cast<const char *>(p) +
                                                     i * (dt == QKVFUSE_DTYPE_FLOAT32 ? 4 : 2));
    r.a = ld_l2(q);
    if (dt == QKVFUSE_DTYPE_FLOAT32) r.b = ld_l2(q + 1);
    return r;
  }
  if (dt == QKVFUSE_DTYPE_FLOAT32) {
    const uint4 *q = reinterpret_cast<const uint4 *>(static_cast<const float *>(p) + i);
    r.a = __ldg(q);
    if (N == 8) r.b = __ldg(q + 1);
  } else if (N == 8) {
    r.a = __ldg(reinterpret_cast<const uint4 *>(static_cast<const uint16_t *>(p) + i));
  } else {
    const uint2 v = __ldg(reinterpret_cast<const uint2 *>(static_cast<const uint16_t *>(p) + i));
    r.a.x = v.x, r.a.y = v.y;
  }
  return r;
}

template <int N>
__device__ __forceinline__ void cvt_table(const table_raw &r, int dt, float *o) {
  const uint32_t w[8] = {r.a.x, r.a.y, r.a.z, r.a.w, r.b.x, r.b.y, r.b.z, r.b.w};
  if (dt == QKVFUSE_DTYPE_FLOAT32) {
#pragma unroll
    for (int k = 0; k < N; k++) o[k] = __uint_as_float(w[k]);
    return;
  }
#pragma unroll
  for (int k = 0; k < N / 2; k++) {
    if (dt == QKVFUSE_DTYPE_BFLOAT16)
      h16<__nv_bfloat16>::unpack(w[k], o[2 * k], o[2 * k + 1]);
    else
      h16<__half>::unpack(w[k], o[2 * k], o[2 * k + 1]);
  }
}

// Both phases at once (where nothing else is in flight).
template <int N>
__device__ __forceinline__ void ld_floats(const void *p, int dt, int64_t i, float *o) {
  cvt_table<N>(ld_table<N>(p, dt, i), dt, o);
}

// A scale or offset a cache row may use: finite, and (scales) not zero.
__device__ __forceinline__ bool scale_ok(float s) { return (__float_as_uint(s) & 0x7fffffffu) - 1u < 0x7f7fffffu; }
__device__ __forceinline__ bool offset_ok(float s) { return (__float_as_uint(s) & 0x7fffffffu) < 0x7f800000u; }

// 1 / s, approximate (within 1 ulp; SPEC's int8 and fp8 tolerances cover it),
// subnormal results kept.
__device__ __forceinline__ float rcp_approx(float s) {
  float r;
  asm("rcp.approx.f32 %0, %1;" : "=f"(r) : "f"(s));
  return r;
}

// sat8(rint(y)); NaN -> 0.
__device__ __forceinline__ uint32_t sat_s8(float y) {
  int q;
  asm("cvt.rni.sat.s8.f32 %0, %1;" : "=r"(q) : "f"(y));
  return (uint32_t)q & 0xffu;
}

// 8 values to fp8 (x * r) bytes of format FMT, saturating; NaN keeps its sign.
template <__nv_fp8_interpretation_t FMT>
__device__ __forceinline__ void fp8_bytes8(const float *x, const float *r, uint32_t (&w)[2]) {
#pragma unroll
  for (int k = 0; k < 8; k += 2) {
    const __nv_fp8x2_storage_t q2 =
        __nv_cvt_float2_to_fp8x2(make_float2(x[k] * r[k], x[k + 1] * r[k + 1]), __NV_SATFINITE, FMT);
    uint32_t lo = q2 & 0xffu, hi = q2 >> 8;
    if (isnan(x[k])) lo = signbit(x[k]) ? 0xffu : 0x7fu; /* NaN keeps its sign (SPEC: documented) */
    if (isnan(x[k + 1])) hi = signbit(x[k + 1]) ? 0xffu : 0x7fu;
    w[k >> 2] |= (lo | hi << 8) << (8 * (k & 3));
  }
}

// 8 values to int8 (x * r (+ of)) or fp8 e4m3 / e5m2 (x * r) bytes.
__device__ __forceinline__ uint2 quant_bytes8(int quant, const float *x, const float *r, const float *of) {
  uint32_t w[2] = {0, 0};
  if (quant == QKVFUSE_QUANT_FP8_E4M3) {
    fp8_bytes8<__NV_E4M3>(x, r, w);
  } else if (quant == QKVFUSE_QUANT_FP8_E5M2) {
    fp8_bytes8<__NV_E5M2>(x, r, w);
  } else if (quant == QKVFUSE_QUANT_INT8_ASYM) {
#pragma unroll
    for (int k = 0; k < 8; k++) w[k >> 2] |= sat_s8(fmaf(x[k], r[k], of[k])) << (8 * (k & 3));
  } else {
#pragma unroll
    for (int k = 0; k < 8; k++) w[k >> 2] |= sat_s8(x[k] * r[k]) << (8 * (k & 3));
  }
  return make_uint2(w[0], w[1]);
}

// The prefill form's quantization table, in shared memory, built once per
// block for the block's item (nh heads of kind 1 k or 2 v, from head h0):
// reciprocal scales [nh * D], then (int8 asymmetric) offsets [nh * D], each
// head's D values in lane order: the 8 channels of vector u (8u .. 8u+7) as
// two quads at quad (2 s + half) nl + o of the head (table_quad), o the lane
// that holds u and s its slot (0: A, 1: B; lane_layout), so that a group's
// lanes read each quad of theirs as consecutive 16-byte pieces, free of
// bank conflicts (in channel order, lanes 32 bytes apart: 2-way conflicts
// at least). Returns bit i set when a scale or offset of head h0 + i is bad
// (each bad value read is reported); the block-wide votes are also the
// barrier after which every thread may read the table.
template <bool INTER>
__device__ __forceinline__ int table_quad(int u, int nl, int R, bool adj) {
  const int hr = R >> 4; /* neox: lanes below hr hold rotation pairs (u, u + hr) */
  int o, s;
  if (adj) { /* vadj (neox only): lane o holds 2o and 2o + 1 */
    o = u >> 1, s = u & 1;
  } else if (INTER || u < 2 * hr) {
    const int w = INTER ? nl : hr;
    s = u >= w, o = u - (s ? w : 0);
  } else {
    o = hr + ((u - 2 * hr) >> 1), s = (u - 2 * hr) & 1;
  }
  return 2 * s * nl + o;
}

template <int HOT, bool INTER>
__device__ __forceinline__ unsigned fill_qtable(const qf_cu_params &P, float *tab, int kind, int h0, int nh,
                                                bool adj) {
  const int D = P.D, n = nh * D, nl = D >> 4;
  const float *sc = kind == 1 ? P.k_scale : P.v_scale, *of = HOT ? nullptr : kind == 1 ? P.k_offset : P.v_offset;
  const bool pc = (kind == 1 ? P.k_scale_pc : P.v_scale_pc) != 0;
  const bool ph = (kind == 1 ? P.k_scale_ph : P.v_scale_ph) != 0; /* one per kv head */
  unsigned mine = 0;
  // chunks of 8 channels (inside one head: D % 16 == 0), two per thread per
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
      const int hi = c / D, at = hi * D + 4 * table_quad<INTER>((c - hi * D) >> 3, nl, P.R, adj);
      bool ok = true;
#pragma unroll
      for (int k = 0; k < 8; k++) {
        ok &= scale_ok(s[h][k]) && offset_ok(o[h][k]);
        const int e = at + (k < 4 ? k : 4 * nl + k - 4); /* the second quad nl quads further */
        tab[e] = rcp_approx(s[h][k]);
        if (of) tab[n + e] = o[h][k];
      }
      if (!ok) mine |= 1u << hi;
    }
  }
  if (mine) report(P, QKVFUSE_DATA_ERROR_SCALE);
  unsigned bad = 0;
#pragma unroll
  for (int i = 0; i < kFastHeads; i++)
    if (__syncthreads_or((int)(mine >> i & 1u))) bad |= 1u << i;
  return bad;
}

// a / b for 0 <= a and 0 < b, by a 32-bit division when both fit (a 64-bit
// division is a subroutine of ~70 instructions on the decode critical path).
__device__ __forceinline__ int64_t div_small(int64_t a, int64_t b) {
  if (((uint64_t)a | (uint64_t)b) >> 32 == 0) return (int64_t)((uint32_t)a / (uint32_t)b);
  return a / b;
}

// Fast 32-bit division by a divisor fixed for the launch (qf_cu_div):
// n / d for n < 2^31.
__device__ __forceinline__ unsigned div_fixed(unsigned n, const qf_cu_div &d) {
  return (__umulhi(n, d.mul) + n) >> d.shift;
}

// a / b for 0 <= a and 0 < b. FIXED (the decode form): with d = b's divisor
// (backend.cu: qf_cuda_divisor_or_none; d.d = 0: none), a multiply where a <
// 2^31 (any result for a < 0). Not in the prefill form, whose token check
// one chunk ahead is off its critical path: there the multiply's extra code
// only costs.
template <bool FIXED>
__device__ __forceinline__ int64_t div_by(int64_t a, int64_t b, const qf_cu_div &d) {
  if (FIXED && d.d != 0 && (uint64_t)a < 0x80000000ull) return div_fixed((unsigned)a, d);
  return div_small(a, b);
}

// 8 floats of the shared-memory table: two quads, at p and at p + qs.
__device__ __forceinline__ void ld_shared8(const float *p, int qs, float *o) {
  const float4 a = *reinterpret_cast<const float4 *>(p), b = *reinterpret_cast<const float4 *>(p + qs);
  o[0] = a.x, o[1] = a.y, o[2] = a.z, o[3] = a.w, o[4] = b.x, o[5] = b.y, o[6] = b.z, o[7] = b.w;
}

// Element offset of channel jj (a multiple of 8) of a token's row in a cache:
// chunk = D (paged, paged_hnd, contiguous) or a power of two (nz).
template <int HOT = 0>
__device__ __forceinline__ int64_t cache_at(const qf_cu_cache &C, int64_t row0, int kvh, int e, int D) {
  if (HOT || C.chunk == D) return row0 + kvh * C.s_chunk + e;
  const int jj = kvh * D + e, sh = __ffs((int)C.chunk) - 1;
  return row0 + (int64_t)(jj >> sh) * C.s_chunk + (jj & ((int)C.chunk - 1));
}

// A token's raw position and slot (or contiguous start index): what the
// next work unit needs first, loaded one unit ahead.
struct token_ix {
  int64_t pos, slot;
};

// The address of entry i of an int32 / int64 index vector (ld_index's).
__device__ __forceinline__ const void *index_at(const void *p, int dt, int64_t i) {
  return static_cast<const char *>(p) + i * (dt == QKVFUSE_DTYPE_INT64 ? 8 : 4);
}

// Token t's slot under the page table (core/address.h: qf_page_table_slot;
// -1 skips, -2 is a data error), out of line: inlined, its dependent loads
// and checks cost registers (and spills in the prefill form) in every kernel
// that reads its addressing from the parameters, page table or not.
static __device__ __noinline__ int64_t page_table_slot(const qf_page_table pt, int64_t t) {
  return qf_page_table_slot(&pt, t);
}

template <bool FIXED, int HOT = 0>
__device__ __forceinline__ token_ix load_token_ix(const qf_cu_params &P, int64_t t) {
  token_ix x = {0, -1};
  if (t >= P.T) return x;
  if (HOT || P.positions.data) x.pos = ld_index(P.positions.data, HOT ? QKVFUSE_DTYPE_INT64 : P.positions.dtype, t);
  if (!HOT && P.page_table) { /* the slot from the page table (never HOT: backend.cu fast_hot) */
    x.slot = page_table_slot(P.pt, t);
  } else if ((HOT & kHotCache) || P.layout != QKVFUSE_CACHE_NONE) {
    const int64_t at = !HOT && P.layout == QKVFUSE_CACHE_CONTIGUOUS ? div_by<FIXED>(t, P.S, P.batch_div) : t;
    x.slot = ld_index(P.slot_mapping.data, HOT ? QKVFUSE_DTYPE_INT64 : P.slot_mapping.dtype, at);
  }
  return x;
}

// A token's position and slot checked: ok is false if the group has no
// token (live false) or either is outside its table (reported where
// reporter() is true: one lane per token); dest says whether the token has a
// cache row (kind 1 k or 2 v and a slot other than -1) and row0 is its
// element offset in that cache. The slot's range check is one unsigned
// compare (slot_lim: backend.cu), and a cache of whole rows (slot_lin) places
// slot s at s * s_row without a division: both shorten the decode form's
// critical path. The position's check stays two signed compares (here and
// for the decode form's rope flag): they tell the compiler the position is
// not negative, which one unsigned compare does not. The reporter is a
// callable so that it is evaluated only on the error path.
struct token_dest {
  bool ok, dest;
  int64_t row0;
};

template <bool FIXED, int HOT = 0, typename Reporter>
__device__ __forceinline__ token_dest check_token(const qf_cu_params &P, int64_t t, const token_ix &ix, int kind,
                                                  bool live, const Reporter &reporter) {
  token_dest d = {live, false, 0};
  if (live && (HOT || P.positions.data) && (ix.pos < 0 || ix.pos >= P.max_pos)) {
    d.ok = false;
    if (reporter()) report(P, QKVFUSE_DATA_ERROR_POSITION);
  }
  if (live && ((HOT & kHotCache) || P.layout != QKVFUSE_CACHE_NONE) && ix.slot != -1) {
    if ((uint64_t)ix.slot >= (uint64_t)P.slot_lim) {
      d.ok = false;
      if (reporter()) report(P, QKVFUSE_DATA_ERROR_SLOT);
    } else if (kind > 0) {
      const qf_cu_cache &CC = kind == 1 ? P.k_cache : P.v_cache;
      int64_t blk, row;
      if (HOT || P.slot_lin) {
        blk = 0, row = ix.slot;
      } else if (!HOT && P.layout == QKVFUSE_CACHE_CONTIGUOUS) {
        blk = div_by<FIXED>(t, P.S, P.batch_div), row = ix.slot + (t - blk * P.S);
      } else {
        blk = div_by<FIXED>(ix.slot, CC.block_size, P.page_div), row = ix.slot - blk * CC.block_size;
      }
      d.dest = true, d.row0 = blk * CC.s_block + row * CC.s_row;
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

template <bool INTER>
__device__ __forceinline__ lane_vecs lane_layout(int lane, int nl, int R) {
  lane_vecs v;
  if (lane >= nl) lane -= nl; /* past the head (D < 16 L; L < 2 nl): a lane's vectors, read, never written */
  if (INTER) {
    v.a = lane, v.b = lane + nl;
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
// pairs, or SEP: cos/sin given per token at full length, so a neox lane's two
// halves have their own; otherwise B shares A's).
__host__ __device__ constexpr int fast_ncs(bool inter, bool sep) { return inter || sep ? 4 : 2; }

// The norm weights of the lane's 16 elements ((1 + g) with gamma_offset).
// GDT: their dtype, known at compile time (else 0: gw's).
template <int GDT = 0>
__device__ __forceinline__ void load_gamma(const qf_cu_params &P, const qf_cu_vec &gw, const lane_vecs &lv,
                                           float (&g)[16]) {
  const int gdt = GDT ? GDT : gw.dtype;
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

// The HOT prefill kernels' cos/sin of a lane for one token, as loaded from
// the 16-bit cos_sin_cache (cs_fetch, a chunk ahead: the chunk's first
// heads cover the round trip) and converted when the chunk starts
// (cs_ready), to the values load_cos_sin gives. neox: the cos and the sin of
// the lane's 8 pairs; interleaved: of vector A's 4 pairs (x, y) and of B's
// (z, w).
struct cs_bits {
  uint4 c, s;
};

// The element of a cos/sin cache row (position pos) holding the cos of the
// pairs of vector w, a rotated one: neox, its 8 pairs 8w .. 8w+7 (w < R/16);
// interleaved, its 4 pairs 4w .. 4w+3. The sin is R/2 further.
template <bool INTER>
__device__ __forceinline__ int64_t cos_at(const qf_cu_mat &csc, int64_t pos, int w) {
  return pos * csc.ld + (INTER ? 4 * w : 8 * w);
}

// LATE: the position at is read only here (the empty asm keeps the compiler
// from moving that read ahead), clamped into the table; its range is checked
// with the token (check_token), so a bad position still writes nothing.
// Otherwise at is in the table (checked by the caller in rope).
template <typename T, bool INTER, bool LATE>
__device__ __forceinline__ cs_bits cs_fetch(const qf_cu_params &P, int64_t at, const lane_vecs &lv, bool rope) {
  cs_bits r = {make_uint4(0, 0, 0, 0), make_uint4(0, 0, 0, 0)};
  if (!rope) return r;
  if constexpr (LATE) asm volatile("" : "+l"(at));
  const int pos = (int)(!LATE || (uint64_t)at < (uint64_t)P.max_pos ? at : P.max_pos - 1);
  const qf_cu_mat &csc = P.cos_sin_cache;
  const int R = P.R, dt = h16<T>::dtype;
  if constexpr (!INTER) {
    const int64_t base = cos_at<false>(csc, pos, lv.a);
    r.c = ld_table<8>(csc.data, dt, base).a;
    r.s = ld_table<8>(csc.data, dt, base + (R >> 1)).a;
  } else {
#pragma unroll
    for (int v = 0; v < 2; v++) {
      const int w = v ? lv.b : lv.a;
      if (8 * w >= R) continue;
      const int64_t base = cos_at<true>(csc, pos, w);
      const uint4 c = ld_table<4>(csc.data, dt, base).a, sn = ld_table<4>(csc.data, dt, base + (R >> 1)).a;
      if (v) r.c.z = c.x, r.c.w = c.y, r.s.z = sn.x, r.s.w = sn.y;
      else r.c.x = c.x, r.c.y = c.y, r.s.x = sn.x, r.s.y = sn.y;
    }
  }
  return r;
}

template <typename T, bool INTER, int NCS>
__device__ __forceinline__ void cs_ready(const cs_bits &r, float (&cs)[NCS][8]) {
  if constexpr (!INTER) {
    unpack8<T>(r.c, cs[0]);
    unpack8<T>(r.s, cs[1]);
  } else {
    float c[8], sn[8];
    unpack8<T>(r.c, c);
    unpack8<T>(r.s, sn);
#pragma unroll
    for (int v = 0; v < 2; v++)
#pragma unroll
      for (int k = 0; k < 8; k++) cs[2 * v][k] = c[4 * v + (k >> 1)], cs[2 * v + 1][k] = sn[4 * v + (k >> 1)];
  }
}

// cos/sin of the lane's rotated elements for token t at position pos (when
// rope: the token is valid and the lane rotates). CSDT: the call's
// cos_sin_cache dtype, known at compile time (else 0: read).
template <bool INTER, bool SEP, int CSDT = 0>
__device__ __forceinline__ void load_cos_sin(const qf_cu_params &P, int64_t t, int pos, const lane_vecs &lv, bool rope,
                                             float (&cs)[fast_ncs(INTER, SEP)][8]) {
  constexpr int NCS = fast_ncs(INTER, SEP);
  const int R = P.R;
  const bool cache_src = CSDT || P.rope_source == QKVFUSE_ROPE_COS_SIN_CACHE;
  const qf_cu_mat &csc = P.cos_sin_cache;
  const int csdt = CSDT ? CSDT : csc.dtype;
  if (rope && (SEP || cache_src)) {
    // tables, one (cos, sin) pair per lane vector, the loads of a pair
    // before their conversion (registers allow no more): SEP (COS_SIN, as
    // given) for the rotated vectors; a neox cache row serves both vectors
#pragma unroll
    for (int v = 0; v < (SEP || INTER ? 2 : 1); v++) {
      const int w = v ? lv.b : lv.a;
      if (SEP ? !(v ? lv.rot_b : lv.rot_a) : (INTER && 8 * w >= R)) continue;
      table_raw c2[2];
      if (SEP) {
        c2[0] = ld_table<8>(P.cos.data, P.cos.dtype, t * P.cos.ld + 8 * w);
        c2[1] = ld_table<8>(P.sin.data, P.sin.dtype, t * P.sin.ld + 8 * w);
        cvt_table<8>(c2[0], P.cos.dtype, cs[2 * v]);
        cvt_table<8>(c2[1], P.sin.dtype, cs[2 * v + 1]);
      } else if (!INTER) { /* pairs 8a .. 8a+7 */
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
    for (int v = 0; v < NCS / 2; v++) {
      const int w = v ? lv.b : lv.a;
      if (INTER && 8 * w >= R) continue;
#pragma unroll
      for (int k = 0; k < 8; k += INTER ? 2 : 1) {
        float c, sn;
        half_cos_sin(P, pos, INTER ? (8 * w + k) >> 1 : 8 * w + k, c, sn);
        cs[2 * v][k] = c, cs[2 * v + 1][k] = sn;
        if (INTER) cs[2 * v][k + 1] = c, cs[2 * v + 1][k + 1] = sn;
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

// One head of a lane: its two input vectors unpacked, RMS-normalized over the
// group's L lanes (every lane of the warp calls it: shuffles) and rotated.
template <typename T, int L, bool INTER, int NCS>
__device__ __forceinline__ void norm_rope(const uint4 &ra, const uint4 &rb, bool norm, const float (&g)[16],
                                          float rD, float eps, bool rope, const float (&cs)[NCS][8],
                                          const lane_vecs &lv, float (&x)[16]) {
  unpack8<T>(ra, x);
  unpack8<T>(rb, x + 8);
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
  if (!INTER) {
#pragma unroll
    for (int k = 0; k < 8; k++) {
      const float a = x[k], b = x[8 + k];
      x[k] = fmaf(a, cs[0][k], -b * cs[1][k]);
      x[8 + k] = fmaf(b, cs[NCS - 2][k], a * cs[NCS - 1][k]);
    }
  } else {
#pragma unroll
    for (int v = 0; v < 2; v++)
      if (v ? lv.rot_b : lv.rot_a) rotate_pairs8(x + 8 * v, cs[(2 * v) % NCS], cs[(2 * v + 1) % NCS]);
  }
}

// Stores a lane's NV vectors (8 values each, vector v at element 8 w[v] of
// the head) of head kvh of token t (where `write`: the token is valid and the
// lane holds data): to `out` (if given) and to the token's cache row
// (to_cache; row0 from check_token), quantized with the reciprocal scales and
// offsets of a Scales object: ok() false skips the row (a bad scale or offset
// of the head), get(v, r, of) gives vector v's (fetched per vector:
// registers); `quant`: the cache is quantized. RUNS (the neox prefill
// kernels): both vectors are quantized first, then stored as one 16-byte
// run where `run` (NV = 2, w[1] = w[0] + 1: vadj) or as two pieces; the
// other kernels store each vector as soon as it is quantized. (The prefill
// loop passes `write` rather than skipping the call: skipping it spills.)
template <typename T, int NV, int HOT = 0, bool RUNS = false, typename Scales>
__device__ __forceinline__ void store_head(const qf_cu_mat &out, const qf_cu_cache &C, bool quant, bool write,
                                           bool to_cache, int64_t t, int64_t row0, int kvh, int D,
                                           const int (&w)[NV], const float (&x)[8 * NV], const Scales &scales,
                                           bool run = false) {
  if (write && out.data) {
    T *o = reinterpret_cast<T *>(out.data) + t * out.ld + kvh * D;
#pragma unroll
    for (int v = 0; v < NV; v++) st_stream(o + 8 * w[v], pack8<T>(x + 8 * v));
  }
  if (!(write && to_cache)) return;
  if (!quant) {
    T *c = reinterpret_cast<T *>(C.data);
#pragma unroll
    for (int v = 0; v < NV; v++) st_stream(c + cache_at<HOT>(C, row0, kvh, 8 * w[v], D), pack8<T>(x + 8 * v));
    return;
  }
  if (!scales.ok()) return;
  uint8_t *c = static_cast<uint8_t *>(C.data);
  /* HOT: no offsets, so int8 is symmetric (qm: computed in each loop; fp8 keeps its format) */
  if constexpr (RUNS) {
    uint2 q[NV];
#pragma unroll
    for (int v = 0; v < NV; v++) {
      float r[8], of[8];
      scales.get(v, r, of);
      const int qm = HOT && C.quant == QKVFUSE_QUANT_INT8_ASYM ? QKVFUSE_QUANT_INT8_SYM : C.quant;
      q[v] = quant_bytes8(qm, x + 8 * v, r, of);
    }
    if (NV == 2 && run) { /* w[1] = w[0] + 1 */
      st_stream(c + cache_at<HOT>(C, row0, kvh, 8 * w[0], D), make_uint4(q[0].x, q[0].y, q[NV - 1].x, q[NV - 1].y));
    } else {
#pragma unroll
      for (int v = 0; v < NV; v++) st_stream(c + cache_at<HOT>(C, row0, kvh, 8 * w[v], D), q[v]);
    }
  } else { /* each vector stored as soon as it is quantized (the scales fetched per vector: registers) */
#pragma unroll
    for (int v = 0; v < NV; v++) {
      float r[8], of[8];
      scales.get(v, r, of);
      const int qm = HOT && C.quant == QKVFUSE_QUANT_INT8_ASYM ? QKVFUSE_QUANT_INT8_SYM : C.quant;
      st_stream(c + cache_at<HOT>(C, row0, kvh, 8 * w[v], D), quant_bytes8(qm, x + 8 * v, r, of));
    }
  }
}

// The prefill form's scales: the block's shared-memory table (fill_qtable,
// lane order: the lane's vector v in quads 2v and 2v + 1 of its own).
struct table_scales {
  const float *rtab, *otab; /* the item's reciprocal scales and offsets, [nh * D] */
  int e0;                   /* the lane's first quad of the head: ch0 + 4 (its lane, less nl past the head) */
  int qs;                   /* floats from one of the lane's quads to its next: 4 nl */
  bool bad, offsets;        /* a scale or offset of the head is bad; int8 asymmetric */
  __device__ bool ok() const { return !bad; }
  __device__ void get(int v, float *r, float *of) const {
    const int e = e0 + 2 * v * qs;
    ld_shared8(rtab + e, qs, r);
    if (offsets) ld_shared8(otab + e, qs, of);
  }
};

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

// The prefill form's item and token chunks of block b. Blocks
// [0, fast_head_blocks) are the resident ones: a block keeps its item for
// the launch and walks that item's chunks below fast_head_chunks from its
// index among the item's blocks with a stride of their number (fast_bpi of
// its kind), so that all items go through the tokens together. Blocks are
// dealt in rounds: round r has one block of every item whose kind has more
// than r blocks per item, q items first, then k, then v; so neighbouring
// blocks (and each multiprocessor's) hold different items, and kinds whose
// chunks cost more (backend.cu: fast_split) have more blocks. Rounds come
// in up to three segments of equal width (fast_seg_end: the segment's last
// round + 1; fast_seg_width: its blocks per round). The blocks after them
// take the remaining chunks in pieces of fast_piece consecutive chunks,
// piece by piece, every item's in turn, or (KINDS: the kernel for a
// quantized cache) kind by kind, the longest first: k's, v's, then q's. The
// hardware starts each as a resident block ends, so the multiprocessors
// that move their bytes faster take more of them (backend.cu: the tail).
struct prefill_item {
  int kind, h0, nh;        /* kind (0 q, 1 k, 2 v), first head, heads */
  unsigned c, stride, end; /* the first chunk, the chunk stride, the chunk bound */
};

template <bool KINDS>
__device__ __forceinline__ prefill_item block_item(const qf_cu_params &P) {
  unsigned b = blockIdx.x, round = 0, j = 0, c, stride, end;
  const bool head = b < (unsigned)P.fast_head_blocks;
  int kind = 0;
  if (head) {
    unsigned r0 = 0;
#pragma unroll
    for (int s = 0; s < 3; s++) {
      const unsigned w = (unsigned)P.fast_seg_width[s], n = (unsigned)P.fast_seg_end[s] - r0;
      if (b < n * w) {
        round = r0 + b / w, j = b - (round - r0) * w;
        break;
      }
      b -= n * w, r0 = (unsigned)P.fast_seg_end[s];
    }
  } else if (KINDS) { /* a piece of the tail, kind by kind (k, v, q): item j of piece `round` */
    const unsigned pieces = (P.fast_chunks - P.fast_head_chunks) / (unsigned)P.fast_piece;
    b -= (unsigned)P.fast_head_blocks, kind = 1;
#pragma unroll
    for (int o = 0; o < 2; o++) {
      const unsigned n = (unsigned)P.fast_items[kind] * pieces;
      if (b < n) break;
      b -= n, kind = kind == 1 ? 2 : 0;
    }
    round = b / (unsigned)P.fast_items[kind], j = b - round * (unsigned)P.fast_items[kind];
  } else { /* a piece of the tail: item j of piece `round` */
    const unsigned items = (unsigned)(P.fast_items[0] + P.fast_items[1] + P.fast_items[2]);
    b -= (unsigned)P.fast_head_blocks, round = b / items, j = b - round * items;
  }
  /* item j of the round's: the kinds with more than `round` blocks per item (the tail's: all) */
  if (head || !KINDS) {
    while (kind < 2 && ((head && round >= (unsigned)P.fast_bpi[kind]) || j >= (unsigned)P.fast_items[kind])) {
      if (!head || round < (unsigned)P.fast_bpi[kind]) j -= P.fast_items[kind];
      kind++;
    }
  }
  if (head) {
    c = round, stride = (unsigned)P.fast_bpi[kind], end = P.fast_head_chunks;
  } else {
    c = P.fast_head_chunks + round * (unsigned)P.fast_piece, stride = 1;
    end = min(c + (unsigned)P.fast_piece, P.fast_chunks);
  }
  prefill_item it;
  it.kind = kind, it.h0 = (int)j * P.fast_hpi, it.nh = min(P.fast_hpi, (kind == 0 ? P.Nq : P.Nkv) - it.h0);
  it.c = c, it.stride = stride, it.end = end;
  return it;
}

// The prefill form. Block b owns an item (block_item: its kind, heads, norm
// weights and quantization table are the block's for the whole launch) and
// walks its token chunks (GPB tokens, one per group). The rows of the next
// chunk are copied into shared memory (cp.async) while the current chunk is
// computed, and the next chunk's position and slot are loaded ahead. SEP:
// cos/sin given per token at full length (COS_SIN source). HOT: kHot (|
// kHotQuant) or 0 (what the kernel knows of its call).
template <typename T, int L, bool INTER, bool SEP, int HOT>
__global__ void __launch_bounds__(kFastBlock, fast_blocks_per_sm(HOT != 0)) fast_kernel(const qf_cu_params P) {
#if QF_FAST_DEVICE_CODE
  constexpr int GPB = fast_gpb(L), NH = fast_max_heads(SEP), NCS = fast_ncs(INTER, SEP);
  static_assert(!HOT || !SEP, "HOT: cos/sin from a cache");
  constexpr int TDT = HOT ? h16<T>::dtype : 0; /* HOT: the tables' dtype (the input's) */
  constexpr bool QUANT = (HOT & kHotQuant) != 0; /* the kernel of a call with a quantized cache */
  // shared memory: the row stages [kFastStages][hpi][2][kFastBlock] (a
  // warp's vectors consecutive: no bank conflicts), then the item's
  // quantization table
  extern __shared__ __align__(16) uint4 smem[];
  const int D = P.D, R = P.R, nl = D >> 4, hpi = P.fast_hpi;
  const float rD = 1.0f / (float)D; /* mean of squares: a multiply, off the critical path */
  const group_lane gl = group_lane_of<L>(threadIdx.x);
  const int lane = gl.lane, grp = gl.grp;
  const bool idle = gl.idle; /* a lane in no group (L not a power of two) */
  const lane_vecs ll = lane_layout<INTER>(lane, nl, R);
  const prefill_item it = block_item<QUANT>(P);
  const int kind = it.kind, h0 = it.h0, nh = it.nh;
  // v items of a quantized cache (P.fast_vadj; neox kernels): the lanes
  // copy vectors l and l + D/16 of each row into the stage (lvc: whole
  // 16-byte pieces of a group's half row per copy) but take the adjacent
  // vectors 2l and 2l + 1 from it (lv; v has no rotation pairs), where other
  // lanes of the group copied them (a warp barrier after the wait and one
  // before the next copy), so that a lane's cache bytes are one 16-byte
  // store and a group's one run of whole sectors
  const bool vadj = !INTER && kind == 2 && P.fast_vadj;
  const int lr = lane < nl ? lane : lane - nl;
  const lane_vecs lvc = vadj ? lane_vecs{lr, lr + nl, false, false} : ll;
  const lane_vecs lv = vadj ? lane_vecs{2 * lr, 2 * lr + 1, false, false} : lvc;
  // the stage entries (offsets from the lane's own) of lv's vectors: vector
  // u was copied by lane u % nl of the group into its entry u / nl
  const int sa = vadj ? (2 * lr) % nl - lane + (2 * lr) / nl * kFastBlock : 0;
  const int sb = vadj ? (2 * lr + 1) % nl - lane + (2 * lr + 1) / nl * kFastBlock : kFastBlock;
  const unsigned stride = it.stride, end = it.end;
  unsigned c = it.c;

  const T *rows = reinterpret_cast<const T *>(P.in[kind].data) + (int64_t)h0 * D;
  const int64_t ld = P.in[kind].ld;
  const qf_cu_mat &out = kind == 0 ? P.q_out : (kind == 1 ? P.k_out : P.v_out);
  const qf_cu_cache &C = kind == 1 ? P.k_cache : P.v_cache;
  const bool norm = kind == 0 ? P.q_norm : (kind == 1 && P.k_norm);
  const bool quant = kind > 0 && C.data && C.quant != QKVFUSE_QUANT_NONE;
  uint4 *const stage = smem + threadIdx.x;
  float *const qtab = reinterpret_cast<float *>(smem + kFastStages * hpi * 2 * kFastBlock);
  const bool offsets = !HOT && C.quant == QKVFUSE_QUANT_INT8_ASYM;

  // the lane's vectors of chunk cc's token, copied into stage st (nothing
  // past the block's chunks or the last token); one commit group per chunk
  // either way
  const uint64_t policy = evict_first_policy();
  auto issue = [&](unsigned cc, int st) {
    const int64_t t = (int64_t)cc * GPB + grp;
    if (!idle && cc < end && t < P.T && lane < nl) {
      const T *in = rows + t * ld;
#pragma unroll
      for (int i = 0; i < NH; i++) {
        if (i >= nh) break;
        cp_async16(stage + ((st * hpi + i) * 2) * kFastBlock, in + i * D + 8 * lvc.a, policy);
        cp_async16(stage + ((st * hpi + i) * 2 + 1) * kFastBlock, in + i * D + 8 * lvc.b, policy);
      }
    }
    cp_async_commit();
  };

  // the first chunk's rows start their way to L2 while the previous kernel finishes
  {
    const int64_t t = (int64_t)c * GPB + grp;
    if (!idle && t < P.T && lane < nl) {
      const T *in = rows + t * ld;
      for (int i = 0; i < nh; i++) prefetch_l2(in + i * D + 8 * lvc.a), prefetch_l2(in + i * D + 8 * lvc.b);
    }
  }
  grid_dependency_wait();
  issue(c, 0);
  token_ix next = load_token_ix<false, HOT>(P, (int64_t)c * GPB + grp);

  // per block: norm weights, quantization table
  float g[16];
  if (norm) load_gamma<TDT>(P, kind == 0 ? P.q_gamma : P.k_gamma, lv, g);
  const unsigned bad = quant ? fill_qtable<HOT, INTER>(P, qtab, kind, h0, nh, vadj) : 0u;
  // HOT: the cos/sin of the lane's token in chunk cc, fetched a chunk ahead
  // (where it rotates: its position in the table; checked again with the
  // token when the chunk is computed). The compiler evaluates part of this
  // range check ahead of the first head, so every block, v's too, waits
  // there for the position loaded at the chunk's top. With a quantized
  // cache (QUANT) the position is read only after the first head,
  // clamped, its check left to the token (cs_fetch LATE), so that the wait
  // overlaps the first head. The other calls keep the early wait: without
  // it their v blocks gain less than their q and k blocks lose.
  auto fetch_cs = [&](unsigned cc, const token_ix &x) {
    const bool r = kind < 2 && R > 0 && !idle && lane < nl && (lv.rot_a || lv.rot_b) && cc < end &&
                   (int64_t)cc * GPB + grp < P.T && (QUANT || (x.pos >= 0 && x.pos < P.max_pos));
    return cs_fetch<T, INTER, QUANT>(P, x.pos, lv, r);
  };
  cs_bits csb = {};
  if constexpr (HOT) csb = fetch_cs(c, next);

  for (int st = 0; c < end; c += stride, st ^= 1) {
    const unsigned cn = c + stride;
    issue(cn, st ^ 1);
    const token_ix ix = next;
    if (cn < end) next = load_token_ix<false, HOT>(P, (int64_t)cn * GPB + grp);

    const int64_t t = (int64_t)c * GPB + grp;
    const bool live = !idle && t < P.T; /* the group has a token */
    const bool act = live && lane < nl; /* the lane holds data */

    // the token: position and cache destination checked (reported by the
    // first q item's blocks: one per token)
    const token_dest td =
        check_token<false, HOT>(P, t, ix, kind, live, [&] { return kind == 0 && h0 == 0 && lane == 0; });

    // cos/sin of the lane's elements
    const bool rope = kind < 2 && R > 0 && td.ok && act && (lv.rot_a || lv.rot_b);
    float cs[NCS][8];
    if constexpr (HOT)
      cs_ready<T, INTER, NCS>(csb, cs);
    else
      load_cos_sin<INTER, SEP, TDT>(P, t, (int)ix.pos /* < max_pos <= 2^31 when used */, lv, rope, cs);

    // the heads, from this chunk's stage
    cp_async_wait<1>();
    if (vadj) __syncwarp(); /* the group's copies, for the lanes that take them */
    const bool to_cache = kind > 0 && td.dest && C.data;
#pragma unroll
    for (int i = 0; i < NH; i++) {
      if (i >= nh) break; /* uniform per block */
      uint4 ra = make_uint4(0, 0, 0, 0), rb = ra;
      if (act) {
        ra = stage[((st * hpi + i) * 2) * kFastBlock + sa];
        rb = stage[((st * hpi + i) * 2) * kFastBlock + sb];
      }
      float x[16];
      norm_rope<T, L, INTER, NCS>(ra, rb, norm, g, rD, P.eps, rope, cs, lv, x);
      const int w[2] = {lv.a, lv.b};
      store_head<T, 2, HOT, !INTER>(out, C, quant, td.ok && act, to_cache, t, td.row0, h0 + i, D, w, x,
                       table_scales{qtab, qtab + nh * D, i * D + 4 * lr, 4 * nl,
                                    (bad >> i & 1u) != 0, offsets}, vadj);
      if constexpr (HOT) { /* the next chunk's cos/sin, its position loaded at the top of this one */
        if (i == 0) csb = fetch_cs(cn, next);
      }
    }
    if (vadj) __syncwarp(); /* read before the next copy into the stage */
  }
#else
  __trap();
#endif
}

// cos/sin of the 8 elements of vector w (the one-vector decode form's lane)
// for token t at position pos, in two phases like the tables' (ld_table /
// cvt_table): vec_cs_load issues the table loads (where rope: the token is
// valid and the vector rotates), vec_cs_get converts them (or computes
// them: COMPUTED), so the row's normalization runs during their round trip.
// neox: the pair index of element 8w + k is 8w + k in the first half (R/16
// vectors), 8w + k - R/2 in the second; a first-half vector's sin comes
// negated, so that both halves rotate as x c + x' s, x' the partner's value.
// Interleaved: pairs (2i, 2i+1) inside the vector. SEP: per token and
// element, as given.
struct vec_cs_raw {
  table_raw c, s;
};

// The element of a cos/sin cache row (position pos) holding the cos of
// vector w's pairs (the sin: R/2 further): cos_at's, where a neox vector of
// the second half (w >= R/16) takes its first-half partner's pairs.
template <bool INTER>
__device__ __forceinline__ int64_t vec_cos_at(const qf_cu_mat &csc, int64_t pos, int w, int R) {
  const int hv = R >> 4;
  return cos_at<INTER>(csc, pos, INTER || w < hv ? w : w - hv);
}

template <bool INTER, bool SEP, int CSDT = 0>
__device__ __forceinline__ vec_cs_raw vec_cs_load(const qf_cu_params &P, int64_t t, int pos, int w, bool rope) {
  vec_cs_raw r = {};
  if (!rope) return r;
  const int R = P.R;
  const qf_cu_mat &csc = P.cos_sin_cache;
  const int csdt = CSDT ? CSDT : csc.dtype;
  if (SEP) {
    r.c = ld_table<8>(P.cos.data, P.cos.dtype, t * P.cos.ld + 8 * w);
    r.s = ld_table<8>(P.sin.data, P.sin.dtype, t * P.sin.ld + 8 * w);
  } else if (CSDT || P.rope_source == QKVFUSE_ROPE_COS_SIN_CACHE) {
    const int64_t base = vec_cos_at<INTER>(csc, pos, w, R);
    r.c = ld_table<INTER ? 4 : 8>(csc.data, csdt, base);
    r.s = ld_table<INTER ? 4 : 8>(csc.data, csdt, base + (R >> 1));
  }
  return r;
}

template <bool INTER, bool SEP, int CSDT = 0>
__device__ __forceinline__ void vec_cs_get(const qf_cu_params &P, const vec_cs_raw &r, int pos, int w, bool rope,
                                           float (&c)[8], float (&s)[8]) {
  if (!rope) return;
  const int hv = P.R >> 4;
  const bool first = !INTER && w < hv;
  const bool cache_src = CSDT || P.rope_source == QKVFUSE_ROPE_COS_SIN_CACHE;
  const int csdt = CSDT ? CSDT : P.cos_sin_cache.dtype;
  if (SEP) {
    cvt_table<8>(r.c, P.cos.dtype, c);
    cvt_table<8>(r.s, P.sin.dtype, s);
  } else if (cache_src && !INTER) {
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
    for (int k = 0; k < 8; k += INTER ? 2 : 1) {
      half_cos_sin(P, pos, INTER ? 4 * w + (k >> 1) : 8 * (first ? w : w - hv) + k, c[k], s[k]);
      if (INTER) c[k + 1] = c[k], s[k + 1] = s[k];
    }
  }
  if (first) {
#pragma unroll
    for (int k = 0; k < 8; k++) s[k] = -s[k];
  }
}

// A token's position read before the grid dependency wait, as a hint only:
// the previous kernel may still be writing it, so the value (a relaxed
// load: a defined result either way) only chooses which cos/sin lines to
// prefetch into L2; the position used is read again after the wait.
template <int HOT>
__device__ __forceinline__ int64_t position_hint(const qf_cu_params &P, int64_t t) {
  if (HOT || P.positions.dtype == QKVFUSE_DTYPE_INT64) {
    long long v;
    asm volatile("ld.relaxed.gpu.global.s64 %0, [%1];"
                 : "=l"(v)
                 : "l"(static_cast<const long long *>(P.positions.data) + t));
    return v;
  }
  int v;
  asm volatile("ld.relaxed.gpu.global.s32 %0, [%1];"
               : "=r"(v)
               : "l"(static_cast<const int32_t *>(P.positions.data) + t));
  return v;
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
template <int NV, bool L2ONLY, int GDT = 0>
__device__ __forceinline__ weights_raw<NV> load_weights(const qf_cu_vec &gw, const float *sc, const float *so, bool pc,
                                                        bool norm, bool quant, int ch0, const int (&wv)[NV]) {
  weights_raw<NV> w = {};
#pragma unroll
  for (int v = 0; v < NV; v++) {
    if (norm) w.g[v] = ld_table<8, L2ONLY>(gw.data, GDT ? GDT : gw.dtype, 8 * wv[v]);
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
#pragma unroll
  for (int k = 0; k < 8 * NV; k++) {
    o.bad |= !(scale_ok(o.r[k]) && offset_ok(o.of[k]));
    o.r[k] = rcp_approx(o.r[k]);
  }
}

// Whether two raw loads of the weights read the same bits: the words'
// differences ORed into four independent chains (after the wait, on the k
// and v warps' path: one chain of 24 dependent ORs was ~100 cycles).
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
// Blocks [0, dec_blocks_q) do q, then dec_blocks_k blocks do k, the rest v
// (the kind is uniform per block); a block's groups take consecutive (token,
// head) pairs of its kind, token-major. Every line the call reads first (the
// row, the position and slot, the norm weights, the cache scales, the cos/sin
// of the position as it reads then) is prefetched into L2 before the grid
// dependency wait; after it, every load that does not depend on another is
// issued at once, and cos/sin as soon as the position is in. Cache
// scales are read per lane (no shared table): every (k or v) head has a group
// for token 0, which checks the head's scales and offsets (reported, used or
// not); a head with a bad one skips its cache rows. SPEC: the k and v
// blocks also read and ready their norm weights and scales before the wait,
// speculatively. HOT: what the kernel knows of its call (kHot, | kHotCache
// with SPEC, or 0).
template <typename T, int L, int NV, bool INTER, bool SEP, bool SPEC, int HOT>
__global__ void __launch_bounds__(kFastBlock) decode_kernel(const __grid_constant__ qf_cu_params P) {
#if QF_FAST_DEVICE_CODE
  constexpr int GPB = kFastBlock / L, NCS = fast_ncs(INTER, SEP), N = 8 * NV;
  static_assert(!HOT || !SEP, "HOT: cos/sin from a cache");
  constexpr int TDT = HOT ? h16<T>::dtype : 0; /* HOT: the tables' dtype (the input's) */
  const int D = P.D, R = P.R, nl = D >> (NV == 1 ? 3 : 4); /* lanes with data */
  const int lane = threadIdx.x & (L - 1), grp = threadIdx.x / L;
  lane_vecs lv = {0, 0, false, false};
  int wv[NV]; /* the lane's vectors */
  if constexpr (NV == 1) {
    wv[0] = lane < nl ? lane : lane - nl;
  } else {
    lv = lane_layout<INTER>(lane, nl, R);
    wv[0] = lv.a, wv[NV - 1] = lv.b;
  }
  unsigned b = blockIdx.x;
  int kind = 0;
  qf_cu_div Nd = P.dec_q;
  if (b >= (unsigned)P.dec_blocks_q) {
    b -= P.dec_blocks_q, kind = 1, Nd = P.dec_kv;
    if (b >= (unsigned)P.dec_blocks_k) b -= P.dec_blocks_k, kind = 2;
  }
  const unsigned idx = b * GPB + grp, tu = div_fixed(idx, Nd);
  const int h = (int)(idx - tu * Nd.d);
  const int64_t t = tu;
  const bool live = t < P.T, act = live && lane < nl;
  const bool norm = kind == 0 ? P.q_norm : (kind == 1 && P.k_norm);
  const qf_cu_cache &C = kind == 1 ? P.k_cache : P.v_cache;
  const float *sc = kind == 1 ? P.k_scale : P.v_scale, *so = kind == 1 ? P.k_offset : P.v_offset;
  const bool quant = kind > 0 && C.data && C.quant != QKVFUSE_QUANT_NONE && sc;
  const bool pc = (kind == 1 ? P.k_scale_pc : P.v_scale_pc) != 0;
  /* one scale (and offset) per kv head: the head's, read below as a tensor's one */
  if (quant && (kind == 1 ? P.k_scale_ph : P.v_scale_ph)) sc += h, so = so ? so + h : so;
  const T *in = reinterpret_cast<const T *>(P.in[kind].data) + (act ? t : 0) * P.in[kind].ld + (int64_t)h * D;

  // the row, position and slot start their way while the previous kernel
  // finishes; the setup above reads only parameters; memory waits. (Warming
  // the constant cache with the parameters here gains nothing.)
  if (act) {
#pragma unroll
    for (int v = 0; v < NV; v++) prefetch_l2(in + 8 * wv[v]);
  }
  if (live && lane == 0) {
    if (HOT || P.positions.data)
      prefetch_l2(index_at(P.positions.data, HOT ? QKVFUSE_DTYPE_INT64 : P.positions.dtype, t));
    if (!HOT && P.page_table) { /* the token's own entries; the rest of the table depends on them */
      prefetch_l2(index_at(P.pt.batch, P.pt.batch_dtype, t));
      prefetch_l2(index_at(P.pt.pos, P.pt.pos_dtype, t));
    } else if ((HOT & kHotCache) || P.layout != QKVFUSE_CACHE_NONE) {
      prefetch_l2(index_at(P.slot_mapping.data, HOT ? QKVFUSE_DTYPE_INT64 : P.slot_mapping.dtype,
                           !HOT && P.layout == QKVFUSE_CACHE_CONTIGUOUS ? div_by<true>(t, P.S, P.batch_div) : t));
    }
  }
  // NV = 1, pairs from the cos/sin cache: the cos/sin lines of the
  // position as it reads now, into L2 (position_hint); the loads after the
  // wait then find them there. Prefetched, not loaded: after the wait their
  // round trip is hidden behind the normalization anyway
  const bool rot = NV == 1 ? (INTER ? 8 * wv[0] < R : wv[0] < (R >> 3)) : (lv.rot_a || lv.rot_b);
  if (NV == 1 && !SEP && kind < 2 && R > 0 && act && rot && (HOT || P.rope_source == QKVFUSE_ROPE_COS_SIN_CACHE) &&
      (HOT || P.positions.data)) {
    const int64_t hp = position_hint<HOT>(P, t);
    if (hp >= 0 && hp < P.max_pos) {
      const qf_cu_mat &csc = P.cos_sin_cache;
      const int64_t e = vec_cos_at<INTER>(csc, hp, wv[0], R);
      const int es = !HOT && csc.dtype == QKVFUSE_DTYPE_FLOAT32 ? 4 : 2;
      prefetch_l2(static_cast<const char *>(csc.data) + e * es);
      prefetch_l2(static_cast<const char *>(csc.data) + (e + (R >> 1)) * es);
    }
  }
  // the lines of the norm weights and cache scales into L2 as well, by the
  // groups of token 0 only: every token's groups read the same lines, and
  // prefetched by all of them they queue at one L2 slice. Their loads wait
  // for the previous kernel, which may write them.
  if (act && t == 0) {
    const qf_cu_vec &gw = kind == 0 ? P.q_gamma : P.k_gamma;
    const int ges = !HOT && gw.dtype == QKVFUSE_DTYPE_FLOAT32 ? 4 : 2;
#pragma unroll
    for (int v = 0; v < NV; v++) {
      if (norm) prefetch_l2(static_cast<const char *>(gw.data) + 8 * wv[v] * ges);
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
  // SPEC (one vector per lane and a quantized cache: backend.cu): the norm
  // weights and cache scales speculated: read (through L2 only) and readied
  // before the wait (they are the model's, which a previous kernel seldom
  // writes; their ~130 instructions then overlap it), read again after the
  // wait, and readied again unless both reads have the same bits
  // (test_cuda_pdl). Only the k and v blocks speculate (spec): the q
  // blocks' weights are a norm's alone, converted in a few instructions, so
  // speculating them costs more than it saves. The kernels without SPEC keep
  // their inline loads: the helpers below make them slower, and their SASS
  // depends on this code's exact form.
  const qf_cu_vec &gws = kind == 0 ? P.q_gamma : P.k_gamma;
  const bool wnorm = norm && act, wquant = quant && act, spec = SPEC && kind > 0;
  weights_raw<NV> wspec = {};
  lane_weights<NV> lw;
  if (spec) {
    wspec = load_weights<NV, true, TDT>(gws, sc, HOT ? nullptr : so, pc, wnorm, wquant, h * D, wv);
    ready_weights<NV>(wspec, TDT ? TDT : gws.dtype, P.gamma_offset, norm, wquant, lw);
  }
  // HOT: the mean's 1 / D (an IEEE division) readied before the wait, off the
  // normalization's critical path
  float rDh = 0.0f;
  if (HOT) {
    rDh = 1.0f / (float)D;
    asm volatile("" : "+f"(rDh));
  }
  grid_dependency_wait();

  // 1. every independent load at once
  uint4 raw[NV];
#pragma unroll
  for (int v = 0; v < NV; v++) raw[v] = act ? ld_stream(in + 8 * wv[v]) : make_uint4(0, 0, 0, 0);
  const token_ix ix = load_token_ix<true, HOT>(P, t);
  const weights_raw<NV> wraw = SPEC ? load_weights<NV, false, TDT>(gws, sc, HOT ? nullptr : so, pc, wnorm, wquant,
                                                                   h * D, wv)
                                     : weights_raw<NV>{};
  table_raw graw[NV] = {}, sraw[NV] = {}, oraw[NV] = {}; /* !SPEC */
  /* !SPEC: gws's twin, declared here on purpose: its place alone changes
     the non-SPEC kernels' SASS */
  const qf_cu_vec &gw = kind == 0 ? P.q_gamma : P.k_gamma;
  if (!SPEC && norm && act) {
#pragma unroll
    for (int v = 0; v < NV; v++) graw[v] = ld_table<8>(gw.data, TDT ? TDT : gw.dtype, 8 * wv[v]);
  }
  if (!SPEC && quant && act) {
#pragma unroll
    for (int v = 0; v < NV; v++) {
      const int ch = h * D + 8 * wv[v];
      if (pc) {
        sraw[v] = ld_table<8>(sc, QKVFUSE_DTYPE_FLOAT32, ch);
        if (!HOT && so) oraw[v] = ld_table<8>(so, QKVFUSE_DTYPE_FLOAT32, ch);
      } else {
        const uint32_t s0 = __float_as_uint(__ldg(sc)), o0 = !HOT && so ? __float_as_uint(__ldg(so)) : 0u;
        sraw[v].a = sraw[v].b = make_uint4(s0, s0, s0, s0);
        oraw[v].a = oraw[v].b = make_uint4(o0, o0, o0, o0);
      }
    }
  }

  // 2. cos/sin: issued as soon as the position is in (and in range: the
  // slot's check and page come after, during their round trip; a token with a
  // bad slot writes nothing either way); NV = 1: converted after the
  // normalization
  const bool pos_ok = !(HOT || P.positions.data) || (ix.pos >= 0 && ix.pos < P.max_pos);
  const bool rope = kind < 2 && R > 0 && pos_ok && act && rot;
  const int pos = (int)ix.pos; /* < max_pos <= 2^31 when used */
  float cs[NCS][8];
  vec_cs_raw csraw = {};
  if constexpr (NV == 1)
    csraw = vec_cs_load<INTER, SEP, TDT>(P, t, pos, wv[0], rope);
  else
    load_cos_sin<INTER, SEP, TDT>(P, t, pos, lv, rope, cs);

  // 3. the token: position and cache destination checked; the norm weights,
  // the scales
  const token_dest td =
      check_token<true, HOT>(P, t, ix, kind, live, [&] { return kind == 0 && h == 0 && lane == 0; });
  const bool ok = td.ok;
  float g[N], r[N], of[N]; /* !SPEC */
  bool bad = false;
  if (SPEC) {
    if (!spec || !same_weights<NV>(wraw, wspec))
      ready_weights<NV>(wraw, TDT ? TDT : gws.dtype, P.gamma_offset, norm, wquant, lw);
    if (lw.bad) report(P, QKVFUSE_DATA_ERROR_SCALE);
  } else {
    if (norm) {
#pragma unroll
      for (int v = 0; v < NV; v++) cvt_table<8>(graw[v], TDT ? TDT : gw.dtype, g + 8 * v);
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
#pragma unroll
      for (int k = 0; k < N; k++) {
        bad |= !(scale_ok(r[k]) && offset_ok(of[k]));
        r[k] = rcp_approx(r[k]);
      }
      if (bad) report(P, QKVFUSE_DATA_ERROR_SCALE);
    }
  }
  const float(&gk)[N] = SPEC ? lw.g : g, (&rk)[N] = SPEC ? lw.r : r, (&ofk)[N] = SPEC ? lw.of : of;
  // a bad scale of any lane skips the head's cache row (the group's lanes)
  const unsigned gmask = (L == 32 ? 0xffffffffu : (1u << L) - 1u) << (threadIdx.x & 31 & ~(L - 1));
  const bool gbad = (__ballot_sync(0xffffffffu, SPEC ? lw.bad : bad) & gmask) != 0;

  // 4. the head: normalized over the group, rotated
  float x[N];
  if constexpr (NV == 1) {
    unpack8<T>(raw[0], x);
    if (norm) {
      float s2[2] = {0.0f, 0.0f}; /* two chains: latency */
#pragma unroll
      for (int k = 0; k < 8; k++) s2[k & 1] = fmaf(x[k], x[k], s2[k & 1]);
      const float inv = rsqrtf(fmaf(group_sum<L>(s2[0] + s2[1]), HOT ? rDh : 1.0f / (float)D, P.eps));
#pragma unroll
      for (int k = 0; k < 8; k++) x[k] = x[k] * inv * gk[k];
    }
    float c[8], s[8];
    vec_cs_get<INTER, SEP, TDT>(P, csraw, pos, wv[0], rope, c, s);
    if (!INTER && kind < 2 && R > 0) { /* uniform per block: the partners' values by shuffles */
      const int hv = R >> 4, src = rot && act ? (wv[0] < hv ? lane + hv : lane - hv) : lane;
      float xp[8];
#pragma unroll
      for (int k = 0; k < 8; k++) xp[k] = __shfl_sync(0xffffffffu, x[k], src, L);
      if (rope) {
#pragma unroll
        for (int k = 0; k < 8; k++) x[k] = fmaf(x[k], c[k], xp[k] * s[k]);
      }
    } else if (INTER && rope) {
      rotate_pairs8(x, c, s);
    }
  } else {
    norm_rope<T, L, INTER, NCS>(raw[0], raw[NV - 1], norm, gk, HOT ? rDh : 1.0f / (float)D, P.eps, rope, cs, lv, x);
  }
  if (!(ok && act)) return;
  const qf_cu_mat &out = kind == 0 ? P.q_out : (kind == 1 ? P.k_out : P.v_out);
  store_head<T, NV, HOT>(out, C, C.quant != QKVFUSE_QUANT_NONE, true, kind > 0 && td.dest && C.data, t, td.row0, h,
                         D, wv, x, lane_scales<NV>{rk, ofk, gbad});
#else
  __trap();
#endif
}

}  // namespace qf

#endif  // QKVFUSE_CUDA_FAST_CUH
