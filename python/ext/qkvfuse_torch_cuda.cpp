// SPDX-License-Identifier: Apache-2.0
// The CUDA registrations of the torch.ops.qkvfuse operators: the kernels of
// qkvfuse_torch.cpp, which launch the library on the current CUDA stream of
// the tensors' device under a guard for that device. Built when torch has CUDA
// and the CUDA toolkit (its headers) is found.
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include "qkvfuse_torch.h"

namespace {

void *current_stream(c10::DeviceIndex device) { return c10::cuda::getCurrentCUDAStream(device).stream(); }

// set before any kernel can run: static initialization of this library
[[maybe_unused]] const bool hooked = (qkvfuse_ext::cuda_stream_fn = &current_stream, true);

}  // namespace

TORCH_LIBRARY_IMPL(qkvfuse, CUDA, m) {
  m.impl("run", TORCH_FN(qkvfuse_ext::run));
  m.impl("run_out", TORCH_FN(qkvfuse_ext::run_out));
  m.impl("split_qkv_rmsnorm_rope", TORCH_FN(qkvfuse_ext::split_qkv_rmsnorm_rope));
  m.impl("split_qkv_rmsnorm_rope_out", TORCH_FN(qkvfuse_ext::split_qkv_rmsnorm_rope_out));
  m.impl("qkv_rmsnorm_rope_cache", TORCH_FN(qkvfuse_ext::qkv_rmsnorm_rope_cache));
  m.impl("qkv_rmsnorm_rope_cache_out", TORCH_FN(qkvfuse_ext::qkv_rmsnorm_rope_cache_out));
  m.impl("dequant_rope_quant_kvcache", TORCH_FN(qkvfuse_ext::dequant_rope_quant_kvcache));
  m.impl("dequant_rope_quant_kvcache_out", TORCH_FN(qkvfuse_ext::dequant_rope_quant_kvcache_out));
}
