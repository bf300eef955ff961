// SPDX-License-Identifier: Apache-2.0
// The streaming kernel's forms (prefill.cuh, decode.cuh) instantiated for int32
// input with __nv_bfloat16 outputs.
#include "cuda/streaming_launch.cuh"
#include "cuda/launch.h"

qkvfuse_status qf_cuda_launch_streaming_i32_bf16(const qf_cuda_variant *v, const qf_cu_kernel_params *K,
                                                 cudaStream_t stream) {
  return qf::launch_streaming<__nv_bfloat16, true>(v, K, stream);
}
