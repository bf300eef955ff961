/* SPDX-License-Identifier: Apache-2.0 */
/* One benchmark case: a preset's case of the test kit (an operator variant on
 * its shapes at T tokens, tk_preset_spec), built by the kit's case builder,
 * as a plan and enough sets of its per-call tensors on the device that
 * cycling through them streams past the last-level cache. */
#ifndef QKVFUSE_TOOLS_BENCH_SET_H
#define QKVFUSE_TOOLS_BENCH_SET_H

#include <stddef.h>
#include <stdint.h>

#include "case.h"
#include "device.h"
#include "presets.h"
#include "qkvfuse.h"

typedef struct bench_spec {
  tk_preset_op op;
  const tk_preset *preset;
  int64_t tokens;
  qkvfuse_dtype dtype;     /* activations, cos/sin and outputs (qkv is int32 for dequant) */
  int threads;             /* desc.num_threads; also the unfused path's and the copy's */
  qkvfuse_backend backend; /* of the fused operator */
  uint64_t seed;
  int page_slots; /* cache slots: 1 = each page holds consecutive tokens (pages in random order), 0 = a
                     random slot per token */
} bench_spec;

typedef struct bench_case {
  bench_spec spec;
  const cli_device *dev;
  const tk_device *mem;   /* the kit's device layer for dev: memory and transfers */
  tk_case kc;             /* the kit's case: host bytes of the last set built, the model parameters */
  qkvfuse_desc desc;
  qkvfuse_plan *plan;
  const char *norm;       /* model / model (1+g) / synthetic / none / omitted */
  size_t rotate_target;   /* the span the sets should cover (bench_case_make's) */
  int64_t instances;      /* sets of per-call tensors, cycled through */
  size_t instance_bytes;  /* device memory of one set: instances * instance_bytes is rotated */
  size_t bytes;           /* traffic of one call: every input read once + every output written once */
  /* the call's arguments: one set of descriptors, pointed at set i before each call
   * (bench_case_args), so they are in cache as a caller's are while the tensors rotate;
   * args and moved point into views, so a bench_case is never copied */
  qkvfuse_args args;
  qkvfuse_tensor views[TK_NSLOT];
  int nmoved;                          /* descriptors whose tensor is per set */
  unsigned char *moved_base[TK_NSLOT]; /* their data in set 0 */
  size_t moved_step[TK_NSLOT];         /* and the bytes between sets */
  qkvfuse_tensor *moved[TK_NSLOT];
  uint32_t *flags_base;                /* args.error_flags in set 0, NULL when absent */
  void *slab[TK_NSLOT + 1];   /* per-call buffers, all sets (the kit's buffer index) */
  size_t stride[TK_NSLOT + 1]; /* their size in one set, 64-byte aligned; 0: shared or absent */
  void *shared[TK_NSLOT + 1]; /* model parameters, one copy */
  void *scratch;              /* the device's unfused path, NULL when it has none */
  size_t scratch_bytes;
  /* the copy baseline: copy_instances buffers of copy_bytes = bytes / 2 */
  void *copy_src, *copy_dst;
  size_t copy_bytes, copy_stride;
  int64_t copy_instances;
} bench_case;

/* Build a case; rotate_bytes is how much memory the sets together should span
 * (about twice the last-level cache): ceil(rotate_bytes / set size) sets, at
 * least 1 and at most 65536, each with its own positions and slots, so the
 * span used (instances * instance_bytes, copy_instances * 2 * copy_stride for
 * the copy) is what a report must show. @return 0, or -1 with a message in err. */
int bench_case_make(bench_case *c, const bench_spec *spec, const cli_device *dev, size_t rotate_bytes, char *err,
                    size_t errn);

/* The fused operator on the last set built, checked by the kit against its
 * float64 oracle (every output and written cache element within SPEC's
 * tolerances, every other byte untouched); the set's initial bytes are
 * uploaded again first. @return 0, or -1 with the first failure in err. */
int bench_case_check(bench_case *c, char *err, size_t errn);
/* The benchmark checks the cases of at most this many tokens: beyond, the
 * oracle would take longer than the case's measurements. */
#define BENCH_CHECK_MAX_TOKENS 512

/* The arguments of a call on set i (0 <= i < instances). */
const qkvfuse_args *bench_case_args(bench_case *c, int64_t i);

void bench_case_free(bench_case *c);

#endif /* QKVFUSE_TOOLS_BENCH_SET_H */
