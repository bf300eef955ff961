/* SPDX-License-Identifier: Apache-2.0 */
/* Timing of one benchmark subject: warm-up, then per-call samples over
 * rotating instances until a time budget is spent; the median. */
#ifndef QKVFUSE_TOOLS_MEASURE_H
#define QKVFUSE_TOOLS_MEASURE_H

#include <stdint.h>

#include "device.h"

/* One call of the subject on instance i; @return 0, or non-zero to abort. */
typedef int (*cli_subject_fn)(void *ctx, int64_t instance);

typedef struct cli_timing {
  double median_s; /* per call; negative when a call failed */
  int64_t samples;
} cli_timing;

/* Call fn on instances 0, 1, ..., n-1, 0, ... : warm-up for 10% of min_time
 * (at least 2 calls), then time each call (device synchronized) until
 * min_time has passed and at least 5 samples exist. */
cli_timing cli_measure(const cli_device *dev, cli_subject_fn fn, void *ctx, int64_t n, double min_time);

#endif /* QKVFUSE_TOOLS_MEASURE_H */
