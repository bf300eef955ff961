// SPDX-License-Identifier: Apache-2.0
// The instantiations of the streaming kernel (fast.cuh) for one 16-bit input
// type: neox or interleaved pairs, cos/sin per pair or given per element,
// and L lanes per head: the prefill form for L = fast_lanes(D) (2 .. 32 and
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

template <typename T, int L, bool INTER, bool SEP, int HOT>
static void (*fast_form(int variant))(const qf_cu_params) {
  constexpr bool pow2 = (L & (L - 1)) == 0;
  if (!(variant & QF_FAST_DECODE)) {
    if constexpr (HOT != 0) {
      if (variant & QF_FAST_QUANT) return fast_kernel<T, L, INTER, SEP, HOT | kHotQuant>;
    }
    return fast_kernel<T, L, INTER, SEP, HOT>;
  }
  if constexpr (pow2 && L >= 4) {
    if (variant & QF_FAST_DECODE1)
      return variant & QF_FAST_SPEC ? decode_kernel<T, L, 1, INTER, SEP, true, HOT ? HOT | kHotCache : 0>
                                    : decode_kernel<T, L, 1, INTER, SEP, false, HOT>;
  }
  if constexpr (pow2) {
    if (!(variant & QF_FAST_DECODE1)) return decode_kernel<T, L, 2, INTER, SEP, false, HOT>;
  }
  return nullptr;
}

// QF_FAST_HOT: the kernels that know their call (fast.cuh: kHot; cos/sin
// from a cache, so not SEP).
template <typename T, int L, bool INTER, bool SEP>
static void (*fast_form(int variant))(const qf_cu_params) {
  if constexpr (!SEP) {
    if (variant & QF_FAST_HOT) return fast_form<T, L, INTER, SEP, kHot>(variant);
  }
  return fast_form<T, L, INTER, SEP, 0>(variant);
}

template <typename T, bool INTER, bool SEP>
static void (*fast_for(int lanes, int variant))(const qf_cu_params) {
  switch (lanes) {
    case 2: return fast_form<T, 2, INTER, SEP>(variant);
    case 4: return fast_form<T, 4, INTER, SEP>(variant);
    case 6: return fast_form<T, 6, INTER, SEP>(variant);
    case 8: return fast_form<T, 8, INTER, SEP>(variant);
    case 16: return fast_form<T, 16, INTER, SEP>(variant);
    case 32: return fast_form<T, 32, INTER, SEP>(variant);
    default: return nullptr;
  }
}

template <typename T>
qkvfuse_status launch_fast(int lanes, int variant, const qf_cu_params *P, unsigned blocks, size_t smem,
                           cudaStream_t stream) {
  void (*kernel)(const qf_cu_params) = nullptr;
  switch (variant & (QF_FAST_INTERLEAVED | QF_FAST_SEPARATE)) {
    case 0: kernel = fast_for<T, false, false>(lanes, variant); break;
    case QF_FAST_INTERLEAVED: kernel = fast_for<T, true, false>(lanes, variant); break;
    case QF_FAST_SEPARATE: kernel = fast_for<T, false, true>(lanes, variant); break;
    default: kernel = fast_for<T, true, true>(lanes, variant); break;
  }
  if (!kernel) return qf_fail(QKVFUSE_ERROR_UNSUPPORTED, "cuda: no streaming kernel for %d lanes per head", lanes);
  return qf_cuda_start(reinterpret_cast<const void *>(kernel), blocks, kFastBlock, smem, stream, P, "streaming");
}

}  // namespace qf

#endif  // QKVFUSE_CUDA_FAST_LAUNCH_CUH
