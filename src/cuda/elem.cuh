// SPDX-License-Identifier: Apache-2.0
// Element access for the CUDA kernels: loads of any supported dtype to
// float32, rounding, vector stores with one round-to-nearest-even, and the
// quantizers of SPEC.md stage 4. The dtype of the small tensors is a runtime
// value that is uniform across the grid, so its switch costs a few
// instructions and no divergence; the hot input type is a template parameter.
#ifndef QKVFUSE_CUDA_ELEM_CUH
#define QKVFUSE_CUDA_ELEM_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <stdint.h>

#include "qkvfuse.h"

namespace qf {

// ---- typed input loads ------------------------------------------------------

template <typename T>
struct io;
template <>
struct io<float> {
  __device__ static float f(float x) { return x; }
};
template <>
struct io<__half> {
  __device__ static float f(__half x) { return __half2float(x); }
};
template <>
struct io<__nv_bfloat16> {
  __device__ static float f(__nv_bfloat16 x) { return __bfloat162float(x); }
};
template <>
struct io<int32_t> {
  __device__ static float f(int32_t x) { return (float)x; }
};

// Load VEC consecutive elements of type T starting at p (aligned to VEC*sizeof(T)
// when VEC > 1) into float32.
template <typename T, int VEC>
__device__ __forceinline__ void load_vec(const T *p, float (&out)[VEC]) {
  if constexpr (VEC * sizeof(T) == 16) {
    uint4 raw = *reinterpret_cast<const uint4 *>(p);
    const T *e = reinterpret_cast<const T *>(&raw);
#pragma unroll
    for (int k = 0; k < VEC; k++) out[k] = io<T>::f(e[k]);
  } else {
#pragma unroll
    for (int k = 0; k < VEC; k++) out[k] = io<T>::f(p[k]);
  }
}

// ---- runtime-dtype scalar loads (small, cached tensors) -----------------------

__device__ __forceinline__ float ld(const void *p, int dt, int64_t i) {
  switch (dt) {
    case QKVFUSE_DTYPE_FLOAT32: return __ldg(reinterpret_cast<const float *>(p) + i);
    case QKVFUSE_DTYPE_BFLOAT16: return __bfloat162float(reinterpret_cast<const __nv_bfloat16 *>(p)[i]);
    case QKVFUSE_DTYPE_FLOAT16: return __half2float(reinterpret_cast<const __half *>(p)[i]);
    case QKVFUSE_DTYPE_INT32: return (float)__ldg(reinterpret_cast<const int32_t *>(p) + i);
    default: return 0.0f;
  }
}

__device__ __forceinline__ int64_t ld_index(const void *p, int dt, int64_t i) {
  return dt == QKVFUSE_DTYPE_INT64 ? __ldg(reinterpret_cast<const long long *>(p) + i)
                                   : (int64_t)__ldg(reinterpret_cast<const int32_t *>(p) + i);
}

// The value a store of v to dtype dt keeps.
__device__ __forceinline__ float round_to(float v, int dt) {
  switch (dt) {
    case QKVFUSE_DTYPE_BFLOAT16: return __bfloat162float(__float2bfloat16_rn(v));
    case QKVFUSE_DTYPE_FLOAT16: return __half2float(__float2half_rn(v));
    default: return v;
  }
}

// ---- vector stores ------------------------------------------------------------

template <int BYTES>
struct raw_vec;
template <>
struct raw_vec<1> {
  using t = uint8_t;
};
template <>
struct raw_vec<2> {
  using t = uint16_t;
};
template <>
struct raw_vec<4> {
  using t = uint32_t;
};
template <>
struct raw_vec<8> {
  using t = uint2;
};
template <>
struct raw_vec<16> {
  using t = uint4;
};

// Store N bytes from a local buffer as one access (N a power of two <= 16),
// or as 16-byte pieces for N = 32.
template <int N>
__device__ __forceinline__ void store_bytes(void *dst, const void *src) {
  if constexpr (N > 16) {
    store_bytes<16>(dst, src);
    store_bytes<N - 16>(static_cast<char *>(dst) + 16, static_cast<const char *>(src) + 16);
  } else {
    using R = typename raw_vec<N>::t;
    *reinterpret_cast<R *>(dst) = *reinterpret_cast<const R *>(src);
  }
}

// Store VEC floats as elements [idx, idx + VEC) of a float32/float16/bfloat16
// array, rounding each once.
template <int VEC>
__device__ __forceinline__ void store_floats(void *base, int dt, int64_t idx, const float (&v)[VEC]) {
  if (dt == QKVFUSE_DTYPE_FLOAT32) {
    store_bytes<VEC * 4>(reinterpret_cast<float *>(base) + idx, v);
  } else if (dt == QKVFUSE_DTYPE_BFLOAT16) {
    __nv_bfloat16 b[VEC];
#pragma unroll
    for (int k = 0; k < VEC; k++) b[k] = __float2bfloat16_rn(v[k]);
    store_bytes<VEC * 2>(reinterpret_cast<__nv_bfloat16 *>(base) + idx, b);
  } else {
    __half b[VEC];
#pragma unroll
    for (int k = 0; k < VEC; k++) b[k] = __float2half_rn(v[k]);
    store_bytes<VEC * 2>(reinterpret_cast<__half *>(base) + idx, b);
  }
}

// Store VEC floats as T (the input's 16-bit type), rounding each once.
template <typename T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}
template <>
__device__ __forceinline__ __half from_float<__half>(float v) {
  return __float2half_rn(v);
}
template <typename T, int VEC>
__device__ __forceinline__ void store_typed(T *dst, const float (&v)[VEC]) {
  T b[VEC];
#pragma unroll
  for (int k = 0; k < VEC; k++) b[k] = from_float<T>(v[k]);
  store_bytes<VEC * (int)sizeof(T)>(dst, b);
}

// ---- quantizers -----------------------------------------------------------------

// sat8(rint(x)); NaN -> 0.
__device__ __forceinline__ int8_t to_int8(float x) {
  if (isnan(x)) return 0;
  return (int8_t)fminf(fmaxf(rintf(x), -128.0f), 127.0f);
}

// OCP e4m3fn, round to nearest even, saturating to +-448; NaN keeps its sign.
__device__ __forceinline__ uint8_t to_e4m3(float x) {
  if (isnan(x)) return (uint8_t)(signbit(x) ? 0xff : 0x7f);
  return (uint8_t)__nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3);
}

// OCP e5m2, round to nearest even, saturating to +-57344 (Inf included:
// __NV_SATFINITE, as vLLM's fp8_e5m2 cache); NaN keeps its sign (the
// conversion itself writes 0x7F for every NaN).
__device__ __forceinline__ uint8_t to_e5m2(float x) {
  if (isnan(x)) return (uint8_t)(signbit(x) ? 0xff : 0x7f);
  return (uint8_t)__nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E5M2);
}

}  // namespace qf

#endif  // QKVFUSE_CUDA_ELEM_CUH
