// SPDX-License-Identifier: Apache-2.0
// general_kernel instantiations for __nv_bfloat16 input.
#include "cuda/general_launch.cuh"
#include "cuda/launch.h"

qkvfuse_status qf_cuda_launch_general_bf16(int vec, int nv, const qf_cu_params *P, unsigned blocks, size_t smem,
                                  cudaStream_t stream) {
  return qf::launch_general<__nv_bfloat16>(vec, nv, P, blocks, smem, stream);
}
