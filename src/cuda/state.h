/* SPDX-License-Identifier: Apache-2.0 */
/* What the CUDA backend keeps of a plan: its device's facts, its launch
 * options and device tables; in C so that tests/test_cuda_plan.c checks the
 * device rule on a machine without a GPU. */
#ifndef QKVFUSE_CUDA_STATE_H
#define QKVFUSE_CUDA_STATE_H

#include <stdint.h>
#include <string.h>

#include "core/plan.h"

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
  QF_CUDA_FORM_DECODE = 1,        /* "decode": two vectors per lane */
  QF_CUDA_FORM_PREFILL = 2,       /* "prefill" */
  QF_CUDA_FORM_DECODE_NARROW = 3, /* "decode_narrow": one vector per lane (D <= 256) */
  QF_CUDA_FORM_GENERAL = 4        /* "general" */
} qf_cuda_form;

/* Whether a device of compute capability cc (major * 10 + minor) runs the
 * streaming kernels under `form`: from QF_CUDA_STREAMING_MIN_CC on, unless
 * the form is QF_CUDA_FORM_GENERAL; otherwise the general kernel serves every
 * call. */
static inline int qf_cuda_streaming(int cc, qf_cuda_form form) {
  return cc >= QF_CUDA_STREAMING_MIN_CC && form != QF_CUDA_FORM_GENERAL;
}

/* The CUDA backend's state of a plan, kept in the plan's device_state
 * (plan.h: opaque to the core). */
typedef struct qf_cuda_state {
  int sm_count;          /* multiprocessors of the plan's device */
  int smem_per_sm;       /* shared memory per multiprocessor, bytes */
  int cc;                /* its compute capability, major * 10 + minor */
  int pdl;               /* launch with programmatic dependent launch (sm_90+, QKVFUSE_CUDA_PDL != 0) */
  qf_cuda_form form;     /* QKVFUSE_CUDA_FORM */
  const uint64_t *turns; /* COMPUTED: R/2 inverse frequencies in turns per position, 0.64 fixed point, on the
                            device (owned: released with the plan); else NULL */
} qf_cuda_state;

typedef char qf_cuda_state_fits_the_plan[sizeof(qf_cuda_state) <= QF_PLAN_DEVICE_STATE_BYTES ? 1 : -1];

/* A plan's CUDA state (copied out: the plan's bytes have no declared type). */
static inline qf_cuda_state qf_cuda_state_of(const qkvfuse_plan *plan) {
  qf_cuda_state s;
  memcpy(&s, plan->device_state.bytes, sizeof s);
  return s;
}

static inline void qf_cuda_state_set(qkvfuse_plan *plan, const qf_cuda_state *s) {
  memcpy(plan->device_state.bytes, s, sizeof *s);
}

#ifdef __cplusplus
}
#endif

#endif /* QKVFUSE_CUDA_STATE_H */
