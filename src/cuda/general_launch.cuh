// SPDX-License-Identifier: Apache-2.0
// The instantiations of the general kernel (general.cuh) for one input type,
// and the one that runs a variant (variant.h): 16-byte vectors with 1, 2, 4
// or (4-byte types) 8 vectors per lane, and single elements with up to 32 per
// lane, which covers D up to 1024 (QF_MAX_HEAD_DIM). The instantiations of 32
// elements per lane serve exactly D > 512; their shared memory can pass the
// default 48 KB (general_smem_bytes: about 56 KB at D = R = 1024), which their
// first launch on a device allows them (launch.cu: qf_cuda_start).
#ifndef QKVFUSE_CUDA_GENERAL_LAUNCH_CUH
#define QKVFUSE_CUDA_GENERAL_LAUNCH_CUH

#include "core/error.h"
#include "cuda/general.cuh"
#include "cuda/launch.h"

namespace qf {

// The instantiations for D > 512: 32 elements per lane, single or in 16-byte vectors.
template <typename TIn>
constexpr int kWideVectors = 32 / (16 / (int)sizeof(TIn));

template <typename TIn>
qkvfuse_status launch_general(const qf_cuda_variant *v, const qf_cu_kernel_params *K, cudaStream_t stream) {
  constexpr int VMAX = 16 / (int)sizeof(TIn);
  void (*kernel)(const qf_cu_general_params) = nullptr;
  if (v->vec == VMAX) {
    switch (v->vecs_per_lane) {
      case 1: kernel = general_kernel<TIn, VMAX, 1>; break;
      case 2: kernel = general_kernel<TIn, VMAX, 2>; break;
      case 4: kernel = general_kernel<TIn, VMAX, 4>; break; /* 16-bit types: D > 512 only */
      case 8:
        if constexpr (VMAX == 4) kernel = general_kernel<TIn, VMAX, 8>; /* D > 512 only */
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
      case 32: kernel = general_kernel<TIn, 1, 32>; break; /* D > 512 only */
      default: break;
    }
  }
  if (!kernel)
    return qf_fail(QKVFUSE_ERROR_UNSUPPORTED, "cuda: no kernel for vector width %d x %d per lane", v->vec,
                   v->vecs_per_lane);
  return qf_cuda_start(reinterpret_cast<const void *>(kernel), v->blocks, kBlock, v->smem, stream, &K->general, v->pdl,
                       "general");
}

}  // namespace qf

#endif  // QKVFUSE_CUDA_GENERAL_LAUNCH_CUH
