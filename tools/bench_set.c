/* SPDX-License-Identifier: Apache-2.0 */
/* Building a benchmark case on the test kit (see bench_set.h). */
#include "bench_set.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/plan.h"
#include "harness.h"

#define BENCH_MAX_INSTANCES 65536

static size_t align64(size_t n) { return (n + 63) / 64 * 64; }

/* Model parameters: one device copy for every set. The rest (inputs, index
 * tensors, outputs, caches) is per call. */
static int shared_slot(int b) {
  switch (b) {
    case TK_WEIGHT_SCALE: case TK_BIAS: case TK_Q_GAMMA: case TK_K_GAMMA: case TK_Q_BETA: case TK_K_BETA:
    case TK_COS_SIN_CACHE: case TK_K_SCALE: case TK_V_SCALE: case TK_K_OFFSET: case TK_V_OFFSET: case TK_Q_SCALE:
      return 1;
    default:
      return 0;
  }
}

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
    /* the presets' slots are distinct and never -1 (tk_preset_spec), so every
     * token writes its rows; the slot tensor may be device memory */
    const int64_t written = p->T;
    b += (size_t)(written * p->Nkv * p->D) *
         (qkvfuse_dtype_size(p->k_cache.dtype) + qkvfuse_dtype_size(p->v_cache.dtype));
  }
  return b;
}

/* ---- the case ------------------------------------------------------------------------ */

static int64_t instances_for(size_t rotate_bytes, size_t per_instance) {
  int64_t n = per_instance ? (int64_t)((rotate_bytes + per_instance - 1) / per_instance) : 1;
  if (n < 1) n = 1;
  if (n > BENCH_MAX_INSTANCES) n = BENCH_MAX_INSTANCES;
  return n;
}

/* Point the kit case's device buffers at set k (shared ones at their copy). */
static void point_at_set(bench_case *c, int64_t k) {
  for (int b = 0; b <= TK_NSLOT; b++)
    c->kc.buf[b].dev = c->stride[b] ? (char *)c->slab[b] + (size_t)k * c->stride[b] : c->shared[b];
}

static const char *norm_of(const bench_spec *s) {
  const tk_preset *ps = s->preset;
  if (s->op == TK_OP_DEQUANT) return ps->qk_norm ? "omitted" : "none";
  return ps->qk_norm ? (ps->gamma_offset ? "model (1+g)" : "model") : "synthetic";
}

static int build(bench_case *c, size_t rotate_bytes, char *err, size_t errn) {
  const tk_device *mem = c->mem;
  tk_spec sp;
  tk_preset_spec(&sp, c->spec.preset, c->spec.op, c->spec.tokens, c->spec.dtype, c->spec.page_slots);
  if (tk_case_build(&c->kc, &sp, c->spec.seed) != 0) {
    snprintf(err, errn, "out of host memory");
    return -1;
  }
  c->kc.dev = mem;
  c->norm = norm_of(&c->spec);
  c->desc = c->kc.desc;
  c->desc.device_type = mem->type;
  c->desc.device_id = mem->id;
  c->desc.backend = c->spec.backend;
  c->desc.num_threads = c->spec.threads;

  /* the plan first: a backend that cannot serve it fails before any allocation */
  qkvfuse_status st = qkvfuse_plan_create(&c->desc, &c->plan);
  if (st != QKVFUSE_SUCCESS) {
    snprintf(err, errn, "cannot make a plan: %s: %s", qkvfuse_status_string(st), qkvfuse_last_error());
    return -1;
  }

  for (int b = 0; b <= TK_NSLOT; b++) {
    const tk_buf *x = &c->kc.buf[b];
    if (!x->bytes) continue;
    if (shared_slot(b)) {
      if ((c->shared[b] = mem->alloc(x->bytes)) == NULL || mem->upload(c->shared[b], x->init, x->bytes)) goto oom;
    } else {
      c->stride[b] = align64(x->bytes);
      c->instance_bytes += c->stride[b];
    }
  }
  c->instances = instances_for(rotate_bytes, c->instance_bytes);
  for (int b = 0; b <= TK_NSLOT; b++)
    if (c->stride[b] && (c->slab[b] = mem->alloc(c->stride[b] * (size_t)c->instances)) == NULL) goto oom;
  tk_rng rng;
  tk_rng_seed(&rng, c->spec.seed ^ 0x5E7511D1CE5ull);
  for (int64_t k = 0; k < c->instances; k++) {
    if (k > 0) tk_case_redraw_indices(&c->kc, &rng); /* each set its own positions and slots */
    point_at_set(c, k);
    for (int b = 0; b <= TK_NSLOT; b++) /* also touches every output page */
      if (c->stride[b] && mem->upload(c->kc.buf[b].dev, c->kc.buf[b].init, c->kc.buf[b].bytes)) goto oom;
  }
  point_at_set(c, 0);
  tk_case_args(&c->kc, TK_AT_DEVICE, c->views, &c->args);
  for (int s = 0; s < TK_NSLOT; s++) {
    const size_t step = c->kc.view[s].present ? c->stride[c->kc.view[s].buf] : 0;
    if (!step) continue;
    c->moved[c->nmoved] = &c->views[s];
    c->moved_base[c->nmoved] = c->views[s].data;
    c->moved_step[c->nmoved++] = step;
  }
  c->flags_base = c->stride[TK_FLAGS_BUF] ? c->args.error_flags : NULL;
  point_at_set(c, c->instances - 1); /* the set the kit case's bytes describe */

  qf_problem p;
  st = qf_resolve(c->plan, bench_case_args(c, 0), &p);
  if (st != QKVFUSE_SUCCESS) {
    snprintf(err, errn, "arguments rejected: %s: %s", qkvfuse_status_string(st), qkvfuse_last_error());
    return -1;
  }
  c->bytes = traffic_bytes(&p);

  if (c->dev->unfused_run) {
    c->scratch_bytes = c->dev->unfused_scratch_bytes(&p);
    if ((c->scratch = mem->alloc(c->scratch_bytes)) == NULL) goto oom;
  }

  /* the copy baseline: bytes / 2 read and bytes / 2 written per call */
  c->copy_bytes = c->bytes / 2;
  c->copy_stride = align64(c->copy_bytes);
  c->copy_instances = instances_for(rotate_bytes, 2 * c->copy_stride);
  const size_t total = c->copy_stride * (size_t)c->copy_instances;
  if ((c->copy_src = mem->alloc(total)) == NULL || (c->copy_dst = mem->alloc(total)) == NULL) goto oom;
  /* non-zero bytes: a copy is never timed on zeros */
  unsigned char *pattern = malloc(c->copy_stride ? c->copy_stride : 1);
  if (pattern == NULL) goto oom;
  for (size_t b = 0; b < c->copy_stride; b++) pattern[b] = (unsigned char)(b * 131u + 7u);
  int failed = 0;
  for (int64_t k = 0; k < c->copy_instances && !failed; k++)
    failed = mem->upload((char *)c->copy_src + (size_t)k * c->copy_stride, pattern, c->copy_stride) ||
             mem->upload((char *)c->copy_dst + (size_t)k * c->copy_stride, pattern, c->copy_stride);
  free(pattern);
  if (failed) goto oom;
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
  c->mem = dev->kit();
  c->rotate_target = rotate_bytes;
  if (c->mem == NULL) {
    snprintf(err, errn, "no %s device", dev->name);
    return -1;
  }
  const int rc = build(c, rotate_bytes, err, errn);
  if (rc != 0) bench_case_free(c);
  return rc;
}

const qkvfuse_args *bench_case_args(bench_case *c, int64_t i) {
  for (int k = 0; k < c->nmoved; k++) c->moved[k]->data = c->moved_base[k] + (size_t)i * c->moved_step[k];
  if (c->flags_base)
    c->args.error_flags = (uint32_t *)((unsigned char *)c->flags_base + (size_t)i * c->stride[TK_FLAGS_BUF]);
  return &c->args;
}

/* The kit's runner: the case's own plan. */
static qkvfuse_status run_plan(tk_case *kc, const qkvfuse_args *args, qkvfuse_backend be, void *ctx,
                               int *unsupported) {
  (void)be, (void)unsupported;
  const bench_case *c = ctx;
  return qkvfuse_run(c->plan, args, kc->dev->stream);
}

int bench_case_check(bench_case *c, char *err, size_t errn) {
  tk_stats st;
  memset(&st, 0, sizeof st);
  point_at_set(c, c->instances - 1);
  const int rc = tk_check_case_on(&c->kc, c->mem, c->spec.backend, run_plan, c, &st);
  if (rc == TK_PASS) return 0;
  snprintf(err, errn, "the fused result differs from the oracle: %s (%s)", st.first, st.where);
  return -1;
}

void bench_case_free(bench_case *c) {
  const tk_device *mem = c->mem;
  if (mem == NULL) return;
  for (int b = 0; b <= TK_NSLOT; b++) {
    if (c->slab[b]) mem->release(c->slab[b]);
    if (c->shared[b]) mem->release(c->shared[b]);
    c->kc.buf[b].dev = NULL; /* the memory above: the kit case owns none */
  }
  if (c->copy_src) mem->release(c->copy_src);
  if (c->copy_dst) mem->release(c->copy_dst);
  if (c->scratch) mem->release(c->scratch);
  tk_case_free(&c->kc);
  qkvfuse_plan_destroy(c->plan);
  memset(c, 0, sizeof *c);
}
