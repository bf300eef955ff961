/* SPDX-License-Identifier: Apache-2.0 */
/* The vector layer of kernels.h for AVX2 + F16C: 8 float lanes. The same
 * operations as simd_avx512.h (see there for why each conversion is exact);
 * AVX2 has no mask registers, so selections are blends. No FMA. */
#ifndef QKVFUSE_CPU_SIMD_AVX2_H
#define QKVFUSE_CPU_SIMD_AVX2_H

#include <immintrin.h>
#include <stdint.h>

#define QV_W 8
typedef __m256 qv;

static inline qv qv_set1(float f) { return _mm256_set1_ps(f); }
static inline qv qv_loadu(const float *p) { return _mm256_loadu_ps(p); }
static inline void qv_storeu(float *p, qv v) { _mm256_storeu_ps(p, v); }
static inline qv qv_add(qv a, qv b) { return _mm256_add_ps(a, b); }
static inline qv qv_sub(qv a, qv b) { return _mm256_sub_ps(a, b); }
static inline qv qv_mul(qv a, qv b) { return _mm256_mul_ps(a, b); }
static inline qv qv_div(qv a, qv b) { return _mm256_div_ps(a, b); }
static inline qv qv_sqrt(qv a) { return _mm256_sqrt_ps(a); }

/* Interleaved RoPE: even lanes p1 - p2, odd lanes p1 + p2 (VADDSUBPS). */
static inline qv qv_rope_pairs(qv y, qv c, qv s) {
  return _mm256_addsub_ps(_mm256_mul_ps(y, c), _mm256_mul_ps(_mm256_permute_ps(y, 0xB1), s));
}

/* ---- loads: 8 elements to float32 ---- */
static inline qv qv_load_bf16(const uint16_t *p) {
  const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}
static inline qv qv_load_f16(const uint16_t *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }
static inline qv qv_load_i32(const int32_t *p) { return _mm256_cvtepi32_ps(_mm256_loadu_si256((const __m256i *)p)); }

/* ---- stores with one rounding ---- */
static inline __m256i qv_bf16_bits(qv v) {
  const __m256i u = _mm256_castps_si256(v);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  const __m256i rne = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff))), 16);
  const __m256i qnan = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
  return _mm256_blendv_epi8(rne, qnan, _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q)));
}
/* 8 lanes holding values 0..65535 -> 8 uint16 */
static inline __m128i qv_pack_u16(__m256i w) {
  return _mm_packus_epi32(_mm256_castsi256_si128(w), _mm256_extracti128_si256(w, 1));
}
static inline void qv_store_bf16(uint16_t *p, qv v) { _mm_storeu_si128((__m128i *)p, qv_pack_u16(qv_bf16_bits(v))); }
static inline void qv_store_f16(uint16_t *p, qv v) {
  _mm_storeu_si128((__m128i *)p, _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
}
/* two vectors, 32 bytes: one store */
static inline void qv_store2_bf16(uint16_t *p, qv a, qv b) {
  _mm256_storeu_si256((__m256i *)p, _mm256_set_m128i(qv_pack_u16(qv_bf16_bits(b)), qv_pack_u16(qv_bf16_bits(a))));
}
static inline void qv_store2_f16(uint16_t *p, qv a, qv b) {
  _mm256_storeu_si256((__m256i *)p, _mm256_set_m128i(_mm256_cvtps_ph(b, _MM_FROUND_TO_NEAREST_INT),
                                                     _mm256_cvtps_ph(a, _MM_FROUND_TO_NEAREST_INT)));
}
static inline qv qv_round_bf16(qv v) { return _mm256_castsi256_ps(_mm256_slli_epi32(qv_bf16_bits(v), 16)); }
static inline qv qv_round_f16(qv v) { return _mm256_cvtph_ps(_mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT)); }

/* ---- quantization ---- */
static inline void qv_store_int8(int8_t *p, qv v, qv s, qv off, int asym) {
  const __m256 nan = _mm256_cmp_ps(v, v, _CMP_UNORD_Q);
  qv q = _mm256_div_ps(v, s);
  if (asym) q = _mm256_add_ps(q, off);
  q = _mm256_min_ps(_mm256_max_ps(q, _mm256_set1_ps(-128.0f)), _mm256_set1_ps(127.0f));
  const __m256i i = _mm256_andnot_si256(_mm256_castps_si256(nan), _mm256_cvtps_epi32(q));
  const __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(i), _mm256_extracti128_si256(i, 1));
  _mm_storel_epi64((__m128i *)p, _mm_packs_epi16(w, w));
}

/* fp8 codes of q (not NaN) in each lane: qf_f32_to_fp8 of a format of mbits
 * mantissa bits, bias `bias`, largest finite maxval (code maxcode); the
 * formats' callers pass constants. */
static inline __m256i qv_fp8_codes(qv q, int mbits, int bias, float maxval, int maxcode) {
  const int drop = 23 - mbits;
  const __m256i u = _mm256_castps_si256(q);
  const __m256i sign = _mm256_and_si256(_mm256_srli_epi32(u, 24), _mm256_set1_epi32(0x80));
  const __m256i au = _mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff));
  const qv a = _mm256_castsi256_ps(au);
  const __m256i big = _mm256_castps_si256(_mm256_cmp_ps(a, _mm256_set1_ps(maxval), _CMP_GE_OQ));
  const __m256i small =
      _mm256_castps_si256(_mm256_cmp_ps(a, _mm256_set1_ps(1.0f / (float)(1u << (bias - 1))), _CMP_LT_OQ));
  __m256i m = _mm256_sub_epi32(au, _mm256_set1_epi32((127 - bias) << 23));
  m = _mm256_add_epi32(m, _mm256_add_epi32(_mm256_set1_epi32((1 << (drop - 1)) - 1),
                                           _mm256_and_si256(_mm256_srli_epi32(m, drop), _mm256_set1_epi32(1))));
  __m256i r = _mm256_min_epu32(_mm256_srli_epi32(m, drop), _mm256_set1_epi32(maxcode));
  r = _mm256_blendv_epi8(r, _mm256_cvtps_epi32(_mm256_mul_ps(a, _mm256_set1_ps((float)(1u << (bias - 1 + mbits))))),
                         small);
  r = _mm256_blendv_epi8(r, _mm256_set1_epi32(maxcode), big);
  return _mm256_or_si256(r, sign);
}

/* fp8 of that format: NaN -> the NaN 0x7F of v's sign, else fp8(v / s) */
static inline void qv_store_fp8(uint8_t *p, qv v, qv s, int mbits, int bias, float maxval, int maxcode) {
  const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
  __m256i r = qv_fp8_codes(_mm256_div_ps(v, s), mbits, bias, maxval, maxcode);
  const __m256i nan_code =
      _mm256_or_si256(_mm256_set1_epi32(0x7f),
                      _mm256_and_si256(_mm256_srli_epi32(_mm256_castps_si256(v), 24), _mm256_set1_epi32(0x80)));
  r = _mm256_blendv_epi8(r, nan_code, nan);
  const __m128i w = _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
  _mm_storel_epi64((__m128i *)p, _mm_packus_epi16(w, w));
}

static inline void qv_store_e4m3(uint8_t *p, qv v, qv s) { qv_store_fp8(p, v, s, 3, 7, 448.0f, 0x7e); }
static inline void qv_store_e5m2(uint8_t *p, qv v, qv s) { qv_store_fp8(p, v, s, 2, 15, 57344.0f, 0x7b); }

/* ---- RMSNorm's sum of squares, heads in lanes: as simd_avx512.h, 8 x 8 ---- */
static inline void qv_transpose(qv *r) {
  __m256 t[8];
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int m = 0; m < 8; m += 4) { /* r[m + j], lane k: rows m..m+3 at column 4k + j */
    r[m + 0] = _mm256_shuffle_ps(t[m + 0], t[m + 2], 0x44);
    r[m + 1] = _mm256_shuffle_ps(t[m + 0], t[m + 2], 0xEE);
    r[m + 2] = _mm256_shuffle_ps(t[m + 1], t[m + 3], 0x44);
    r[m + 3] = _mm256_shuffle_ps(t[m + 1], t[m + 3], 0xEE);
  }
  for (int j = 0; j < 4; j++) { /* column 4k + j of all 8 rows */
    t[j] = _mm256_permute2f128_ps(r[j], r[4 + j], 0x20);
    t[4 + j] = _mm256_permute2f128_ps(r[j], r[4 + j], 0x31);
  }
  for (int k = 0; k < 8; k++) r[k] = t[k];
}

static inline qv qv_bf16_even(qv pair) { return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_castps_si256(pair), 16)); }
static inline qv qv_bf16_odd(qv pair) {
  return _mm256_castsi256_ps(_mm256_and_si256(_mm256_castps_si256(pair), _mm256_set1_epi32((int)0xffff0000u)));
}

/* ---- copies of 16-bit floats to the same dtype (dtype.h's round trip) ---- */
#define QV_COPY16 16
static inline void qv_copy_quiet16(uint16_t *dst, const uint16_t *src, uint16_t inf_bits, uint16_t quiet_bit) {
  const __m256i x = _mm256_loadu_si256((const __m256i *)src);
  /* (x & 0x7fff) > inf: a signed compare is right, both sides are below 0x8000 */
  const __m256i nan =
      _mm256_cmpgt_epi16(_mm256_and_si256(x, _mm256_set1_epi16(0x7fff)), _mm256_set1_epi16((short)inf_bits));
  _mm256_storeu_si256((__m256i *)dst, _mm256_or_si256(x, _mm256_and_si256(nan, _mm256_set1_epi16((short)quiet_bit))));
}

#endif /* QKVFUSE_CPU_SIMD_AVX2_H */
