/* SPDX-License-Identifier: Apache-2.0 */
/* Planning hooks of the backends this build does not have. */
#include "core/backends.h"

#include "core/error.h"

#ifndef QKVFUSE_WITH_CPU_BACKEND
qkvfuse_status qf_cpu_plan(qkvfuse_plan *plan) {
  (void)plan;
  return qf_fail(QKVFUSE_ERROR_UNSUPPORTED, "backend: this build has no optimized CPU backend; use reference or auto");
}
#endif

#ifndef QKVFUSE_WITH_CUDA
qkvfuse_status qf_cuda_plan(qkvfuse_plan *plan) {
  (void)plan;
  return qf_fail(QKVFUSE_ERROR_UNSUPPORTED,
                 "device_type: cuda requested but this build of qkvfuse has no CUDA backend (nvcc was not found)");
}
#endif
