// SPDX-License-Identifier: Apache-2.0
// The CUDA backend: planning (device checks, launch options, the COMPUTED
// frequency table) and run: the call's resolved problem (params.cu), the
// one choice of its kernel and schedule (choose.cu: qf_cuda_choose), the
// launch (launch.cu). No allocation and no synchronization inside run.
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/backends.h"
#include "core/error.h"
#include "cuda/backend.h"
#include "cuda/launch.h"
#include "cuda/state.h"
#include "cuda/variant.h"

namespace {

qkvfuse_status cuda_fail(cudaError_t e, const char *what) {
  return qf_fail(QKVFUSE_ERROR_CUDA, "%s: CUDA error %d (%s): %s", what, (int)e, cudaGetErrorName(e),
                 cudaGetErrorString(e));
}

// Make `device` current for the scope (restores the caller's device).
struct device_guard {
  int prev = -1;
  cudaError_t err = cudaSuccess;
  explicit device_guard(int device) {
    err = cudaGetDevice(&prev);
    if (err == cudaSuccess && prev != device) err = cudaSetDevice(device);
  }
  ~device_guard() {
    int cur = -1;
    if (prev >= 0 && cudaGetDevice(&cur) == cudaSuccess && cur != prev) cudaSetDevice(prev);
  }
};

void release_cuda(qkvfuse_plan *plan) {
  qf_cuda_state state = qf_cuda_state_of(plan);
  if (state.turns) {
    device_guard g(plan->desc.device_id);
    cudaFree(const_cast<uint64_t *>(state.turns));
    state.turns = nullptr;
    qf_cuda_state_set(plan, &state);
  }
}

}  // namespace

// The variant qf_cuda_run would launch, in words (qkvfuse_experimental_explain).
static void qf_cuda_explain(const qkvfuse_plan *plan, const qf_problem *p, char *buf, size_t n) {
  qf_cu_problem problem;
  qf_cuda_make_problem(plan, p, &problem);
  qf_cu_kernel_params K;
  const qf_cuda_variant v = qf_cuda_choose(qf_cuda_state_of(plan), p, problem, &K);
  const char *form = v.kernel == QF_CUDA_KERNEL_PREFILL  ? "prefill form"
                     : v.kernel == QF_CUDA_KERNEL_DECODE ? "decode form"
                                                         : "narrow decode form";
  const char *call = v.engine == QF_CUDA_ENGINE_CALL       ? " (engine call)"
                     : v.engine == QF_CUDA_ENGINE_CALL_F32 ? " (engine call, float32 cos/sin)"
                     : v.engine == QF_CUDA_ENGINE_APPEND   ? " (append call)"
                     : v.engine == QF_CUDA_ENGINE_APPEND_NORM ? " (append call with norm)"
                     : v.engine == QF_CUDA_ENGINE_DEQUANT  ? " (int32 call)"
                     : v.input == QKVFUSE_DTYPE_INT32      ? " (int32 input)"
                                                           : "";
  if (v.kernel == QF_CUDA_KERNEL_GENERAL)
    snprintf(buf, n, "%s: general kernel, %d-element vectors, %d per lane, %u blocks (not the streaming kernel: %s)",
             plan->backend_name, v.vec, v.vecs_per_lane, v.blocks, v.refused ? v.refused : "-");
  else
    snprintf(buf, n, "%s: streaming kernel, %s%s, %d lanes per head, %u blocks, %zu B shared memory%s",
             plan->backend_name, form, call, v.lanes, v.blocks, v.smem, v.pdl ? ", programmatic dependent launch" : "");
}

static qkvfuse_status qf_cuda_run(const qkvfuse_plan *plan, const qf_problem *p, void *stream) {
  qf_cu_problem problem;
  qf_cuda_make_problem(plan, p, &problem);
  device_guard g(plan->desc.device_id);
  if (g.err != cudaSuccess) return cuda_fail(g.err, "cudaSetDevice");
  qf_cu_kernel_params K;
  const qf_cuda_variant v = qf_cuda_choose(qf_cuda_state_of(plan), p, problem, &K);
  return qf_cuda_launch(&v, &K, (cudaStream_t)stream);
}

// The CUDA architectures this build's device code was compiled for
// (CMAKE_CUDA_ARCHITECTURES), for messages.
#ifndef QKVFUSE_CUDA_ARCHS
#define QKVFUSE_CUDA_ARCHS "(not recorded)"
#endif

// Whether device `dev` (the current device, compute capability cc) can run
// `kernel` of `family`: this build holds a cubin of the device's family or
// PTX its driver compiles. QKVFUSE_ERROR_UNSUPPORTED naming the device and
// the build's architectures where it cannot (the runtime's own error is
// cleared: it is not the caller's).
static qkvfuse_status check_image(int dev, int cc, const void *kernel, const char *family) {
  cudaFuncAttributes attr;
  const cudaError_t e = cudaFuncGetAttributes(&attr, kernel);
  if (e == cudaSuccess) return QKVFUSE_SUCCESS;
  cudaGetLastError();
  switch (e) {
    case cudaErrorInvalidDeviceFunction:
    case cudaErrorNoKernelImageForDevice:
    case cudaErrorInvalidKernelImage:
    case cudaErrorInvalidPtx:
    case cudaErrorUnsupportedPtxVersion:
    case cudaErrorJitCompilerNotFound:
    case cudaErrorJitCompilationDisabled: break;
    default: return cuda_fail(e, "cudaFuncGetAttributes");
  }
  cudaDeviceProp prop;
  const bool named = cudaGetDeviceProperties(&prop, dev) == cudaSuccess;
  return qf_fail(QKVFUSE_ERROR_UNSUPPORTED,
                 "device_id: cuda:%d (%s, compute capability %d.%d) cannot run this build of qkvfuse, built for CUDA "
                 "architectures %s: its %s kernel has no image for the device (%s); build with "
                 "-DCMAKE_CUDA_ARCHITECTURES=%d-real (or a list that includes it)",
                 dev, named ? prop.name : "name unknown", cc / 10, cc % 10, QKVFUSE_CUDA_ARCHS, family,
                 cudaGetErrorName(e), cc);
}

// What a plan needs of a device that cannot change while the process runs:
// its multiprocessors, their shared memory and its compute capability,
// checked to have images of every kernel family. The first plan for a
// device queries them; later ones (the named operators plan on every call,
// also inside a graph capture) read them. Every access is atomic, so
// concurrent first plans store alike.
static const int kCachedDevices = 64;
static int g_device_sms[kCachedDevices], g_device_smem[kCachedDevices], g_device_cc[kCachedDevices],
    g_device_ready[kCachedDevices];

static qkvfuse_status device_facts(int dev, int *sms, int *smem, int *cc) {
  if (dev < kCachedDevices && __atomic_load_n(&g_device_ready[dev], __ATOMIC_ACQUIRE)) {
    *sms = __atomic_load_n(&g_device_sms[dev], __ATOMIC_RELAXED);
    *smem = __atomic_load_n(&g_device_smem[dev], __ATOMIC_RELAXED);
    *cc = __atomic_load_n(&g_device_cc[dev], __ATOMIC_RELAXED);
    return QKVFUSE_SUCCESS;
  }
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0)
    return qf_fail(QKVFUSE_ERROR_UNSUPPORTED, "device_type: cuda requested but no CUDA device is usable (%s)",
                   e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
  QF_CHECK(dev < count, QKVFUSE_ERROR_DEVICE, "device_id: cuda:%d requested; this machine has %d device(s)", dev,
           count);
  e = cudaDeviceGetAttribute(sms, cudaDevAttrMultiProcessorCount, dev);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(smem, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev);
  int major = 0, minor = 0;
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
  if (e != cudaSuccess) return cuda_fail(e, "cudaDeviceGetAttribute");
  *cc = major * 10 + minor;
  {
    // every kernel family qkvfuse_run may launch on the device has an image
    // for it (refused here, naming the device, rather than at a launch)
    device_guard guard(dev);
    if (guard.err != cudaSuccess) return cuda_fail(guard.err, "cudaSetDevice");
    QF_FORWARD(check_image(dev, *cc, qf_cuda_general_probe(), "general"));
    if (*cc >= QF_CUDA_STREAMING_MIN_CC) QF_FORWARD(check_image(dev, *cc, qf_cuda_streaming_probe(), "streaming"));
  }
  if (dev < kCachedDevices) {
    __atomic_store_n(&g_device_sms[dev], *sms, __ATOMIC_RELAXED);
    __atomic_store_n(&g_device_smem[dev], *smem, __ATOMIC_RELAXED);
    __atomic_store_n(&g_device_cc[dev], *cc, __ATOMIC_RELAXED);
    __atomic_store_n(&g_device_ready[dev], 1, __ATOMIC_RELEASE);
  }
  return QKVFUSE_SUCCESS;
}

extern "C" qkvfuse_status qf_cuda_plan(qkvfuse_plan *plan) {
  const qkvfuse_desc *d = &plan->desc;
  qf_cuda_state state = {};
  QF_FORWARD(device_facts(d->device_id, &state.sm_count, &state.smem_per_sm, &state.cc));
  // programmatic dependent launch (launch.h): sm_90 and later, unless the
  // variant cuda.pdl (or its alias QKVFUSE_CUDA_PDL) is "0"
  const char *pdl = plan->variants.cuda_pdl ? plan->variants.cuda_pdl : getenv("QKVFUSE_CUDA_PDL");
  state.pdl = state.cc >= 90 && !(pdl && strcmp(pdl, "0") == 0);
  // the streaming kernel's form: by size, unless the variant cuda.form (or its
  // alias QKVFUSE_CUDA_FORM) says decode, decode_narrow or prefill, or general:
  // no streaming kernel, as below sm_80 (tests run each form over every shape)
  const char *form = plan->variants.cuda_form ? plan->variants.cuda_form : getenv("QKVFUSE_CUDA_FORM");
  state.form = !form                                   ? QF_CUDA_FORM_BY_SIZE
               : strcmp(form, "decode") == 0        ? QF_CUDA_FORM_DECODE
               : strcmp(form, "prefill") == 0       ? QF_CUDA_FORM_PREFILL
               : strcmp(form, "decode_narrow") == 0 ? QF_CUDA_FORM_DECODE_NARROW
               : strcmp(form, "general") == 0       ? QF_CUDA_FORM_GENERAL
                                                    : QF_CUDA_FORM_BY_SIZE;
  qf_cuda_state_set(plan, &state);
  plan->backend = QKVFUSE_BACKEND_CUDA;
  plan->backend_name = "cuda";
  plan->run = qf_cuda_run;
  plan->explain = qf_cuda_explain;
  plan->release = release_cuda;
  if (d->rope_source == QKVFUSE_ROPE_COMPUTED) {
    // inverse frequencies in turns per position, 0.64 fixed point: exact
    // angle reduction by a wrapping 64-bit multiply in the kernel
    const int half = (int)(d->rotary_dim / 2);
    uint64_t turns[QF_MAX_HEAD_DIM / 2];
    for (int i = 0; i < half; i++) {
      const double g = plan->inv_freq[i] / 6.283185307179586476925286766559;
      turns[i] = (uint64_t)ldexp(g - floor(g), 64);
    }
    device_guard guard(d->device_id);
    if (guard.err != cudaSuccess) return cuda_fail(guard.err, "cudaSetDevice");
    void *buf = nullptr;
    cudaError_t e = cudaMalloc(&buf, sizeof(uint64_t) * (size_t)half);
    if (e != cudaSuccess) return cuda_fail(e, "cudaMalloc (frequency table)");
    e = cudaMemcpy(buf, turns, sizeof(uint64_t) * (size_t)half, cudaMemcpyHostToDevice);
    if (e != cudaSuccess) {
      cudaFree(buf);
      return cuda_fail(e, "cudaMemcpy (frequency table)");
    }
    state.turns = static_cast<const uint64_t *>(buf);
    qf_cuda_state_set(plan, &state);
  }
  return QKVFUSE_SUCCESS;
}
