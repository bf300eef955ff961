// The instantiations of the streaming kernel (fast.cuh) for one 16-bit input
// type: L = 2 .. 32 lanes per head (D = 32 .. 512), neox or interleaved
// pairs, cos/sin per pair or given per element, prefill or decode form
// (launch.h: QF_FAST_*).
#ifndef QKVFUSE_CUDA_FAST_LAUNCH_CUH
#define QKVFUSE_CUDA_FAST_LAUNCH_CUH

#include "core/error.h"
#include "cuda/fast.cuh"
#include "cuda/launch.h"

namespace qf {

template <typename T, int L, bool INTER, bool SEP>
static void (*fast_form(bool decode))(const qf_cu_params) {
  return decode ? decode_kernel<T, L, INTER, SEP> : fast_kernel<T, L, INTER, SEP>;
}

template <typename T, bool INTER, bool SEP>
static void (*fast_for(int lanes, bool decode))(const qf_cu_params) {
  switch (lanes) {
    case 2: return fast_form<T, 2, INTER, SEP>(decode);
    case 4: return fast_form<T, 4, INTER, SEP>(decode);
    case 8: return fast_form<T, 8, INTER, SEP>(decode);
    case 16: return fast_form<T, 16, INTER, SEP>(decode);
    case 32: return fast_form<T, 32, INTER, SEP>(decode);
    default: return nullptr;
  }
}

template <typename T>
qkvfuse_status launch_fast(int lanes, int variant, const qf_cu_params *P, unsigned blocks, size_t smem,
                           cudaStream_t stream) {
  void (*kernel)(const qf_cu_params) = nullptr;
  const bool decode = (variant & QF_FAST_DECODE) != 0;
  switch (variant & (QF_FAST_INTERLEAVED | QF_FAST_SEPARATE)) {
    case 0: kernel = fast_for<T, false, false>(lanes, decode); break;
    case QF_FAST_INTERLEAVED: kernel = fast_for<T, true, false>(lanes, decode); break;
    case QF_FAST_SEPARATE: kernel = fast_for<T, false, true>(lanes, decode); break;
    default: kernel = fast_for<T, true, true>(lanes, decode); break;
  }
  if (!kernel) return qf_fail(QKVFUSE_ERROR_UNSUPPORTED, "cuda: no streaming kernel for %d lanes per head", lanes);
  return qf_cuda_start(reinterpret_cast<const void *>(kernel), blocks, kFastBlock, smem, stream, P, "streaming");
}

}  // namespace qf

#endif  // QKVFUSE_CUDA_FAST_LAUNCH_CUH
