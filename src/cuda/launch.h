/* SPDX-License-Identifier: Apache-2.0 */
/* Launchers of the fused operator's kernels, one translation unit per input
 * dtype and kernel (they compile in parallel). */
#ifndef QKVFUSE_CUDA_LAUNCH_H
#define QKVFUSE_CUDA_LAUNCH_H

#include <cuda_runtime.h>

#include "cuda/params.h"
#include "cuda/variant.h"
#include "qkvfuse.h"

/* Launches the kernel of variant v (choose.cu) with its parameters (K's
 * member of v's kernel): the one dispatch point of the kernels, to the
 * launcher of v's kernel and input dtype. */
qkvfuse_status qf_cuda_launch(const qf_cuda_variant *v, const qf_cu_kernel_params *K, cudaStream_t stream);

/* Launches `kernel` (a __global__ function taking its parameter struct by
 * value, *params) and returns its launch status, naming the kernel in the
 * message. With pdl the launch is a programmatic dependent launch: the grid may start
 * while the previous kernel of the stream finishes, and every kernel of the
 * family waits for that kernel (device/ptx.cuh: grid_dependency_wait) before
 * its first global memory access, so stream order holds as before; only the
 * launch latency overlaps. A kernel's first launch with dynamic shared memory
 * on a device first lets it take up to the device's opt-in limit per block. */
qkvfuse_status qf_cuda_start(const void *kernel, unsigned blocks, unsigned threads, size_t smem, cudaStream_t stream,
                             const void *params, bool pdl, const char *name);

/* The status of the launch just made (cudaGetLastError), naming the kernel. */
qkvfuse_status qf_cuda_launched(const char *kernel);

/* The instantiation of variant v for each input dtype (general_*.cu,
 * streaming_*.cu; int32 input to the streaming kernel: for each dtype of its
 * outputs). */
qkvfuse_status qf_cuda_launch_general_f32(const qf_cuda_variant *v, const qf_cu_kernel_params *K, cudaStream_t stream);
qkvfuse_status qf_cuda_launch_general_f16(const qf_cuda_variant *v, const qf_cu_kernel_params *K, cudaStream_t stream);
qkvfuse_status qf_cuda_launch_general_bf16(const qf_cuda_variant *v, const qf_cu_kernel_params *K, cudaStream_t stream);
qkvfuse_status qf_cuda_launch_general_i32(const qf_cuda_variant *v, const qf_cu_kernel_params *K, cudaStream_t stream);
qkvfuse_status qf_cuda_launch_streaming_f16(const qf_cuda_variant *v, const qf_cu_kernel_params *K,
                                            cudaStream_t stream);
qkvfuse_status qf_cuda_launch_streaming_bf16(const qf_cuda_variant *v, const qf_cu_kernel_params *K,
                                             cudaStream_t stream);
qkvfuse_status qf_cuda_launch_streaming_i32_f16(const qf_cuda_variant *v, const qf_cu_kernel_params *K,
                                                cudaStream_t stream);
qkvfuse_status qf_cuda_launch_streaming_i32_bf16(const qf_cuda_variant *v, const qf_cu_kernel_params *K,
                                                 cudaStream_t stream);

/* One kernel of each family qkvfuse_run dispatches to, the general kernel
 * (general_f32.cu) and the streaming kernel (streaming_bf16.cu), for the
 * plan's check that this build holds an image its device can run (every
 * kernel translation unit is built for the same CMAKE_CUDA_ARCHITECTURES, so
 * one kernel answers for its family). */
const void *qf_cuda_general_probe(void);
const void *qf_cuda_streaming_probe(void);

#endif /* QKVFUSE_CUDA_LAUNCH_H */
