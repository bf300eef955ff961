/* SPDX-License-Identifier: Apache-2.0 */
/* Host tensors, random fills (see tensors.h). */
#define _POSIX_C_SOURCE 200809L /* sysconf under -std=c11 */
#include "tensors.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/dtype.h"

#define RNG_GAMMA 0x9e3779b97f4a7c15ull

cli_rng cli_rng_make(uint64_t seed) {
  cli_rng r = {seed ^ RNG_GAMMA};
  return r;
}

uint64_t cli_rng_u64(cli_rng *r) {
  uint64_t z = (r->state += RNG_GAMMA);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

double cli_rng_uniform(cli_rng *r) { return (double)(cli_rng_u64(r) >> 11) * (1.0 / 9007199254740992.0); }

double cli_rng_range(cli_rng *r, double lo, double hi) { return lo + (hi - lo) * cli_rng_uniform(r); }

int64_t cli_rng_int(cli_rng *r, int64_t n) { return n <= 1 ? 0 : (int64_t)(cli_rng_u64(r) % (uint64_t)n); }

double cli_rng_signed(cli_rng *r, double lo, double hi) {
  const double m = cli_rng_range(r, lo, hi);
  return (cli_rng_u64(r) & 1u) ? -m : m;
}

void cli_rng_permutation(cli_rng *r, int64_t *out, int64_t n) {
  for (int64_t i = 0; i < n; i++) out[i] = i;
  for (int64_t i = n - 1; i > 0; i--) {
    const int64_t j = cli_rng_int(r, i + 1), t = out[i];
    out[i] = out[j];
    out[j] = t;
  }
}

void *cli_alloc(size_t n) {
  const size_t rounded = (n + 63) / 64 * 64;
  return aligned_alloc(64, rounded ? rounded : 64);
}

void cli_free(void *p) { free(p); }

int cli_tensor_alloc(cli_tensor *x, qkvfuse_dtype dtype, int ndim, const int64_t *shape) {
  memset(x, 0, sizeof *x);
  if (qkvfuse_tensor_init(&x->t, NULL, dtype, ndim, shape) != QKVFUSE_SUCCESS) return -1;
  x->bytes = (size_t)cli_tensor_numel(x) * qkvfuse_dtype_size(dtype);
  x->t.data = cli_alloc(x->bytes);
  if (x->t.data == NULL) return -1;
  memset(x->t.data, 0, x->bytes);
  return 0;
}

int cli_tensor_clone(cli_tensor *x, const cli_tensor *src) {
  if (cli_tensor_alloc(x, src->t.dtype, src->t.ndim, src->t.shape) != 0) return -1;
  memcpy(x->t.data, src->t.data, src->bytes);
  return 0;
}

void cli_tensor_free(cli_tensor *x) {
  if (x == NULL) return;
  cli_free(x->t.data);
  memset(x, 0, sizeof *x);
}

int64_t cli_tensor_numel(const cli_tensor *x) {
  int64_t n = 1;
  for (int i = 0; i < x->t.ndim; i++) n *= x->t.shape[i];
  return n;
}

qkvfuse_tensor cli_tensor_view(const cli_tensor *x, int ndim, const int64_t *shape) {
  qkvfuse_tensor v;
  qkvfuse_tensor_init(&v, x->t.data, x->t.dtype, ndim, shape);
  return v;
}

void cli_set(cli_tensor *x, int64_t i, double v) {
  void *p = x->t.data;
  switch (x->t.dtype) {
    case QKVFUSE_DTYPE_INT8: ((int8_t *)p)[i] = (int8_t)v; break;
    case QKVFUSE_DTYPE_INT32: ((int32_t *)p)[i] = (int32_t)v; break;
    case QKVFUSE_DTYPE_INT64: ((int64_t *)p)[i] = (int64_t)v; break;
    case QKVFUSE_DTYPE_FLOAT8_E4M3FN: ((uint8_t *)p)[i] = qf_f32_to_e4m3((float)v); break;
    case QKVFUSE_DTYPE_FLOAT8_E5M2: ((uint8_t *)p)[i] = qf_f32_to_e5m2((float)v); break;
    default: qf_store_float(p, x->t.dtype, i, (float)v); break;
  }
}

double cli_get(const cli_tensor *x, int64_t i) {
  if (x->t.dtype == QKVFUSE_DTYPE_INT64) return (double)((const int64_t *)x->t.data)[i];
  return (double)qf_load(x->t.data, x->t.dtype, i);
}

/* A fill: splitmix64's state is a counter (each draw adds gamma), so the
 * generator as element i finds it, after i elements of per = 2 draws (with a
 * random sign) or 1, is the start state + i * per * gamma; each element is
 * drawn from that, with the same cli_rng_signed / cli_rng_range call as a
 * fill in order. So the elements can be filled in any order, and large
 * tensors are filled by several threads (the benchmark fills hundreds of MB
 * per case) with the same values. */
typedef struct fill_job {
  cli_tensor *x;
  uint64_t s0;
  double lo, hi;
  int sign;
  int64_t begin, end;
} fill_job;

static void *fill_range_of(void *arg) {
  const fill_job *j = arg;
  const uint64_t per = j->sign ? 2 : 1;
  for (int64_t i = j->begin; i < j->end; i++) {
    cli_rng g = {j->s0 + (uint64_t)i * per * RNG_GAMMA}; /* the generator as element i finds it */
    cli_set(j->x, i, j->sign ? cli_rng_signed(&g, j->lo, j->hi) : cli_rng_range(&g, j->lo, j->hi));
  }
  return NULL;
}

enum { kFillThreads = 8, kFillMinPerThread = 1 << 20 };

static void fill(cli_tensor *x, cli_rng *r, double lo, double hi, int sign) {
  const int64_t n = cli_tensor_numel(x);
  fill_job jobs[kFillThreads];
  pthread_t tid[kFillThreads];
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  int64_t nt = n / kFillMinPerThread;
  if (nt > kFillThreads) nt = kFillThreads;
  if (nt > cpus) nt = cpus;
  if (nt < 1) nt = 1;
  int started = 0;
  for (int64_t t = 0; t < nt; t++) {
    jobs[t] = (fill_job){x, r->state, lo, hi, sign, n * t / nt, n * (t + 1) / nt};
    if (t > 0 && pthread_create(&tid[t], NULL, fill_range_of, &jobs[t]) == 0) {
      started |= 1 << t;
      continue;
    }
    if (t > 0) fill_range_of(&jobs[t]); /* no thread: this one */
  }
  fill_range_of(&jobs[0]);
  for (int64_t t = 1; t < nt; t++)
    if (started >> t & 1) pthread_join(tid[t], NULL);
  r->state += (uint64_t)n * (sign ? 2 : 1) * RNG_GAMMA;
}

void cli_fill_signed(cli_tensor *x, cli_rng *r, double lo, double hi) { fill(x, r, lo, hi, 1); }

void cli_fill_range(cli_tensor *x, cli_rng *r, double lo, double hi) { fill(x, r, lo, hi, 0); }

void cli_fill_bytes(cli_tensor *x, cli_rng *r) {
  unsigned char *b = x->t.data;
  for (size_t i = 0; i < x->bytes; i++) b[i] = (unsigned char)(cli_rng_u64(r) >> 56);
}

qkvfuse_dtype cli_float_dtype_parse(const char *s) {
  if (strcmp(s, "float32") == 0 || strcmp(s, "f32") == 0) return QKVFUSE_DTYPE_FLOAT32;
  if (strcmp(s, "float16") == 0 || strcmp(s, "f16") == 0) return QKVFUSE_DTYPE_FLOAT16;
  if (strcmp(s, "bfloat16") == 0 || strcmp(s, "bf16") == 0) return QKVFUSE_DTYPE_BFLOAT16;
  return QKVFUSE_DTYPE_NONE;
}

cli_tensor *cli_pool_tensor(cli_pool *pool, qkvfuse_dtype dtype, int ndim, const int64_t *shape) {
  if (pool->n == pool->cap) {
    const int cap = pool->cap ? 2 * pool->cap : 32;
    cli_tensor **items = realloc(pool->items, (size_t)cap * sizeof *items);
    if (items == NULL) goto oom;
    pool->items = items;
    pool->cap = cap;
  }
  cli_tensor *x = malloc(sizeof *x);
  if (x == NULL || cli_tensor_alloc(x, dtype, ndim, shape) != 0) {
    free(x);
    goto oom;
  }
  pool->items[pool->n++] = x;
  return x;
oom:
  fprintf(stderr, "qkvfuse: out of memory allocating a %s tensor\n", qkvfuse_dtype_name(dtype));
  exit(1);
}

cli_tensor *cli_pool_clone(cli_pool *pool, const cli_tensor *src) {
  cli_tensor *x = cli_pool_tensor(pool, src->t.dtype, src->t.ndim, src->t.shape);
  memcpy(x->t.data, src->t.data, src->bytes);
  return x;
}

void cli_pool_free(cli_pool *pool) {
  for (int i = 0; i < pool->n; i++) {
    cli_tensor_free(pool->items[i]);
    free(pool->items[i]);
  }
  free(pool->items);
  pool->items = NULL;
  pool->n = pool->cap = 0;
}
