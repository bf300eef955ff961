/* SPDX-License-Identifier: Apache-2.0 */
/* dtypes, the tensor descriptor, and strided views. */
#include "core/tensor.h"

#include <stdio.h>
#include <string.h>

#include "core/error.h"

/* ---- the dtype table --------------------------------------------------------- */

/* Every dtype the library handles and its facts: the one place that lists
 * them (size, name, DLPack mapping and the validation bit read it). A dtype
 * is (DLPack code << 8) | bits; the table is indexed by the pair, code * 4 +
 * log2(bits / 8), so a lookup is one bounds check and one load. */
typedef struct dtype_facts {
  const char *name; /* NULL: no dtype at this index */
  size_t size;      /* bytes of one element: bits / 8 */
  unsigned bit;     /* the QF_* bit of dtype sets (core/tensor.h) */
} dtype_facts;

#define DTYPE_CODE_MAX 12 /* DLPack's kDLFloat8_e5m2, the largest code in qkvfuse.h */
#define DTYPE_INDEX(code, bits) ((code) * 4 + ((bits) == 8 ? 0 : (bits) == 16 ? 1 : (bits) == 32 ? 2 : 3))

static const dtype_facts DTYPES[(DTYPE_CODE_MAX + 1) * 4] = {
    [DTYPE_INDEX(0, 8)] = {"int8", 1, QF_I8},
    [DTYPE_INDEX(0, 32)] = {"int32", 4, QF_I32},
    [DTYPE_INDEX(0, 64)] = {"int64", 8, QF_I64},
    [DTYPE_INDEX(2, 16)] = {"float16", 2, QF_F16},
    [DTYPE_INDEX(2, 32)] = {"float32", 4, QF_F32},
    [DTYPE_INDEX(4, 16)] = {"bfloat16", 2, QF_BF16},
    [DTYPE_INDEX(10, 8)] = {"float8_e4m3fn", 1, QF_FP8},
    [DTYPE_INDEX(12, 8)] = {"float8_e5m2", 1, QF_FP8_E5M2},
};

/* The facts of dtype, or NULL for a value the library does not handle. */
static const dtype_facts *facts_of(qkvfuse_dtype dtype) {
  const unsigned v = (unsigned)dtype, code = v >> 8, bits = v & 0xFFu;
  if (code > DTYPE_CODE_MAX || (bits != 8 && bits != 16 && bits != 32 && bits != 64)) return NULL;
  const dtype_facts *f = &DTYPES[DTYPE_INDEX(code, bits)];
  return f->name ? f : NULL;
}

/* ---- public dtype helpers ------------------------------------------------ */

qkvfuse_dtype qkvfuse_dtype_from_dlpack(uint8_t code, uint8_t bits, uint16_t lanes) {
  if (lanes != 1) return QKVFUSE_DTYPE_NONE;
  const int v = QKVFUSE_DTYPE_CODE((int)code, (int)bits);
  return facts_of((qkvfuse_dtype)v) ? (qkvfuse_dtype)v : QKVFUSE_DTYPE_NONE;
}

size_t qkvfuse_dtype_size(qkvfuse_dtype dtype) {
  const dtype_facts *f = facts_of(dtype);
  return f ? f->size : 0;
}

const char *qkvfuse_dtype_name(qkvfuse_dtype dtype) {
  const dtype_facts *f = facts_of(dtype);
  return f ? f->name : "?";
}

/* Every size and offset derived from a tensor must be exact in int64: element
 * counts and extents are bounded by 2^62 (check_extent below). */
#define QF_MAX_EXTENT ((int64_t)1 << 62)

qkvfuse_status qkvfuse_tensor_init(qkvfuse_tensor *t, void *data, qkvfuse_dtype dtype, int32_t ndim,
                                   const int64_t *shape) {
  qf_clear_error();
  QF_CHECK(t != NULL, QKVFUSE_ERROR_NULL_POINTER, "tensor: the qkvfuse_tensor pointer is NULL");
  QF_CHECK(ndim >= 0 && ndim <= QKVFUSE_MAX_DIMS, QKVFUSE_ERROR_INVALID_VALUE,
           "ndim: expected 0..%d; got %d", QKVFUSE_MAX_DIMS, (int)ndim);
  QF_CHECK(ndim == 0 || shape != NULL, QKVFUSE_ERROR_NULL_POINTER, "shape: NULL with ndim = %d", (int)ndim);
  /* every check before the first write: a rejected call leaves *t as it was */
  int64_t strides[QKVFUSE_MAX_DIMS], stride = 1;
  for (int k = ndim - 1; k >= 0; k--) {
    QF_CHECK(shape[k] >= 0, QKVFUSE_ERROR_SHAPE, "shape: shape[%d] must be >= 0; got %lld", k, (long long)shape[k]);
    strides[k] = stride;
    const int64_t s = shape[k] > 0 ? shape[k] : 1;
    QF_CHECK(stride <= QF_MAX_EXTENT / s, QKVFUSE_ERROR_SHAPE,
             "shape: the dims from shape[%d] on hold more than 2^62 elements (zero dims counted as 1)", k);
    stride *= s;
  }
  const int64_t es = (int64_t)qkvfuse_dtype_size(dtype);
  QF_CHECK(es == 0 || stride <= QF_MAX_EXTENT / es, QKVFUSE_ERROR_SHAPE,
           "shape: %lld elements of %s span more than 2^62 bytes", (long long)stride, qkvfuse_dtype_name(dtype));
  memset(t, 0, sizeof *t);
  t->data = data;
  t->dtype = dtype;
  t->device_type = QKVFUSE_DEVICE_CPU;
  t->ndim = ndim;
  for (int k = 0; k < ndim; k++) {
    t->shape[k] = shape[k];
    t->strides[k] = strides[k];
  }
  return QKVFUSE_SUCCESS;
}

/* ---- internal helpers ----------------------------------------------------- */

unsigned qf_dtype_bit(qkvfuse_dtype dt) {
  const dtype_facts *f = facts_of(dt);
  return f ? f->bit : 0;
}

const char *qf_dtype_set_name(unsigned set) {
  switch (set) {
    case QF_FLOATS: return "float32, float16 or bfloat16";
    case QF_FLOATS | QF_I32: return "float32, float16, bfloat16 or int32";
    case QF_INDICES: return "int32 or int64";
    case QF_F32: return "float32";
    case QF_I8: return "int8";
    case QF_FP8: return "float8_e4m3fn";
    case QF_FP8_E5M2: return "float8_e5m2";
    case QF_F32 | QF_F16: return "float32 or float16 (qkv's dtype or float32; for int32 qkv the RoPE table's)";
    case QF_F32 | QF_BF16: return "float32 or bfloat16 (qkv's dtype or float32; for int32 qkv the RoPE table's)";
    default: return "a supported dtype";
  }
}

int64_t qf_numel(const qkvfuse_tensor *t) {
  int64_t n = 1;
  for (int k = 0; k < t->ndim; k++) n *= t->shape[k];
  return n;
}

static const char *dims_str(const int64_t *v, int ndim, char *buf, size_t n) {
  size_t used = 0;
  used += (size_t)snprintf(buf, n, "[");
  for (int k = 0; k < ndim && used < n; k++)
    used += (size_t)snprintf(buf + used, n - used, k ? ", %lld" : "%lld", (long long)v[k]);
  if (used < n) snprintf(buf + used, n - used, "]");
  return buf;
}

const char *qf_shape_str(const qkvfuse_tensor *t, char *buf, size_t n) { return dims_str(t->shape, t->ndim, buf, n); }

const char *qf_strides_str(const qkvfuse_tensor *t, char *buf, size_t n) {
  return dims_str(t->strides, t->ndim, buf, n);
}

/* Every size and offset derived from a tensor must be exact in int64 and its
 * bytes must lie inside the address space: the element count and the byte
 * extent (offset of the last element + 1, times the element size) are at most
 * QF_MAX_EXTENT, and data + extent does not wrap. Without this, shape and
 * stride products overflow (undefined behavior) and a huge stride can make a
 * write land anywhere. A tensor with a zero dim addresses nothing, but the
 * views built from it still multiply its other dims and strides: it is checked
 * with its zero dims counted as 1, and only the address check is skipped. */
static qkvfuse_status check_extent(const char *name, const qkvfuse_tensor *t) {
  char sh[128];
  int64_t n = 1, last = 0;
  int empty = 0;
  for (int k = 0; k < t->ndim; k++) empty |= t->shape[k] == 0;
  const char *zeros = empty ? " (zero dims counted as 1)" : "";
  for (int k = 0; k < t->ndim; k++) {
    const int64_t s = t->shape[k] ? t->shape[k] : 1;
    QF_CHECK(n <= QF_MAX_EXTENT / s, QKVFUSE_ERROR_SHAPE, "%s: %s has more than 2^62 elements%s", name,
             qf_shape_str(t, sh, sizeof sh), zeros);
    n *= s;
  }
  for (int k = 0; k < t->ndim; k++) {
    if (t->shape[k] <= 1) continue;
    QF_CHECK(t->strides[k] <= (QF_MAX_EXTENT - last) / (t->shape[k] - 1), QKVFUSE_ERROR_STRIDE,
             "%s: strides[%d] = %lld with shape %s spans more than 2^62 elements%s", name, k, (long long)t->strides[k],
             qf_shape_str(t, sh, sizeof sh), zeros);
    last += (t->shape[k] - 1) * t->strides[k];
  }
  const int64_t es = (int64_t)qkvfuse_dtype_size(t->dtype);
  QF_CHECK(last < QF_MAX_EXTENT / es, QKVFUSE_ERROR_STRIDE, "%s: shape %s spans more than 2^62 bytes%s", name,
           qf_shape_str(t, sh, sizeof sh), zeros);
  if (empty) return QKVFUSE_SUCCESS; /* no element: no address to check */
  const uintptr_t bytes = (uintptr_t)((last + 1) * es);
  QF_CHECK((uintptr_t)t->data <= UINTPTR_MAX - bytes, QKVFUSE_ERROR_STRIDE,
           "%s: %zu bytes from address %p run past the end of the address space", name, (size_t)bytes, t->data);
  return QKVFUSE_SUCCESS;
}

qkvfuse_status qf_check_tensor(const char *name, const qkvfuse_tensor *t, unsigned dtypes, const qkvfuse_desc *desc) {
  QF_CHECK(t != NULL, QKVFUSE_ERROR_NULL_POINTER, "%s: required, got NULL", name);
  QF_CHECK(t->ndim >= 0 && t->ndim <= QKVFUSE_MAX_DIMS, QKVFUSE_ERROR_SHAPE, "%s: ndim must be 0..%d; got %d", name,
           QKVFUSE_MAX_DIMS, (int)t->ndim);
  for (int k = 0; k < t->ndim; k++) {
    QF_CHECK(t->shape[k] >= 0, QKVFUSE_ERROR_SHAPE, "%s: shape[%d] must be >= 0; got %lld", name, k,
             (long long)t->shape[k]);
    QF_CHECK(t->strides[k] >= 0, QKVFUSE_ERROR_STRIDE, "%s: strides[%d] must be >= 0; got %lld", name, k,
             (long long)t->strides[k]);
  }
  QF_CHECK(qf_dtype_bit(t->dtype) & dtypes, QKVFUSE_ERROR_DTYPE, "%s: dtype must be %s; got %s (code %d)", name,
           qf_dtype_set_name(dtypes), qkvfuse_dtype_name(t->dtype), (int)t->dtype);
  QF_FORWARD(check_extent(name, t));
  QF_CHECK(t->data != NULL || qf_numel(t) == 0, QKVFUSE_ERROR_NULL_POINTER, "%s: data is NULL", name);
  size_t es = qkvfuse_dtype_size(t->dtype);
  QF_CHECK((uintptr_t)t->data % es == 0, QKVFUSE_ERROR_ALIGNMENT,
           "%s: data must be aligned to its element size (%zu bytes); got address %p", name, es, t->data);
  QF_CHECK(t->device_type == desc->device_type, QKVFUSE_ERROR_DEVICE,
           "%s: on device type %d (%s); the plan is for device type %d (%s)", name, (int)t->device_type,
           t->device_type == QKVFUSE_DEVICE_CUDA ? "cuda" : t->device_type == QKVFUSE_DEVICE_CPU ? "cpu" : "?",
           (int)desc->device_type, desc->device_type == QKVFUSE_DEVICE_CUDA ? "cuda" : "cpu");
  QF_CHECK(desc->device_type == QKVFUSE_DEVICE_CPU || t->device_id == desc->device_id, QKVFUSE_ERROR_DEVICE,
           "%s: on cuda:%d; the plan is for cuda:%d", name, (int)t->device_id, (int)desc->device_id);
  return QKVFUSE_SUCCESS;
}

qkvfuse_status qf_view_mat(const char *name, const char *what, const qkvfuse_tensor *t, int64_t rows, int64_t cols,
                           int any_inc, const char *backend, qf_mat *out) {
  char sh[128];
  /* trailing dims: multiply to cols */
  int k = t->ndim;
  int64_t prod = 1;
  while (k > 0 && prod < cols) prod *= t->shape[--k];
  int64_t lead = 1;
  for (int j = 0; j < k; j++) lead *= t->shape[j];
  QF_CHECK(prod == cols && lead == rows, QKVFUSE_ERROR_SHAPE, "%s: expected shape %s = [%lld, %lld] (or a view of it); got %s",
           name, what, (long long)rows, (long long)cols, qf_shape_str(t, sh, sizeof sh));
  /* trailing dims: one element stride, that of the innermost dim of more
   * than one element (1 when there is none) */
  int64_t inc = -1, expect = 1;
  for (int j = t->ndim - 1; j >= k; j--) {
    if (t->shape[j] == 1) continue;
    if (inc < 0) {
      inc = t->strides[j];
      QF_CHECK(any_inc || inc == 1, QKVFUSE_ERROR_STRIDE,
               "%s: the last dims (%lld elements of a row) must be contiguous%s%s%s; strides[%d] is %lld, expected 1",
               name, (long long)cols, backend ? " on the " : "", backend ? backend : "",
               backend ? " backend (the reference backend takes any stride)" : "", j, (long long)inc);
      QF_CHECK(inc >= 1, QKVFUSE_ERROR_STRIDE,
               "%s: the last dim's stride must be >= 1 (a row's elements would share memory); strides[%d] is 0", name,
               j);
    } else {
      QF_CHECK(t->strides[j] == expect, QKVFUSE_ERROR_STRIDE,
               "%s: the last dims (%lld elements of a row) must collapse to one element stride; strides[%d] is %lld, "
               "expected %lld",
               name, (long long)cols, j, (long long)t->strides[j], (long long)expect);
    }
    expect = t->strides[j] * t->shape[j];
  }
  if (inc < 0) inc = 1;
  /* leading dims: collapse to one row stride */
  int64_t ld = -1;
  for (int j = k - 1; j >= 0; j--) {
    if (t->shape[j] == 1) continue;
    if (ld < 0) {
      ld = t->strides[j];
      expect = t->strides[j] * t->shape[j];
    } else {
      QF_CHECK(t->strides[j] == expect, QKVFUSE_ERROR_STRIDE,
               "%s: the leading dims must collapse to one row stride; strides[%d] is %lld, expected %lld", name, j,
               (long long)t->strides[j], (long long)expect);
      expect *= t->shape[j];
    }
  }
  /* at most one row, or none: the stride of a dim of size 0 is unchecked
   * (check_extent), and a view of no element needs none */
  /* a row spans (cols - 1) * inc + 1 elements (no overflow: check_extent) */
  const int64_t span = cols > 0 ? (cols - 1) * inc + 1 : 0;
  if (ld < 0 || rows == 0) ld = span > cols ? span : cols;
  QF_CHECK(rows <= 1 || ld >= span, QKVFUSE_ERROR_STRIDE, "%s: row stride must be >= %lld (a row); got %lld", name,
           (long long)span, (long long)ld);
  out->data = t->data;
  out->dtype = t->dtype;
  out->rows = rows;
  out->cols = cols;
  out->ld = ld;
  out->inc = inc;
  return QKVFUSE_SUCCESS;
}

qkvfuse_status qf_view_vec(const char *name, const char *what, const qkvfuse_tensor *t, int64_t n, qf_vec *out,
                           int *strided) {
  char sh[128];
  QF_CHECK(qf_numel(t) == n, QKVFUSE_ERROR_SHAPE, "%s: expected %s = %lld elements; got shape %s", name, what,
           (long long)n, qf_shape_str(t, sh, sizeof sh));
  if (strided) *strided = 0;
  int64_t expect = 1;
  for (int j = t->ndim - 1; j >= 0; j--) {
    if (t->shape[j] != 1 && t->strides[j] != expect && strided) {
      *strided = 1;
      break;
    }
    QF_CHECK(t->shape[j] == 1 || t->strides[j] == expect, QKVFUSE_ERROR_STRIDE,
             "%s: must be contiguous; strides[%d] is %lld, expected %lld", name, j, (long long)t->strides[j],
             (long long)expect);
    expect *= t->shape[j];
  }
  out->data = t->data;
  out->dtype = t->dtype;
  out->n = n;
  return QKVFUSE_SUCCESS;
}

/* ---- overlap --------------------------------------------------------------- */

/* The dim of largest stride becomes the comb's period; the others its tooth. */
qf_span qf_span_of_tensor(const char *name, const qkvfuse_tensor *t) {
  int64_t es = (int64_t)qkvfuse_dtype_size(t->dtype);
  qf_span s = {name, (uintptr_t)t->data, 1, 0, es, NULL};
  if (t->data == NULL || qf_numel(t) == 0) {
    s.count = 0;
    return s;
  }
  int outer = -1;
  for (int k = 0; k < t->ndim; k++)
    if (t->shape[k] > 1 && (outer < 0 || t->strides[k] > t->strides[outer])) outer = k;
  int64_t inner_last = 0; /* offset of the last element of one tooth */
  for (int k = 0; k < t->ndim; k++)
    if (k != outer) inner_last += (t->shape[k] - 1) * t->strides[k];
  if (outer < 0) return s;
  s.count = t->shape[outer];
  s.stride = t->strides[outer] * es;
  s.len = (inner_last + 1) * es;
  if (s.len > s.stride) { /* not a clean comb: one interval */
    s.len = ((t->shape[outer] - 1) * t->strides[outer] + inner_last + 1) * es;
    s.count = 1;
    s.stride = 0;
  }
  return s;
}

int qf_spans_overlap(const qf_span *a, const qf_span *b) {
  if (a->count == 0 || b->count == 0) return 0;
  uintptr_t a_lo = a->base, a_hi = a->base + (uintptr_t)((a->count - 1) * a->stride + a->len);
  uintptr_t b_lo = b->base, b_hi = b->base + (uintptr_t)((b->count - 1) * b->stride + b->len);
  if (a_hi <= b_lo || b_hi <= a_lo) return 0;
  if (a->count > 1 && b->count > 1 && a->stride == b->stride) {
    /* Same period P: the teeth of a sit at [0, a.len) modulo P relative to
     * a.base, those of b at [d, d + b.len) with d = (b.base - a.base) mod P. */
    int64_t P = a->stride;
    int64_t d = (int64_t)((b->base - a->base) % (uintptr_t)P);
    if (b->base < a->base) d = (P - (int64_t)((a->base - b->base) % (uintptr_t)P)) % P;
    int disjoint = d >= a->len && d + b->len <= P;
    return !disjoint;
  }
  return 1;
}

int qf_tensor_is_non_overlapping(const qkvfuse_tensor *t) {
  /* Sort the non-trivial dims by stride; each stride must exceed the extent of
   * all smaller ones. */
  int idx[QKVFUSE_MAX_DIMS], n = 0;
  for (int k = 0; k < t->ndim; k++)
    if (t->shape[k] > 1) idx[n++] = k;
  for (int i = 1; i < n; i++)
    for (int j = i; j > 0 && t->strides[idx[j]] < t->strides[idx[j - 1]]; j--) {
      int tmp = idx[j];
      idx[j] = idx[j - 1];
      idx[j - 1] = tmp;
    }
  int64_t extent = 1; /* elements spanned by the dims so far */
  for (int i = 0; i < n; i++) {
    int k = idx[i];
    if (t->strides[k] < extent) return 0;
    extent = t->strides[k] * (t->shape[k] - 1) + extent;
  }
  return 1;
}
