// SPDX-License-Identifier: Apache-2.0
// The one dispatch function of the fused operator's kernels, and their launch.
#include "core/error.h"
#include "cuda/launch.h"

qkvfuse_status qf_cuda_launch(qkvfuse_dtype in, int vec, int nv, int lanes, int variant, const qf_cu_params *P,
                              unsigned blocks, size_t smem, cudaStream_t stream) {
  if (lanes > 0) {
    switch (in) {
      case QKVFUSE_DTYPE_FLOAT16: return qf_cuda_launch_streaming_f16(lanes, variant, P, blocks, smem, stream);
      case QKVFUSE_DTYPE_BFLOAT16: return qf_cuda_launch_streaming_bf16(lanes, variant, P, blocks, smem, stream);
      default: return qf_fail(QKVFUSE_ERROR_DTYPE, "qkv: no streaming CUDA kernel for dtype %s", qkvfuse_dtype_name(in));
    }
  }
  switch (in) {
    case QKVFUSE_DTYPE_FLOAT32: return qf_cuda_launch_general_f32(vec, nv, P, blocks, smem, stream);
    case QKVFUSE_DTYPE_FLOAT16: return qf_cuda_launch_general_f16(vec, nv, P, blocks, smem, stream);
    case QKVFUSE_DTYPE_BFLOAT16: return qf_cuda_launch_general_bf16(vec, nv, P, blocks, smem, stream);
    case QKVFUSE_DTYPE_INT32: return qf_cuda_launch_general_i32(vec, nv, P, blocks, smem, stream);
    default: return qf_fail(QKVFUSE_ERROR_DTYPE, "qkv: no CUDA kernel for dtype %s", qkvfuse_dtype_name(in));
  }
}

qkvfuse_status qf_cuda_start(const void *kernel, unsigned blocks, unsigned threads, size_t smem, cudaStream_t stream,
                             const qf_cu_params *P, const char *name) {
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(blocks);
  config.blockDim = dim3(threads);
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  config.attrs = attr;
  config.numAttrs = P->pdl ? 1 : 0;
  void *args[1] = {const_cast<qf_cu_params *>(P)};
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
