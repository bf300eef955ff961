// SPDX-License-Identifier: Apache-2.0
// The general kernel (general.cuh) instantiated for int32_t input.
#include "cuda/general_launch.cuh"
#include "cuda/launch.h"

qkvfuse_status qf_cuda_launch_general_i32(const qf_cuda_variant *v, const qf_cu_kernel_params *K, cudaStream_t stream) {
  return qf::launch_general<int32_t>(v, K, stream);
}

