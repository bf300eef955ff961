/* SPDX-License-Identifier: Apache-2.0 */
#include "rng.h"

#include <math.h>

static uint64_t splitmix64(uint64_t *x) {
  uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

void tk_rng_seed(tk_rng *r, uint64_t seed) {
  for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&seed);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t tk_rng_next(tk_rng *r) {
  uint64_t *s = r->s;
  uint64_t out = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = rotl(s[3], 45);
  return out;
}

double tk_rng_unit(tk_rng *r) { return (double)(tk_rng_next(r) >> 11) * 0x1.0p-53; }

double tk_rng_uniform(tk_rng *r, double lo, double hi) { return lo + (hi - lo) * tk_rng_unit(r); }

int64_t tk_rng_range(tk_rng *r, int64_t lo, int64_t hi) {
  uint64_t span = (uint64_t)(hi - lo) + 1;
  if (span == 0) return (int64_t)tk_rng_next(r);
  return lo + (int64_t)(tk_rng_next(r) % span);
}

double tk_rng_normal(tk_rng *r) {
  double u1 = tk_rng_unit(r), u2 = tk_rng_unit(r);
  if (u1 < 1e-300) u1 = 1e-300;
  return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

double tk_rng_loguniform(tk_rng *r, double lo, double hi) {
  return exp(tk_rng_uniform(r, log(lo), log(hi)));
}

int tk_rng_chance(tk_rng *r, double p) { return tk_rng_unit(r) < p; }

uint64_t tk_case_seed(uint64_t base, uint64_t i) {
  uint64_t x = base ^ (i * 0xD1B54A32D192ED03ull);
  return splitmix64(&x);
}
