/* SPDX-License-Identifier: Apache-2.0 */
/* The three named operators of SPEC.md: each maps the seed's own arguments
 * onto a descriptor and the core args, plans on the stack (no allocation) and
 * runs on the device of its input tensor. */
#include <float.h>
#include <math.h>
#include <string.h>

#include "core/backends.h"
#include "core/error.h"
#include "core/plan.h"
#include "core/strict.h"
#include "core/tensor.h"

/* Each operator's names for the core's tensors, so that messages cite the
 * caller's own arguments. */
static const qf_names split_names = {"input",     "weight_scale", "act_scale", "bias",     "q_weight",
                                     "k_weight",  "q_bias",       "k_bias",    "positions", "cos_sin_cache",
                                     "cos",       "sin",          "slot_mapping", "k_scale", "v_scale",
                                     "k_offset",  "v_offset",     "q_out",     "k_out",     "v_out",
                                     "k_cache",   "v_cache",      "error_flags", "q_copy",  0,
                                     "q",         "k",            "v",         "q_scale",
                                     "kv_indptr", "kv_indices",   "batch_indices", "kv_positions"};
static const qf_names cache_names = {"qkv",       "weight_scale", "act_scale", "bias",     "q_gamma",
                                     "k_gamma",   "q_beta",       "k_beta",    "positions", "cos_sin_cache",
                                     "cos",       "sin",          "index",     "k_scale",   "v_scale",
                                     "k_offset",  "v_offset",     "q_out",     "k_out_before_quant",
                                     "v_out_before_quant", "k_cache", "v_cache", "error_flags",
                                     "q_out_before_quant", 0, "q", "k", "v", "q_scale",
                                     "kv_indptr", "kv_indices", "batch_indices", "kv_positions"};
static const qf_names dequant_names = {"x",        "weight_scale", "activation_scale", "bias", "q_gamma",
                                       "k_gamma",  "q_beta",       "k_beta",    "positions", "cos_sin_cache",
                                       "cos",      "sin",          "indices",   "scale_k",   "scale_v",
                                       "offset_k", "offset_v",     "q_out",     "k_out",     "v_out",
                                       "k_cache",  "v_cache",      "error_flags", "q_copy",  0,
                                     "q",         "k",            "v",         "q_scale",
                                     "kv_indptr", "kv_indices",   "batch_indices", "kv_positions"};

/* A descriptor for the device of tensor t (AUTO backend). */
static qkvfuse_status desc_for(const char *name, const qkvfuse_tensor *t, qkvfuse_desc *d) {
  QF_CHECK(t != NULL, QKVFUSE_ERROR_NULL_POINTER, "%s: required, got NULL", name);
  const qkvfuse_desc init = QKVFUSE_DESC_INIT;
  *d = init;
  d->device_type = t->device_type;
  d->device_id = t->device_id;
  return QKVFUSE_SUCCESS;
}

/* The options of an _ex call (NULL: QKVFUSE_NAMED_OPTIONS_INIT): the rounding
 * into the descriptor, strict into *strict. */
static qkvfuse_status options_arg(const qkvfuse_named_options *o, qkvfuse_desc *d, int *strict) {
  const qkvfuse_named_options init = QKVFUSE_NAMED_OPTIONS_INIT;
  if (!o) o = &init;
  QF_CHECK(o->struct_size == sizeof *o, QKVFUSE_ERROR_VERSION,
           "options: struct_size must be %zu (start from QKVFUSE_NAMED_OPTIONS_INIT); got %u", sizeof *o,
           o->struct_size);
  QF_CHECK((unsigned)o->rounding < QKVFUSE_ROUNDING_COUNT, QKVFUSE_ERROR_INVALID_VALUE,
           "options.rounding: must be fused (0), unfused_parity (1), ascend_triton (2) or cann (3); got %d",
           (int)o->rounding);
  QF_CHECK(o->strict == 0 || o->strict == 1, QKVFUSE_ERROR_INVALID_VALUE, "options.strict: must be 0 or 1; got %d",
           (int)o->strict);
  d->rounding = o->rounding;
  *strict = o->strict;
  return QKVFUSE_SUCCESS;
}

/* The norm computes in float32: eps must stay positive and finite there. */
static qkvfuse_status eps_arg(const char *name, double eps, qkvfuse_desc *d) {
  QF_CHECK(isfinite(eps) && eps > 0.0, QKVFUSE_ERROR_INVALID_VALUE, "%s: must be finite and > 0; got %g", name, eps);
  const float f = (float)eps;
  QF_CHECK(f > 0.0f && isfinite(f), QKVFUSE_ERROR_INVALID_VALUE,
           "%s: %g rounds to %g in float32, the norm's arithmetic; must be in [%g, %g]", name, eps, (double)f,
           (double)FLT_TRUE_MIN, (double)FLT_MAX);
  d->eps = f;
  return QKVFUSE_SUCCESS;
}

/* The head geometry an operator derives from its arguments, checked under the
 * caller's names before the descriptor's own checks (which cite desc fields). */
static qkvfuse_status heads_arg(int64_t nq, int64_t nkv, int64_t D, const char *nq_name, const char *nkv_name,
                                const char *d_name, qkvfuse_desc *d) {
  const int64_t max_heads = (int64_t)1 << 24;
  QF_CHECK(D >= QF_MIN_HEAD_DIM && D <= QF_MAX_HEAD_DIM && D % 2 == 0, QKVFUSE_ERROR_INVALID_VALUE,
           "%s: the head dim must be even and in [%d, %d]; got %lld", d_name, QF_MIN_HEAD_DIM, QF_MAX_HEAD_DIM,
           (long long)D);
  QF_CHECK(nq >= 1 && nq <= max_heads, QKVFUSE_ERROR_INVALID_VALUE, "%s: must give 1 to 2^24 query heads; got %lld",
           nq_name, (long long)nq);
  QF_CHECK(nkv >= 1 && nkv <= max_heads, QKVFUSE_ERROR_INVALID_VALUE,
           "%s: must give 1 to 2^24 key/value heads; got %lld", nkv_name, (long long)nkv);
  d->num_q_heads = nq;
  d->num_kv_heads = nkv;
  d->head_dim = D;
  return QKVFUSE_SUCCESS;
}

/* The quantization a CANN operator implies by its cache's dtype and whether
 * an offset is given (they have no mode argument), with the scale and offset
 * that mode needs. */
static qkvfuse_status quant_arg(const char *cache_name, const qkvfuse_tensor *cache, const char *scale_name,
                                const qkvfuse_tensor *scale, const char *offset_name, const qkvfuse_tensor *offset,
                                qkvfuse_quant_mode *mode) {
  QF_CHECK(cache != NULL, QKVFUSE_ERROR_NULL_POINTER, "%s: required, got NULL", cache_name);
  const char *dt = qkvfuse_dtype_name(cache->dtype);
  switch (cache->dtype) {
    case QKVFUSE_DTYPE_INT8:
      QF_CHECK(scale != NULL, QKVFUSE_ERROR_NULL_POINTER, "%s: required with an int8 %s; got NULL", scale_name,
               cache_name);
      *mode = offset ? QKVFUSE_QUANT_INT8_ASYM : QKVFUSE_QUANT_INT8_SYM;
      return QKVFUSE_SUCCESS;
    case QKVFUSE_DTYPE_FLOAT8_E4M3FN:
      QF_CHECK(scale != NULL, QKVFUSE_ERROR_NULL_POINTER, "%s: required with a float8_e4m3fn %s; got NULL",
               scale_name, cache_name);
      QF_CHECK(offset == NULL, QKVFUSE_ERROR_INVALID_VALUE,
               "%s: not used with a float8_e4m3fn %s (e4m3 quantization is symmetric); pass NULL", offset_name,
               cache_name);
      *mode = QKVFUSE_QUANT_FP8_E4M3;
      return QKVFUSE_SUCCESS;
    case QKVFUSE_DTYPE_FLOAT32:
    case QKVFUSE_DTYPE_FLOAT16:
    case QKVFUSE_DTYPE_BFLOAT16:
      QF_CHECK(scale == NULL, QKVFUSE_ERROR_INVALID_VALUE,
               "%s: not used with a %s %s (not quantized); pass NULL, or give an int8 %s", scale_name, dt, cache_name,
               cache_name);
      QF_CHECK(offset == NULL, QKVFUSE_ERROR_INVALID_VALUE,
               "%s: not used with a %s %s (not quantized); pass NULL, or give an int8 %s", offset_name, dt,
               cache_name, cache_name);
      *mode = QKVFUSE_QUANT_NONE;
      return QKVFUSE_SUCCESS;
    default:
      return qf_fail(QKVFUSE_ERROR_DTYPE,
                     "%s: dtype must be int8, float8_e4m3fn, float32, float16 or bfloat16; got %s (code %d)",
                     cache_name, dt, (int)cache->dtype);
  }
}

/* a * b == c for a, b >= 0, without forming an overflowing product. */
static int product_is(int64_t a, int64_t b, int64_t c) {
  if (a == 0 || b == 0) return c == 0;
  return a <= INT64_MAX / b && a * b == c;
}

static int str_is(const char *s, const char *a) { return s != NULL && strcmp(s, a) == 0; }

/* Plan on the stack, run. */
static qkvfuse_status plan_and_run(const qkvfuse_desc *d, const qkvfuse_args *a, const qf_call *call, void *stream) {
  qkvfuse_plan plan;
  QF_FORWARD(qf_plan_init(&plan, d));
  qkvfuse_status s = qf_plan_run(&plan, a, call, stream);
  qf_plan_release(&plan);
  return s;
}

qkvfuse_status qkvfuse_split_qkv_rmsnorm_rope(const qkvfuse_tensor *input, const qkvfuse_tensor *q_weight,
                                              const qkvfuse_tensor *k_weight, int64_t q_hidden_size,
                                              int64_t kv_hidden_size, int64_t head_dim, double eps,
                                              const qkvfuse_tensor *cos_sin_cache, const qkvfuse_tensor *positions,
                                              int64_t rope_dim, const qkvfuse_tensor *q_bias,
                                              const qkvfuse_tensor *k_bias, int is_neox, const qkvfuse_tensor *q_out,
                                              const qkvfuse_tensor *k_out, const qkvfuse_tensor *v_out,
                                              uint32_t *error_flags, void *stream) {
  return qkvfuse_split_qkv_rmsnorm_rope_ex(input, q_weight, k_weight, q_hidden_size, kv_hidden_size, head_dim, eps,
                                           cos_sin_cache, positions, rope_dim, q_bias, k_bias, is_neox, q_out, k_out,
                                           v_out, NULL, error_flags, stream);
}

qkvfuse_status qkvfuse_split_qkv_rmsnorm_rope_ex(
    const qkvfuse_tensor *input, const qkvfuse_tensor *q_weight, const qkvfuse_tensor *k_weight,
    int64_t q_hidden_size, int64_t kv_hidden_size, int64_t head_dim, double eps,
    const qkvfuse_tensor *cos_sin_cache, const qkvfuse_tensor *positions, int64_t rope_dim,
    const qkvfuse_tensor *q_bias, const qkvfuse_tensor *k_bias, int is_neox, const qkvfuse_tensor *q_out,
    const qkvfuse_tensor *k_out, const qkvfuse_tensor *v_out, const qkvfuse_named_options *options,
    uint32_t *error_flags, void *stream) {
  qf_clear_error();
  qkvfuse_desc d;
  int strict = 0;
  QF_FORWARD(desc_for("input", input, &d));
  QF_FORWARD(options_arg(options, &d, &strict));
  QF_CHECK(head_dim >= QF_MIN_HEAD_DIM && head_dim <= QF_MAX_HEAD_DIM && head_dim % 2 == 0,
           QKVFUSE_ERROR_INVALID_VALUE, "head_dim: must be even and in [%d, %d]; got %lld", QF_MIN_HEAD_DIM,
           QF_MAX_HEAD_DIM, (long long)head_dim);
  QF_CHECK(q_hidden_size > 0 && q_hidden_size % head_dim == 0, QKVFUSE_ERROR_INVALID_VALUE,
           "q_hidden_size: must be a positive multiple of head_dim = %lld; got %lld", (long long)head_dim,
           (long long)q_hidden_size);
  QF_CHECK(kv_hidden_size > 0 && kv_hidden_size % head_dim == 0, QKVFUSE_ERROR_INVALID_VALUE,
           "kv_hidden_size: must be a positive multiple of head_dim = %lld; got %lld", (long long)head_dim,
           (long long)kv_hidden_size);
  QF_FORWARD(heads_arg(q_hidden_size / head_dim, kv_hidden_size / head_dim, head_dim, "q_hidden_size",
                       "kv_hidden_size", "head_dim", &d));
  QF_CHECK(rope_dim == 0 || (rope_dim >= 2 && rope_dim <= head_dim && rope_dim % 2 == 0), QKVFUSE_ERROR_INVALID_VALUE,
           "rope_dim: must be 0 (= head_dim) or even in [2, head_dim = %lld]; got %lld", (long long)head_dim,
           (long long)rope_dim);
  QF_CHECK(is_neox == 0 || is_neox == 1, QKVFUSE_ERROR_INVALID_VALUE, "is_neox: must be 0 or 1; got %d", is_neox);
  QF_CHECK((q_bias == NULL) == (k_bias == NULL), QKVFUSE_ERROR_NULL_POINTER,
           "%s: q_bias and k_bias are given together or not at all", q_bias ? "k_bias" : "q_bias");
  QF_CHECK(k_out != NULL, QKVFUSE_ERROR_NULL_POINTER, "k_out: required, got NULL");
  QF_CHECK(v_out != NULL, QKVFUSE_ERROR_NULL_POINTER, "v_out: required, got NULL");
  QF_FORWARD(eps_arg("eps", eps, &d));
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
  const qf_call call = {&split_names, NULL, strict ? qf_strict_split : NULL, NULL};
  return plan_and_run(&d, &a, &call, stream);
}

qkvfuse_status qkvfuse_qkv_rmsnorm_rope_cache(
    const qkvfuse_tensor *qkv, const qkvfuse_tensor *q_gamma, const qkvfuse_tensor *k_gamma,
    const qkvfuse_tensor *cos, const qkvfuse_tensor *sin, const qkvfuse_tensor *index, const qkvfuse_tensor *q_out,
    const qkvfuse_tensor *k_cache, const qkvfuse_tensor *v_cache, const qkvfuse_tensor *k_scale,
    const qkvfuse_tensor *v_scale, const qkvfuse_tensor *k_offset, const qkvfuse_tensor *v_offset,
    const qkvfuse_tensor *q_out_before_quant, const qkvfuse_tensor *k_out_before_quant,
    const qkvfuse_tensor *v_out_before_quant, const int64_t qkv_size[4], const int64_t head_nums[3], double epsilon,
    const char *cache_mode, int is_output_qkv, uint32_t *error_flags, void *stream) {
  return qkvfuse_qkv_rmsnorm_rope_cache_ex(qkv, q_gamma, k_gamma, cos, sin, index, q_out, k_cache, v_cache, k_scale,
                                           v_scale, k_offset, v_offset, q_out_before_quant, k_out_before_quant,
                                           v_out_before_quant, qkv_size, head_nums, epsilon, cache_mode,
                                           is_output_qkv, NULL, error_flags, stream);
}

qkvfuse_status qkvfuse_qkv_rmsnorm_rope_cache_ex(
    const qkvfuse_tensor *qkv, const qkvfuse_tensor *q_gamma, const qkvfuse_tensor *k_gamma,
    const qkvfuse_tensor *cos, const qkvfuse_tensor *sin, const qkvfuse_tensor *index, const qkvfuse_tensor *q_out,
    const qkvfuse_tensor *k_cache, const qkvfuse_tensor *v_cache, const qkvfuse_tensor *k_scale,
    const qkvfuse_tensor *v_scale, const qkvfuse_tensor *k_offset, const qkvfuse_tensor *v_offset,
    const qkvfuse_tensor *q_out_before_quant, const qkvfuse_tensor *k_out_before_quant,
    const qkvfuse_tensor *v_out_before_quant, const int64_t qkv_size[4], const int64_t head_nums[3], double epsilon,
    const char *cache_mode, int is_output_qkv, const qkvfuse_named_options *options, uint32_t *error_flags,
    void *stream) {
  qf_clear_error();
  qkvfuse_desc d;
  int strict = 0;
  QF_FORWARD(desc_for("qkv", qkv, &d));
  QF_FORWARD(options_arg(options, &d, &strict));
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
  QF_FORWARD(heads_arg(head_nums[0], head_nums[1], D, "head_nums[0] (Nq)", "head_nums[1] (Nk)", "qkv_size[3] (D)", &d));
  d.rotary_dim = D;
  d.q_norm = d.k_norm = 1;
  d.rope_source = QKVFUSE_ROPE_COS_SIN;
  d.rope_style = QKVFUSE_ROPE_NEOX;
  QF_FORWARD(quant_arg("k_cache", k_cache, "k_scale", k_scale, "k_offset", k_offset, &d.k_quant));
  QF_FORWARD(quant_arg("v_cache", v_cache, "v_scale", v_scale, "v_offset", v_offset, &d.v_quant));

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
  const qf_strict_cache_call strict_call = {B, S, k_scale, v_scale, k_offset, v_offset};
  qf_call call = {&cache_names, NULL, strict ? qf_strict_cache : NULL, &strict_call};
  if (is_output_qkv) {
    /* k and v before quantization are the core's k_out / v_out; q is never
     * quantized, so q_out_before_quant is q written a second time */
    QF_CHECK(q_out_before_quant != NULL, QKVFUSE_ERROR_NULL_POINTER,
             "q_out_before_quant: required with is_output_qkv = 1, got NULL");
    QF_CHECK(k_out_before_quant != NULL, QKVFUSE_ERROR_NULL_POINTER,
             "k_out_before_quant: required with is_output_qkv = 1, got NULL");
    QF_CHECK(v_out_before_quant != NULL, QKVFUSE_ERROR_NULL_POINTER,
             "v_out_before_quant: required with is_output_qkv = 1, got NULL");
    a.k_out = k_out_before_quant;
    a.v_out = v_out_before_quant;
    call.q_copy = q_out_before_quant;
  }
  return plan_and_run(&d, &a, &call, stream);
}

qkvfuse_status qkvfuse_dequant_rope_quant_kvcache(
    const qkvfuse_tensor *x, const qkvfuse_tensor *cos, const qkvfuse_tensor *sin, const qkvfuse_tensor *k_cache,
    const qkvfuse_tensor *v_cache, const qkvfuse_tensor *indices, const qkvfuse_tensor *scale_k,
    const qkvfuse_tensor *scale_v, const qkvfuse_tensor *offset_k, const qkvfuse_tensor *offset_v,
    const qkvfuse_tensor *weight_scale, const qkvfuse_tensor *activation_scale, const qkvfuse_tensor *bias,
    const int64_t size_splits[3], const char *quant_mode, const char *layout, int kv_output, const char *cache_mode,
    const qkvfuse_tensor *q_out, const qkvfuse_tensor *k_out, const qkvfuse_tensor *v_out, uint32_t *error_flags,
    void *stream) {
  return qkvfuse_dequant_rope_quant_kvcache_ex(x, cos, sin, k_cache, v_cache, indices, scale_k, scale_v, offset_k,
                                               offset_v, weight_scale, activation_scale, bias, size_splits,
                                               quant_mode, layout, kv_output, cache_mode, q_out, k_out, v_out, NULL,
                                               error_flags, stream);
}

qkvfuse_status qkvfuse_dequant_rope_quant_kvcache_ex(
    const qkvfuse_tensor *x, const qkvfuse_tensor *cos, const qkvfuse_tensor *sin, const qkvfuse_tensor *k_cache,
    const qkvfuse_tensor *v_cache, const qkvfuse_tensor *indices, const qkvfuse_tensor *scale_k,
    const qkvfuse_tensor *scale_v, const qkvfuse_tensor *offset_k, const qkvfuse_tensor *offset_v,
    const qkvfuse_tensor *weight_scale, const qkvfuse_tensor *activation_scale, const qkvfuse_tensor *bias,
    const int64_t size_splits[3], const char *quant_mode, const char *layout, int kv_output, const char *cache_mode,
    const qkvfuse_tensor *q_out, const qkvfuse_tensor *k_out, const qkvfuse_tensor *v_out,
    const qkvfuse_named_options *options, uint32_t *error_flags, void *stream) {
  qf_clear_error();
  qkvfuse_desc d;
  int strict = 0;
  QF_FORWARD(desc_for("x", x, &d));
  QF_FORWARD(options_arg(options, &d, &strict));
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
  QF_FORWARD(heads_arg(size_splits[0] / D, size_splits[1] / D, D, "size_splits[0] (Nq*D)", "size_splits[1] (Nkv*D)",
                       "k_cache: shape[3] (D)", &d));
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
  d.rotary_dim = D;
  d.rope_source = QKVFUSE_ROPE_COS_SIN;
  d.rope_style = QKVFUSE_ROPE_NEOX;
  QF_FORWARD(quant_arg("k_cache", k_cache, "scale_k", scale_k, "offset_k", offset_k, &d.k_quant));
  QF_FORWARD(quant_arg("v_cache", v_cache, "scale_v", scale_v, "offset_v", offset_v, &d.v_quant));

  qkvfuse_args a = QKVFUSE_ARGS_INIT;
  a.qkv = x;
  if (x->dtype == QKVFUSE_DTYPE_INT32) { /* the seed: no effect on float x, so a caller may always pass them */
    a.weight_scale = weight_scale;
    a.act_scale = activation_scale;
    a.bias = bias;
  }
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
  const qf_strict_dequant_call strict_call = {x, cos, sin};
  const qf_call call = {&dequant_names, NULL, strict ? qf_strict_dequant : NULL, &strict_call};
  return plan_and_run(&d, &a, &call, stream);
}
