/* SPDX-License-Identifier: Apache-2.0 */
/* One benchmark case: an operator variant on a preset's shapes at T tokens,
 * as a plan and enough instances of its tensors on the device that cycling
 * through them streams past the last-level cache. */
#ifndef QKVFUSE_TOOLS_BENCH_CASE_H
#define QKVFUSE_TOOLS_BENCH_CASE_H

#include <stddef.h>
#include <stdint.h>

#include "device.h"
#include "presets.h"
#include "qkvfuse.h"

typedef enum bench_op {
  BENCH_OP_SPLIT,   /* split_qkv_rmsnorm_rope, out of place: norm + RoPE (cos_sin_cache), q/k/v outputs */
  BENCH_OP_CACHE,   /* norm + RoPE (cos_sin_cache), q out, k and v int8 into a paged cache */
  BENCH_OP_DEQUANT, /* int32 input dequant + RoPE (per-token cos/sin), q out, k and v int8 into a paged cache */
  BENCH_OP_INPLACE, /* split in place: q and k normalized and rotated inside the qkv rows, v untouched */
  BENCH_OP_COUNT
} bench_op;

const char *bench_op_name(bench_op op); /* "split", "cache", "dequant", "inplace" */
const char *bench_op_help(bench_op op); /* what the variant times, lines separated by '\n' */
const char *bench_op_names(void);       /* every name, in order: "split, cache, dequant, inplace" */
int bench_op_parse(const char *s);      /* -1 if unknown */

typedef struct bench_spec {
  bench_op op;
  const cli_preset *preset;
  int64_t tokens;
  qkvfuse_dtype dtype;     /* activations, cos/sin and outputs (qkv is int32 for dequant) */
  int threads;             /* desc.num_threads; also the unfused path's and the copy's */
  qkvfuse_backend backend; /* of the fused operator */
  uint64_t seed;
  int page_slots; /* cache slots: 1 = each page holds consecutive tokens (pages in random order), 0 = a
                     random slot per token */
} bench_spec;

enum { BENCH_ROLES = 11, BENCH_SHARED = 6 };

typedef struct bench_case {
  bench_spec spec;
  const cli_device *dev;
  qkvfuse_desc desc;
  qkvfuse_plan *plan;
  const char *norm;                    /* model / model (1+g) / synthetic / none / omitted */
  size_t rotate_target;                /* the span the instances should cover (bench_case_make's) */
  int64_t instances;                   /* sets of per-call tensors, cycled through */
  size_t instance_bytes;               /* device memory of one set: instances * instance_bytes is rotated */
  size_t bytes;                        /* traffic of one call: every input read once + every output written once */
  qkvfuse_args *args;                  /* [instances] */
  qkvfuse_tensor *views;               /* [instances][BENCH_ROLES] */
  qkvfuse_tensor shared[BENCH_SHARED]; /* model parameters, one copy */
  void *slab[BENCH_ROLES];             /* device memory of each per-call tensor, all instances */
  void *shared_mem[BENCH_SHARED];
  void *scratch; /* the device's unfused path, NULL when it has none */
  size_t scratch_bytes;
  /* the copy baseline: copy_instances buffers of copy_bytes = bytes / 2 */
  void *copy_src, *copy_dst;
  size_t copy_bytes, copy_stride;
  int64_t copy_instances;
} bench_case;

/* Build a case; rotate_bytes is how much memory the instances together should
 * span (about twice the last-level cache): ceil(rotate_bytes / set size) sets,
 * at least 1 and at most 65536, so the span used (instances * instance_bytes,
 * copy_instances * 2 * copy_stride for the copy) is what a report must show.
 * @return 0, or -1 with a message in err. */
int bench_case_make(bench_case *c, const bench_spec *spec, const cli_device *dev, size_t rotate_bytes, char *err,
                    size_t errn);
void bench_case_free(bench_case *c);

#endif /* QKVFUSE_TOOLS_BENCH_CASE_H */
