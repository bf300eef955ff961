/* SPDX-License-Identifier: Apache-2.0 */
/* The vector layer of kernels.h for AVX-512 (F, BW, VL, DQ; and BF16 where
 * compiled with it): 16 float lanes.
 *
 * Every operation is the IEEE float32 operation of the scalar reference, lane
 * by lane; conversions reproduce core/dtype.h bit for bit:
 *   - bfloat16 stores use VCVTNEPS2BF16 when compiled for AVX512_BF16 (the
 *     avx512bf16 kernels); it treats float32 subnormal inputs as zero
 *     where dtype.h rounds them, so a vector holding one
 *     takes the integer round-to-nearest-even path, which is what the plain
 *     avx512 kernels always use;
 *   - float16 uses VCVTPS2PH / VCVTPH2PS with round-to-nearest-even, which
 *     match dtype.h including subnormals, overflow and NaN payloads;
 *   - int8, e4m3 and e5m2 quantization divide (not multiply by the reciprocal), as
 *     docs/API.md promises, then round half to even and saturate.
 * No fused multiply-add anywhere: results must not depend on the ISA. */
#ifndef QKVFUSE_CPU_SIMD_AVX512_H
#define QKVFUSE_CPU_SIMD_AVX512_H

#include <immintrin.h>
#include <stdint.h>

#define QV_W 16
typedef __m512 qv;

static inline qv qv_set1(float f) { return _mm512_set1_ps(f); }
static inline qv qv_loadu(const float *p) { return _mm512_loadu_ps(p); }
static inline void qv_storeu(float *p, qv v) { _mm512_storeu_ps(p, v); }
static inline qv qv_add(qv a, qv b) { return _mm512_add_ps(a, b); }
static inline qv qv_sub(qv a, qv b) { return _mm512_sub_ps(a, b); }
static inline qv qv_mul(qv a, qv b) { return _mm512_mul_ps(a, b); }
static inline qv qv_div(qv a, qv b) { return _mm512_div_ps(a, b); }
static inline qv qv_sqrt(qv a) { return _mm512_sqrt_ps(a); }

/* Interleaved RoPE on pairs (2i, 2i+1) of lanes:
 * even: y[a]*c[a] - y[b]*s[a], odd: y[b]*c[b] + y[a]*s[b]. */
static inline qv qv_rope_pairs(qv y, qv c, qv s) {
  const qv p1 = _mm512_mul_ps(y, c);
  const qv p2 = _mm512_mul_ps(_mm512_permute_ps(y, 0xB1), s); /* pairs swapped */
  return _mm512_mask_sub_ps(_mm512_add_ps(p1, p2), 0x5555, p1, p2);
}

/* ---- loads: 16 elements to float32 ---- */
static inline qv qv_load_bf16(const uint16_t *p) {
  const __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
}
static inline qv qv_load_f16(const uint16_t *p) { return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p)); }
static inline qv qv_load_i32(const int32_t *p) { return _mm512_cvtepi32_ps(_mm512_loadu_si512((const void *)p)); }

/* ---- stores with one rounding ---- */
/* bfloat16 bits (in the low half of each lane) of qf_f32_to_bf16 */
static inline __m512i qv_bf16_bits(qv v) {
  const __m512i u = _mm512_castps_si512(v);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  const __m512i rne = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff))), 16);
  const __m512i qnan = _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
  return _mm512_mask_mov_epi32(rne, _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), qnan);
}
#ifdef __AVX512BF16__
/* VCVTNEPS2BF16 rounds to nearest even and quiets NaN exactly as dtype.h, but
 * flushes float32 subnormal inputs to zero: those (rare) vectors take the
 * integer path. */
static inline __m256i qv_bf16_16(qv v) {
  if (__builtin_expect(_mm512_fpclass_ps_mask(v, 0x20) != 0, 0)) /* 0x20: subnormal */
    return _mm512_cvtepi32_epi16(qv_bf16_bits(v));
  return (__m256i)_mm512_cvtneps_pbh(v);
}
static inline qv qv_round_bf16(qv v) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(qv_bf16_16(v)), 16));
}
#else
static inline __m256i qv_bf16_16(qv v) { return _mm512_cvtepi32_epi16(qv_bf16_bits(v)); }
static inline qv qv_round_bf16(qv v) { return _mm512_castsi512_ps(_mm512_slli_epi32(qv_bf16_bits(v), 16)); }
#endif
static inline void qv_store_bf16(uint16_t *p, qv v) { _mm256_storeu_si256((__m256i *)p, qv_bf16_16(v)); }
#ifdef __AVX512BF16__
/* The fast row store of kernels.h: 32 elements by one VCVTNE2PS2BF16, no
 * subnormal check; the caller ORs qv_subnormals() over the row and redoes it
 * with qv_store2_bf16 if any lane was subnormal. */
#define QV_BF16_ROW_FAST 1
static inline void qv_store2_bf16_unchecked(uint16_t *p, qv a, qv b) {
  _mm512_storeu_si512((void *)p, (__m512i)_mm512_cvtne2ps_pbh(b, a));
}
static inline unsigned qv_subnormals(qv a, qv b) {
  return (unsigned)_mm512_kor(_mm512_fpclass_ps_mask(a, 0x20), _mm512_fpclass_ps_mask(b, 0x20));
}
#endif
/* 32 elements in one 64-byte store: a whole cache line when aligned, which
 * lets the core skip reading the line before overwriting it */
static inline void qv_store2_bf16(uint16_t *p, qv a, qv b) {
  _mm512_storeu_si512((void *)p, _mm512_inserti64x4(_mm512_castsi256_si512(qv_bf16_16(a)), qv_bf16_16(b), 1));
}
static inline void qv_store_f16(uint16_t *p, qv v) {
  _mm256_storeu_si256((__m256i *)p, _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
}
static inline void qv_store2_f16(uint16_t *p, qv a, qv b) {
  const __m512i w = _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvtps_ph(a, _MM_FROUND_TO_NEAREST_INT)),
                                       _mm512_cvtps_ph(b, _MM_FROUND_TO_NEAREST_INT), 1);
  _mm512_storeu_si512((void *)p, w);
}
/* the value a store would keep (unfused-parity intermediates) */
static inline qv qv_round_f16(qv v) { return _mm512_cvtph_ps(_mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT)); }

/* ---- quantization (stages.h qf_stage_quant_store) ---- */
/* int8: NaN -> 0, else sat8(rint(v / s [+ off])) */
static inline void qv_store_int8(int8_t *p, qv v, qv s, qv off, int asym) {
  const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
  qv q = _mm512_div_ps(v, s);
  if (asym) q = _mm512_add_ps(q, off);
  /* clamping to the integer bounds before rounding gives the same result */
  q = _mm512_min_ps(_mm512_max_ps(q, _mm512_set1_ps(-128.0f)), _mm512_set1_ps(127.0f));
  const __m512i i = _mm512_maskz_mov_epi32((__mmask16)~nan, _mm512_cvtps_epi32(q)); /* MXCSR: nearest even */
  _mm_storeu_si128((__m128i *)p, _mm512_cvtepi32_epi8(i));
}

/* fp8 codes of q (not NaN) in each lane: qf_f32_to_fp8 of a format of mbits
 * mantissa bits, bias `bias`, largest finite maxval (code maxcode); the
 * formats' callers pass constants. */
static inline __m512i qv_fp8_codes(qv q, int mbits, int bias, float maxval, int maxcode) {
  const int drop = 23 - mbits;
  const __m512i u = _mm512_castps_si512(q);
  const __m512i sign = _mm512_and_si512(_mm512_srli_epi32(u, 24), _mm512_set1_epi32(0x80));
  const __m512i au = _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff));
  const qv a = _mm512_castsi512_ps(au);
  const __mmask16 big = _mm512_cmp_ps_mask(a, _mm512_set1_ps(maxval), _CMP_GE_OQ);
  const __mmask16 small = _mm512_cmp_ps_mask(a, _mm512_set1_ps(1.0f / (float)(1u << (bias - 1))), _CMP_LT_OQ);
  /* normal: rebias the exponent (a normal's exponent field is >= 128 - bias) and round the dropped bits */
  __m512i m = _mm512_sub_epi32(au, _mm512_set1_epi32((127 - bias) << 23));
  m = _mm512_add_epi32(m, _mm512_add_epi32(_mm512_set1_epi32((1 << (drop - 1)) - 1),
                                           _mm512_and_si512(_mm512_srli_epi32(m, drop), _mm512_set1_epi32(1))));
  __m512i r = _mm512_min_epu32(_mm512_srli_epi32(m, drop), _mm512_set1_epi32(maxcode));
  /* subnormal: steps of 2^(1-bias-mbits), nearest even */
  r = _mm512_mask_mov_epi32(r, small,
                            _mm512_cvtps_epi32(_mm512_mul_ps(a, _mm512_set1_ps((float)(1u << (bias - 1 + mbits))))));
  r = _mm512_mask_mov_epi32(r, big, _mm512_set1_epi32(maxcode));
  return _mm512_or_si512(r, sign);
}

/* fp8 of that format: NaN -> the NaN 0x7F of v's sign, else fp8(v / s) */
static inline void qv_store_fp8(uint8_t *p, qv v, qv s, int mbits, int bias, float maxval, int maxcode) {
  const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
  __m512i r = qv_fp8_codes(_mm512_div_ps(v, s), mbits, bias, maxval, maxcode);
  const __m512i nan_code =
      _mm512_or_si512(_mm512_set1_epi32(0x7f),
                      _mm512_and_si512(_mm512_srli_epi32(_mm512_castps_si512(v), 24), _mm512_set1_epi32(0x80)));
  r = _mm512_mask_mov_epi32(r, nan, nan_code);
  _mm_storeu_si128((__m128i *)p, _mm512_cvtepi32_epi8(r));
}

/* fp8 e4m3fn and e5m2 */
static inline void qv_store_e4m3(uint8_t *p, qv v, qv s) { qv_store_fp8(p, v, s, 3, 7, 448.0f, 0x7e); }
static inline void qv_store_e5m2(uint8_t *p, qv v, qv s) { qv_store_fp8(p, v, s, 2, 15, 57344.0f, 0x7b); }

/* ---- RMSNorm's sum of squares, heads in lanes ---- */
/* In place: r[g] holds 16 consecutive 32-bit elements of head g; afterwards
 * r[k] holds element k of the 16 heads (lane g = head g). Used to add each
 * head's squares in the reference's sequential order with heads in lanes. */
static inline void qv_transpose(qv *r) {
  __m512 t[16];
  for (int i = 0; i < 16; i += 2) { /* lane k: [a_i(4k), a_i+1(4k), a_i(4k+1), a_i+1(4k+1)] / (4k+2, 4k+3) */
    t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int m = 0; m < 16; m += 4) { /* r[m + j], lane k: rows m..m+3 at column 4k + j */
    r[m + 0] = _mm512_shuffle_ps(t[m + 0], t[m + 2], 0x44);
    r[m + 1] = _mm512_shuffle_ps(t[m + 0], t[m + 2], 0xEE);
    r[m + 2] = _mm512_shuffle_ps(t[m + 1], t[m + 3], 0x44);
    r[m + 3] = _mm512_shuffle_ps(t[m + 1], t[m + 3], 0xEE);
  }
  for (int j = 0; j < 4; j++) { /* column 4k + j of all 16 rows */
    const __m512 v0 = _mm512_shuffle_f32x4(r[j], r[4 + j], 0x44), v1 = _mm512_shuffle_f32x4(r[j], r[4 + j], 0xEE);
    const __m512 v2 = _mm512_shuffle_f32x4(r[8 + j], r[12 + j], 0x44);
    const __m512 v3 = _mm512_shuffle_f32x4(r[8 + j], r[12 + j], 0xEE);
    t[j] = _mm512_shuffle_f32x4(v0, v2, 0x88);
    t[4 + j] = _mm512_shuffle_f32x4(v0, v2, 0xDD);
    t[8 + j] = _mm512_shuffle_f32x4(v1, v3, 0x88);
    t[12 + j] = _mm512_shuffle_f32x4(v1, v3, 0xDD);
  }
  for (int k = 0; k < 16; k++) r[k] = t[k];
}

/* A 32-bit lane holding two bfloat16 [x_even | x_odd << 16] (little endian):
 * each as float32, with integer operations only (no shuffle port). */
static inline qv qv_bf16_even(qv pair) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_castps_si512(pair), 16)); }
static inline qv qv_bf16_odd(qv pair) {
  return _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(pair), _mm512_set1_epi32((int)0xffff0000u)));
}

/* ---- copies of 16-bit floats to the same dtype (dtype.h's round trip) ---- */
#define QV_COPY16 32 /* elements per qv_copy_quiet16 */
/* QV_COPY16 elements: NaN quieted (bf16: | 0x0040, f16: | 0x0200), all else as is. */
static inline void qv_copy_quiet16(uint16_t *dst, const uint16_t *src, uint16_t inf_bits, uint16_t quiet_bit) {
  const __m512i x = _mm512_loadu_si512((const void *)src);
  const __mmask32 nan =
      _mm512_cmpgt_epu16_mask(_mm512_and_si512(x, _mm512_set1_epi16(0x7fff)), _mm512_set1_epi16((short)inf_bits));
  const __m512i quiet = _mm512_or_si512(x, _mm512_set1_epi16((short)quiet_bit));
  _mm512_storeu_si512((void *)dst, _mm512_mask_mov_epi16(x, nan, quiet));
}

#endif /* QKVFUSE_CPU_SIMD_AVX512_H */
