// SPDX-License-Identifier: Apache-2.0
// general_kernel instantiations for int32_t input.
#include "cuda/general_launch.cuh"
#include "cuda/launch.h"

qkvfuse_status qf_cuda_launch_general_i32(int vec, int nv, const qf_cu_params *P, unsigned blocks, size_t smem,
                                  cudaStream_t stream) {
  return qf::launch_general<int32_t>(vec, nv, P, blocks, smem, stream);
}
