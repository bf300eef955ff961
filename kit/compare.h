/* SPDX-License-Identifier: Apache-2.0 */
/* Comparators: library outputs against the oracle, with the tolerances of
 * SPEC.md "Precision contract", plus the untouched-bytes check.
 *
 * Per element, with v the float64 value before the final rounding and s its
 * slack (oracle.h), taken twice as a safety factor (s2 = 2 s):
 *   - every element must lie in [R(v - s2), R(v + s2)], R = the output's
 *     rounding (RNE to float32/float16/bfloat16; sat8(rint) for int8;
 *     saturating RNE for e4m3fn and e5m2; in unfused-parity mode first to
 *     the I/O dtype): a correct float32 evaluation followed by one correct
 *     rounding lands there, and a truncating or wrongly-rounding one does not;
 *   - SPEC's tolerance: bf16/fp16 within 1 ulp of the output dtype at v (plus
 *     s2); int8 within 1 of sat8(rint(v)) (plus s2); e4m3 and e5m2 within one
 *     step of their own at v (plus s2); float32 outputs within 1e-5 relative
 *     norm-wise per tensor (fused mode); unfused parity adds 1 ulp of the I/O
 *     dtype;
 *   - NaN passes only where NaN is expected; int8 NaN -> 0, fp8 NaN -> NaN,
 *     +-Inf saturates (qkvfuse.h).
 * max_ratio reports the largest |got - v| / SPEC tolerance seen. */
#ifndef TK_COMPARE_H
#define TK_COMPARE_H

#include <stddef.h>
#include <stdint.h>

#include "qkvfuse.h"

typedef struct tk_stats {
  int64_t checked;  /* elements and bytes compared */
  double max_ratio; /* largest error / SPEC tolerance */
  int64_t failed;   /* failing checks */
  char first[768];  /* the first failure, readable */
  char worst[256];  /* where max_ratio was seen */
  char where[256];  /* the tensors that failed, space-separated */
} tk_stats;

/* Record a failure; fmt starts with the tensor's name up to the first ' ' or '['. */
void tk_stats_fail(tk_stats *st, const char *fmt, ...);
void tk_stats_merge(tk_stats *into, const tk_stats *from);

/* A [T, X] output (host copy `got`, its view); mark: byte mask aligned with
 * got->data (written bytes are set to 1), may be NULL. mid: unfused-parity
 * intermediate dtype or NONE. normwise: apply SPEC's float32 norm-wise bound
 * (fused mode; unfused parity is exempt). */
void tk_cmp_output(tk_stats *st, const char *name, const qkvfuse_tensor *got, uint8_t *mark, const double *v,
                   const double *s, int64_t T, int64_t X, qkvfuse_dtype mid, int normwise);
/* What a CUDA run drops on a data error: rows t with rows[t] != 0, and the
 * columns of heads h (D elements each, counted in this output) with
 * heads[h] != 0. Either pointer may be NULL. */
typedef struct tk_skip {
  const uint8_t *rows, *heads;
  int64_t D;
} tk_skip;
/* The same, skipping what skip names (its bytes stay unmarked); skip may be NULL. */
void tk_cmp_output_rows(tk_stats *st, const char *name, const qkvfuse_tensor *got, uint8_t *mark, const double *v,
                        const double *s, int64_t T, int64_t X, qkvfuse_dtype mid, int normwise, const tk_skip *skip);

/* n cache elements: element i at element offset off[i] of got (skipped if
 * off[i] < 0), expected pre[i] +- s[i] before the cache's rounding.
 * normwise: as for tk_cmp_output. */
void tk_cmp_cache(tk_stats *st, const char *name, const qkvfuse_tensor *got, uint8_t *mark, const int64_t *off,
                  const double *pre, const double *s, int64_t n, int normwise);

/* One element: 1 if got is an acceptable rounding of v +- s to dt (see above);
 * *ratio: error / SPEC tolerance. */
int tk_check_elem(qkvfuse_dtype dt, qkvfuse_dtype mid, double v, double s, double got, double *ratio);

/* Every byte with mark[i] == 0 must equal init[i]. */
void tk_cmp_untouched(tk_stats *st, const char *name, const uint8_t *got, const uint8_t *init, const uint8_t *mark,
                      size_t n);

#endif /* TK_COMPARE_H */
