/* SPDX-License-Identifier: Apache-2.0 */
/* What the CUDA backend knows of a plan's device and launches, in C so that
 * tests/test_cuda_plan.c checks it on a machine without a GPU. */
#ifndef QKVFUSE_CUDA_STATE_H
#define QKVFUSE_CUDA_STATE_H

#ifdef __cplusplus
extern "C" {
#endif

/* The least compute capability (major * 10 + minor) of the streaming kernels
 * (streaming.cuh): their cp.async copies, L2 cache hints and eviction
 * policies are sm_80 PTX, so for older architectures their device code is a
 * trap. */
#define QF_CUDA_STREAMING_MIN_CC 80

/* The kernels a plan may run (QKVFUSE_CUDA_FORM): by the call's size, or one
 * streaming form forced (tests run each over every shape), or the general
 * kernel for every call, the path of a device below QF_CUDA_STREAMING_MIN_CC. */
typedef enum qf_cuda_form {
  QF_CUDA_FORM_BY_SIZE = 0,
  QF_CUDA_FORM_DECODE = 1,        /* "decode" */
  QF_CUDA_FORM_PREFILL = 2,       /* "prefill" */
  QF_CUDA_FORM_DECODE_NARROW = 3, /* "decode_narrow" */
  QF_CUDA_FORM_GENERAL = 4        /* "general" */
} qf_cuda_form;

/* Whether a device of compute capability cc (major * 10 + minor) runs the
 * streaming kernels under `form`: from QF_CUDA_STREAMING_MIN_CC on, unless
 * the form is QF_CUDA_FORM_GENERAL; otherwise the general kernel serves every
 * call. */
static inline int qf_cuda_streaming(int cc, qf_cuda_form form) {
  return cc >= QF_CUDA_STREAMING_MIN_CC && form != QF_CUDA_FORM_GENERAL;
}

#ifdef __cplusplus
}
#endif

#endif /* QKVFUSE_CUDA_STATE_H */
