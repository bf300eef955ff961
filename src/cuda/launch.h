/* SPDX-License-Identifier: Apache-2.0 */
/* Launchers of the fused operator's kernels, one translation unit per input dtype and
 * kernel (they compile in parallel). */
#ifndef QKVFUSE_CUDA_LAUNCH_H
#define QKVFUSE_CUDA_LAUNCH_H

#include <cuda_runtime.h>

#include "cuda/params.h"
#include "qkvfuse.h"

/* Variants of the streaming kernel (bits of `variant`). */
enum {
  QF_FAST_INTERLEAVED = 1, /* RoPE pairs (2i, 2i+1), else neox */
  QF_FAST_SEPARATE = 2,    /* cos/sin given per token at full length (COS_SIN source) */
  QF_FAST_DECODE = 4,      /* the decode form: one (token, head) per group, one pass */
  QF_FAST_DECODE_NARROW = 8,     /* with QF_FAST_DECODE: one 16-byte vector per lane (else two) */
  QF_FAST_PRELOAD = 16,       /* with QF_FAST_DECODE_NARROW: norm weights and cache scales speculated before the grid wait */
  QF_FAST_HOT = 32,        /* the call an inference engine makes, its dtypes and cache geometry compiled in
                              (backend.cu: engine_call; streaming.cuh: kEngine) */
  QF_FAST_QUANT = 64       /* with QF_FAST_HOT, prefill form: the call writes a quantized cache (streaming.cuh:
                              kEngineQuant) */
};

/* The general kernel (general.cuh) for (input dtype, vector width, vectors per
 * lane), or, when lanes > 0, the streaming kernel (streaming.cuh) for (16-bit input
 * dtype, lanes per head, variant): the one dispatch point of the kernel
 * family. */
qkvfuse_status qf_cuda_launch(qkvfuse_dtype in, int vec, int nv, int lanes, int variant, const qf_cu_params *P,
                              unsigned blocks, size_t smem, cudaStream_t stream);

/* Launches `kernel` (a __global__ function taking one qf_cu_params by value)
 * and returns its launch status, naming the kernel in the message. With
 * P->pdl the launch is a programmatic dependent launch: the grid may start
 * while the previous kernel of the stream finishes, and every kernel of the
 * family waits for that kernel (griddepcontrol.wait, general.cuh) before its
 * first global memory access, so stream order holds as before; only the
 * launch latency overlaps. */
qkvfuse_status qf_cuda_start(const void *kernel, unsigned blocks, unsigned threads, size_t smem, cudaStream_t stream,
                             const qf_cu_params *P, const char *name);

/* The status of the launch just made (cudaGetLastError), naming the kernel. */
qkvfuse_status qf_cuda_launched(const char *kernel);

qkvfuse_status qf_cuda_launch_general_f32(int vec, int nv, const qf_cu_params *P, unsigned blocks, size_t smem,
                                        cudaStream_t stream);
qkvfuse_status qf_cuda_launch_general_f16(int vec, int nv, const qf_cu_params *P, unsigned blocks, size_t smem,
                                        cudaStream_t stream);
qkvfuse_status qf_cuda_launch_general_bf16(int vec, int nv, const qf_cu_params *P, unsigned blocks, size_t smem,
                                         cudaStream_t stream);
qkvfuse_status qf_cuda_launch_general_i32(int vec, int nv, const qf_cu_params *P, unsigned blocks, size_t smem,
                                        cudaStream_t stream);
qkvfuse_status qf_cuda_launch_streaming_f16(int lanes, int variant, const qf_cu_params *P, unsigned blocks, size_t smem,
                                       cudaStream_t stream);
qkvfuse_status qf_cuda_launch_streaming_bf16(int lanes, int variant, const qf_cu_params *P, unsigned blocks, size_t smem,
                                        cudaStream_t stream);

/* One kernel of each family qkvfuse_run dispatches to, the general kernel
 * (general_f32.cu) and the streaming kernel (streaming_bf16.cu), for the plan's
 * check that this build holds an image its device can run (every kernel
 * translation unit is built for the same CMAKE_CUDA_ARCHITECTURES, so one
 * kernel answers for its family). */
const void *qf_cuda_general_probe(void);
const void *qf_cuda_streaming_probe(void);

#endif /* QKVFUSE_CUDA_LAUNCH_H */
