/* SPDX-License-Identifier: Apache-2.0 */
/* The named operators' strict option: the constraints each seed states for
 * its operator, checked on the validated problem before anything is written
 * (qf_call.check). A call the library can compute may still fail on the
 * seed's own implementation; strict turns each such case into a status and a
 * message that names the caller's argument and cites the seed's constraint.
 * docs/API.md ("strict") lists them. */
#ifndef QKVFUSE_CORE_STRICT_H
#define QKVFUSE_CORE_STRICT_H

#include "core/plan.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What the problem does not keep of a QkvRmsNormRopeCache call. */
typedef struct qf_strict_cache_call {
  int64_t B, S; /* qkv_size[0], qkv_size[1] */
  const qkvfuse_tensor *k_scale, *v_scale, *k_offset, *v_offset;
} qf_strict_cache_call;

/* What the problem does not keep of a DequantRopeQuantKvcache call. */
typedef struct qf_strict_dequant_call {
  const qkvfuse_tensor *x; /* [B, H] or [B, S, H] */
  const qkvfuse_tensor *cos, *sin;
} qf_strict_dequant_call;

/* Seed 000, vllm-ascend split_qkv_rmsnorm_rope's Triton kernel (ctx unused). */
qkvfuse_status qf_strict_split(const qf_problem *p, const void *ctx);
/* Seed 001, CANN QkvRmsNormRopeCache (ctx: qf_strict_cache_call). */
qkvfuse_status qf_strict_cache(const qf_problem *p, const void *ctx);
/* Seed 003, CANN DequantRopeQuantKvcache (ctx: qf_strict_dequant_call). */
qkvfuse_status qf_strict_dequant(const qf_problem *p, const void *ctx);

#ifdef __cplusplus
}
#endif

#endif /* QKVFUSE_CORE_STRICT_H */
