/* SPDX-License-Identifier: Apache-2.0 */
/* Output comparison for the demo and the tests: errors in units in the last
 * place of the output's dtype (float32/float16/bfloat16 ulps, int8 integer
 * steps, float8 e4m3 / e5m2 steps), and a check of the KV caches that tells the
 * elements a call wrote from the ones it must have left alone. */
#ifndef QKVFUSE_TOOLS_COMPARE_H
#define QKVFUSE_TOOLS_COMPARE_H

#include <stdint.h>

#include "qkvfuse.h"
#include "tensors.h"

/* Distance between element i of a and of b in steps of the dtype's
 * representable values (0 when identical, both NaN counting as identical;
 * INFINITY when only one is NaN). */
double cli_elem_err(qkvfuse_dtype dt, const void *a, const void *b, int64_t i);

/* Largest cli_elem_err over two tensors of the same dtype and element count
 * (INFINITY if they differ in dtype or count). */
double cli_max_err(const cli_tensor *a, const cli_tensor *b);

/* cli_max_err over heads of `head` consecutive elements, where a float
 * element more than 1 step off still counts as 1 step when it is within
 * `slack` float32 ulps of its head's largest |want|: two float32 evaluations
 * of the same formula (rsqrtf vs 1/sqrtf, fused multiply-adds) differ by a few
 * float32 roundings of the largest term, which RoPE's cancellation can make
 * many steps of a small result. slack = 0 is cli_max_err. */
double cli_max_err_heads(const cli_tensor *got, const cli_tensor *want, int64_t head, int slack);

/* Mark the elements of a 4-dim cache that tokens write (written[e] = 1), from
 * the layout's definition in qkvfuse.h (not from the library's own code).
 * slots: [T] (or [B] start indices for contiguous, with S tokens each);
 * -1 skips. The cache tensor must be contiguous. */
void cli_cache_mark(qkvfuse_cache_layout layout, const qkvfuse_tensor *cache, int64_t nkv, int64_t d,
                    const int64_t *slots, int64_t T, int64_t S, unsigned char *written);

/* Compare a cache a call produced (got) with the oracle's (want), both made
 * from the same initial bytes: written elements within their errors, every
 * other byte unchanged in both. @return the largest error of a written element,
 * or INFINITY when an untouched byte changed. */
double cli_cache_err(const cli_tensor *got, const cli_tensor *want, const cli_tensor *initial,
                     const unsigned char *written);

#endif /* QKVFUSE_TOOLS_COMPARE_H */
