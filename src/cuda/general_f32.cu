// SPDX-License-Identifier: Apache-2.0
// The general kernel (general.cuh) instantiated for float input.
#include "cuda/general_launch.cuh"
#include "cuda/launch.h"

qkvfuse_status qf_cuda_launch_general_f32(const qf_cuda_variant *v, const qf_cu_kernel_params *K, cudaStream_t stream) {
  return qf::launch_general<float>(v, K, stream);
}

const void *qf_cuda_general_probe(void) { return reinterpret_cast<const void *>(qf::general_kernel<float, 4, 1>); }
