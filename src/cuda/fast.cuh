// The streaming kernel: the common case of the fused prologue compiled tight.
//
// When. 16-bit input (bf16 or fp16) with 16-byte aligned rows, outputs of the
// input's dtype, D a multiple of 16 in [32, 512], R a multiple of 16, caches
// of the input's dtype or int8/fp8, RoPE tables readable as aligned vectors,
// no beta, not unfused-parity mode (the plan checks; fused.cuh does the rest).
//
// Work split. An item is (token, up to 4 heads of one kind: q, k or v). A
// group of L lanes (L = D/16 rounded up to a power of two) does one item with
// no barrier: it issues the loads of all its heads at once (two 16-byte
// vectors per lane per head, streaming loads), reads the token's cos/sin and
// the norm weights into registers (once per item), then normalizes, rotates
// and stores head by head. A work unit is kFastBlock / L groups on
// consecutive tokens of the same item slot, so the kind and head range are
// uniform per block; consecutive units take the other item slots of the same
// tokens. Blocks walk the units grid-stride and load the next unit's position
// and slot ahead; the grid has one block per unit, or, with quantized caches,
// the resident blocks, each of which first builds the reciprocal scales in
// shared memory. Decode-sized calls use one head per item (as many groups in
// flight as there are heads), prefill four (the per-item loads are amortized
// and each lane has 128 bytes in flight).
//
// Lane layout. Lane l holds two vectors of 8 elements, A = [8a, 8a+8) and
// B = [8b, 8b+8): neox with R = D: a = l, b = l + D/16, so a rotation pair
// (i, i + R/2) sits in one lane; neox with R < D: lanes l < R/16 hold pairs
// (a = l, b = l + R/16), the others two unrotated vectors past R;
// interleaved: a = l, b = l + D/16, pairs (2i, 2i+1) inside a vector.
//
// Errors: a token whose position or slot is outside its table writes nothing
// and sets a bit of *error_flags; a head whose cache scale or offset is zero
// or not finite skips its cache row. Bad scales and offsets are reported by
// the blocks that build the quantization table: together they build every
// head's part (T >= 1 gives every item slot a unit), so each bad value is
// reported, used or not.
#ifndef QKVFUSE_CUDA_FAST_CUH
#define QKVFUSE_CUDA_FAST_CUH

#include "cuda/fused.cuh"

namespace qf {

constexpr int kFastBlock = 128;
constexpr int kFastHeads = 4; /* most heads per item (2 with per-token cos/sin: registers) */
__host__ __device__ constexpr int fast_max_heads(bool sep) { return sep ? 2 : kFastHeads; }

// The input rows are read once and the outputs written once: streaming
// loads and stores (evict-first) keep them from displacing the tables and
// the next rows in L2 (measured: +5 to +7 points of copy bandwidth). The
// loads ask L2 to fetch 256-byte blocks (a group's 8-lane half-row is 128
// or 256 bytes; measured +0 to +2 points, in place). Volatile: never moved
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

// Two 16-bit values of a 32-bit word to and from float32.
template <typename T>
struct h16;
template <>
struct h16<__nv_bfloat16> {
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

template <int N>
__device__ __forceinline__ table_raw ld_table(const void *p, int dt, int64_t i) {
  static_assert(N == 4 || N == 8, "4 or 8 elements");
  table_raw r = {make_uint4(0, 0, 0, 0), make_uint4(0, 0, 0, 0)};
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

// 8 values to int8 (x * r (+ of)) or fp8 e4m3 (x * r) bytes.
__device__ __forceinline__ uint2 quant_bytes8(int quant, const float *x, const float *r, const float *of) {
  uint32_t w[2] = {0, 0};
  if (quant == QKVFUSE_QUANT_FP8_E4M3) {
#pragma unroll
    for (int k = 0; k < 8; k += 2) {
      const __nv_fp8x2_storage_t q2 =
          __nv_cvt_float2_to_fp8x2(make_float2(x[k] * r[k], x[k + 1] * r[k + 1]), __NV_SATFINITE, __NV_E4M3);
      uint32_t lo = q2 & 0xffu, hi = q2 >> 8;
      if (isnan(x[k])) lo = signbit(x[k]) ? 0xffu : 0x7fu; /* NaN keeps its sign (SPEC: documented) */
      if (isnan(x[k + 1])) hi = signbit(x[k + 1]) ? 0xffu : 0x7fu;
      w[k >> 2] |= (lo | hi << 8) << (8 * (k & 3));
    }
  } else if (quant == QKVFUSE_QUANT_INT8_ASYM) {
#pragma unroll
    for (int k = 0; k < 8; k++) w[k >> 2] |= sat_s8(fmaf(x[k], r[k], of[k])) << (8 * (k & 3));
  } else {
#pragma unroll
    for (int k = 0; k < 8; k++) w[k >> 2] |= sat_s8(x[k] * r[k]) << (8 * (k & 3));
  }
  return make_uint2(w[0], w[1]);
}

// The per-block quantization table, in shared memory (built once per block):
// reciprocal scales [2][W] (k, v; W = Nkv * D), offsets [2][W] when given,
// and per (k or v, head) a flag: a scale or offset of the head is bad.
__host__ __device__ inline size_t qtable_bytes(int W, int Nkv, bool offsets) {
  return sizeof(float) * (size_t)W * (offsets ? 4 : 2) + sizeof(int) * 2 * (size_t)Nkv;
}

// The table's flags: [2 * Nkv], (k or v) * Nkv + head.
__device__ __forceinline__ int *qtable_flags(const qf_cu_params &P, float *tab) {
  return reinterpret_cast<int *>(tab + (size_t)P.Nkv * P.D * (P.k_offset || P.v_offset ? 4 : 2));
}

// Fills the channels [i0, i1) of the [2W] (k, then v) table, whole heads
// (multiples of D); a block that does one unit fills only its item's heads.
// Reports every bad scale or offset it reads.
__device__ __forceinline__ void fill_qtable(const qf_cu_params &P, float *tab, int i0, int i1) {
  const int W = P.Nkv * P.D;
  const bool offsets = P.k_offset || P.v_offset;
  int *bad = qtable_flags(P, tab);
  for (int i = i0 / P.D + (int)threadIdx.x; i < i1 / P.D; i += blockDim.x) bad[i] = 0;
  __syncthreads();
  // chunks of 8 channels (inside one head: D % 16 == 0), two per thread per
  // round, every load of a round issued before any is used
  const int chunks = i1 / 8;
  for (int c0 = i0 / 8 + (int)threadIdx.x; c0 < chunks; c0 += 2 * blockDim.x) {
    float s[2][8], o[2][8];
    bool use[2];
#pragma unroll
    for (int h = 0; h < 2; h++) {
      const int c = c0 + h * blockDim.x, i = 8 * c, kv = i >= W;
      const float *sc = kv ? P.v_scale : P.k_scale, *of = kv ? P.v_offset : P.k_offset;
      use[h] = c < chunks && sc; /* a cache that is not quantized has no scales */
      if (!use[h]) continue;
      const int at = i - kv * W;
      if ((kv ? P.v_scale_pc : P.k_scale_pc) != 0) {
        ld_floats<8>(sc, QKVFUSE_DTYPE_FLOAT32, at, s[h]);
        if (of) ld_floats<8>(of, QKVFUSE_DTYPE_FLOAT32, at, o[h]);
      } else {
        const float s0 = __ldg(sc), o0 = of ? __ldg(of) : 0.0f;
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
      if (!use[h]) continue;
      const int i = 8 * (c0 + h * blockDim.x), kv = i >= W;
      bool ok = true;
#pragma unroll
      for (int k = 0; k < 8; k++) {
        ok &= scale_ok(s[h][k]) && offset_ok(o[h][k]);
        tab[i + k] = rcp_approx(s[h][k]);
        if (offsets) tab[2 * W + i + k] = o[h][k];
      }
      if (!ok) {
        atomicOr(&bad[kv * P.Nkv + (i - kv * W) / P.D], 1);
        report(P, QKVFUSE_DATA_ERROR_SCALE);
      }
    }
  }
  __syncthreads();
}

// a / b for 0 <= a and 0 < b, by a 32-bit division when both fit (a 64-bit
// division is a subroutine of ~70 instructions on the decode critical path).
__device__ __forceinline__ int64_t div_small(int64_t a, int64_t b) {
  if (((uint64_t)a | (uint64_t)b) >> 32 == 0) return (int64_t)((uint32_t)a / (uint32_t)b);
  return a / b;
}

// 8 floats of the shared-memory table at a multiple of 8 floats (32 bytes).
__device__ __forceinline__ void ld_shared8(const float *p, float *o) {
  const float4 a = reinterpret_cast<const float4 *>(p)[0], b = reinterpret_cast<const float4 *>(p)[1];
  o[0] = a.x, o[1] = a.y, o[2] = a.z, o[3] = a.w, o[4] = b.x, o[5] = b.y, o[6] = b.z, o[7] = b.w;
}

// Element offset of channel jj (a multiple of 8) of a token's row in a cache:
// chunk = D (paged, paged_hnd, contiguous) or a power of two (nz).
__device__ __forceinline__ int64_t cache_at(const qf_cu_cache &C, int64_t row0, int kvh, int e, int D) {
  if (C.chunk == D) return row0 + kvh * C.s_chunk + e;
  const int jj = kvh * D + e, sh = __ffs((int)C.chunk) - 1;
  return row0 + (int64_t)(jj >> sh) * C.s_chunk + (jj & ((int)C.chunk - 1));
}

// A token's raw position and slot (or contiguous start index): what the
// next work unit needs first, loaded one unit ahead.
struct token_ix {
  int64_t pos, slot;
};

__device__ __forceinline__ token_ix load_token_ix(const qf_cu_params &P, int64_t t) {
  token_ix x = {0, -1};
  if (t >= P.T) return x;
  if (P.positions.data) x.pos = ld_index(P.positions.data, P.positions.dtype, t);
  if (P.layout != QKVFUSE_CACHE_NONE) {
    const int64_t at = P.layout == QKVFUSE_CACHE_CONTIGUOUS ? div_small(t, P.S) : t;
    x.slot = ld_index(P.slot_mapping.data, P.slot_mapping.dtype, at);
  }
  return x;
}

// An item slot of a token: kind (0 q, 1 k, 2 v), first head, heads.
__device__ __forceinline__ void decode_item(const qf_cu_params &P, unsigned item, int &kind, int &h0, int &nh) {
  const int hpi = P.fast_hpi;
  if ((int)item < P.fast_items_q) {
    kind = 0, h0 = item * hpi, nh = min(hpi, P.Nq - h0);
  } else if ((int)item < P.fast_items_q + P.fast_items_k) {
    kind = 1, h0 = (item - P.fast_items_q) * hpi, nh = min(hpi, P.Nkv - h0);
  } else {
    kind = 2, h0 = (item - P.fast_items_q - P.fast_items_k) * hpi, nh = min(hpi, P.Nkv - h0);
  }
}

// SEP: cos/sin given per token at full length (COS_SIN source), so a neox
// lane's two halves have their own; otherwise they share the pair's.
template <typename T, int L, bool INTER, bool SEP>
__global__ void __launch_bounds__(kFastBlock, 4) fast_kernel(const qf_cu_params P) {
  constexpr int GPB = kFastBlock / L, NH = fast_max_heads(SEP);
  extern __shared__ __align__(16) float qtab[];
  const unsigned units = gridDim.x; /* blocks */
  const int D = P.D, R = P.R, nl = D >> 4, W = P.Nkv * D;
  const float rD = 1.0f / (float)D; /* mean of squares: a multiply, off the critical path */
  const int lane = threadIdx.x & (L - 1), grp = threadIdx.x / L;
  const unsigned ipt = (unsigned)P.fast_ipt;

  // the lane's two vectors and whether it rotates them
  int va, vb;
  bool rot_a, rot_b;
  if (INTER) {
    va = lane, vb = lane + nl;
    rot_a = 8 * va < R, rot_b = 8 * vb < R;
  } else if (lane < (R >> 4)) {
    va = lane, vb = lane + (R >> 4);
    rot_a = rot_b = true;
  } else {
    va = (R >> 3) + 2 * (lane - (R >> 4)), vb = va + 1;
    rot_a = rot_b = false;
  }

  // the setup above reads only parameters; memory waits for the previous kernel
  grid_dependency_wait();
  // work units: (GPB consecutive tokens, one item slot), grid-stride; the
  // next unit's position and slot are loaded while this one runs
  token_ix next = load_token_ix(P, (int64_t)(blockIdx.x / ipt) * GPB + grp);
  if (P.fast_qtable) {
    if (P.fast_units > units) { /* several units per block: every head */
      fill_qtable(P, qtab, 0, 2 * W);
    } else { /* one unit: its item's heads, none for q (uniform per block) */
      int kind, h0, nh;
      decode_item(P, blockIdx.x % ipt, kind, h0, nh);
      if (kind > 0) fill_qtable(P, qtab, (kind - 1) * W + h0 * D, (kind - 1) * W + (h0 + nh) * D);
    }
  }

  for (unsigned u = blockIdx.x; u < P.fast_units; u += units) {
    const token_ix ix = next;
    const unsigned tc = u / ipt, item = u - tc * ipt;
    const int64_t t = (int64_t)tc * GPB + grp;
    const bool live = t < P.T;          /* the group has a token */
    const bool act = live && lane < nl; /* the lane holds data */

    // the item: kind (0 q, 1 k, 2 v), first head, heads (uniform per block)
    int kind, h0, nh;
    decode_item(P, item, kind, h0, nh);

    // 1. every head's input, in flight at once
    const int col0 = kind == 0 ? 0 : (kind == 1 ? P.Nq * D : (P.Nq + P.Nkv) * D);
    const T *in = reinterpret_cast<const T *>(P.qkv.data) + (act ? t : 0) * P.qkv.ld + col0 + h0 * D;
    uint4 ra[NH], rb[NH];
#pragma unroll
    for (int i = 0; i < NH; i++) {
      ra[i] = rb[i] = make_uint4(0, 0, 0, 0);
      if (act && i < nh) {
        ra[i] = ld_stream(in + i * D + 8 * va);
        rb[i] = ld_stream(in + i * D + 8 * vb);
      }
    }
    if (u + units < P.fast_units) next = load_token_ix(P, (int64_t)((u + units) / ipt) * GPB + grp);

    // 2. the token: position and cache destination checked
    bool ok = live, dest = false;
    int64_t row0 = 0;
    if (live && P.positions.data && (ix.pos < 0 || ix.pos >= P.max_pos)) {
      ok = false;
      if (item == 0 && lane == 0) report(P, QKVFUSE_DATA_ERROR_POSITION);
    }
    if (live && P.layout != QKVFUSE_CACHE_NONE && ix.slot != -1) {
      const qf_cu_cache &C0 = P.k_cache;
      int64_t blk, row;
      bool bad;
      if (P.layout == QKVFUSE_CACHE_CONTIGUOUS) {
        blk = div_small(t, P.S), row = ix.slot + (t - blk * P.S);
        bad = ix.slot < 0 || ix.slot > C0.block_size - P.S;
      } else {
        blk = div_small(ix.slot, C0.block_size), row = ix.slot - blk * C0.block_size;
        bad = ix.slot < 0 || ix.slot >= C0.blocks * C0.block_size;
      }
      if (bad) {
        ok = false;
        if (item == 0 && lane == 0) report(P, QKVFUSE_DATA_ERROR_SLOT);
      } else {
        const qf_cu_cache &CC = kind == 1 ? P.k_cache : P.v_cache;
        dest = true, row0 = blk * CC.s_block + row * CC.s_row;
      }
    }

    // 3. per-item constants: norm weights, cos/sin of the lane's elements;
    // the loads of each pair before their conversion (registers allow no more)
    const bool norm = kind == 0 ? P.q_norm : (kind == 1 && P.k_norm);
    const qf_cu_vec &gw = kind == 0 ? P.q_gamma : P.k_gamma;
    table_raw graw[2];
    if (norm) {
      graw[0] = ld_table<8>(gw.data, gw.dtype, 8 * va);
      graw[1] = ld_table<8>(gw.data, gw.dtype, 8 * vb);
    }
    float g[16];
    if (norm) {
      cvt_table<8>(graw[0], gw.dtype, g);
      cvt_table<8>(graw[1], gw.dtype, g + 8);
      if (P.gamma_offset) {
#pragma unroll
        for (int k = 0; k < 16; k++) g[k] += 1.0f;
      }
    }
    constexpr int NCS = INTER || SEP ? 4 : 2;
    const int pos = (int)ix.pos; /* < max_pos <= 2^31 when used */
    const bool rope = kind < 2 && R > 0 && ok && act && (rot_a || rot_b);
    const bool cache_src = P.rope_source == QKVFUSE_ROPE_COS_SIN_CACHE;
    const qf_cu_mat &csc = P.cos_sin_cache;
    float cs[NCS][8]; /* cos A, sin A (, cos B, sin B) */
    if (rope && (SEP || cache_src)) {
      // tables, one (cos, sin) pair per lane vector: SEP (COS_SIN, as given)
      // for the rotated vectors; a neox cache row serves both vectors
#pragma unroll
      for (int v = 0; v < (SEP || INTER ? 2 : 1); v++) {
        const int w = v ? vb : va;
        if (SEP ? !(v ? rot_b : rot_a) : (INTER && 8 * w >= R)) continue;
        table_raw c2[2];
        if (SEP) {
          c2[0] = ld_table<8>(P.cos.data, P.cos.dtype, t * P.cos.ld + 8 * w);
          c2[1] = ld_table<8>(P.sin.data, P.sin.dtype, t * P.sin.ld + 8 * w);
          cvt_table<8>(c2[0], P.cos.dtype, cs[2 * v]);
          cvt_table<8>(c2[1], P.sin.dtype, cs[2 * v + 1]);
        } else if (!INTER) { /* pairs 8a .. 8a+7 */
          const int64_t base = (int64_t)pos * csc.ld + 8 * va;
          c2[0] = ld_table<8>(csc.data, csc.dtype, base);
          c2[1] = ld_table<8>(csc.data, csc.dtype, base + (R >> 1));
          cvt_table<8>(c2[0], csc.dtype, cs[0]);
          cvt_table<8>(c2[1], csc.dtype, cs[1]);
        } else { /* vector w holds pairs 4w .. 4w+3 */
          const int64_t base = (int64_t)pos * csc.ld + 4 * w;
          c2[0] = ld_table<4>(csc.data, csc.dtype, base);
          c2[1] = ld_table<4>(csc.data, csc.dtype, base + (R >> 1));
          float c[4], sn[4];
          cvt_table<4>(c2[0], csc.dtype, c);
          cvt_table<4>(c2[1], csc.dtype, sn);
#pragma unroll
          for (int k = 0; k < 8; k++) cs[2 * v][k] = c[k >> 1], cs[2 * v + 1][k] = sn[k >> 1];
        }
      }
    } else if (rope) { /* COMPUTED */
#pragma unroll
      for (int v = 0; v < NCS / 2; v++) {
        const int w = v ? vb : va;
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

    // 4. the heads
    const qf_cu_mat &out = kind == 0 ? P.q_out : (kind == 1 ? P.k_out : P.v_out);
    const qf_cu_cache &C = kind == 1 ? P.k_cache : P.v_cache;
    const bool to_cache = kind > 0 && dest && C.data;
    const float *rtab = qtab + (kind == 2 ? W : 0), *otab = qtab + 2 * W + (kind == 2 ? W : 0);
    const int *badtab = qtable_flags(P, qtab) + (kind == 2 ? P.Nkv : 0);
#pragma unroll
    for (int i = 0; i < NH; i++) {
      if (i >= nh) break; /* uniform per block */
      float x[16];
      unpack8<T>(ra[i], x);
      unpack8<T>(rb[i], x + 8);
      if (norm) {
        float s4[4] = {0.0f, 0.0f, 0.0f, 0.0f}; /* four chains: latency */
#pragma unroll
        for (int k = 0; k < 16; k++) s4[k & 3] = fmaf(x[k], x[k], s4[k & 3]);
        float ss = (s4[0] + s4[1]) + (s4[2] + s4[3]);
#pragma unroll
        for (int off = L >> 1; off > 0; off >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, off, L);
        const float inv = rsqrtf(fmaf(ss, rD, P.eps));
#pragma unroll
        for (int k = 0; k < 16; k++) x[k] = x[k] * inv * g[k];
      }
      if (rope) {
        if (!INTER) {
#pragma unroll
          for (int k = 0; k < 8; k++) {
            const float a = x[k], b = x[8 + k];
            x[k] = fmaf(a, cs[0][k], -b * cs[1][k]);
            x[8 + k] = fmaf(b, cs[NCS - 2][k], a * cs[NCS - 1][k]);
          }
        } else {
#pragma unroll
          for (int v = 0; v < 2; v++) {
            if (!(v ? rot_b : rot_a)) continue;
            float *y = x + 8 * v;
            const float *c = cs[(2 * v) % NCS], *sn = cs[(2 * v + 1) % NCS];
#pragma unroll
            for (int k = 0; k < 8; k += 2) {
              const float a = y[k], b = y[k + 1];
              y[k] = fmaf(a, c[k], -b * sn[k]);
              y[k + 1] = fmaf(b, c[k + 1], a * sn[k + 1]);
            }
          }
        }
      }
      if (!(ok && act)) continue;
      const int kvh = h0 + i;
      if (out.data) {
        T *o = reinterpret_cast<T *>(out.data) + t * out.ld + kvh * D;
        st_stream(o + 8 * va, pack8<T>(x));
        st_stream(o + 8 * vb, pack8<T>(x + 8));
      }
      if (!to_cache) continue;
      if (C.quant == QKVFUSE_QUANT_NONE) {
        T *c = reinterpret_cast<T *>(C.data);
        st_stream(c + cache_at(C, row0, kvh, 8 * va, D), pack8<T>(x));
        st_stream(c + cache_at(C, row0, kvh, 8 * vb, D), pack8<T>(x + 8));
        continue;
      }
      // quantized (k after RoPE, v as read) with the table's reciprocal
      // scales; a head with a bad scale or offset skips its row (the table's
      // builder reported it)
      if (badtab[kvh]) continue;
      uint8_t *c = static_cast<uint8_t *>(C.data);
#pragma unroll
      for (int v = 0; v < 2; v++) {
        const int ch = kvh * D + 8 * (v ? vb : va);
        float r[8], of[8];
        ld_shared8(rtab + ch, r);
        if (C.quant == QKVFUSE_QUANT_INT8_ASYM) ld_shared8(otab + ch, of);
        st_stream(c + cache_at(C, row0, kvh, 8 * (v ? vb : va), D), quant_bytes8(C.quant, x + 8 * v, r, of));
      }
    }
  }
}

}  // namespace qf

#endif  // QKVFUSE_CUDA_FAST_CUH
