/* SPDX-License-Identifier: Apache-2.0 */
/* The three named operators of the demo, each on one preset: random seeded
 * host inputs (never zero), the named operator on the default backend of the
 * demo's device (its tensors mirrored there and its outputs fetched back), the
 * core operator on the reference backend on the host with the equivalent
 * descriptor, and a comparison of every output and cache byte. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compare.h"
#include "demo.h"
#include "tensors.h"

#define SENTINEL_NAMED 0xA5 /* unwritten outputs differ between the two runs */
#define SENTINEL_REF 0x5A
#define DEMO_MAX_POS 8192 /* rows of the demo's cos_sin_cache */

/* ---- shared set-up ---------------------------------------------------------- */

static cli_rng case_rng(const demo_config *cfg, const tk_preset *ps, unsigned op) {
  uint64_t h = 1469598103934665603ull;
  for (const char *s = ps->name; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return cli_rng_make(cfg->seed * 0x100000001b3ull + h + op);
}

static void begin(demo_result *r, const char *op, const tk_preset *ps, const demo_config *cfg) {
  memset(r, 0, sizeof *r);
  r->op = op;
  r->preset = ps->name;
  r->device = cfg->dev->name;
  r->tokens = cfg->tokens;
  r->dtype = cfg->dtype;
  r->backend = "?";
  r->norm = "none";
  snprintf(r->cache, sizeof r->cache, "-");
}

static void failed_call(demo_result *r, const char *who, qkvfuse_status s) {
  r->ok = 0;
  r->max_err = INFINITY;
  snprintf(r->note, sizeof r->note, "%s: %s: %s", who, qkvfuse_status_string(s), qkvfuse_last_error());
}

static void account(demo_result *r, const char *what, double err) {
  if (!(err <= r->max_err)) r->max_err = err;
  if (!(err <= 1.0) && r->note[0] == '\0')
    snprintf(r->note, sizeof r->note, "%s differs from the reference by %g steps", what, err);
}

/* On the CPU the backends are bit-identical to the reference; the CUDA
 * streaming kernel uses rsqrtf and fused multiply-adds (docs/API.md), so its
 * float outputs get a few float32 ulps of each head's largest value. */
static int f32_slack(const demo_config *cfg) { return cfg->dev->type == QKVFUSE_DEVICE_CUDA ? 8 : 0; }

static void finish(demo_result *r) { r->ok = r->note[0] == '\0' && r->max_err <= 1.0; }

/* The backend the named operator ran on: what AUTO picks for its descriptor
 * on the demo's device. */
static const char *default_backend(const qkvfuse_desc *ref, const cli_device *dev) {
  qkvfuse_desc d = *ref;
  d.backend = QKVFUSE_BACKEND_AUTO;
  d.device_type = dev->type;
  d.device_id = 0;
  qkvfuse_plan *plan;
  if (qkvfuse_plan_create(&d, &plan) != QKVFUSE_SUCCESS) return "?";
  const char *name = qkvfuse_plan_backend_name(plan);
  qkvfuse_plan_destroy(plan);
  return name;
}

/* The reference backend's descriptor of preset ps's heads: R rotated
 * dims, cos/sin from `source` in pairs of `style`; norm: the preset's q/k
 * RMSNorm (its eps and gamma offset). */
static qkvfuse_desc reference_desc(const tk_preset *ps, int64_t R, qkvfuse_rope_source source,
                                   qkvfuse_rope_style style, int norm) {
  qkvfuse_desc d = QKVFUSE_DESC_INIT;
  d.num_q_heads = ps->num_q_heads;
  d.num_kv_heads = ps->num_kv_heads;
  d.head_dim = ps->head_dim;
  d.rotary_dim = R;
  d.backend = QKVFUSE_BACKEND_REFERENCE;
  d.rope_source = source;
  d.rope_style = style;
  if (norm) {
    d.q_norm = d.k_norm = 1;
    d.eps = ps->eps;
    d.gamma_offset = ps->qk_norm && ps->gamma_offset;
  }
  return d;
}

static qkvfuse_status run_reference(const qkvfuse_desc *d, const qkvfuse_args *a) {
  qkvfuse_plan *plan;
  qkvfuse_status s = qkvfuse_plan_create(d, &plan);
  if (s != QKVFUSE_SUCCESS) return s;
  s = qkvfuse_run(plan, a, NULL);
  qkvfuse_plan_destroy(plan);
  return s;
}

/* ---- the named call's tensors on the device ----------------------------------- */

/* Every tensor a named call receives, copied to the demo's device: inputs, and
 * outputs and caches too, since their sentinel and initial bytes are what the
 * comparison checks the call left alone. After the call, mirror_fetch brings
 * the outputs and caches back into their host tensors, where the reference's
 * results are compared as before. The CPU device gets copies as well (in other
 * host memory), so a CPU run checks this bookkeeping: an output that was not
 * fetched would keep its sentinel and fail. */
#define MIRROR_MAX 16 /* the most tensors one named call takes */

typedef struct mirror {
  const cli_device *dev;
  int n;
  struct {
    cli_tensor *host;
    int written;      /* an output or cache: fetched back */
    qkvfuse_tensor t; /* what the named call gets: data in device memory */
  } item[MIRROR_MAX];
} mirror;

static mirror mirror_make(const cli_device *dev) { return (mirror){.dev = dev}; }

/* x on the device: same dtype, shape and strides, data in device memory with
 * x's bytes. A tensor given twice is copied once. */
static const qkvfuse_tensor *mirror_tensor(mirror *m, cli_tensor *x, int written) {
  for (int i = 0; i < m->n; i++) {
    if (m->item[i].host != x) continue;
    m->item[i].written |= written;
    return &m->item[i].t;
  }
  if (m->n == MIRROR_MAX) {
    fprintf(stderr, "qkvfuse demo: a named call with more than %d tensors: raise MIRROR_MAX\n", MIRROR_MAX);
    exit(1);
  }
  void *data = m->dev->alloc(x->bytes);
  if (data == NULL) {
    fprintf(stderr, "qkvfuse: out of %s memory allocating a %s tensor\n", m->dev->name, qkvfuse_dtype_name(x->t.dtype));
    exit(1);
  }
  m->dev->upload(data, x->t.data, x->bytes);
  m->item[m->n].host = x;
  m->item[m->n].written = written;
  m->item[m->n].t = x->t;
  m->item[m->n].t.data = data;
  m->item[m->n].t.device_type = m->dev->type;
  m->item[m->n].t.device_id = 0;
  return &m->item[m->n++].t;
}

static const qkvfuse_tensor *mirror_in(mirror *m, cli_tensor *x) { return mirror_tensor(m, x, 0); }
static const qkvfuse_tensor *mirror_out(mirror *m, cli_tensor *x) { return mirror_tensor(m, x, 1); }

/* The stream the named calls take: the device's own (NULL on the CPU). */
static void *mirror_stream(const mirror *m) { return m->dev->stream ? m->dev->stream() : NULL; }

/* Wait for the call, copy its outputs and caches back into their host
 * tensors, free the device memory. After a failed call too (nothing was
 * written; the host tensors are not compared). */
static void mirror_fetch(mirror *m) {
  m->dev->sync();
  for (int i = 0; i < m->n; i++) {
    if (m->item[i].written) m->dev->download(m->item[i].host->t.data, m->item[i].t.data, m->item[i].host->bytes);
    m->dev->free(m->item[i].t.data);
  }
  m->n = 0;
}

static cli_tensor *output(cli_pool *pool, qkvfuse_dtype dt, int ndim, const int64_t *shape, int sentinel) {
  cli_tensor *x = cli_pool_tensor(pool, dt, ndim, shape);
  memset(x->t.data, sentinel, x->bytes);
  return x;
}

/* The q/k norm weights. A model with q/k norm gets unit-ish g; a Gemma-style
 * model stores g near 0 and uses 1 + g, which the named operators (no
 * gamma_offset argument) receive folded into float32 weights: exactly the
 * float32 value the core computes from g with desc.gamma_offset = 1. A model
 * without q/k norm gets synthetic unit-ish weights. */
static void norm_weights(cli_pool *pool, cli_rng *rng, const tk_preset *ps, qkvfuse_dtype dt, cli_tensor **named,
                         cli_tensor **ref, demo_result *r) {
  const int64_t D = ps->head_dim;
  *ref = cli_pool_tensor(pool, dt, 1, &D);
  if (ps->qk_norm && ps->gamma_offset) {
    cli_fill_signed(*ref, rng, 0.01, 0.5);
    *named = cli_pool_tensor(pool, QKVFUSE_DTYPE_FLOAT32, 1, &D);
    for (int64_t i = 0; i < D; i++) ((float *)(*named)->t.data)[i] = 1.0f + (float)cli_get(*ref, i);
  } else {
    cli_fill_range(*ref, rng, 0.5, 1.5);
    *named = *ref;
  }
  r->norm = ps->qk_norm ? (ps->gamma_offset ? "model (1+g)" : "model") : "synthetic";
}

/* Per-token full-length neox cos and sin ([T, D] elements) at random
 * positions of the model's context, from its theta and scaling rule. */
static qkvfuse_status fill_cos_sin(const tk_preset *ps, cli_rng *rng, cli_tensor *cos_t, cli_tensor *sin_t,
                                   int64_t T) {
  const int64_t D = ps->head_dim, h = D / 2;
  double inv_freq[256], mscale = 1.0;
  qkvfuse_status s = qkvfuse_rope_inv_freq(ps->rope_theta, &ps->rope_scaling, D, inv_freq, &mscale);
  if (s != QKVFUSE_SUCCESS) return s;
  for (int64_t t = 0; t < T; t++) {
    const double pos = (double)cli_rng_int(rng, ps->max_position);
    for (int64_t i = 0; i < h; i++) {
      const double c = cos(pos * inv_freq[i]) * mscale, sn = sin(pos * inv_freq[i]) * mscale;
      cli_set(cos_t, t * D + i, c);
      cli_set(cos_t, t * D + h + i, c);
      cli_set(sin_t, t * D + i, sn);
      cli_set(sin_t, t * D + h + i, sn);
    }
  }
  return QKVFUSE_SUCCESS;
}

/* Distinct random slots of a cache with `capacity` rows for T tokens; every
 * token t with t % 7 == 3 is skipped (-1). */
static void make_slots(cli_rng *rng, int64_t *slots, int64_t T, int64_t capacity) {
  int64_t *perm = malloc((size_t)capacity * sizeof *perm);
  if (perm == NULL) {
    fprintf(stderr, "qkvfuse: out of memory\n");
    exit(1);
  }
  cli_rng_permutation(rng, perm, capacity);
  for (int64_t t = 0; t < T; t++) slots[t] = t % 7 == 3 ? -1 : perm[t];
  free(perm);
}

static cli_tensor *index_tensor(cli_pool *pool, const int64_t *v, int64_t n) {
  cli_tensor *x = cli_pool_tensor(pool, QKVFUSE_DTYPE_INT64, 1, &n);
  memcpy(x->t.data, v, (size_t)n * sizeof *v);
  return x;
}

/* Compare the two runs' caches (written elements within a step, the rest untouched). */
static void compare_cache(demo_result *r, const char *what, qkvfuse_cache_layout layout, const tk_preset *ps,
                          const cli_tensor *got, const cli_tensor *want, const cli_tensor *initial,
                          const int64_t *slots, int64_t T, int64_t S) {
  unsigned char *written = calloc((size_t)cli_tensor_numel(got), 1);
  if (written == NULL) {
    fprintf(stderr, "qkvfuse: out of memory\n");
    exit(1);
  }
  cli_cache_mark(layout, &initial->t, ps->num_kv_heads, ps->head_dim, slots, T, S, written);
  const double e = cli_cache_err(got, want, initial, written);
  if (isinf(e) && r->note[0] == '\0')
    snprintf(r->note, sizeof r->note, "%s: a byte outside the written slots changed", what);
  account(r, what, e);
  free(written);
}

/* The int8 k and v caches of the cache operators: their bytes before the
 * call (random: k0, v0), the copies the named call and the reference write
 * (k, v, k_ref, v_ref), and per-channel [Nkv, D] scales, k symmetric and v
 * asymmetric (v_offset). */
typedef struct int8_caches {
  cli_tensor *k0, *v0, *k, *v, *k_ref, *v_ref, *k_scale, *v_scale, *v_offset;
} int8_caches;

static int8_caches int8_caches_make(cli_pool *pool, cli_rng *rng, const int64_t shape[4], int64_t Nkv, int64_t D) {
  int8_caches c;
  c.k0 = cli_pool_tensor(pool, QKVFUSE_DTYPE_INT8, 4, shape);
  c.v0 = cli_pool_tensor(pool, QKVFUSE_DTYPE_INT8, 4, shape);
  cli_fill_bytes(c.k0, rng);
  cli_fill_bytes(c.v0, rng);
  c.k = cli_pool_clone(pool, c.k0), c.v = cli_pool_clone(pool, c.v0);
  c.k_ref = cli_pool_clone(pool, c.k0), c.v_ref = cli_pool_clone(pool, c.v0);
  const int64_t sshape[2] = {Nkv, D};
  c.k_scale = cli_pool_tensor(pool, QKVFUSE_DTYPE_FLOAT32, 2, sshape);
  c.v_scale = cli_pool_tensor(pool, QKVFUSE_DTYPE_FLOAT32, 2, sshape);
  c.v_offset = cli_pool_tensor(pool, QKVFUSE_DTYPE_FLOAT32, 2, sshape);
  cli_fill_range(c.k_scale, rng, 0.02, 0.04);
  cli_fill_range(c.v_scale, rng, 0.01, 0.03);
  cli_fill_signed(c.v_offset, rng, 0.1, 8.0);
  return c;
}

/* The quantizers of the caches' scales in d: k symmetric, v asymmetric. */
static void int8_caches_quant(qkvfuse_desc *d) {
  d->k_quant = QKVFUSE_QUANT_INT8_SYM;
  d->v_quant = QKVFUSE_QUANT_INT8_ASYM;
}

/* The reference run's caches and scales in a. */
static void int8_caches_args(const int8_caches *c, qkvfuse_args *a) {
  a->k_scale = &c->k_scale->t;
  a->v_scale = &c->v_scale->t;
  a->v_offset = &c->v_offset->t;
  a->k_cache = &c->k_ref->t;
  a->v_cache = &c->v_ref->t;
}

/* compare_cache of both caches. */
static void int8_caches_compare(demo_result *r, const int8_caches *c, qkvfuse_cache_layout layout, const tk_preset *ps,
                                const int64_t *slots, int64_t T, int64_t S) {
  compare_cache(r, "k_cache", layout, ps, c->k, c->k_ref, c->k0, slots, T, S);
  compare_cache(r, "v_cache", layout, ps, c->v, c->v_ref, c->v0, slots, T, S);
}

/* The cache operators apply neox RoPE to all D dims of a head. */
static int fits_full_neox(const tk_preset *ps, demo_result *r) {
  if (ps->rotary_dim == ps->head_dim && ps->rope_style == QKVFUSE_ROPE_NEOX) return 1;
  r->skipped = 1;
  r->ok = 1;
  r->backend = "-";
  r->norm = "-";
  r->max_err = NAN;
  snprintf(r->note, sizeof r->note,
           "skipped: the op applies neox RoPE to all D dims; %s uses %s RoPE on R = %lld of D = %lld", ps->name,
           ps->rope_style == QKVFUSE_ROPE_NEOX ? "neox" : "interleaved", (long long)ps->rotary_dim,
           (long long)ps->head_dim);
  return 0;
}

/* ---- split_qkv_rmsnorm_rope ------------------------------------------------------ */

void demo_split_qkv_rmsnorm_rope(const tk_preset *ps, const demo_config *cfg, demo_result *r) {
  begin(r, "split_qkv_rmsnorm_rope", ps, cfg);
  const qkvfuse_dtype dt = cfg->dtype;
  const int64_t T = cfg->tokens, Nq = ps->num_q_heads, Nkv = ps->num_kv_heads, D = ps->head_dim;
  const int64_t R = ps->rotary_dim, H = (Nq + 2 * Nkv) * D;
  const int64_t max_pos = ps->max_position < DEMO_MAX_POS ? ps->max_position : DEMO_MAX_POS;
  cli_pool pool = {0};
  cli_rng rng = case_rng(cfg, ps, 1);

  cli_tensor *qkv = cli_pool_tensor(&pool, dt, 2, (int64_t[]){T, H});
  cli_fill_signed(qkv, &rng, 0.01, 3.0);
  cli_tensor *gq, *gq_ref, *gk, *gk_ref;
  norm_weights(&pool, &rng, ps, dt, &gq, &gq_ref, r);
  norm_weights(&pool, &rng, ps, dt, &gk, &gk_ref, r);
  cli_tensor *csc = cli_pool_tensor(&pool, dt, 2, (int64_t[]){max_pos, R});
  qkvfuse_status s = qkvfuse_build_cos_sin_cache(ps->rope_theta, &ps->rope_scaling, &csc->t);
  if (s != QKVFUSE_SUCCESS) {
    failed_call(r, "qkvfuse_build_cos_sin_cache", s);
    cli_pool_free(&pool);
    return;
  }
  cli_tensor *pos = cli_pool_tensor(&pool, QKVFUSE_DTYPE_INT64, 1, &T);
  for (int64_t t = 0; t < T; t++) cli_set(pos, t, (double)cli_rng_int(&rng, max_pos));
  cli_tensor *q = output(&pool, dt, 2, (int64_t[]){T, Nq * D}, SENTINEL_NAMED);
  cli_tensor *k = output(&pool, dt, 2, (int64_t[]){T, Nkv * D}, SENTINEL_NAMED);
  cli_tensor *v = output(&pool, dt, 2, (int64_t[]){T, Nkv * D}, SENTINEL_NAMED);
  cli_tensor *q_ref = output(&pool, dt, 2, (int64_t[]){T, Nq * D}, SENTINEL_REF);
  cli_tensor *k_ref = output(&pool, dt, 2, (int64_t[]){T, Nkv * D}, SENTINEL_REF);
  cli_tensor *v_ref = output(&pool, dt, 2, (int64_t[]){T, Nkv * D}, SENTINEL_REF);

  const qkvfuse_desc d = reference_desc(ps, R, QKVFUSE_ROPE_COS_SIN_CACHE, ps->rope_style, 1);
  r->backend = default_backend(&d, cfg->dev);

  mirror m = mirror_make(cfg->dev);
  s = qkvfuse_split_qkv_rmsnorm_rope(mirror_in(&m, qkv), mirror_in(&m, gq), mirror_in(&m, gk), Nq * D, Nkv * D, D,
                                     (double)ps->eps, mirror_in(&m, csc), mirror_in(&m, pos), R, NULL, NULL,
                                     ps->rope_style == QKVFUSE_ROPE_NEOX, mirror_out(&m, q), mirror_out(&m, k),
                                     mirror_out(&m, v), NULL, mirror_stream(&m));
  mirror_fetch(&m);
  if (s != QKVFUSE_SUCCESS) {
    failed_call(r, "qkvfuse_split_qkv_rmsnorm_rope", s);
    cli_pool_free(&pool);
    return;
  }
  qkvfuse_args a = QKVFUSE_ARGS_INIT;
  a.qkv = &qkv->t;
  a.q_gamma = &gq_ref->t;
  a.k_gamma = &gk_ref->t;
  a.cos_sin_cache = &csc->t;
  a.positions = &pos->t;
  a.q_out = &q_ref->t;
  a.k_out = &k_ref->t;
  a.v_out = &v_ref->t;
  s = run_reference(&d, &a);
  if (s != QKVFUSE_SUCCESS) {
    failed_call(r, "reference", s);
    cli_pool_free(&pool);
    return;
  }
  account(r, "q_out", cli_max_err_heads(q, q_ref, D, f32_slack(cfg)));
  account(r, "k_out", cli_max_err_heads(k, k_ref, D, f32_slack(cfg)));
  account(r, "v_out", cli_max_err_heads(v, v_ref, D, f32_slack(cfg)));
  finish(r);
  cli_pool_free(&pool);
}

/* ---- qkv_rmsnorm_rope_cache --------------------------------------------------------- */

#define NZ_BLOCK_SIZE 128 /* a multiple of 32, as the CANN operator requires for int8 */

void demo_qkv_rmsnorm_rope_cache(const tk_preset *ps, const demo_config *cfg, demo_result *r) {
  begin(r, "qkv_rmsnorm_rope_cache", ps, cfg);
  snprintf(r->cache, sizeof r->cache, "nz int8 k:sym v:asym");
  if (!fits_full_neox(ps, r)) return;
  const qkvfuse_dtype dt = cfg->dtype;
  const int64_t T = cfg->tokens, Nq = ps->num_q_heads, Nkv = ps->num_kv_heads, D = ps->head_dim;
  const int64_t H = (Nq + 2 * Nkv) * D, W = Nkv * D;
  const int64_t blocks = (2 * T + NZ_BLOCK_SIZE - 1) / NZ_BLOCK_SIZE + 1;
  cli_pool pool = {0};
  cli_rng rng = case_rng(cfg, ps, 2);

  cli_tensor *qkv = cli_pool_tensor(&pool, dt, 2, (int64_t[]){T, H});
  cli_fill_signed(qkv, &rng, 0.01, 3.0);
  cli_tensor *gq, *gq_ref, *gk, *gk_ref;
  norm_weights(&pool, &rng, ps, dt, &gq, &gq_ref, r);
  norm_weights(&pool, &rng, ps, dt, &gk, &gk_ref, r);
  cli_tensor *cos_t = cli_pool_tensor(&pool, dt, 2, (int64_t[]){T, D});
  cli_tensor *sin_t = cli_pool_tensor(&pool, dt, 2, (int64_t[]){T, D});
  qkvfuse_status s = fill_cos_sin(ps, &rng, cos_t, sin_t, T);
  if (s != QKVFUSE_SUCCESS) {
    failed_call(r, "qkvfuse_rope_inv_freq", s);
    cli_pool_free(&pool);
    return;
  }
  int64_t *slots = malloc((size_t)(T ? T : 1) * sizeof *slots);
  make_slots(&rng, slots, T, blocks * NZ_BLOCK_SIZE);
  cli_tensor *index = index_tensor(&pool, slots, T);
  const int64_t cache_shape[4] = {blocks, W / 32, NZ_BLOCK_SIZE, 32};
  const int8_caches c = int8_caches_make(&pool, &rng, cache_shape, Nkv, D);
  cli_tensor *q = output(&pool, dt, 2, (int64_t[]){T, Nq * D}, SENTINEL_NAMED);
  cli_tensor *q_bq = output(&pool, dt, 2, (int64_t[]){T, Nq * D}, SENTINEL_NAMED);
  cli_tensor *k_bq = output(&pool, dt, 2, (int64_t[]){T, W}, SENTINEL_NAMED);
  cli_tensor *v_bq = output(&pool, dt, 2, (int64_t[]){T, W}, SENTINEL_NAMED);
  cli_tensor *q_ref = output(&pool, dt, 2, (int64_t[]){T, Nq * D}, SENTINEL_REF);
  cli_tensor *k_ref = output(&pool, dt, 2, (int64_t[]){T, W}, SENTINEL_REF);
  cli_tensor *v_ref = output(&pool, dt, 2, (int64_t[]){T, W}, SENTINEL_REF);

  qkvfuse_desc d = reference_desc(ps, D, QKVFUSE_ROPE_COS_SIN, QKVFUSE_ROPE_NEOX, 1);
  d.cache_layout = QKVFUSE_CACHE_NZ;
  int8_caches_quant(&d);
  r->backend = default_backend(&d, cfg->dev);

  const int64_t qkv_size[4] = {1, T, Nq + 2 * Nkv, D}, head_nums[3] = {Nq, Nkv, Nkv};
  mirror m = mirror_make(cfg->dev);
  s = qkvfuse_qkv_rmsnorm_rope_cache(
      mirror_in(&m, qkv), mirror_in(&m, gq), mirror_in(&m, gk), mirror_in(&m, cos_t), mirror_in(&m, sin_t),
      mirror_in(&m, index), mirror_out(&m, q), mirror_out(&m, c.k), mirror_out(&m, c.v), mirror_in(&m, c.k_scale),
      mirror_in(&m, c.v_scale), NULL, mirror_in(&m, c.v_offset), mirror_out(&m, q_bq), mirror_out(&m, k_bq),
      mirror_out(&m, v_bq), qkv_size, head_nums, (double)ps->eps, "PA_NZ", 1, NULL, mirror_stream(&m));
  mirror_fetch(&m);
  if (s != QKVFUSE_SUCCESS) {
    failed_call(r, "qkvfuse_qkv_rmsnorm_rope_cache", s);
  } else {
    qkvfuse_args a = QKVFUSE_ARGS_INIT;
    a.qkv = &qkv->t;
    a.q_gamma = &gq_ref->t;
    a.k_gamma = &gk_ref->t;
    a.cos = &cos_t->t;
    a.sin = &sin_t->t;
    a.slot_mapping = &index->t;
    a.q_out = &q_ref->t;
    a.k_out = &k_ref->t;
    a.v_out = &v_ref->t;
    int8_caches_args(&c, &a);
    s = run_reference(&d, &a);
    if (s != QKVFUSE_SUCCESS) {
      failed_call(r, "reference", s);
    } else {
      account(r, "q_out", cli_max_err_heads(q, q_ref, D, f32_slack(cfg)));
      account(r, "q_out_before_quant", cli_max_err_heads(q_bq, q_ref, D, f32_slack(cfg)));
      account(r, "k_out_before_quant", cli_max_err_heads(k_bq, k_ref, D, f32_slack(cfg)));
      account(r, "v_out_before_quant", cli_max_err_heads(v_bq, v_ref, D, f32_slack(cfg)));
      int8_caches_compare(r, &c, QKVFUSE_CACHE_NZ, ps, slots, T, 1);
      finish(r);
    }
  }
  free(slots);
  cli_pool_free(&pool);
}

/* ---- dequant_rope_quant_kvcache ------------------------------------------------------ */

#define PAGE_BLOCK_SIZE 16
#define CONTIGUOUS_SLACK 8 /* max_seq = S + this: start indices 0..8 */

void demo_dequant_rope_quant_kvcache(const tk_preset *ps, int preset_index, const demo_config *cfg, demo_result *r) {
  begin(r, "dequant_rope_quant_kvcache", ps, cfg);
  const int contiguous = preset_index % 2 == 0;
  const qkvfuse_cache_layout layout = contiguous ? QKVFUSE_CACHE_CONTIGUOUS : QKVFUSE_CACHE_PAGED;
  snprintf(r->cache, sizeof r->cache, "%s int8 k:sym v:asym", contiguous ? "contiguous" : "page");
  r->norm = ps->qk_norm ? "omitted" : "none";
  if (!fits_full_neox(ps, r)) return;
  const qkvfuse_dtype dt = cfg->dtype;
  const int64_t T = cfg->tokens, Nq = ps->num_q_heads, Nkv = ps->num_kv_heads, D = ps->head_dim;
  const int64_t H = (Nq + 2 * Nkv) * D, W = Nkv * D;
  const int64_t B = T >= 8 && T % 4 == 0 ? 4 : T, S = B ? T / B : 1;
  cli_pool pool = {0};
  cli_rng rng = case_rng(cfg, ps, 3);

  cli_tensor *x = cli_pool_tensor(&pool, QKVFUSE_DTYPE_INT32, 3, (int64_t[]){B, S, H});
  cli_fill_signed(x, &rng, 1.0, 1048576.0); /* int8 GEMM accumulators */
  cli_tensor *wscale = cli_pool_tensor(&pool, QKVFUSE_DTYPE_FLOAT32, 1, &H);
  cli_fill_range(wscale, &rng, 0.25 / 1048576.0, 1.5 / 1048576.0);
  cli_tensor *ascale = cli_pool_tensor(&pool, QKVFUSE_DTYPE_FLOAT32, 1, &T);
  cli_fill_range(ascale, &rng, 0.5, 2.0);
  cli_tensor *bias = cli_pool_tensor(&pool, dt, 1, &H);
  cli_fill_signed(bias, &rng, 0.01, 0.5);
  cli_tensor *cos_t = cli_pool_tensor(&pool, dt, 4, (int64_t[]){B, S, 1, D});
  cli_tensor *sin_t = cli_pool_tensor(&pool, dt, 4, (int64_t[]){B, S, 1, D});
  qkvfuse_status s = fill_cos_sin(ps, &rng, cos_t, sin_t, T);
  if (s != QKVFUSE_SUCCESS) {
    failed_call(r, "qkvfuse_rope_inv_freq", s);
    cli_pool_free(&pool);
    return;
  }
  int64_t cache_shape[4];
  const int64_t nslots = contiguous ? B : T;
  int64_t *slots = malloc((size_t)(nslots ? nslots : 1) * sizeof *slots);
  if (contiguous) {
    cache_shape[0] = B, cache_shape[1] = S + CONTIGUOUS_SLACK;
    for (int64_t b = 0; b < B; b++) slots[b] = b == 1 ? -1 : cli_rng_int(&rng, CONTIGUOUS_SLACK + 1);
  } else {
    cache_shape[0] = (2 * T + PAGE_BLOCK_SIZE - 1) / PAGE_BLOCK_SIZE + 1, cache_shape[1] = PAGE_BLOCK_SIZE;
    make_slots(&rng, slots, T, cache_shape[0] * PAGE_BLOCK_SIZE);
  }
  cache_shape[2] = Nkv, cache_shape[3] = D;
  cli_tensor *indices = index_tensor(&pool, slots, nslots);
  const int8_caches c = int8_caches_make(&pool, &rng, cache_shape, Nkv, D);
  cli_tensor *q = output(&pool, dt, 4, (int64_t[]){B, S, Nq, D}, SENTINEL_NAMED);
  cli_tensor *k = output(&pool, dt, 2, (int64_t[]){T, W}, SENTINEL_NAMED);
  cli_tensor *v = output(&pool, dt, 2, (int64_t[]){T, W}, SENTINEL_NAMED);
  cli_tensor *q_ref = output(&pool, dt, 4, (int64_t[]){B, S, Nq, D}, SENTINEL_REF);
  cli_tensor *k_ref = output(&pool, dt, 2, (int64_t[]){T, W}, SENTINEL_REF);
  cli_tensor *v_ref = output(&pool, dt, 2, (int64_t[]){T, W}, SENTINEL_REF);

  qkvfuse_desc d = reference_desc(ps, D, QKVFUSE_ROPE_COS_SIN, QKVFUSE_ROPE_NEOX, 0);
  d.cache_layout = layout;
  int8_caches_quant(&d);
  r->backend = default_backend(&d, cfg->dev);

  const int64_t splits[3] = {Nq * D, W, W};
  mirror m = mirror_make(cfg->dev);
  s = qkvfuse_dequant_rope_quant_kvcache(mirror_in(&m, x), mirror_in(&m, cos_t), mirror_in(&m, sin_t),
                                         mirror_out(&m, c.k), mirror_out(&m, c.v), mirror_in(&m, indices),
                                         mirror_in(&m, c.k_scale), mirror_in(&m, c.v_scale), NULL,
                                         mirror_in(&m, c.v_offset),
                                         mirror_in(&m, wscale), mirror_in(&m, ascale), mirror_in(&m, bias), splits,
                                         "static", "BSND", 1, contiguous ? "contiguous" : "page", mirror_out(&m, q),
                                         mirror_out(&m, k), mirror_out(&m, v), NULL, mirror_stream(&m));
  mirror_fetch(&m);
  if (s != QKVFUSE_SUCCESS) {
    failed_call(r, "qkvfuse_dequant_rope_quant_kvcache", s);
  } else {
    /* the core takes cos/sin and q_out as [T, X] views of the same memory */
    const qkvfuse_tensor cos_v = cli_tensor_view(cos_t, 2, (int64_t[]){T, D});
    const qkvfuse_tensor sin_v = cli_tensor_view(sin_t, 2, (int64_t[]){T, D});
    const qkvfuse_tensor q_v = cli_tensor_view(q_ref, 2, (int64_t[]){T, Nq * D});
    qkvfuse_args a = QKVFUSE_ARGS_INIT;
    a.qkv = &x->t;
    a.weight_scale = &wscale->t;
    a.act_scale = &ascale->t;
    a.bias = &bias->t;
    a.cos = &cos_v;
    a.sin = &sin_v;
    a.slot_mapping = &indices->t;
    a.q_out = &q_v;
    a.k_out = &k_ref->t;
    a.v_out = &v_ref->t;
    int8_caches_args(&c, &a);
    s = run_reference(&d, &a);
    if (s != QKVFUSE_SUCCESS) {
      failed_call(r, "reference", s);
    } else {
      account(r, "q_out", cli_max_err_heads(q, q_ref, D, f32_slack(cfg)));
      account(r, "k_out", cli_max_err_heads(k, k_ref, D, f32_slack(cfg)));
      account(r, "v_out", cli_max_err_heads(v, v_ref, D, f32_slack(cfg)));
      int8_caches_compare(r, &c, layout, ps, slots, T, contiguous ? S : 1);
      finish(r);
      if (r->ok && ps->qk_norm)
        snprintf(r->note, sizeof r->note, "%s applies q/k RMSNorm before RoPE; this op has none", ps->name);
    }
  }
  free(slots);
  cli_pool_free(&pool);
}
