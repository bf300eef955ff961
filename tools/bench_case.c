/* SPDX-License-Identifier: Apache-2.0 */
/* Building a benchmark case (see bench_case.h). */
#include "bench_case.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/plan.h"
#include "tensors.h"

#define BENCH_BLOCK_SIZE 16 /* vLLM's default page size */
#define BENCH_MAX_POS 8192  /* rows of the cos_sin_cache, at most */
#define BENCH_MAX_INSTANCES 65536

/* Per-call tensors: one copy per instance. */
enum role { R_QKV, R_POSITIONS, R_ACT_SCALE, R_COS, R_SIN, R_SLOTS, R_Q_OUT, R_K_OUT, R_V_OUT, R_K_CACHE, R_V_CACHE };
/* Model parameters: one copy. */
enum shared { S_Q_GAMMA, S_K_GAMMA, S_COS_SIN_CACHE, S_WEIGHT_SCALE, S_K_SCALE, S_V_SCALE };

/* The variants: name and help, in bench_op order; the option parser, its
 * messages and the help text all read this table. */
static const struct {
  const char *name, *help;
} ops[BENCH_OP_COUNT] = {
    {"split", "split_qkv_rmsnorm_rope out of place: q/k RMSNorm, RoPE from a\n"
              "cos_sin_cache by position, q, k and v outputs"},
    {"cache", "q/k RMSNorm, RoPE from a cos_sin_cache, q output, k and v int8\n"
              "(symmetric, per channel) into a paged cache (block size 16)"},
    {"dequant", "int32 input dequantized, RoPE from per-token cos/sin, q output,\n"
                "k and v int8 into a paged cache"},
    {"inplace", "split in place: q and k normalized and rotated inside the qkv rows\n"
                "(q_out and k_out are views of qkv), v neither read nor written"},
};

const char *bench_op_name(bench_op op) { return op < BENCH_OP_COUNT ? ops[op].name : "?"; }

const char *bench_op_help(bench_op op) { return op < BENCH_OP_COUNT ? ops[op].help : "?"; }

const char *bench_op_names(void) {
  static char names[BENCH_OP_COUNT * 16];
  if (names[0] == '\0') {
    for (int i = 0; i < BENCH_OP_COUNT; i++) {
      if (i) strcat(names, ", ");
      strcat(names, ops[i].name);
    }
  }
  return names;
}

int bench_op_parse(const char *s) {
  for (int i = 0; i < BENCH_OP_COUNT; i++)
    if (strcmp(s, ops[i].name) == 0) return i;
  return -1;
}

static size_t align64(size_t n) { return (n + 63) / 64 * 64; }

/* ---- traffic: what one call must move at least ------------------------------- */

static size_t vec_bytes(const qf_vec *v) { return v->data ? (size_t)v->n * qkvfuse_dtype_size(v->dtype) : 0; }

static size_t mat_bytes(const qf_mat *m) {
  return m->data ? (size_t)(m->rows * m->cols) * qkvfuse_dtype_size(m->dtype) : 0;
}

/* Every input read once and every output written once, counted from the
 * resolved tensors: the cos_sin_cache contributes the T rows it is indexed by,
 * the caches the rows of the tokens that are not skipped. */
static size_t traffic_bytes(const qf_problem *p) {
  const qf_vec *vecs[] = {&p->weight_scale, &p->act_scale, &p->bias,      &p->q_gamma,      &p->k_gamma,
                          &p->q_beta,       &p->k_beta,    &p->positions, &p->slot_mapping, &p->k_scale,
                          &p->v_scale,      &p->k_offset,  &p->v_offset};
  size_t b = mat_bytes(&p->in[0]) + mat_bytes(&p->in[1]) + mat_bytes(&p->cos) + mat_bytes(&p->sin);
  if (p->q_out.data != p->in[0].data || p->v_out.data || p->k_cache.data) /* in place: v is neither read nor written */
    b += mat_bytes(&p->in[2]);
  for (size_t i = 0; i < sizeof vecs / sizeof vecs[0]; i++) b += vec_bytes(vecs[i]);
  if (p->cos_sin_cache.data) b += (size_t)(p->T * p->R) * qkvfuse_dtype_size(p->cos_sin_cache.dtype);
  b += mat_bytes(&p->q_out) + mat_bytes(&p->k_out) + mat_bytes(&p->v_out);
  if (p->k_cache.data) {
    /* the bench's slots are distinct and never -1 (fill_instance_indices), so
     * every token writes its rows; the slot tensor may be device memory */
    const int64_t written = p->T;
    b += (size_t)(written * p->Nkv * p->D) *
         (qkvfuse_dtype_size(p->k_cache.dtype) + qkvfuse_dtype_size(p->v_cache.dtype));
  }
  return b;
}

/* ---- host prototypes ------------------------------------------------------------- */

/* Per-token cos/sin of length R at random positions, laid out for the style. */
static int fill_cos_sin(const cli_preset *ps, cli_rng *rng, cli_tensor *cos_t, cli_tensor *sin_t, int64_t T) {
  const int64_t R = ps->rotary_dim, h = R / 2;
  double inv_freq[256], mscale = 1.0;
  if (qkvfuse_rope_inv_freq(ps->rope_theta, &ps->rope_scaling, R, inv_freq, &mscale) != QKVFUSE_SUCCESS) return -1;
  for (int64_t t = 0; t < T; t++) {
    const double pos = (double)cli_rng_int(rng, ps->max_position);
    for (int64_t i = 0; i < h; i++) {
      const double c = cos(pos * inv_freq[i]) * mscale, s = sin(pos * inv_freq[i]) * mscale;
      const int64_t a = ps->rope_style == QKVFUSE_ROPE_NEOX ? i : 2 * i,
                    b = ps->rope_style == QKVFUSE_ROPE_NEOX ? i + h : 2 * i + 1;
      cli_set(cos_t, t * R + a, c);
      cli_set(cos_t, t * R + b, c);
      cli_set(sin_t, t * R + a, s);
      cli_set(sin_t, t * R + b, s);
    }
  }
  return 0;
}

#define ALLOC(x, dt, nd, ...)                                               \
  do {                                                                      \
    if (cli_tensor_alloc((x), (dt), (nd), (int64_t[]){__VA_ARGS__}) != 0) { \
      snprintf(err, errn, "out of host memory");                            \
      return -1;                                                            \
    }                                                                       \
  } while (0)

/* The host tensors of one instance and the shared parameters; fills c->desc. */
static int build_prototypes(bench_case *c, cli_rng *rng, cli_tensor *proto, cli_tensor *sh, char *err, size_t errn) {
  const bench_spec *s = &c->spec;
  const cli_preset *ps = s->preset;
  const qkvfuse_dtype dt = s->dtype;
  const int64_t T = s->tokens, Nq = ps->num_q_heads, Nkv = ps->num_kv_heads, D = ps->head_dim;
  const int64_t R = ps->rotary_dim, H = (Nq + 2 * Nkv) * D, W = Nkv * D;
  const int norm = s->op != BENCH_OP_DEQUANT, cache = s->op == BENCH_OP_CACHE || s->op == BENCH_OP_DEQUANT;
  const int offset = ps->qk_norm && ps->gamma_offset;

  qkvfuse_desc d = QKVFUSE_DESC_INIT;
  d.num_q_heads = Nq;
  d.num_kv_heads = Nkv;
  d.head_dim = D;
  d.rotary_dim = R;
  d.device_type = c->dev->type;
  d.backend = s->backend;
  d.num_threads = s->threads;
  d.rope_style = ps->rope_style;
  d.eps = ps->eps;

  if (s->op == BENCH_OP_DEQUANT) {
    ALLOC(&proto[R_QKV], QKVFUSE_DTYPE_INT32, 2, T, H);
    cli_fill_signed(&proto[R_QKV], rng, 1.0, 1048576.0);
    ALLOC(&sh[S_WEIGHT_SCALE], QKVFUSE_DTYPE_FLOAT32, 1, H);
    cli_fill_range(&sh[S_WEIGHT_SCALE], rng, 0.25 / 1048576.0, 1.5 / 1048576.0);
    ALLOC(&proto[R_ACT_SCALE], QKVFUSE_DTYPE_FLOAT32, 1, T);
    cli_fill_range(&proto[R_ACT_SCALE], rng, 0.5, 2.0);
    ALLOC(&proto[R_COS], dt, 2, T, R);
    ALLOC(&proto[R_SIN], dt, 2, T, R);
    if (fill_cos_sin(ps, rng, &proto[R_COS], &proto[R_SIN], T) != 0) {
      snprintf(err, errn, "qkvfuse_rope_inv_freq: %s", qkvfuse_last_error());
      return -1;
    }
    d.rope_source = QKVFUSE_ROPE_COS_SIN;
    c->norm = ps->qk_norm ? "omitted" : "none";
  } else {
    ALLOC(&proto[R_QKV], dt, 2, T, H);
    cli_fill_signed(&proto[R_QKV], rng, 0.01, 3.0);
    const int64_t max_pos = ps->max_position < BENCH_MAX_POS ? ps->max_position : BENCH_MAX_POS;
    ALLOC(&sh[S_COS_SIN_CACHE], dt, 2, max_pos, R);
    if (qkvfuse_build_cos_sin_cache(ps->rope_theta, &ps->rope_scaling, &sh[S_COS_SIN_CACHE].t) != QKVFUSE_SUCCESS) {
      snprintf(err, errn, "qkvfuse_build_cos_sin_cache: %s", qkvfuse_last_error());
      return -1;
    }
    ALLOC(&proto[R_POSITIONS], QKVFUSE_DTYPE_INT64, 1, T); /* filled per instance */
    d.rope_source = QKVFUSE_ROPE_COS_SIN_CACHE;
    c->norm = ps->qk_norm ? (offset ? "model (1+g)" : "model") : "synthetic";
  }
  if (norm) {
    d.q_norm = d.k_norm = 1;
    d.gamma_offset = offset;
    for (int g = S_Q_GAMMA; g <= S_K_GAMMA; g++) {
      ALLOC(&sh[g], dt, 1, D);
      if (offset)
        cli_fill_signed(&sh[g], rng, 0.01, 0.5);
      else
        cli_fill_range(&sh[g], rng, 0.5, 1.5);
    }
  }
  if (s->op != BENCH_OP_INPLACE) ALLOC(&proto[R_Q_OUT], dt, 2, T, Nq * D); /* in place: views of qkv (build) */
  if (s->op == BENCH_OP_SPLIT) {
    ALLOC(&proto[R_K_OUT], dt, 2, T, W);
    ALLOC(&proto[R_V_OUT], dt, 2, T, W);
  }
  if (cache) {
    const int64_t blocks = (T + BENCH_BLOCK_SIZE - 1) / BENCH_BLOCK_SIZE;
    ALLOC(&proto[R_SLOTS], QKVFUSE_DTYPE_INT64, 1, T); /* filled per instance */
    ALLOC(&proto[R_K_CACHE], QKVFUSE_DTYPE_INT8, 4, blocks, BENCH_BLOCK_SIZE, Nkv, D);
    ALLOC(&proto[R_V_CACHE], QKVFUSE_DTYPE_INT8, 4, blocks, BENCH_BLOCK_SIZE, Nkv, D);
    ALLOC(&sh[S_K_SCALE], QKVFUSE_DTYPE_FLOAT32, 2, Nkv, D);
    ALLOC(&sh[S_V_SCALE], QKVFUSE_DTYPE_FLOAT32, 2, Nkv, D);
    cli_fill_range(&sh[S_K_SCALE], rng, 0.02, 0.04);
    cli_fill_range(&sh[S_V_SCALE], rng, 0.01, 0.03);
    d.cache_layout = QKVFUSE_CACHE_PAGED;
    d.k_quant = d.v_quant = QKVFUSE_QUANT_INT8_SYM;
  }
  c->desc = d;
  return 0;
}

/* Per-instance index data: random positions; distinct slots, either a
 * random slot per token or (page_slots) consecutive tokens filling pages
 * taken in random order, as a paged engine lays out a prefill. */
static void fill_instance_indices(const bench_case *c, cli_rng *rng, cli_tensor *proto, int64_t *perm) {
  const int64_t T = c->spec.tokens;
  if (proto[R_POSITIONS].t.data) {
    const int64_t rows = c->shared[S_COS_SIN_CACHE].shape[0];
    for (int64_t t = 0; t < T; t++) ((int64_t *)proto[R_POSITIONS].t.data)[t] = cli_rng_int(rng, rows);
  }
  if (proto[R_SLOTS].t.data) {
    const int64_t blocks = proto[R_K_CACHE].t.shape[0], capacity = blocks * BENCH_BLOCK_SIZE;
    int64_t *slots = proto[R_SLOTS].t.data;
    if (c->spec.page_slots) {
      cli_rng_permutation(rng, perm, blocks);
      for (int64_t t = 0; t < T; t++) slots[t] = perm[t / BENCH_BLOCK_SIZE] * BENCH_BLOCK_SIZE + t % BENCH_BLOCK_SIZE;
    } else {
      cli_rng_permutation(rng, perm, capacity);
      memcpy(slots, perm, (size_t)T * sizeof *perm);
    }
  }
}

static void set_args(bench_case *c, qkvfuse_args *a, const qkvfuse_tensor *v) {
  const qkvfuse_tensor *sh = c->shared;
#define OPT(x) ((x).data ? &(x) : NULL)
  *a = (qkvfuse_args)QKVFUSE_ARGS_INIT;
  a->qkv = &v[R_QKV];
  a->weight_scale = OPT(sh[S_WEIGHT_SCALE]);
  a->act_scale = OPT(v[R_ACT_SCALE]);
  a->q_gamma = OPT(sh[S_Q_GAMMA]);
  a->k_gamma = OPT(sh[S_K_GAMMA]);
  a->positions = OPT(v[R_POSITIONS]);
  a->cos_sin_cache = OPT(sh[S_COS_SIN_CACHE]);
  a->cos = OPT(v[R_COS]);
  a->sin = OPT(v[R_SIN]);
  a->slot_mapping = OPT(v[R_SLOTS]);
  a->k_scale = OPT(sh[S_K_SCALE]);
  a->v_scale = OPT(sh[S_V_SCALE]);
  a->q_out = &v[R_Q_OUT];
  a->k_out = OPT(v[R_K_OUT]);
  a->v_out = OPT(v[R_V_OUT]);
  a->k_cache = OPT(v[R_K_CACHE]);
  a->v_cache = OPT(v[R_V_CACHE]);
#undef OPT
}

/* ---- the case ------------------------------------------------------------------------ */

static int64_t instances_for(size_t rotate_bytes, size_t per_instance) {
  int64_t n = per_instance ? (int64_t)((rotate_bytes + per_instance - 1) / per_instance) : 1;
  if (n < 1) n = 1;
  if (n > BENCH_MAX_INSTANCES) n = BENCH_MAX_INSTANCES;
  return n;
}

static int build(bench_case *c, cli_tensor *proto, cli_tensor *sh, size_t rotate_bytes, char *err, size_t errn) {
  const cli_device *dev = c->dev;
  cli_rng rng = cli_rng_make(c->spec.seed);
  if (build_prototypes(c, &rng, proto, sh, err, errn) != 0) return -1;

  /* the plan first: a backend that cannot serve it fails before any allocation */
  qkvfuse_status st = qkvfuse_plan_create(&c->desc, &c->plan);
  if (st != QKVFUSE_SUCCESS) {
    snprintf(err, errn, "cannot make a plan: %s: %s", qkvfuse_status_string(st), qkvfuse_last_error());
    return -1;
  }

  /* shared parameters: one device copy each */
  for (int s = 0; s < BENCH_SHARED; s++) {
    if (sh[s].t.data == NULL) continue;
    if ((c->shared_mem[s] = dev->alloc(sh[s].bytes)) == NULL) goto oom;
    dev->upload(c->shared_mem[s], sh[s].t.data, sh[s].bytes);
    c->shared[s] = sh[s].t;
    c->shared[s].data = c->shared_mem[s];
    c->shared[s].device_type = dev->type;
  }

  /* per-call tensors: `instances` copies, one slab per role */
  size_t stride[BENCH_ROLES] = {0};
  for (int r = 0; r < BENCH_ROLES; r++) stride[r] = proto[r].t.data ? align64(proto[r].bytes) : 0;
  for (int r = 0; r < BENCH_ROLES; r++) c->instance_bytes += stride[r];
  c->instances = instances_for(rotate_bytes, c->instance_bytes);
  for (int r = 0; r < BENCH_ROLES; r++)
    if (stride[r] && (c->slab[r] = dev->alloc(stride[r] * (size_t)c->instances)) == NULL) goto oom;
  c->args = calloc((size_t)c->instances, sizeof *c->args);
  c->views = calloc((size_t)c->instances * BENCH_ROLES, sizeof *c->views);
  const int64_t capacity = proto[R_K_CACHE].t.data ? proto[R_K_CACHE].t.shape[0] * BENCH_BLOCK_SIZE : 1;
  int64_t *perm = malloc((size_t)capacity * sizeof *perm);
  if (c->args == NULL || c->views == NULL || perm == NULL) {
    free(perm);
    goto oom;
  }
  for (int64_t k = 0; k < c->instances; k++) {
    fill_instance_indices(c, &rng, proto, perm);
    qkvfuse_tensor *v = &c->views[k * BENCH_ROLES];
    for (int r = 0; r < BENCH_ROLES; r++) {
      if (!stride[r]) continue;
      void *dst = (char *)c->slab[r] + (size_t)k * stride[r];
      dev->upload(dst, proto[r].t.data, proto[r].bytes); /* also touches every output page */
      v[r] = proto[r].t;
      v[r].data = dst;
      v[r].device_type = dev->type;
    }
    if (c->spec.op == BENCH_OP_INPLACE) { /* q_out and k_out: the q and k columns of the qkv rows */
      const int64_t qw = c->desc.num_q_heads * c->desc.head_dim, kw = c->desc.num_kv_heads * c->desc.head_dim;
      v[R_Q_OUT] = v[R_K_OUT] = v[R_QKV];
      v[R_Q_OUT].shape[1] = qw;
      v[R_K_OUT].shape[1] = kw;
      v[R_K_OUT].data = (char *)v[R_QKV].data + (size_t)qw * qkvfuse_dtype_size(v[R_QKV].dtype);
    }
    set_args(c, &c->args[k], v);
  }
  free(perm);

  qf_problem p;
  st = qf_resolve(c->plan, &c->args[0], &p);
  if (st != QKVFUSE_SUCCESS) {
    snprintf(err, errn, "arguments rejected: %s: %s", qkvfuse_status_string(st), qkvfuse_last_error());
    return -1;
  }
  c->bytes = traffic_bytes(&p);

  if (dev->unfused_run) {
    c->scratch_bytes = dev->unfused_scratch_bytes(&p);
    if ((c->scratch = dev->alloc(c->scratch_bytes)) == NULL) goto oom;
  }

  /* the copy baseline: bytes / 2 read and bytes / 2 written per call */
  c->copy_bytes = c->bytes / 2;
  c->copy_stride = align64(c->copy_bytes);
  c->copy_instances = instances_for(rotate_bytes, 2 * c->copy_stride);
  const size_t total = c->copy_stride * (size_t)c->copy_instances;
  if ((c->copy_src = dev->alloc(total)) == NULL || (c->copy_dst = dev->alloc(total)) == NULL) goto oom;
  /* non-zero bytes: a copy is never timed on zeros */
  unsigned char *pattern = malloc(c->copy_stride ? c->copy_stride : 1);
  if (pattern == NULL) goto oom;
  for (size_t b = 0; b < c->copy_stride; b++) pattern[b] = (unsigned char)(b * 131u + 7u);
  for (int64_t k = 0; k < c->copy_instances; k++) {
    dev->upload((char *)c->copy_src + (size_t)k * c->copy_stride, pattern, c->copy_stride);
    dev->upload((char *)c->copy_dst + (size_t)k * c->copy_stride, pattern, c->copy_stride);
  }
  free(pattern);
  return 0;
oom:
  snprintf(err, errn, "out of memory (%lld instances of %.1f MB)", (long long)c->instances,
           (double)c->instance_bytes / 1e6);
  return -1;
}

int bench_case_make(bench_case *c, const bench_spec *spec, const cli_device *dev, size_t rotate_bytes, char *err,
                    size_t errn) {
  memset(c, 0, sizeof *c);
  c->spec = *spec;
  c->dev = dev;
  c->rotate_target = rotate_bytes;
  cli_tensor proto[BENCH_ROLES], sh[BENCH_SHARED];
  memset(proto, 0, sizeof proto);
  memset(sh, 0, sizeof sh);
  const int rc = build(c, proto, sh, rotate_bytes, err, errn);
  for (int r = 0; r < BENCH_ROLES; r++) cli_tensor_free(&proto[r]);
  for (int s = 0; s < BENCH_SHARED; s++) cli_tensor_free(&sh[s]);
  if (rc != 0) bench_case_free(c);
  return rc;
}

void bench_case_free(bench_case *c) {
  const cli_device *dev = c->dev;
  if (dev == NULL) return;
  for (int r = 0; r < BENCH_ROLES; r++)
    if (c->slab[r]) dev->free(c->slab[r]);
  for (int s = 0; s < BENCH_SHARED; s++)
    if (c->shared_mem[s]) dev->free(c->shared_mem[s]);
  if (c->copy_src) dev->free(c->copy_src);
  if (c->copy_dst) dev->free(c->copy_dst);
  if (c->scratch) dev->free(c->scratch);
  free(c->args);
  free(c->views);
  qkvfuse_plan_destroy(c->plan);
  memset(c, 0, sizeof *c);
}
