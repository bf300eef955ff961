// SPDX-License-Identifier: Apache-2.0
// The streaming kernel (prefill.cuh, decode.cuh) instantiated for __nv_bfloat16 input.
#include "cuda/streaming_launch.cuh"
#include "cuda/launch.h"

qkvfuse_status qf_cuda_launch_streaming_bf16(const qf_cuda_variant *v, const qf_cu_kernel_params *K,
                                             cudaStream_t stream) {
  return qf::launch_streaming<__nv_bfloat16>(v, K, stream);
}

const void *qf_cuda_streaming_probe(void) {
  return reinterpret_cast<const void *>(qf::prefill_kernel<__nv_bfloat16, 8, false, false, 0>);
}
