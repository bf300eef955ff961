/* SPDX-License-Identifier: Apache-2.0 */
/* Self-test of the test kit's codecs (fp.c), from format properties alone:
 * every bit pattern round-trips, values increase with the pattern, spacing
 * equals tk_ulp, midpoints round to the even neighbour, overflow/saturation
 * and NaN follow the format (e4m3fn and e5m2 saturate, the quantizers' rule);
 * float16 is also checked against the compiler's _Float16 conversion where it
 * exists. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "fp.h"
#include "rng.h"

static int fails;
static long checks;
#define CHECK(cond, ...)                \
  do {                                  \
    checks++;                           \
    if (!(cond)) {                      \
      if (fails++ < 10) {               \
        printf("FAIL test_fp: ");       \
        printf(__VA_ARGS__);            \
        printf("\n");                   \
      }                                 \
    }                                   \
  } while (0)

static uint32_t bits_of(qkvfuse_dtype dt, double v) {
  uint8_t b[4] = {0};
  tk_encode(dt, b, v);
  return (uint32_t)b[0] | (uint32_t)b[1] << 8;
}

static double val_of(qkvfuse_dtype dt, uint32_t x) {
  uint8_t b[2] = {(uint8_t)x, (uint8_t)(x >> 8)};
  return tk_decode(dt, b);
}

static void check_format(qkvfuse_dtype dt, int nbits) {
  uint32_t n = 1u << nbits, sign = 1u << (nbits - 1);
  double prev = -1;
  uint32_t prev_bits = 0;
  for (uint32_t x = 0; x < n; x++) {
    double v = val_of(dt, x);
    if (isnan(v)) {
      CHECK(isnan(val_of(dt, bits_of(dt, v))), "%s: NaN pattern 0x%x does not re-encode to NaN", tk_name(dt), x);
      continue;
    }
    if (isinf(v) && dt == QKVFUSE_DTYPE_FLOAT8_E5M2) { /* the encoder saturates: Inf to +-57344 */
      CHECK(bits_of(dt, v) == ((x & sign) | 0x7B), "e5m2: Inf pattern 0x%x encodes to 0x%x", x, bits_of(dt, v));
      continue;
    }
    CHECK(bits_of(dt, v) == x, "%s: pattern 0x%x (%.9g) re-encodes to 0x%x", tk_name(dt), x, v, bits_of(dt, v));
    CHECK(((x & sign) != 0) == (signbit(v) != 0), "%s: sign of 0x%x", tk_name(dt), x);
    if (x & sign || isinf(v)) continue;
    if (x > 0) {
      CHECK(v > prev, "%s: 0x%x not above 0x%x", tk_name(dt), x, prev_bits);
      CHECK(v - prev == tk_ulp(dt, prev), "%s: spacing after %.9g is %.9g, tk_ulp says %.9g", tk_name(dt), prev,
            v - prev, tk_ulp(dt, prev));
      double mid = 0.5 * (prev + v);
      uint32_t even = (prev_bits & 1) ? x : prev_bits;
      CHECK(bits_of(dt, mid) == even, "%s: midpoint %.12g rounds to 0x%x, want even 0x%x", tk_name(dt), mid,
            bits_of(dt, mid), even);
      CHECK(bits_of(dt, -mid) == (even | sign), "%s: negative midpoint", tk_name(dt));
      CHECK(bits_of(dt, nextafter(mid, 0)) == prev_bits, "%s: below midpoint", tk_name(dt));
      CHECK(bits_of(dt, nextafter(mid, INFINITY)) == x, "%s: above midpoint", tk_name(dt));
    }
    prev = v;
    prev_bits = x;
  }
  double max = tk_max(dt), u = tk_ulp(dt, max);
  CHECK(val_of(dt, bits_of(dt, max)) == max, "%s: max", tk_name(dt));
  if (dt == QKVFUSE_DTYPE_FLOAT8_E4M3FN || dt == QKVFUSE_DTYPE_FLOAT8_E5M2) {
    CHECK(tk_round(dt, max + u) == max && tk_round(dt, 1e30) == max && tk_round(dt, -INFINITY) == -max &&
              tk_round(dt, INFINITY) == max,
          "%s must saturate to +-max", tk_name(dt));
    CHECK(bits_of(dt, NAN) == 0x7F && bits_of(dt, -NAN) == 0xFF, "%s NaN encodings", tk_name(dt));
  } else {
    CHECK(isinf(tk_round(dt, max + u / 2)) && tk_round(dt, nextafter(max + u / 2, 0)) == max,
          "%s: overflow threshold", tk_name(dt));
  }
}

static void check_ints(void) {
  for (int k = -140; k <= 140; k++) {
    double want = (k % 2 == 0) ? k : k + 1;
    want = want < -128 ? -128 : want > 127 ? 127 : want;
    CHECK(tk_round(QKVFUSE_DTYPE_INT8, k + 0.5) == want, "int8: %d.5 -> %g", k, tk_round(QKVFUSE_DTYPE_INT8, k + 0.5));
  }
  CHECK(tk_round(QKVFUSE_DTYPE_INT8, NAN) == 0, "int8 NaN -> 0");
  CHECK(tk_round(QKVFUSE_DTYPE_INT8, INFINITY) == 127 && tk_round(QKVFUSE_DTYPE_INT8, -INFINITY) == -128, "int8 inf");
}

static void check_against_compiler(void) {
#ifdef __FLT16_MAX__
  tk_rng r;
  tk_rng_seed(&r, 7);
  for (int i = 0; i < 200000; i++) {
    double v = tk_rng_normal(&r) * ldexp(1.0, (int)tk_rng_range(&r, -26, 17));
    _Float16 h = (_Float16)v;
    CHECK((double)h == tk_round(QKVFUSE_DTYPE_FLOAT16, v) || (isnan((double)h) && isnan(tk_round(QKVFUSE_DTYPE_FLOAT16, v))),
          "float16 of %.17g: compiler %.9g, test kit %.9g", v, (double)h, tk_round(QKVFUSE_DTYPE_FLOAT16, v));
  }
#endif
  tk_rng r2;
  tk_rng_seed(&r2, 8);
  for (int i = 0; i < 200000; i++) {
    double v = tk_rng_normal(&r2) * ldexp(1.0, (int)tk_rng_range(&r2, -140, 120));
    CHECK(tk_round(QKVFUSE_DTYPE_FLOAT32, v) == (double)(float)v, "float32 of %.17g", v);
    /* bfloat16 = float32 with 16 fewer mantissa bits: rounding from double
     * directly must equal rounding the exact value, never double rounding */
    double b = tk_round(QKVFUSE_DTYPE_BFLOAT16, v);
    CHECK(fabs(b - v) <= 0.5 * tk_ulp(QKVFUSE_DTYPE_BFLOAT16, v) || isinf(b), "bfloat16 of %.17g is %.9g", v, b);
  }
}

int main(void) {
  check_format(QKVFUSE_DTYPE_FLOAT16, 16);
  check_format(QKVFUSE_DTYPE_BFLOAT16, 16);
  check_format(QKVFUSE_DTYPE_FLOAT8_E4M3FN, 8);
  check_format(QKVFUSE_DTYPE_FLOAT8_E5M2, 8);
  /* e5m2 is IEEE: its values are float16's with the low 8 mantissa bits zero */
  CHECK(tk_max(QKVFUSE_DTYPE_FLOAT8_E5M2) == 57344.0, "e5m2 max");
  for (uint32_t x = 0; x < 256; x++) {
    const double v = val_of(QKVFUSE_DTYPE_FLOAT8_E5M2, x), h = val_of(QKVFUSE_DTYPE_FLOAT16, x << 8);
    CHECK(v == h || (isnan(v) && isnan(h)), "e5m2 0x%x = %.9g, float16 0x%x00 = %.9g", x, v, x, h);
  }
  check_ints();
  check_against_compiler();
  printf("test_fp: %ld checks, %d failed\n", checks, fails);
  return fails ? 1 : 0;
}
