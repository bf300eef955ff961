/* SPDX-License-Identifier: Apache-2.0 */
/* Backend planning hooks. Each fills plan->backend, backend_name, run (and its
 * own fields) for the plan's descriptor, or returns QKVFUSE_ERROR_UNSUPPORTED
 * with a message when it cannot serve it (not built, no device, ...). */
#ifndef QKVFUSE_CORE_BACKENDS_H
#define QKVFUSE_CORE_BACKENDS_H

#include "core/plan.h"

#ifdef __cplusplus
extern "C" {
#endif

qkvfuse_status qf_cpu_plan(qkvfuse_plan *plan);
qkvfuse_status qf_cuda_plan(qkvfuse_plan *plan);

#ifdef __cplusplus
}
#endif

#endif /* QKVFUSE_CORE_BACKENDS_H */
