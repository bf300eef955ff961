// SPDX-License-Identifier: Apache-2.0
// The one dispatch function of the fused operator's kernels, and their launch.
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

cudaError_t qf_cuda_general_allow_wide(int bytes) {
  cudaError_t (*const each[4])(int) = {qf_cuda_general_allow_wide_f32, qf_cuda_general_allow_wide_f16,
                                       qf_cuda_general_allow_wide_bf16, qf_cuda_general_allow_wide_i32};
  for (auto allow : each) {
    const cudaError_t e = allow(bytes);
    if (e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

cudaError_t qf_cuda_streaming_allow_spread(int bytes) {
  cudaError_t (*const each[4])(int) = {qf_cuda_streaming_allow_spread_f16, qf_cuda_streaming_allow_spread_bf16,
                                       qf_cuda_streaming_allow_spread_i32_f16, qf_cuda_streaming_allow_spread_i32_bf16};
  for (auto allow : each) {
    const cudaError_t e = allow(bytes);
    if (e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

qkvfuse_status qf_cuda_start(const void *kernel, unsigned blocks, unsigned threads, size_t smem, cudaStream_t stream,
                             const void *params, bool pdl, const char *name) {
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
