/* SPDX-License-Identifier: Apache-2.0 */
/* The scalar math of each stage of SPEC.md, on float32 arrays, for one head or
 * one element. The fused reference (reference.c) chains them per token; the
 * benchmark's unfused baseline (tools/unfused.c) runs each over all tokens
 * with memory buffers in between. Both call these same functions, so the float32 operation order is
 * defined once. Built with -ffp-contract=off: no fused multiply-adds. */
#ifndef QKVFUSE_REFERENCE_STAGES_H
#define QKVFUSE_REFERENCE_STAGES_H

#include <math.h>

#include "core/dtype.h"
#include "core/problem.h"

/* Stage 1: x[c] = acc[c] * weight_scale[c] * act_scale + bias[c] for int32
 * input (act_scale = 1 when absent), x[c] = input[c] for float input.
 * Reads token t's columns [c0, c0 + n) of [q | k | v], within one part
 * (inc elements apart: problem.h). */
static inline void qf_stage_load_row(const qf_problem *p, int64_t t, int64_t c0, int64_t n, float *x) {
  const qkvfuse_dtype dt = p->in[0].dtype;
  const void *row = qf_in_at(p, t, c0);
  int64_t part_col = c0;
  const int64_t inc = p->in[qf_in_part(p, &part_col)].inc;
  if (dt != QKVFUSE_DTYPE_INT32) {
    for (int64_t c = 0; c < n; c++) x[c] = qf_load(row, dt, c * inc);
    return;
  }
  const float *ws = (const float *)p->weight_scale.data;
  float as = p->act_scale.data ? ((const float *)p->act_scale.data)[t] : 1.0f;
  for (int64_t c = 0; c < n; c++) {
    float v = (float)((const int32_t *)row)[c * inc] * ws[c0 + c];
    if (p->act_scale.data) v = v * as;
    if (p->bias.data) v = v + qf_load(p->bias.data, p->bias.dtype, c0 + c);
    x[c] = v;
  }
}

/* The float32 sum of squares of x[0..D) for the modes that reproduce an
 * Ascend kernel (ASCEND_TRITON, CANN): float32 squares added in double and
 * rounded once to float32. Those kernels reduce in an order of their
 * hardware; a sum that depends on no order is the one an emulation of their
 * formula can reproduce (for 16-bit inputs the squares are exact and so,
 * short of a span of 2^29 between them, is the double sum). */
static inline float qf_sum_squares_exact(const float *x, int64_t D) {
  double s = 0.0;
  for (int64_t d = 0; d < D; d++) s += (double)(x[d] * x[d]);
  return (float)s;
}

/* Stage 2: RMSNorm over one head of D values, as rounding mode `mode` computes
 * it (io: the I/O dtype the staged modes round to):
 *   FUSED, UNFUSED_PARITY: ss = sum of x^2 in float32, d = 0, 1, ... in order;
 *                 y = x * (1 / sqrtf(ss / D + eps)) * g (+ beta)
 *   ASCEND_TRITON: ss as qf_sum_squares_exact; y = x * (1 / sqrtf(ss / D + eps)) * g (+ beta)
 *   CANN:          ss as qf_sum_squares_exact; y = (x / sqrtf(ss / D + eps)) * g (+ beta)
 * UNFUSED_PARITY and CANN round the scaled norm to io before adding beta: a
 * chain of separate ops stores the norm's output before the bias add reads
 * it. The caller rounds y itself (every mode but FUSED rounds it). */
static inline void qf_stage_rmsnorm(const float *x, int64_t D, float eps, const qf_vec *gamma, const qf_vec *beta,
                                    int gamma_offset, qkvfuse_rounding mode, qkvfuse_dtype io, float *y) {
  const int exact = mode == QKVFUSE_ROUNDING_ASCEND_TRITON || mode == QKVFUSE_ROUNDING_CANN;
  const int round_before_beta = mode == QKVFUSE_ROUNDING_UNFUSED_PARITY || mode == QKVFUSE_ROUNDING_CANN;
  float ss = 0.0f;
  if (exact)
    ss = qf_sum_squares_exact(x, D);
  else
    for (int64_t d = 0; d < D; d++) ss += x[d] * x[d];
  const float rms = sqrtf(ss / (float)D + eps), inv = 1.0f / rms;
  for (int64_t d = 0; d < D; d++) {
    float g = qf_load(gamma->data, gamma->dtype, d);
    if (gamma_offset) g = 1.0f + g;
    float v = mode == QKVFUSE_ROUNDING_CANN ? x[d] / rms * g : x[d] * inv * g;
    if (beta->data) {
      if (round_before_beta) v = qf_round_to(v, io);
      v = v + qf_load(beta->data, beta->dtype, d);
    }
    y[d] = v;
  }
}

/* The full-length (R) cos and sin of token t, as SPEC.md stage 3 defines
 * them for each source. */
static inline void qf_stage_cos_sin(const qf_problem *p, int64_t t, float *cos_r, float *sin_r) {
  const int64_t R = p->R, h = R / 2;
  const int interleaved = p->desc->rope_style == QKVFUSE_ROPE_INTERLEAVED;
  float c_half[QF_MAX_HEAD_DIM / 2], s_half[QF_MAX_HEAD_DIM / 2];
  switch (p->desc->rope_source) {
    case QKVFUSE_ROPE_COS_SIN: {
      const char *c = (const char *)p->cos.data + (size_t)(t * p->cos.ld) * qkvfuse_dtype_size(p->cos.dtype);
      const char *s = (const char *)p->sin.data + (size_t)(t * p->sin.ld) * qkvfuse_dtype_size(p->sin.dtype);
      for (int64_t j = 0; j < R; j++) {
        cos_r[j] = qf_load(c, p->cos.dtype, j * p->cos.inc);
        sin_r[j] = qf_load(s, p->sin.dtype, j * p->sin.inc);
      }
      return;
    }
    case QKVFUSE_ROPE_COS_SIN_CACHE: {
      int64_t pos = qf_load_index(p->positions.data, p->positions.dtype, t);
      const qf_mat *m = &p->cos_sin_cache;
      const char *row = (const char *)m->data + (size_t)(pos * m->ld) * qkvfuse_dtype_size(m->dtype);
      for (int64_t i = 0; i < h; i++) {
        c_half[i] = qf_load(row, m->dtype, i * m->inc);
        s_half[i] = qf_load(row, m->dtype, (h + i) * m->inc);
      }
      break;
    }
    case QKVFUSE_ROPE_COMPUTED: {
      /* Angles in double: p * f_i is exact to ~1e-16 relative, so the
       * reduction inside cos/sin stays accurate at any int32 position. */
      double pos = (double)qf_load_index(p->positions.data, p->positions.dtype, t);
      for (int64_t i = 0; i < h; i++) {
        double a = pos * p->inv_freq[i];
        c_half[i] = (float)(cos(a) * p->mscale);
        s_half[i] = (float)(sin(a) * p->mscale);
      }
      break;
    }
    default: return;
  }
  for (int64_t i = 0; i < h; i++) {
    if (interleaved) {
      cos_r[2 * i] = cos_r[2 * i + 1] = c_half[i];
      sin_r[2 * i] = sin_r[2 * i + 1] = s_half[i];
    } else {
      cos_r[i] = cos_r[i + h] = c_half[i];
      sin_r[i] = sin_r[i + h] = s_half[i];
    }
  }
}

/* Stage 3: rotate the first R dims of one head; dims R..D-1 pass through. */
static inline void qf_stage_rope(const float *y, int64_t D, int64_t R, qkvfuse_rope_style style, const float *cos_r,
                                 const float *sin_r, float *o) {
  for (int64_t d = R; d < D; d++) o[d] = y[d];
  if (style == QKVFUSE_ROPE_INTERLEAVED) {
    for (int64_t i = 0; i < R / 2; i++) {
      const int64_t a = 2 * i, b = 2 * i + 1;
      o[a] = y[a] * cos_r[a] - y[b] * sin_r[a];
      o[b] = y[b] * cos_r[b] + y[a] * sin_r[b];
    }
  } else {
    const int64_t h = R / 2;
    for (int64_t i = 0; i < h; i++) {
      o[i] = y[i] * cos_r[i] - y[i + h] * sin_r[i];
      o[i + h] = y[i + h] * cos_r[i + h] + y[i] * sin_r[i + h];
    }
  }
}

/* Stage 3 in the arithmetic of dtype dt (ASCEND_TRITON: bfloat16 tensors):
 * y, cos_r and sin_r hold values of dt; each product and each sum is rounded
 * to dt, as elementwise ops on tensors of that dtype do. Dims R..D-1 pass
 * through. */
static inline void qf_stage_rope_in(const float *y, int64_t D, int64_t R, qkvfuse_rope_style style,
                                    const float *cos_r, const float *sin_r, qkvfuse_dtype dt, float *o) {
  for (int64_t d = R; d < D; d++) o[d] = y[d];
  const int interleaved = style == QKVFUSE_ROPE_INTERLEAVED;
  for (int64_t i = 0; i < R / 2; i++) {
    const int64_t a = interleaved ? 2 * i : i, b = interleaved ? 2 * i + 1 : i + R / 2;
    o[a] = qf_round_to(qf_round_to(y[a] * cos_r[a], dt) - qf_round_to(y[b] * sin_r[a], dt), dt);
    o[b] = qf_round_to(qf_round_to(y[b] * cos_r[b], dt) + qf_round_to(y[a] * sin_r[b], dt), dt);
  }
}

/* Stage 4 + the store of stage 5: quantize v (channel ch of its row) and
 * store it as element `off` of a cache (or a quantized q_out) of dtype dt.
 * Channel ch uses scale (and offset) element ch / group, or element 0 of a
 * one-element scale (problem.h: k_scale_group). */
static inline void qf_stage_quant_store(void *cache, qkvfuse_dtype dt, int64_t off, float v, qkvfuse_quant_mode mode,
                                        const qf_vec *scale, const qf_vec *offset, int64_t ch, int64_t group) {
  if (mode == QKVFUSE_QUANT_NONE) {
    qf_store_float(cache, dt, off, v);
    return;
  }
  const int fp8 = mode == QKVFUSE_QUANT_FP8_E4M3 || mode == QKVFUSE_QUANT_FP8_E5M2;
  if (isnan(v)) { /* NaN: int8 0, fp8 the NaN of v's sign (the division need not keep it) */
    if (fp8)
      ((uint8_t *)cache)[off] = signbit(v) ? 0xff : 0x7f;
    else
      ((int8_t *)cache)[off] = 0;
    return;
  }
  const int64_t i = scale->n == 1 ? 0 : ch / group;
  const float s = ((const float *)scale->data)[i];
  float q = v / s;
  if (mode == QKVFUSE_QUANT_INT8_ASYM) q = q + ((const float *)offset->data)[i];
  if (mode == QKVFUSE_QUANT_FP8_E4M3)
    ((uint8_t *)cache)[off] = qf_f32_to_e4m3(q);
  else if (mode == QKVFUSE_QUANT_FP8_E5M2)
    ((uint8_t *)cache)[off] = qf_f32_to_e5m2(q);
  else
    ((int8_t *)cache)[off] = qf_f32_to_int8_sat(q);
}

/* Round a float32 array to dtype dt in place (unfused-parity intermediate). */
static inline void qf_round_array(float *x, int64_t n, qkvfuse_dtype dt) {
  for (int64_t i = 0; i < n; i++) x[i] = qf_round_to(x[i], dt);
}

/* Store a float32 array as columns [c0, c0 + n) of row r of a matrix
 * (rounding once to its dtype). */
static inline void qf_store_row(const qf_mat *m, int64_t r, int64_t c0, const float *x, int64_t n) {
  char *row = (char *)m->data + (size_t)(r * m->ld) * qkvfuse_dtype_size(m->dtype);
  for (int64_t c = 0; c < n; c++) qf_store_float(row, m->dtype, (c0 + c) * m->inc, x[c]);
}

#endif /* QKVFUSE_REFERENCE_STAGES_H */
