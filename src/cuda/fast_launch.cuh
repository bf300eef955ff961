// The instantiations of the streaming kernel (fast.cuh) for one 16-bit input
// type: L = 2 .. 32 lanes per head (D = 32 .. 512), neox or interleaved
// pairs, cos/sin per pair or given per element (launch.h: QF_FAST_*).
#ifndef QKVFUSE_CUDA_FAST_LAUNCH_CUH
#define QKVFUSE_CUDA_FAST_LAUNCH_CUH

#include "core/error.h"
#include "cuda/fast.cuh"
#include "cuda/launch.h"

namespace qf {

template <typename T, bool INTER, bool SEP>
static void (*fast_for(int lanes))(const qf_cu_params) {
  switch (lanes) {
    case 2: return fast_kernel<T, 2, INTER, SEP>;
    case 4: return fast_kernel<T, 4, INTER, SEP>;
    case 8: return fast_kernel<T, 8, INTER, SEP>;
    case 16: return fast_kernel<T, 16, INTER, SEP>;
    case 32: return fast_kernel<T, 32, INTER, SEP>;
    default: return nullptr;
  }
}

template <typename T>
qkvfuse_status launch_fast(int lanes, int variant, const qf_cu_params *P, unsigned blocks, size_t smem,
                           cudaStream_t stream) {
  void (*kernel)(const qf_cu_params) = nullptr;
  switch (variant & (QF_FAST_INTERLEAVED | QF_FAST_SEPARATE)) {
    case 0: kernel = fast_for<T, false, false>(lanes); break;
    case QF_FAST_INTERLEAVED: kernel = fast_for<T, true, false>(lanes); break;
    case QF_FAST_SEPARATE: kernel = fast_for<T, false, true>(lanes); break;
    default: kernel = fast_for<T, true, true>(lanes); break;
  }
  if (!kernel) return qf_fail(QKVFUSE_ERROR_UNSUPPORTED, "cuda: no streaming kernel for %d lanes per head", lanes);
  return qf_cuda_start(reinterpret_cast<const void *>(kernel), blocks, kFastBlock, smem, stream, P, "streaming");
}

}  // namespace qf

#endif  // QKVFUSE_CUDA_FAST_LAUNCH_CUH
