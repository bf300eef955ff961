// SPDX-License-Identifier: Apache-2.0
// The one 16-byte vector type of the kernels, uint4 (eight 16-bit values
// or four 32-bit ones), and bf16 / fp16 pairs packed to and from float32.
#ifndef QKVFUSE_CUDA_DEVICE_VEC16_CUH
#define QKVFUSE_CUDA_DEVICE_VEC16_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include "qkvfuse.h"

namespace qf {

// Two 16-bit values of a 32-bit word to and from float32.
template <typename T>
struct h16;
template <>
struct h16<__nv_bfloat16> {
  static constexpr int dtype = QKVFUSE_DTYPE_BFLOAT16;
  __device__ static void unpack(uint32_t w, float &lo, float &hi) {
    lo = __uint_as_float(w << 16);
    hi = __uint_as_float(w & 0xffff0000u);
  }
  __device__ static uint32_t pack(float lo, float hi) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t *>(&v);
  }
};
template <>
struct h16<__half> {
  static constexpr int dtype = QKVFUSE_DTYPE_FLOAT16;
  __device__ static void unpack(uint32_t w, float &lo, float &hi) {
    const float2 f = __half22float2(*reinterpret_cast<const __half2 *>(&w));
    lo = f.x;
    hi = f.y;
  }
  __device__ static uint32_t pack(float lo, float hi) {
    const __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t *>(&v);
  }
};

template <typename T>
__device__ __forceinline__ void unpack8(const uint4 &r, float *x) {
  h16<T>::unpack(r.x, x[0], x[1]);
  h16<T>::unpack(r.y, x[2], x[3]);
  h16<T>::unpack(r.z, x[4], x[5]);
  h16<T>::unpack(r.w, x[6], x[7]);
}

template <typename T>
__device__ __forceinline__ uint4 pack8(const float *x) {
  return make_uint4(h16<T>::pack(x[0], x[1]), h16<T>::pack(x[2], x[3]), h16<T>::pack(x[4], x[5]),
                    h16<T>::pack(x[6], x[7]));
}

}  // namespace qf

#endif  // QKVFUSE_CUDA_DEVICE_VEC16_CUH
