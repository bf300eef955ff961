/* Planning hooks of the backends this build does not have. */
#include "core/backends.h"

#include <string.h>

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

qkvfuse_status qf_cuda_copy_rows(const qf_mat *dst, const qf_mat *src, void *stream) {
  (void)dst;
  (void)src;
  (void)stream;
  return qf_fail(QKVFUSE_ERROR_UNSUPPORTED, "this build of qkvfuse has no CUDA backend");
}
#endif

qkvfuse_status qf_copy_rows(const qkvfuse_plan *plan, const qf_mat *dst, const qf_mat *src, void *stream) {
  if (plan->desc.device_type == QKVFUSE_DEVICE_CUDA) return qf_cuda_copy_rows(dst, src, stream);
  const size_t es = qkvfuse_dtype_size(src->dtype);
  for (int64_t r = 0; r < src->rows; r++)
    memcpy((char *)dst->data + (size_t)(r * dst->ld) * es, (const char *)src->data + (size_t)(r * src->ld) * es,
           (size_t)src->cols * es);
  return QKVFUSE_SUCCESS;
}
