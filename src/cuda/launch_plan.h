/* SPDX-License-Identifier: Apache-2.0 */
/* Host arithmetic of the CUDA backend's launch plans (backend.cu), with C
 * linkage so that a test checks it on a machine without a GPU
 * (tests/test_cuda_plan.c). */
#ifndef QKVFUSE_CUDA_LAUNCH_PLAN_H
#define QKVFUSE_CUDA_LAUNCH_PLAN_H

#include <stdint.h>

#include "cuda/params.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The least compute capability (major * 10 + minor) of the streaming kernels
 * (streaming.cuh): their cp.async copies, L2 cache hints and eviction policies are
 * sm_80 PTX, so for older architectures their device code is a trap. */
#define QF_CUDA_STREAMING_MIN_CC 80

/* The plan's form (plan.h: device_form) that gives every call to the
 * general kernel: QKVFUSE_CUDA_FORM=general, the path of a device below
 * QF_CUDA_STREAMING_MIN_CC, for tests on any GPU. */
#define QF_CUDA_FORM_GENERAL 4

/* Whether a device of compute capability cc (major * 10 + minor) runs the
 * streaming kernels, given the plan's form: from QF_CUDA_STREAMING_MIN_CC
 * on, unless the form is QF_CUDA_FORM_GENERAL; otherwise the general kernel
 * (general.cuh) serves every call. */
int qf_cuda_streaming(int cc, int form);

/* n / d as a multiply-high and a shift, for d >= 1 and n < 2^31 (streaming.cuh:
 * div_fixed): (umulhi(n, mul) + n) >> shift. */
qf_cu_div qf_cuda_divisor(uint32_t d);

/* The prefill form's blocks per item of each kind k (n[k] >= 1): items[k]
 * items, each of `chunks` token chunks, a chunk of kind k costing cost[k]
 * (> 0), for `slots` resident blocks. The smallest largest block time
 * ceil(chunks / n[k]) * cost[k] whose counts fit the slots, then one more
 * block per item in whole rounds while they fit; one block each where even
 * that does not fit. */
void qf_cuda_blocks_per_item(int64_t chunks, const int32_t *items, const int64_t *cost, int64_t slots, int64_t *n);

/* The prefill form's heads per item, heads_per_item or heads_per_item / 2 (at least 2; heads_per_item where
 * qcache: the call has a quantized cache), and its blocks per item of each
 * kind (n[k], from qf_cuda_blocks_per_item with that many heads per item):
 * heads[k] heads of kind k (0: no work), `chunks` token chunks, a k chunk
 * costing more where k_quant and every k item is full, `slots` resident
 * blocks; the one whose longest block, chunks times cost times (a per-token
 * part + its item's heads), is shorter (ties: heads_per_item). Returns the heads per
 * item. */
int qf_cuda_prefill_plan(int64_t chunks, const int64_t *heads, int heads_per_item, int k_quant, int qcache, int64_t slots,
                         int64_t *n);

/* The prefill form's tail of `chunks` token chunks with `items` items and
 * `slots` resident blocks: *tail chunks (a multiple of *piece, a quarter of
 * them rounded down, or none where a resident block would walk fewer than 3
 * chunks; with a quantized cache, qcache, a tenth rounded down where it would
 * walk 4 to 15) that blocks of *piece chunks (1, or 2 where it would walk 16
 * or more) take after the resident blocks' share. */
void qf_cuda_prefill_tail(int64_t chunks, int64_t items, int64_t slots, int qcache, int64_t *tail, int64_t *piece);

/* The general kernel's tile (general.cuh) for T tokens of `heads` heads, gpb
 * groups per block, R rotary dims and `resident` blocks in flight: *tile_tokens
 * tokens with all heads (*tile_heads = heads; as many tokens as give the groups
 * about four tasks each, within 12 KB of cos/sin tables), or one token and
 * min(heads, gpb) heads, whichever has its groups walk fewer tasks in series
 * (a one-token tile counted as two; ties: the former). */
void qf_cuda_general_tiles(int64_t T, int heads, int gpb, int R, int64_t resident, int *tile_tokens, int *tile_heads);

#ifdef __cplusplus
}
#endif

#endif /* QKVFUSE_CUDA_LAUNCH_PLAN_H */
