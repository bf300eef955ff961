// SPDX-License-Identifier: Apache-2.0
// The streaming kernel's forms (prefill.cuh, decode.cuh) instantiated for int32
// input with __half outputs.
#include "cuda/streaming_launch.cuh"
#include "cuda/launch.h"

qkvfuse_status qf_cuda_launch_streaming_i32_f16(const qf_cuda_variant *v, const qf_cu_kernel_params *K,
                                                cudaStream_t stream) {
  return qf::launch_streaming<__half, true>(v, K, stream);
}
