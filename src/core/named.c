/* The three named operators of SPEC.md: each maps the seed's own arguments
 * onto a descriptor and the core args, plans on the stack (no allocation) and
 * runs on the device of its input tensor. */
#include <math.h>
#include <string.h>

#include "core/backends.h"
#include "core/error.h"
#include "core/plan.h"
#include "core/tensor.h"

/* A descriptor for the device of tensor t (AUTO backend). */
static qkvfuse_status desc_for(const char *name, const qkvfuse_tensor *t, qkvfuse_desc *d) {
  QF_CHECK(t != NULL, QKVFUSE_ERROR_NULL_POINTER, "%s: required, got NULL", name);
  const qkvfuse_desc init = QKVFUSE_DESC_INIT;
  *d = init;
  d->device_type = t->device_type;
  d->device_id = t->device_id;
  return QKVFUSE_SUCCESS;
}

static qkvfuse_status eps_arg(const char *name, double eps, qkvfuse_desc *d) {
  QF_CHECK(isfinite(eps) && eps > 0.0 && eps < 1e30, QKVFUSE_ERROR_INVALID_VALUE,
           "%s: must be finite and > 0; got %g", name, eps);
  d->eps = (float)eps;
  return QKVFUSE_SUCCESS;
}

/* Quantization mode implied by a cache's dtype and whether an offset is given
 * (the CANN operators have no mode argument). */
static qkvfuse_quant_mode quant_for_cache(const qkvfuse_tensor *cache, const qkvfuse_tensor *offset) {
  if (cache == NULL) return QKVFUSE_QUANT_NONE;
  if (cache->dtype == QKVFUSE_DTYPE_INT8) return offset ? QKVFUSE_QUANT_INT8_ASYM : QKVFUSE_QUANT_INT8_SYM;
  if (cache->dtype == QKVFUSE_DTYPE_FLOAT8_E4M3FN) return QKVFUSE_QUANT_FP8_E4M3;
  return QKVFUSE_QUANT_NONE;
}

/* a * b == c for a, b >= 0, without forming an overflowing product. */
static int product_is(int64_t a, int64_t b, int64_t c) {
  if (a == 0 || b == 0) return c == 0;
  return a <= INT64_MAX / b && a * b == c;
}

static int str_is(const char *s, const char *a) { return s != NULL && strcmp(s, a) == 0; }

/* Plan on the stack, run. */
static qkvfuse_status plan_and_run(const qkvfuse_desc *d, const qkvfuse_args *a, void *stream) {
  qkvfuse_plan plan;
  QF_FORWARD(qf_plan_init(&plan, d));
  qkvfuse_status s = qf_plan_run(&plan, a, stream);
  qf_plan_release(&plan);
  return s;
}

/* Run, then copy q_out into q_copy (validated like an output of the call
 * before anything runs). */
static qkvfuse_status run_then_copy_q(const qkvfuse_plan *plan, const qkvfuse_args *a, const qkvfuse_tensor *q_copy,
                                      void *stream) {
  qf_problem p;
  QF_FORWARD(qf_resolve(plan, a, &p));
  qf_mat q2;
  QF_FORWARD(qf_check_tensor("q_out_before_quant", q_copy, QF_FLOATS, &plan->desc));
  QF_FORWARD(qf_view_mat("q_out_before_quant", "[T, Nq*D]", q_copy, p.T, p.Nq * p.D, &q2));
  QF_CHECK(q2.dtype == p.q_out.dtype, QKVFUSE_ERROR_DTYPE, "q_out_before_quant: dtype must equal q_out's (%s); got %s",
           qkvfuse_dtype_name(p.q_out.dtype), qkvfuse_dtype_name(q2.dtype));
  const int same = q2.data == p.q_out.data && (p.T <= 1 || q2.ld == p.q_out.ld);
  if (!same) {
    const qf_span s2 = qf_span_of_mat("q_out_before_quant", &q2);
    const qf_span others[] = {qf_span_of_mat("qkv", &p.qkv), qf_span_of_mat("q_out", &p.q_out),
                              qf_span_of_mat("k_out_before_quant", &p.k_out),
                              qf_span_of_mat("v_out_before_quant", &p.v_out), qf_span_of_tensor("k_cache", a->k_cache),
                              qf_span_of_tensor("v_cache", a->v_cache), qf_span_of_mat("cos", &p.cos),
                              qf_span_of_mat("sin", &p.sin), qf_span_of_vec("index", &p.slot_mapping)};
    for (size_t i = 0; i < sizeof others / sizeof others[0]; i++)
      QF_CHECK(!qf_spans_overlap(&s2, &others[i]), QKVFUSE_ERROR_OVERLAP, "q_out_before_quant: overlaps %s",
               others[i].name);
  }
  if (p.T == 0) return QKVFUSE_SUCCESS;
  QF_FORWARD(plan->run(plan, &p, stream));
  return same ? QKVFUSE_SUCCESS : qf_copy_rows(plan, &q2, &p.q_out, stream);
}

qkvfuse_status qkvfuse_split_qkv_rmsnorm_rope(const qkvfuse_tensor *input, const qkvfuse_tensor *q_weight,
                                              const qkvfuse_tensor *k_weight, int64_t q_hidden_size,
                                              int64_t kv_hidden_size, int64_t head_dim, double eps,
                                              const qkvfuse_tensor *cos_sin_cache, const qkvfuse_tensor *positions,
                                              int64_t rope_dim, const qkvfuse_tensor *q_bias,
                                              const qkvfuse_tensor *k_bias, int is_neox, const qkvfuse_tensor *q_out,
                                              const qkvfuse_tensor *k_out, const qkvfuse_tensor *v_out,
                                              uint32_t *error_flags, void *stream) {
  qf_clear_error();
  qkvfuse_desc d;
  QF_FORWARD(desc_for("input", input, &d));
  QF_CHECK(head_dim > 0, QKVFUSE_ERROR_INVALID_VALUE, "head_dim: must be > 0; got %lld", (long long)head_dim);
  QF_CHECK(q_hidden_size > 0 && q_hidden_size % head_dim == 0, QKVFUSE_ERROR_INVALID_VALUE,
           "q_hidden_size: must be a positive multiple of head_dim = %lld; got %lld", (long long)head_dim,
           (long long)q_hidden_size);
  QF_CHECK(kv_hidden_size > 0 && kv_hidden_size % head_dim == 0, QKVFUSE_ERROR_INVALID_VALUE,
           "kv_hidden_size: must be a positive multiple of head_dim = %lld; got %lld", (long long)head_dim,
           (long long)kv_hidden_size);
  QF_CHECK(rope_dim == 0 || (rope_dim >= 2 && rope_dim <= head_dim && rope_dim % 2 == 0), QKVFUSE_ERROR_INVALID_VALUE,
           "rope_dim: must be 0 (= head_dim) or even in [2, head_dim = %lld]; got %lld", (long long)head_dim,
           (long long)rope_dim);
  QF_CHECK(is_neox == 0 || is_neox == 1, QKVFUSE_ERROR_INVALID_VALUE, "is_neox: must be 0 or 1; got %d", is_neox);
  QF_CHECK((q_bias == NULL) == (k_bias == NULL), QKVFUSE_ERROR_NULL_POINTER,
           "%s: q_bias and k_bias are given together or not at all", q_bias ? "k_bias" : "q_bias");
  QF_CHECK(k_out != NULL, QKVFUSE_ERROR_NULL_POINTER, "k_out: required, got NULL");
  QF_CHECK(v_out != NULL, QKVFUSE_ERROR_NULL_POINTER, "v_out: required, got NULL");
  QF_FORWARD(eps_arg("eps", eps, &d));
  d.num_q_heads = q_hidden_size / head_dim;
  d.num_kv_heads = kv_hidden_size / head_dim;
  d.head_dim = head_dim;
  d.rotary_dim = rope_dim ? rope_dim : head_dim;
  d.q_norm = d.k_norm = 1;
  d.rope_source = QKVFUSE_ROPE_COS_SIN_CACHE;
  d.rope_style = is_neox ? QKVFUSE_ROPE_NEOX : QKVFUSE_ROPE_INTERLEAVED;

  qkvfuse_args a = QKVFUSE_ARGS_INIT;
  a.qkv = input;
  a.q_gamma = q_weight;
  a.k_gamma = k_weight;
  a.q_beta = q_bias;
  a.k_beta = k_bias;
  a.cos_sin_cache = cos_sin_cache;
  a.positions = positions;
  a.q_out = q_out;
  a.k_out = k_out;
  a.v_out = v_out;
  a.error_flags = error_flags;
  return plan_and_run(&d, &a, stream);
}

qkvfuse_status qkvfuse_qkv_rmsnorm_rope_cache(
    const qkvfuse_tensor *qkv, const qkvfuse_tensor *q_gamma, const qkvfuse_tensor *k_gamma,
    const qkvfuse_tensor *cos, const qkvfuse_tensor *sin, const qkvfuse_tensor *index, const qkvfuse_tensor *q_out,
    const qkvfuse_tensor *k_cache, const qkvfuse_tensor *v_cache, const qkvfuse_tensor *k_scale,
    const qkvfuse_tensor *v_scale, const qkvfuse_tensor *k_offset, const qkvfuse_tensor *v_offset,
    const qkvfuse_tensor *q_out_before_quant, const qkvfuse_tensor *k_out_before_quant,
    const qkvfuse_tensor *v_out_before_quant, const int64_t qkv_size[4], const int64_t head_nums[3], double epsilon,
    const char *cache_mode, int is_output_qkv, uint32_t *error_flags, void *stream) {
  qf_clear_error();
  qkvfuse_desc d;
  QF_FORWARD(desc_for("qkv", qkv, &d));
  QF_CHECK(qkv_size != NULL, QKVFUSE_ERROR_NULL_POINTER, "qkv_size: required {B, S, N, D}, got NULL");
  QF_CHECK(head_nums != NULL, QKVFUSE_ERROR_NULL_POINTER, "head_nums: required {Nq, Nk, Nv}, got NULL");
  const int64_t B = qkv_size[0], S = qkv_size[1], N = qkv_size[2], D = qkv_size[3];
  QF_CHECK(B >= 0 && S >= 0 && N > 0 && D > 0, QKVFUSE_ERROR_INVALID_VALUE,
           "qkv_size: {B, S, N, D} must be >= 0, >= 0, > 0, > 0; got {%lld, %lld, %lld, %lld}", (long long)B,
           (long long)S, (long long)N, (long long)D);
  QF_CHECK(head_nums[0] > 0 && head_nums[1] > 0 && head_nums[1] == head_nums[2], QKVFUSE_ERROR_INVALID_VALUE,
           "head_nums: {Nq, Nk, Nv} must be positive with Nk = Nv; got {%lld, %lld, %lld}", (long long)head_nums[0],
           (long long)head_nums[1], (long long)head_nums[2]);
  /* the sum and the products below are formed without overflow: the sizes are the caller's */
  QF_CHECK(head_nums[0] <= N && head_nums[1] <= N - head_nums[0] && head_nums[2] == N - head_nums[0] - head_nums[1],
           QKVFUSE_ERROR_INVALID_VALUE, "head_nums: Nq + Nk + Nv must equal qkv_size's N = %lld; got {%lld, %lld, %lld}",
           (long long)N, (long long)head_nums[0], (long long)head_nums[1], (long long)head_nums[2]);
  QF_CHECK(qkv->ndim == 2 && product_is(B, S, qkv->shape[0]) && product_is(N, D, qkv->shape[1]), QKVFUSE_ERROR_SHAPE,
           "qkv: expected [B*S, N*D] = [%lld*%lld, %lld*%lld] from qkv_size; got ndim %d [%lld, %lld]", (long long)B,
           (long long)S, (long long)N, (long long)D, (int)qkv->ndim, (long long)(qkv->ndim > 0 ? qkv->shape[0] : 0),
           (long long)(qkv->ndim > 1 ? qkv->shape[1] : 0));
  QF_CHECK(is_output_qkv == 0 || is_output_qkv == 1, QKVFUSE_ERROR_INVALID_VALUE,
           "is_output_qkv: must be 0 or 1; got %d", is_output_qkv);
  if (cache_mode == NULL || str_is(cache_mode, "PA_NZ"))
    d.cache_layout = QKVFUSE_CACHE_NZ;
  else if (str_is(cache_mode, "PA_BNSD"))
    d.cache_layout = QKVFUSE_CACHE_PAGED_HND;
  else if (str_is(cache_mode, "PA") || str_is(cache_mode, "PA_BSND"))
    d.cache_layout = QKVFUSE_CACHE_PAGED;
  else
    return qf_fail(QKVFUSE_ERROR_INVALID_VALUE, "cache_mode: expected \"PA_NZ\", \"PA_BNSD\", \"PA\" or \"PA_BSND\"; got \"%s\"",
                   cache_mode);
  QF_FORWARD(eps_arg("epsilon", epsilon, &d));
  d.num_q_heads = head_nums[0];
  d.num_kv_heads = head_nums[1];
  d.head_dim = D;
  d.rotary_dim = D;
  d.q_norm = d.k_norm = 1;
  d.rope_source = QKVFUSE_ROPE_COS_SIN;
  d.rope_style = QKVFUSE_ROPE_NEOX;
  d.k_quant = quant_for_cache(k_cache, k_offset);
  d.v_quant = quant_for_cache(v_cache, v_offset);

  qkvfuse_args a = QKVFUSE_ARGS_INIT;
  a.qkv = qkv;
  a.q_gamma = q_gamma;
  a.k_gamma = k_gamma;
  a.cos = cos;
  a.sin = sin;
  a.slot_mapping = index;
  a.q_out = q_out;
  a.k_cache = k_cache;
  a.v_cache = v_cache;
  a.k_scale = k_scale;
  a.v_scale = v_scale;
  a.k_offset = k_offset;
  a.v_offset = v_offset;
  a.error_flags = error_flags;
  if (!is_output_qkv) return plan_and_run(&d, &a, stream);

  /* is_output_qkv: k and v before quantization are the core's k_out / v_out;
   * q is never quantized, so q_out_before_quant is a copy of q_out. */
  QF_CHECK(q_out_before_quant != NULL, QKVFUSE_ERROR_NULL_POINTER,
           "q_out_before_quant: required with is_output_qkv = 1, got NULL");
  QF_CHECK(k_out_before_quant != NULL, QKVFUSE_ERROR_NULL_POINTER,
           "k_out_before_quant: required with is_output_qkv = 1, got NULL");
  QF_CHECK(v_out_before_quant != NULL, QKVFUSE_ERROR_NULL_POINTER,
           "v_out_before_quant: required with is_output_qkv = 1, got NULL");
  a.k_out = k_out_before_quant;
  a.v_out = v_out_before_quant;
  qkvfuse_plan plan;
  QF_FORWARD(qf_plan_init(&plan, &d));
  qkvfuse_status s = run_then_copy_q(&plan, &a, q_out_before_quant, stream);
  qf_plan_release(&plan);
  return s;
}

qkvfuse_status qkvfuse_dequant_rope_quant_kvcache(
    const qkvfuse_tensor *x, const qkvfuse_tensor *cos, const qkvfuse_tensor *sin, const qkvfuse_tensor *k_cache,
    const qkvfuse_tensor *v_cache, const qkvfuse_tensor *indices, const qkvfuse_tensor *scale_k,
    const qkvfuse_tensor *scale_v, const qkvfuse_tensor *offset_k, const qkvfuse_tensor *offset_v,
    const qkvfuse_tensor *weight_scale, const qkvfuse_tensor *activation_scale, const qkvfuse_tensor *bias,
    const int64_t size_splits[3], const char *quant_mode, const char *layout, int kv_output, const char *cache_mode,
    const qkvfuse_tensor *q_out, const qkvfuse_tensor *k_out, const qkvfuse_tensor *v_out, uint32_t *error_flags,
    void *stream) {
  qf_clear_error();
  qkvfuse_desc d;
  QF_FORWARD(desc_for("x", x, &d));
  QF_CHECK(k_cache != NULL, QKVFUSE_ERROR_NULL_POINTER, "k_cache: required, got NULL");
  QF_CHECK(k_cache->ndim == 4 && k_cache->shape[3] > 0, QKVFUSE_ERROR_SHAPE,
           "k_cache: expected [C1, C2, Nkv, D] (D is read from it); got ndim %d", (int)k_cache->ndim);
  const int64_t D = k_cache->shape[3];
  QF_CHECK(size_splits != NULL, QKVFUSE_ERROR_NULL_POINTER, "size_splits: required {Nq*D, Nkv*D, Nkv*D}, got NULL");
  QF_CHECK(size_splits[0] > 0 && size_splits[0] % D == 0 && size_splits[1] > 0 && size_splits[1] % D == 0 &&
               size_splits[2] == size_splits[1],
           QKVFUSE_ERROR_INVALID_VALUE,
           "size_splits: expected {Nq*D, Nkv*D, Nkv*D} with D = %lld (k_cache's last dim); got {%lld, %lld, %lld}",
           (long long)D, (long long)size_splits[0], (long long)size_splits[1], (long long)size_splits[2]);
  QF_CHECK(quant_mode == NULL || str_is(quant_mode, "static"), QKVFUSE_ERROR_INVALID_VALUE,
           "quant_mode: expected \"static\"; got \"%s\"", quant_mode);
  QF_CHECK(layout == NULL || str_is(layout, "BSND"), QKVFUSE_ERROR_INVALID_VALUE,
           "layout: expected \"BSND\"; got \"%s\"", layout);
  QF_CHECK(kv_output == 0 || kv_output == 1, QKVFUSE_ERROR_INVALID_VALUE, "kv_output: must be 0 or 1; got %d",
           kv_output);
  if (cache_mode == NULL || str_is(cache_mode, "contiguous"))
    d.cache_layout = QKVFUSE_CACHE_CONTIGUOUS;
  else if (str_is(cache_mode, "page"))
    d.cache_layout = QKVFUSE_CACHE_PAGED;
  else
    return qf_fail(QKVFUSE_ERROR_INVALID_VALUE, "cache_mode: expected \"contiguous\" or \"page\"; got \"%s\"",
                   cache_mode);
  if (kv_output) {
    QF_CHECK(k_out != NULL, QKVFUSE_ERROR_NULL_POINTER, "k_out: required with kv_output = 1, got NULL");
    QF_CHECK(v_out != NULL, QKVFUSE_ERROR_NULL_POINTER, "v_out: required with kv_output = 1, got NULL");
  }
  d.num_q_heads = size_splits[0] / D;
  d.num_kv_heads = size_splits[1] / D;
  d.head_dim = D;
  d.rotary_dim = D;
  d.rope_source = QKVFUSE_ROPE_COS_SIN;
  d.rope_style = QKVFUSE_ROPE_NEOX;
  d.k_quant = quant_for_cache(k_cache, offset_k);
  d.v_quant = quant_for_cache(v_cache, offset_v);

  qkvfuse_args a = QKVFUSE_ARGS_INIT;
  a.qkv = x;
  a.weight_scale = weight_scale;
  a.act_scale = activation_scale;
  a.bias = bias;
  a.cos = cos;
  a.sin = sin;
  a.slot_mapping = indices;
  a.k_scale = scale_k;
  a.v_scale = scale_v;
  a.k_offset = offset_k;
  a.v_offset = offset_v;
  a.q_out = q_out;
  a.k_out = kv_output ? k_out : NULL;
  a.v_out = kv_output ? v_out : NULL;
  a.k_cache = k_cache;
  a.v_cache = v_cache;
  a.error_flags = error_flags;
  return plan_and_run(&d, &a, stream);
}
