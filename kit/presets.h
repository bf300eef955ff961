/* SPDX-License-Identifier: Apache-2.0 */
/* Presets: the attention shapes of real models, and each preset as a named
 * list of cases (tk_spec), one per operator variant and token count. The
 * CLI's benchmark times these cases and its demo runs the shapes; test_ops
 * --preset runs the same cases against the oracle. */
#ifndef TK_PRESETS_H
#define TK_PRESETS_H

#include <stdint.h>

#include "case.h"
#include "qkvfuse.h"

typedef struct tk_preset {
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
} tk_preset;

/* @return the table of presets; *count receives its length. */
const tk_preset *tk_presets(int *count);
/* @return the preset named name, or NULL. */
const tk_preset *tk_preset_find(const char *name);
/* "llama-3-8b, qwen3-8b, ..." (static). */
const char *tk_preset_names(void);

/* The operator variants a preset's cases run. */
typedef enum tk_preset_op {
  TK_OP_SPLIT,   /* split_qkv_rmsnorm_rope, out of place: norm + RoPE (cos_sin_cache), q/k/v outputs */
  TK_OP_CACHE,   /* norm + RoPE (cos_sin_cache), q out, k and v int8 into a paged cache */
  TK_OP_DEQUANT, /* int32 input dequant + RoPE (per-token cos/sin), q out, k and v int8 into a paged cache */
  TK_OP_INPLACE, /* split in place: q and k normalized and rotated inside the qkv rows, v untouched */
  TK_OP_COUNT
} tk_preset_op;

const char *tk_op_name(tk_preset_op op); /* "split", "cache", "dequant", "inplace" */
const char *tk_op_help(tk_preset_op op); /* what the variant runs, lines separated by '\n' */
const char *tk_op_names(void);           /* every name, in order: "split, cache, dequant, inplace" */
int tk_op_parse(const char *s);          /* -1 if unknown */

/* Rows of the cos_sin_cache of a preset's cases: its context length, at most this. */
#define TK_PRESET_MAX_POS 8192
/* Rows of a page of the cache variants' paged caches (vLLM's default). */
#define TK_PRESET_BLOCK_SIZE 16

/* The case of variant op on preset ps at T tokens: activations, cos/sin and
 * outputs of dtype dt (a float dtype; the dequant variant's input is int32),
 * the model's heads, RoPE pairs, norm eps and (1 + g) weights, q/k RMSNorm
 * on every variant but dequant (the model's own, or a synthetic one where it
 * has none), positions into a cos_sin_cache of min(context, 8192) rows,
 * paged int8 caches (symmetric, per-channel [Nkv, D] scales) of exactly the
 * blocks of 16 rows the tokens need, int64 positions and slots, no padding,
 * fused rounding; page_slots: see tk_spec. */
void tk_preset_spec(tk_spec *s, const tk_preset *ps, tk_preset_op op, int64_t T, qkvfuse_dtype dt, int page_slots);

/* A preset as a named list of cases: every variant, then every token count,
 * in that order (ops x tokens specs into out, at most max). @return the count. */
int tk_preset_cases(const tk_preset *ps, const int64_t *tokens, int ntokens, qkvfuse_dtype dt, int page_slots,
                    tk_spec *out, int max);

#endif /* TK_PRESETS_H */
