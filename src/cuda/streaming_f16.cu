// SPDX-License-Identifier: Apache-2.0
// Streaming kernel (fast.cuh) instantiations for __half input.
#include "cuda/streaming_launch.cuh"
#include "cuda/launch.h"

qkvfuse_status qf_cuda_launch_fast_f16(int lanes, int variant, const qf_cu_params *P, unsigned blocks, size_t smem,
                                   cudaStream_t stream) {
  return qf::launch_fast<__half>(lanes, variant, P, blocks, smem, stream);
}
