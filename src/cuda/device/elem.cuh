// SPDX-License-Identifier: Apache-2.0
// Element access for the CUDA kernels: loads of any supported dtype to
// float32, rounding, vector stores with one round-to-nearest-even, and the
// two-phase table loads of the streaming kernel. The dtype of the small tensors is a runtime
// value that is uniform across the grid, so its switch costs a few
// instructions and no divergence; the hot input type is a template parameter.
#ifndef QKVFUSE_CUDA_DEVICE_ELEM_CUH
#define QKVFUSE_CUDA_DEVICE_ELEM_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include "cuda/device/ptx.cuh"
#include "cuda/device/vec16.cuh"
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

// The address of element i of a tensor of dtype dt (for prefetches).
__device__ __forceinline__ const void *elem_at(const void *p, int dt, int64_t i) {
  const int bytes = dt == QKVFUSE_DTYPE_INT64                                   ? 8
                    : dt == QKVFUSE_DTYPE_FLOAT32 || dt == QKVFUSE_DTYPE_INT32 ? 4
                    : dt == QKVFUSE_DTYPE_BFLOAT16 || dt == QKVFUSE_DTYPE_FLOAT16 ? 2
                                                                                 : 1;
  return static_cast<const char *>(p) + i * bytes;
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

// N (4 or 8) consecutive elements [i, i + N) of a float32 / bfloat16 / float16
// table, read in two phases: ld_table issues the aligned vector loads (the
// plan checks the alignment) and keeps the raw bits, cvt_table converts them
// to float32. An item issues the loads of a pair (its two norm-weight
// vectors; the cos and the sin of a vector) before it converts either, so
// their round trips overlap instead of adding up on the decode critical path
// (all pairs at once would not fit the registers).
struct table_raw {
  uint4 a, b; /* float32: N floats in a (, b); 16-bit: N halves in a */
};

template <int N, bool L2ONLY = false>
__device__ __forceinline__ table_raw ld_table(const void *p, int dt, int64_t i) {
  static_assert(N == 4 || N == 8, "4 or 8 elements");
  static_assert(N == 8 || !L2ONLY, "L2-only loads: 8 elements");
  table_raw r = {make_uint4(0, 0, 0, 0), make_uint4(0, 0, 0, 0)};
  if (L2ONLY) {
    const uint4 *q = reinterpret_cast<const uint4 *>(static_cast<const char *>(p) +
                                                     i * (dt == QKVFUSE_DTYPE_FLOAT32 ? 4 : 2));
    r.a = ld_l2(q);
    if (dt == QKVFUSE_DTYPE_FLOAT32) r.b = ld_l2(q + 1);
    return r;
  }
  if (dt == QKVFUSE_DTYPE_FLOAT32) {
    const uint4 *q = reinterpret_cast<const uint4 *>(static_cast<const float *>(p) + i);
    r.a = __ldg(q);
    if (N == 8) r.b = __ldg(q + 1);
  } else if (N == 8) {
    r.a = __ldg(reinterpret_cast<const uint4 *>(static_cast<const uint16_t *>(p) + i));
  } else {
    const uint2 v = __ldg(reinterpret_cast<const uint2 *>(static_cast<const uint16_t *>(p) + i));
    r.a.x = v.x, r.a.y = v.y;
  }
  return r;
}

template <int N>
__device__ __forceinline__ void cvt_table(const table_raw &r, int dt, float *o) {
  const uint32_t w[8] = {r.a.x, r.a.y, r.a.z, r.a.w, r.b.x, r.b.y, r.b.z, r.b.w};
  if (dt == QKVFUSE_DTYPE_FLOAT32) {
#pragma unroll
    for (int k = 0; k < N; k++) o[k] = __uint_as_float(w[k]);
    return;
  }
#pragma unroll
  for (int k = 0; k < N / 2; k++) {
    if (dt == QKVFUSE_DTYPE_BFLOAT16)
      h16<__nv_bfloat16>::unpack(w[k], o[2 * k], o[2 * k + 1]);
    else
      h16<__half>::unpack(w[k], o[2 * k], o[2 * k + 1]);
  }
}

// Both phases at once (where nothing else is in flight).
template <int N>
__device__ __forceinline__ void ld_floats(const void *p, int dt, int64_t i, float *o) {
  cvt_table<N>(ld_table<N>(p, dt, i), dt, o);
}

}  // namespace qf

#endif  // QKVFUSE_CUDA_DEVICE_ELEM_CUH
