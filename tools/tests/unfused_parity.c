/* SPDX-License-Identifier: Apache-2.0 */
/* unfused_parity: qf_unfused_run must be bit-identical to qkvfuse_run on the
 * reference backend with QKVFUSE_ROUNDING_UNFUSED_PARITY, on random problems
 * covering every input dtype, layout, quantization mode, RoPE source and
 * style, partial RoPE, norms, in-place outputs, strided rows and skipped slots.
 *
 * Each problem is built twice from the same seed (so in-place runs have their
 * own input), run once each way, and every tensor of the two sets (inputs,
 * outputs and caches, all pre-filled with random bytes) is compared byte for
 * byte. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/dtype.h"
#include "core/plan.h"
#include "presets.h"
#include "unfused.h"
#include "tensors.h"

#define PROBLEMS 600

typedef struct problem {
  qkvfuse_desc desc;
  cli_pool pool;
  qkvfuse_tensor qkv, q_out, k_out; /* views: strided rows, in place */
  qkvfuse_args args;
  char what[256];  /* for failure messages */
  int features[10]; /* what this problem exercises: the FEATURE_* below */
} problem;

/* Coverage: every feature must occur, so a generator change cannot quietly
 * stop testing one. */
enum {
  FEATURE_INT32_INPUT,
  FEATURE_PARTIAL_ROPE,
  FEATURE_INTERLEAVED,
  FEATURE_SKIPPED_SLOT,
  FEATURE_IN_PLACE,
  FEATURE_THREADS,
  FEATURE_Q_QUANT,
  FEATURE_PER_HEAD_SCALE,
  FEATURE_COUNT
};
static const char *const feature_names[FEATURE_COUNT] = {"int32 input", "partial rope", "interleaved",
                                                         "skipped slot", "in place",    "threads > 1",
                                                         "quantized q", "per-head scales"};

static const qkvfuse_dtype floats[3] = {QKVFUSE_DTYPE_FLOAT32, QKVFUSE_DTYPE_FLOAT16, QKVFUSE_DTYPE_BFLOAT16};

static qkvfuse_dtype pick_float(cli_rng *r) { return floats[cli_rng_int(r, 3)]; }

static int chance(cli_rng *r, double p) { return cli_rng_uniform(r) < p; }

static cli_tensor *tensor(problem *pb, qkvfuse_dtype dt, int ndim, const int64_t *shape, cli_rng *r) {
  cli_tensor *x = cli_pool_tensor(&pb->pool, dt, ndim, shape);
  cli_fill_bytes(x, r); /* outputs: what was there before; inputs are filled after */
  return x;
}

/* A quantization scale, per tensor ([1]), per channel ([Nkv, D]) or per kv
 * head ([Nkv]), and for int8_asym its offset of the same shape. Returns 1
 * for a per-head one. */
static int scales(problem *pb, cli_rng *r, int64_t nkv, int64_t d, qkvfuse_quant_mode mode,
                  const qkvfuse_tensor **scale, const qkvfuse_tensor **offset) {
  const int kind = (int)cli_rng_int(r, 3); /* 0: per tensor, 1: per channel, 2: per kv head */
  const int64_t shape[2] = {kind ? nkv : 1, kind == 1 ? d : 1};
  cli_tensor *s = tensor(pb, QKVFUSE_DTYPE_FLOAT32, kind == 1 ? 2 : 1, shape, r);
  cli_fill_signed(s, r, mode == QKVFUSE_QUANT_FP8_E4M3 ? 0.004 : mode == QKVFUSE_QUANT_FP8_E5M2 ? 1e-4 : 0.01, 0.05);
  *scale = &s->t;
  if (mode == QKVFUSE_QUANT_INT8_ASYM) {
    cli_tensor *o = tensor(pb, QKVFUSE_DTYPE_FLOAT32, kind == 1 ? 2 : 1, shape, r);
    cli_fill_range(o, r, -10.0, 10.0);
    *offset = &o->t;
  }
  return kind == 2 && nkv > 1;
}

static qkvfuse_dtype fp8_dtype(qkvfuse_quant_mode m) {
  return m == QKVFUSE_QUANT_FP8_E4M3 ? QKVFUSE_DTYPE_FLOAT8_E4M3FN : QKVFUSE_DTYPE_FLOAT8_E5M2;
}

static qkvfuse_quant_mode pick_quant(cli_rng *r, qkvfuse_dtype *cache_dtype) {
  const qkvfuse_quant_mode m = (qkvfuse_quant_mode)cli_rng_int(r, 5);
  *cache_dtype = m == QKVFUSE_QUANT_NONE                                       ? pick_float(r)
                 : m == QKVFUSE_QUANT_FP8_E4M3 || m == QKVFUSE_QUANT_FP8_E5M2 ? fp8_dtype(m)
                                                                               : QKVFUSE_DTYPE_INT8;
  return m;
}

/* One random problem, entirely determined by seed. */
static void make_problem(uint64_t seed, problem *pb) {
  memset(pb, 0, sizeof *pb);
  cli_rng rr = cli_rng_make(seed), *r = &rr;
  qkvfuse_desc d = QKVFUSE_DESC_INIT;
  qkvfuse_args a = QKVFUSE_ARGS_INIT;

  /* shapes: a preset's heads some of the time, else small random ones */
  int npresets;
  const tk_preset *presets = tk_presets(&npresets);
  if (chance(r, 0.3)) {
    const tk_preset *ps = &presets[cli_rng_int(r, npresets)];
    d.num_q_heads = ps->num_q_heads / 4 > 0 ? ps->num_q_heads / 4 : 1;
    d.num_kv_heads = ps->num_kv_heads <= d.num_q_heads && d.num_q_heads % ps->num_kv_heads == 0 ? ps->num_kv_heads : 1;
    d.head_dim = ps->head_dim;
    d.rotary_dim = ps->rotary_dim;
    d.rope_style = ps->rope_style;
  } else {
    static const int64_t dims[] = {16, 32, 48, 64, 80, 96, 128, 256};
    d.num_kv_heads = 1 + cli_rng_int(r, 4);
    d.num_q_heads = d.num_kv_heads * (1 << cli_rng_int(r, 3));
    d.head_dim = dims[cli_rng_int(r, 8)];
    d.rotary_dim = chance(r, 0.6) ? d.head_dim : 2 + 2 * cli_rng_int(r, d.head_dim / 2);
    d.rope_style = chance(r, 0.5) ? QKVFUSE_ROPE_NEOX : QKVFUSE_ROPE_INTERLEAVED;
  }
  const int64_t Nq = d.num_q_heads, Nkv = d.num_kv_heads, D = d.head_dim, W = Nkv * D;
  const int64_t H = (Nq + 2 * Nkv) * D;

  /* cache layout first: it decides whether the input is [B, S, H] */
  d.cache_layout = (qkvfuse_cache_layout)cli_rng_int(r, 5);
  qkvfuse_dtype kc_dt = QKVFUSE_DTYPE_NONE, vc_dt = QKVFUSE_DTYPE_NONE;
  if (d.cache_layout != QKVFUSE_CACHE_NONE) {
    d.k_quant = pick_quant(r, &kc_dt);
    d.v_quant = pick_quant(r, &vc_dt);
    if (d.cache_layout == QKVFUSE_CACHE_NZ &&
        (W % (int64_t)(32 / qkvfuse_dtype_size(kc_dt)) != 0 || W % (int64_t)(32 / qkvfuse_dtype_size(vc_dt)) != 0))
      d.cache_layout = QKVFUSE_CACHE_PAGED;
  }
  const int contiguous = d.cache_layout == QKVFUSE_CACHE_CONTIGUOUS;
  const int64_t B = contiguous ? 1 + cli_rng_int(r, 4) : 0, S = contiguous ? 1 + cli_rng_int(r, 12) : 1;
  const int64_t T = contiguous ? B * S
                               : (chance(r, 0.1)   ? 0
                                  : chance(r, 0.2) ? 33 + cli_rng_int(r, 64)
                                                   : 1 + cli_rng_int(r, 20));
  d.num_threads = (int32_t)cli_rng_int(r, 4);

  /* input: dtype, row stride */
  const int int_input = chance(r, 0.3);
  const qkvfuse_dtype in_dt = int_input ? QKVFUSE_DTYPE_INT32 : pick_float(r);
  qkvfuse_dtype io = int_input ? pick_float(r) : in_dt;
  /* a quantized q: q_out fp8, q rounded to the I/O dtype first (docs/API.md) */
  d.q_quant = chance(r, 0.25) ? (chance(r, 0.5) ? QKVFUSE_QUANT_FP8_E4M3 : QKVFUSE_QUANT_FP8_E5M2) : QKVFUSE_QUANT_NONE;
  const int64_t ld = H + (chance(r, 0.3) ? 2 * cli_rng_int(r, 9) : 0);
  cli_tensor *qkv_mem = tensor(pb, in_dt, 2, (int64_t[]){T, ld}, r);
  if (int_input)
    cli_fill_signed(qkv_mem, r, 1.0, 1 << 20);
  else
    cli_fill_signed(qkv_mem, r, 0.001, 4.0);
  if (contiguous) {
    qkvfuse_tensor_init(&pb->qkv, qkv_mem->t.data, in_dt, 3, (int64_t[]){B, S, H});
    pb->qkv.strides[0] = S * ld, pb->qkv.strides[1] = ld;
  } else {
    qkvfuse_tensor_init(&pb->qkv, qkv_mem->t.data, in_dt, 2, (int64_t[]){T, H});
    pb->qkv.strides[0] = ld;
  }
  a.qkv = &pb->qkv;
  if (int_input) {
    cli_tensor *ws = tensor(pb, QKVFUSE_DTYPE_FLOAT32, 1, &H, r);
    cli_fill_range(ws, r, 0.25 / (1 << 20), 2.0 / (1 << 20));
    a.weight_scale = &ws->t;
    if (chance(r, 0.5)) {
      cli_tensor *as = tensor(pb, QKVFUSE_DTYPE_FLOAT32, 1, &T, r);
      cli_fill_range(as, r, 0.5, 2.0);
      a.act_scale = &as->t;
    }
    if (chance(r, 0.5)) {
      const qkvfuse_dtype bdt = chance(r, 0.25) ? QKVFUSE_DTYPE_INT32 : pick_float(r);
      cli_tensor *bias = tensor(pb, bdt, 1, &H, r);
      cli_fill_signed(bias, r, bdt == QKVFUSE_DTYPE_INT32 ? 1.0 : 0.01, bdt == QKVFUSE_DTYPE_INT32 ? 4.0 : 0.5);
      a.bias = &bias->t;
    }
  }

  /* RMSNorm */
  d.q_norm = (int32_t)chance(r, 0.6);
  d.k_norm = (int32_t)chance(r, 0.6);
  d.gamma_offset = (int32_t)chance(r, 0.25);
  d.eps = chance(r, 0.5) ? 1e-6f : 1e-5f;
  const int betas = chance(r, 0.3);
  const qkvfuse_dtype g_dt = pick_float(r);
  for (int k = 0; k < 2; k++) {
    if (!(k ? d.k_norm : d.q_norm)) continue;
    cli_tensor *g = tensor(pb, g_dt, 1, &D, r);
    if (d.gamma_offset)
      cli_fill_signed(g, r, 0.01, 0.5);
    else
      cli_fill_range(g, r, 0.5, 1.5);
    *(k ? &a.k_gamma : &a.q_gamma) = &g->t;
    if (betas) {
      cli_tensor *b = tensor(pb, g_dt, 1, &D, r);
      cli_fill_signed(b, r, 0.001, 0.2);
      *(k ? &a.k_beta : &a.q_beta) = &b->t;
    }
  }

  /* RoPE */
  d.rope_source = (qkvfuse_rope_source)cli_rng_int(r, 4);
  const int64_t R = d.rope_source == QKVFUSE_ROPE_NONE ? 0 : d.rotary_dim;
  d.rotary_dim = R;
  const qkvfuse_dtype idx_dt = chance(r, 0.5) ? QKVFUSE_DTYPE_INT32 : QKVFUSE_DTYPE_INT64;
  if (d.rope_source == QKVFUSE_ROPE_COS_SIN_CACHE || d.rope_source == QKVFUSE_ROPE_COMPUTED) {
    const int64_t max_pos = d.rope_source == QKVFUSE_ROPE_COMPUTED ? 1 << 20 : 1 + cli_rng_int(r, 64);
    cli_tensor *pos = tensor(pb, idx_dt, 1, &T, r);
    for (int64_t t = 0; t < T; t++) cli_set(pos, t, (double)cli_rng_int(r, max_pos));
    a.positions = &pos->t;
    if (d.rope_source == QKVFUSE_ROPE_COS_SIN_CACHE) {
      /* int32 input: q_out takes the RoPE table's dtype (SPEC) */
      cli_tensor *csc = tensor(pb, int_input ? io : pick_float(r), 2, (int64_t[]){max_pos, R}, r);
      cli_fill_signed(csc, r, 0.01, 1.0);
      a.cos_sin_cache = &csc->t;
    } else {
      d.rope_theta = chance(r, 0.5) ? 10000.0 : 500000.0;
      d.rope_scaling.type = (qkvfuse_rope_scaling_type)cli_rng_int(r, 5);
      if (d.rope_scaling.type == QKVFUSE_ROPE_SCALING_NTK && R <= 2) /* NTK's exponent R/(R-2) needs R > 2 */
        d.rope_scaling.type = QKVFUSE_ROPE_SCALING_NONE;
      d.rope_scaling.factor = d.rope_scaling.type == QKVFUSE_ROPE_SCALING_NONE ? 1.0 : 4.0;
      d.rope_scaling.original_max_position = 8192;
    }
  } else if (d.rope_source == QKVFUSE_ROPE_COS_SIN) {
    const qkvfuse_dtype cdt = int_input ? io : pick_float(r);
    cli_tensor *c = tensor(pb, cdt, 2, (int64_t[]){T, R}, r), *s = tensor(pb, cdt, 2, (int64_t[]){T, R}, r);
    cli_fill_signed(c, r, 0.01, 1.0);
    cli_fill_signed(s, r, 0.01, 1.0);
    a.cos = &c->t;
    a.sin = &s->t;
  }

  /* with a quantized q the I/O dtype of int32 input is the RoPE table's, float32 without one */
  if (d.q_quant && int_input && !a.cos && !a.cos_sin_cache) io = QKVFUSE_DTYPE_FLOAT32;

  /* outputs: q_out (maybe in place), k_out / v_out (maybe absent; k_out maybe in place) */
  const int q_inplace = !int_input && !contiguous && !d.q_quant && chance(r, 0.2);
  const int k_inplace = !int_input && !contiguous && chance(r, 0.2);
  if (q_inplace) {
    qkvfuse_tensor_init(&pb->q_out, qkv_mem->t.data, io, 2, (int64_t[]){T, Nq * D});
    pb->q_out.strides[0] = ld;
    a.q_out = &pb->q_out;
  } else {
    a.q_out = &tensor(pb, d.q_quant ? fp8_dtype(d.q_quant) : io, 2, (int64_t[]){T, Nq * D}, r)->t;
  }
  if (d.q_quant) {
    cli_tensor *qs = tensor(pb, QKVFUSE_DTYPE_FLOAT32, 1, (int64_t[]){1}, r);
    cli_fill_signed(qs, r, d.q_quant == QKVFUSE_QUANT_FP8_E4M3 ? 0.004 : 1e-4, 0.05);
    a.q_scale = &qs->t;
  }
  if (k_inplace) {
    qkvfuse_tensor_init(&pb->k_out, (char *)qkv_mem->t.data + (size_t)(Nq * D) * qkvfuse_dtype_size(in_dt), io, 2,
                        (int64_t[]){T, W});
    pb->k_out.strides[0] = ld;
    a.k_out = &pb->k_out;
  } else if (chance(r, 0.5)) {
    a.k_out = &tensor(pb, io, 2, (int64_t[]){T, W}, r)->t;
  }
  if (chance(r, 0.5)) a.v_out = &tensor(pb, io, 2, (int64_t[]){T, W}, r)->t;

  /* caches */
  int per_head = 0;
  if (d.cache_layout != QKVFUSE_CACHE_NONE) {
    int64_t shape[2][4], nslots = contiguous ? B : T;
    const qkvfuse_dtype cdt[2] = {kc_dt, vc_dt};
    cli_tensor *slots = tensor(pb, idx_dt, 1, &nslots, r);
    if (contiguous) {
      const int64_t max_seq = S + cli_rng_int(r, 6), batch = B + cli_rng_int(r, 2);
      for (int64_t b = 0; b < B; b++)
        cli_set(slots, b, chance(r, 0.2) ? -1.0 : (double)cli_rng_int(r, max_seq - S + 1));
      for (int k = 0; k < 2; k++) shape[k][0] = batch, shape[k][1] = max_seq, shape[k][2] = Nkv, shape[k][3] = D;
    } else {
      const int64_t bs = (int64_t[]){1, 4, 16, 32}[cli_rng_int(r, 4)];
      const int64_t blocks = (3 * T / 2 + bs) / bs + 1, capacity = blocks * bs;
      int64_t *perm = malloc((size_t)capacity * sizeof *perm);
      cli_rng_permutation(r, perm, capacity);
      for (int64_t t = 0; t < T; t++) cli_set(slots, t, chance(r, 0.2) ? -1.0 : (double)perm[t]);
      free(perm);
      for (int k = 0; k < 2; k++) {
        const int64_t c = 32 / (int64_t)qkvfuse_dtype_size(cdt[k]);
        if (d.cache_layout == QKVFUSE_CACHE_PAGED)
          shape[k][0] = blocks, shape[k][1] = bs, shape[k][2] = Nkv, shape[k][3] = D;
        else if (d.cache_layout == QKVFUSE_CACHE_PAGED_HND)
          shape[k][0] = blocks, shape[k][1] = Nkv, shape[k][2] = bs, shape[k][3] = D;
        else
          shape[k][0] = blocks, shape[k][1] = W / c, shape[k][2] = bs, shape[k][3] = c;
      }
    }
    a.slot_mapping = &slots->t;
    a.k_cache = &tensor(pb, kc_dt, 4, shape[0], r)->t;
    a.v_cache = &tensor(pb, vc_dt, 4, shape[1], r)->t;
    if (d.k_quant != QKVFUSE_QUANT_NONE) per_head |= scales(pb, r, Nkv, D, d.k_quant, &a.k_scale, &a.k_offset);
    if (d.v_quant != QKVFUSE_QUANT_NONE) per_head |= scales(pb, r, Nkv, D, d.v_quant, &a.v_scale, &a.v_offset);
  }

  d.backend = QKVFUSE_BACKEND_REFERENCE;
  d.rounding = QKVFUSE_ROUNDING_UNFUSED_PARITY;
  pb->desc = d;
  pb->args = a;
  int skips = 0;
  for (int64_t i = 0; a.slot_mapping && i < a.slot_mapping->shape[0]; i++)
    skips += qf_load_index(a.slot_mapping->data, a.slot_mapping->dtype, i) == -1;
  pb->features[FEATURE_INT32_INPUT] = int_input && T > 0;
  pb->features[FEATURE_PARTIAL_ROPE] = R > 0 && R < D && T > 0;
  pb->features[FEATURE_INTERLEAVED] = R > 0 && d.rope_style == QKVFUSE_ROPE_INTERLEAVED && T > 0;
  pb->features[FEATURE_SKIPPED_SLOT] = skips > 0;
  pb->features[FEATURE_IN_PLACE] = (q_inplace || k_inplace) && T > 0;
  pb->features[FEATURE_THREADS] = d.num_threads >= 2 && T >= 32;
  pb->features[FEATURE_Q_QUANT] = d.q_quant != QKVFUSE_QUANT_NONE && T > 0;
  pb->features[FEATURE_PER_HEAD_SCALE] = per_head && T > 0;
  snprintf(pb->what, sizeof pb->what,
           "T=%" PRId64 " Nq=%" PRId64 " Nkv=%" PRId64 " D=%" PRId64 " R=%" PRId64 " in=%s io=%s ld=%" PRId64
           " norm=%d/%d off=%d rope=%d style=%d layout=%d quant=%d/%d/q%d inplace=%d/%d threads=%d",
           T, Nq, Nkv, D, R, qkvfuse_dtype_name(in_dt), qkvfuse_dtype_name(io), ld, d.q_norm, d.k_norm, d.gamma_offset,
           d.rope_source, d.rope_style, d.cache_layout, d.k_quant, d.v_quant, d.q_quant, q_inplace, k_inplace,
           d.num_threads);
}

static int run_reference(problem *pb) {
  qkvfuse_plan *plan;
  qkvfuse_status s = qkvfuse_plan_create(&pb->desc, &plan);
  if (s == QKVFUSE_SUCCESS) s = qkvfuse_run(plan, &pb->args, NULL);
  if (s != QKVFUSE_SUCCESS) printf("  reference: %s: %s\n", qkvfuse_status_string(s), qkvfuse_last_error());
  qkvfuse_plan_destroy(plan);
  return s != QKVFUSE_SUCCESS;
}

static int run_unfused(problem *pb) {
  qkvfuse_plan *plan;
  qf_problem p;
  void *scratch = NULL;
  qkvfuse_status s = qkvfuse_plan_create(&pb->desc, &plan);
  if (s == QKVFUSE_SUCCESS) s = qf_resolve(plan, &pb->args, &p);
  if (s == QKVFUSE_SUCCESS) {
    scratch = malloc(qf_unfused_scratch_bytes(&p) + 1);
    s = qf_unfused_run(&p, scratch);
  }
  if (s != QKVFUSE_SUCCESS) printf("  unfused: %s: %s\n", qkvfuse_status_string(s), qkvfuse_last_error());
  free(scratch);
  qkvfuse_plan_destroy(plan);
  return s != QKVFUSE_SUCCESS;
}

/* The unfused path refuses what it cannot run bit-identically: float input
 * whose dtype is not q_out's (here: float32 q_out for bfloat16 qkv). */
static int check_unsupported(void) {
  problem pb;
  for (uint64_t seed = 1;; seed++) {
    make_problem(seed, &pb);
    if (pb.qkv.dtype == QKVFUSE_DTYPE_BFLOAT16 && pb.args.q_out != &pb.q_out && pb.qkv.shape[0] > 0) break;
    cli_pool_free(&pb.pool);
  }
  /* a float32 q_out for bfloat16 qkv: valid for the operator, outside the unfused path's envelope */
  const int64_t T = pb.qkv.ndim == 3 ? pb.qkv.shape[0] * pb.qkv.shape[1] : pb.qkv.shape[0];
  const int64_t cols = pb.desc.num_q_heads * pb.desc.head_dim;
  float *q32 = malloc((size_t)(T * cols) * sizeof *q32);
  qkvfuse_tensor q_f32;
  qkvfuse_tensor_init(&q_f32, q32, QKVFUSE_DTYPE_FLOAT32, 2, (int64_t[]){T, cols});
  pb.args.q_out = &q_f32;
  qkvfuse_plan *plan;
  qf_problem p;
  qkvfuse_status s = qkvfuse_plan_create(&pb.desc, &plan);
  if (s == QKVFUSE_SUCCESS) {
    s = qf_resolve(plan, &pb.args, &p);
    if (s == QKVFUSE_SUCCESS) s = qf_unfused_run(&p, NULL);
    qkvfuse_plan_destroy(plan);
  }
  const int bad = s != QKVFUSE_ERROR_UNSUPPORTED;
  if (bad)
    printf("FAIL: bfloat16 qkv with a float32 q_out: expected QKVFUSE_ERROR_UNSUPPORTED, got %s: %s\n",
           qkvfuse_status_string(s), qkvfuse_last_error());
  free(q32);
  cli_pool_free(&pb.pool);
  return bad;
}

int main(void) {
  int failures = 0, ran = 0;
  int layouts[5] = {0}, quants[5] = {0}, sources[4] = {0}, features[FEATURE_COUNT] = {0};
  for (uint64_t seed = 1; seed <= PROBLEMS; seed++) {
    problem a, b;
    make_problem(seed, &a);
    make_problem(seed, &b);
    int bad = run_reference(&a) | run_unfused(&b);
    for (int i = 0; !bad && i < a.pool.n; i++) {
      const cli_tensor *x = a.pool.items[i], *y = b.pool.items[i];
      if (memcmp(x->t.data, y->t.data, x->bytes) != 0) {
        size_t at = 0;
        while (((const unsigned char *)x->t.data)[at] == ((const unsigned char *)y->t.data)[at]) at++;
        printf("  tensor %d (%s, %zu bytes) differs at byte %zu\n", i, qkvfuse_dtype_name(x->t.dtype), x->bytes, at);
        bad = 1;
      }
    }
    if (bad) {
      printf("FAIL seed %" PRIu64 ": %s\n", seed, a.what);
      failures++;
    }
    ran++;
    layouts[a.desc.cache_layout]++;
    quants[a.desc.k_quant]++;
    quants[a.desc.v_quant]++;
    sources[a.desc.rope_source]++;
    for (int f = 0; f < FEATURE_COUNT; f++) features[f] += a.features[f];
    cli_pool_free(&a.pool);
    cli_pool_free(&b.pool);
  }
  failures += check_unsupported();
  printf(
      "coverage: layouts none/paged/paged_hnd/nz/contiguous %d/%d/%d/%d/%d, quant none/int8_sym/int8_asym/fp8/"
      "fp8_e5m2 %d/%d/%d/%d/%d, rope none/cache/cos_sin/computed %d/%d/%d/%d\n",
      layouts[0], layouts[1], layouts[2], layouts[3], layouts[4], quants[0], quants[1], quants[2], quants[3],
      quants[4], sources[0], sources[1], sources[2], sources[3]);
  int missing = 0;
  for (int i = 0; i < 5; i++) missing += layouts[i] == 0;
  for (int i = 0; i < 4; i++) missing += sources[i] == 0;
  for (int i = 0; i < 5; i++) missing += quants[i] == 0;
  for (int f = 0; f < FEATURE_COUNT; f++) {
    printf("  %s: %d problems\n", feature_names[f], features[f]);
    missing += features[f] == 0;
  }
  if (missing) printf("FAIL: %d features never generated\n", missing);
  failures += missing;
  printf("unfused_parity: %d problems, %d failures\n", ran, failures);
  return failures ? 1 : 0;
}
