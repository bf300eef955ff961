/* SPDX-License-Identifier: Apache-2.0 */
/* The benchmark's unfused baseline: one full pass over all tokens per stage, intermediate
 * tensors in memory (see unfused.h). The math is stages.h's, the same calls the
 * fused reference makes, with a rounding to the I/O dtype at every store into
 * an intermediate buffer: exactly QKVFUSE_ROUNDING_UNFUSED_PARITY. */
#define _POSIX_C_SOURCE 200809L /* pthreads under -std=c11 */

#include "unfused.h"

#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "core/dtype.h"
#include "core/error.h"
#include "reference/stages.h"

#define QF_UNFUSED_ALIGN 64
#define QF_UNFUSED_MIN_TOKENS_PER_THREAD 16

/* The stages, in the order an unfused engine launches them. */
typedef enum stage {
  STAGE_SPLIT,     /* qkv rows -> q, k, v buffers (int32 input: dequant, rounded to the I/O dtype) */
  STAGE_NORM_Q,    /* q buffer -> rmsnorm -> q buffer */
  STAGE_NORM_K,    /* k buffer -> rmsnorm -> k buffer */
  STAGE_ROPE_Q,    /* q buffer -> rope -> q_out (a copy without RoPE); with desc.q_quant, back into the q buffer */
  STAGE_QUANT_Q,   /* desc.q_quant: q buffer -> quantize -> q_out */
  STAGE_ROPE_K,    /* k buffer -> rope -> k buffer and k_out */
  STAGE_COPY_V,    /* v buffer -> v_out */
  STAGE_QUANT_K,   /* k buffer -> quantize -> kq buffer (cache dtype) */
  STAGE_QUANT_V,   /* v buffer -> quantize -> vq buffer */
  STAGE_SCATTER_K, /* kq rows -> k_cache at each token's slot */
  STAGE_SCATTER_V, /* vq rows -> v_cache */
  STAGE_COUNT
} stage;

/* The intermediate tensors: contiguous [T, cols] buffers in scratch. */
typedef struct buffers {
  qf_mat q, k, v; /* I/O dtype: [T, Nq*D], [T, Nkv*D], [T, Nkv*D]; v absent when nothing reads it */
  qf_mat kq, vq;  /* cache dtypes: [T, Nkv*D]; absent without caches */
} buffers;

/* One call: the problem, its buffers and the stages it runs. */
typedef struct job {
  const qf_problem *p;
  const qf_unfused_kernels *k; /* the stage math */
  buffers b;
  stage stages[STAGE_COUNT];
  int nstages;
} job;

/* ---- scratch layout -------------------------------------------------------- */

static size_t align_up(size_t n) { return (n + QF_UNFUSED_ALIGN - 1) / QF_UNFUSED_ALIGN * QF_UNFUSED_ALIGN; }

/* Place a [rows, cols] buffer of dtype dt at *offset (advanced past it). */
static qf_mat place(char *base, size_t *offset, qkvfuse_dtype dt, int64_t rows, int64_t cols) {
  qf_mat m = {NULL, dt, rows, cols, cols, 1};
  if (base) m.data = base + *offset;
  *offset += align_up((size_t)rows * (size_t)cols * qkvfuse_dtype_size(dt));
  return m;
}

static int needs_v(const qf_problem *p) { return p->v_out.data != NULL || p->v_cache.data != NULL; }

/* Lay the buffers out from base (NULL: sizes only); return the bytes used. */
static size_t layout(const qf_problem *p, char *base, buffers *b) {
  size_t off = 0;
  const int64_t T = p->T, kv = p->Nkv * p->D;
  memset(b, 0, sizeof *b);
  b->q = place(base, &off, p->io_dtype, T, p->Nq * p->D);
  b->k = place(base, &off, p->io_dtype, T, kv);
  if (needs_v(p)) b->v = place(base, &off, p->io_dtype, T, kv);
  if (p->k_cache.data) b->kq = place(base, &off, p->k_cache.dtype, T, kv);
  if (p->v_cache.data) b->vq = place(base, &off, p->v_cache.dtype, T, kv);
  return off;
}

size_t qf_unfused_scratch_bytes(const qf_problem *p) {
  buffers b;
  return p ? layout(p, NULL, &b) + QF_UNFUSED_ALIGN - 1 : 0;
}

/* ---- stages: each runs over tokens [t0, t1) ------------------------------------ */

static char *row_ptr(const qf_mat *m, int64_t r) {
  return (char *)m->data + (size_t)(r * m->ld) * qkvfuse_dtype_size(m->dtype);
}

static void load_head(const qf_mat *m, int64_t t, int64_t c0, int64_t n, float *x) {
  const char *row = row_ptr(m, t);
  for (int64_t c = 0; c < n; c++) x[c] = qf_load(row, m->dtype, c0 + c);
}

static void copy_rows(const qf_mat *src, int64_t src_c0, const qf_mat *dst, int64_t t0, int64_t t1) {
  const size_t es = qkvfuse_dtype_size(src->dtype);
  for (int64_t t = t0; t < t1; t++)
    memcpy(row_ptr(dst, t), row_ptr(src, t) + (size_t)src_c0 * es, (size_t)dst->cols * es);
}

/* Columns [c0, c0 + dst->cols) of [q | k | v] (one part) into dst, in dst's
 * (the I/O) dtype. */
static void split_block(const job *j, int64_t c0, const qf_mat *dst, int64_t t0, int64_t t1) {
  if (j->p->in[0].dtype != QKVFUSE_DTYPE_INT32) {
    int64_t c = c0;
    const int part = qf_in_part(j->p, &c);
    copy_rows(&j->p->in[part], c, dst, t0, t1); /* same dtype: a plain copy */
    return;
  }
  j->k->dequant(j->p, c0, dst, t0, t1);
}

static void dequant_block(const qf_problem *p, int64_t c0, const qf_mat *dst, int64_t t0, int64_t t1) {
  float x[QF_MAX_HEAD_DIM];
  for (int64_t t = t0; t < t1; t++)
    for (int64_t c = 0; c < dst->cols; c += QF_MAX_HEAD_DIM) {
      const int64_t n = dst->cols - c < QF_MAX_HEAD_DIM ? dst->cols - c : QF_MAX_HEAD_DIM;
      qf_stage_load_row(p, t, c0 + c, n, x);
      qf_store_row(dst, t, c, x, n); /* the one rounding of the dequantized value */
    }
}

static void stage_split(const job *j, int64_t t0, int64_t t1) {
  const qf_problem *p = j->p;
  split_block(j, 0, &j->b.q, t0, t1);
  split_block(j, p->Nq * p->D, &j->b.k, t0, t1);
  if (j->b.v.data) split_block(j, (p->Nq + p->Nkv) * p->D, &j->b.v, t0, t1);
}

/* RMSNorm of every head of buffer m, in place, rounded to its dtype. */
static void stage_norm(const qf_problem *p, const qf_mat *m, const qf_vec *gamma, const qf_vec *beta, int64_t t0,
                       int64_t t1) {
  float x[QF_MAX_HEAD_DIM], y[QF_MAX_HEAD_DIM];
  const int64_t D = p->D, heads = m->cols / D;
  for (int64_t t = t0; t < t1; t++)
    for (int64_t h = 0; h < heads; h++) {
      load_head(m, t, h * D, D, x);
      qf_stage_rmsnorm(x, D, p->desc->eps, gamma, beta, p->desc->gamma_offset,
                       QKVFUSE_ROUNDING_UNFUSED_PARITY, p->io_dtype, y);
      qf_store_row(m, t, h * D, y, D);
    }
}

/* RoPE of every head of src into dst (may be src) and dst2 (may be absent). */
static void stage_rope(const job *j, const qf_mat *src, const qf_mat *dst, const qf_mat *dst2, int64_t t0,
                       int64_t t1) {
  const qf_problem *p = j->p;
  if (p->desc->rope_source == QKVFUSE_ROPE_NONE || p->R == 0) {
    if (dst->data != src->data) copy_rows(src, 0, dst, t0, t1);
    if (dst2->data) copy_rows(src, 0, dst2, t0, t1);
    return;
  }
  j->k->rope(p, src, dst, dst2, t0, t1);
}

static void rope_rows(const qf_problem *p, const qf_mat *src, const qf_mat *dst, const qf_mat *dst2, int64_t t0,
                      int64_t t1) {
  float y[QF_MAX_HEAD_DIM], o[QF_MAX_HEAD_DIM], cos_r[QF_MAX_HEAD_DIM], sin_r[QF_MAX_HEAD_DIM];
  const int64_t D = p->D, heads = src->cols / D;
  for (int64_t t = t0; t < t1; t++) {
    qf_stage_cos_sin(p, t, cos_r, sin_r);
    for (int64_t h = 0; h < heads; h++) {
      load_head(src, t, h * D, D, y);
      qf_stage_rope(y, D, p->R, p->desc->rope_style, cos_r, sin_r, o);
      qf_store_row(dst, t, h * D, o, D);
      if (dst2->data) qf_store_row(dst2, t, h * D, o, D);
    }
  }
}

/* Quantize (or round, for a float cache) buffer src into buffer dst. */
static void stage_quant(const qf_mat *src, const qf_mat *dst, qkvfuse_quant_mode mode, const qf_vec *scale,
                        const qf_vec *offset, int64_t group, int64_t t0, int64_t t1) {
  for (int64_t t = t0; t < t1; t++) {
    const char *in = row_ptr(src, t);
    char *out = row_ptr(dst, t);
    for (int64_t c = 0; c < src->cols; c++)
      qf_stage_quant_store(out, dst->dtype, c, qf_load(in, src->dtype, c), mode, scale, offset, c, group);
  }
}

/* Copy each token's row of src to its slot in cache (slot -1: skipped). */
static void stage_scatter(const qf_problem *p, const qf_mat *src, const qf_cache *cache, int64_t t0, int64_t t1) {
  const size_t es = qkvfuse_dtype_size(cache->dtype);
  for (int64_t t = t0; t < t1; t++) {
    int64_t block, row;
    if (!qf_token_dest(p, t, &block, &row)) continue;
    const char *in = row_ptr(src, t);
    for (int64_t c = 0; c < src->cols;) {
      int64_t n = cache->chunk - c % cache->chunk;
      if (n > src->cols - c) n = src->cols - c;
      memcpy((char *)cache->data + (size_t)qf_cache_offset(cache, block, row, c) * es, in + (size_t)c * es,
             (size_t)n * es);
      c += n;
    }
  }
}

static void run_stage(const job *j, stage s, int64_t t0, int64_t t1) {
  const qf_problem *p = j->p;
  const buffers *b = &j->b;
  switch (s) {
    case STAGE_SPLIT: stage_split(j, t0, t1); break;
    case STAGE_NORM_Q: j->k->norm(p, &b->q, &p->q_gamma, &p->q_beta, t0, t1); break;
    case STAGE_NORM_K: j->k->norm(p, &b->k, &p->k_gamma, &p->k_beta, t0, t1); break;
    case STAGE_ROPE_Q:
      stage_rope(j, &b->q, p->desc->q_quant != QKVFUSE_QUANT_NONE ? &b->q : &p->q_out, &(qf_mat){0}, t0, t1);
      break;
    case STAGE_QUANT_Q: j->k->quant(&b->q, &p->q_out, p->desc->q_quant, &p->q_scale, &p->q_scale, 1, t0, t1); break;
    case STAGE_ROPE_K: stage_rope(j, &b->k, &b->k, &p->k_out, t0, t1); break;
    case STAGE_COPY_V: copy_rows(&b->v, 0, &p->v_out, t0, t1); break;
    case STAGE_QUANT_K:
      j->k->quant(&b->k, &b->kq, p->desc->k_quant, &p->k_scale, &p->k_offset, p->k_scale_group, t0, t1);
      break;
    case STAGE_QUANT_V:
      j->k->quant(&b->v, &b->vq, p->desc->v_quant, &p->v_scale, &p->v_offset, p->v_scale_group, t0, t1);
      break;
    case STAGE_SCATTER_K: stage_scatter(p, &b->kq, &p->k_cache, t0, t1); break;
    case STAGE_SCATTER_V: stage_scatter(p, &b->vq, &p->v_cache, t0, t1); break;
    case STAGE_COUNT: break;
  }
}

/* ---- threads: one team per call, a barrier between stages -------------------- */

typedef struct team {
  const job *j;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int n;       /* threads taking part; fixed before the gate opens */
  int open;    /* the gate: workers start once every thread is created */
  int arrived; /* barrier count of the current generation */
  unsigned generation;
} team;

typedef struct member {
  team *tm;
  int index;
} member;

static void barrier(team *tm) {
  pthread_mutex_lock(&tm->mu);
  const unsigned gen = tm->generation;
  if (++tm->arrived == tm->n) {
    tm->arrived = 0;
    tm->generation++;
    pthread_cond_broadcast(&tm->cv);
  } else {
    while (gen == tm->generation) pthread_cond_wait(&tm->cv, &tm->mu);
  }
  pthread_mutex_unlock(&tm->mu);
}

/* Thread `index` of n: its share of the tokens, every stage, a barrier after each. */
static void run_member(team *tm, int index) {
  const job *j = tm->j;
  const int64_t T = j->p->T;
  const int64_t t0 = T * index / tm->n, t1 = T * (index + 1) / tm->n;
  for (int s = 0; s < j->nstages; s++) {
    run_stage(j, j->stages[s], t0, t1);
    if (tm->n > 1) barrier(tm);
  }
}

static void *worker(void *arg) {
  member *m = arg;
  team *tm = m->tm;
  pthread_mutex_lock(&tm->mu);
  while (!tm->open) pthread_cond_wait(&tm->cv, &tm->mu);
  const int takes_part = m->index < tm->n;
  pthread_mutex_unlock(&tm->mu);
  if (takes_part) run_member(tm, m->index);
  return NULL;
}

#define QF_UNFUSED_MAX_THREADS 256

static void run_team(const job *j, int nthreads) {
  team tm = {.j = j, .n = 1};
  if (nthreads <= 1) {
    run_member(&tm, 0);
    return;
  }
  pthread_t tid[QF_UNFUSED_MAX_THREADS];
  member mem[QF_UNFUSED_MAX_THREADS];
  pthread_mutex_init(&tm.mu, NULL);
  pthread_cond_init(&tm.cv, NULL);
  int created = 0;
  for (int i = 1; i < nthreads; i++) {
    mem[i] = (member){&tm, i};
    if (pthread_create(&tid[i], NULL, worker, &mem[i]) != 0) break; /* fewer threads: still correct */
    created++;
  }
  pthread_mutex_lock(&tm.mu);
  tm.n = created + 1;
  tm.open = 1;
  pthread_cond_broadcast(&tm.cv);
  pthread_mutex_unlock(&tm.mu);
  run_member(&tm, 0);
  for (int i = 1; i <= created; i++) pthread_join(tid[i], NULL);
  pthread_cond_destroy(&tm.cv);
  pthread_mutex_destroy(&tm.mu);
}

/* ---- the call ------------------------------------------------------------------ */

static const qf_unfused_kernels scalar_kernels = {dequant_block, stage_norm, rope_rows, stage_quant};

qkvfuse_status qf_unfused_run(const qf_problem *p, void *scratch) { return qf_unfused_run_with(p, scratch, NULL); }

qkvfuse_status qf_unfused_run_with(const qf_problem *p, void *scratch, const qf_unfused_kernels *kernels) {
  QF_CHECK(p != NULL, QKVFUSE_ERROR_NULL_POINTER, "unfused: problem is NULL");
  const qkvfuse_dtype io = p->io_dtype;
  QF_CHECK(p->in[0].dtype == QKVFUSE_DTYPE_INT32 || p->in[0].dtype == io, QKVFUSE_ERROR_UNSUPPORTED,
           "unfused: the input must be int32 or have the I/O dtype (%s); got %s", qkvfuse_dtype_name(io),
           qkvfuse_dtype_name(p->in[0].dtype));
  QF_CHECK(!p->k_out.data || p->k_out.dtype == io, QKVFUSE_ERROR_UNSUPPORTED,
           "unfused: k_out must have the I/O dtype (%s); got %s", qkvfuse_dtype_name(io),
           qkvfuse_dtype_name(p->k_out.dtype));
  QF_CHECK(!p->v_out.data || p->v_out.dtype == io, QKVFUSE_ERROR_UNSUPPORTED,
           "unfused: v_out must have the I/O dtype (%s); got %s", qkvfuse_dtype_name(io),
           qkvfuse_dtype_name(p->v_out.dtype));
  /* the stages copy rows and cache chunks as runs of consecutive elements */
  const qf_mat *rows[] = {&p->in[0], &p->in[1], &p->in[2], &p->q_out, &p->k_out, &p->v_out, &p->cos, &p->sin,
                          &p->cos_sin_cache};
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
    QF_CHECK(!rows[i]->data || rows[i]->inc == 1, QKVFUSE_ERROR_UNSUPPORTED,
             "unfused: rows must be contiguous (a reference plan took a strided one)");
  QF_CHECK((!p->k_cache.data || p->k_cache.s_elem == 1) && (!p->v_cache.data || p->v_cache.s_elem == 1),
           QKVFUSE_ERROR_UNSUPPORTED, "unfused: cache rows must be contiguous (a reference plan took a strided one)");
  if (p->T == 0) return QKVFUSE_SUCCESS;
  QF_CHECK(scratch != NULL, QKVFUSE_ERROR_NULL_POINTER, "unfused: scratch is NULL (need %zu bytes)",
           qf_unfused_scratch_bytes(p));

  job j = {.p = p, .k = kernels ? kernels : &scalar_kernels};
  char *base = (char *)(((uintptr_t)scratch + QF_UNFUSED_ALIGN - 1) / QF_UNFUSED_ALIGN * QF_UNFUSED_ALIGN);
  layout(p, base, &j.b);
  j.stages[j.nstages++] = STAGE_SPLIT;
  if (p->desc->q_norm) j.stages[j.nstages++] = STAGE_NORM_Q;
  if (p->desc->k_norm) j.stages[j.nstages++] = STAGE_NORM_K;
  j.stages[j.nstages++] = STAGE_ROPE_Q;
  if (p->desc->q_quant != QKVFUSE_QUANT_NONE) j.stages[j.nstages++] = STAGE_QUANT_Q;
  /* without RoPE, k reaches k_out through the same stage as a copy */
  if (p->R > 0 || p->k_out.data) j.stages[j.nstages++] = STAGE_ROPE_K;
  if (p->v_out.data) j.stages[j.nstages++] = STAGE_COPY_V;
  if (p->k_cache.data) {
    j.stages[j.nstages++] = STAGE_QUANT_K;
    j.stages[j.nstages++] = STAGE_QUANT_V;
    j.stages[j.nstages++] = STAGE_SCATTER_K;
    j.stages[j.nstages++] = STAGE_SCATTER_V;
  }

  int64_t n = p->desc->num_threads > 1 ? p->desc->num_threads : 1;
  const int64_t by_work = p->T / QF_UNFUSED_MIN_TOKENS_PER_THREAD;
  if (n > by_work) n = by_work > 1 ? by_work : 1;
  if (n > QF_UNFUSED_MAX_THREADS) n = QF_UNFUSED_MAX_THREADS;
  run_team(&j, (int)n);
  return QKVFUSE_SUCCESS;
}
