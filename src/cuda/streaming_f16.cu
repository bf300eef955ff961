// SPDX-License-Identifier: Apache-2.0
// Streaming kernel (streaming.cuh) instantiations for __half input.
#include "cuda/streaming_launch.cuh"
#include "cuda/launch.h"

qkvfuse_status qf_cuda_launch_streaming_f16(int lanes, int variant, const qf_cu_params *P, unsigned blocks, size_t smem,
                                   cudaStream_t stream) {
  return qf::launch_streaming<__half>(lanes, variant, P, blocks, smem, stream);
}
