/* Launchers of the fused kernels, one translation unit per input dtype and
 * kernel (they compile in parallel). */
#ifndef QKVFUSE_CUDA_LAUNCH_H
#define QKVFUSE_CUDA_LAUNCH_H

#include <cuda_runtime.h>

#include "cuda/params.h"
#include "qkvfuse.h"

/* Variants of the streaming kernel (bits of `variant`). */
enum {
  QF_FAST_INTERLEAVED = 1, /* RoPE pairs (2i, 2i+1), else neox */
  QF_FAST_SEPARATE = 2     /* cos/sin given per token at full length (COS_SIN source) */
};

/* The general kernel (fused.cuh) for (input dtype, vector width, vectors per
 * lane), or, when lanes > 0, the streaming kernel (fast.cuh) for (16-bit input
 * dtype, lanes per head, variant): the one dispatch point of the kernel
 * family. */
qkvfuse_status qf_cuda_launch(qkvfuse_dtype in, int vec, int nv, int lanes, int variant, const qf_cu_params *P,
                              unsigned blocks, size_t smem, cudaStream_t stream);

/* The status of the launch just made (cudaGetLastError), naming the kernel. */
qkvfuse_status qf_cuda_launched(const char *kernel);

qkvfuse_status qf_cuda_launch_fused_f32(int vec, int nv, const qf_cu_params *P, unsigned blocks, size_t smem,
                                        cudaStream_t stream);
qkvfuse_status qf_cuda_launch_fused_f16(int vec, int nv, const qf_cu_params *P, unsigned blocks, size_t smem,
                                        cudaStream_t stream);
qkvfuse_status qf_cuda_launch_fused_bf16(int vec, int nv, const qf_cu_params *P, unsigned blocks, size_t smem,
                                         cudaStream_t stream);
qkvfuse_status qf_cuda_launch_fused_i32(int vec, int nv, const qf_cu_params *P, unsigned blocks, size_t smem,
                                        cudaStream_t stream);
qkvfuse_status qf_cuda_launch_fast_f16(int lanes, int variant, const qf_cu_params *P, unsigned blocks, size_t smem,
                                       cudaStream_t stream);
qkvfuse_status qf_cuda_launch_fast_bf16(int lanes, int variant, const qf_cu_params *P, unsigned blocks, size_t smem,
                                        cudaStream_t stream);

#endif /* QKVFUSE_CUDA_LAUNCH_H */
