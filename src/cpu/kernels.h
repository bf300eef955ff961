/* SPDX-License-Identifier: Apache-2.0 */
/* The CPU backend's kernels, written once and compiled once per instruction
 * set: kernels_<isa>.c includes its vector layer (simd_<isa>.h: QV_W float
 * lanes, type qv, qv_* operations) and then this file, which defines the
 * static kernels and the table QF_CPU_KERNELS_TABLE (cpu.h).
 *
 * Shape of the work: one token at a time (the driver, backend.c, hands
 * tokens to threads), one head at a time (stored in runs of consecutive
 * heads on the direct path), each head's D values in vectors of
 * QV_W lanes. Every loop over elements is a vector body followed by a scalar
 * tail that calls the reference's own element functions (core/dtype.h,
 * reference/stages.h); QV_W == 1 (the scalar ISA) is all tail. The vector
 * bodies perform the same float32 operations in the same order as those
 * functions, so body and tail, and all ISAs, agree bit for bit.
 *
 * The one reduction, RMSNorm's sum of squares, is sequential over d in the
 * reference. It is computed for QV_W heads at once, heads in lanes: the heads
 * of a group are loaded QV_W x QV_W at a time and qv_transpose transposes
 * the tile so that lane g adds x_g[d]^2 in order d = 0, 1, ...
 *
 * Two paths per group of heads: the direct path (head shapes in whole
 * vectors: D, R/2 or R, D - R multiples of QV_W) reads the input once for the
 * sums and once for a single pass of norm, RoPE and every store, converting
 * (int32: dequantizing) each vector as it loads it; the buffered path (other
 * shapes, QV_W == 1) converts the heads into float32 buffers first and runs
 * one loop per stage.
 *
 * Buffers are on the stack (head-sized); nothing is allocated. */
#ifndef QV_W
#error "include a simd_<isa>.h before kernels.h"
#endif
#ifndef QF_CPU_KERNELS_TABLE
#error "define QF_CPU_KERNELS_TABLE (the table's name) and QF_CPU_KERNELS_ISA before kernels.h"
#endif

#include <string.h>

#include "core/dtype.h"
#include "cpu/cpu.h"
#include "reference/stages.h"

#define HEAD_MAX QF_MAX_HEAD_DIM
#define QF_CPU_KERNELS_TEMPLATE 1

#include "cpu/kernel_rows.h"     /* rows <-> float32, quantized rows, prefetch, stage 1 */
#include "cpu/kernel_stages.h"   /* RMSNorm, RoPE, cos/sin, one head's cache row */
#include "cpu/kernel_direct.h"   /* the fused chain from the input, one pass per head */
#include "cpu/kernel_buffered.h" /* the fused chain through float32 buffers, one loop per stage */
#include "cpu/kernel_unfused.h"  /* the unfused path's stages */

/* Token t: its q heads [q0, q1) (next such token q_ahead, for prefetching)
 * and/or its k and v heads (do_kv; kv_ahead), into the cache at (block, row)
 * when have_dest. */
static void token(const qf_cpu_call *c, int64_t t, const float *cos_r, const float *sin_r, int64_t q0, int64_t q1,
                  int64_t q_ahead, int do_kv, int64_t kv_ahead, int have_dest, int64_t block, int64_t row) {
#if QV_W > 1
  if (direct_ok(c->p)) {
    token_direct(c, t, cos_r, sin_r, q0, q1, q_ahead, do_kv, kv_ahead, have_dest, block, row);
    return;
  }
#endif
  if (q0 < q1) q_heads(c, t, q0, q1, q_ahead, cos_r, sin_r);
  if (do_kv) kv_heads(c, t, kv_ahead, cos_r, sin_r, have_dest, block, row);
}

const qf_cpu_kernels QF_CPU_KERNELS_TABLE = {
    QF_CPU_KERNELS_ISA, QV_W, norm_weights, cos_sin, token, {u_dequant, u_norm, u_rope, u_quant},
};
