/* SPDX-License-Identifier: Apache-2.0 */
/* Fixed base specs shared by the error, thread and named tests: each turns on
 * a different set of features, so a mutation of one argument is meaningful. */
#ifndef TK_BASES_H
#define TK_BASES_H

#include "case.h"

enum {
  TK_BASE_A = 1, /* f16 in, norm+beta, cos_sin_cache (partial R), paged, k int8 asym [Nkv,D], v fp8 [1], k_out/v_out */
  TK_BASE_B = 2, /* int32 in (weight/act scale, bf16 bias), per-token cos/sin, contiguous, k f32, v int8 sym flat, parity */
  TK_BASE_C = 4, /* bf16 in, computed yarn rope (interleaved), gamma offset, in-place q/k, nz interleaved fp8 caches */
  TK_BASE_D = 8, /* f32 in, nothing but q_out */
  TK_BASE_E = 16, /* an engine's decode call: bf16 in, norm, bf16 cos_sin_cache, int64 positions and slots, a paged
                     cache of whole rows, k int8 sym [Nkv,D], v fp8 [1] (CUDA: the decode kernel's engine-call form) */
  TK_BASE_F = 32, /* quantized q and per-head scales: bf16 in, norm, bf16 cos_sin_cache, q_out fp8 e5m2 (q_scale
                     [1]), k_out/v_out bf16, paged_hnd, k e5m2 [Nkv], v int8 asym [Nkv] (scale and offset) */
  TK_BASE_G = 64, /* base E with an fp8 e5m2 k cache and per-head scales: k e5m2 [Nkv], v int8 sym [Nkv] (CUDA:
                     the decode kernel's engine-call form) */
  TK_BASE_P = 128, /* page-table addressing: bf16 in, norm, bf16 cos_sin_cache, paged_hnd cache, k int8 sym [1], v bf16,
                     3 sequences of block_size 4 (kv_indptr int32, kv_indices int64, batch_indices int32,
                     kv_positions int64), k_out */
  TK_BASE_I = 256 /* int32 in (weight/act scale, no bias), k norm, per-token bf16 cos/sin, q_out bf16, paged, k and v
                     int8 sym [Nkv,D] (CUDA: the streaming kernel's int32 forms) */
};

void tk_base_spec(int which, tk_spec *s);

#endif /* TK_BASES_H */
