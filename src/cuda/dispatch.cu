// The one dispatch function of the fused kernel family.
#include "core/error.h"
#include "cuda/launch.h"

qkvfuse_status qf_cuda_launch_fused(qkvfuse_dtype in, int vec, int nv, int fast, const qf_cu_params *P,
                                    unsigned blocks, size_t smem, cudaStream_t stream) {
  switch (in) {
    case QKVFUSE_DTYPE_FLOAT32: return qf_cuda_launch_fused_f32(vec, nv, fast, P, blocks, smem, stream);
    case QKVFUSE_DTYPE_FLOAT16: return qf_cuda_launch_fused_f16(vec, nv, fast, P, blocks, smem, stream);
    case QKVFUSE_DTYPE_BFLOAT16: return qf_cuda_launch_fused_bf16(vec, nv, fast, P, blocks, smem, stream);
    case QKVFUSE_DTYPE_INT32: return qf_cuda_launch_fused_i32(vec, nv, fast, P, blocks, smem, stream);
    default: return qf_fail(QKVFUSE_ERROR_DTYPE, "qkv: no CUDA kernel for dtype %s", qkvfuse_dtype_name(in));
  }
}
