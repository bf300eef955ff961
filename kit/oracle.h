/* SPDX-License-Identifier: Apache-2.0 */
/* The float64 oracle of the fused chain, written from docs/SPEC.md and
 * include/qkvfuse.h only (not from the library's reference code).
 *
 * For every output element it returns the exact (float64) value before the
 * final rounding, and a slack: an absolute bound on how far a correct
 * float32 implementation may legitimately be from that value before it rounds
 * (float32 arithmetic, including cancellation in RoPE and in the norm's beta;
 * in the modes that round between stages also those intermediate roundings,
 * which a float32 evaluation may place one ulp apart from the float64 one).
 * Comparators (compare.h) turn value + slack into pass/fail. */
#ifndef TK_ORACLE_H
#define TK_ORACLE_H

#include <stdint.h>

#include "qkvfuse.h"

typedef struct tk_oracle {
  int64_t T, Nq, Nkv, D, R, H;
  qkvfuse_dtype mid; /* the dtype the outputs pass through before their own: unfused parity and cann the I/O
                        dtype (q_out's, or unquantized q_out's with desc.q_quant, docs/API.md), ascend_triton
                        bfloat16; fused NONE */

  double *q, *qs; /* [T, Nq*D] value before the final rounding, slack */
  double *k, *ks; /* [T, Nkv*D] k after RoPE, before quantization */
  double *v, *vs; /* [T, Nkv*D] */

  /* Cache element (t, j), j < Nkv*D, index t*Nkv*D + j. off: element offset
   * from the cache tensor's data pointer, -1 when the token is skipped.
   * pre: the value the cache rounds (x, x/scale or x/scale + offset). */
  int64_t *kc_off, *vc_off;
  double *kc, *kcs, *vc, *vcs;

  /* [T], NULL by default: rows whose q_out/k_out/v_out must stay untouched
   * (a CUDA run drops a token with a bad position or slot). Set by tests. */
  const uint8_t *row_skip;
  /* [Nq + 2*Nkv] (q, then k, then v heads), NULL by default: heads whose
   * output columns must stay untouched in every row (a CUDA run drops a head
   * with a non-finite weight_scale). Set by tests; cache rows via *_off. */
  const uint8_t *head_skip;
  /* q_out's intermediate dtype: mid, or NONE with a quantized q (desc.q_quant),
   * whose q / qs are then the value fp8 rounds, q / q_scale, as for a cache */
  qkvfuse_dtype q_mid;
} tk_oracle;

/* Evaluate desc on args (CPU tensors; only valid arguments). 0 on success,
 * -1 on an argument the oracle cannot evaluate (message in err). */
int tk_oracle_run(const qkvfuse_desc *desc, const qkvfuse_args *args, tk_oracle *out, char *err, size_t errlen);
void tk_oracle_free(tk_oracle *o);

/* Page-table addressing: where token t of a call with cache c (layout L)
 * goes, from args' kv_indptr, kv_indices, batch_indices and kv_positions
 * (CPU tensors): 0 skipped, 1 block *blk row *row, -1 a data error. */
int tk_oracle_page_dest(const qkvfuse_args *a, const qkvfuse_tensor *c, qkvfuse_cache_layout L, int64_t t,
                        int64_t *blk, int64_t *row);

/* Inverse frequencies and cos/sin multiplier of a scaling rule, from the
 * rules' published definitions (oracle_rope.c). 0 on success, -1 when the
 * rule's parameters are outside its domain. */
int tk_rope_freqs(double theta, const qkvfuse_rope_scaling *s, int64_t R, long double *inv_freq,
                  long double *mscale);

#endif /* TK_ORACLE_H */
