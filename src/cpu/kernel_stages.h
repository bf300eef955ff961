/* SPDX-License-Identifier: Apache-2.0 */
/* Stages 2-4 on one head: RMSNorm, RoPE, the cache row.
 * Part of the kernels.h template: included only from there, after a
 * simd_<isa>.h, in one translation unit per instruction set. */
#ifndef QF_CPU_KERNELS_TEMPLATE
#error "include cpu/kernels.h, not its parts"
#endif

/* ---- stage 2: RMSNorm ---------------------------------------------------------- */

/* inv[g] = 1 / sqrt(sum_d rows[g][d]^2 / D + eps) for QV_W rows (all valid
 * pointers), the sum sequential over d as in qf_stage_rmsnorm. */
static void rms_inv(const float *const *rows, int64_t D, float eps, float *inv) {
  float ss[QV_W];
  int64_t d = 0;
#if QV_W > 1
  qv acc = qv_set1(0.0f);
  for (; d + QV_W <= D; d += QV_W) {
    qv r[QV_W];
    for (int g = 0; g < QV_W; g++) r[g] = qv_loadu(rows[g] + d);
    qv_transpose(r);
    for (int k = 0; k < QV_W; k++) acc = qv_add(acc, qv_mul(r[k], r[k]));
  }
  qv_storeu(ss, acc);
#else
  ss[0] = 0.0f;
#endif
  for (int g = 0; g < QV_W; g++)
    for (int64_t e = d; e < D; e++) ss[g] += rows[g][e] * rows[g][e];
  for (int g = 0; g < QV_W; g++) inv[g] = 1.0f / sqrtf(ss[g] / (float)D + eps);
}

/* y = x * inv * g (+ beta), g with the offset already applied; x * inv * g
 * rounded to beta_round before beta is added (QKVFUSE_DTYPE_NONE: not
 * rounded), as qf_stage_rmsnorm does in unfused-parity mode. */
static void norm_row(const float *x, float inv, const float *g, const float *beta, qkvfuse_dtype beta_round, float *y,
                     int64_t D) {
  int64_t d = 0;
#if QV_W > 1
  const qv iv = qv_set1(inv);
  if (beta)
    for (; d + QV_W <= D; d += QV_W)
      qv_storeu(y + d, qv_add(qv_round_dt(qv_mul(qv_mul(qv_loadu(x + d), iv), qv_loadu(g + d)), beta_round),
                              qv_loadu(beta + d)));
  else
    for (; d + QV_W <= D; d += QV_W) qv_storeu(y + d, qv_mul(qv_mul(qv_loadu(x + d), iv), qv_loadu(g + d)));
#endif
  for (; d < D; d++) {
    float v = x[d] * inv * g[d];
    if (beta) v = qf_round_to(v, beta_round) + beta[d];
    y[d] = v;
  }
}

/* ---- stage 3: RoPE (qf_stage_rope) --------------------------------------------------- */

static void rope_row(const float *y, const float *cos_r, const float *sin_r, float *o, int64_t D, int64_t R,
                     qkvfuse_rope_style style) {
  memcpy(o + R, y + R, (size_t)(D - R) * sizeof(float));
  if (style == QKVFUSE_ROPE_INTERLEAVED) {
    int64_t j = 0;
#if QV_W > 1
    for (; j + QV_W <= R; j += QV_W)
      qv_storeu(o + j, qv_rope_pairs(qv_loadu(y + j), qv_loadu(cos_r + j), qv_loadu(sin_r + j)));
#endif
    for (; j < R; j += 2) {
      o[j] = y[j] * cos_r[j] - y[j + 1] * sin_r[j];
      o[j + 1] = y[j + 1] * cos_r[j + 1] + y[j] * sin_r[j + 1];
    }
    return;
  }
  const int64_t h = R / 2;
  int64_t i = 0;
#if QV_W > 1
  for (; i + QV_W <= h; i += QV_W) {
    const qv lo = qv_loadu(y + i), hi = qv_loadu(y + h + i);
    qv_storeu(o + i, qv_sub(qv_mul(lo, qv_loadu(cos_r + i)), qv_mul(hi, qv_loadu(sin_r + i))));
    qv_storeu(o + h + i, qv_add(qv_mul(hi, qv_loadu(cos_r + h + i)), qv_mul(lo, qv_loadu(sin_r + h + i))));
  }
#endif
  for (; i < h; i++) {
    o[i] = y[i] * cos_r[i] - y[i + h] * sin_r[i];
    o[i + h] = y[i + h] * cos_r[i + h] + y[i] * sin_r[i + h];
  }
}

/* RMSNorm weights of p as float32 (qf_cpu_kernels.norm_weights). */
static void norm_weights(const qf_problem *p, const qf_vec *gamma, const qf_vec *beta, float *g, float *b) {
  load_row(gamma->data, gamma->dtype, g, p->D);
  if (p->desc->gamma_offset)
    for (int64_t d = 0; d < p->D; d++) g[d] = 1.0f + g[d];
  if (beta->data) load_row(beta->data, beta->dtype, b, p->D);
}

/* The full-length (R) cos and sin of token t: qf_stage_cos_sin, with the
 * table rows read by load_row (the same conversions, vectorized). */
static void cos_sin(const qf_problem *p, int64_t t, float *cos_r, float *sin_r) {
  const int64_t R = p->R, h = R / 2;
  switch (p->desc->rope_source) {
    case QKVFUSE_ROPE_COS_SIN: {
      const size_t es = qkvfuse_dtype_size(p->cos.dtype);
      load_row(row_ptr(&p->cos, t, es), p->cos.dtype, cos_r, R);
      load_row(row_ptr(&p->sin, t, es), p->sin.dtype, sin_r, R);
      return;
    }
    case QKVFUSE_ROPE_COS_SIN_CACHE: {
      const qf_mat *m = &p->cos_sin_cache;
      const size_t es = qkvfuse_dtype_size(m->dtype);
      const char *row = row_ptr(m, qf_load_index(p->positions.data, p->positions.dtype, t), es);
      if (p->desc->rope_style == QKVFUSE_ROPE_NEOX) { /* cos[i] = cos[i + h] = cos_i */
        load_row(row, m->dtype, cos_r, h);
        load_row(row + (size_t)h * es, m->dtype, sin_r, h);
        memcpy(cos_r + h, cos_r, (size_t)h * sizeof(float));
        memcpy(sin_r + h, sin_r, (size_t)h * sizeof(float));
        return;
      }
      float c[HEAD_MAX / 2], s[HEAD_MAX / 2]; /* interleaved: cos[2i] = cos[2i + 1] = cos_i */
      load_row(row, m->dtype, c, h);
      load_row(row + (size_t)h * es, m->dtype, s, h);
      for (int64_t i = 0; i < h; i++) {
        cos_r[2 * i] = cos_r[2 * i + 1] = c[i];
        sin_r[2 * i] = sin_r[2 * i + 1] = s[i];
      }
      return;
    }
    default:
      qf_stage_cos_sin(p, t, cos_r, sin_r); /* computed: libm in double, per token */
  }
}

/* ---- the fused chain -------------------------------------------------------------- */

/* Element offset of kv head kh in the cache row at (block, row), where a
 * head is one whole chunk (chunk = D: every layout but nz, or nz with D = c)
 * and so chunk kh: qf_cache_offset without its division, which at decode
 * sizes would cost more than the head's arithmetic. */
static inline int64_t head_chunk_offset(const qf_cache *cache, int64_t block, int64_t row, int64_t kh) {
  return block * cache->s_block + row * cache->s_row + kh * cache->s_chunk;
}

/* Heads per run of the direct path (kernel_direct.h): up to HEAD_MAX
 * elements of consecutive heads, stored with one call, where their rows in
 * `cache` (to_cache) follow one another (one chunk each, D elements apart:
 * paged, contiguous); else one head at a time. */
static inline int64_t heads_per_run(const qf_cache *cache, int to_cache, int64_t D) {
  const int adjacent = !to_cache || (cache->chunk == D && cache->s_chunk == D * cache->s_elem);
  return adjacent ? HEAD_MAX / D : 1;
}

/* k or v heads kh .. kh + nh - 1 (nh * D values) into their cache row at
 * (block, row); nh > 1 only where heads_per_run allows it (the heads' rows
 * follow one another). */
static void cache_heads(const qf_problem *p, const qf_cache *cache, size_t es, qkvfuse_quant_mode mode,
                        const qf_vec *scale, const qf_vec *offset, int64_t group, int64_t kh, int64_t nh,
                        const float *o, int64_t block, int64_t row) {
  const int64_t D = p->D, j0 = kh * D;
  if (cache->chunk == D) {
    quant_row(elem_ptr(cache->data, head_chunk_offset(cache, block, row, kh), es), cache->dtype, mode, scale, offset,
              group, j0, o, nh * D);
    return;
  }
  /* nz: chunks of c elements */
  for (int64_t d = 0; d < D;) {
    const int64_t j = j0 + d, n = cache->chunk - j % cache->chunk < D - d ? cache->chunk - j % cache->chunk : D - d;
    quant_row(elem_ptr(cache->data, qf_cache_offset(cache, block, row, j), es), cache->dtype, mode, scale, offset,
              group, j, o + d, n);
    d += n;
  }
}

/* Prefetch (for writing) the cache row of kv head kh at (block, row). */
QF_PREFETCH_FN prefetch_cache_head(const qf_problem *p, const qf_cache *cache, size_t es, int64_t kh, int64_t block,
                                int64_t row) {
  const int64_t D = p->D, j0 = kh * D;
  if (cache->chunk == D) {
    prefetch_write(elem_ptr(cache->data, head_chunk_offset(cache, block, row, kh), es), D * (int64_t)es);
    return;
  }
  for (int64_t d = 0; d < D;) {
    const int64_t j = j0 + d, n = cache->chunk - j % cache->chunk < D - d ? cache->chunk - j % cache->chunk : D - d;
    prefetch_write(elem_ptr(cache->data, qf_cache_offset(cache, block, row, j), es), n * (int64_t)es);
    d += n;
  }
}

/* The cache destination of token `ahead`, if any. */
static int dest_ahead(const qf_problem *p, int64_t ahead, int64_t *block, int64_t *row) {
  return p->k_cache.data && ahead >= 0 && ahead < p->T && qf_token_dest(p, ahead, block, row);
}
