/* SPDX-License-Identifier: Apache-2.0 */
/* Rows of elements <-> float32, prefetch, stage 1.
 * Part of the kernels.h template: included only from there, after a
 * simd_<isa>.h, in one translation unit per instruction set. */
#ifndef QF_CPU_KERNELS_TEMPLATE
#error "include cpu/kernels.h, not its parts"
#endif

static inline char *elem_ptr(void *base, int64_t i, size_t es) { return (char *)base + (size_t)i * es; }
static inline char *row_ptr(const qf_mat *m, int64_t r, size_t es) {
  return (char *)m->data + (size_t)(r * m->ld) * es;
}

/* Software prefetch of the token a thread will process next (`ahead`, chosen
 * by the driver), one head at a time: spread evenly through the work, so that
 * memory latency overlaps the arithmetic (one whole-row prefetch per token
 * does not).
 * Writes use PREFETCHW. The helpers are always inlined: GCC takes an
 * out-of-line one for a pure function and deletes its calls. */
#define QF_PREFETCH_FN static inline __attribute__((always_inline)) void
QF_PREFETCH_FN prefetch_read(const void *p, int64_t bytes) {
  for (int64_t b = 0; b < bytes; b += 64) __builtin_prefetch((const char *)p + b, 0, 3);
}
QF_PREFETCH_FN prefetch_write(const void *p, int64_t bytes) {
  for (int64_t b = 0; b < bytes; b += 64) __builtin_prefetch((const char *)p + b, 1, 3);
}
/* Elements j0 .. j0 + n of row `ahead` of m (none if ahead < 0 or past the end). */
QF_PREFETCH_FN prefetch_ahead(const qf_mat *m, size_t es, int64_t ahead, int64_t j0, int64_t n, int write) {
  if (!m->data || ahead < 0 || ahead >= m->rows) return;
  const char *at = row_ptr(m, ahead, es) + (size_t)j0 * es;
  if (write)
    prefetch_write(at, n * (int64_t)es);
  else
    prefetch_read(at, n * (int64_t)es);
}

/* Token t's input from column c of [q | k | v] on, within one part. */
static inline const char *input_at(const qf_problem *p, int64_t t, int64_t c, size_t es) {
  const qf_mat *m = &p->in[qf_in_part(p, &c)];
  return row_ptr(m, t, es) + (size_t)c * es;
}

/* prefetch_ahead of the input's columns [c, c + n), within one part. */
QF_PREFETCH_FN prefetch_input(const qf_problem *p, size_t es, int64_t ahead, int64_t c, int64_t n) {
  const qf_mat *m = &p->in[qf_in_part(p, &c)];
  prefetch_ahead(m, es, ahead, c, n, 0);
}

/* ---- rows of elements <-> float32 ------------------------------------------------ */

#if QV_W > 1
/* QV_W elements from index i of a float or int32 array, as float32. */
static inline qv qv_load_dt(const void *base, qkvfuse_dtype dt, int64_t i) {
  switch (dt) {
    case QKVFUSE_DTYPE_BFLOAT16:
      return qv_load_bf16((const uint16_t *)base + i);
    case QKVFUSE_DTYPE_FLOAT16:
      return qv_load_f16((const uint16_t *)base + i);
    case QKVFUSE_DTYPE_INT32:
      return qv_load_i32((const int32_t *)base + i);
    default:
      return qv_loadu((const float *)base + i);
  }
}
#endif

/* x[0..n) = float(src[0..n)) for a float or int32 src. */
static void load_row(const void *src, qkvfuse_dtype dt, float *x, int64_t n) {
  int64_t i = 0;
#if QV_W > 1
  switch (dt) {
    case QKVFUSE_DTYPE_FLOAT32:
      memcpy(x, src, (size_t)n * sizeof(float));
      return;
    case QKVFUSE_DTYPE_BFLOAT16:
      for (; i + QV_W <= n; i += QV_W) qv_storeu(x + i, qv_load_bf16((const uint16_t *)src + i));
      break;
    case QKVFUSE_DTYPE_FLOAT16:
      for (; i + QV_W <= n; i += QV_W) qv_storeu(x + i, qv_load_f16((const uint16_t *)src + i));
      break;
    case QKVFUSE_DTYPE_INT32:
      for (; i + QV_W <= n; i += QV_W) qv_storeu(x + i, qv_load_i32((const int32_t *)src + i));
      break;
    default:
      break;
  }
#endif
  for (; i < n; i++) x[i] = qf_load(src, dt, i);
}

/* dst[0..n) = x[0..n) rounded once to the float dtype dt. */
static void store_row(void *dst, qkvfuse_dtype dt, const float *x, int64_t n) {
  int64_t i = 0;
#if QV_W > 1
  switch (dt) {
    case QKVFUSE_DTYPE_FLOAT32:
      memcpy(dst, x, (size_t)n * sizeof(float));
      return;
    case QKVFUSE_DTYPE_BFLOAT16: /* two vectors per store: whole 64-byte lines with AVX-512 */
#ifdef QV_BF16_ROW_FAST
      if (n % (2 * QV_W) == 0) {
        unsigned sub = 0;
        for (; i < n; i += 2 * QV_W) {
          const qv a = qv_loadu(x + i), b = qv_loadu(x + i + QV_W);
          sub |= qv_subnormals(a, b);
          qv_store2_bf16_unchecked((uint16_t *)dst + i, a, b);
        }
        if (!sub) return;
        i = 0; /* a subnormal was flushed: store the row again, exactly */
      }
#endif
      for (; i + 2 * QV_W <= n; i += 2 * QV_W)
        qv_store2_bf16((uint16_t *)dst + i, qv_loadu(x + i), qv_loadu(x + i + QV_W));
      for (; i + QV_W <= n; i += QV_W) qv_store_bf16((uint16_t *)dst + i, qv_loadu(x + i));
      break;
    case QKVFUSE_DTYPE_FLOAT16:
      for (; i + 2 * QV_W <= n; i += 2 * QV_W)
        qv_store2_f16((uint16_t *)dst + i, qv_loadu(x + i), qv_loadu(x + i + QV_W));
      for (; i + QV_W <= n; i += QV_W) qv_store_f16((uint16_t *)dst + i, qv_loadu(x + i));
      break;
    default:
      break;
  }
#endif
  for (; i < n; i++) qf_store_float(dst, dt, i, x[i]);
}

#if QV_W > 1
/* v rounded to dt (float32: unchanged), in float32 lanes */
static inline qv qv_round_dt(qv v, qkvfuse_dtype dt) {
  switch (dt) {
    case QKVFUSE_DTYPE_BFLOAT16:
      return qv_round_bf16(v);
    case QKVFUSE_DTYPE_FLOAT16:
      return qv_round_f16(v);
    default:
      return v;
  }
}
#endif

/* Round x in place to dt (unfused-parity intermediates); float32: nothing. */
static void round_row(float *x, int64_t n, qkvfuse_dtype dt) {
  if (dt == QKVFUSE_DTYPE_FLOAT32) return;
  int64_t i = 0;
#if QV_W > 1
  if (dt == QKVFUSE_DTYPE_BFLOAT16)
    for (; i + QV_W <= n; i += QV_W) qv_storeu(x + i, qv_round_bf16(qv_loadu(x + i)));
  else if (dt == QKVFUSE_DTYPE_FLOAT16)
    for (; i + QV_W <= n; i += QV_W) qv_storeu(x + i, qv_round_f16(qv_loadu(x + i)));
#endif
  for (; i < n; i++) x[i] = qf_round_to(x[i], dt);
}

/* Stage 4 + store: x[0..n) quantized (or rounded, mode NONE) into dst[0..n)
 * of dtype dt; element i has channel ch0 + i, whose scale (and offset) is
 * element (ch0 + i) / group, or element 0 of a one-element scale
 * (qf_stage_quant_store). */
static void quant_row(void *dst, qkvfuse_dtype dt, qkvfuse_quant_mode mode, const qf_vec *scale, const qf_vec *offset,
                      int64_t group, int64_t ch0, const float *x, int64_t n) {
  if (mode == QKVFUSE_QUANT_NONE) {
    store_row(dst, dt, x, n);
    return;
  }
  int64_t i = 0;
#if QV_W > 1
  uint8_t *q = (uint8_t *)dst; /* int8 and fp8: one byte per element */
  const float *s = (const float *)scale->data, *o = offset->data ? (const float *)offset->data : s;
  const int asym = mode == QKVFUSE_QUANT_INT8_ASYM;
  if (scale->n != 1 && group == 1) { /* per channel: a vector of scales */
    s += ch0, o += ch0;
    if (mode == QKVFUSE_QUANT_FP8_E4M3)
      for (; i + QV_W <= n; i += QV_W) qv_store_e4m3(q + i, qv_loadu(x + i), qv_loadu(s + i));
    else if (mode == QKVFUSE_QUANT_FP8_E5M2)
      for (; i + QV_W <= n; i += QV_W) qv_store_e5m2(q + i, qv_loadu(x + i), qv_loadu(s + i));
    else
      for (; i + QV_W <= n; i += QV_W)
        qv_store_int8((int8_t *)q + i, qv_loadu(x + i), qv_loadu(s + i), qv_loadu(o + i), asym);
  } else {
    while (i < n) {
      /* [i, e): the channels of one scale element (all of them per tensor,
         one kv head's per head), so that a vector has one scale */
      int64_t e = n, k = 0;
      if (scale->n != 1) {
        k = (ch0 + i) / group;
        if ((k + 1) * group - ch0 < e) e = (k + 1) * group - ch0;
      }
      const qv s1 = qv_set1(s[k]), o1 = qv_set1(o[k]);
      if (mode == QKVFUSE_QUANT_FP8_E4M3)
        for (; i + QV_W <= e; i += QV_W) qv_store_e4m3(q + i, qv_loadu(x + i), s1);
      else if (mode == QKVFUSE_QUANT_FP8_E5M2)
        for (; i + QV_W <= e; i += QV_W) qv_store_e5m2(q + i, qv_loadu(x + i), s1);
      else
        for (; i + QV_W <= e; i += QV_W) qv_store_int8((int8_t *)q + i, qv_loadu(x + i), s1, o1, asym);
      for (; i < e; i++) qf_stage_quant_store(dst, dt, i, x[i], mode, scale, offset, ch0 + i, group);
    }
  }
#endif
  for (; i < n; i++) qf_stage_quant_store(dst, dt, i, x[i], mode, scale, offset, ch0 + i, group);
}

/* n values o of whole heads into their place `dst` in q_out (is_k = 0) or
 * k_out of dtype dt: rounded once to dt, or for q with desc.q_quant
 * fp8(o / q_scale). */
static void out_heads(const qf_problem *p, int is_k, void *dst, qkvfuse_dtype dt, const float *o, int64_t n) {
  if (!is_k && p->desc->q_quant != QKVFUSE_QUANT_NONE)
    quant_row(dst, dt, p->desc->q_quant, &p->q_scale, &p->q_scale, 1, 0, o, n);
  else
    store_row(dst, dt, o, n);
}

/* ---- stage 1: input -------------------------------------------------------------- */

/* Columns [c0, c0 + n) of token t's row: float(input), or for int32 input
 * acc * weight_scale * act_scale + bias (qf_stage_load_row). */
static void input_cols(const qf_problem *p, int64_t t, int64_t c0, int64_t n, float *x) {
  const qkvfuse_dtype dt = p->in[0].dtype;
  const char *row = input_at(p, t, c0, qkvfuse_dtype_size(dt));
  if (dt != QKVFUSE_DTYPE_INT32) {
    load_row(row, dt, x, n);
    return;
  }
  int64_t c = 0;
#if QV_W > 1
  const int32_t *acc = (const int32_t *)row;
  const float *ws = (const float *)p->weight_scale.data + c0;
  const int act = p->act_scale.data != NULL, bias = p->bias.data != NULL;
  const qv as = qv_set1(act ? ((const float *)p->act_scale.data)[t] : 1.0f);
  for (; c + QV_W <= n; c += QV_W) {
    qv v = qv_mul(qv_load_i32(acc + c), qv_loadu(ws + c));
    if (act) v = qv_mul(v, as);
    if (bias) v = qv_add(v, qv_load_dt(p->bias.data, p->bias.dtype, c0 + c));
    qv_storeu(x + c, v);
  }
#endif
  if (c < n) qf_stage_load_row(p, t, c0 + c, n - c, x + c);
}

/* dst[0..n) = src[0..n) of the same float dtype, as a load and a store
 * would: 16-bit NaNs are quieted (dtype.h), everything else is copied. */
#if QV_W > 1
static void copy_row(void *dst, const void *src, qkvfuse_dtype dt, int64_t n) {
  int64_t i = 0;
  if (dt == QKVFUSE_DTYPE_FLOAT32) {
    memcpy(dst, src, (size_t)n * sizeof(float));
    return;
  }
  const uint16_t inf = dt == QKVFUSE_DTYPE_BFLOAT16 ? 0x7f80 : 0x7c00,
                 quiet = dt == QKVFUSE_DTYPE_BFLOAT16 ? 0x40 : 0x200;
  for (; i + QV_COPY16 <= n; i += QV_COPY16)
    qv_copy_quiet16((uint16_t *)dst + i, (const uint16_t *)src + i, inf, quiet);
  for (; i < n; i++) qf_store_float(dst, dt, i, qf_load(src, dt, i));
}
#endif
