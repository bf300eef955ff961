// SPDX-License-Identifier: Apache-2.0
// Data errors of a launch: bits of *error_flags.
#ifndef QKVFUSE_CUDA_DEVICE_REPORT_CUH
#define QKVFUSE_CUDA_DEVICE_REPORT_CUH

#include <stdint.h>

#include "cuda/params.h"

namespace qf {

__device__ __forceinline__ void report(const qf_cu_problem &P, uint32_t bit) {
  if (P.error_flags) atomicOr(P.error_flags, bit);
}

}  // namespace qf

#endif  // QKVFUSE_CUDA_DEVICE_REPORT_CUH
