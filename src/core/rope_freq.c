/* SPDX-License-Identifier: Apache-2.0 */
/* RoPE inverse frequencies under the scaling rules, and the cos/sin cache
 * builder. Everything here is double precision. */
#include <math.h>

#include "core/dtype.h"
#include "core/error.h"
#include "core/plan.h"
#include "core/problem.h"
#include "core/tensor.h"

#define QF_TWO_PI 6.283185307179586476925286766559

/* Check a rule; `theta_name` and `r_name` are how the caller calls them. */
static qkvfuse_status check_rule(double theta, const qkvfuse_rope_scaling *s, int64_t R, const char *theta_name,
                                 const char *r_name) {
  QF_CHECK(isfinite(theta) && theta > 1.0, QKVFUSE_ERROR_INVALID_VALUE, "%s: must be finite and > 1; got %g",
           theta_name, theta);
  QF_CHECK(R >= 2 && R <= QF_MAX_ROTARY_DIM && R % 2 == 0, QKVFUSE_ERROR_INVALID_VALUE,
           "%s: must be even and in [2, %d]; got %lld", r_name, QF_MAX_ROTARY_DIM, (long long)R);
  if (s == NULL || s->type == QKVFUSE_ROPE_SCALING_NONE) return QKVFUSE_SUCCESS;
  QF_CHECK((unsigned)s->type < QKVFUSE_ROPE_SCALING_COUNT,
           QKVFUSE_ERROR_INVALID_VALUE, "rope_scaling.type: unknown value %d", (int)s->type);
  QF_CHECK(isfinite(s->factor) && s->factor > 0.0, QKVFUSE_ERROR_INVALID_VALUE,
           "rope_scaling.factor: must be finite and > 0; got %g", s->factor);
  if (s->type == QKVFUSE_ROPE_SCALING_NTK)
    QF_CHECK(R > 2, QKVFUSE_ERROR_INVALID_VALUE, "%s: NTK scaling needs R > 2 (exponent R/(R-2)); got %lld", r_name,
             (long long)R);
  if (s->type == QKVFUSE_ROPE_SCALING_LLAMA3 || s->type == QKVFUSE_ROPE_SCALING_YARN)
    QF_CHECK(s->original_max_position > 0, QKVFUSE_ERROR_INVALID_VALUE,
             "rope_scaling.original_max_position: must be > 0; got %lld", (long long)s->original_max_position);
  if (s->type == QKVFUSE_ROPE_SCALING_LLAMA3) {
    QF_CHECK(isfinite(s->low_freq_factor) && s->low_freq_factor > 0.0, QKVFUSE_ERROR_INVALID_VALUE,
             "rope_scaling.low_freq_factor: must be finite and > 0; got %g", s->low_freq_factor);
    QF_CHECK(isfinite(s->high_freq_factor) && s->high_freq_factor > s->low_freq_factor, QKVFUSE_ERROR_INVALID_VALUE,
             "rope_scaling.high_freq_factor: must be finite and > low_freq_factor = %g; got %g", s->low_freq_factor,
             s->high_freq_factor);
  }
  if (s->type == QKVFUSE_ROPE_SCALING_YARN) {
    QF_CHECK(isfinite(s->beta_fast) && s->beta_fast > 0.0, QKVFUSE_ERROR_INVALID_VALUE,
             "rope_scaling.beta_fast: must be finite and > 0; got %g", s->beta_fast);
    QF_CHECK(isfinite(s->beta_slow) && s->beta_slow > 0.0, QKVFUSE_ERROR_INVALID_VALUE,
             "rope_scaling.beta_slow: must be finite and > 0; got %g", s->beta_slow);
    QF_CHECK(isfinite(s->extrapolation_factor) && s->extrapolation_factor >= 0.0, QKVFUSE_ERROR_INVALID_VALUE,
             "rope_scaling.extrapolation_factor: must be finite and >= 0; got %g", s->extrapolation_factor);
    QF_CHECK(isfinite(s->attn_factor) && s->attn_factor > 0.0, QKVFUSE_ERROR_INVALID_VALUE,
             "rope_scaling.attn_factor: must be finite and > 0; got %g", s->attn_factor);
  }
  return QKVFUSE_SUCCESS;
}

/* YaRN: the dimension index whose wavelength makes n_rot turns over the
 * original context. */
static double yarn_correction_dim(double n_rot, int64_t R, double theta, int64_t orig) {
  return ((double)R * log((double)orig / (n_rot * QF_TWO_PI))) / (2.0 * log(theta));
}

/* A checked rule, ready to give f_i for any i < R/2. */
typedef struct rope_rule {
  const qkvfuse_rope_scaling *s; /* NULL: none */
  qkvfuse_rope_scaling_type type;
  double base;                   /* theta, or NTK's scaled theta */
  int64_t R;
  double yarn_lo, yarn_hi;       /* YaRN ramp */
  double mscale;
} rope_rule;

static rope_rule make_rule(double theta, const qkvfuse_rope_scaling *s, int64_t R) {
  rope_rule r = {s, s ? s->type : QKVFUSE_ROPE_SCALING_NONE, theta, R, 0.0, 0.0, 1.0};
  if (r.type == QKVFUSE_ROPE_SCALING_NTK) r.base = theta * pow(s->factor, (double)R / (double)(R - 2));
  if (r.type == QKVFUSE_ROPE_SCALING_YARN) {
    double lo = floor(yarn_correction_dim(s->beta_fast, R, theta, s->original_max_position));
    double hi = ceil(yarn_correction_dim(s->beta_slow, R, theta, s->original_max_position));
    if (lo < 0.0) lo = 0.0;
    if (hi > (double)(R - 1)) hi = (double)(R - 1);
    if (lo == hi) hi += 0.001;
    r.yarn_lo = lo;
    r.yarn_hi = hi;
    r.mscale = (s->factor <= 1.0 ? 1.0 : 0.1 * log(s->factor) + 1.0) * s->attn_factor;
  }
  return r;
}

/* f_i of a rule: radians per position. */
static double rule_inv_freq(const rope_rule *r, int64_t i) {
  const double f = pow(r->base, -(double)(2 * i) / (double)r->R);
  const qkvfuse_rope_scaling *s = r->s;
  switch (r->type) {
    case QKVFUSE_ROPE_SCALING_LINEAR: return f / s->factor;
    case QKVFUSE_ROPE_SCALING_LLAMA3: {
      const double orig = (double)s->original_max_position, wl = QF_TWO_PI / f;
      if (wl < orig / s->high_freq_factor) return f;
      if (wl > orig / s->low_freq_factor) return f / s->factor;
      const double smooth = (orig / wl - s->low_freq_factor) / (s->high_freq_factor - s->low_freq_factor);
      return (1.0 - smooth) * f / s->factor + smooth * f;
    }
    case QKVFUSE_ROPE_SCALING_YARN: {
      double ramp = ((double)i - r->yarn_lo) / (r->yarn_hi - r->yarn_lo);
      ramp = ramp < 0.0 ? 0.0 : ramp > 1.0 ? 1.0 : ramp;
      const double mask = (1.0 - ramp) * s->extrapolation_factor;
      return f / s->factor * (1.0 - mask) + f * mask;
    }
    default: return f;
  }
}

/* A rule whose numbers leave the usable range (an NTK base that overflows, a
 * frequency so large that position * f is not a meaningful angle, a
 * non-finite mscale) is an invalid argument, not a source of NaN. */
#define QF_MAX_INV_FREQ 16.0 /* f_0 = 1 without scaling; at 16, position 2^31 still has ~4e-6 rad */
static qkvfuse_status check_result(const rope_rule *r, const char *theta_name) {
  QF_CHECK(isfinite(r->base) && r->base > 1.0, QKVFUSE_ERROR_INVALID_VALUE,
           "rope_scaling.factor: the scaled base is %g (from %s and the factor); out of range", r->base, theta_name);
  QF_CHECK(isfinite(r->mscale) && r->mscale > 0.0, QKVFUSE_ERROR_INVALID_VALUE,
           "rope_scaling.attn_factor: the cos/sin multiplier is %g; must be finite and > 0", r->mscale);
  for (int64_t i = 0; i < r->R / 2; i++) {
    const double f = rule_inv_freq(r, i);
    QF_CHECK(isfinite(f) && f > 0.0 && f <= QF_MAX_INV_FREQ, QKVFUSE_ERROR_INVALID_VALUE,
             "rope_scaling.factor: the rule gives inverse frequency f_%lld = %g; must be in (0, %g]", (long long)i, f,
             QF_MAX_INV_FREQ);
  }
  return QKVFUSE_SUCCESS;
}

qkvfuse_status qf_rope_inv_freq(double theta, const qkvfuse_rope_scaling *s, int64_t R, double *inv_freq,
                                double *mscale, const char *theta_name) {
  QF_FORWARD(check_rule(theta, s, R, theta_name, "rotary_dim"));
  const rope_rule r = make_rule(theta, s, R);
  QF_FORWARD(check_result(&r, theta_name));
  for (int64_t i = 0; i < R / 2; i++) inv_freq[i] = rule_inv_freq(&r, i);
  if (mscale) *mscale = r.mscale;
  return QKVFUSE_SUCCESS;
}

qkvfuse_status qkvfuse_rope_inv_freq(double theta, const qkvfuse_rope_scaling *s, int64_t R, double *inv_freq,
                                     double *mscale) {
  qf_clear_error();
  QF_CHECK(inv_freq != NULL, QKVFUSE_ERROR_NULL_POINTER, "inv_freq: NULL");
  return qf_rope_inv_freq(theta, s, R, inv_freq, mscale, "theta");
}

/* v rounded once, to nearest even, to dtype dt (exact in float32): a double
 * -> float -> bfloat16 chain could round twice. */
static float round_double(double v, qkvfuse_dtype dt) {
  int p, qmin; /* significand bits; exponent of the smallest subnormal step */
  switch (dt) {
    case QKVFUSE_DTYPE_BFLOAT16: p = 8, qmin = -133; break;
    case QKVFUSE_DTYPE_FLOAT16: p = 11, qmin = -24; break;
    default: return (float)v;
  }
  if (v == 0.0 || !isfinite(v)) return (float)v;
  int q = ilogb(v) - (p - 1);
  if (q < qmin) q = qmin;
  const double r = ldexp(rint(ldexp(v, -q)), q); /* exact: fewer than 53 significant bits */
  if (dt == QKVFUSE_DTYPE_FLOAT16 && fabs(r) > 65504.0) return r > 0 ? INFINITY : -INFINITY;
  return (float)r;
}

qkvfuse_status qkvfuse_build_cos_sin_cache(double theta, const qkvfuse_rope_scaling *scaling,
                                           const qkvfuse_tensor *cache) {
  qf_clear_error();
  char sh[128];
  const qkvfuse_desc cpu = {.device_type = QKVFUSE_DEVICE_CPU};
  QF_FORWARD(qf_check_tensor("cos_sin_cache", cache, QF_FLOATS, &cpu));
  QF_CHECK(cache->ndim == 2, QKVFUSE_ERROR_SHAPE, "cos_sin_cache: expected [max_pos, R]; got %s",
           qf_shape_str(cache, sh, sizeof sh));
  const int64_t max_pos = cache->shape[0], R = cache->shape[1], h = R / 2;
  QF_FORWARD(check_rule(theta, scaling, R, "theta", "cos_sin_cache: shape[1] (R)"));
  const rope_rule rule = make_rule(theta, scaling, R);
  QF_FORWARD(check_result(&rule, "theta"));
  qf_mat m;
  QF_FORWARD(qf_view_mat("cos_sin_cache", "[max_pos, R]", cache, max_pos, R, 0, NULL, &m));
  const size_t es = qkvfuse_dtype_size(m.dtype);
  for (int64_t i = 0; i < h; i++) {
    const double f = rule_inv_freq(&rule, i);
    for (int64_t p = 0; p < max_pos; p++) {
      char *row = (char *)m.data + (size_t)(p * m.ld) * es;
      const double a = (double)p * f;
      qf_store_float(row, m.dtype, i, round_double(cos(a) * rule.mscale, m.dtype));
      qf_store_float(row, m.dtype, h + i, round_double(sin(a) * rule.mscale, m.dtype));
    }
  }
  return QKVFUSE_SUCCESS;
}
