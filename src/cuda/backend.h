/* SPDX-License-Identifier: Apache-2.0 */
/* Internals of the CUDA backend shared by its translation units. */
#ifndef QKVFUSE_CUDA_BACKEND_H
#define QKVFUSE_CUDA_BACKEND_H

#include "core/plan.h"
#include "cuda/params.h"

/* Kernel parameters of a resolved problem. */
void qf_cuda_make_params(const qkvfuse_plan *plan, const qf_problem *p, qf_cu_params *P);

/* May every thread move `vec` consecutive elements as one access (D, bases
 * and strides all multiples of vec elements)? */
bool qf_cuda_vector_ok(const qf_problem *p, int vec);

#endif /* QKVFUSE_CUDA_BACKEND_H */
