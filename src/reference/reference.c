/* SPDX-License-Identifier: Apache-2.0 */
/* The scalar reference of SPEC.md: the fused chain, one token at a time, one
 * head at a time, in float32, written for clarity. Every other backend is
 * checked against it. Single-threaded; no allocation (head-sized arrays on the
 * stack). */
#include "core/plan.h"
#include "reference/stages.h"

/* k (after RoPE) or v of kv head h into its cache row. */
static void write_kv_head(const qf_problem *p, const float *o, int64_t h, const qf_cache *cache,
                          qkvfuse_quant_mode mode, const qf_vec *scale, const qf_vec *offset, int64_t group,
                          int have_dest, int64_t block, int64_t row) {
  const int64_t D = p->D;
  if (!have_dest) return;
  for (int64_t d = 0; d < D; d++) {
    const int64_t j = h * D + d;
    qf_stage_quant_store(cache->data, cache->dtype, qf_cache_offset(cache, block, row, j), o[d], mode, scale, offset,
                         j, group);
  }
}

/* q head h of token t into q_out: rounded to its dtype, or (desc.q_quant)
 * fp8(q / q_scale). */
static void write_q_head(const qf_problem *p, int64_t t, int64_t h, const float *o) {
  const qkvfuse_quant_mode m = p->desc->q_quant;
  if (m == QKVFUSE_QUANT_NONE) {
    qf_store_row(&p->q_out, t, h * p->D, o, p->D);
    return;
  }
  uint8_t *row = (uint8_t *)p->q_out.data + t * p->q_out.ld;
  for (int64_t d = 0; d < p->D; d++)
    qf_stage_quant_store(row, p->q_out.dtype, (h * p->D + d) * p->q_out.inc, o[d], m, &p->q_scale, &p->q_scale, 0, 1);
}

static void reference_token(const qf_problem *p, int64_t t) {
  const qkvfuse_desc *dsc = p->desc;
  const int64_t D = p->D, R = p->R, Nq = p->Nq, Nkv = p->Nkv;
  const qkvfuse_rounding mode = dsc->rounding;
  /* staged: round to the I/O dtype after every stage (parity, CANN); triton:
   * q and k held in bfloat16 from the norm on, RoPE in bfloat16 */
  const int staged = mode == QKVFUSE_ROUNDING_UNFUSED_PARITY || mode == QKVFUSE_ROUNDING_CANN;
  const int triton = mode == QKVFUSE_ROUNDING_ASCEND_TRITON;
  const qkvfuse_dtype mid = triton ? QKVFUSE_DTYPE_BFLOAT16 : p->io_dtype;
  const int int_input = p->in[0].dtype == QKVFUSE_DTYPE_INT32;
  float x[QF_MAX_HEAD_DIM], y[QF_MAX_HEAD_DIM], o[QF_MAX_HEAD_DIM];
  float cos_r[QF_MAX_HEAD_DIM], sin_r[QF_MAX_HEAD_DIM];

  if (R > 0) qf_stage_cos_sin(p, t, cos_r, sin_r);
  if (R > 0 && triton) qf_round_array(cos_r, R, mid), qf_round_array(sin_r, R, mid);
  int64_t block = 0, row = 0;
  const int have_dest = dsc->cache_layout != QKVFUSE_CACHE_NONE && qf_token_dest(p, t, &block, &row);

  /* q heads, then k heads: load, norm, RoPE, store */
  for (int64_t h = 0; h < Nq + Nkv; h++) {
    const int is_q = h < Nq;
    qf_stage_load_row(p, t, h * D, D, x);
    if (staged && int_input) qf_round_array(x, D, mid);
    const float *in = x;
    if (is_q ? dsc->q_norm : dsc->k_norm) {
      qf_stage_rmsnorm(x, D, dsc->eps, is_q ? &p->q_gamma : &p->k_gamma, is_q ? &p->q_beta : &p->k_beta,
                       dsc->gamma_offset, mode, mid, y);
      if (staged || triton) qf_round_array(y, D, mid);
      in = y;
    } else if (triton) {
      qf_round_array(x, D, mid);
    }
    if (R > 0 && triton)
      qf_stage_rope_in(in, D, R, dsc->rope_style, cos_r, sin_r, mid, o);
    else if (R > 0)
      qf_stage_rope(in, D, R, dsc->rope_style, cos_r, sin_r, o);
    else
      for (int64_t d = 0; d < D; d++) o[d] = in[d];
    /* staged: the RoPE result is a tensor of the I/O dtype that every later
     * stage (k_out, the quantizer) reads */
    if (staged) qf_round_array(o, D, mid);
    if (is_q) {
      write_q_head(p, t, h, o);
    } else {
      const int64_t kh = h - Nq;
      if (p->k_out.data) qf_store_row(&p->k_out, t, kh * D, o, D);
      write_kv_head(p, o, kh, &p->k_cache, dsc->k_quant, &p->k_scale, &p->k_offset, p->k_scale_group, have_dest,
                    block, row);
    }
  }

  /* v heads: load (dequant), store, quantize; unread without v_out or a cache row */
  for (int64_t h = 0; h < Nkv && (p->v_out.data || have_dest); h++) {
    qf_stage_load_row(p, t, (Nq + Nkv + h) * D, D, x);
    if (staged && int_input) qf_round_array(x, D, mid);
    if (p->v_out.data) qf_store_row(&p->v_out, t, h * D, x, D);
    write_kv_head(p, x, h, &p->v_cache, dsc->v_quant, &p->v_scale, &p->v_offset, p->v_scale_group, have_dest, block,
                  row);
  }
}

qkvfuse_status qf_reference_run(const qkvfuse_plan *plan, const qf_problem *p, void *stream) {
  (void)plan;
  (void)stream;
  for (int64_t t = 0; t < p->T; t++) reference_token(p, t);
  return QKVFUSE_SUCCESS;
}
