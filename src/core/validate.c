/* Validation of a call, in one place, before any backend runs.
 *
 * qf_resolve checks every tensor of qkvfuse_args against the plan (presence,
 * dtype, shape, strides, alignment, device, overlap) and, for CPU plans, the
 * data-dependent values (positions, slots, scales), then reduces the tensors to
 * the views of problem.h. It writes nothing but the problem struct, so a
 * failing call leaves every output and cache byte as it was. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/dtype.h"
#include "core/error.h"
#include "core/plan.h"
#include "core/tensor.h"

/* An optional tensor that the configuration requires (need = 1) or forbids
 * (need = 0): return its check status. */
static qkvfuse_status require(const char *name, const qkvfuse_tensor *t, int need, const char *why) {
  if (need) QF_CHECK(t != NULL, QKVFUSE_ERROR_NULL_POINTER, "%s: required %s; got NULL", name, why);
  else
    QF_CHECK(t == NULL, QKVFUSE_ERROR_INVALID_VALUE, "%s: not used %s; pass NULL", name, why);
  return QKVFUSE_SUCCESS;
}

static qkvfuse_status vec_arg(const char *name, const qkvfuse_tensor *t, unsigned dtypes, const char *what, int64_t n,
                              const qkvfuse_desc *d, qf_vec *out) {
  QF_FORWARD(qf_check_tensor(name, t, dtypes, d));
  return qf_view_vec(name, what, t, n, out);
}

static qkvfuse_status mat_arg(const char *name, const qkvfuse_tensor *t, unsigned dtypes, const char *what,
                              int64_t rows, int64_t cols, const qkvfuse_desc *d, qf_mat *out) {
  QF_FORWARD(qf_check_tensor(name, t, dtypes, d));
  return qf_view_mat(name, what, t, rows, cols, out);
}

static unsigned cache_dtypes(qkvfuse_quant_mode m) {
  switch (m) {
    case QKVFUSE_QUANT_NONE: return QF_FLOATS;
    case QKVFUSE_QUANT_INT8_SYM:
    case QKVFUSE_QUANT_INT8_ASYM: return QF_I8;
    case QKVFUSE_QUANT_FP8_E4M3: return QF_FP8;
  }
  return 0;
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
                                const qf_problem *p, qf_cache *out) {
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
  QF_CHECK(t->shape[3] == 1 || t->strides[3] == 1, QKVFUSE_ERROR_STRIDE,
           "%s: the last dim must be contiguous (stride 1); got stride %lld", name, (long long)t->strides[3]);
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
  return QKVFUSE_SUCCESS;
}

/* Scale (and offset) of one quantized cache. */
static qkvfuse_status scale_arg(const char *name, const qkvfuse_tensor *t, const qf_problem *p, int64_t n_expect,
                                qf_vec *out) {
  QF_FORWARD(qf_check_tensor(name, t, QF_F32, p->desc));
  int64_t n = qf_numel(t);
  if (n_expect == 0) {
    char what[64];
    snprintf(what, sizeof what, "1 (per tensor) or Nkv*D = %lld (per channel)", (long long)(p->Nkv * p->D));
    QF_CHECK(n == 1 || n == p->Nkv * p->D, QKVFUSE_ERROR_SHAPE, "%s: expected %s elements; got %lld", name, what,
             (long long)n);
    return qf_view_vec(name, what, t, n, out);
  }
  return qf_view_vec(name, "the scale's element count", t, n_expect, out);
}

/* ---- overlap ---------------------------------------------------------------- */

static int same_view(const qf_mat *a, const qf_mat *b, uintptr_t b_base) {
  return (uintptr_t)a->data == b_base && a->dtype == b->dtype && (a->rows <= 1 || a->ld == b->ld);
}

static qkvfuse_status check_overlaps(const qf_problem *p, const qkvfuse_args *a) {
  enum { MAX_IN = 20, MAX_OUT = 5 };
  qf_span in[MAX_IN], out[MAX_OUT];
  int nin = 0, nout = 0;
  const int64_t es = (int64_t)qkvfuse_dtype_size(p->qkv.dtype);
  const uintptr_t base = (uintptr_t)p->qkv.data;
  /* qkv as its three column blocks, so q/k outputs may be exactly their own block */
  qf_mat qin = p->qkv, kin = p->qkv, vin = p->qkv;
  qin.cols = p->Nq * p->D;
  kin.cols = p->Nkv * p->D;
  vin.cols = kin.cols;
  if (p->qkv.data) { /* T = 0 may come with NULL data, and NULL + offset is undefined */
    kin.data = (char *)p->qkv.data + qin.cols * es;
    vin.data = (char *)kin.data + kin.cols * es;
  }
  const int q_inplace = same_view(&p->q_out, &qin, base);
  const int k_inplace = p->k_out.data && same_view(&p->k_out, &kin, (uintptr_t)kin.data);
  if (!q_inplace) in[nin++] = qf_span_of_mat("qkv (q columns)", &qin);
  if (!k_inplace) in[nin++] = qf_span_of_mat("qkv (k columns)", &kin);
  in[nin++] = qf_span_of_mat("qkv (v columns)", &vin);
  const qf_vec *vecs[] = {&p->weight_scale, &p->act_scale, &p->bias, &p->q_gamma, &p->k_gamma, &p->q_beta,
                          &p->k_beta, &p->positions, &p->slot_mapping, &p->k_scale, &p->v_scale, &p->k_offset,
                          &p->v_offset};
  const char *vec_names[] = {"weight_scale", "act_scale", "bias", "q_gamma", "k_gamma", "q_beta", "k_beta",
                             "positions", "slot_mapping", "k_scale", "v_scale", "k_offset", "v_offset"};
  for (size_t i = 0; i < sizeof vecs / sizeof vecs[0]; i++) in[nin++] = qf_span_of_vec(vec_names[i], vecs[i]);
  in[nin++] = qf_span_of_mat("cos_sin_cache", &p->cos_sin_cache);
  in[nin++] = qf_span_of_mat("cos", &p->cos);
  in[nin++] = qf_span_of_mat("sin", &p->sin);

  out[nout++] = qf_span_of_mat("q_out", &p->q_out);
  out[nout++] = qf_span_of_mat("k_out", &p->k_out);
  out[nout++] = qf_span_of_mat("v_out", &p->v_out);
  out[nout++] = a->k_cache ? qf_span_of_tensor("k_cache", a->k_cache) : (qf_span){"k_cache", 0, 0, 0, 0};
  out[nout++] = a->v_cache ? qf_span_of_tensor("v_cache", a->v_cache) : (qf_span){"v_cache", 0, 0, 0, 0};

  for (int i = 0; i < nout; i++) {
    for (int j = 0; j < nin; j++)
      QF_CHECK(!qf_spans_overlap(&out[i], &in[j]), QKVFUSE_ERROR_OVERLAP,
               "%s: overlaps the input %s (only q_out/k_out exactly equal to the q/k columns of qkv may alias it)",
               out[i].name, in[j].name);
    for (int j = i + 1; j < nout; j++)
      QF_CHECK(!qf_spans_overlap(&out[i], &out[j]), QKVFUSE_ERROR_OVERLAP, "%s: overlaps the output %s", out[i].name,
               out[j].name);
  }
  return QKVFUSE_SUCCESS;
}

/* ---- data-dependent checks (CPU: before anything is written) ---------------- */

static qkvfuse_status check_data(const qf_problem *p) {
  const qkvfuse_desc *d = p->desc;
  if (d->rope_source == QKVFUSE_ROPE_COS_SIN_CACHE || d->rope_source == QKVFUSE_ROPE_COMPUTED) {
    const int64_t hi = d->rope_source == QKVFUSE_ROPE_COMPUTED ? ((int64_t)1 << 31) : p->cos_sin_cache.rows;
    for (int64_t t = 0; t < p->T; t++) {
      int64_t pos = qf_load_index(p->positions.data, p->positions.dtype, t);
      if (pos < 0 || pos >= hi) {
        if (p->error_flags) *p->error_flags |= QKVFUSE_DATA_ERROR_POSITION;
        return qf_fail(QKVFUSE_ERROR_OUT_OF_RANGE, "positions: positions[%lld] = %lld is outside [0, %lld)%s",
                       (long long)t, (long long)pos, (long long)hi,
                       d->rope_source == QKVFUSE_ROPE_COS_SIN_CACHE ? " (the rows of cos_sin_cache)" : "");
      }
    }
  }
  if (d->cache_layout != QKVFUSE_CACHE_NONE) {
    const qf_vec *sm = &p->slot_mapping;
    const int contiguous = d->cache_layout == QKVFUSE_CACHE_CONTIGUOUS;
    /* contiguous: start index in [0, max_seq - S]; else slot in [0, blocks * block_size) */
    const int64_t hi = contiguous ? p->k_cache.block_size - p->S + 1 : p->k_cache.blocks * p->k_cache.block_size;
    for (int64_t i = 0; i < sm->n; i++) {
      int64_t s = qf_load_index(sm->data, sm->dtype, i);
      if (s != -1 && (s < 0 || s >= hi)) {
        if (p->error_flags) *p->error_flags |= QKVFUSE_DATA_ERROR_SLOT;
        if (contiguous)
          return qf_fail(QKVFUSE_ERROR_OUT_OF_RANGE,
                         "slot_mapping: slot_mapping[%lld] = %lld: a contiguous start index must be -1 or in [0, "
                         "max_seq - S] = [0, %lld]",
                         (long long)i, (long long)s, (long long)(hi - 1));
        return qf_fail(QKVFUSE_ERROR_OUT_OF_RANGE,
                       "slot_mapping: slot_mapping[%lld] = %lld is outside the cache: -1 or [0, blocks*block_size = "
                       "%lld)",
                       (long long)i, (long long)s, (long long)hi);
      }
    }
    const qf_vec *sc[4] = {&p->k_scale, &p->v_scale, &p->k_offset, &p->v_offset};
    const char *names[4] = {"k_scale", "v_scale", "k_offset", "v_offset"};
    for (int k = 0; k < 4; k++) {
      for (int64_t i = 0; sc[k]->data && i < sc[k]->n; i++) {
        float v = ((const float *)sc[k]->data)[i];
        int ok = isfinite(v) && (k >= 2 || v != 0.0f);
        if (!ok) {
          if (p->error_flags) *p->error_flags |= QKVFUSE_DATA_ERROR_SCALE;
          return qf_fail(QKVFUSE_ERROR_BAD_SCALE, "%s: %s[%lld] = %g; must be %s", names[k], names[k], (long long)i,
                         (double)v, k < 2 ? "finite and nonzero" : "finite");
        }
      }
    }
  }
  return QKVFUSE_SUCCESS;
}

/* ---- the whole call ------------------------------------------------------------- */

qkvfuse_status qf_resolve(const qkvfuse_plan *plan, const qkvfuse_args *a, qf_problem *p) {
  QF_CHECK(plan != NULL, QKVFUSE_ERROR_NULL_POINTER, "plan: NULL");
  QF_CHECK(a != NULL, QKVFUSE_ERROR_NULL_POINTER, "args: NULL");
  QF_CHECK(a->struct_size == sizeof(qkvfuse_args) && a->version == QKVFUSE_ARGS_VERSION, QKVFUSE_ERROR_VERSION,
           "args: struct_size/version must be %zu/%d (use QKVFUSE_ARGS_INIT); got %u/%u", sizeof(qkvfuse_args),
           QKVFUSE_ARGS_VERSION, a->struct_size, a->version);
  const qkvfuse_desc *d = &plan->desc;
  memset(p, 0, sizeof *p);
  p->desc = d;
  p->Nq = d->num_q_heads;
  p->Nkv = d->num_kv_heads;
  p->D = d->head_dim;
  p->R = d->rotary_dim;
  p->H = (p->Nq + 2 * p->Nkv) * p->D;
  p->error_flags = a->error_flags;
  char sh[128];

  /* qkv: [T, H] or [B, S, H]; fixes T (and B, S for the contiguous layout) */
  QF_FORWARD(qf_check_tensor("qkv", a->qkv, QF_FLOATS | QF_I32, d));
  const qkvfuse_tensor *x = a->qkv;
  QF_CHECK((x->ndim == 2 || x->ndim == 3) && x->shape[x->ndim - 1] == p->H, QKVFUSE_ERROR_SHAPE,
           "qkv: expected [T, H] or [B, S, H] with H = (Nq + 2*Nkv)*D = %lld; got %s", (long long)p->H,
           qf_shape_str(x, sh, sizeof sh));
  p->T = x->ndim == 2 ? x->shape[0] : x->shape[0] * x->shape[1];
  p->B = x->shape[0];
  p->S = x->ndim == 3 ? x->shape[1] : 1;
  if (d->cache_layout != QKVFUSE_CACHE_CONTIGUOUS) {
    p->B = p->T;
    p->S = 1;
  }
  QF_FORWARD(qf_view_mat("qkv", "[T, H]", x, p->T, p->H, &p->qkv));
  const int int_input = x->dtype == QKVFUSE_DTYPE_INT32;

  /* dequant */
  const char *why_int = int_input ? "for int32 qkv" : "with float qkv (dequant is for int32 input)";
  QF_FORWARD(require("weight_scale", a->weight_scale, int_input, why_int));
  if (!int_input) {
    QF_FORWARD(require("act_scale", a->act_scale, 0, why_int));
    QF_FORWARD(require("bias", a->bias, 0, why_int));
  }
  if (a->weight_scale) QF_FORWARD(vec_arg("weight_scale", a->weight_scale, QF_F32, "[H]", p->H, d, &p->weight_scale));
  if (a->act_scale) QF_FORWARD(vec_arg("act_scale", a->act_scale, QF_F32, "[T]", p->T, d, &p->act_scale));
  if (a->bias) QF_FORWARD(vec_arg("bias", a->bias, QF_FLOATS | QF_I32, "[H]", p->H, d, &p->bias));

  /* RMSNorm */
  QF_FORWARD(require("q_gamma", a->q_gamma, d->q_norm, d->q_norm ? "with desc.q_norm = 1" : "with desc.q_norm = 0"));
  QF_FORWARD(require("k_gamma", a->k_gamma, d->k_norm, d->k_norm ? "with desc.k_norm = 1" : "with desc.k_norm = 0"));
  if (!d->q_norm) QF_FORWARD(require("q_beta", a->q_beta, 0, "with desc.q_norm = 0"));
  if (!d->k_norm) QF_FORWARD(require("k_beta", a->k_beta, 0, "with desc.k_norm = 0"));
  if (a->q_gamma) QF_FORWARD(vec_arg("q_gamma", a->q_gamma, QF_FLOATS, "[D]", p->D, d, &p->q_gamma));
  if (a->k_gamma) QF_FORWARD(vec_arg("k_gamma", a->k_gamma, QF_FLOATS, "[D]", p->D, d, &p->k_gamma));
  if (a->q_beta) QF_FORWARD(vec_arg("q_beta", a->q_beta, QF_FLOATS, "[D]", p->D, d, &p->q_beta));
  if (a->k_beta) QF_FORWARD(vec_arg("k_beta", a->k_beta, QF_FLOATS, "[D]", p->D, d, &p->k_beta));

  /* RoPE */
  const qkvfuse_rope_source src = d->rope_source;
  const int use_pos = src == QKVFUSE_ROPE_COS_SIN_CACHE || src == QKVFUSE_ROPE_COMPUTED;
  QF_FORWARD(require("positions", a->positions, use_pos,
                     use_pos ? "with rope_source cos_sin_cache or computed" : "with this rope_source"));
  QF_FORWARD(require("cos_sin_cache", a->cos_sin_cache, src == QKVFUSE_ROPE_COS_SIN_CACHE,
                     src == QKVFUSE_ROPE_COS_SIN_CACHE ? "with rope_source cos_sin_cache" : "with this rope_source"));
  QF_FORWARD(require("cos", a->cos, src == QKVFUSE_ROPE_COS_SIN,
                     src == QKVFUSE_ROPE_COS_SIN ? "with rope_source cos_sin" : "with this rope_source"));
  QF_FORWARD(require("sin", a->sin, src == QKVFUSE_ROPE_COS_SIN,
                     src == QKVFUSE_ROPE_COS_SIN ? "with rope_source cos_sin" : "with this rope_source"));
  if (a->positions) QF_FORWARD(vec_arg("positions", a->positions, QF_INDICES, "[T]", p->T, d, &p->positions));
  if (a->cos_sin_cache) {
    const qkvfuse_tensor *c = a->cos_sin_cache;
    QF_FORWARD(qf_check_tensor("cos_sin_cache", c, QF_FLOATS, d));
    QF_CHECK(c->ndim == 2 && c->shape[1] == p->R && c->shape[0] >= 1, QKVFUSE_ERROR_SHAPE,
             "cos_sin_cache: expected [max_pos >= 1, R = %lld]; got %s", (long long)p->R,
             qf_shape_str(c, sh, sizeof sh));
    QF_FORWARD(qf_view_mat("cos_sin_cache", "[max_pos, R]", c, c->shape[0], p->R, &p->cos_sin_cache));
  }
  if (a->cos) {
    QF_FORWARD(mat_arg("cos", a->cos, QF_FLOATS, "[T, R]", p->T, p->R, d, &p->cos));
    QF_FORWARD(mat_arg("sin", a->sin, QF_FLOATS, "[T, R]", p->T, p->R, d, &p->sin));
    QF_CHECK(a->sin->dtype == a->cos->dtype, QKVFUSE_ERROR_DTYPE, "sin: dtype must equal cos's (%s); got %s",
             qkvfuse_dtype_name(a->cos->dtype), qkvfuse_dtype_name(a->sin->dtype));
  }
  p->inv_freq = plan->inv_freq;
  p->mscale = plan->mscale;

  /* outputs: qkv's dtype or float32; for int32 qkv float32 or the RoPE table's dtype */
  const qkvfuse_tensor *table = a->cos ? a->cos : a->cos_sin_cache;
  unsigned out_dtypes = QF_F32 | (int_input ? (table ? qf_dtype_bit(table->dtype) : QF_FLOATS) : qf_dtype_bit(x->dtype));
  QF_FORWARD(mat_arg("q_out", a->q_out, out_dtypes, "[T, Nq*D]", p->T, p->Nq * p->D, d, &p->q_out));
  p->io_dtype = p->q_out.dtype;
  if (a->k_out)
    QF_FORWARD(mat_arg("k_out", a->k_out, out_dtypes, "[T, Nkv*D]", p->T, p->Nkv * p->D, d, &p->k_out));
  if (a->v_out)
    QF_FORWARD(mat_arg("v_out", a->v_out, out_dtypes, "[T, Nkv*D]", p->T, p->Nkv * p->D, d, &p->v_out));

  /* caches */
  const int use_cache = d->cache_layout != QKVFUSE_CACHE_NONE;
  const char *why_cache = use_cache ? "with a cache layout" : "with cache_layout none";
  QF_FORWARD(require("k_cache", a->k_cache, use_cache, why_cache));
  QF_FORWARD(require("v_cache", a->v_cache, use_cache, why_cache));
  QF_FORWARD(require("slot_mapping", a->slot_mapping, use_cache, why_cache));
  QF_FORWARD(require("k_scale", a->k_scale, d->k_quant != QKVFUSE_QUANT_NONE,
                     d->k_quant != QKVFUSE_QUANT_NONE ? "with k_quant set" : "with k_quant none"));
  QF_FORWARD(require("v_scale", a->v_scale, d->v_quant != QKVFUSE_QUANT_NONE,
                     d->v_quant != QKVFUSE_QUANT_NONE ? "with v_quant set" : "with v_quant none"));
  QF_FORWARD(require("k_offset", a->k_offset, d->k_quant == QKVFUSE_QUANT_INT8_ASYM,
                     d->k_quant == QKVFUSE_QUANT_INT8_ASYM ? "with k_quant int8_asym" : "unless k_quant is int8_asym"));
  QF_FORWARD(require("v_offset", a->v_offset, d->v_quant == QKVFUSE_QUANT_INT8_ASYM,
                     d->v_quant == QKVFUSE_QUANT_INT8_ASYM ? "with v_quant int8_asym" : "unless v_quant is int8_asym"));
  if (use_cache) {
    QF_FORWARD(cache_arg("k_cache", a->k_cache, d->k_quant, p, &p->k_cache));
    if (d->cache_layout == QKVFUSE_CACHE_CONTIGUOUS)
      QF_CHECK(p->B <= p->k_cache.blocks && p->S <= p->k_cache.block_size, QKVFUSE_ERROR_SHAPE,
               "k_cache: contiguous layout needs batch >= B = %lld and max_seq >= S = %lld; got [%lld, %lld, ...]",
               (long long)p->B, (long long)p->S, (long long)p->k_cache.blocks, (long long)p->k_cache.block_size);
    QF_FORWARD(cache_arg("v_cache", a->v_cache, d->v_quant, p, &p->v_cache));
    QF_CHECK(p->v_cache.blocks == p->k_cache.blocks && p->v_cache.block_size == p->k_cache.block_size,
             QKVFUSE_ERROR_SHAPE,
             "v_cache: blocks and block_size must match k_cache's (%lld, %lld); got (%lld, %lld)",
             (long long)p->k_cache.blocks, (long long)p->k_cache.block_size, (long long)p->v_cache.blocks,
             (long long)p->v_cache.block_size);
    if (d->cache_layout == QKVFUSE_CACHE_CONTIGUOUS) {
      QF_FORWARD(vec_arg("slot_mapping", a->slot_mapping, QF_INDICES, "[B] (contiguous layout)", p->B, d,
                         &p->slot_mapping));
    } else {
      QF_FORWARD(vec_arg("slot_mapping", a->slot_mapping, QF_INDICES, "[T]", p->T, d, &p->slot_mapping));
    }
    if (a->k_scale) QF_FORWARD(scale_arg("k_scale", a->k_scale, p, 0, &p->k_scale));
    if (a->v_scale) QF_FORWARD(scale_arg("v_scale", a->v_scale, p, 0, &p->v_scale));
    if (a->k_offset) QF_FORWARD(scale_arg("k_offset", a->k_offset, p, p->k_scale.n, &p->k_offset));
    if (a->v_offset) QF_FORWARD(scale_arg("v_offset", a->v_offset, p, p->v_scale.n, &p->v_offset));
  }

  if (a->error_flags)
    QF_CHECK((uintptr_t)a->error_flags % 4 == 0, QKVFUSE_ERROR_ALIGNMENT,
             "error_flags: must be 4-byte aligned; got address %p", (void *)a->error_flags);

  QF_FORWARD(check_overlaps(p, a));
  /* T = 0 reads no data (SPEC: it does nothing), on every device */
  if (d->device_type == QKVFUSE_DEVICE_CPU && p->T > 0) QF_FORWARD(check_data(p));
  return QKVFUSE_SUCCESS;
}
