/* SPDX-License-Identifier: Apache-2.0 */
/* The kernel a call runs, as the CUDA backend's one choice returns it
 * (choose.cu: qf_cuda_choose) and the launch reads it (launch.cu). */
#ifndef QKVFUSE_CUDA_VARIANT_H
#define QKVFUSE_CUDA_VARIANT_H

#include <stddef.h>

#include "core/plan.h"
#include "cuda/backend.h"
#include "cuda/params.h"
#include "cuda/state.h"
#include "qkvfuse.h"

/* The kernels: the general kernel (general.cuh) serves every call; the
 * streaming kernel the common 16-bit case, in its prefill form (prefill.cuh)
 * or its decode form (decode.cuh) with two 16-byte vectors per lane, or one
 * (narrow), for 16-bit input and for int32 input with 16-bit outputs. */
typedef enum qf_cuda_kernel {
  QF_CUDA_KERNEL_GENERAL,
  QF_CUDA_KERNEL_PREFILL,
  QF_CUDA_KERNEL_DECODE,
  QF_CUDA_KERNEL_DECODE_NARROW
} qf_cuda_kernel;

/* One launch: the kernel, the template arguments of its instantiation and
 * its grid. */
typedef struct qf_cuda_variant {
  qf_cuda_kernel kernel;
  qkvfuse_dtype input;   /* the input's dtype: the kernel's element type */
  qkvfuse_dtype io16;    /* streaming: the 16-bit type it computes in (qf_cuda_streaming_type: int32 input's outputs') */
  int vec;               /* general: elements per vector (16 bytes of the input, or 1: any alignment) */
  int vecs_per_lane;     /* general: vectors per lane */
  int lanes;             /* streaming: lanes per head */
  bool interleaved;      /* streaming: RoPE pairs (2i, 2i+1), else neox */
  bool cos_sin_rows;     /* streaming: per-token cos/sin (rope_source COS_SIN) */
  qf_cuda_engine engine; /* streaming: the call whose dtypes and cache geometry the kernel has compiled in */
  bool quantized_cache;  /* engine or append call, prefill form: the call writes a quantized cache (kEngineQuant) */
  bool preload;          /* narrow decode form: norm weights and cache scales loaded before the grid wait */
  bool pdl;              /* a programmatic dependent launch (launch.h: qf_cuda_start) */
  unsigned blocks;       /* the grid */
  size_t smem;           /* dynamic shared memory, bytes */
  const char *refused;   /* general kernel: why the streaming kernel does not serve the call (static) */
} qf_cuda_variant;

/* The launch of a call on a plan of CUDA state `state`: the streaming
 * kernel where the device, the plan's form and the call allow, else the
 * general kernel, with the reason in `refused`; the chosen kernel's
 * parameters (`problem` and its schedule) in its member of *K. */
qf_cuda_variant qf_cuda_choose(const qf_cuda_state &state, const qf_problem *p, const qf_cu_problem &problem,
                               qf_cu_kernel_params *K);

#endif /* QKVFUSE_CUDA_VARIANT_H */
