/* SPDX-License-Identifier: Apache-2.0 */
/* Attention shapes of real models: what the demo and the benchmark run. */
#ifndef QKVFUSE_TOOLS_PRESETS_H
#define QKVFUSE_TOOLS_PRESETS_H

#include <stdint.h>

#include "qkvfuse.h"

typedef struct cli_preset {
  const char *name;     /* "llama-3-8b": what --preset takes */
  const char *model;    /* the checkpoint the numbers come from */
  int64_t num_q_heads;  /* Nq */
  int64_t num_kv_heads; /* Nkv */
  int64_t head_dim;     /* D */
  int64_t rotary_dim;   /* R (R < D: partial RoPE) */
  qkvfuse_rope_style rope_style;
  double rope_theta;
  qkvfuse_rope_scaling rope_scaling;
  int qk_norm;          /* 1: the model has per-head RMSNorm on q and k */
  int gamma_offset;     /* 1: its norm weights are used as (1 + g) (Gemma) */
  float eps;            /* its rms_norm_eps */
  int64_t max_position; /* its context length */
} cli_preset;

/* @return the table of presets; *count receives its length. */
const cli_preset *cli_presets(int *count);
/* @return the preset named name, or NULL. */
const cli_preset *cli_preset_find(const char *name);
/* "llama-3-8b, qwen3-8b, ..." (static). */
const char *cli_preset_names(void);

#endif /* QKVFUSE_TOOLS_PRESETS_H */
