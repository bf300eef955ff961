// The one dispatch function of the fused kernel family.
#include "core/error.h"
#include "cuda/launch.h"

qkvfuse_status qf_cuda_launch(qkvfuse_dtype in, int vec, int nv, int lanes, int variant, const qf_cu_params *P,
                              unsigned blocks, size_t smem, cudaStream_t stream) {
  if (lanes > 0) {
    switch (in) {
      case QKVFUSE_DTYPE_FLOAT16: return qf_cuda_launch_fast_f16(lanes, variant, P, blocks, smem, stream);
      case QKVFUSE_DTYPE_BFLOAT16: return qf_cuda_launch_fast_bf16(lanes, variant, P, blocks, smem, stream);
      default: return qf_fail(QKVFUSE_ERROR_DTYPE, "qkv: no streaming CUDA kernel for dtype %s", qkvfuse_dtype_name(in));
    }
  }
  switch (in) {
    case QKVFUSE_DTYPE_FLOAT32: return qf_cuda_launch_fused_f32(vec, nv, P, blocks, smem, stream);
    case QKVFUSE_DTYPE_FLOAT16: return qf_cuda_launch_fused_f16(vec, nv, P, blocks, smem, stream);
    case QKVFUSE_DTYPE_BFLOAT16: return qf_cuda_launch_fused_bf16(vec, nv, P, blocks, smem, stream);
    case QKVFUSE_DTYPE_INT32: return qf_cuda_launch_fused_i32(vec, nv, P, blocks, smem, stream);
    default: return qf_fail(QKVFUSE_ERROR_DTYPE, "qkv: no CUDA kernel for dtype %s", qkvfuse_dtype_name(in));
  }
}

qkvfuse_status qf_cuda_launched(const char *kernel) {
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess)
    return qf_fail(QKVFUSE_ERROR_CUDA, "cuda: launching the %s kernel failed: %s (%s)", kernel, cudaGetErrorName(e),
                   cudaGetErrorString(e));
  return QKVFUSE_SUCCESS;
}
