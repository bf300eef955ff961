/* SPDX-License-Identifier: Apache-2.0 */
/* Scalar element conversions shared by the CPU code: loads to float32, stores
 * from float32 with one round-to-nearest-even, and the quantizers of SPEC.md
 * stage 4. Bit manipulation only, so the results do not depend on the
 * compiler's _Float16/__bf16 support or the FPU rounding mode. */
#ifndef QKVFUSE_CORE_DTYPE_H
#define QKVFUSE_CORE_DTYPE_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "qkvfuse.h"

static inline uint32_t qf_f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

static inline float qf_bits_f32(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* bfloat16 */
static inline float qf_bf16_to_f32(uint16_t h) { return qf_bits_f32((uint32_t)h << 16); }

static inline uint16_t qf_f32_to_bf16(float f) {
  uint32_t u = qf_f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u); /* quiet NaN, sign kept */
  u += 0x7fffu + ((u >> 16) & 1u);                                            /* RNE; overflow -> inf */
  return (uint16_t)(u >> 16);
}

/* IEEE binary16 */
static inline float qf_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;
  if (exp == 0x1fu) return qf_bits_f32(sign | 0x7f800000u | (man << 13));
  if (exp == 0) {
    /* zero or subnormal: man * 2^-24, exact in float32 */
    float v = (float)man * 5.9604644775390625e-08f;
    return sign ? -v : v;
  }
  return qf_bits_f32(sign | ((exp + 112u) << 23) | (man << 13));
}

static inline uint16_t qf_f32_to_f16(float f) {
  uint32_t u = qf_f32_bits(f);
  uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
  uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu)); /* NaN */
  if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* >= 65520 rounds to inf */
  if (a < 0x38800000u) {
    /* result is subnormal or zero: value / 2^-24, rounded to nearest even integer */
    float v = qf_bits_f32(a) * 16777216.0f; /* exact: scaling by 2^24 */
    float r = rintf(v);                     /* default rounding mode: nearest even */
    return (uint16_t)(sign | (uint16_t)r);
  }
  /* normal: rebias exponent and round the 13 dropped mantissa bits */
  uint32_t m = a + ((uint32_t)(15 - 127) << 23);
  m += 0xfffu + ((m >> 13) & 1u);
  return (uint16_t)(sign | (m >> 13));
}

/* OCP float8 e4m3fn: 1 sign, 4 exponent (bias 7), 3 mantissa; no inf; NaN = S.1111.111. */
static inline float qf_e4m3_to_f32(uint8_t b) {
  uint32_t sign = b & 0x80u;
  uint32_t exp = (b >> 3) & 0xfu;
  uint32_t man = b & 0x7u;
  float v;
  if (exp == 0xfu && man == 0x7u) return sign ? -NAN : NAN;
  if (exp == 0)
    v = (float)man * 0.001953125f; /* subnormal: man * 2^-9 */
  else
    v = ldexpf(1.0f + (float)man * 0.125f, (int)exp - 7);
  return sign ? -v : v;
}

/* The quantizer's OCP fp8 codes: a format of `mbits` mantissa bits and
 * exponent bias `bias`, whose largest finite value is `maxval` (code
 * `maxcode`); round to nearest even, saturating to +-maxval (Inf included),
 * NaN -> 0x7F | sign. The formats' functions below pass constants, so each
 * compiles to its own code. */
static inline uint8_t qf_f32_to_fp8(float f, int mbits, int bias, float maxval, uint32_t maxcode) {
  const int drop = 23 - mbits;
  uint32_t u = qf_f32_bits(f);
  uint8_t sign = (uint8_t)((u >> 24) & 0x80u);
  float a = fabsf(f);
  if (isnan(f)) return (uint8_t)(sign | 0x7fu);
  if (a >= maxval) return (uint8_t)(sign | maxcode); /* saturate (inf included) */
  if (a < 1.0f / (float)(1u << (bias - 1))) {
    /* below the smallest normal 2^(1-bias): subnormal steps of 2^(1-bias-mbits), RNE */
    float r = rintf(a * (float)(1u << (bias - 1 + mbits))); /* exact scaling, then round to nearest even */
    return (uint8_t)(sign | (uint8_t)r); /* r == 2^mbits gives the smallest normal's code */
  }
  /* normal: keep mbits mantissa bits of the float32, RNE on the dropped bits */
  uint32_t au = qf_f32_bits(a);
  uint32_t exp = ((au >> 23) & 0xffu) - 127u + (uint32_t)bias;
  uint32_t m = (exp << 23) | (au & 0x7fffffu);
  m += ((1u << (drop - 1)) - 1u) + ((m >> drop) & 1u);
  uint32_t r = m >> drop; /* exponent and mantissa, may carry into the exponent */
  if (r > maxcode) r = maxcode; /* rounding past the largest finite (the NaN code for e4m3): saturate */
  return (uint8_t)(sign | r);
}

/* e4m3fn: saturating to +-448. */
static inline uint8_t qf_f32_to_e4m3(float f) { return qf_f32_to_fp8(f, 3, 7, 448.0f, 0x7eu); }

/* OCP float8 e5m2: 1 sign, 5 exponent (bias 15), 2 mantissa; Inf = S.11111.00, NaN = S.11111.xx (xx != 0). */
static inline float qf_e5m2_to_f32(uint8_t b) {
  /* e5m2 is binary16 without its low 8 mantissa bits: exact through float16 */
  return qf_f16_to_f32((uint16_t)((uint16_t)b << 8));
}

/* The quantizer's e5m2: saturating to +-57344 (Inf included: CUDA's
 * __NV_SATFINITE, as vLLM's fp8_e5m2 cache), NaN -> 0x7F | sign. */
static inline uint8_t qf_f32_to_e5m2(float f) { return qf_f32_to_fp8(f, 2, 15, 57344.0f, 0x7bu); }

/* int8: sat8(rint(v)); NaN -> 0 (documented in qkvfuse.h). */
static inline int8_t qf_f32_to_int8_sat(float v) {
  if (isnan(v)) return 0;
  float r = rintf(v);
  if (r > 127.0f) return 127;
  if (r < -128.0f) return -128;
  return (int8_t)r;
}

/* Load element i of a float/int array of any supported dtype as float32. */
static inline float qf_load(const void *p, qkvfuse_dtype dt, int64_t i) {
  switch (dt) {
    case QKVFUSE_DTYPE_FLOAT32: return ((const float *)p)[i];
    case QKVFUSE_DTYPE_FLOAT16: return qf_f16_to_f32(((const uint16_t *)p)[i]);
    case QKVFUSE_DTYPE_BFLOAT16: return qf_bf16_to_f32(((const uint16_t *)p)[i]);
    case QKVFUSE_DTYPE_INT32: return (float)((const int32_t *)p)[i];
    case QKVFUSE_DTYPE_INT8: return (float)((const int8_t *)p)[i];
    case QKVFUSE_DTYPE_FLOAT8_E4M3FN: return qf_e4m3_to_f32(((const uint8_t *)p)[i]);
    case QKVFUSE_DTYPE_FLOAT8_E5M2: return qf_e5m2_to_f32(((const uint8_t *)p)[i]);
    default: return NAN;
  }
}

/* Round v once to a float dtype and return it as float32 (the value that a
 * store of v would keep). */
static inline float qf_round_to(float v, qkvfuse_dtype dt) {
  switch (dt) {
    case QKVFUSE_DTYPE_FLOAT16: return qf_f16_to_f32(qf_f32_to_f16(v));
    case QKVFUSE_DTYPE_BFLOAT16: return qf_bf16_to_f32(qf_f32_to_bf16(v));
    default: return v;
  }
}

/* Store float32 v as element i of a float array (float32/float16/bfloat16). */
static inline void qf_store_float(void *p, qkvfuse_dtype dt, int64_t i, float v) {
  switch (dt) {
    case QKVFUSE_DTYPE_FLOAT32: ((float *)p)[i] = v; break;
    case QKVFUSE_DTYPE_FLOAT16: ((uint16_t *)p)[i] = qf_f32_to_f16(v); break;
    case QKVFUSE_DTYPE_BFLOAT16: ((uint16_t *)p)[i] = qf_f32_to_bf16(v); break;
    default: break;
  }
}

/* Read an integer index (int32 or int64) as int64. */
static inline int64_t qf_load_index(const void *p, qkvfuse_dtype dt, int64_t i) {
  return dt == QKVFUSE_DTYPE_INT64 ? ((const int64_t *)p)[i] : (int64_t)((const int32_t *)p)[i];
}

#endif /* QKVFUSE_CORE_DTYPE_H */
