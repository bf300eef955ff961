// SPDX-License-Identifier: Apache-2.0
// The instantiations of the streaming kernel (streaming.cuh) for one 16-bit input
// type: neox or interleaved pairs, cos/sin per pair or given per element,
// and L lanes per head: the prefill form for L = prefill_lanes(D) (2 .. 32 and
// 6; D = 32 .. 512), the decode form with two vectors per lane for L = 2 ..
// 32 and with one for L = 4 .. 32 (decode_lanes; launch.h: QF_FAST_*); each
// also with its call's dtypes and cache geometry as constants (QF_FAST_HOT),
// cos/sin per pair.
#ifndef QKVFUSE_CUDA_FAST_LAUNCH_CUH
#define QKVFUSE_CUDA_FAST_LAUNCH_CUH

#include "core/error.h"
#include "cuda/decode.cuh"
#include "cuda/prefill.cuh"
#include "cuda/launch.h"

namespace qf {

template <typename T, int L, bool INTERLEAVED, bool COS_SIN_ROWS, int ENGINE>
static void (*streaming_form(int variant))(const qf_cu_params) {
  constexpr bool pow2 = (L & (L - 1)) == 0;
  if (!(variant & QF_FAST_DECODE)) {
    if constexpr (ENGINE != 0) {
      if (variant & QF_FAST_QUANT) return prefill_kernel<T, L, INTERLEAVED, COS_SIN_ROWS, ENGINE | kEngineQuant>;
    }
    return prefill_kernel<T, L, INTERLEAVED, COS_SIN_ROWS, ENGINE>;
  }
  if constexpr (pow2 && L >= 4) {
    if (variant & QF_FAST_DECODE_NARROW)
      return variant & QF_FAST_PRELOAD ? decode_kernel<T, L, 1, INTERLEAVED, COS_SIN_ROWS, true, ENGINE ? ENGINE | kEngineCache : 0>
                                    : decode_kernel<T, L, 1, INTERLEAVED, COS_SIN_ROWS, false, ENGINE>;
  }
  if constexpr (pow2) {
    if (!(variant & QF_FAST_DECODE_NARROW)) return decode_kernel<T, L, 2, INTERLEAVED, COS_SIN_ROWS, false, ENGINE>;
  }
  return nullptr;
}

// QF_FAST_HOT: the kernels that know their call (streaming.cuh: kEngine; cos/sin
// from a cache, so not COS_SIN_ROWS).
template <typename T, int L, bool INTERLEAVED, bool COS_SIN_ROWS>
static void (*streaming_form(int variant))(const qf_cu_params) {
  if constexpr (!COS_SIN_ROWS) {
    if (variant & QF_FAST_HOT) return streaming_form<T, L, INTERLEAVED, COS_SIN_ROWS, kEngine>(variant);
  }
  return streaming_form<T, L, INTERLEAVED, COS_SIN_ROWS, 0>(variant);
}

template <typename T, bool INTERLEAVED, bool COS_SIN_ROWS>
static void (*streaming_for(int lanes, int variant))(const qf_cu_params) {
  switch (lanes) {
    case 2: return streaming_form<T, 2, INTERLEAVED, COS_SIN_ROWS>(variant);
    case 4: return streaming_form<T, 4, INTERLEAVED, COS_SIN_ROWS>(variant);
    case 6: return streaming_form<T, 6, INTERLEAVED, COS_SIN_ROWS>(variant);
    case 8: return streaming_form<T, 8, INTERLEAVED, COS_SIN_ROWS>(variant);
    case 16: return streaming_form<T, 16, INTERLEAVED, COS_SIN_ROWS>(variant);
    case 32: return streaming_form<T, 32, INTERLEAVED, COS_SIN_ROWS>(variant);
    default: return nullptr;
  }
}

template <typename T>
qkvfuse_status launch_streaming(int lanes, int variant, const qf_cu_params *P, unsigned blocks, size_t smem,
                           cudaStream_t stream) {
  void (*kernel)(const qf_cu_params) = nullptr;
  switch (variant & (QF_FAST_INTERLEAVED | QF_FAST_SEPARATE)) {
    case 0: kernel = streaming_for<T, false, false>(lanes, variant); break;
    case QF_FAST_INTERLEAVED: kernel = streaming_for<T, true, false>(lanes, variant); break;
    case QF_FAST_SEPARATE: kernel = streaming_for<T, false, true>(lanes, variant); break;
    default: kernel = streaming_for<T, true, true>(lanes, variant); break;
  }
  if (!kernel) return qf_fail(QKVFUSE_ERROR_UNSUPPORTED, "cuda: no streaming kernel for %d lanes per head", lanes);
  return qf_cuda_start(reinterpret_cast<const void *>(kernel), blocks, kStreamingBlock, smem, stream, P, "streaming");
}

}  // namespace qf

#endif  // QKVFUSE_CUDA_FAST_LAUNCH_CUH
