/* SPDX-License-Identifier: Apache-2.0 */
/* Validation of a call, in one place, before any backend runs.
 *
 * qf_resolve checks every tensor of qkvfuse_args against the plan (presence,
 * dtype, shape, strides, alignment, device, overlap) and, for CPU plans, the
 * data-dependent values (positions, slots, scales), then reduces the tensors to
 * the views of problem.h. It writes nothing but the problem struct (and, on a
 * CPU data error, the error bits), so a failing call leaves every output and
 * cache byte as it was. Messages name each tensor as the caller does
 * (qf_names): a named operator's own argument names.
 *
 * Strides: a vector argument (weights, scales, indices) may have any strides
 * on a CPU plan: qf_resolve_gather copies it into the call's buffer before
 * the data checks and the run; a CUDA plan's kernels read every vector in
 * place, so there it must be contiguous. The elements of a row (and of a
 * cache chunk) may have any stride on a reference plan only: the other
 * backends load and store rows as runs of consecutive elements. */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "core/dtype.h"
#include "core/error.h"
#include "core/plan.h"
#include "core/tensor.h"

const qf_names qf_core_names = {"qkv",          "weight_scale", "act_scale", "bias",     "q_gamma",
                                "k_gamma",      "q_beta",       "k_beta",    "positions", "cos_sin_cache",
                                "cos",          "sin",          "slot_mapping", "k_scale", "v_scale",
                                "k_offset",     "v_offset",     "q_out",     "k_out",     "v_out",
                                "k_cache",      "v_cache",      "error_flags", "q_copy",  1,
                                "q",            "k",            "v",         "q_scale",
                                "kv_indptr",    "kv_indices",   "batch_indices", "kv_positions"};

/* An optional tensor that the configuration requires (need = 1) or forbids
 * (need = 0): return its check status. */
static qkvfuse_status require(const char *name, const qkvfuse_tensor *t, int need, const char *why) {
  if (need) QF_CHECK(t != NULL, QKVFUSE_ERROR_NULL_POINTER, "%s: required %s; got NULL", name, why);
  else
    QF_CHECK(t == NULL, QKVFUSE_ERROR_INVALID_VALUE, "%s: not used %s; pass NULL", name, why);
  return QKVFUSE_SUCCESS;
}

/* The reason a tensor is required or refused: the descriptor field for
 * qkvfuse_run's callers; a named operator's caller never set one. */
static const char *cite(const qf_names *n, const char *desc_why) { return n->core ? desc_why : "by this call"; }

/* A vector argument of n elements in any shape (t checked): read in place
 * when contiguous; strided, a CPU call copies it before the run (*dst then
 * points at the copy: qf_resolve_gather), within the call's QF_GATHER_BYTES,
 * and a CUDA call refuses it. */
static qkvfuse_status vector_view(const char *name, const char *what, const qkvfuse_tensor *t, int64_t n,
                                  qf_problem *p, const void **dst, qf_vec *out) {
  int strided = 0;
  QF_FORWARD(qf_view_vec(name, what, t, n, out, &strided));
  if (!strided) return QKVFUSE_SUCCESS;
  char sh[128], st[128];
  QF_CHECK(p->desc->device_type == QKVFUSE_DEVICE_CPU, QKVFUSE_ERROR_STRIDE,
           "%s: must be contiguous for a CUDA plan (its kernels read the vector in place; a CPU plan copies a strided "
           "one); got shape %s, strides %s",
           name, qf_shape_str(t, sh, sizeof sh), qf_strides_str(t, st, sizeof st));
  const int64_t es = (int64_t)qkvfuse_dtype_size(t->dtype);
  const int64_t bytes = n > QF_GATHER_BYTES / es ? QF_GATHER_BYTES + 64 : (n * es + 63) / 64 * 64;
  QF_CHECK(bytes <= QF_GATHER_BYTES - p->gather_bytes, QKVFUSE_ERROR_STRIDE,
           "%s: strided (shape %s, strides %s): a CPU call copies its strided vectors into one buffer of %d bytes, "
           "%lld of which the call's other strided vectors take, and %s needs %lld; give %s contiguous",
           name, qf_shape_str(t, sh, sizeof sh), qf_strides_str(t, st, sizeof st), QF_GATHER_BYTES,
           (long long)p->gather_bytes, name, (long long)(n * es), name);
  p->gather_bytes += bytes;
  p->gather[p->ngather++] = (qf_gather){t, dst, name};
  return QKVFUSE_SUCCESS;
}

static qkvfuse_status vec_arg(const char *name, const qkvfuse_tensor *t, unsigned dtypes, const char *what, int64_t n,
                              qf_problem *p, qf_vec *out) {
  QF_FORWARD(qf_check_tensor(name, t, dtypes, p->desc));
  return vector_view(name, what, t, n, p, &out->data, out);
}

/* A [rows, cols] argument: the elements of a row consecutive, or with any
 * stride on a reference plan. */
static qkvfuse_status mat_view(const char *name, const char *what, const qkvfuse_tensor *t, int64_t rows, int64_t cols,
                               const qkvfuse_plan *plan, qf_mat *out) {
  return qf_view_mat(name, what, t, rows, cols, plan->backend == QKVFUSE_BACKEND_REFERENCE,
                     plan->backend == QKVFUSE_BACKEND_CUDA ? "cuda" : "cpu", out);
}

static qkvfuse_status mat_arg(const char *name, const qkvfuse_tensor *t, unsigned dtypes, const char *what,
                              int64_t rows, int64_t cols, const qkvfuse_plan *plan, qf_mat *out) {
  QF_FORWARD(qf_check_tensor(name, t, dtypes, &plan->desc));
  return mat_view(name, what, t, rows, cols, plan, out);
}

/* The cache dtypes of each quantization mode (the plan checked the mode's range). */
static unsigned cache_dtypes(qkvfuse_quant_mode m) {
  static const unsigned dtypes[QKVFUSE_QUANT_COUNT] = {
      [QKVFUSE_QUANT_NONE] = QF_FLOATS,     [QKVFUSE_QUANT_INT8_SYM] = QF_I8, [QKVFUSE_QUANT_INT8_ASYM] = QF_I8,
      [QKVFUSE_QUANT_FP8_E4M3] = QF_FP8, [QKVFUSE_QUANT_FP8_E5M2] = QF_FP8_E5M2};
  return (unsigned)m < QKVFUSE_QUANT_COUNT ? dtypes[m] : 0;
}

static const char *layout_shape(qkvfuse_cache_layout l) {
  switch (l) {
    case QKVFUSE_CACHE_PAGED: return "paged [blocks, block_size, Nkv, D]";
    case QKVFUSE_CACHE_PAGED_HND: return "paged_hnd [blocks, Nkv, block_size, D]";
    case QKVFUSE_CACHE_NZ: return "nz [blocks, Nkv*D/c, block_size, c]";
    case QKVFUSE_CACHE_CONTIGUOUS: return "contiguous [batch, max_seq, Nkv, D]";
    default: return "?";
  }
}

/* Check a cache tensor against the layout and reduce it to qf_cache. */
static qkvfuse_status cache_arg(const char *name, const qkvfuse_tensor *t, qkvfuse_quant_mode mode,
                                const qkvfuse_plan *plan, const qf_problem *p, qf_cache *out) {
  const qkvfuse_desc *d = p->desc;
  const qkvfuse_cache_layout layout = d->cache_layout;
  char sh[128];
  QF_FORWARD(qf_check_tensor(name, t, cache_dtypes(mode), d));
  QF_CHECK(t->ndim == 4, QKVFUSE_ERROR_SHAPE, "%s: expected 4 dims for layout %s; got %s", name, layout_shape(layout),
           qf_shape_str(t, sh, sizeof sh));
  const int64_t es = (int64_t)qkvfuse_dtype_size(t->dtype);
  const int64_t width = p->Nkv * p->D;
  /* which dim holds what: block, row, chunk index, element in chunk */
  int dim_row = 1, dim_chunk = 2;
  int64_t chunk = p->D, nchunks = p->Nkv;
  if (layout == QKVFUSE_CACHE_PAGED_HND) {
    dim_row = 2;
    dim_chunk = 1;
  } else if (layout == QKVFUSE_CACHE_NZ) {
    dim_row = 2;
    dim_chunk = 1;
    chunk = 32 / es;
    QF_CHECK(width % chunk == 0, QKVFUSE_ERROR_SHAPE,
             "%s: layout nz needs Nkv*D (%lld) divisible by c = 32 bytes / %lld-byte %s = %lld", name,
             (long long)width, (long long)es, qkvfuse_dtype_name(t->dtype), (long long)chunk);
    nchunks = width / chunk;
  }
  QF_CHECK(t->shape[dim_chunk] == nchunks && t->shape[3] == chunk, QKVFUSE_ERROR_SHAPE,
           "%s: layout %s with Nkv = %lld, D = %lld, %s needs shape[%d] = %lld and shape[3] = %lld; got %s", name,
           layout_shape(layout), (long long)p->Nkv, (long long)p->D, qkvfuse_dtype_name(t->dtype), dim_chunk,
           (long long)nchunks, (long long)chunk, qf_shape_str(t, sh, sizeof sh));
  const int64_t s_elem = t->shape[3] > 1 ? t->strides[3] : 1;
  QF_CHECK(s_elem == 1 || plan->backend == QKVFUSE_BACKEND_REFERENCE, QKVFUSE_ERROR_STRIDE,
           "%s: the last dim must be contiguous (stride 1) on the %s backend (the reference backend takes any "
           "stride); got stride %lld",
           name, plan->backend == QKVFUSE_BACKEND_CUDA ? "cuda" : "cpu", (long long)s_elem);
  QF_CHECK(qf_tensor_is_non_overlapping(t), QKVFUSE_ERROR_STRIDE,
           "%s: strides make distinct elements share memory; got shape %s", name, qf_shape_str(t, sh, sizeof sh));
  out->data = t->data;
  out->dtype = t->dtype;
  out->blocks = t->shape[0];
  out->block_size = t->shape[dim_row];
  out->s_block = t->strides[0];
  out->s_row = t->strides[dim_row];
  out->s_chunk = t->strides[dim_chunk];
  out->chunk = chunk;
  out->s_elem = s_elem;
  return QKVFUSE_SUCCESS;
}

/* Scale (and offset) of one quantized cache. */
static qkvfuse_status scale_arg(const char *name, const qkvfuse_tensor *t, qf_problem *p, int64_t n_expect,
                                qf_vec *out) {
  QF_FORWARD(qf_check_tensor(name, t, QF_F32, p->desc));
  int64_t n = qf_numel(t);
  if (n_expect == 0) {
    QF_CHECK(n == 1 || n == p->Nkv || n == p->Nkv * p->D, QKVFUSE_ERROR_SHAPE,
             "%s: expected 1 (per tensor: [1] or a scalar), Nkv = %lld (per kv head: [Nkv]) or Nkv*D = %lld (per "
             "channel: [Nkv, D] or [Nkv*D]) elements; got %lld",
             name, (long long)p->Nkv, (long long)(p->Nkv * p->D), (long long)n);
    return vector_view(name, "[1], [Nkv] or [Nkv, D]", t, n, p, &out->data, out);
  }
  return vector_view(name, "the scale's element count", t, n_expect, p, &out->data, out);
}

/* Channels per scale of a k/v scale of n elements (problem.h). */
static int64_t scale_group(const qf_problem *p, int64_t n) {
  return n == p->Nkv * p->D ? 1 : n == p->Nkv && n > 1 ? p->D : p->Nkv * p->D;
}

/* The fp8 dtype (as a dtype-set bit) a quantized q_out has, 0 for an unquantized q. */
static unsigned q_quant_dtypes(qkvfuse_quant_mode m) {
  return m == QKVFUSE_QUANT_FP8_E4M3 ? QF_FP8 : m == QKVFUSE_QUANT_FP8_E5M2 ? QF_FP8_E5M2 : 0;
}

/* ---- overlap ---------------------------------------------------------------- */

static int same_view(const qf_mat *a, const qf_mat *b, uintptr_t b_base) {
  return (uintptr_t)a->data == b_base && a->dtype == b->dtype && (a->rows <= 1 || a->ld == b->ld) &&
         (a->cols <= 1 || a->inc == b->inc);
}

/* The bytes vector v of the call touches: its caller's strided tensor while
 * it waits to be gathered (dst: where the gather points), else v itself. */
static qf_span span_of_vec(const qf_problem *p, const char *name, const qf_vec *v, const void *const *dst) {
  for (int i = 0; i < p->ngather; i++)
    if (p->gather[i].dst == dst) return qf_span_of_tensor(name, p->gather[i].t);
  return qf_span_of_vec(name, v);
}

/* Appends s to a[*n] unless it is empty (an absent tensor overlaps
 * nothing); the order is kept for the messages. */
static inline void add_span(qf_span *a, int *n, qf_span s) {
  if (s.count) a[(*n)++] = s;
}

/* Every tensor the call reads against every one it writes (q_copy and
 * error_flags included), and the written ones against each other. Addresses
 * are compared as integers: an empty view may carry any pointer, and offsetting
 * it would be undefined. */
static qkvfuse_status check_overlaps(const qf_problem *p, const qkvfuse_args *a, const qf_names *n) {
  enum { MAX_IN = 25, MAX_OUT = 7 };
  qf_span in[MAX_IN], out[MAX_OUT];
  int nin = 0, nout = 0;
  /* the input as its three parts, so q/k outputs may be exactly their own part */
  const int split = a->q != NULL;
  const char *part_names[3] = {split ? n->q : n->qkv, split ? n->k : n->qkv, split ? n->v : n->qkv};
  const char *part_labels[3] = {" (q columns)", " (k columns)", " (v columns)"};
  for (int i = 0; i < 3; i++) {
    if (i == 0 && same_view(&p->q_out, &p->in[0], (uintptr_t)p->in[0].data)) continue;
    if (i == 1 && p->k_out.data && same_view(&p->k_out, &p->in[1], (uintptr_t)p->in[1].data)) continue;
    qf_span s = qf_span_of_mat(part_names[i], &p->in[i]);
    s.part = split ? NULL : part_labels[i];
    add_span(in, &nin, s);
  }
  const qf_vec *vecs[] = {&p->weight_scale, &p->act_scale, &p->bias, &p->q_gamma, &p->k_gamma, &p->q_beta,
                          &p->k_beta, &p->positions, &p->slot_mapping, &p->k_scale, &p->v_scale, &p->k_offset,
                          &p->v_offset};
  const char *vec_names[] = {n->weight_scale, n->act_scale, n->bias, n->q_gamma, n->k_gamma, n->q_beta,
                             n->k_beta, n->positions, n->slot_mapping, n->k_scale, n->v_scale, n->k_offset,
                             n->v_offset};
  for (size_t i = 0; i < sizeof vecs / sizeof vecs[0]; i++)
    add_span(in, &nin, span_of_vec(p, vec_names[i], vecs[i], &vecs[i]->data));
  add_span(in, &nin, span_of_vec(p, n->q_scale, &p->q_scale, &p->q_scale.data));
  /* the page table (address.h): four more index vectors the call reads */
  const qf_page_table *pt = &p->page_table;
  const qf_vec pt_vecs[4] = {{pt->indptr, (qkvfuse_dtype)pt->indptr_dtype, pt->indptr ? pt->nseq + 1 : 0},
                             {pt->indices, (qkvfuse_dtype)pt->indices_dtype, pt->nindices},
                             {pt->batch, (qkvfuse_dtype)pt->batch_dtype, pt->batch ? p->T : 0},
                             {pt->pos, (qkvfuse_dtype)pt->pos_dtype, pt->pos ? p->T : 0}};
  const char *pt_names[4] = {n->kv_indptr, n->kv_indices, n->batch_indices, n->kv_positions};
  const void *const *pt_dst[4] = {&pt->indptr, &pt->indices, &pt->batch, &pt->pos};
  for (int i = 0; i < 4; i++) add_span(in, &nin, span_of_vec(p, pt_names[i], &pt_vecs[i], pt_dst[i]));
  add_span(in, &nin, qf_span_of_mat(n->cos_sin_cache, &p->cos_sin_cache));
  add_span(in, &nin, qf_span_of_mat(n->cos, &p->cos));
  add_span(in, &nin, qf_span_of_mat(n->sin, &p->sin));

  /* the least expected outputs first: a message names the first of a pair */
  add_span(out, &nout,
           (qf_span){n->error_flags, (uintptr_t)a->error_flags, a->error_flags ? 1 : 0, 0, sizeof(uint32_t), NULL});
  add_span(out, &nout, qf_span_of_mat(n->q_copy, &p->q_copy));
  add_span(out, &nout, qf_span_of_mat(n->q_out, &p->q_out));
  add_span(out, &nout, qf_span_of_mat(n->k_out, &p->k_out));
  add_span(out, &nout, qf_span_of_mat(n->v_out, &p->v_out));
  if (a->k_cache) add_span(out, &nout, qf_span_of_tensor(n->k_cache, a->k_cache));
  if (a->v_cache) add_span(out, &nout, qf_span_of_tensor(n->v_cache, a->v_cache));
  for (int i = 0; i < nout; i++) {
    for (int j = 0; j < nin; j++)
      QF_CHECK(!qf_spans_overlap(&out[i], &in[j]), QKVFUSE_ERROR_OVERLAP,
               "%s: overlaps the input %s%s (only %s/%s exactly equal to %s may alias it)", out[i].name, in[j].name,
               in[j].part ? in[j].part : "", n->q_out, n->k_out, split ? "q/k" : "the q/k columns of qkv");
    for (int j = i + 1; j < nout; j++)
      QF_CHECK(!qf_spans_overlap(&out[i], &out[j]), QKVFUSE_ERROR_OVERLAP, "%s: overlaps the output %s", out[i].name,
               out[j].name);
  }
  return QKVFUSE_SUCCESS;
}

/* ---- data-dependent checks (CPU: before anything is written) ---------------- */

/* The scale rule: finite, and nonzero where the library divides by the
 * scale. On float32 bits with the sign cleared, u, it is lo <= u <= FLT_MAX's
 * bits, lo = 1 for a divisor (0 otherwise); a subnormal counts as nonzero,
 * whatever the FPU's denormals-are-zero mode. */
#define QF_SCALE_MAX_BITS 0x7f7fffff

/* Whether any of the n float32 scales at x (bits read as integers) breaks
 * the rule: v = u - lo must have v >= 0 and K - v >= 0, K = the largest
 * finite bits - lo, so the OR of both over the block has its sign bit set
 * exactly when one of them fails. Branch-free, so that it vectorizes; the
 * clones use the CPU's widest vectors: per-channel scales run to tens of
 * thousands of entries and are checked on every call. */
#ifdef QF_HAVE_TARGET_CLONES
__attribute__((target_clones("avx512f", "avx2", "default")))
#endif
static int any_bad_scale(const unsigned char *x, int64_t n, int divisor) {
  const int32_t lo = divisor ? 1 : 0, K = QF_SCALE_MAX_BITS - lo;
  uint32_t acc = 0;
  for (int64_t i = 0; i < n; i++) {
    uint32_t u;
    memcpy(&u, x + 4 * i, sizeof u);
    const int32_t v = (int32_t)(u & 0x7fffffffu) - lo;
    acc |= (uint32_t)v | (uint32_t)(K - v);
  }
  return (int)(acc >> 31);
}

/* Index of the first element of a float32 vector that breaks the scale
 * rule, or -1: blocks are tested with any_bad_scale, and only a failing one
 * is searched. */
static int64_t first_bad_scale(const qf_vec *v, int divisor) {
  enum { BLOCK = 1024 };
  const unsigned char *x = v->data;
  for (int64_t i0 = 0; x && i0 < v->n; i0 += BLOCK) {
    const int64_t n = v->n - i0 < BLOCK ? v->n - i0 : BLOCK;
    if (!any_bad_scale(x + 4 * i0, n, divisor)) continue;
    for (int64_t i = i0; i < i0 + n; i++)
      if (any_bad_scale(x + 4 * i, 1, divisor)) return i;
  }
  return -1;
}

/* The message of page-table result r (< 0) for token t: the caller's
 * argument at fault first, with the entries that made it so. Reads only what
 * qf_page_table_dest read to reach r. */
static qkvfuse_status page_table_error(const qf_page_table *pt, const qf_names *n, int64_t t, int r) {
  const int64_t b = qf_pt_load(pt->batch, pt->batch_dtype, t);
  if (r == QF_PT_BAD_BATCH)
    return qf_fail(QKVFUSE_ERROR_OUT_OF_RANGE,
                   "%s: %s[%lld] = %lld must be -1 (skip) or a sequence in [0, batch = %lld) (%s has %lld entries)",
                   n->batch_indices, n->batch_indices, (long long)t, (long long)b, (long long)pt->nseq, n->kv_indptr,
                   (long long)(pt->nseq + 1));
  const int64_t p = qf_pt_load(pt->pos, pt->pos_dtype, t);
  if (r == QF_PT_BAD_POSITION)
    return qf_fail(QKVFUSE_ERROR_OUT_OF_RANGE, "%s: %s[%lld] = %lld must be >= 0 (token %lld of sequence %lld)",
                   n->kv_positions, n->kv_positions, (long long)t, (long long)p, (long long)t, (long long)b);
  const int64_t lo = qf_pt_load(pt->indptr, pt->indptr_dtype, b), hi = qf_pt_load(pt->indptr, pt->indptr_dtype, b + 1);
  if (r == QF_PT_BAD_INDPTR)
    return qf_fail(QKVFUSE_ERROR_OUT_OF_RANGE,
                   "%s: %s[%lld] = %lld and %s[%lld] = %lld (sequence %lld of token %lld) must be >= 0 and "
                   "non-decreasing", n->kv_indptr, n->kv_indptr, (long long)b, (long long)lo, n->kv_indptr,
                   (long long)(b + 1), (long long)hi, (long long)b, (long long)t);
  if (r == QF_PT_BAD_PAGE)
    return qf_fail(QKVFUSE_ERROR_OUT_OF_RANGE,
                   "%s: %s[%lld] = %lld is past sequence %lld's blocks: %s[%lld] - %s[%lld] = %lld blocks of "
                   "block_size %lld hold positions [0, %lld)", n->kv_positions, n->kv_positions, (long long)t,
                   (long long)p, (long long)b, n->kv_indptr, (long long)(b + 1), n->kv_indptr, (long long)b,
                   (long long)(hi - lo), (long long)pt->block_size,
                   (long long)(pt->block_size > 0 && hi - lo <= INT64_MAX / pt->block_size ? (hi - lo) * pt->block_size
                                                                                         : 0));
  const int64_t page = p / pt->block_size;
  if (r == QF_PT_BAD_INDEX) /* lo + page < hi: no overflow */
    return qf_fail(QKVFUSE_ERROR_OUT_OF_RANGE,
                   "%s: token %lld (sequence %lld, position %lld) reads %s[%s[%lld] + %lld / %lld] = %s[%lld]; %s has "
                   "%lld entries", n->kv_indices, (long long)t, (long long)b, (long long)p, n->kv_indices, n->kv_indptr,
                   (long long)b, (long long)p, (long long)pt->block_size, n->kv_indices, (long long)(lo + page),
                   n->kv_indices, (long long)pt->nindices);
  const int64_t blk = qf_pt_load(pt->indices, pt->indices_dtype, lo + page);
  return qf_fail(QKVFUSE_ERROR_OUT_OF_RANGE,
                 "%s: %s[%lld] = %lld (token %lld: sequence %lld, position %lld) is outside the cache's blocks "
                 "[0, %lld)", n->kv_indices, n->kv_indices, (long long)(lo + page), (long long)blk, (long long)t,
                 (long long)b, (long long)p, (long long)pt->blocks);
}

/* Every class of data error is looked for, so that error_flags holds all of
 * their bits (as on CUDA); the status and message are the first one's. */
static qkvfuse_status check_data(const qf_problem *p, const qf_names *n) {
  const qkvfuse_desc *d = p->desc;
  qkvfuse_status st = QKVFUSE_SUCCESS;
  uint32_t bits = 0;
#define QF_DATA_ERROR(bit, status, ...)                 \
  do {                                                  \
    if (!bits) st = qf_fail((status), __VA_ARGS__);     \
    bits |= (bit);                                      \
  } while (0)
  if (d->rope_source == QKVFUSE_ROPE_COS_SIN_CACHE || d->rope_source == QKVFUSE_ROPE_COMPUTED) {
    const int64_t hi = d->rope_source == QKVFUSE_ROPE_COMPUTED ? ((int64_t)1 << 31) : p->cos_sin_cache.rows;
    for (int64_t t = 0; t < p->T; t++) {
      int64_t pos = qf_load_index(p->positions.data, p->positions.dtype, t);
      if (pos < 0 || pos >= hi) {
        char rows[80] = "";
        if (d->rope_source == QKVFUSE_ROPE_COS_SIN_CACHE) snprintf(rows, sizeof rows, " (the rows of %s)", n->cos_sin_cache);
        QF_DATA_ERROR(QKVFUSE_DATA_ERROR_POSITION, QKVFUSE_ERROR_OUT_OF_RANGE, "%s: %s[%lld] = %lld is outside [0, %lld)%s",
                      n->positions, n->positions, (long long)t, (long long)pos, (long long)hi, rows);
        break;
      }
    }
  }
  if (d->cache_addressing == QKVFUSE_ADDRESS_PAGE_TABLE) {
    int64_t block, row;
    for (int64_t t = 0; t < p->T; t++) {
      const int r = qf_page_table_dest(&p->page_table, t, &block, &row);
      if (r < 0) {
        if (!bits) st = page_table_error(&p->page_table, n, t, r);
        bits |= QKVFUSE_DATA_ERROR_SLOT;
        break;
      }
    }
  } else if (d->cache_layout != QKVFUSE_CACHE_NONE) {
    const qf_vec *sm = &p->slot_mapping;
    const int contiguous = d->cache_layout == QKVFUSE_CACHE_CONTIGUOUS;
    /* contiguous: start index in [0, max_seq - S]; else slot in [0, blocks * block_size) */
    const int64_t hi = contiguous ? p->k_cache.block_size - p->S + 1 : p->k_cache.blocks * p->k_cache.block_size;
    for (int64_t i = 0; i < sm->n; i++) {
      int64_t s = qf_load_index(sm->data, sm->dtype, i);
      if (s != -1 && (s < 0 || s >= hi)) {
        if (contiguous)
          QF_DATA_ERROR(QKVFUSE_DATA_ERROR_SLOT, QKVFUSE_ERROR_OUT_OF_RANGE,
                        "%s: %s[%lld] = %lld: a contiguous start index must be -1 or in [0, max_seq - S] = [0, %lld]",
                        n->slot_mapping, n->slot_mapping, (long long)i, (long long)s, (long long)(hi - 1));
        else
          QF_DATA_ERROR(QKVFUSE_DATA_ERROR_SLOT, QKVFUSE_ERROR_OUT_OF_RANGE,
                        "%s: %s[%lld] = %lld is outside the cache: -1 or [0, blocks*block_size = %lld)",
                        n->slot_mapping, n->slot_mapping, (long long)i, (long long)s, (long long)hi);
        break;
      }
    }
  }
  /* scales: finite, and nonzero where they divide (quantization); the dequant
   * scales multiply, so zero is a value like any other */
  const qf_vec *sc[7] = {&p->k_scale,  &p->v_scale,      &p->q_scale,  &p->k_offset,
                         &p->v_offset, &p->weight_scale, &p->act_scale};
  const char *names[7] = {n->k_scale, n->v_scale, n->q_scale, n->k_offset, n->v_offset, n->weight_scale, n->act_scale};
  for (int k = 0; k < 7; k++) {
    const int64_t i = first_bad_scale(sc[k], k < 3);
    if (i >= 0)
      QF_DATA_ERROR(QKVFUSE_DATA_ERROR_SCALE, QKVFUSE_ERROR_BAD_SCALE, "%s: %s[%lld] = %g; must be %s", names[k],
                    names[k], (long long)i, (double)((const float *)sc[k]->data)[i],
                    k < 3 ? "finite and nonzero" : "finite");
  }
#undef QF_DATA_ERROR
  if (bits && p->error_flags) *p->error_flags |= bits;
  return st;
}

/* ---- the input ---------------------------------------------------------------- */

/* The leading-dim counts an input part may have for t (bit n: n leading dims). */
static unsigned lead_options(const qkvfuse_tensor *t, int64_t N, int64_t D) {
  const int nd = t ? t->ndim : 0;
  unsigned o = 0;
  if (nd >= 2 && nd <= 3 && t->shape[nd - 1] == N * D) o |= 1u << (nd - 1);
  if (nd >= 3 && nd <= 4 && t->shape[nd - 1] == D && t->shape[nd - 2] == N) o |= 1u << (nd - 2);
  return o;
}

/* The leading (token) dims of an input part of N*D columns: t is [..., N*D]
 * or [..., N, D] with one or two leading dims (*nlead; on entry 0 for any, or
 * the count the part must have: [T, 1, D] is [T, N*D] split when N = 1). */
static qkvfuse_status lead_dims(const char *name, const qkvfuse_tensor *t, int64_t N, int64_t D, const char *what,
                                int *nlead) {
  char sh[128];
  const int nd = t->ndim, want = *nlead;
  const unsigned o = lead_options(t, N, D) & (want ? 1u << want : ~0u);
  if (o) /* [.., N*D] first where both read */
    *nlead = o & (1u << (nd - 1)) ? nd - 1 : nd - 2;
  else
    return qf_fail(QKVFUSE_ERROR_SHAPE, "%s: expected [T, %s] or [B, S, %s] with %s = %lld, or the last dim split as "
                   "[%lld, %lld]%s; got %s", name, what, what, what, (long long)(N * D), (long long)N, (long long)D,
                   want ? " (with the token dims of q)" : "", qf_shape_str(t, sh, sizeof sh));
  return QKVFUSE_SUCCESS;
}

static void set_tokens(qf_problem *p, const qkvfuse_tensor *t, int nlead) {
  /* B*S cannot overflow: check_extent bounds the element count */
  p->B = t->shape[0];
  p->S = nlead == 2 ? t->shape[1] : 1;
  p->T = p->B * p->S;
  if (p->desc->cache_layout != QKVFUSE_CACHE_CONTIGUOUS) {
    p->B = p->T;
    p->S = 1;
  }
}

/* A packed qkv [T, H] or [B, S, H]: its three column blocks. The parts'
 * addresses are computed as integers: an empty qkv may carry any pointer. */
static qkvfuse_status packed_input(const qf_names *n, const qkvfuse_tensor *x, const qkvfuse_plan *plan,
                                   qf_problem *p) {
  char sh[128];
  QF_CHECK(x != NULL || !n->core, QKVFUSE_ERROR_NULL_POINTER, "%s: required (or %s, %s and %s separately); got NULL",
           n->qkv, n->q, n->k, n->v);
  QF_FORWARD(qf_check_tensor(n->qkv, x, QF_FLOATS | QF_I32, p->desc));
  QF_CHECK((x->ndim == 2 || x->ndim == 3) && x->shape[x->ndim - 1] == p->H, QKVFUSE_ERROR_SHAPE,
           "%s: expected [T, H] or [B, S, H] with H = (Nq + 2*Nkv)*D = %lld; got %s", n->qkv, (long long)p->H,
           qf_shape_str(x, sh, sizeof sh));
  set_tokens(p, x, x->ndim - 1);
  qf_mat all;
  QF_FORWARD(mat_view(n->qkv, "[T, H]", x, p->T, p->H, plan, &all));
  const int64_t cols[3] = {p->Nq * p->D, p->Nkv * p->D, p->Nkv * p->D};
  uintptr_t at = (uintptr_t)all.data;
  for (int i = 0; i < 3; i++) {
    p->in[i] = all;
    p->in[i].data = (void *)at;
    p->in[i].cols = cols[i];
    at += (uintptr_t)(cols[i] * all.inc) * qkvfuse_dtype_size(all.dtype);
  }
  return QKVFUSE_SUCCESS;
}

/* Separate q, k and v: q fixes the token dims, k and v repeat them. */
static qkvfuse_status split_inputs(const qf_names *n, const qkvfuse_args *a, const qkvfuse_plan *plan, qf_problem *p) {
  const qkvfuse_desc *d = p->desc;
  QF_CHECK(a->qkv == NULL, QKVFUSE_ERROR_INVALID_VALUE, "%s: give %s or %s/%s/%s, not both", n->qkv, n->qkv, n->q,
           n->k, n->v);
  const int need_v = a->v_out != NULL || d->cache_layout != QKVFUSE_CACHE_NONE;
  QF_CHECK(a->v != NULL || !need_v, QKVFUSE_ERROR_NULL_POINTER, "%s: required %s; got NULL", n->v,
           a->v_out ? "with v_out" : "with a cache");
  const qkvfuse_tensor *t[3] = {a->q, a->k, a->v};
  const char *names[3] = {n->q, n->k, n->v};
  const int64_t heads[3] = {p->Nq, p->Nkv, p->Nkv};
  const char *what[3] = {"Nq*D", "Nkv*D", "Nkv*D"};
  int nlead[3] = {0, 0, 0};
  /* q [X, 1, D] with Nq = 1 reads as [B, S, Nq*D] and as [T, Nq, D]: k's form decides */
  const unsigned q_opts = lead_options(t[0], p->Nq, p->D), common = q_opts & lead_options(t[1], p->Nkv, p->D);
  if ((q_opts & (q_opts - 1)) && common && !(common & (common - 1))) nlead[0] = common == 2u ? 1 : 2;
  for (int i = 0; i < 3; i++) {
    if (i == 2 && !t[2]) break;
    QF_FORWARD(qf_check_tensor(names[i], t[i], QF_FLOATS | QF_I32, d));
    if (i > 0) nlead[i] = nlead[0];
    QF_FORWARD(lead_dims(names[i], t[i], heads[i], p->D, what[i], &nlead[i]));
    if (i == 0) {
      set_tokens(p, t[0], nlead[0]);
    } else {
      QF_CHECK(t[i]->dtype == t[0]->dtype, QKVFUSE_ERROR_DTYPE, "%s: dtype must equal %s's (%s); got %s", names[i],
               names[0], qkvfuse_dtype_name(t[0]->dtype), qkvfuse_dtype_name(t[i]->dtype));
      int same = nlead[i] == nlead[0];
      for (int k = 0; same && k < nlead[0]; k++) same = t[i]->shape[k] == t[0]->shape[k];
      char sh[128], sh0[128];
      QF_CHECK(same, QKVFUSE_ERROR_SHAPE, "%s: its token dims must equal %s's (shape %s); got %s", names[i], names[0],
               qf_shape_str(t[0], sh0, sizeof sh0), qf_shape_str(t[i], sh, sizeof sh));
    }
    char shape_what[32];
    snprintf(shape_what, sizeof shape_what, "[T, %s]", what[i]);
    QF_FORWARD(mat_view(names[i], shape_what, t[i], p->T, heads[i] * p->D, plan, &p->in[i]));
  }
  if (!t[2]) p->in[2] = (qf_mat){NULL, t[0]->dtype, p->T, p->Nkv * p->D, p->Nkv * p->D, 1};
  return QKVFUSE_SUCCESS;
}

/* ---- the page table ------------------------------------------------------------- */

/* kv_indptr [batch + 1] (batch >= 0), kv_indices [any length], batch_indices
 * and kv_positions [T]: int32 / int64 vectors, each of its own dtype (strided
 * ones gathered into the page table's pointers). Needs p->k_cache resolved
 * (the page table addresses its blocks). */
static qkvfuse_status page_table_args(const qf_names *n, const qkvfuse_args *a, qf_problem *p) {
  const qkvfuse_desc *d = p->desc;
  char sh[128];
  qf_vec indptr, indices, batch, pos;
  qf_page_table *pt = &p->page_table;
  QF_FORWARD(qf_check_tensor(n->kv_indptr, a->kv_indptr, QF_INDICES, d));
  const int64_t np = qf_numel(a->kv_indptr);
  QF_CHECK(np >= 1, QKVFUSE_ERROR_SHAPE, "%s: expected [batch + 1] with batch >= 0 (at least 1 element); got %s",
           n->kv_indptr, qf_shape_str(a->kv_indptr, sh, sizeof sh));
  QF_FORWARD(vector_view(n->kv_indptr, "[batch + 1]", a->kv_indptr, np, p, &pt->indptr, &indptr));
  QF_FORWARD(qf_check_tensor(n->kv_indices, a->kv_indices, QF_INDICES, d));
  QF_FORWARD(vector_view(n->kv_indices, "[>= kv_indptr[batch]]", a->kv_indices, qf_numel(a->kv_indices), p,
                         &pt->indices, &indices));
  QF_FORWARD(qf_check_tensor(n->batch_indices, a->batch_indices, QF_INDICES, d));
  QF_FORWARD(vector_view(n->batch_indices, "[T]", a->batch_indices, p->T, p, &pt->batch, &batch));
  QF_FORWARD(qf_check_tensor(n->kv_positions, a->kv_positions, QF_INDICES, d));
  QF_FORWARD(vector_view(n->kv_positions, "[T]", a->kv_positions, p->T, p, &pt->pos, &pos));
  pt->indptr = indptr.data, pt->indptr_dtype = (int32_t)indptr.dtype, pt->nseq = np - 1;
  pt->indices = indices.data, pt->indices_dtype = (int32_t)indices.dtype, pt->nindices = indices.n;
  pt->batch = batch.data, pt->batch_dtype = (int32_t)batch.dtype;
  pt->pos = pos.data, pt->pos_dtype = (int32_t)pos.dtype;
  pt->block_size = p->k_cache.block_size;
  pt->blocks = p->k_cache.blocks;
  return QKVFUSE_SUCCESS;
}

/* ---- the whole call ------------------------------------------------------------- */

qkvfuse_status qf_resolve_call(const qkvfuse_plan *plan, const qkvfuse_args *a, const qf_call *call, qf_problem *p) {
  const qf_names *n = call && call->names ? call->names : &qf_core_names;
  QF_CHECK(plan != NULL, QKVFUSE_ERROR_NULL_POINTER, "plan: NULL");
  QF_CHECK(a != NULL, QKVFUSE_ERROR_NULL_POINTER, "args: NULL");
  /* version 1 is version 2 without the separate inputs and q_scale */
  const int v1 = a->struct_size == offsetof(qkvfuse_args, q) && a->version == 1;
  QF_CHECK(v1 || (a->struct_size == sizeof(qkvfuse_args) && a->version == QKVFUSE_ARGS_VERSION),
           QKVFUSE_ERROR_VERSION, "args: struct_size/version must be %zu/%d or %zu/1 (use QKVFUSE_ARGS_INIT); got %u/%u",
           sizeof(qkvfuse_args), QKVFUSE_ARGS_VERSION, offsetof(qkvfuse_args, q), a->struct_size, a->version);
  qkvfuse_args full = QKVFUSE_ARGS_INIT;
  memcpy(&full, a, a->struct_size);
  a = &full;
  const qkvfuse_desc *d = &plan->desc;
  memset(p, 0, sizeof *p);
  p->desc = d;
  p->Nq = d->num_q_heads;
  p->Nkv = d->num_kv_heads;
  p->D = d->head_dim;
  p->R = d->rotary_dim;
  p->H = (p->Nq + 2 * p->Nkv) * p->D;
  p->error_flags = a->error_flags;
  p->names = n;
  char sh[128], why[96];

  /* the input: qkv, or q, k (and v); fixes T (and B, S for the contiguous layout) */
  const int split = a->q || a->k || a->v;
  if (split) QF_FORWARD(split_inputs(n, a, plan, p));
  else QF_FORWARD(packed_input(n, a->qkv, plan, p));
  const qkvfuse_dtype in_dtype = p->in[0].dtype;
  const int int_input = in_dtype == QKVFUSE_DTYPE_INT32;
  /* dequant */
  const char *in_name = split ? n->q : n->qkv;
  /* the message names the input: formatted for a failing call only */
  if (int_input ? !a->weight_scale : a->weight_scale || a->act_scale || a->bias) {
    snprintf(why, sizeof why, int_input ? "for int32 %s" : "with float %s (dequant is for int32 input)", in_name);
    QF_FORWARD(require(n->weight_scale, a->weight_scale, int_input, why));
    QF_FORWARD(require(n->act_scale, a->act_scale, 0, why));
    QF_FORWARD(require(n->bias, a->bias, 0, why));
  }
  if (a->weight_scale) QF_FORWARD(vec_arg(n->weight_scale, a->weight_scale, QF_F32, "[H]", p->H, p, &p->weight_scale));
  if (a->act_scale) QF_FORWARD(vec_arg(n->act_scale, a->act_scale, QF_F32, "[T]", p->T, p, &p->act_scale));
  if (a->bias) QF_FORWARD(vec_arg(n->bias, a->bias, QF_FLOATS | QF_I32, "[H]", p->H, p, &p->bias));

  /* RMSNorm */
  QF_FORWARD(require(n->q_gamma, a->q_gamma, d->q_norm, cite(n, d->q_norm ? "with desc.q_norm = 1" : "with desc.q_norm = 0")));
  QF_FORWARD(require(n->k_gamma, a->k_gamma, d->k_norm, cite(n, d->k_norm ? "with desc.k_norm = 1" : "with desc.k_norm = 0")));
  if (!d->q_norm) QF_FORWARD(require(n->q_beta, a->q_beta, 0, cite(n, "with desc.q_norm = 0")));
  if (!d->k_norm) QF_FORWARD(require(n->k_beta, a->k_beta, 0, cite(n, "with desc.k_norm = 0")));
  if (a->q_gamma) QF_FORWARD(vec_arg(n->q_gamma, a->q_gamma, QF_FLOATS, "[D]", p->D, p, &p->q_gamma));
  if (a->k_gamma) QF_FORWARD(vec_arg(n->k_gamma, a->k_gamma, QF_FLOATS, "[D]", p->D, p, &p->k_gamma));
  if (a->q_beta) QF_FORWARD(vec_arg(n->q_beta, a->q_beta, QF_FLOATS, "[D]", p->D, p, &p->q_beta));
  if (a->k_beta) QF_FORWARD(vec_arg(n->k_beta, a->k_beta, QF_FLOATS, "[D]", p->D, p, &p->k_beta));

  /* RoPE */
  const qkvfuse_rope_source src = d->rope_source;
  const int use_pos = src == QKVFUSE_ROPE_COS_SIN_CACHE || src == QKVFUSE_ROPE_COMPUTED;
  QF_FORWARD(require(n->positions, a->positions, use_pos,
                     cite(n, use_pos ? "with rope_source cos_sin_cache or computed" : "with this rope_source")));
  QF_FORWARD(require(n->cos_sin_cache, a->cos_sin_cache, src == QKVFUSE_ROPE_COS_SIN_CACHE,
                     cite(n, src == QKVFUSE_ROPE_COS_SIN_CACHE ? "with rope_source cos_sin_cache" : "with this rope_source")));
  QF_FORWARD(require(n->cos, a->cos, src == QKVFUSE_ROPE_COS_SIN,
                     cite(n, src == QKVFUSE_ROPE_COS_SIN ? "with rope_source cos_sin" : "with this rope_source")));
  QF_FORWARD(require(n->sin, a->sin, src == QKVFUSE_ROPE_COS_SIN,
                     cite(n, src == QKVFUSE_ROPE_COS_SIN ? "with rope_source cos_sin" : "with this rope_source")));
  if (a->positions) QF_FORWARD(vec_arg(n->positions, a->positions, QF_INDICES, "[T]", p->T, p, &p->positions));
  if (a->cos_sin_cache) {
    const qkvfuse_tensor *c = a->cos_sin_cache;
    QF_FORWARD(qf_check_tensor(n->cos_sin_cache, c, QF_FLOATS, d));
    QF_CHECK(c->ndim == 2 && c->shape[1] == p->R && c->shape[0] >= 1, QKVFUSE_ERROR_SHAPE,
             "%s: expected [max_pos >= 1, R = %lld]; got %s", n->cos_sin_cache, (long long)p->R,
             qf_shape_str(c, sh, sizeof sh));
    QF_FORWARD(mat_view(n->cos_sin_cache, "[max_pos, R]", c, c->shape[0], p->R, plan, &p->cos_sin_cache));
  }
  if (a->cos) {
    QF_FORWARD(mat_arg(n->cos, a->cos, QF_FLOATS, "[T, R]", p->T, p->R, plan, &p->cos));
    QF_FORWARD(mat_arg(n->sin, a->sin, QF_FLOATS, "[T, R]", p->T, p->R, plan, &p->sin));
    QF_CHECK(a->sin->dtype == a->cos->dtype, QKVFUSE_ERROR_DTYPE, "%s: dtype must equal %s's (%s); got %s", n->sin,
             n->cos, qkvfuse_dtype_name(a->cos->dtype), qkvfuse_dtype_name(a->sin->dtype));
  }
  p->inv_freq = plan->inv_freq;
  p->mscale = plan->mscale;

  /* outputs: qkv's dtype or float32; for int32 qkv float32 or the RoPE table's dtype */
  const qkvfuse_tensor *table = a->cos ? a->cos : a->cos_sin_cache;
  unsigned out_dtypes = QF_F32 | (int_input ? (table ? qf_dtype_bit(table->dtype) : QF_FLOATS) : qf_dtype_bit(in_dtype));
  /* a quantized q: q_out of the fp8 dtype of desc.q_quant, q_scale with it */
  const unsigned q_fp8 = q_quant_dtypes(d->q_quant);
  if (q_fp8 && a->q_out)
    QF_CHECK(qf_dtype_bit(a->q_out->dtype) == q_fp8, QKVFUSE_ERROR_DTYPE, "%s: dtype must be %s %s; got %s (code %d)",
             n->q_out, qf_dtype_set_name(q_fp8),
             cite(n, d->q_quant == QKVFUSE_QUANT_FP8_E4M3 ? "with desc.q_quant = fp8_e4m3"
                                                          : "with desc.q_quant = fp8_e5m2"),
             qkvfuse_dtype_name(a->q_out->dtype), (int)a->q_out->dtype);
  if (!q_fp8 && a->q_out)
    QF_CHECK(!(qf_dtype_bit(a->q_out->dtype) & (QF_FP8 | QF_FP8_E5M2)), QKVFUSE_ERROR_DTYPE,
             "%s: dtype must be %s; got %s, which needs a quantized q (%s)", n->q_out, qf_dtype_set_name(out_dtypes),
             qkvfuse_dtype_name(a->q_out->dtype), n->core ? "desc.q_quant and q_scale" : "not offered by this call");
  QF_FORWARD(mat_arg(n->q_out, a->q_out, q_fp8 ? q_fp8 : out_dtypes, "[T, Nq*D]", p->T, p->Nq * p->D, plan, &p->q_out));
  p->io_dtype = !q_fp8 ? p->q_out.dtype
                : !int_input ? in_dtype
                : table      ? table->dtype
                             : QKVFUSE_DTYPE_FLOAT32;
  QF_FORWARD(require(n->q_scale, a->q_scale, q_fp8 != 0, cite(n, q_fp8 ? "with q_quant set" : "with q_quant none")));
  if (a->q_scale) {
    QF_FORWARD(qf_check_tensor(n->q_scale, a->q_scale, QF_F32, d));
    QF_CHECK(qf_numel(a->q_scale) == 1, QKVFUSE_ERROR_SHAPE,
             "%s: expected 1 element ([1] or a scalar: one scale for the tensor); got shape %s", n->q_scale,
             qf_shape_str(a->q_scale, sh, sizeof sh));
    QF_FORWARD(vector_view(n->q_scale, "[1]", a->q_scale, 1, p, &p->q_scale.data, &p->q_scale));
  }
  if (a->k_out)
    QF_FORWARD(mat_arg(n->k_out, a->k_out, out_dtypes, "[T, Nkv*D]", p->T, p->Nkv * p->D, plan, &p->k_out));
  if (a->v_out)
    QF_FORWARD(mat_arg(n->v_out, a->v_out, out_dtypes, "[T, Nkv*D]", p->T, p->Nkv * p->D, plan, &p->v_out));
  if (call && call->q_copy) {
    qf_mat qc;
    QF_FORWARD(mat_arg(n->q_copy, call->q_copy, out_dtypes, "[T, Nq*D]", p->T, p->Nq * p->D, plan, &qc));
    QF_CHECK(qc.dtype == p->q_out.dtype, QKVFUSE_ERROR_DTYPE, "%s: dtype must equal %s's (%s); got %s", n->q_copy,
             n->q_out, qkvfuse_dtype_name(p->q_out.dtype), qkvfuse_dtype_name(qc.dtype));
    if (!same_view(&qc, &p->q_out, (uintptr_t)p->q_out.data)) p->q_copy = qc;
  }

  /* caches */
  const int use_cache = d->cache_layout != QKVFUSE_CACHE_NONE;
  const char *why_cache = use_cache ? "with a cache layout" : "with cache_layout none";
  QF_FORWARD(require(n->k_cache, a->k_cache, use_cache, cite(n, why_cache)));
  QF_FORWARD(require(n->v_cache, a->v_cache, use_cache, cite(n, why_cache)));
  /* a cache row per token: slot_mapping, or the four tensors of a page table */
  const int page_table = d->cache_addressing == QKVFUSE_ADDRESS_PAGE_TABLE; /* the plan allows it with a cache only */
  QF_FORWARD(require(n->slot_mapping, a->slot_mapping, use_cache && !page_table,
                     cite(n, page_table ? "with desc.cache_addressing page_table (kv_indptr, kv_indices, "
                                          "batch_indices and kv_positions address the cache)"
                                        : why_cache)));
  const qkvfuse_tensor *pt_args[4] = {a->kv_indptr, a->kv_indices, a->batch_indices, a->kv_positions};
  const char *pt_names[4] = {n->kv_indptr, n->kv_indices, n->batch_indices, n->kv_positions};
  for (int i = 0; i < 4; i++)
    QF_FORWARD(require(pt_names[i], pt_args[i], page_table,
                       cite(n, page_table ? "with desc.cache_addressing page_table"
                                          : "unless desc.cache_addressing is page_table")));
  QF_FORWARD(require(n->k_scale, a->k_scale, d->k_quant != QKVFUSE_QUANT_NONE,
                     cite(n, d->k_quant != QKVFUSE_QUANT_NONE ? "with k_quant set" : "with k_quant none")));
  QF_FORWARD(require(n->v_scale, a->v_scale, d->v_quant != QKVFUSE_QUANT_NONE,
                     cite(n, d->v_quant != QKVFUSE_QUANT_NONE ? "with v_quant set" : "with v_quant none")));
  QF_FORWARD(require(n->k_offset, a->k_offset, d->k_quant == QKVFUSE_QUANT_INT8_ASYM,
                     cite(n, d->k_quant == QKVFUSE_QUANT_INT8_ASYM ? "with k_quant int8_asym" : "unless k_quant is int8_asym")));
  QF_FORWARD(require(n->v_offset, a->v_offset, d->v_quant == QKVFUSE_QUANT_INT8_ASYM,
                     cite(n, d->v_quant == QKVFUSE_QUANT_INT8_ASYM ? "with v_quant int8_asym" : "unless v_quant is int8_asym")));
  if (use_cache) {
    QF_FORWARD(cache_arg(n->k_cache, a->k_cache, d->k_quant, plan, p, &p->k_cache));
    if (d->cache_layout == QKVFUSE_CACHE_CONTIGUOUS)
      QF_CHECK(p->B <= p->k_cache.blocks && p->S <= p->k_cache.block_size, QKVFUSE_ERROR_SHAPE,
               "%s: contiguous layout needs batch >= B = %lld and max_seq >= S = %lld; got [%lld, %lld, ...]",
               n->k_cache, (long long)p->B, (long long)p->S, (long long)p->k_cache.blocks,
               (long long)p->k_cache.block_size);
    QF_FORWARD(cache_arg(n->v_cache, a->v_cache, d->v_quant, plan, p, &p->v_cache));
    QF_CHECK(p->v_cache.blocks == p->k_cache.blocks && p->v_cache.block_size == p->k_cache.block_size,
             QKVFUSE_ERROR_SHAPE, "%s: blocks and block_size must match %s's (%lld, %lld); got (%lld, %lld)",
             n->v_cache, n->k_cache, (long long)p->k_cache.blocks, (long long)p->k_cache.block_size,
             (long long)p->v_cache.blocks, (long long)p->v_cache.block_size);
    if (page_table) {
      QF_FORWARD(page_table_args(n, a, p));
    } else if (d->cache_layout == QKVFUSE_CACHE_CONTIGUOUS) {
      QF_FORWARD(vec_arg(n->slot_mapping, a->slot_mapping, QF_INDICES, "[B] (contiguous layout)", p->B, p,
                         &p->slot_mapping));
    } else {
      QF_FORWARD(vec_arg(n->slot_mapping, a->slot_mapping, QF_INDICES, "[T]", p->T, p, &p->slot_mapping));
    }
    if (a->k_scale) QF_FORWARD(scale_arg(n->k_scale, a->k_scale, p, 0, &p->k_scale));
    if (a->v_scale) QF_FORWARD(scale_arg(n->v_scale, a->v_scale, p, 0, &p->v_scale));
    if (a->k_offset) QF_FORWARD(scale_arg(n->k_offset, a->k_offset, p, p->k_scale.n, &p->k_offset));
    if (a->v_offset) QF_FORWARD(scale_arg(n->v_offset, a->v_offset, p, p->v_scale.n, &p->v_offset));
    p->k_scale_group = scale_group(p, p->k_scale.n);
    p->v_scale_group = scale_group(p, p->v_scale.n);
  }

  if (a->error_flags)
    QF_CHECK((uintptr_t)a->error_flags % 4 == 0, QKVFUSE_ERROR_ALIGNMENT, "%s: must be 4-byte aligned; got address %p",
             n->error_flags, (void *)a->error_flags);

  QF_FORWARD(check_overlaps(p, a, n));
  /* T = 0 reads no data (SPEC: it does nothing), on every device; strided
   * vectors are read once gathered (qf_resolve_gather) */
  if (d->device_type == QKVFUSE_DEVICE_CPU && p->T > 0 && !p->ngather) QF_FORWARD(check_data(p, n));
  return QKVFUSE_SUCCESS;
}

/* Element i (row-major) of tensor t, as an element offset. */
static int64_t elem_offset(const qkvfuse_tensor *t, int64_t i) {
  int64_t off = 0;
  for (int k = t->ndim - 1; k >= 0; k--) {
    const int64_t n = t->shape[k];
    off += (i % n) * t->strides[k];
    i /= n;
  }
  return off;
}

qkvfuse_status qf_resolve_gather(qf_problem *p, qf_gather_buf *buf) {
  int64_t at = 0;
  for (int g = 0; g < p->ngather; g++) {
    const qkvfuse_tensor *t = p->gather[g].t;
    const size_t es = qkvfuse_dtype_size(t->dtype);
    const int64_t n = qf_numel(t);
    unsigned char *dst = buf->bytes + at;
    const char *src = (const char *)t->data;
    for (int64_t i = 0; i < n; i++) memcpy(dst + (size_t)i * es, src + elem_offset(t, i) * (int64_t)es, es);
    *p->gather[g].dst = dst;
    at += ((int64_t)((size_t)n * es) + 63) / 64 * 64;
  }
  if (p->T > 0) QF_FORWARD(check_data(p, p->names));
  return QKVFUSE_SUCCESS;
}

qkvfuse_status qf_resolve(const qkvfuse_plan *plan, const qkvfuse_args *a, qf_problem *p) {
  QF_FORWARD(qf_resolve_call(plan, a, NULL, p));
  /* this entry point's callers (the benchmark's unfused chain, the fuzz
     target's validation) read the vectors in place */
  char st[128];
  QF_CHECK(p->ngather == 0, QKVFUSE_ERROR_STRIDE, "%s: strided (strides %s); give contiguous vectors here",
           p->ngather ? p->gather[0].name : "", p->ngather ? qf_strides_str(p->gather[0].t, st, sizeof st) : "");
  return QKVFUSE_SUCCESS;
}
