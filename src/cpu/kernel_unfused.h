/* SPDX-License-Identifier: Apache-2.0 */
/* The unfused path's stage kernels.
 * Part of the kernels.h template: included only from there, after a
 * simd_<isa>.h, in one translation unit per instruction set. */
#ifndef QF_CPU_KERNELS_TEMPLATE
#error "include cpu/kernels.h, not its parts"
#endif

/* ---- the unfused chain's stages (unfused_stages.h), the reference's math ---------------- */

static void u_dequant(const qf_problem *p, int64_t c0, const qf_mat *dst, int64_t t0, int64_t t1) {
  const size_t es = qkvfuse_dtype_size(dst->dtype);
  float x[HEAD_MAX];
  for (int64_t t = t0; t < t1; t++)
    for (int64_t c = 0; c < dst->cols; c += HEAD_MAX) {
      const int64_t n = dst->cols - c < HEAD_MAX ? dst->cols - c : HEAD_MAX;
      prefetch_input(p, qkvfuse_dtype_size(p->in[0].dtype), t + QF_CPU_PREFETCH_TOKENS, c0 + c, n);
      prefetch_ahead(dst, es, t + QF_CPU_PREFETCH_TOKENS, c, n, 1);
      input_cols(p, t, c0 + c, n, x);
      store_row(row_ptr(dst, t, es) + (size_t)c * es, dst->dtype, x, n);
    }
}

static void u_norm(const qf_problem *p, const qf_mat *m, const qf_vec *gamma, const qf_vec *beta, int64_t t0,
                   int64_t t1) {
  const int64_t D = p->D, heads = m->cols / D;
  const size_t es = qkvfuse_dtype_size(m->dtype);
  float g[HEAD_MAX], b[HEAD_MAX], xg[QV_W * HEAD_MAX], y[HEAD_MAX], inv[QV_W];
  norm_weights(p, gamma, beta, g, b);
  for (int64_t t = t0; t < t1; t++) {
    char *row = row_ptr(m, t, es);
    for (int64_t h0 = 0; h0 < heads; h0 += QV_W) {
      const int n = heads - h0 < QV_W ? (int)(heads - h0) : QV_W;
      const float *rows[QV_W];
      for (int k = 0; k < n; k++) {
        prefetch_ahead(m, es, t + QF_CPU_PREFETCH_TOKENS, (h0 + k) * D, D, 1);
        load_row(row + (size_t)((h0 + k) * D) * es, m->dtype, xg + k * D, D);
      }
      for (int k = 0; k < QV_W; k++) rows[k] = xg + (k < n ? k : n - 1) * D;
      rms_inv(rows, D, p->desc->eps, inv);
      for (int k = 0; k < n; k++) {
        norm_row(xg + k * D, inv[k], g, beta->data ? b : NULL, m->dtype, y, D); /* parity: rounded before + beta */
        store_row(row + (size_t)((h0 + k) * D) * es, m->dtype, y, D);
      }
    }
  }
}

static void u_rope(const qf_problem *p, const qf_mat *src, const qf_mat *dst, const qf_mat *dst2, int64_t t0,
                   int64_t t1) {
  const int64_t D = p->D, heads = src->cols / D;
  const size_t es = qkvfuse_dtype_size(src->dtype), es_d = qkvfuse_dtype_size(dst->dtype);
  const size_t es_d2 = dst2->data ? qkvfuse_dtype_size(dst2->dtype) : 0;
  float y[HEAD_MAX], o[HEAD_MAX], cos_r[HEAD_MAX], sin_r[HEAD_MAX];
  for (int64_t t = t0; t < t1; t++) {
    cos_sin(p, t, cos_r, sin_r);
    for (int64_t h = 0; h < heads; h++) {
      prefetch_ahead(src, es, t + QF_CPU_PREFETCH_TOKENS, h * D, D, 0);
      prefetch_ahead(dst, es_d, t + QF_CPU_PREFETCH_TOKENS, h * D, D, 1);
      if (dst2->data) prefetch_ahead(dst2, es_d2, t + QF_CPU_PREFETCH_TOKENS, h * D, D, 1);
      load_row(row_ptr(src, t, es) + (size_t)(h * D) * es, src->dtype, y, D);
      rope_row(y, cos_r, sin_r, o, D, p->R, p->desc->rope_style);
      store_row(row_ptr(dst, t, es_d) + (size_t)(h * D) * es_d, dst->dtype, o, D);
      if (dst2->data) store_row(row_ptr(dst2, t, es_d2) + (size_t)(h * D) * es_d2, dst2->dtype, o, D);
    }
  }
}

static void u_quant(const qf_mat *src, const qf_mat *dst, qkvfuse_quant_mode mode, const qf_vec *scale,
                    const qf_vec *offset, int64_t group, int64_t t0, int64_t t1) {
  const size_t es = qkvfuse_dtype_size(src->dtype), es_d = qkvfuse_dtype_size(dst->dtype);
  float x[HEAD_MAX];
  for (int64_t t = t0; t < t1; t++)
    for (int64_t c = 0; c < src->cols; c += HEAD_MAX) {
      const int64_t n = src->cols - c < HEAD_MAX ? src->cols - c : HEAD_MAX;
      prefetch_ahead(src, es, t + QF_CPU_PREFETCH_TOKENS, c, n, 0);
      prefetch_ahead(dst, es_d, t + QF_CPU_PREFETCH_TOKENS, c, n, 1);
      load_row(row_ptr(src, t, es) + (size_t)c * es, src->dtype, x, n);
      quant_row(row_ptr(dst, t, es_d) + (size_t)c * es_d, dst->dtype, mode, scale, offset, group, c, x, n);
    }
}
