/* SPDX-License-Identifier: Apache-2.0 */
/* Median timing (see measure.h). */
#include "measure.h"

#include <stdlib.h>

#define MIN_SAMPLES 5
#define MAX_SAMPLES (1 << 22)

static int by_value(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

cli_timing cli_measure(const cli_device *dev, cli_subject_fn fn, void *ctx, int64_t n, double min_time) {
  if (dev->measure) return dev->measure(dev, fn, ctx, n, min_time);
  cli_timing r = {-1.0, 0};
  int64_t i = 0, calls = 0;
  const double warm_start = dev->now();
  do {
    if (fn(ctx, i) != 0) return r;
    i = (i + 1) % n;
    calls++;
  } while (calls < 2 || dev->now() - warm_start < 0.1 * min_time);
  dev->sync();

  int64_t cap = 1024, count = 0;
  double *s = malloc((size_t)cap * sizeof *s);
  if (s == NULL) return r;
  const double start = dev->now();
  while (count < MIN_SAMPLES || (dev->now() - start < min_time && count < MAX_SAMPLES)) {
    if (count == cap) {
      double *grown = realloc(s, (size_t)(2 * cap) * sizeof *s);
      if (grown == NULL) break;
      s = grown;
      cap *= 2;
    }
    const double t0 = dev->now();
    if (fn(ctx, i) != 0) {
      free(s);
      return r;
    }
    dev->sync();
    s[count++] = dev->now() - t0;
    i = (i + 1) % n;
  }
  qsort(s, (size_t)count, sizeof *s, by_value);
  r.median_s = count % 2 ? s[count / 2] : 0.5 * (s[count / 2 - 1] + s[count / 2]);
  r.samples = count;
  free(s);
  return r;
}
