/* SPDX-License-Identifier: Apache-2.0 */
/* Output comparison (see compare.h). */
#include "compare.h"

#include <math.h>
#include <string.h>

/* Sign-magnitude bits -> an integer that orders like the values. */
static int64_t ordered(uint64_t bits, unsigned width) {
  const uint64_t sign = (uint64_t)1 << (width - 1);
  const int64_t mag = (int64_t)(bits & (sign - 1));
  return (bits & sign) ? -mag : mag;
}

double cli_elem_err(qkvfuse_dtype dt, const void *a, const void *b, int64_t i) {
  uint64_t ua = 0, ub = 0;
  unsigned width = 0;
  int nan_a = 0, nan_b = 0;
  switch (dt) {
    case QKVFUSE_DTYPE_FLOAT32: {
      uint32_t x, y;
      memcpy(&x, (const char *)a + 4 * i, 4);
      memcpy(&y, (const char *)b + 4 * i, 4);
      ua = x, ub = y, width = 32;
      nan_a = (x & 0x7fffffffu) > 0x7f800000u, nan_b = (y & 0x7fffffffu) > 0x7f800000u;
      break;
    }
    case QKVFUSE_DTYPE_FLOAT16:
    case QKVFUSE_DTYPE_BFLOAT16: {
      const uint16_t x = ((const uint16_t *)a)[i], y = ((const uint16_t *)b)[i];
      const uint16_t inf = dt == QKVFUSE_DTYPE_FLOAT16 ? 0x7c00u : 0x7f80u;
      ua = x, ub = y, width = 16;
      nan_a = (x & 0x7fffu) > inf, nan_b = (y & 0x7fffu) > inf;
      break;
    }
    case QKVFUSE_DTYPE_FLOAT8_E4M3FN: {
      const uint8_t x = ((const uint8_t *)a)[i], y = ((const uint8_t *)b)[i];
      ua = x, ub = y, width = 8;
      nan_a = (x & 0x7fu) == 0x7fu, nan_b = (y & 0x7fu) == 0x7fu;
      break;
    }
    case QKVFUSE_DTYPE_FLOAT8_E5M2: {
      const uint8_t x = ((const uint8_t *)a)[i], y = ((const uint8_t *)b)[i];
      ua = x, ub = y, width = 8;
      nan_a = (x & 0x7fu) > 0x7cu, nan_b = (y & 0x7fu) > 0x7cu;
      break;
    }
    case QKVFUSE_DTYPE_INT8: return fabs((double)((const int8_t *)a)[i] - (double)((const int8_t *)b)[i]);
    case QKVFUSE_DTYPE_INT32: return fabs((double)((const int32_t *)a)[i] - (double)((const int32_t *)b)[i]);
    default: return INFINITY;
  }
  if (nan_a || nan_b) return nan_a && nan_b ? 0.0 : INFINITY;
  return fabs((double)(ordered(ua, width) - ordered(ub, width)));
}

double cli_max_err(const cli_tensor *a, const cli_tensor *b) {
  const int64_t n = cli_tensor_numel(a);
  if (a->t.dtype != b->t.dtype || n != cli_tensor_numel(b)) return INFINITY;
  double worst = 0.0;
  for (int64_t i = 0; i < n; i++) {
    const double e = cli_elem_err(a->t.dtype, a->t.data, b->t.data, i);
    if (!(e <= worst)) worst = e; /* also catches NaN */
  }
  return worst;
}

double cli_max_err_heads(const cli_tensor *got, const cli_tensor *want, int64_t head, int slack) {
  const int64_t n = cli_tensor_numel(got);
  if (slack == 0 || got->t.dtype == QKVFUSE_DTYPE_INT8 || head <= 0) return cli_max_err(got, want);
  if (got->t.dtype != want->t.dtype || n != cli_tensor_numel(want) || n % head) return INFINITY;
  double worst = 0.0;
  for (int64_t h0 = 0; h0 < n; h0 += head) {
    double m = 0.0;
    for (int64_t i = h0; i < h0 + head; i++) m = fmax(m, fabs(cli_get(want, i)));
    const double allowed = slack * ldexp(1.0, ilogb(m > 0 ? m : 1.0) - 23); /* slack float32 ulps of m */
    for (int64_t i = h0; i < h0 + head; i++) {
      double e = cli_elem_err(got->t.dtype, got->t.data, want->t.data, i);
      if (e > 1.0 && isfinite(e) && fabs(cli_get(got, i) - cli_get(want, i)) <= allowed) e = 1.0;
      if (!(e <= worst)) worst = e;
    }
  }
  return worst;
}

void cli_cache_mark(qkvfuse_cache_layout layout, const qkvfuse_tensor *cache, int64_t nkv, int64_t d,
                    const int64_t *slots, int64_t T, int64_t S, unsigned char *written) {
  const int64_t *sh = cache->shape;
  const int64_t width = nkv * d;
  for (int64_t t = 0; t < T; t++) {
    int64_t block, row;
    if (layout == QKVFUSE_CACHE_CONTIGUOUS) {
      const int64_t start = slots[t / S];
      if (start == -1) continue;
      block = t / S;
      row = start + t % S;
    } else {
      if (slots[t] == -1) continue;
      const int64_t bs = layout == QKVFUSE_CACHE_PAGED || layout == QKVFUSE_CACHE_CONTIGUOUS ? sh[1] : sh[2];
      block = slots[t] / bs;
      row = slots[t] % bs;
    }
    for (int64_t j = 0; j < width; j++) {
      const int64_t h = j / d, e = j % d;
      int64_t idx;
      switch (layout) {
        case QKVFUSE_CACHE_PAGED_HND: idx = ((block * sh[1] + h) * sh[2] + row) * sh[3] + e; break;
        case QKVFUSE_CACHE_NZ: idx = ((block * sh[1] + j / sh[3]) * sh[2] + row) * sh[3] + j % sh[3]; break;
        default: idx = ((block * sh[1] + row) * sh[2] + h) * sh[3] + e; break; /* paged, contiguous */
      }
      written[idx] = 1;
    }
  }
}

double cli_cache_err(const cli_tensor *got, const cli_tensor *want, const cli_tensor *initial,
                     const unsigned char *written) {
  const int64_t n = cli_tensor_numel(got);
  const size_t es = qkvfuse_dtype_size(got->t.dtype);
  if (got->bytes != want->bytes || got->bytes != initial->bytes) return INFINITY;
  double worst = 0.0;
  for (int64_t i = 0; i < n; i++) {
    if (written[i]) {
      const double e = cli_elem_err(got->t.dtype, got->t.data, want->t.data, i);
      if (!(e <= worst)) worst = e;
    } else {
      const char *init = (const char *)initial->t.data + (size_t)i * es;
      if (memcmp((const char *)got->t.data + (size_t)i * es, init, es) != 0 ||
          memcmp((const char *)want->t.data + (size_t)i * es, init, es) != 0)
        return INFINITY;
    }
  }
  return worst;
}
