// SPDX-License-Identifier: Apache-2.0
// The instantiations of the streaming kernel for one 16-bit type T, and the
// one that runs a variant (variant.h): neox or interleaved pairs, cos/sin
// per pair or per token (COS_SIN_ROWS), and L lanes per head: the prefill
// form for L = prefill_lanes(D) (2 .. 32 and 6; D = 32 .. 512), the decode
// form with two vectors per lane for L = 2 .. 32 and the narrow one for L =
// 4 .. 32 (decode_lanes); each also as the engine call's (ENGINE), cos/sin
// per pair from a 16-bit or a float32 table, and as the append call's
// (kEngineAppend: its cache is quantized, so the prefill form's kEngineQuant
// kernel and the narrow form's preloading one). I32: int32 input with
// outputs of type T, in both forms, each also as the int32 call's
// (kEngineRows: cos/sin per token; neither kEngineQuant nor preload).
#ifndef QKVFUSE_CUDA_STREAMING_LAUNCH_CUH
#define QKVFUSE_CUDA_STREAMING_LAUNCH_CUH

#include "core/error.h"
#include "cuda/decode.cuh"
#include "cuda/launch.h"
#include "cuda/prefill.cuh"

namespace qf {

// The kernel of variant v's form: a prefill_kernel (taking qf_cu_prefill_params)
// or a decode_kernel (taking qf_cu_decode_params). I32: int32 input (no
// kEngineQuant, no preload).
template <typename T, int L, bool INTERLEAVED, bool COS_SIN_ROWS, int ENGINE, bool I32>
static const void *streaming_instance(const qf_cuda_variant &v) {
  constexpr bool pow2 = (L & (L - 1)) == 0;
  constexpr bool append = (ENGINE & kEngineAppend) != 0; /* always a quantized cache: preload, kEngineQuant */
  if (v.kernel == QF_CUDA_KERNEL_PREFILL) {
    if constexpr (ENGINE != 0 && !I32) {
      if (append || v.quantized_cache)
        return reinterpret_cast<const void *>(prefill_kernel<T, L, INTERLEAVED, COS_SIN_ROWS, ENGINE | kEngineQuant>);
    }
    if constexpr (!append)
      return reinterpret_cast<const void *>(prefill_kernel<T, L, INTERLEAVED, COS_SIN_ROWS, ENGINE, I32>);
  }
  if constexpr (pow2 && L >= 4) {
    if (v.kernel == QF_CUDA_KERNEL_DECODE_NARROW) {
      if constexpr (!I32) {
        if (append || v.preload)
          return reinterpret_cast<const void *>(
              decode_kernel<T, L, 1, INTERLEAVED, COS_SIN_ROWS, true, ENGINE ? ENGINE | kEngineCache : 0>);
      }
      if constexpr (!append)
        return reinterpret_cast<const void *>(decode_kernel<T, L, 1, INTERLEAVED, COS_SIN_ROWS, false, ENGINE, I32>);
    }
  }
  if constexpr (pow2) {
    if (v.kernel == QF_CUDA_KERNEL_DECODE)
      return reinterpret_cast<const void *>(decode_kernel<T, L, 2, INTERLEAVED, COS_SIN_ROWS, false, ENGINE, I32>);
  }
  return nullptr;
}

// The engine call's kernels (kEngine: cos/sin from a cache, so not
// COS_SIN_ROWS; never I32; with a 16-bit or a float32 table), the append
// call's (likewise), the int32 call's (I32 and COS_SIN_ROWS) or the others.
template <typename T, int L, bool INTERLEAVED, bool COS_SIN_ROWS, bool I32>
static const void *streaming_form(const qf_cuda_variant &v) {
  if constexpr (COS_SIN_ROWS && I32) {
    if (v.engine == QF_CUDA_ENGINE_DEQUANT)
      return streaming_instance<T, L, INTERLEAVED, true, engine_bits(QF_CUDA_ENGINE_DEQUANT), true>(v);
  }
  if constexpr (!COS_SIN_ROWS && !I32) {
    switch (v.engine) {
      case QF_CUDA_ENGINE_CALL:
        return streaming_instance<T, L, INTERLEAVED, COS_SIN_ROWS, engine_bits(QF_CUDA_ENGINE_CALL), false>(v);
      case QF_CUDA_ENGINE_CALL_F32:
        return streaming_instance<T, L, INTERLEAVED, COS_SIN_ROWS, engine_bits(QF_CUDA_ENGINE_CALL_F32), false>(v);
      case QF_CUDA_ENGINE_APPEND:
        return streaming_instance<T, L, INTERLEAVED, COS_SIN_ROWS, engine_bits(QF_CUDA_ENGINE_APPEND), false>(v);
      case QF_CUDA_ENGINE_APPEND_NORM:
        return streaming_instance<T, L, INTERLEAVED, COS_SIN_ROWS, engine_bits(QF_CUDA_ENGINE_APPEND_NORM), false>(v);
      default: break;
    }
  }
  return streaming_instance<T, L, INTERLEAVED, COS_SIN_ROWS, 0, I32>(v);
}

template <typename T, bool INTERLEAVED, bool COS_SIN_ROWS, bool I32>
static const void *streaming_for(const qf_cuda_variant &v) {
  switch (v.lanes) {
    case 2: return streaming_form<T, 2, INTERLEAVED, COS_SIN_ROWS, I32>(v);
    case 4: return streaming_form<T, 4, INTERLEAVED, COS_SIN_ROWS, I32>(v);
    case 6: return streaming_form<T, 6, INTERLEAVED, COS_SIN_ROWS, I32>(v);
    case 8: return streaming_form<T, 8, INTERLEAVED, COS_SIN_ROWS, I32>(v);
    case 16: return streaming_form<T, 16, INTERLEAVED, COS_SIN_ROWS, I32>(v);
    case 32: return streaming_form<T, 32, INTERLEAVED, COS_SIN_ROWS, I32>(v);
    default: return nullptr;
  }
}

// The instance that runs variant v, or nullptr where none is compiled.
template <typename T, bool I32>
static const void *streaming_kernel(const qf_cuda_variant &v) {
  if (v.interleaved)
    return v.cos_sin_rows ? streaming_for<T, true, true, I32>(v) : streaming_for<T, true, false, I32>(v);
  return v.cos_sin_rows ? streaming_for<T, false, true, I32>(v) : streaming_for<T, false, false, I32>(v);
}

template <typename T, bool I32 = false>
qkvfuse_status launch_streaming(const qf_cuda_variant *v, const qf_cu_kernel_params *K, cudaStream_t stream) {
  const void *kernel = streaming_kernel<T, I32>(*v);
  if (!kernel) return qf_fail(QKVFUSE_ERROR_UNSUPPORTED, "cuda: no streaming kernel for %d lanes per head", v->lanes);
  const void *params = v->kernel == QF_CUDA_KERNEL_PREFILL ? static_cast<const void *>(&K->prefill)
                                                          : static_cast<const void *>(&K->decode);
  return qf_cuda_start(kernel, v->blocks, kStreamingBlock, v->smem, stream, params, v->pdl, "streaming");
}

}  // namespace qf

#endif  // QKVFUSE_CUDA_STREAMING_LAUNCH_CUH
