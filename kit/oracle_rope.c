/* SPDX-License-Identifier: Apache-2.0 */
/* RoPE frequency rules in extended precision, from their published definitions:
 *   base:   f_i = theta^(-2i/R), i < R/2
 *   linear: f_i / factor (position interpolation)
 *   ntk:    theta' = theta * factor^(R/(R-2)) (static NTK-aware)
 *   llama3: Llama 3.1 bands: wavelength w = 2pi/f; w < L/high: f; w > L/low:
 *           f/factor; between: (1-s) f/factor + s f, s = (L/w - low)/(high - low)
 *   yarn:   vLLM YaRNScalingRotaryEmbedding: correction range
 *           [floor(d(beta_fast)), ceil(d(beta_slow))] clamped to [0, R-1], with
 *           d(n) = R ln(L / (2 pi n)) / (2 ln theta); linear ramp over R/2
 *           (+0.001 to high when low == high); mask = (1 - ramp) * extrapolation;
 *           f = f/factor * (1 - mask) + f * mask;
 *           mscale = (0.1 ln(factor) + 1) * attn_factor, attn_factor when factor <= 1. */
#include <math.h>

#include "oracle.h"

static long double yarn_correction_dim(long double n_rot, long double R, long double theta, long double L) {
  return R * logl(L / (n_rot * 2.0L * 3.14159265358979323846264338327950288L)) / (2.0L * logl(theta));
}

int tk_rope_freqs(double theta, const qkvfuse_rope_scaling *s, int64_t R, long double *f, long double *mscale) {
  if (R < 2 || R % 2 || !(theta > 1)) return -1;
  int64_t half = R / 2;
  long double th = theta;
  *mscale = 1.0L;
  if (s->type == QKVFUSE_ROPE_SCALING_NTK) {
    if (R <= 2 || !(s->factor > 0)) return -1;
    th = th * powl((long double)s->factor, (long double)R / (long double)(R - 2));
  }
  for (int64_t i = 0; i < half; i++) f[i] = powl(th, -(long double)(2 * i) / (long double)R);
  switch (s->type) {
    case QKVFUSE_ROPE_SCALING_NONE:
    case QKVFUSE_ROPE_SCALING_NTK:
      return 0;
    case QKVFUSE_ROPE_SCALING_LINEAR:
      if (!(s->factor > 0)) return -1;
      for (int64_t i = 0; i < half; i++) f[i] /= (long double)s->factor;
      return 0;
    case QKVFUSE_ROPE_SCALING_LLAMA3: {
      long double L = (long double)s->original_max_position, lo = s->low_freq_factor, hi = s->high_freq_factor;
      if (!(s->factor > 0) || !(L > 0) || !(hi > lo)) return -1;
      long double low_w = L / lo, high_w = L / hi;
      for (int64_t i = 0; i < half; i++) {
        long double w = 2.0L * 3.14159265358979323846264338327950288L / f[i];
        if (w < high_w) continue;
        if (w > low_w) {
          f[i] /= (long double)s->factor;
        } else {
          long double sm = (L / w - lo) / (hi - lo);
          f[i] = (1 - sm) * f[i] / (long double)s->factor + sm * f[i];
        }
      }
      return 0;
    }
    case QKVFUSE_ROPE_SCALING_YARN: {
      long double L = (long double)s->original_max_position;
      if (!(s->factor > 0) || !(L > 0)) return -1;
      long double low = floorl(yarn_correction_dim(s->beta_fast, R, th, L));
      long double high = ceill(yarn_correction_dim(s->beta_slow, R, th, L));
      if (low < 0) low = 0;
      if (high > R - 1) high = (long double)(R - 1);
      if (low == high) high += 0.001L;
      for (int64_t i = 0; i < half; i++) {
        long double ramp = ((long double)i - low) / (high - low);
        ramp = ramp < 0 ? 0 : ramp > 1 ? 1 : ramp;
        long double mask = (1 - ramp) * (long double)s->extrapolation_factor;
        long double inter = f[i] / (long double)s->factor;
        f[i] = inter * (1 - mask) + f[i] * mask;
      }
      long double m = s->factor > 1 ? 0.1L * logl((long double)s->factor) + 1.0L : 1.0L;
      *mscale = m * (long double)s->attn_factor;
      return 0;
    }
    default:
      return -1;
  }
}
