/* SPDX-License-Identifier: Apache-2.0 */
/* The preset table (numbers from each model's config.json) and its cases. */
#include "presets.h"

#include <string.h>

#define NO_SCALING QKVFUSE_ROPE_SCALING_INIT

/* clang-format off */
static const tk_preset presets[] = {
    /* name          checkpoint                           Nq  Nkv   D    R   pairs                      theta
       scaling                                                                  qk_norm 1+g  eps        context */
    /* Llama 3.1 8B: GQA 32/8, rope_scaling llama3 (factor 8, low 1, high 4, original 8192) */
    {"llama-3-8b",  "meta-llama/Llama-3.1-8B",           32,  8, 128, 128, QKVFUSE_ROPE_NEOX,        500000.0,
     {QKVFUSE_ROPE_SCALING_LLAMA3, 8.0, 8192, 1.0, 4.0, 32.0, 1.0, 1.0, 1.0},  0,      0,   1e-5f,     131072},
    /* Qwen3 8B: per-head q_norm / k_norm before RoPE */
    {"qwen3-8b",    "Qwen/Qwen3-8B",                     32,  8, 128, 128, QKVFUSE_ROPE_NEOX,        1000000.0,
     NO_SCALING,                                                                1,      0,   1e-6f,     40960},
    /* GLM-4 9B: 2 kv heads, RoPE on half of each head, interleaved pairs */
    {"glm-4-9b",    "THUDM/glm-4-9b-chat",               32,  2, 128,  64, QKVFUSE_ROPE_INTERLEAVED, 10000.0,
     NO_SCALING,                                                                0,      0,   1.5625e-7f, 131072},
    /* Phi-3 mini 4k: MHA, head dim 96 */
    {"phi-3-mini",  "microsoft/Phi-3-mini-4k-instruct",  32, 32,  96,  96, QKVFUSE_ROPE_NEOX,        10000.0,
     NO_SCALING,                                                                0,      0,   1e-5f,     4096},
    /* Gemma 2 9B: head dim 256 */
    {"gemma-2-9b",  "google/gemma-2-9b",                 16,  8, 256, 256, QKVFUSE_ROPE_NEOX,        10000.0,
     NO_SCALING,                                                                0,      0,   1e-6f,     8192},
    /* Gemma 3 12B, global-attention layers: q/k norm with (1 + g) weights, linear RoPE scaling 8 */
    {"gemma-3-12b", "google/gemma-3-12b-pt",             16,  8, 256, 256, QKVFUSE_ROPE_NEOX,        1000000.0,
     {QKVFUSE_ROPE_SCALING_LINEAR, 8.0, 0, 1.0, 4.0, 32.0, 1.0, 1.0, 1.0},     1,      1,   1e-6f,     131072},
};
/* clang-format on */

const tk_preset *tk_presets(int *count) {
  *count = (int)(sizeof presets / sizeof presets[0]);
  return presets;
}

const tk_preset *tk_preset_find(const char *name) {
  for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++)
    if (strcmp(presets[i].name, name) == 0) return &presets[i];
  return NULL;
}

const char *tk_preset_names(void) {
  static char names[256];
  if (names[0] == '\0') {
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++) {
      if (i) strcat(names, ", ");
      strcat(names, presets[i].name);
    }
  }
  return names;
}

/* The variants: name and help, in tk_preset_op order; option parsers, their
 * messages and help texts read this table. */
static const struct {
  const char *name, *help;
} ops[TK_OP_COUNT] = {
    {"split", "split_qkv_rmsnorm_rope out of place: q/k RMSNorm, RoPE from a\n"
              "cos_sin_cache by position, q, k and v outputs"},
    {"cache", "q/k RMSNorm, RoPE from a cos_sin_cache, q output, k and v int8\n"
              "(symmetric, per channel) into a paged cache (block size 16)"},
    {"dequant", "int32 input dequantized, RoPE from per-token cos/sin, q output,\n"
                "k and v int8 into a paged cache"},
    {"inplace", "split in place: q and k normalized and rotated inside the qkv rows\n"
                "(q_out and k_out are views of qkv), v neither read nor written"},
};

const char *tk_op_name(tk_preset_op op) { return (unsigned)op < TK_OP_COUNT ? ops[op].name : "?"; }

const char *tk_op_help(tk_preset_op op) { return (unsigned)op < TK_OP_COUNT ? ops[op].help : "?"; }

const char *tk_op_names(void) {
  static char names[TK_OP_COUNT * 16];
  if (names[0] == '\0') {
    for (int i = 0; i < TK_OP_COUNT; i++) {
      if (i) strcat(names, ", ");
      strcat(names, ops[i].name);
    }
  }
  return names;
}

int tk_op_parse(const char *s) {
  for (int i = 0; i < TK_OP_COUNT; i++)
    if (strcmp(s, ops[i].name) == 0) return i;
  return -1;
}

void tk_preset_spec(tk_spec *s, const tk_preset *ps, tk_preset_op op, int64_t T, qkvfuse_dtype dt, int page_slots) {
  tk_spec_default(s);
  s->Nq = ps->num_q_heads;
  s->Nkv = ps->num_kv_heads;
  s->D = ps->head_dim;
  s->R = ps->rotary_dim;
  s->T = s->B = T;
  s->S = 1;
  s->rope_style = ps->rope_style;
  s->rope_theta = ps->rope_theta;
  s->scaling = ps->rope_scaling;
  s->eps = ps->eps;
  s->qkv_dt = s->q_out_dt = s->rope_dt = dt;
  s->pos_dt = s->slot_dt = QKVFUSE_DTYPE_INT64;
  s->rounding = QKVFUSE_ROUNDING_FUSED;
  if (op == TK_OP_DEQUANT) {
    s->qkv_dt = QKVFUSE_DTYPE_INT32;
    s->act_scale = 1;
    s->acc_bits = 20;
    s->rope_source = QKVFUSE_ROPE_COS_SIN;
  } else {
    s->rope_source = QKVFUSE_ROPE_COS_SIN_CACHE;
    s->max_pos = ps->max_position < TK_PRESET_MAX_POS ? ps->max_position : TK_PRESET_MAX_POS;
    s->pos_lo = 0;
    s->pos_hi = s->max_pos - 1;
    s->q_norm = s->k_norm = 1;
    s->gamma_offset = ps->qk_norm && ps->gamma_offset;
    s->q_gamma_dt = s->k_gamma_dt = dt;
  }
  if (op == TK_OP_SPLIT) s->k_out_dt = s->v_out_dt = dt;
  if (op == TK_OP_INPLACE) {
    s->k_out_dt = dt;
    s->in_place_q = s->in_place_k = 1;
    s->unit_gamma = 1; /* timed calls run on their own output */
  }
  if (op == TK_OP_CACHE || op == TK_OP_DEQUANT) {
    s->layout = QKVFUSE_CACHE_PAGED;
    s->addressing = QKVFUSE_ADDRESS_SLOTS;
    s->block_size = TK_PRESET_BLOCK_SIZE;
    s->blocks = 0;
    s->exact_blocks = 1;
    s->page_slots = page_slots;
    s->k_quant = s->v_quant = QKVFUSE_QUANT_INT8_SYM;
    s->k_scale_kind = s->v_scale_kind = 2; /* [Nkv, D] */
  }
  tk_spec_fixup(s);
}

int tk_preset_cases(const tk_preset *ps, const int64_t *tokens, int ntokens, qkvfuse_dtype dt, int page_slots,
                    tk_spec *out, int max) {
  int n = 0;
  for (int op = 0; op < TK_OP_COUNT; op++)
    for (int t = 0; t < ntokens && n < max; t++) tk_preset_spec(&out[n++], ps, (tk_preset_op)op, tokens[t], dt, page_slots);
  return n;
}
