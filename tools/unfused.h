/* SPDX-License-Identifier: Apache-2.0 */
/* The benchmark's unfused baseline: the chain of SPEC.md run as separate stages, the way an
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
 * calls the reference's scalar math (reference/stages.h) or a backend's stage
 * kernels of the same math (cpu/unfused_stages.h) and rounds to the I/O dtype
 * between stages, its results are bit-identical to qkvfuse_run with
 * QKVFUSE_ROUNDING_UNFUSED_PARITY on the reference backend.
 *
 * Not part of the library: the benchmark's code, on the library's internal
 * headers (the resolved problem, the stage math). */
#ifndef QKVFUSE_TOOLS_UNFUSED_H
#define QKVFUSE_TOOLS_UNFUSED_H

#include <stddef.h>
#include <stdint.h>

#include "core/problem.h"
#include "cpu/unfused_stages.h"
#include "qkvfuse.h"

#ifdef __cplusplus
extern "C" {
#endif

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

#endif /* QKVFUSE_TOOLS_UNFUSED_H */
