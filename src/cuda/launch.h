/* Launchers of the fused kernel, one translation unit per input dtype (they
 * compile in parallel). */
#ifndef QKVFUSE_CUDA_LAUNCH_H
#define QKVFUSE_CUDA_LAUNCH_H

#include <cuda_runtime.h>

#include "cuda/params.h"
#include "qkvfuse.h"

/* Launch the instantiation for (input dtype, vector width, vectors per lane,
 * fast case):
 * the one dispatch point of the kernel family. */
qkvfuse_status qf_cuda_launch_fused(qkvfuse_dtype in, int vec, int nv, int fast, const qf_cu_params *P,
                                    unsigned blocks, size_t smem, cudaStream_t stream);

qkvfuse_status qf_cuda_launch_fused_f32(int vec, int nv, int fast, const qf_cu_params *P, unsigned blocks, size_t smem,
                                        cudaStream_t stream);
qkvfuse_status qf_cuda_launch_fused_f16(int vec, int nv, int fast, const qf_cu_params *P, unsigned blocks, size_t smem,
                                        cudaStream_t stream);
qkvfuse_status qf_cuda_launch_fused_bf16(int vec, int nv, int fast, const qf_cu_params *P, unsigned blocks, size_t smem,
                                         cudaStream_t stream);
qkvfuse_status qf_cuda_launch_fused_i32(int vec, int nv, int fast, const qf_cu_params *P, unsigned blocks, size_t smem,
                                        cudaStream_t stream);

#endif /* QKVFUSE_CUDA_LAUNCH_H */
