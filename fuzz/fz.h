/* SPDX-License-Identifier: Apache-2.0 */
/* The fuzz harness shared by the targets (fuzz_core.c, fuzz_named.c) and the
 * plain replay driver (replay.c).
 *
 * One input = one call. Its bytes choose a valid case (the test kit's random
 * spec, kit/case.h), then a short list of mutations: descriptor fields,
 * tensor fields (NULL, dtype, ndim, shape, strides, device, alignment,
 * aliasing another tensor), args fields, and data values (positions, slots,
 * scales, offsets at and around their limits). Every buffer the library sees
 * sits between two guard regions (canaries; ASan-poisoned under ASan), and
 * starts as random bytes (inputs) or poison (outputs, caches).
 *
 * The invariant, checked for the reference and the auto backend:
 *   - a failing call returns a known status with a message, and every byte of
 *     every buffer (outputs, caches, inputs, guards) is as it was, except the
 *     error_flags bit of a CPU data error;
 *   - a successful call leaves qkvfuse_last_error() empty and agrees with the
 *     float64 oracle (kit/oracle.h) within SPEC's tolerances on every output
 *     element and every cache element written, with every other byte and every
 *     guard unchanged;
 *   - both backends return the same status.
 * A violation prints the input's case and mutations and aborts (libFuzzer
 * records the input; the replay driver fails). */
#ifndef FZ_H
#define FZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "case.h"
#include "qkvfuse.h"

/* ---- the input as a stream of choices (0 once exhausted) ----------------- */

typedef struct fz_src {
  const uint8_t *p;
  size_t n, i;
} fz_src;

uint64_t fz_bytes(fz_src *s, int nbytes);
/* A value in [lo, hi] (inclusive). */
int64_t fz_range(fz_src *s, int64_t lo, int64_t hi);
/* 1 with probability num/256. */
int fz_chance(fz_src *s, int num);

/* ---- guarded buffers ------------------------------------------------------ */

#define FZ_GUARD 256     /* bytes of canary before and after every buffer */
#define FZ_MAX_BUFS 64
#define FZ_MAX_BACK (1 << 20) /* largest tensor extent the harness backs with memory */

typedef struct fz_buf {
  uint8_t *base;  /* allocation: guard | run (bytes) | guard */
  uint8_t *run;   /* what the library sees; 256-byte aligned */
  uint8_t *init;  /* the bytes run must hold before each call */
  size_t bytes;
} fz_buf;

/* ---- one call ------------------------------------------------------------- */

enum { FZ_CORE = 0, FZ_SPLIT = 1, FZ_RMSNORM_CACHE = 2, FZ_DEQUANT = 3 };

typedef struct fz_named {
  int op; /* FZ_SPLIT, FZ_RMSNORM_CACHE, FZ_DEQUANT */
  /* scalars of the named entry points */
  int64_t q_hidden, kv_hidden, head_dim, rope_dim; /* split */
  int64_t qkv_size[4], head_nums[3];               /* rmsnorm_cache */
  int64_t size_splits[3];                          /* dequant */
  double eps;
  int is_neox, is_output_qkv, kv_output;
  const char *cache_mode, *quant_mode, *layout;
  int null_sizes; /* pass NULL for qkv_size / head_nums / size_splits */
  /* extra tensors: q_out_before_quant (rmsnorm_cache) */
  qkvfuse_tensor q_copy;
  int has_q_copy;
} fz_named;

typedef struct fz_call {
  tk_case c;                  /* the valid case the input started from */
  qkvfuse_desc desc;          /* as mutated (backend set per run) */
  qkvfuse_tensor tens[TK_NSLOT + 4];
  qkvfuse_args args;
  fz_buf buf[FZ_MAX_BUFS];
  int nbuf;
  int null_plan_out, null_args;
  fz_named named;
  char log[4096]; /* the case and its mutations, for a failure report */
  size_t loglen;
} fz_call;

/* Build the valid case chosen by the input's first bytes (op: FZ_CORE or a
 * named operator, which constrains the spec to what that entry point takes).
 * 0 on success, -1 when the input is too short to choose one. */
int fz_setup(fz_call *f, fz_src *s, int op);
/* Apply the mutations the rest of the input lists. */
void fz_mutate(fz_call *f, fz_src *s);
/* Run on the reference and auto backends and check the invariant (aborts on a
 * violation). */
void fz_check(fz_call *f, fz_src *s);
void fz_free(fz_call *f);

/* Named operators (named.c): set the entry point's own arguments from the
 * case, then mutate them with the rest of the input. */
void fz_named_mutate(fz_call *f, fz_src *s);
/* Call f's named entry point (its tensors are f->args'); *desc and *oargs get
 * the equivalent core call per docs/API.md "Named operators", and *desc_ok = 0
 * when that mapping says the arguments are invalid. */
qkvfuse_status fz_call_named(fz_call *f, qkvfuse_desc *desc, qkvfuse_args *oargs, int *desc_ok);
/* A new guarded buffer of n bytes of poison (index, or -1). */
int fz_buf_poison(fz_call *f, size_t n, uint64_t seed);
/* Bytes from p to the end of the harness buffer that holds it, or -1 (memory
 * it does not own). */
int64_t fz_buf_room(const fz_call *f, const void *p);

/* Append to the call's log (printf-style). */
void fz_log(fz_call *f, const char *fmt, ...);

/* Calls so far by status (index = qkvfuse_status; the last: validation only). */
extern long fz_counts[QKVFUSE_ERROR_VERSION + 2];
void fz_print_counts(FILE *out);

/* The entry point of both drivers: one input. */
int fz_one_input(const uint8_t *data, size_t size, int op);

#endif /* FZ_H */
