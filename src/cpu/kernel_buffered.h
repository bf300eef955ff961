/* SPDX-License-Identifier: Apache-2.0 */
/* The fused chain, buffered path.
 * Part of the kernels.h template: included only from there, after a
 * simd_<isa>.h, in one translation unit per instruction set. */
#ifndef QF_CPU_KERNELS_TEMPLATE
#error "include cpu/kernels.h, not its parts"
#endif

/* ---- the fused chain, buffered path --------------------------------------------------- */

/* Heads [hb, he) of token t among its q heads, or (is_k) its k heads:
 * load, RMSNorm (norm != 0), RoPE, store to `out` and, for k, the cache. */
static void rotated_heads(const qf_cpu_call *c, int64_t t, int64_t ahead, int64_t hb, int64_t he, int norm,
                          const float *gamma, const float *beta, const float *cos_r, const float *sin_r,
                          const qf_mat *out, size_t es_out, int is_k, int have_dest, int64_t block, int64_t row) {
  const qf_problem *p = c->p;
  const qkvfuse_desc *dsc = p->desc;
  const int64_t D = p->D, R = p->R;
  int64_t nb = 0, nr = 0;
  const int next_dest = is_k && dest_ahead(p, ahead, &nb, &nr);
  float xg[QV_W * HEAD_MAX], y[HEAD_MAX], o[HEAD_MAX], inv[QV_W];
  const int64_t first = is_k ? p->Nq : 0; /* the kind's first head in [q | k | v] */
  for (int64_t h0 = hb; h0 < he; h0 += QV_W) {
    const int n = he - h0 < QV_W ? (int)(he - h0) : QV_W;
    for (int g = 0; g < n; g++) {
      prefetch_ahead(&p->in[is_k], c->es_in, ahead, (h0 + g) * D, D, 0);
      prefetch_ahead(out, es_out, ahead, (h0 + g) * D, D, 1);
      if (next_dest) prefetch_cache_head(p, &p->k_cache, c->es_k_cache, h0 + g, nb, nr);
      input_cols(p, t, (first + h0 + g) * D, D, xg + g * D);
      if (c->parity && c->int_input) round_row(xg + g * D, D, p->io_dtype);
    }
    if (norm) {
      const float *rows[QV_W];
      for (int g = 0; g < QV_W; g++) rows[g] = xg + (g < n ? g : n - 1) * D; /* spare lanes repeat a head */
      rms_inv(rows, D, dsc->eps, inv);
    }
    for (int g = 0; g < n; g++) {
      const float *in = xg + g * D;
      if (norm) {
        norm_row(in, inv[g], gamma, beta, c->parity ? p->io_dtype : QKVFUSE_DTYPE_NONE, y, D);
        if (c->parity) round_row(y, D, p->io_dtype);
        in = y;
      }
      if (R > 0)
        rope_row(in, cos_r, sin_r, o, D, R, dsc->rope_style);
      else
        memcpy(o, in, (size_t)D * sizeof(float));
      /* parity: RoPE's result is a tensor of the I/O dtype that k_out and the quantizer read */
      if (c->parity) round_row(o, D, p->io_dtype);
      const int64_t h = h0 + g;
      if (out->data) out_heads(p, is_k, row_ptr(out, t, es_out) + (size_t)(h * D) * es_out, out->dtype, o, D);
      if (is_k && have_dest)
        cache_heads(p, &p->k_cache, c->es_k_cache, dsc->k_quant, &p->k_scale, &p->k_offset, p->k_scale_group, h, 1, o,
                    block, row);
    }
  }
}

static void q_heads(const qf_cpu_call *c, int64_t t, int64_t q0, int64_t q1, int64_t ahead, const float *cos_r,
                    const float *sin_r) {
  const qf_problem *p = c->p;
  rotated_heads(c, t, ahead, q0, q1, p->desc->q_norm, c->q_gamma, c->q_beta, cos_r, sin_r, &p->q_out, c->es_q_out, 0,
                0, 0, 0);
}

static void kv_heads(const qf_cpu_call *c, int64_t t, int64_t ahead, const float *cos_r, const float *sin_r,
                     int have_dest, int64_t block, int64_t row) {
  const qf_problem *p = c->p;
  const int64_t D = p->D;
  rotated_heads(c, t, ahead, 0, p->Nkv, p->desc->k_norm, c->k_gamma, c->k_beta, cos_r, sin_r, &p->k_out,
                c->es_k_out, 1, have_dest, block, row);
  if (!p->v_out.data && !have_dest) return;
  int64_t nb = 0, nr = 0;
  const int next_dest = dest_ahead(p, ahead, &nb, &nr);
  float x[HEAD_MAX];
  for (int64_t h = 0; h < p->Nkv; h++) {
    prefetch_ahead(&p->in[2], c->es_in, ahead, h * D, D, 0);
    prefetch_ahead(&p->v_out, c->es_v_out, ahead, h * D, D, 1);
    if (next_dest) prefetch_cache_head(p, &p->v_cache, c->es_v_cache, h, nb, nr);
    input_cols(p, t, (p->Nq + p->Nkv + h) * D, D, x);
    if (c->parity && c->int_input) round_row(x, D, p->io_dtype);
    if (p->v_out.data)
      store_row(row_ptr(&p->v_out, t, c->es_v_out) + (size_t)(h * D) * c->es_v_out, p->v_out.dtype, x, D);
    if (have_dest)
      cache_heads(p, &p->v_cache, c->es_v_cache, p->desc->v_quant, &p->v_scale, &p->v_offset, p->v_scale_group, h, 1, x,
                  block, row);
  }
}
