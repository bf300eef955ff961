// SPDX-License-Identifier: Apache-2.0
// The instantiations of the general kernel (general.cuh) for one input type,
// and the one that runs a variant (variant.h): 16-byte vectors with 1, 2 or
// 4 vectors per lane, and single elements with up to 16 per lane, which
// covers D up to 512.
#ifndef QKVFUSE_CUDA_GENERAL_LAUNCH_CUH
#define QKVFUSE_CUDA_GENERAL_LAUNCH_CUH

#include "core/error.h"
#include "cuda/general.cuh"
#include "cuda/launch.h"

namespace qf {

template <typename TIn>
qkvfuse_status launch_general(const qf_cuda_variant *v, const qf_cu_params *P, cudaStream_t stream) {
  constexpr int VMAX = 16 / (int)sizeof(TIn);
  void (*kernel)(const qf_cu_params) = nullptr;
  if (v->vec == VMAX) {
    switch (v->vecs_per_lane) {
      case 1: kernel = general_kernel<TIn, VMAX, 1>; break;
      case 2: kernel = general_kernel<TIn, VMAX, 2>; break;
      case 4:
        if constexpr (VMAX == 4) kernel = general_kernel<TIn, VMAX, 4>;
        break;
      default: break;
    }
  } else if (v->vec == 1) {
    switch (v->vecs_per_lane) {
      case 1: kernel = general_kernel<TIn, 1, 1>; break;
      case 2: kernel = general_kernel<TIn, 1, 2>; break;
      case 4: kernel = general_kernel<TIn, 1, 4>; break;
      case 8: kernel = general_kernel<TIn, 1, 8>; break;
      case 16: kernel = general_kernel<TIn, 1, 16>; break;
      default: break;
    }
  }
  if (!kernel)
    return qf_fail(QKVFUSE_ERROR_UNSUPPORTED, "cuda: no kernel for vector width %d x %d per lane", v->vec,
                   v->vecs_per_lane);
  return qf_cuda_start(reinterpret_cast<const void *>(kernel), v->blocks, kBlock, v->smem, stream, P, "general");
}

}  // namespace qf

#endif  // QKVFUSE_CUDA_GENERAL_LAUNCH_CUH
