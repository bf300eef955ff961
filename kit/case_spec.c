/* SPDX-License-Identifier: Apache-2.0 */
/* Case specs: defaults, random generation, consistency, description. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "case.h"
#include "fp.h"

#define F32 QKVFUSE_DTYPE_FLOAT32
#define F16 QKVFUSE_DTYPE_FLOAT16
#define BF16 QKVFUSE_DTYPE_BFLOAT16
#define I32 QKVFUSE_DTYPE_INT32
#define I64 QKVFUSE_DTYPE_INT64
#define I8 QKVFUSE_DTYPE_INT8
#define E4M3 QKVFUSE_DTYPE_FLOAT8_E4M3FN
#define E5M2 QKVFUSE_DTYPE_FLOAT8_E5M2
#define NONE QKVFUSE_DTYPE_NONE

const char *const tk_slot_name[TK_NSLOT] = {
    "qkv",       "weight_scale", "act_scale",     "bias", "q_gamma", "k_gamma", "q_beta",  "k_beta",
    "positions", "cos_sin_cache", "cos",          "sin",  "slot_mapping", "k_scale", "v_scale", "k_offset",
    "v_offset",  "q_out",        "k_out",         "v_out", "k_cache", "v_cache", "q",       "k",
    "v",         "q_scale",      "kv_indptr",     "kv_indices", "batch_indices", "kv_positions"};

void tk_spec_default(tk_spec *s) {
  static const qkvfuse_rope_scaling none = QKVFUSE_ROPE_SCALING_INIT;
  memset(s, 0, sizeof *s);
  s->Nq = 4, s->Nkv = 2, s->D = 64, s->T = 5, s->B = 5, s->S = 1;
  s->qkv_dt = s->q_out_dt = F32;
  s->q_gamma_dt = s->k_gamma_dt = F32;
  s->rope_dt = F32;
  s->pos_dt = s->slot_dt = I64;
  s->eps = 1e-6f;
  s->rope_source = QKVFUSE_ROPE_NONE;
  s->rope_theta = 10000.0;
  s->scaling = none;
  s->max_pos = 64, s->pos_hi = 63;
  s->block_size = 16;
  s->pt_batch = 1;
  s->pt_dt[0] = s->pt_dt[1] = s->pt_dt[2] = s->pt_dt[3] = I64;
  s->amp = 1.0;
  s->acc_bits = 12;
}

static int rope_has_tensor(const tk_spec *s) {
  return s->rope_source == QKVFUSE_ROPE_COS_SIN_CACHE || s->rope_source == QKVFUSE_ROPE_COS_SIN;
}

/* q_out / k_out / v_out dtypes SPEC allows: the input's, float32, or (int32
 * input) the cos/sin dtype. */
static qkvfuse_dtype pick_out_dt(const tk_spec *s, tk_rng *r) {
  if (s->qkv_dt != I32) return tk_rng_chance(r, 0.6) ? s->qkv_dt : F32;
  if (rope_has_tensor(s) && tk_rng_chance(r, 0.6)) return s->rope_dt;
  return F32;
}

static void random_scaling(tk_spec *s, tk_rng *r) {
  static const qkvfuse_rope_scaling init = QKVFUSE_ROPE_SCALING_INIT;
  qkvfuse_rope_scaling *c = &s->scaling;
  *c = init;
  c->type = (qkvfuse_rope_scaling_type)tk_rng_range(r, 0, 4);
  switch (c->type) {
    case QKVFUSE_ROPE_SCALING_LINEAR:
    case QKVFUSE_ROPE_SCALING_NTK:
      c->factor = tk_rng_chance(r, 0.8) ? tk_rng_uniform(r, 1.0, 8.0) : tk_rng_uniform(r, 0.3, 1.0);
      if (c->type == QKVFUSE_ROPE_SCALING_NTK && s->R < 4) s->R = 4;
      break;
    case QKVFUSE_ROPE_SCALING_LLAMA3:
      if (tk_rng_chance(r, 0.4)) {
        c->factor = 8, c->original_max_position = 8192, c->low_freq_factor = 1, c->high_freq_factor = 4;
      } else {
        c->factor = tk_rng_uniform(r, 1.5, 32);
        c->original_max_position = tk_rng_range(r, 64, 16384);
        c->low_freq_factor = tk_rng_uniform(r, 0.5, 2);
        c->high_freq_factor = c->low_freq_factor + tk_rng_uniform(r, 0.5, 6);
      }
      break;
    case QKVFUSE_ROPE_SCALING_YARN:
      c->factor = tk_rng_chance(r, 0.85) ? tk_rng_uniform(r, 1.0, 40.0) : tk_rng_uniform(r, 0.5, 1.0);
      c->original_max_position = tk_rng_chance(r, 0.5) ? 4096 : tk_rng_range(r, 64, 32768);
      if (tk_rng_chance(r, 0.5)) {
        c->beta_fast = tk_rng_uniform(r, 8, 64);
        c->beta_slow = tk_rng_uniform(r, 0.5, 4);
        c->extrapolation_factor = tk_rng_chance(r, 0.5) ? 1.0 : tk_rng_uniform(r, 0.0, 1.0);
        c->attn_factor = tk_rng_chance(r, 0.5) ? 1.0 : tk_rng_uniform(r, 0.5, 1.5);
      }
      break;
    default:
      break;
  }
}

/* At most tmax tokens, the token dims as drawn: [B, S] gives up S, then B. */
static void cap_tokens(tk_spec *s, int64_t tmax) {
  if (s->T <= tmax) return;
  if (!s->in3d) {
    s->T = s->B = tmax;
  } else if (tmax == 0) {
    s->S = 0, s->T = 0;
  } else {
    if (s->S > 1) s->S = tmax / s->B > 1 ? tmax / s->B : 1;
    if (s->B * s->S > tmax) s->B = tmax; /* S is 1 here */
    s->T = s->B * s->S;
  }
}

/* D above 512 (DequantRopeQuantKvcache's D <= 1024): full RoPE stays full, a
 * partial R is drawn again below the new D; then tokens down to 8, heads, and
 * tokens again give way until T * H <= lim->max_elems. */
static void widen(tk_spec *s, tk_rng *r, const tk_limits *lim) {
  static const int64_t Ds[] = {528, 640, 1024, 0};
  const int64_t pick = TK_PICK(r, Ds), old_D = s->D;
  s->D = pick ? pick : 2 * tk_rng_range(r, 257, 512);
  s->R = s->R >= old_D ? s->D : 2 * tk_rng_range(r, 1, s->D / 2 - 1);
  int64_t H = (s->Nq + 2 * s->Nkv) * s->D;
  cap_tokens(s, lim->max_elems / H > 8 ? lim->max_elems / H : 8);
  while (s->T * H > lim->max_elems && (s->Nq > 1 || s->Nkv > 1)) {
    if (s->Nq > 1) s->Nq = (s->Nq + 1) / 2;
    else s->Nkv--;
    H = (s->Nq + 2 * s->Nkv) * s->D;
  }
  cap_tokens(s, lim->max_elems / H);
}

void tk_spec_random(tk_spec *s, tk_rng *r, const tk_limits *lim) {
  static const int64_t Ds[] = {16, 64, 80, 96, 128, 192, 256, 512};
  static const int64_t ratios[] = {1, 4, 8, 16};
  static const int64_t Nkvs[] = {1, 1, 2, 3, 4};
  static const int64_t Ts[] = {0, 1, 7, 33, 1000};
  static const qkvfuse_dtype in_dts[] = {F32, F16, BF16, I32};
  static const qkvfuse_dtype f_dts[] = {F32, F16, BF16};
  static const qkvfuse_dtype idx_dts[] = {I32, I64};
  static const float epss[] = {1e-6f, 1e-6f, 1e-5f, 1e-3f, 0.1f, 1.0f};
  static const int64_t bss[] = {1, 3, 16, 32, 64, 128};
  tk_spec_default(s);

  s->D = tk_rng_chance(r, 0.85) ? TK_PICK(r, Ds) : 2 * tk_rng_range(r, 8, 256);
  int64_t ratio = TK_PICK(r, ratios);
  s->Nkv = TK_PICK(r, Nkvs);
  s->T = tk_rng_chance(r, 0.8) ? TK_PICK(r, Ts) : tk_rng_range(r, 2, 300);
  for (;;) {
    int64_t H = (s->Nkv * ratio + 2 * s->Nkv) * s->D;
    if (s->T * H <= lim->max_elems) break;
    if (s->Nkv > 1) s->Nkv--;
    else if (ratio > 1) ratio /= 2;
    else {
      s->T = lim->max_elems / H;
      break;
    }
  }
  s->Nq = s->Nkv * ratio;
  if (tk_rng_chance(r, 0.2)) s->Nq = tk_rng_range(r, 1, s->Nq); /* any counts, Nq < Nkv too: no GQA ratio needed */

  s->qkv_dt = TK_PICK(r, in_dts);
  s->rope_source = (qkvfuse_rope_source)tk_rng_range(r, 0, 3);
  s->rope_style = tk_rng_chance(r, 0.5) ? QKVFUSE_ROPE_NEOX : QKVFUSE_ROPE_INTERLEAVED;
  s->rope_dt = TK_PICK(r, f_dts);
  s->R = tk_rng_chance(r, 0.6) ? s->D : 2 * tk_rng_range(r, 1, s->D / 2 - 1);
  static const double thetas[] = {10000.0, 500000.0, 1e6, 0};
  s->rope_theta = TK_PICK(r, thetas);
  if (s->rope_theta == 0) s->rope_theta = tk_rng_loguniform(r, 2.0, 1e7);
  if (s->rope_source == QKVFUSE_ROPE_COMPUTED) random_scaling(s, r);
  s->pos_dt = TK_PICK(r, idx_dts);
  s->max_pos = tk_rng_range(r, 1, 4096);
  s->pos_lo = 0;
  s->pos_hi = s->max_pos - 1;
  if (s->rope_source == QKVFUSE_ROPE_COMPUTED) {
    static const int64_t far[] = {1 << 20, 1 << 24, 1 << 30, 2147483647 - 3000};
    if (tk_rng_chance(r, 0.5)) {
      s->pos_hi = tk_rng_range(r, 0, 8192);
    } else {
      int64_t c = TK_PICK(r, far);
      s->pos_lo = c - 2000;
      s->pos_hi = c + 2000;
    }
  }

  s->q_out_dt = pick_out_dt(s, r);
  s->k_out_dt = tk_rng_chance(r, 0.6) ? pick_out_dt(s, r) : NONE;
  s->v_out_dt = tk_rng_chance(r, 0.6) ? pick_out_dt(s, r) : NONE;
  if (s->qkv_dt == I32) {
    static const qkvfuse_dtype bias_dts[] = {NONE, F32, F16, BF16, I32};
    static const int64_t bits[] = {8, 16, 24, 28};
    s->bias_dt = TK_PICK(r, bias_dts);
    s->act_scale = tk_rng_chance(r, 0.5);
    s->acc_bits = TK_PICK(r, bits);
  }

  s->q_norm = tk_rng_chance(r, 0.7);
  s->k_norm = tk_rng_chance(r, 0.7);
  s->q_gamma_dt = TK_PICK(r, f_dts);
  s->k_gamma_dt = TK_PICK(r, f_dts);
  s->q_beta_dt = tk_rng_chance(r, 0.4) ? TK_PICK(r, f_dts) : NONE;
  s->k_beta_dt = tk_rng_chance(r, 0.4) ? TK_PICK(r, f_dts) : NONE;
  s->gamma_offset = tk_rng_chance(r, 0.3);
  s->eps = TK_PICK(r, epss);

  s->layout = tk_rng_chance(r, 0.15) ? QKVFUSE_CACHE_NONE : (qkvfuse_cache_layout)tk_rng_range(r, 1, 4);
  s->k_quant = (qkvfuse_quant_mode)tk_rng_range(r, 0, 4);
  s->v_quant = (qkvfuse_quant_mode)tk_rng_range(r, 0, 4);
  s->k_cache_dt = TK_PICK(r, f_dts);
  s->v_cache_dt = TK_PICK(r, f_dts);
  s->k_scale_kind = (int)tk_rng_range(r, 0, 4);
  s->v_scale_kind = (int)tk_rng_range(r, 0, 4);
  if (tk_rng_chance(r, 0.25)) s->q_quant = tk_rng_chance(r, 0.5) ? QKVFUSE_QUANT_FP8_E4M3 : QKVFUSE_QUANT_FP8_E5M2;
  s->q_scale_kind = (int)tk_rng_range(r, 0, 1);
  s->slot_dt = TK_PICK(r, idx_dts);
  s->block_size = TK_PICK(r, bss);
  s->blocks = 0;
  s->skip_prob = tk_rng_chance(r, 0.4) ? 0.25 : 0.0;
  if (s->layout == QKVFUSE_CACHE_CONTIGUOUS) {
    static const int64_t Bs[] = {1, 2, 3, 4};
    s->B = TK_PICK(r, Bs);
    if (s->T == 0) {
      s->S = 0;
    } else {
      if (s->B > s->T) s->B = s->T;
      s->S = s->T / s->B;
    }
    s->in3d = (s->S == 1 && tk_rng_chance(r, 0.5)) ? 2 : 1;
    s->cache_batch = s->B + tk_rng_range(r, 0, 2);
    s->max_seq = s->S + tk_rng_range(r, 0, 8);
  } else if (tk_rng_chance(r, 0.2)) {
    s->in3d = 1;
    int first = tk_rng_chance(r, 0.5);
    s->B = first ? 1 : s->T;
    s->S = first ? s->T : 1;
  }
  s->rounding = tk_rng_chance(r, 0.3) ? QKVFUSE_ROUNDING_UNFUSED_PARITY : QKVFUSE_ROUNDING_FUSED;

  s->in_place_q = tk_rng_chance(r, 0.25);
  s->in_place_k = tk_rng_chance(r, 0.25);
  s->qkv_pad = tk_rng_chance(r, 0.5) ? 0 : tk_rng_range(r, 1, 40);
  s->out_pad = tk_rng_chance(r, 0.5) ? 0 : tk_rng_range(r, 1, 40);
  s->rope_pad = tk_rng_chance(r, 0.6) ? 0 : tk_rng_range(r, 1, 16);
  s->out_split_heads = tk_rng_chance(r, 0.3);
  s->cache_perm = tk_rng_chance(r, 0.6) ? 0 : (int)tk_rng_range(r, 1, 5);
  s->cache_pad = tk_rng_chance(r, 0.5) ? 0 : tk_rng_range(r, 1, 8);
  s->kv_interleaved = tk_rng_chance(r, 0.3);
  s->error_flags = tk_rng_chance(r, 0.5);
  s->amp = tk_rng_loguniform(r, 0.01, 100.0);
  s->split_inputs = tk_rng_chance(r, 0.6) ? 0 : (int)tk_rng_range(r, 1, 3);
  /* page-table addressing, drawn last so that a seed's other fields stay as they were */
  if (s->layout == QKVFUSE_CACHE_PAGED || s->layout == QKVFUSE_CACHE_PAGED_HND || s->layout == QKVFUSE_CACHE_NZ)
    s->addressing = tk_rng_chance(r, 0.35) ? QKVFUSE_ADDRESS_PAGE_TABLE : QKVFUSE_ADDRESS_SLOTS;
  static const int64_t nseqs[] = {1, 1, 2, 3, 5, 8};
  s->pt_batch = tk_rng_chance(r, 0.04) ? 0 : TK_PICK(r, nseqs);
  s->pt_prefix = tk_rng_chance(r, 0.3) ? 0 : tk_rng_range(r, 0, tk_rng_chance(r, 0.5) ? s->block_size : 3 * s->block_size + 5);
  s->pt_lead = tk_rng_chance(r, 0.3) ? tk_rng_range(r, 1, 3) : 0;
  s->pt_tail = tk_rng_chance(r, 0.3) ? tk_rng_range(r, 1, 3) : 0;
  s->pt_interleave = tk_rng_chance(r, 0.5);
  for (int i = 0; i < 4; i++) s->pt_dt[i] = TK_PICK(r, idx_dts);
  /* a head dim above 512, from a stream of its own: r's draws (here and in
     tk_spec_engine after) are those of a seed without it */
  tk_rng side = *r;
  tk_rng_seed(&side, tk_rng_next(&side) ^ 0x5EED0D1024ull);
  if (lim->wide || tk_rng_range(&side, 0, 15) == 0) widen(s, &side, lim);
  /* the caches' rows stay near the slot addressing's: prefixes, then sequences, give way */
  const int64_t rows_max = 2 * s->T + 4 * s->block_size > 1024 ? 2 * s->T + 4 * s->block_size : 1024;
  while (s->block_size * (tk_pt_pages(s) + 1) > rows_max && (s->pt_prefix > 0 || s->pt_batch > 1)) {
    if (s->pt_prefix > 0) s->pt_prefix /= 2;
    else s->pt_batch--;
  }
  tk_spec_fixup(s);
}

int64_t tk_pt_pages(const tk_spec *s) {
  const int64_t bs = s->block_size > 0 ? s->block_size : 1;
  /* sequence b takes ceil((prefix_b + n_b) / bs) blocks, one more at most (case_build.c) */
  return s->pt_batch * ((s->pt_prefix + bs - 1) / bs + 2) + (s->T + bs - 1) / bs;
}

/* What the streaming calls' specs share past their draws: norm weights of
 * dtype gdt and no beta, fused rounding, 2-D input, input and table rows
 * of whole 8-element vectors. */
static void streaming_rows(tk_spec *s, qkvfuse_dtype gdt) {
  s->q_gamma_dt = s->k_gamma_dt = gdt;
  s->q_beta_dt = s->k_beta_dt = NONE;
  s->rounding = QKVFUSE_ROUNDING_FUSED;
  s->in3d = 0;
  s->qkv_pad -= s->qkv_pad % 8;
  s->rope_pad -= s->rope_pad % 8;
}

/* What the engine and append calls share: 16-bit input (k and v outputs of
 * its dtype where drawn), D a multiple of 16 up to Dmax (else one of the
 * usual head dims), R full or a multiple of 16, RoPE from a cos_sin_cache
 * at any of its positions, norm weights of the input's dtype and no beta,
 * fused rounding, 2-D input, input and table rows of whole 16-byte vectors.
 * Draws D (where needed), the dtype and R, in that order. */
static void streaming_call(tk_spec *s, tk_rng *r, int64_t Dmax) {
  static const int64_t Ds[] = {32, 64, 96, 128, 192, 256, 512};
  if (s->D % 16 || s->D > Dmax) s->D = Ds[tk_rng_range(r, 0, Dmax >= 512 ? 6 : 5)];
  s->qkv_dt = tk_rng_chance(r, 0.5) ? BF16 : F16;
  s->k_out_dt = s->k_out_dt != NONE ? s->qkv_dt : NONE;
  s->v_out_dt = s->v_out_dt != NONE ? s->qkv_dt : NONE;
  s->rope_source = QKVFUSE_ROPE_COS_SIN_CACHE;
  s->R = tk_rng_chance(r, 0.6) ? s->D : 16 * tk_rng_range(r, 1, s->D / 16);
  s->pos_lo = 0;
  s->pos_hi = s->max_pos - 1;
  streaming_rows(s, s->qkv_dt);
}

/* The engine call's cache (tk_spec_engine, tk_spec_dequant): paged whole
 * rows (NHD, unpadded) by int64 slots, int8 symmetric, fp8 e4m3 or e5m2 k
 * and v (drawn in that order), output rows of whole 16-byte vectors. */
static void engine_cache(tk_spec *s, tk_rng *r) {
  static const qkvfuse_quant_mode qms[] = {QKVFUSE_QUANT_INT8_SYM, QKVFUSE_QUANT_FP8_E4M3, QKVFUSE_QUANT_FP8_E5M2};
  s->slot_dt = I64;
  s->layout = QKVFUSE_CACHE_PAGED;
  s->addressing = QKVFUSE_ADDRESS_SLOTS;
  s->k_quant = TK_PICK(r, qms);
  s->v_quant = TK_PICK(r, qms);
  s->cache_perm = 0;
  s->cache_pad = 0;
  s->kv_interleaved = 0;
  s->out_pad -= s->out_pad % 8;
}

void tk_spec_engine(tk_spec *s, tk_rng *r) {
  streaming_call(s, r, 256);
  s->q_out_dt = s->qkv_dt;
  s->q_quant = QKVFUSE_QUANT_NONE;
  s->rope_dt = s->qkv_dt;
  s->pos_dt = I64;
  engine_cache(s, r);
  if (tk_rng_chance(r, 0.3)) s->rope_dt = F32; /* drawn last: the other fields are a seed's as before */
  tk_spec_fixup(s);
}

void tk_spec_append(tk_spec *s, tk_rng *r) {
  streaming_call(s, r, 512);
  s->q_quant = QKVFUSE_QUANT_FP8_E4M3;
  s->rope_dt = F32;
  s->pos_dt = I32;
  s->layout = tk_rng_chance(r, 0.5) ? QKVFUSE_CACHE_PAGED : QKVFUSE_CACHE_PAGED_HND;
  s->addressing = QKVFUSE_ADDRESS_PAGE_TABLE;
  s->k_quant = s->v_quant = QKVFUSE_QUANT_FP8_E4M3;
  s->cache_pad -= s->cache_pad % 16; /* rows of whole 16-byte vectors: fp8 q out, e4m3 caches */
  s->out_pad -= s->out_pad % 16;
  if (tk_rng_chance(r, 0.5)) s->q_norm = s->k_norm = 0; /* FlashInfer's call (drawn last, as above) */
  tk_spec_fixup(s);
}

void tk_spec_dequant(tk_spec *s, tk_rng *r) {
  static const int64_t Ds[] = {32, 64, 96, 128, 192, 256, 512};
  static const int64_t bits[] = {8, 16, 24};
  if (s->D % 16 || s->D > 512) s->D = Ds[tk_rng_range(r, 0, 6)];
  s->qkv_dt = I32;
  s->rope_dt = tk_rng_chance(r, 0.5) ? BF16 : F16; /* the outputs' dtype */
  s->q_out_dt = s->rope_dt;
  s->k_out_dt = s->k_out_dt != NONE ? s->rope_dt : NONE;
  s->v_out_dt = s->v_out_dt != NONE ? s->rope_dt : NONE;
  s->q_quant = QKVFUSE_QUANT_NONE;
  s->bias_dt = NONE;
  s->act_scale = tk_rng_chance(r, 0.7);
  s->acc_bits = TK_PICK(r, bits);
  s->rope_source = QKVFUSE_ROPE_COS_SIN;
  s->R = tk_rng_chance(r, 0.6) ? s->D : 16 * tk_rng_range(r, 1, s->D / 16);
  streaming_rows(s, s->rope_dt);
  engine_cache(s, r);
  tk_spec_fixup(s);
}

static int64_t nz_c(qkvfuse_dtype dt) { return 32 / (int64_t)tk_size(dt); }

void tk_spec_fixup(tk_spec *s) {
  if (s->rope_source == QKVFUSE_ROPE_NONE) {
    s->R = 0;
  } else {
    if (s->R > s->D) s->R = s->D;
    if (s->R < 2) s->R = 2;
    s->R &= ~(int64_t)1;
    if (s->rope_source == QKVFUSE_ROPE_COMPUTED && s->scaling.type == QKVFUSE_ROPE_SCALING_NTK && s->R < 4) s->R = 4;
  }
  if (s->layout == QKVFUSE_CACHE_CONTIGUOUS && !s->in3d) s->in3d = s->S == 1 ? 2 : 1;
  if (s->in3d) s->T = s->B * s->S;
  else s->B = s->T, s->S = 1;
  if (s->in3d == 2 && s->S != 1) s->in3d = 1;

  if (s->layout == QKVFUSE_CACHE_NONE) {
    s->k_quant = s->v_quant = QKVFUSE_QUANT_NONE;
    s->k_cache_dt = s->v_cache_dt = NONE;
  } else {
    qkvfuse_dtype *dts[2] = {&s->k_cache_dt, &s->v_cache_dt};
    qkvfuse_quant_mode qm[2] = {s->k_quant, s->v_quant};
    for (int i = 0; i < 2; i++) {
      if (qm[i] == QKVFUSE_QUANT_INT8_SYM || qm[i] == QKVFUSE_QUANT_INT8_ASYM) *dts[i] = I8;
      else if (qm[i] == QKVFUSE_QUANT_FP8_E4M3) *dts[i] = E4M3;
      else if (qm[i] == QKVFUSE_QUANT_FP8_E5M2) *dts[i] = E5M2;
      else if (!(*dts[i] == F32 || *dts[i] == F16 || *dts[i] == BF16)) *dts[i] = F32;
    }
    if (s->layout == QKVFUSE_CACHE_NZ &&
        ((s->Nkv * s->D) % nz_c(s->k_cache_dt) || (s->Nkv * s->D) % nz_c(s->v_cache_dt)))
      s->layout = QKVFUSE_CACHE_PAGED;
    if (s->layout == QKVFUSE_CACHE_CONTIGUOUS) {
      if (s->cache_batch < s->B) s->cache_batch = s->B;
      if (s->max_seq < s->S) s->max_seq = s->S;
      if (s->cache_batch < 1) s->cache_batch = 1;
      if (s->max_seq < 1) s->max_seq = 1;
    } else {
      if (s->block_size < 1) s->block_size = 1;
      if (s->pt_batch < 0) s->pt_batch = 0;
      if (s->pt_prefix < 0) s->pt_prefix = 0;
      if (s->pt_lead < 0) s->pt_lead = 0;
      if (s->pt_tail < 0) s->pt_tail = 0;
      int64_t need = s->addressing == QKVFUSE_ADDRESS_PAGE_TABLE ? tk_pt_pages(s)
                                                                 : (s->T + s->block_size - 1) / s->block_size;
      const int spare = s->addressing == QKVFUSE_ADDRESS_PAGE_TABLE || !s->exact_blocks;
      if (s->blocks < need + spare) s->blocks = need + spare;
    }
  }
  if (s->layout == QKVFUSE_CACHE_NONE || s->layout == QKVFUSE_CACHE_CONTIGUOUS) s->addressing = QKVFUSE_ADDRESS_SLOTS;
  if (s->k_cache_dt != s->v_cache_dt) s->kv_interleaved = 0;
  if (s->split_inputs == 3 && (s->v_out_dt != NONE || s->layout != QKVFUSE_CACHE_NONE)) s->split_inputs = 2;
  if (s->q_quant == QKVFUSE_QUANT_FP8_E4M3) s->q_out_dt = E4M3;
  else if (s->q_quant == QKVFUSE_QUANT_FP8_E5M2) s->q_out_dt = E5M2;
  else s->q_quant = QKVFUSE_QUANT_NONE;
  if (s->qkv_dt == I32 || s->q_out_dt != s->qkv_dt) s->in_place_q = 0;
  if (s->qkv_dt == I32 || s->k_out_dt != s->qkv_dt) s->in_place_k = 0;
  if (s->rope_source == QKVFUSE_ROPE_COS_SIN_CACHE) {
    if (s->max_pos < 1) s->max_pos = 1;
    if (s->pos_hi > s->max_pos - 1) s->pos_hi = s->max_pos - 1;
    if (s->pos_lo > s->pos_hi) s->pos_lo = s->pos_hi;
  }
  if (s->pos_lo < 0) s->pos_lo = 0;
  if (s->pos_hi > 2147483647) s->pos_hi = 2147483647;
  if (s->qkv_dt != I32) s->bias_dt = NONE, s->act_scale = 0;
}

static const char *layout_name(qkvfuse_cache_layout l) {
  static const char *n[] = {"none", "paged", "paged_hnd", "nz", "contiguous"};
  return (unsigned)l < QKVFUSE_CACHE_LAYOUT_COUNT ? n[l] : "?";
}
static const char *quant_name(qkvfuse_quant_mode m) {
  static const char *n[] = {"none", "int8sym", "int8asym", "fp8", "fp8e5m2"};
  return (unsigned)m < QKVFUSE_QUANT_COUNT ? n[m] : "?";
}
static const char *source_name(qkvfuse_rope_source s) {
  static const char *n[] = {"none", "cache", "cos_sin", "computed"};
  return (unsigned)s < QKVFUSE_ROPE_SOURCE_COUNT ? n[s] : "?";
}
static const char *scaling_name(qkvfuse_rope_scaling_type t) {
  static const char *n[] = {"none", "linear", "ntk", "llama3", "yarn"};
  return (unsigned)t < QKVFUSE_ROPE_SCALING_COUNT ? n[t] : "?";
}

const char *tk_rounding_name(qkvfuse_rounding r) {
  static const char *const names[QKVFUSE_ROUNDING_COUNT] = {"fused", "unfused_parity", "ascend_triton", "cann"};
  return (unsigned)r < QKVFUSE_ROUNDING_COUNT ? names[r] : "?";
}

void tk_spec_describe(const tk_spec *s, char *buf, size_t n) {
  static const char *kinds[] = {"[1]", "scalar", "[Nkv,D]", "[Nkv*D]", "[Nkv]"};
  char pt[200] = "";
  if (s->addressing == QKVFUSE_ADDRESS_PAGE_TABLE)
    snprintf(pt, sizeof pt, " page_table(batch=%lld prefix<=%lld lead=%lld tail=%lld interleave=%d %s/%s/%s/%s)",
             (long long)s->pt_batch, (long long)s->pt_prefix, (long long)s->pt_lead, (long long)s->pt_tail,
             s->pt_interleave, tk_name(s->pt_dt[0]), tk_name(s->pt_dt[1]), tk_name(s->pt_dt[2]),
             tk_name(s->pt_dt[3]));
  if (s->strided) {
    const size_t used = strlen(pt);
    snprintf(pt + used, sizeof pt - used, " strided=0x%llx", (unsigned long long)s->strided);
  }
  snprintf(buf, n,
           "T=%lld(B=%lld,S=%lld,in3d=%d) Nq=%lld Nkv=%lld D=%lld R=%lld qkv=%s q_out=%s k_out=%s v_out=%s "
           "norm=q%d/k%d(g %s/%s beta %s/%s off=%d eps=%g) bias=%s act=%d acc_bits=%lld rope=%s/%s(%s theta=%g "
           "scaling=%s f=%g L=%lld pos=[%lld,%lld]/%s max_pos=%lld) layout=%s(bs=%lld blocks=%lld batch=%lld "
           "max_seq=%lld slot=%s skip=%g%s) k=%s/%s%s v=%s/%s%s q_quant=%s%s rounding=%s inplace=q%d/k%d "
           "pads=%lld/%lld/%lld "
           "split=%d perm=%d cpad=%lld inter=%d flags=%d amp=%g inputs=%d%s",
           (long long)s->T, (long long)s->B, (long long)s->S, s->in3d, (long long)s->Nq, (long long)s->Nkv,
           (long long)s->D, (long long)s->R, tk_name(s->qkv_dt), tk_name(s->q_out_dt), tk_name(s->k_out_dt),
           tk_name(s->v_out_dt), s->q_norm, s->k_norm, tk_name(s->q_gamma_dt), tk_name(s->k_gamma_dt),
           tk_name(s->q_beta_dt), tk_name(s->k_beta_dt), s->gamma_offset, (double)s->eps, tk_name(s->bias_dt),
           s->act_scale, (long long)s->acc_bits, source_name(s->rope_source),
           s->rope_style == QKVFUSE_ROPE_NEOX ? "neox" : "interleaved", tk_name(s->rope_dt), s->rope_theta,
           scaling_name(s->scaling.type), s->scaling.factor, (long long)s->scaling.original_max_position,
           (long long)s->pos_lo, (long long)s->pos_hi, tk_name(s->pos_dt), (long long)s->max_pos,
           layout_name(s->layout), (long long)s->block_size, (long long)s->blocks, (long long)s->cache_batch,
           (long long)s->max_seq, tk_name(s->slot_dt), s->skip_prob,
           s->page_slots ? " page_slots" : "", quant_name(s->k_quant), tk_name(s->k_cache_dt),
           s->k_quant ? kinds[s->k_scale_kind % 5] : "", quant_name(s->v_quant), tk_name(s->v_cache_dt),
           s->v_quant ? kinds[s->v_scale_kind % 5] : "", quant_name(s->q_quant),
           s->q_quant ? kinds[s->q_scale_kind & 1] : "",
           tk_rounding_name(s->rounding),
           s->in_place_q, s->in_place_k,
           (long long)s->qkv_pad, (long long)s->out_pad, (long long)s->rope_pad, s->out_split_heads, s->cache_perm,
           (long long)s->cache_pad, s->kv_interleaved, s->error_flags, s->amp, s->split_inputs, pt);
}
