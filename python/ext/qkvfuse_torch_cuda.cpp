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
  QKVFUSE_TORCH_KERNELS(m);
}
