/* SPDX-License-Identifier: Apache-2.0 */
/* Deterministic random numbers for the tests: xoshiro256** seeded through
 * splitmix64. Same seed, same stream, on every platform. */
#ifndef TK_RNG_H
#define TK_RNG_H

#include <stdint.h>

typedef struct tk_rng {
  uint64_t s[4];
} tk_rng;

void tk_rng_seed(tk_rng *r, uint64_t seed);
uint64_t tk_rng_next(tk_rng *r);
double tk_rng_unit(tk_rng *r);                          /* [0, 1) */
double tk_rng_uniform(tk_rng *r, double lo, double hi); /* [lo, hi) */
int64_t tk_rng_range(tk_rng *r, int64_t lo, int64_t hi); /* [lo, hi], inclusive */
double tk_rng_normal(tk_rng *r);                        /* N(0, 1) */
double tk_rng_loguniform(tk_rng *r, double lo, double hi);
int tk_rng_chance(tk_rng *r, double p);                 /* 1 with probability p */
/* One of n values. */
#define TK_PICK(r, arr) ((arr)[tk_rng_range((r), 0, (int64_t)(sizeof(arr) / sizeof((arr)[0])) - 1)])

/* A seed for case number i of a run with base seed `base`. */
uint64_t tk_case_seed(uint64_t base, uint64_t i);

#endif /* TK_RNG_H */
