// SPDX-License-Identifier: Apache-2.0
// The one dispatch function of the fused operator's kernels, and their launch.
#include <stdint.h>

#include "core/error.h"
#include "cuda/launch.h"

qkvfuse_status qf_cuda_launch(const qf_cuda_variant *v, const qf_cu_kernel_params *K, cudaStream_t stream) {
  if (v->kernel != QF_CUDA_KERNEL_GENERAL) {
    switch (v->input) {
      case QKVFUSE_DTYPE_FLOAT16: return qf_cuda_launch_streaming_f16(v, K, stream);
      case QKVFUSE_DTYPE_BFLOAT16: return qf_cuda_launch_streaming_bf16(v, K, stream);
      case QKVFUSE_DTYPE_INT32: /* computed in, and written as, its outputs' 16-bit type */
        return v->io16 == QKVFUSE_DTYPE_FLOAT16 ? qf_cuda_launch_streaming_i32_f16(v, K, stream)
                                                : qf_cuda_launch_streaming_i32_bf16(v, K, stream);
      default:
        return qf_fail(QKVFUSE_ERROR_DTYPE, "qkv: no streaming CUDA kernel for dtype %s", qkvfuse_dtype_name(v->input));
    }
  }
  switch (v->input) {
    case QKVFUSE_DTYPE_FLOAT32: return qf_cuda_launch_general_f32(v, K, stream);
    case QKVFUSE_DTYPE_FLOAT16: return qf_cuda_launch_general_f16(v, K, stream);
    case QKVFUSE_DTYPE_BFLOAT16: return qf_cuda_launch_general_bf16(v, K, stream);
    case QKVFUSE_DTYPE_INT32: return qf_cuda_launch_general_i32(v, K, stream);
    default: return qf_fail(QKVFUSE_ERROR_DTYPE, "qkv: no CUDA kernel for dtype %s", qkvfuse_dtype_name(v->input));
  }
}

// A launch asking for more than 48 KB of shared memory per block (dynamic
// and static) needs the kernel's attribute raised first, per device: a
// D > 512 general kernel (about 56 KB at D = R = 1024) and a decode kernel
// spreading its blocks (choose.cu: spread_smem). qf_cuda_start raises it to
// the device's opt-in limit before a kernel's first launch with dynamic
// shared memory there, when the launch loads the kernel anyway, and keeps
// which kernels it raised on which device (a bit each; devices 64 and up
// are raised at every such launch) in this table, open-addressed by the
// kernel's address. Every access is atomic: concurrent first launches
// raise alike.
namespace {
const int kAllowSlots = 1024;
const void *g_allowed_kernel[kAllowSlots];
unsigned long long g_allowed_devices[kAllowSlots];

cudaError_t allow_dynamic_smem(const void *kernel) {
  int dev = 0;
  cudaError_t e = cudaGetDevice(&dev);
  if (e != cudaSuccess) return e;
  const unsigned long long bit = dev < 64 ? 1ull << dev : 0;
  int slot = -1;
  size_t h = ((uintptr_t)kernel >> 4) % kAllowSlots;
  for (int i = 0; bit && i < kAllowSlots; i++, h = (h + 1) % kAllowSlots) {
    const void *seen = nullptr;
    if (__atomic_compare_exchange_n(&g_allowed_kernel[h], &seen, kernel, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE) ||
        seen == kernel) {
      slot = (int)h;
      break;
    }
  }
  if (slot >= 0 && (__atomic_load_n(&g_allowed_devices[slot], __ATOMIC_ACQUIRE) & bit)) return cudaSuccess;
  int optin = 0;
  cudaFuncAttributes attr;
  e = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
  if (e == cudaSuccess) e = cudaFuncGetAttributes(&attr, kernel);
  if (e == cudaSuccess)
    e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, optin - (int)attr.sharedSizeBytes);
  if (e == cudaSuccess && slot >= 0) __atomic_fetch_or(&g_allowed_devices[slot], bit, __ATOMIC_RELEASE);
  return e;
}
}  // namespace

qkvfuse_status qf_cuda_start(const void *kernel, unsigned blocks, unsigned threads, size_t smem, cudaStream_t stream,
                             const void *params, bool pdl, const char *name) {
  if (smem > 0) {
    const cudaError_t e = allow_dynamic_smem(kernel);
    if (e != cudaSuccess) {
      cudaGetLastError(); /* reported here, not left to a later call */
      return qf_fail(QKVFUSE_ERROR_CUDA, "cuda: allowing the %s kernel %zu B of dynamic shared memory failed: %s (%s)",
                     name, smem, cudaGetErrorName(e), cudaGetErrorString(e));
    }
  }
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(blocks);
  config.blockDim = dim3(threads);
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  config.attrs = attr;
  config.numAttrs = pdl ? 1 : 0;
  void *args[1] = {const_cast<void *>(params)};
  cudaLaunchKernelExC(&config, kernel, args); /* its error is also the last error: */
  return qf_cuda_launched(name);
}

qkvfuse_status qf_cuda_launched(const char *kernel) {
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess)
    return qf_fail(QKVFUSE_ERROR_CUDA, "cuda: launching the %s kernel failed: %s (%s)", kernel, cudaGetErrorName(e),
                   cudaGetErrorString(e));
  return QKVFUSE_SUCCESS;
}
