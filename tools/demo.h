/* SPDX-License-Identifier: Apache-2.0 */
/* qkvfuse demo: each named operator on each preset, on the demo's device,
 * checked against the reference backend (on the CPU) run through the core
 * descriptor. */
#ifndef QKVFUSE_TOOLS_DEMO_H
#define QKVFUSE_TOOLS_DEMO_H

#include <stdint.h>

#include "device.h"
#include "presets.h"
#include "qkvfuse.h"

typedef struct demo_config {
  const cli_device *dev; /* where the named operators run: their tensors are copied there and back */
  int64_t tokens;
  uint64_t seed;
  qkvfuse_dtype dtype; /* activations, cos/sin, outputs */
} demo_config;

/* One row of the demo table. */
typedef struct demo_result {
  const char *op; /* the named operator */
  const char *preset;
  const char *device; /* cfg->dev->name */
  int64_t tokens;
  qkvfuse_dtype dtype;
  const char *backend; /* what the named operator ran on (the device's default backend) */
  const char *norm;    /* model / model (1+g) / synthetic / omitted / none */
  char cache[48];      /* cache layout and quantization, or "-" */
  int skipped;         /* 1: the preset does not fit the operator (note says why) */
  int ok;              /* every output within 1 step of the reference, caches exact elsewhere */
  double max_err;      /* largest error over all outputs, in steps of each output's dtype */
  char note[256];
} demo_result;

/* Run one operator on one preset and fill *r. */
void demo_split_qkv_rmsnorm_rope(const tk_preset *ps, const demo_config *cfg, demo_result *r);
void demo_qkv_rmsnorm_rope_cache(const tk_preset *ps, const demo_config *cfg, demo_result *r);
void demo_dequant_rope_quant_kvcache(const tk_preset *ps, int preset_index, const demo_config *cfg, demo_result *r);

#endif /* QKVFUSE_TOOLS_DEMO_H */
