/* SPDX-License-Identifier: Apache-2.0 */
/* Host tensors for the CLI and its tests: a seeded random generator, owned
 * contiguous tensors (64-byte aligned) and fills in any dtype. */
#ifndef QKVFUSE_TOOLS_TENSORS_H
#define QKVFUSE_TOOLS_TENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "qkvfuse.h"

/* splitmix64: small, fast, reproducible from one seed. */
typedef struct cli_rng {
  uint64_t state;
} cli_rng;

cli_rng cli_rng_make(uint64_t seed);
uint64_t cli_rng_u64(cli_rng *r);
double cli_rng_uniform(cli_rng *r);                     /* [0, 1) */
double cli_rng_range(cli_rng *r, double lo, double hi); /* [lo, hi) */
int64_t cli_rng_int(cli_rng *r, int64_t n);             /* [0, n) */
/* A value of magnitude in [lo, hi) with a random sign: never zero for lo > 0. */
double cli_rng_signed(cli_rng *r, double lo, double hi);
/* A random permutation of [0, n) into out. */
void cli_rng_permutation(cli_rng *r, int64_t *out, int64_t n);

/* A tensor that owns its memory: contiguous, row-major, on the CPU. */
typedef struct cli_tensor {
  qkvfuse_tensor t;
  size_t bytes;
} cli_tensor;

/* Allocate a zero-filled tensor of the given shape (ndim 1..QKVFUSE_MAX_DIMS).
 * @return 0 on success, -1 when out of memory. */
int cli_tensor_alloc(cli_tensor *x, qkvfuse_dtype dtype, int ndim, const int64_t *shape);
/* Same shape, dtype and bytes as src. */
int cli_tensor_clone(cli_tensor *x, const cli_tensor *src);
void cli_tensor_free(cli_tensor *x);
int64_t cli_tensor_numel(const cli_tensor *x);

/* Another contiguous view (shape) of x's memory; the element counts must agree. */
qkvfuse_tensor cli_tensor_view(const cli_tensor *x, int ndim, const int64_t *shape);

/* Fill every element with cli_rng_signed(lo, hi), rounded to the dtype (float
 * dtypes; int32 and int8 get the integer part, never zero for lo >= 1). */
void cli_fill_signed(cli_tensor *x, cli_rng *r, double lo, double hi);
/* Fill every element with a value in [lo, hi) (float dtypes). */
void cli_fill_range(cli_tensor *x, cli_rng *r, double lo, double hi);
/* Fill every byte at random (caches: distinguishes untouched bytes). */
void cli_fill_bytes(cli_tensor *x, cli_rng *r);
/* Set element i of a float/int tensor from a double (rounded to the dtype). */
void cli_set(cli_tensor *x, int64_t i, double v);
/* Element i as a double. */
double cli_get(const cli_tensor *x, int64_t i);

/* Parse "float32" / "f32", "float16" / "f16", "bfloat16" / "bf16"; NONE if unknown. */
qkvfuse_dtype cli_float_dtype_parse(const char *s);

/* A set of tensors freed together (a demo case, a test problem). Allocation
 * failure prints a message and exits: these are small, tool-side tensors. */
typedef struct cli_pool {
  cli_tensor **items;
  int n, cap;
} cli_pool;

cli_tensor *cli_pool_tensor(cli_pool *pool, qkvfuse_dtype dtype, int ndim, const int64_t *shape);
cli_tensor *cli_pool_clone(cli_pool *pool, const cli_tensor *src);
void cli_pool_free(cli_pool *pool);

/* 64-byte aligned allocation of n bytes (free with cli_free). */
void *cli_alloc(size_t n);
void cli_free(void *p);

#endif /* QKVFUSE_TOOLS_TENSORS_H */
