/* SPDX-License-Identifier: Apache-2.0 */
/* Element codecs: see fp.h. One generic small-float codec parameterized by
 * (mantissa bits, exponent bits, bias, has Inf, saturates) serves float16,
 * bfloat16, e4m3fn and e5m2; float32 uses the C conversion (RNE under the
 * default mode). */
#include "fp.h"

#include <math.h>
#include <string.h>

typedef struct small_fmt {
  int mbits, ebits, bias;
  int ieee; /* 1: all-ones exponent is Inf/NaN; 0: e4m3fn (only S.1111.111 is NaN) */
  int satfinite; /* an IEEE format whose encoder saturates to its largest finite value (Inf included) and
                    encodes NaN as all ones: e5m2 as qkvfuse.h quantizes to it */
} small_fmt;

static const small_fmt FMT_F16 = {10, 5, 15, 1, 0};
static const small_fmt FMT_BF16 = {7, 8, 127, 1, 0};
static const small_fmt FMT_E4M3 = {3, 4, 7, 0, 0};
static const small_fmt FMT_E5M2 = {2, 5, 15, 1, 1};

static int fmt_emin(small_fmt f) { return 1 - f.bias; }

static double fmt_max(small_fmt f) {
  if (f.ieee) {
    int emax = ((1 << f.ebits) - 2) - f.bias;
    return ldexp(2.0 - ldexp(1.0, -f.mbits), emax);
  }
  /* e4m3fn: exponent field 15 with mantissa 110 is the largest finite. */
  int emax = ((1 << f.ebits) - 1) - f.bias;
  return ldexp(1.0 + (double)((1 << f.mbits) - 2) / (1 << f.mbits), emax);
}

static uint32_t fmt_nan(small_fmt f, int sign) {
  uint32_t s = (uint32_t)sign << (f.ebits + f.mbits);
  uint32_t e = (uint32_t)((1 << f.ebits) - 1) << f.mbits;
  if (f.ieee && !f.satfinite) return s | e | (1u << (f.mbits - 1));
  return s | e | (uint32_t)((1 << f.mbits) - 1);
}

/* 2^e as a double, for |e| < 1000, without ldexp (exact, and fast). */
static double pow2(int e) {
  uint64_t b = (uint64_t)(e + 1023) << 52;
  double d;
  memcpy(&d, &b, 8);
  return d;
}

static uint32_t fmt_encode(small_fmt f, double v) {
  uint64_t b;
  memcpy(&b, &v, 8);
  uint32_t sign = (uint32_t)(b >> 63), s = sign << (f.ebits + f.mbits);
  int dexp = (int)((b >> 52) & 0x7FF);
  if (dexp == 0x7FF && (b << 12)) return fmt_nan(f, (int)sign);
  uint32_t ef_max = (1u << f.ebits) - 1, mant_all = (1u << f.mbits) - 1;
  uint32_t sat = f.satfinite ? ((ef_max - 1) << f.mbits) | mant_all   /* e5m2's 57344 */
                 : f.ieee    ? ef_max << f.mbits                      /* Inf */
                             : (ef_max << f.mbits) | (mant_all - 1);  /* e4m3fn's 448 */
  if (dexp == 0x7FF) return s | sat;
  if (dexp == 0) return s; /* zero, or a double subnormal: far below half of any target's smallest subnormal */
  int emin = fmt_emin(f), ex = dexp - 1023;
  if (ex < emin) ex = emin;
  double a = fabs(v);
  uint64_t n = (uint64_t)nearbyint(a * pow2(f.mbits - ex)); /* the scaling is exact */
  if (n >> (f.mbits + 1)) { /* rounded up into the next binade */
    n >>= 1;
    ex++;
  }
  if (n < (1u << f.mbits)) return s | (uint32_t)n; /* subnormal (ex == emin) */
  uint32_t ef = (uint32_t)(ex + f.bias), mant = (uint32_t)n - (1u << f.mbits);
  if (f.ieee ? ef >= ef_max : (ef > ef_max || (ef == ef_max && mant == mant_all))) return s | sat;
  return s | (ef << f.mbits) | mant;
}

static double fmt_decode(small_fmt f, uint32_t bits) {
  int sign = (bits >> (f.ebits + f.mbits)) & 1;
  uint32_t ef = (bits >> f.mbits) & ((1u << f.ebits) - 1);
  uint32_t mant = bits & ((1u << f.mbits) - 1);
  double v;
  if (ef == (1u << f.ebits) - 1 && f.ieee) {
    v = mant ? NAN : INFINITY;
  } else if (ef == (1u << f.ebits) - 1 && mant == (1u << f.mbits) - 1) {
    v = NAN; /* e4m3fn */
  } else if (ef == 0) {
    v = (double)mant * pow2(fmt_emin(f) - f.mbits);
  } else {
    v = (double)((1u << f.mbits) + mant) * pow2((int)ef - f.bias - f.mbits);
  }
  return sign ? -v : v;
}

static double sat_rint(double v, double lo, double hi) {
  if (isnan(v)) return 0;
  double r = rint(v);
  return r < lo ? lo : r > hi ? hi : r;
}

double tk_decode(qkvfuse_dtype dt, const void *p) {
  switch (dt) {
    case QKVFUSE_DTYPE_INT8: { int8_t x; memcpy(&x, p, 1); return x; }
    case QKVFUSE_DTYPE_INT32: { int32_t x; memcpy(&x, p, 4); return x; }
    case QKVFUSE_DTYPE_INT64: { int64_t x; memcpy(&x, p, 8); return (double)x; }
    case QKVFUSE_DTYPE_FLOAT32: { float x; memcpy(&x, p, 4); return x; }
    case QKVFUSE_DTYPE_FLOAT16: { uint16_t x; memcpy(&x, p, 2); return fmt_decode(FMT_F16, x); }
    case QKVFUSE_DTYPE_BFLOAT16: { uint16_t x; memcpy(&x, p, 2); return fmt_decode(FMT_BF16, x); }
    case QKVFUSE_DTYPE_FLOAT8_E4M3FN: { uint8_t x; memcpy(&x, p, 1); return fmt_decode(FMT_E4M3, x); }
    case QKVFUSE_DTYPE_FLOAT8_E5M2: { uint8_t x; memcpy(&x, p, 1); return fmt_decode(FMT_E5M2, x); }
    default: return NAN;
  }
}

void tk_encode(qkvfuse_dtype dt, void *p, double v) {
  switch (dt) {
    case QKVFUSE_DTYPE_INT8: { int8_t x = (int8_t)sat_rint(v, -128, 127); memcpy(p, &x, 1); break; }
    case QKVFUSE_DTYPE_INT32: { int32_t x = (int32_t)sat_rint(v, -2147483648.0, 2147483647.0); memcpy(p, &x, 4); break; }
    case QKVFUSE_DTYPE_INT64: {
      int64_t x = (int64_t)sat_rint(v, -9223372036854775808.0, 9223372036854774784.0);
      memcpy(p, &x, 8);
      break;
    }
    case QKVFUSE_DTYPE_FLOAT32: { float x = (float)v; memcpy(p, &x, 4); break; }
    case QKVFUSE_DTYPE_FLOAT16: { uint16_t x = (uint16_t)fmt_encode(FMT_F16, v); memcpy(p, &x, 2); break; }
    case QKVFUSE_DTYPE_BFLOAT16: { uint16_t x = (uint16_t)fmt_encode(FMT_BF16, v); memcpy(p, &x, 2); break; }
    case QKVFUSE_DTYPE_FLOAT8_E4M3FN: { uint8_t x = (uint8_t)fmt_encode(FMT_E4M3, v); memcpy(p, &x, 1); break; }
    case QKVFUSE_DTYPE_FLOAT8_E5M2: { uint8_t x = (uint8_t)fmt_encode(FMT_E5M2, v); memcpy(p, &x, 1); break; }
    default: break;
  }
}

double tk_round(qkvfuse_dtype dt, double v) {
  unsigned char b[8];
  tk_encode(dt, b, v);
  return tk_decode(dt, b);
}

static double ulp_of(double v, int mbits, int emin) {
  uint64_t b;
  memcpy(&b, &v, 8);
  int e = (int)((b >> 52) & 0x7FF) - 1023; /* NaN/Inf are clamped to the max by the caller */
  if (e < emin) e = emin;
  return pow2(e - mbits);
}

double tk_ulp(qkvfuse_dtype dt, double v) {
  double a = fabs(v), m = tk_max(dt);
  if (!(a <= m)) v = m; /* beyond the range (or NaN): the top binade's spacing */
  switch (dt) {
    case QKVFUSE_DTYPE_FLOAT32: return ulp_of(v, 23, -126);
    case QKVFUSE_DTYPE_FLOAT16: return ulp_of(v, FMT_F16.mbits, fmt_emin(FMT_F16));
    case QKVFUSE_DTYPE_BFLOAT16: return ulp_of(v, FMT_BF16.mbits, fmt_emin(FMT_BF16));
    case QKVFUSE_DTYPE_FLOAT8_E4M3FN: return ulp_of(v, FMT_E4M3.mbits, fmt_emin(FMT_E4M3));
    case QKVFUSE_DTYPE_FLOAT8_E5M2: return ulp_of(v, FMT_E5M2.mbits, fmt_emin(FMT_E5M2));
    default: return 1.0;
  }
}

double tk_max(qkvfuse_dtype dt) {
  switch (dt) {
    case QKVFUSE_DTYPE_INT8: return 127;
    case QKVFUSE_DTYPE_INT32: return 2147483647.0;
    case QKVFUSE_DTYPE_INT64: return 9223372036854775807.0;
    case QKVFUSE_DTYPE_FLOAT32: return ldexp(2.0 - ldexp(1.0, -23), 127);
    case QKVFUSE_DTYPE_FLOAT16: return fmt_max(FMT_F16);
    case QKVFUSE_DTYPE_BFLOAT16: return fmt_max(FMT_BF16);
    case QKVFUSE_DTYPE_FLOAT8_E4M3FN: return fmt_max(FMT_E4M3);
    case QKVFUSE_DTYPE_FLOAT8_E5M2: return fmt_max(FMT_E5M2);
    default: return 0;
  }
}

int tk_is_float(qkvfuse_dtype dt) {
  return dt == QKVFUSE_DTYPE_FLOAT32 || dt == QKVFUSE_DTYPE_FLOAT16 || dt == QKVFUSE_DTYPE_BFLOAT16 ||
         dt == QKVFUSE_DTYPE_FLOAT8_E4M3FN || dt == QKVFUSE_DTYPE_FLOAT8_E5M2;
}

size_t tk_size(qkvfuse_dtype dt) {
  switch (dt) {
    case QKVFUSE_DTYPE_INT8: case QKVFUSE_DTYPE_FLOAT8_E4M3FN: case QKVFUSE_DTYPE_FLOAT8_E5M2: return 1;
    case QKVFUSE_DTYPE_FLOAT16: case QKVFUSE_DTYPE_BFLOAT16: return 2;
    case QKVFUSE_DTYPE_INT32: case QKVFUSE_DTYPE_FLOAT32: return 4;
    case QKVFUSE_DTYPE_INT64: return 8;
    default: return 0;
  }
}

const char *tk_name(qkvfuse_dtype dt) {
  switch (dt) {
    case QKVFUSE_DTYPE_INT8: return "i8";
    case QKVFUSE_DTYPE_INT32: return "i32";
    case QKVFUSE_DTYPE_INT64: return "i64";
    case QKVFUSE_DTYPE_FLOAT32: return "f32";
    case QKVFUSE_DTYPE_FLOAT16: return "f16";
    case QKVFUSE_DTYPE_BFLOAT16: return "bf16";
    case QKVFUSE_DTYPE_FLOAT8_E4M3FN: return "e4m3";
    case QKVFUSE_DTYPE_FLOAT8_E5M2: return "e5m2";
    case QKVFUSE_DTYPE_NONE: return "none";
    default: return "?";
  }
}
