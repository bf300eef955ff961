/* SPDX-License-Identifier: Apache-2.0 */
/* The unfused path: the chain of SPEC.md run as separate stages, the way an
 * engine without fusion runs it (vLLM's separate split, rms_norm, rotary and
 * reshape_and_cache kernels):
 *
 *   split (or dequant) -> rmsnorm q -> rmsnorm k -> rope q -> (quantize q) ->
 *   rope k -> copy v -> quantize k -> quantize v -> scatter k -> scatter v
 *
 * Each stage is one full pass over all T tokens, reading its input from and
 * writing its result to memory buffers held in the I/O dtype (problem.h) or the
 * cache dtype, so the traffic is what a real unfused path moves. It is the
 * baseline the fused operator is measured against, and, because every stage
 * calls the scalar math of stages.h and rounds to the I/O dtype between
 * stages, its results are bit-identical to qkvfuse_run with
 * QKVFUSE_ROUNDING_UNFUSED_PARITY on the reference backend.
 *
 * Internal: used by the CLI benchmark and the parity test. */
#ifndef QKVFUSE_REFERENCE_UNFUSED_H
#define QKVFUSE_REFERENCE_UNFUSED_H

#include <stddef.h>
#include <stdint.h>

#include "core/problem.h"
#include "qkvfuse.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The math of the stages that compute (the others are copies), each over
 * tokens [t0, t1). qf_unfused_run uses the reference's scalar stages.h; an
 * optimized backend may pass its own (the CPU backend's SIMD kernels, so that
 * the benchmark compares fusion against no fusion at equal code quality).
 * Any set must round exactly as the scalar one for the parity guarantee. */
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

/** @return bytes of scratch qf_unfused_run needs for problem p: the q, k and v
 *  buffers [T, N*D] in the I/O dtype and the quantized k and v buffers
 *  [T, Nkv*D] in the cache dtypes (when caches are present), 64-byte aligned. */
size_t qf_unfused_scratch_bytes(const qf_problem *p);

/**
 * Run the chain stage by stage over a validated problem (from qf_resolve).
 * Threads: p->desc->num_threads (0 or 1: the calling thread only), at most one
 * per 16 tokens; each stage splits the tokens among them and all threads finish
 * a stage before the next starts (one kernel per stage). With several threads,
 * tokens that share a slot race for it, as they would on a GPU.
 * @param scratch qf_unfused_scratch_bytes(p) bytes, any alignment.
 * @return QKVFUSE_SUCCESS; QKVFUSE_ERROR_UNSUPPORTED unless qkv is int32 or has
 *  the I/O dtype (problem.h: io_dtype) and k_out/v_out (when present) have it;
 *  QKVFUSE_ERROR_NULL_POINTER for a NULL problem or missing scratch.
 */
qkvfuse_status qf_unfused_run(const qf_problem *p, void *scratch);

/** qf_unfused_run with the stage math of `kernels` (NULL: the scalar stages). */
qkvfuse_status qf_unfused_run_with(const qf_problem *p, void *scratch, const qf_unfused_kernels *kernels);

#ifdef __cplusplus
}
#endif

#endif /* QKVFUSE_REFERENCE_UNFUSED_H */
