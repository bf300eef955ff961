// SPDX-License-Identifier: Apache-2.0
// general_kernel instantiations for float input.
#include "cuda/general_launch.cuh"
#include "cuda/launch.h"

qkvfuse_status qf_cuda_launch_general_f32(int vec, int nv, const qf_cu_params *P, unsigned blocks, size_t smem,
                                  cudaStream_t stream) {
  return qf::launch_general<float>(vec, nv, P, blocks, smem, stream);
}

const void *qf_cuda_general_probe(void) { return reinterpret_cast<const void *>(qf::general_kernel<float, 4, 1>); }
