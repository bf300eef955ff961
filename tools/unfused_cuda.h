/* SPDX-License-Identifier: Apache-2.0 */
/* The unfused GPU baseline (unfused.cu): for the benchmark and parity checks. */
#ifndef QKVFUSE_CUDA_UNFUSED_H
#define QKVFUSE_CUDA_UNFUSED_H

#include <stddef.h>

#include "core/plan.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Device scratch the unfused path needs for problem p (bytes). */
size_t qf_cuda_unfused_scratch_bytes(const qf_problem *p);

/* Run the chain as separate kernels on `stream`, with intermediate tensors in
 * `scratch` (device memory of qf_cuda_unfused_scratch_bytes). Positions and
 * slots are assumed valid. QKVFUSE_ERROR_UNSUPPORTED outside its envelope. */
qkvfuse_status qf_cuda_unfused_run(const qkvfuse_plan *plan, const qf_problem *p, void *scratch, void *stream);

/* The copy baseline of the benchmark: bytes from src to dst (device memory,
 * 16-byte aligned) with a 16-byte-per-access kernel, on `stream`. */
qkvfuse_status qf_cuda_copy_bytes(void *dst, const void *src, size_t bytes, void *stream);

#ifdef __cplusplus
}
#endif

#endif /* QKVFUSE_CUDA_UNFUSED_H */
