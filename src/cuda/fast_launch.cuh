// The instantiations of the streaming kernel (fast.cuh) for one 16-bit input
// type: L = 2 .. 32 lanes per head (D = 32 .. 512), neox or interleaved pairs.
#ifndef QKVFUSE_CUDA_FAST_LAUNCH_CUH
#define QKVFUSE_CUDA_FAST_LAUNCH_CUH

#include "core/error.h"
#include "cuda/fast.cuh"

namespace qf {

template <typename T, bool INTER>
static void (*fast_for(int lanes))(const qf_cu_params) {
  switch (lanes) {
    case 2: return fast_kernel<T, 2, INTER>;
    case 4: return fast_kernel<T, 4, INTER>;
    case 8: return fast_kernel<T, 8, INTER>;
    case 16: return fast_kernel<T, 16, INTER>;
    case 32: return fast_kernel<T, 32, INTER>;
    default: return nullptr;
  }
}

template <typename T>
qkvfuse_status launch_fast(int lanes, int interleaved, const qf_cu_params *P, unsigned blocks, cudaStream_t stream) {
  void (*kernel)(const qf_cu_params) = interleaved ? fast_for<T, true>(lanes) : fast_for<T, false>(lanes);
  if (!kernel) return qf_fail(QKVFUSE_ERROR_UNSUPPORTED, "cuda: no streaming kernel for %d lanes per head", lanes);
  kernel<<<blocks, kFastBlock, 0, stream>>>(*P);
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess)
    return qf_fail(QKVFUSE_ERROR_CUDA, "cuda: launching the streaming kernel failed: %s (%s)", cudaGetErrorName(e),
                   cudaGetErrorString(e));
  return QKVFUSE_SUCCESS;
}

}  // namespace qf

#endif  // QKVFUSE_CUDA_FAST_LAUNCH_CUH
