/* SPDX-License-Identifier: Apache-2.0 */
/* The vector layer of kernels.h for the portable scalar path: one lane. With
 * QV_W == 1 every loop of the template is its scalar tail, i.e. the
 * reference's element functions, so nothing else is needed here. */
#ifndef QKVFUSE_CPU_SIMD_SCALAR_H
#define QKVFUSE_CPU_SIMD_SCALAR_H

#define QV_W 1

#endif /* QKVFUSE_CPU_SIMD_SCALAR_H */
