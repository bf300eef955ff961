/* SPDX-License-Identifier: Apache-2.0 */
/* The float64 oracle: see oracle.h. One token at a time, stage by stage,
 * exactly as SPEC.md "The fused chain" reads; a slack is carried next to every
 * value (see oracle.h), with u = 2^-24 the float32 unit roundoff. */
#include "oracle.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fp.h"
#include "tview.h"

#define U 0x1.0p-24

typedef struct ctx {
  const qkvfuse_desc *desc;
  const qkvfuse_args *a;
  int64_t T, Nq, Nkv, D, R, H, B, S;
  /* staged: round to the I/O dtype io after every stage (unfused parity,
   * CANN); triton: q and k in bfloat16 from the norm on, RoPE in bfloat16
   * (ascend_triton); header: qkvfuse_rounding */
  int staged, triton;
  qkvfuse_dtype io;
  long double inv_freq[512], mscale; /* R/2 <= 512 */
  double *c, *s, *ec, *es; /* [R] cos/sin of the current token and their slack */
  double *x, *ex;          /* [H] the current token after dequant */
  double *y, *ey;          /* [D] one head after the norm */
  double *o, *eo;          /* [D] one head after RoPE */
} ctx;

static int fail(char *err, size_t n, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  if (err && n) vsnprintf(err, n, fmt, ap);
  va_end(ap);
  return -1;
}

/* Round v (known to +-e) to dt: the float64 result, and how far a float32
 * evaluation's rounding may land from it (0 when v +- e round alike). */
static void round_unc(qkvfuse_dtype dt, double v, double e, double *out, double *eout) {
  double r = tk_round(dt, v);
  *out = r;
  *eout = 0;
  if (e > 0 && isfinite(v)) {
    double lo = tk_round(dt, v - e), hi = tk_round(dt, v + e);
    *eout = fmax(hi - r, r - lo);
  }
}

/* Column c of token t's input row [q | k | v]: of qkv, or of the q, k or v
 * tensor holding it (v absent: nothing reads it, 0). */
static double input_at(const ctx *k, int64_t t, int64_t c) {
  const qkvfuse_args *a = k->a;
  if (a->qkv) return tk_get(a->qkv, t * k->H + c);
  const int64_t qd = k->Nq * k->D, kv = k->Nkv * k->D;
  if (c < qd) return tk_get(a->q, t * qd + c);
  if (c < qd + kv) return tk_get(a->k, t * kv + c - qd);
  return a->v ? tk_get(a->v, t * kv + c - qd - kv) : 0.0;
}

static void dequant(ctx *k, int64_t t) {
  const qkvfuse_args *a = k->a;
  int is_int = (a->qkv ? a->qkv : a->q)->dtype == QKVFUSE_DTYPE_INT32;
  double as = (is_int && a->act_scale) ? tk_get(a->act_scale, t) : 1.0;
  for (int64_t c = 0; c < k->H; c++) {
    double v = input_at(k, t, c);
    if (!is_int) {
      k->x[c] = v;
      k->ex[c] = 0;
      continue;
    }
    double prod = v * tk_get(a->weight_scale, c) * as;
    double b = a->bias ? tk_get(a->bias, c) : 0.0;
    k->x[c] = prod + b;
    /* float(acc), two products, one sum: each at most u relative; 8u covers them. */
    k->ex[c] = 8 * U * (fabs(prod) + fabs(b));
    if (k->staged) round_unc(k->io, k->x[c], k->ex[c], &k->x[c], &k->ex[c]);
  }
}

/* cos/sin (length R, expanded) of token t. */
static int cos_sin_values(ctx *k, int64_t t, char *err, size_t n) {
  const qkvfuse_desc *d = k->desc;
  const qkvfuse_args *a = k->a;
  int64_t R = k->R, h = R / 2;
  int neox = d->rope_style == QKVFUSE_ROPE_NEOX;
  if (d->rope_source == QKVFUSE_ROPE_COS_SIN) {
    for (int64_t i = 0; i < R; i++) {
      k->c[i] = tk_get(a->cos, t * R + i);
      k->s[i] = tk_get(a->sin, t * R + i);
      k->ec[i] = k->es[i] = 0;
    }
    return 0;
  }
  int64_t p = tk_get_int(a->positions, t);
  for (int64_t i = 0; i < h; i++) {
    double cv, sv, e = 0;
    if (d->rope_source == QKVFUSE_ROPE_COS_SIN_CACHE) {
      if (p < 0 || p >= a->cos_sin_cache->shape[0]) return fail(err, n, "oracle: position %lld out of range", (long long)p);
      cv = tk_get(a->cos_sin_cache, p * R + i);
      sv = tk_get(a->cos_sin_cache, p * R + h + i);
    } else {
      long double ang = (long double)p * k->inv_freq[i];
      cv = (double)(cosl(ang) * k->mscale);
      sv = (double)(sinl(ang) * k->mscale);
      /* float32 cos/sin of a double-reduced angle; the angle itself is as
       * good as double inverse frequencies allow (a few ulps of p * f). */
      e = (double)k->mscale * (4 * U + (double)fabsl(ang) * 0x1.0p-48);
    }
    int64_t a0 = neox ? i : 2 * i, a1 = neox ? i + h : 2 * i + 1;
    k->c[a0] = k->c[a1] = cv;
    k->s[a0] = k->s[a1] = sv;
    k->ec[a0] = k->ec[a1] = k->es[a0] = k->es[a1] = e;
  }
  return 0;
}

/* cos/sin of token t as the mode holds them: ascend_triton in bfloat16. */
static int cos_sin(ctx *k, int64_t t, char *err, size_t n) {
  if (cos_sin_values(k, t, err, n)) return -1;
  for (int64_t i = 0; i < k->R && k->triton; i++) {
    round_unc(QKVFUSE_DTYPE_BFLOAT16, k->c[i], k->ec[i], &k->c[i], &k->ec[i]);
    round_unc(QKVFUSE_DTYPE_BFLOAT16, k->s[i], k->es[i], &k->s[i], &k->es[i]);
  }
  return 0;
}

/* Norm (if gamma) then RoPE of one head starting at x[base]; result in o/eo. */
static void head(ctx *k, int64_t base, const qkvfuse_tensor *gamma, const qkvfuse_tensor *beta) {
  const qkvfuse_desc *d = k->desc;
  int64_t D = k->D, R = k->R;
  const double *x = k->x + base, *ex = k->ex + base;
  if (gamma) {
    double sum = 0, sabs = 0;
    for (int64_t i = 0; i < D; i++) {
      sum += x[i] * x[i];
      sabs += fabs(x[i]) * ex[i];
    }
    double ms = sum / (double)D, den = ms + (double)d->eps, r = 1.0 / sqrt(den);
    /* a float32 sum of D squares is within (D-1)u relative, whatever the order */
    double rel_r = 0.5 * (((double)D + 4) * U * ms + 2 * sabs / (double)D) / den + 2 * U;
    for (int64_t i = 0; i < D; i++) {
      double g = tk_get(gamma, i) + (d->gamma_offset ? 1.0 : 0.0);
      double bt = beta ? tk_get(beta, i) : 0.0;
      double sc = x[i] * r * g, esc = fabs(sc) * (rel_r + 7 * U) + fabs(r * g) * ex[i];
      /* the staged modes store the norm (rounded) before the bias add reads it */
      if (k->staged && beta) round_unc(k->io, sc, esc, &sc, &esc);
      k->y[i] = sc + bt;
      /* the +beta may cancel: its float32 error is u of the larger term */
      k->ey[i] = esc + 2 * U * (fabs(sc) + fabs(bt));
      if (k->staged) round_unc(k->io, k->y[i], k->ey[i], &k->y[i], &k->ey[i]);
      if (k->triton) round_unc(QKVFUSE_DTYPE_BFLOAT16, k->y[i], k->ey[i], &k->y[i], &k->ey[i]);
    }
  } else {
    for (int64_t i = 0; i < D; i++) {
      k->y[i] = x[i];
      k->ey[i] = ex[i];
      if (k->triton) round_unc(QKVFUSE_DTYPE_BFLOAT16, k->y[i], k->ey[i], &k->y[i], &k->ey[i]);
    }
  }
  for (int64_t i = R; i < D; i++) {
    k->o[i] = k->y[i];
    k->eo[i] = k->ey[i];
  }
  int neox = d->rope_style == QKVFUSE_ROPE_NEOX;
  for (int64_t i = 0; i < R / 2; i++) {
    int64_t a0 = neox ? i : 2 * i, a1 = neox ? i + R / 2 : 2 * i + 1;
    double y0 = k->y[a0], y1 = k->y[a1];
    double t00 = y0 * k->c[a0], t01 = y1 * k->s[a0], t11 = y1 * k->c[a1], t10 = y0 * k->s[a1];
    if (k->triton) { /* bfloat16 tensors: each product and each sum rounded to bfloat16 */
      double p[4] = {t00, t01, t11, t10}, ep[4];
      const double e_in[4] = {fabs(k->c[a0]) * k->ey[a0] + fabs(y0) * k->ec[a0],
                              fabs(k->s[a0]) * k->ey[a1] + fabs(y1) * k->es[a0],
                              fabs(k->c[a1]) * k->ey[a1] + fabs(y1) * k->ec[a1],
                              fabs(k->s[a1]) * k->ey[a0] + fabs(y0) * k->es[a1]};
      for (int m = 0; m < 4; m++) round_unc(QKVFUSE_DTYPE_BFLOAT16, p[m], e_in[m] + U * fabs(p[m]), &p[m], &ep[m]);
      k->o[a0] = p[0] - p[1];
      k->o[a1] = p[2] + p[3];
      round_unc(QKVFUSE_DTYPE_BFLOAT16, k->o[a0], ep[0] + ep[1] + U * fabs(k->o[a0]), &k->o[a0], &k->eo[a0]);
      round_unc(QKVFUSE_DTYPE_BFLOAT16, k->o[a1], ep[2] + ep[3] + U * fabs(k->o[a1]), &k->o[a1], &k->eo[a1]);
      continue;
    }
    k->o[a0] = t00 - t01;
    k->o[a1] = t11 + t10;
    /* RoPE slack: the float32 products and sum may cancel catastrophically,
     * so their error is 2^-22 * (|y0 cos| + |y1 sin|), not relative to the
     * result; plus the inputs' own slack carried through the rotation. */
    k->eo[a0] = 4 * U * (fabs(t00) + fabs(t01)) + fabs(k->c[a0]) * k->ey[a0] + fabs(k->s[a0]) * k->ey[a1] +
                fabs(y0) * k->ec[a0] + fabs(y1) * k->es[a0];
    k->eo[a1] = 4 * U * (fabs(t11) + fabs(t10)) + fabs(k->c[a1]) * k->ey[a1] + fabs(k->s[a1]) * k->ey[a0] +
                fabs(y1) * k->ec[a1] + fabs(y0) * k->es[a1];
  }
}

int tk_oracle_page_dest(const qkvfuse_args *a, const qkvfuse_tensor *c, qkvfuse_cache_layout L, int64_t t,
                        int64_t *blk, int64_t *row) {
  /* the header: token t of sequence b = batch_indices[t] at position p =
   * kv_positions[t] goes to block kv_indices[kv_indptr[b] + p / block_size],
   * row p % block_size; sequence b's blocks are kv_indices[kv_indptr[b] ..
   * kv_indptr[b + 1]); b = -1 skips */
  const int64_t b = tk_get_int(a->batch_indices, t), nseq = tk_numel(a->kv_indptr) - 1;
  if (b == -1) return 0;
  if (b < 0 || b >= nseq) return -1;
  const int64_t p = tk_get_int(a->kv_positions, t);
  const int64_t first = tk_get_int(a->kv_indptr, b), end = tk_get_int(a->kv_indptr, b + 1);
  const int64_t bs = L == QKVFUSE_CACHE_PAGED ? c->shape[1] : c->shape[2];
  if (p < 0 || first < 0 || end < first || bs < 1) return -1;
  /* in long double: no int64 sum can wrap here */
  const long double at = (long double)first + (long double)(p / bs);
  if (at >= (long double)end || at >= (long double)tk_numel(a->kv_indices)) return -1;
  const int64_t block = tk_get_int(a->kv_indices, first + p / bs);
  if (block < 0 || block >= c->shape[0]) return -1;
  *blk = block;
  *row = p % bs;
  return 1;
}

/* Where token t goes in cache c (element offset of element j = 0 is base,
 * the rest follows the layout). Returns 0 when skipped, 1 when written, -1 bad. */
static int cache_dest(ctx *k, const qkvfuse_tensor *c, int64_t t, int64_t *blk, int64_t *row) {
  const qkvfuse_args *a = k->a;
  qkvfuse_cache_layout L = k->desc->cache_layout;
  if (k->desc->cache_addressing == QKVFUSE_ADDRESS_PAGE_TABLE) return tk_oracle_page_dest(a, c, L, t, blk, row);
  if (L == QKVFUSE_CACHE_CONTIGUOUS) {
    int64_t b = t / k->S, i = t % k->S;
    int64_t st = tk_get_int(a->slot_mapping, b);
    if (st == -1) return 0;
    if (st < 0 || b >= c->shape[0] || st + i >= c->shape[1]) return -1;
    *blk = b;
    *row = st + i;
    return 1;
  }
  int64_t s = tk_get_int(a->slot_mapping, t);
  if (s == -1) return 0;
  int64_t bs = L == QKVFUSE_CACHE_PAGED ? c->shape[1] : c->shape[2];
  if (s < 0 || s >= c->shape[0] * bs) return -1;
  *blk = s / bs;
  *row = s % bs;
  return 1;
}

static int64_t cache_off(ctx *k, const qkvfuse_tensor *c, int64_t blk, int64_t row, int64_t j) {
  const int64_t *st = c->strides;
  int64_t h = j / k->D, d = j % k->D;
  switch (k->desc->cache_layout) {
    case QKVFUSE_CACHE_PAGED:
    case QKVFUSE_CACHE_CONTIGUOUS:
      return blk * st[0] + row * st[1] + h * st[2] + d * st[3];
    case QKVFUSE_CACHE_PAGED_HND:
      return blk * st[0] + h * st[1] + row * st[2] + d * st[3];
    case QKVFUSE_CACHE_NZ: {
      int64_t cc = 32 / (int64_t)tk_size(c->dtype);
      return blk * st[0] + (j / cc) * st[1] + row * st[2] + (j % cc) * st[3];
    }
    default:
      return -1;
  }
}

/* The value a cache stores, before its final rounding, and its slack.
 * Channel j's scale: one for the tensor, one per kv head ([Nkv]: j / D) or one
 * per channel ([Nkv, D] or [Nkv*D]: j). */
static void quant(const ctx *k, qkvfuse_quant_mode m, const qkvfuse_tensor *scale, const qkvfuse_tensor *offset,
                  int64_t j, double v, double e, double *pre, double *epre) {
  if (m == QKVFUSE_QUANT_NONE) {
    *pre = v;
    *epre = e;
    return;
  }
  const int64_t n = tk_numel(scale);
  int64_t idx = n == 1 ? 0 : n == k->Nkv * k->D ? j : j / k->D;
  double sc = tk_get(scale, idx), q = v / sc, off = 0;
  if (m == QKVFUSE_QUANT_INT8_ASYM) off = tk_get(offset, idx);
  *pre = q + off;
  *epre = e / fabs(sc) + 2 * U * (fabs(q) + fabs(off)) + 2 * U * fabs(*pre);
}

static double *dalloc(int64_t n) { return (double *)calloc((size_t)(n > 0 ? n : 1), sizeof(double)); }

int tk_oracle_run(const qkvfuse_desc *desc, const qkvfuse_args *a, tk_oracle *o, char *err, size_t errlen) {
  memset(o, 0, sizeof *o);
  ctx k;
  memset(&k, 0, sizeof k);
  k.desc = desc;
  k.a = a;
  k.Nq = desc->num_q_heads;
  k.Nkv = desc->num_kv_heads;
  k.D = desc->head_dim;
  k.R = desc->rope_source == QKVFUSE_ROPE_NONE ? 0 : desc->rotary_dim;
  k.H = (k.Nq + 2 * k.Nkv) * k.D;
  if (a->qkv) {
    k.T = tk_numel(a->qkv) / k.H;
    k.S = a->qkv->ndim == 3 ? a->qkv->shape[1] : 1;
  } else {
    /* q: [T, Nq*D], [B, S, Nq*D], [T, Nq, D] or [B, S, Nq, D] */
    const qkvfuse_tensor *q = a->q;
    const int lead = q->shape[q->ndim - 1] == k.Nq * k.D && !(q->ndim == 4) ? q->ndim - 1 : q->ndim - 2;
    k.T = tk_numel(q) / (k.Nq * k.D);
    k.S = lead == 2 ? q->shape[1] : 1;
  }
  k.B = k.S ? k.T / k.S : 0;
  k.staged = desc->rounding == QKVFUSE_ROUNDING_UNFUSED_PARITY || desc->rounding == QKVFUSE_ROUNDING_CANN;
  k.triton = desc->rounding == QKVFUSE_ROUNDING_ASCEND_TRITON;
  /* the I/O dtype: q_out's; a quantized q_out's is the dtype it would have
   * unquantized: the input's, or for int32 input the RoPE table's (float32
   * without one) */
  const qkvfuse_tensor *table = a->cos ? a->cos : a->cos_sin_cache, *in = a->qkv ? a->qkv : a->q;
  k.io = desc->q_quant == QKVFUSE_QUANT_NONE  ? a->q_out->dtype
         : in->dtype != QKVFUSE_DTYPE_INT32 ? in->dtype
         : table                            ? table->dtype
                                            : QKVFUSE_DTYPE_FLOAT32;
  if (k.D > 1024 || k.R > k.D) return fail(err, errlen, "oracle: bad D/R");
  if (desc->rope_source == QKVFUSE_ROPE_COMPUTED &&
      tk_rope_freqs(desc->rope_theta, &desc->rope_scaling, k.R, k.inv_freq, &k.mscale))
    return fail(err, errlen, "oracle: rope scaling parameters outside their domain");

  int64_t nq = k.T * k.Nq * k.D, nkv = k.T * k.Nkv * k.D;
  *o = (tk_oracle){k.T, k.Nq, k.Nkv, k.D, k.R, k.H, k.staged ? k.io : k.triton ? QKVFUSE_DTYPE_BFLOAT16 : QKVFUSE_DTYPE_NONE,
                   dalloc(nq), dalloc(nq), dalloc(nkv), dalloc(nkv), dalloc(nkv), dalloc(nkv),
                   (int64_t *)calloc((size_t)nkv + 1, 8), (int64_t *)calloc((size_t)nkv + 1, 8),
                   dalloc(nkv), dalloc(nkv), dalloc(nkv), dalloc(nkv), NULL, NULL, QKVFUSE_DTYPE_NONE};
  o->q_mid = desc->q_quant == QKVFUSE_QUANT_NONE ? o->mid : QKVFUSE_DTYPE_NONE;
  k.x = dalloc(k.H);
  k.ex = dalloc(k.H);
  k.c = dalloc(1024);
  k.s = dalloc(1024);
  k.ec = dalloc(1024);
  k.es = dalloc(1024);
  k.y = dalloc(1024);
  k.ey = dalloc(1024);
  k.o = dalloc(1024);
  k.eo = dalloc(1024);
  int rc = 0;
  int64_t KV = k.Nkv * k.D;
  for (int64_t t = 0; t < k.T && rc == 0; t++) {
    dequant(&k, t);
    if (k.R > 0 && (rc = cos_sin(&k, t, err, errlen)) != 0) break;
    for (int64_t h = 0; h < k.Nq; h++) {
      head(&k, h * k.D, desc->q_norm ? a->q_gamma : NULL, desc->q_norm ? a->q_beta : NULL);
      double *qv = o->q + (t * k.Nq + h) * k.D, *qe = o->qs + (t * k.Nq + h) * k.D;
      memcpy(qv, k.o, (size_t)k.D * sizeof(double));
      memcpy(qe, k.eo, (size_t)k.D * sizeof(double));
      /* a quantized q: fp8(q / q_scale), q first rounded to the I/O dtype in the staged modes */
      for (int64_t i = 0; i < k.D && desc->q_quant != QKVFUSE_QUANT_NONE; i++) {
        if (k.staged) round_unc(k.io, qv[i], qe[i], &qv[i], &qe[i]);
        quant(&k, desc->q_quant, a->q_scale, NULL, 0, qv[i], qe[i], &qv[i], &qe[i]);
      }
    }
    for (int64_t h = 0; h < k.Nkv; h++) {
      head(&k, (k.Nq + h) * k.D, desc->k_norm ? a->k_gamma : NULL, desc->k_norm ? a->k_beta : NULL);
      memcpy(o->k + t * KV + h * k.D, k.o, (size_t)k.D * sizeof(double));
      memcpy(o->ks + t * KV + h * k.D, k.eo, (size_t)k.D * sizeof(double));
    }
    for (int64_t j = 0; j < KV; j++) {
      o->v[t * KV + j] = k.x[(k.Nq + k.Nkv) * k.D + j];
      o->vs[t * KV + j] = k.ex[(k.Nq + k.Nkv) * k.D + j];
    }
    for (int64_t j = 0; j < KV; j++) o->kc_off[t * KV + j] = o->vc_off[t * KV + j] = -1;
    if (desc->cache_layout == QKVFUSE_CACHE_NONE) continue;
    int64_t kb = 0, kr = 0, vb = 0, vr = 0;
    int dk = cache_dest(&k, a->k_cache, t, &kb, &kr), dv = cache_dest(&k, a->v_cache, t, &vb, &vr);
    if (dk < 0 || dv < 0) {
      rc = fail(err, errlen, "oracle: token %lld has a slot outside the cache", (long long)t);
      break;
    }
    for (int64_t j = 0; j < KV && dk; j++) {
      double kv = o->k[t * KV + j], ke = o->ks[t * KV + j];
      if (k.staged) round_unc(k.io, kv, ke, &kv, &ke); /* quantization reads the rounded k */
      o->kc_off[t * KV + j] = cache_off(&k, a->k_cache, kb, kr, j);
      quant(&k, desc->k_quant, a->k_scale, a->k_offset, j, kv, ke, &o->kc[t * KV + j], &o->kcs[t * KV + j]);
    }
    for (int64_t j = 0; j < KV && dv; j++) {
      double vv = o->v[t * KV + j], ve = o->vs[t * KV + j];
      if (k.staged) round_unc(k.io, vv, ve, &vv, &ve); /* quantization reads v in the I/O dtype */
      o->vc_off[t * KV + j] = cache_off(&k, a->v_cache, vb, vr, j);
      quant(&k, desc->v_quant, a->v_scale, a->v_offset, j, vv, ve, &o->vc[t * KV + j], &o->vcs[t * KV + j]);
    }
  }
  free(k.x), free(k.ex), free(k.c), free(k.s), free(k.ec), free(k.es);
  free(k.y), free(k.ey), free(k.o), free(k.eo);
  if (rc) tk_oracle_free(o);
  return rc;
}

void tk_oracle_free(tk_oracle *o) {
  free(o->q), free(o->qs), free(o->k), free(o->ks), free(o->v), free(o->vs);
  free(o->kc_off), free(o->vc_off), free(o->kc), free(o->kcs), free(o->vc), free(o->vcs);
  memset(o, 0, sizeof *o);
}
