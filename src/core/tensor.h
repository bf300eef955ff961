/* SPDX-License-Identifier: Apache-2.0 */
/* Internal tensor helpers: the checks common to every tensor, and the
 * reductions of a strided qkvfuse_tensor to the row views of problem.h. */
#ifndef QKVFUSE_CORE_TENSOR_H
#define QKVFUSE_CORE_TENSOR_H

#include <stddef.h>
#include <stdint.h>

#include "core/problem.h"
#include "qkvfuse.h"

#ifdef __cplusplus
extern "C" {
#endif

/* dtype sets, as bit masks */
enum {
  QF_F32 = 1 << 0,
  QF_F16 = 1 << 1,
  QF_BF16 = 1 << 2,
  QF_I32 = 1 << 3,
  QF_I64 = 1 << 4,
  QF_I8 = 1 << 5,
  QF_FP8 = 1 << 6,      /* float8_e4m3fn */
  QF_FP8_E5M2 = 1 << 7, /* float8_e5m2 */
  QF_FLOATS = QF_F32 | QF_F16 | QF_BF16,
  QF_INDICES = QF_I32 | QF_I64
};

unsigned qf_dtype_bit(qkvfuse_dtype dt);

/* Human-readable list of a dtype set: "float32, float16 or bfloat16". */
const char *qf_dtype_set_name(unsigned set);

/* "[7, 32, 128]" into buf. */
const char *qf_shape_str(const qkvfuse_tensor *t, char *buf, size_t n);
/* Its strides, "[4096, 128, 1]", into buf. */
const char *qf_strides_str(const qkvfuse_tensor *t, char *buf, size_t n);

int64_t qf_numel(const qkvfuse_tensor *t);

/* Not NULL; ndim in range; shape and strides non-negative; data non-NULL when
 * the tensor has elements; dtype in `dtypes`; data aligned to its element
 * size; on the plan's device. */
qkvfuse_status qf_check_tensor(const char *name, const qkvfuse_tensor *t, unsigned dtypes, const qkvfuse_desc *desc);

/* View t as rows x cols: trailing dims multiply to cols and collapse to one
 * element stride (out->inc), leading dims multiply to rows and collapse to
 * one row stride; rows do not overlap (row stride >= (cols - 1) * inc + 1).
 * any_inc = 0 asks for contiguous rows (inc = 1), as every backend but the
 * reference reads them; `backend` names the one that asks, for the message.
 * `what` describes the expected shape for messages ("[T, Nq*D]"). */
qkvfuse_status qf_view_mat(const char *name, const char *what, const qkvfuse_tensor *t, int64_t rows, int64_t cols,
                           int any_inc, const char *backend, qf_mat *out);

/* View t as a vector of n elements (any shape with n elements). Contiguous
 * unless strided != NULL; there a layout of any strides sets *strided = 1
 * (else 0), and out->data is t->data, to be gathered (validate.c). */
qkvfuse_status qf_view_vec(const char *name, const char *what, const qkvfuse_tensor *t, int64_t n, qf_vec *out,
                           int *strided);

/* The bytes a tensor touches, as `count` intervals of `len` bytes, `stride`
 * bytes apart, from `base`. Used by the overlap checks. */
typedef struct qf_span {
  const char *name;
  uintptr_t base;
  int64_t count, stride, len;
  const char *part; /* NULL, or what follows name in messages (" (q columns)") */
} qf_span;

/* The spans of a matrix and of a vector, inline: the overlap check builds
 * some twenty per call, which calls would return through copies. */
static inline qf_span qf_span_of_mat(const char *name, const qf_mat *m) {
  const int64_t es = (int64_t)qkvfuse_dtype_size(m->dtype);
  qf_span s = {name, (uintptr_t)m->data, m->rows, m->ld * es, m->cols > 0 ? ((m->cols - 1) * m->inc + 1) * es : 0,
               NULL};
  if (m->rows == 0 || m->data == NULL) s.count = 0;
  return s;
}
static inline qf_span qf_span_of_vec(const char *name, const qf_vec *v) {
  const int64_t es = (int64_t)qkvfuse_dtype_size(v->dtype);
  const qf_span s = {name, (uintptr_t)v->data, v->data && v->n ? 1 : 0, 0, v->n * es, NULL};
  return s;
}
qf_span qf_span_of_tensor(const char *name, const qkvfuse_tensor *t);

/* 1 if the two spans may share a byte (exact for spans with equal strides,
 * conservative otherwise), 0 if they certainly do not. */
int qf_spans_overlap(const qf_span *a, const qf_span *b);

/* 1 if no two elements of t share an address (t may be written). */
int qf_tensor_is_non_overlapping(const qkvfuse_tensor *t);

#ifdef __cplusplus
}
#endif

#endif /* QKVFUSE_CORE_TENSOR_H */
