/* SPDX-License-Identifier: Apache-2.0 */
/* The stage kernels an unfused chain calls: each stage of SPEC.md's chain
 * over whole buffers, one table per instruction set of the CPU backend
 * (qf_cpu_kernels.unfused, from the kernels.h template's kernel_unfused.h).
 * The benchmark's unfused baseline (tools/unfused.c) runs its separate passes
 * with them, so that fusion is measured against no fusion at equal code
 * quality; it has a scalar table of its own for the other backends. Any table
 * rounds exactly as the reference's scalar stages, for unfused-parity. */
#ifndef QKVFUSE_CPU_UNFUSED_STAGES_H
#define QKVFUSE_CPU_UNFUSED_STAGES_H

#include <stdint.h>

#include "core/problem.h"
#include "qkvfuse.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The math of the stages that compute (the others are copies), each over
 * tokens [t0, t1). */
typedef struct qf_unfused_kernels {
  /* int32 qkv: columns [c0, c0 + dst->cols) dequantized into dst, rounded once to its dtype */
  void (*dequant)(const qf_problem *p, int64_t c0, const qf_mat *dst, int64_t t0, int64_t t1);
  /* RMSNorm of every head of m, in place (rounded to m's dtype) */
  void (*norm)(const qf_problem *p, const qf_mat *m, const qf_vec *gamma, const qf_vec *beta, int64_t t0,
               int64_t t1);
  /* RoPE (p->R > 0) of every head of src into dst (may be src) and dst2 (data NULL: absent) */
  void (*rope)(const qf_problem *p, const qf_mat *src, const qf_mat *dst, const qf_mat *dst2, int64_t t0,
               int64_t t1);
  /* quantize (or round, for a float dst) src into dst, channel = column, scale element column / group
     (element 0 of a one-element scale) */
  void (*quant)(const qf_mat *src, const qf_mat *dst, qkvfuse_quant_mode mode, const qf_vec *scale,
                const qf_vec *offset, int64_t group, int64_t t0, int64_t t1);
} qf_unfused_kernels;

#ifdef __cplusplus
}
#endif

#endif /* QKVFUSE_CPU_UNFUSED_STAGES_H */
