// SPDX-License-Identifier: Apache-2.0
// The quantizers of SPEC stage 4 (int8 symmetric / asymmetric, fp8 e4m3 and
// e5m2), for caches and a quantized q: the general kernel's, which divides
// by the scale, value by value, and the streaming kernel's, which multiplies
// 8 values by reciprocal scales.
#ifndef QKVFUSE_CUDA_DEVICE_QUANTIZE_CUH
#define QKVFUSE_CUDA_DEVICE_QUANTIZE_CUH

#include <cuda_fp8.h>
#include <stdint.h>

#include "cuda/device/ptx.cuh"
#include "qkvfuse.h"

namespace qf {

// The general kernel's quantizer (quantize, below) and its conversions of one
// value: x / scale (+ offset), rounded as the CPU backends round it.

// sat8(rint(x)); NaN -> 0.
__device__ __forceinline__ int8_t quantize_int8(float x) {
  if (isnan(x)) return 0;
  return (int8_t)fminf(fmaxf(rintf(x), -128.0f), 127.0f);
}

// OCP e4m3fn, round to nearest even, saturating to +-448; NaN keeps its sign.
__device__ __forceinline__ uint8_t quantize_e4m3(float x) {
  if (isnan(x)) return (uint8_t)(signbit(x) ? 0xff : 0x7f);
  return (uint8_t)__nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3);
}

// OCP e5m2, round to nearest even, saturating to +-57344 (Inf included:
// __NV_SATFINITE, as vLLM's fp8_e5m2 cache); NaN keeps its sign (the
// conversion itself writes 0x7F for every NaN).
__device__ __forceinline__ uint8_t quantize_e5m2(float x) {
  if (isnan(x)) return (uint8_t)(signbit(x) ? 0xff : 0x7f);
  return (uint8_t)__nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E5M2);
}

// Quantize VEC values with mode `quant` (int8 or fp8, for a cache or a
// quantized q_out): the stored bytes in q. Element k's scale (and offset) is
// element s0 + k of the tensors per channel (per_channel), else element s0
// (its kv head's, or 0: one for the tensor). Returns false if a scale or
// offset is bad.
template <int VEC>
__device__ __forceinline__ bool quantize(int quant, const float (&v)[VEC], const float *scale, const float *offset,
                                         int per_channel, int64_t s0, uint8_t (&q)[VEC]) {
  bool ok = true;
  const bool fp8 = quant == QKVFUSE_QUANT_FP8_E4M3 || quant == QKVFUSE_QUANT_FP8_E5M2;
#pragma unroll
  for (int k = 0; k < VEC; k++) {
    const int64_t ch = per_channel ? s0 + k : s0;
    const float sc = __ldg(scale + ch);
    const float of = offset ? __ldg(offset + ch) : 0.0f;
    ok &= isfinite(sc) && sc != 0.0f && isfinite(of);
    if (isnan(v[k])) {  // decided on the input: the division's NaN need not keep the sign
      q[k] = fp8 ? (signbit(v[k]) ? 0xff : 0x7f) : 0;
      continue;
    }
    float x = v[k] / sc;
    if (quant == QKVFUSE_QUANT_INT8_ASYM) x = x + of;
    q[k] = quant == QKVFUSE_QUANT_FP8_E4M3   ? quantize_e4m3(x)
           : quant == QKVFUSE_QUANT_FP8_E5M2 ? quantize_e5m2(x)
                                             : (uint8_t)quantize_int8(x);
  }
  return ok;
}

// A scale or offset a cache row may use: finite, and (scales) not zero.
__device__ __forceinline__ bool scale_ok(float s) { return (__float_as_uint(s) & 0x7fffffffu) - 1u < 0x7f7fffffu; }
__device__ __forceinline__ bool offset_ok(float s) { return (__float_as_uint(s) & 0x7fffffffu) < 0x7f800000u; }

// The streaming kernel's reciprocal of a scale: 1 / s, or +-FLT_MAX where
// that overflows (|s| < 2^-128), so that zero still quantizes to zero (plus
// the offset), as x / s does (0 times Inf would be NaN); every value of
// magnitude 2^-112 or more saturates either way.
__device__ __forceinline__ float scale_rcp(float s) {
  return fmaxf(fminf(rcp_approx(s), 3.402823466e38f), -3.402823466e38f);
}

// N scales (and offsets) into their reciprocals (scale_rcp's); returns
// whether a scale or offset is bad. One instruction per reciprocal
// (rcp_approx_normal, exact where every |scale| is in [2^-126, 2^126)),
// issued as the scales arrive, and one test per value; where a scale is
// zero, subnormal, huge or not finite, or an offset not finite, a second
// pass tells bad scales from the rest and takes scale_rcp.
template <int N>
__device__ __forceinline__ bool ready_scales(float (&r)[N], const float (&of)[N]) {
  float s[N];
  bool odd = false;
#pragma unroll
  for (int k = 0; k < N; k++) {
    s[k] = r[k];
    odd |= !(fabsf(s[k]) >= 0x1p-126f && fabsf(s[k]) < 0x1p126f) || !offset_ok(of[k]);
    r[k] = rcp_approx_normal(s[k]);
  }
  bool bad = false;
  if (odd) {
#pragma unroll
    for (int k = 0; k < N; k++) {
      bad |= !(scale_ok(s[k]) && offset_ok(of[k]));
      r[k] = scale_rcp(s[k]);
    }
  }
  return bad;
}

// One scale (no offset) into its reciprocal, as ready_scales does; returns
// whether it is bad.
__device__ __forceinline__ bool ready_scale(float &s) {
  float r[1] = {s};
  const float no_offset[1] = {0.0f};
  const bool bad = ready_scales<1>(r, no_offset);
  s = r[0];
  return bad;
}

// The streaming kernel's quantizer (quantize_bytes8, below): 8 values times
// reciprocal scales (+ offsets), one conversion instruction per value or
// pair: a division per value, as the general kernel's, would lengthen the
// streaming kernel's chain.

// sat8(rint(y)); NaN -> 0.
__device__ __forceinline__ uint32_t sat_s8(float y) {
  int q;
  asm("cvt.rni.sat.s8.f32 %0, %1;" : "=r"(q) : "f"(y));
  return (uint32_t)q & 0xffu;
}

// 8 values to fp8 (x * r) bytes of format FMT, saturating; NaN keeps its
// sign. One conversion per pair: it saturates finite values and writes 0x7F
// for every NaN, so a byte 0x7F or 0xFF marks a NaN, which the rare path
// gives its sign.
template <__nv_fp8_interpretation_t FMT>
__device__ __forceinline__ void quantize_fp8_bytes8(const float *x, const float *r, uint32_t (&w)[2]) {
#pragma unroll
  for (int k = 0; k < 8; k += 2)
    w[k >> 2] |= (uint32_t)__nv_cvt_float2_to_fp8x2(make_float2(x[k] * r[k], x[k + 1] * r[k + 1]), __NV_SATFINITE, FMT)
                 << (8 * (k & 3));
  /* bit 7 of a byte set where its low 7 bits are all ones (no carry leaves a byte) */
  const uint32_t nan = (((w[0] & 0x7f7f7f7fu) + 0x01010101u) | ((w[1] & 0x7f7f7f7fu) + 0x01010101u)) & 0x80808080u;
  if (nan) {
#pragma unroll
    for (int k = 0; k < 8; k++)
      if (isnan(x[k])) {
        const int sh = 8 * (k & 3);
        w[k >> 2] = (w[k >> 2] & ~(0xffu << sh)) | (signbit(x[k]) ? 0xffu : 0x7fu) << sh;
      }
  }
}

// 8 values to int8 (x * r (+ of)) or fp8 e4m3 / e5m2 (x * r) bytes.
__device__ __forceinline__ uint2 quantize_bytes8(int quant, const float *x, const float *r, const float *of) {
  uint32_t w[2] = {0, 0};
  if (quant == QKVFUSE_QUANT_FP8_E4M3) {
    quantize_fp8_bytes8<__NV_E4M3>(x, r, w);
  } else if (quant == QKVFUSE_QUANT_FP8_E5M2) {
    quantize_fp8_bytes8<__NV_E5M2>(x, r, w);
  } else if (quant == QKVFUSE_QUANT_INT8_ASYM) {
#pragma unroll
    for (int k = 0; k < 8; k++) w[k >> 2] |= sat_s8(fmaf(x[k], r[k], of[k])) << (8 * (k & 3));
  } else {
#pragma unroll
    for (int k = 0; k < 8; k++) w[k >> 2] |= sat_s8(x[k] * r[k]) << (8 * (k & 3));
  }
  return make_uint2(w[0], w[1]);
}

}  // namespace qf

#endif  // QKVFUSE_CUDA_DEVICE_QUANTIZE_CUH
