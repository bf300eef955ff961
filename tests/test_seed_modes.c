/* SPDX-License-Identifier: Apache-2.0 */
/* The seed-exact rounding modes and the strict option of the named operators
 * (qkvfuse.h: qkvfuse_rounding, qkvfuse_named_options; docs/API.md):
 *   1. each named operator in the modes that reproduce its seed, on random
 *      shapes, byte for byte against an emulation of the seed's arithmetic
 *      written here from the seed texts (000: the vllm-ascend Triton kernel
 *      and its PyTorch composition; 001 and 003: the CANN formulas), the
 *      emulation in float32 with every rounding the seed's code makes: 0
 *      differing bytes in every output and cache;
 *   2. the worked example of a bfloat16 head where the Triton kernel's
 *      roundings change q[0];
 *   3. strict: a call within every constraint a seed states passes (the
 *      bytes of strict = 0); each constraint broken alone is refused with its
 *      status, a message naming the argument and citing the seed, nothing
 *      written; strict = 0 takes the same call;
 *   4. a CUDA plan refuses the CPU-only modes, naming rounding.
 * The one choice a seed text leaves open, the order of the sum of squares of
 * its reductions, is the library's documented one (docs/API.md): exact (in
 * double, rounded once) for ascend_triton and cann, sequential for parity.
 *   test_seed_modes [--seed S] [--cases N] [--verbose] */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fp.h"
#include "harness.h"
#include "rng.h"

#define BF16 QKVFUSE_DTYPE_BFLOAT16
#define F16 QKVFUSE_DTYPE_FLOAT16
#define F32 QKVFUSE_DTYPE_FLOAT32
#define I8 QKVFUSE_DTYPE_INT8
#define I32 QKVFUSE_DTYPE_INT32
#define I64 QKVFUSE_DTYPE_INT64
#define MAXD 512

static int failed, checks, verbose;

static void failf(const char *what, uint64_t seed, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void failf(const char *what, uint64_t seed, const char *fmt, ...) {
  failed++;
  va_list ap;
  printf("FAIL test_seed_modes %s seed=0x%llx: ", what, (unsigned long long)seed);
  va_start(ap, fmt);
  vprintf(fmt, ap);
  va_end(ap);
  printf("\n");
}

/* ---- host tensors ----------------------------------------------------------------- */

typedef struct hbuf {
  qkvfuse_tensor t;
  uint8_t *mem;
  size_t bytes;
  int64_t n;
} hbuf;

/* A contiguous tensor filled with the byte `fill`. */
static void hb_make(hbuf *b, qkvfuse_dtype dt, int ndim, const int64_t *shape, uint8_t fill) {
  b->n = 1;
  for (int i = 0; i < ndim; i++) b->n *= shape[i];
  b->bytes = (size_t)(b->n > 0 ? b->n : 1) * tk_size(dt);
  b->mem = (uint8_t *)malloc(b->bytes);
  memset(b->mem, fill, b->bytes);
  qkvfuse_tensor_init(&b->t, b->mem, dt, ndim, shape);
}

static void hb_copy(hbuf *dst, const hbuf *src) {
  *dst = *src;
  dst->mem = (uint8_t *)malloc(src->bytes);
  memcpy(dst->mem, src->mem, src->bytes);
  dst->t.data = dst->mem;
}

static void hb_free(hbuf *b) {
  free(b->mem);
  memset(b, 0, sizeof *b);
}

static double hb_get(const hbuf *b, int64_t i) {
  return tk_decode(b->t.dtype, b->mem + (size_t)i * tk_size(b->t.dtype));
}
static void hb_set(hbuf *b, int64_t i, double v) { tk_encode(b->t.dtype, b->mem + (size_t)i * tk_size(b->t.dtype), v); }

/* 0 .. n-1 in a random order (malloc'd): distinct cache slots to draw from. */
static int64_t *shuffled(tk_rng *r, int64_t n) {
  int64_t *perm = (int64_t *)malloc(sizeof(int64_t) * (size_t)n);
  for (int64_t i = 0; i < n; i++) perm[i] = i;
  for (int64_t i = n - 1; i > 0; i--) {
    const int64_t j = tk_rng_range(r, 0, i), tmp = perm[i];
    perm[i] = perm[j], perm[j] = tmp;
  }
  return perm;
}

/* Random values of the tensor's dtype: normal * amp, or uniform in [lo, hi) when lo < hi. */
static void hb_fill(hbuf *b, tk_rng *r, double amp, double lo, double hi) {
  for (int64_t i = 0; i < b->n; i++) hb_set(b, i, lo < hi ? tk_rng_uniform(r, lo, hi) : amp * tk_rng_normal(r));
}

static int same_bytes(const hbuf *got, const hbuf *want, const char *name, const char *what, uint64_t seed) {
  checks++;
  for (size_t i = 0; i < got->bytes; i++)
    if (got->mem[i] != want->mem[i]) {
      const size_t es = tk_size(got->t.dtype);
      const int64_t e = (int64_t)(i / es);
      int64_t diff = 0;
      for (int64_t k = 0; k < (int64_t)(got->bytes / es); k++)
        diff += memcmp(got->mem + k * es, want->mem + k * es, es) != 0;
      failf(what, seed, "%s: %lld of %lld elements differ; first [%lld]: got %.9g, want %.9g", name, (long long)diff,
            (long long)(got->bytes / es), (long long)e, hb_get(got, e), hb_get(want, e));
      return 0;
    }
  return 1;
}

/* ---- float32 arithmetic as the seeds' code does it ---------------------------------- */

static float rnd(qkvfuse_dtype dt, float v) { return (float)tk_round(dt, (double)v); }

/* sum of x[d]^2: float32 squares, added exactly and rounded once (ascend_triton, cann) */
static float sum_squares_exact(const float *x, int64_t D) {
  double s = 0;
  for (int64_t d = 0; d < D; d++) {
    const float sq = x[d] * x[d];
    s += (double)sq;
  }
  return (float)s;
}

/* ... added in float32 in index order (unfused parity) */
static float sum_squares_seq(const float *x, int64_t D) {
  float s = 0.0f;
  for (int64_t d = 0; d < D; d++) {
    const float sq = x[d] * x[d];
    s = s + sq;
  }
  return s;
}

/* int8 quantization of CANN: Div by the scale, Add the offset, CAST_RINT, saturate */
static double quant_int8(float v, float scale, float offset, int asym) {
  float q = v / scale;
  if (asym) q = q + offset;
  double r = rint((double)q);
  return r < -128 ? -128 : r > 127 ? 127 : r;
}

/* ---- seed 000: vllm-ascend split_qkv_rmsnorm_rope --------------------------------------- */

/* One q or k head in the Triton kernel's arithmetic: normalized_values =
 * x * (1 / sqrt(sum(x^2) / HEAD_DIM + eps)); (n * w (+ b)).to(bfloat16);
 * x1 * cos - x2 * sin and x2 * cos + x1 * sin on bfloat16 tensors (each
 * product and sum rounded to bfloat16); cos and sin in a bfloat16 buffer. */
static void triton_head(const float *x, int64_t D, int64_t R, int neox, float eps, const float *w, const float *b,
                        const float *c_half, const float *s_half, float *o) {
  float y[MAXD];
  const float ms = sum_squares_exact(x, D) / (float)D;
  const float rstd = 1.0f / sqrtf(ms + eps);
  for (int64_t d = 0; d < D; d++) {
    const float n = x[d] * rstd;
    float v = n * w[d];
    if (b) v = v + b[d];
    y[d] = rnd(BF16, v);
  }
  for (int64_t d = 0; d < D; d++) o[d] = y[d];
  for (int64_t i = 0; i < R / 2; i++) {
    const int64_t a = neox ? i : 2 * i, p = neox ? i + R / 2 : 2 * i + 1;
    const float c = rnd(BF16, c_half[i]), s = rnd(BF16, s_half[i]);
    o[a] = rnd(BF16, rnd(BF16, y[a] * c) - rnd(BF16, y[p] * s));
    o[p] = rnd(BF16, rnd(BF16, y[p] * c) + rnd(BF16, y[a] * s));
  }
}

/* The PyTorch composition: npu_rms_norm (rounded to the model dtype io),
 * + bias (rounded), npu_rotary_embedding in float32 (rounded). */
static void composition_head(const float *x, int64_t D, int64_t R, int neox, float eps, const float *w,
                             const float *b, const float *c_half, const float *s_half, qkvfuse_dtype io, float *o) {
  float y[MAXD];
  const float inv = 1.0f / sqrtf(sum_squares_seq(x, D) / (float)D + eps);
  for (int64_t d = 0; d < D; d++) {
    const float n = x[d] * inv;
    y[d] = rnd(io, n * w[d]);
    if (b) y[d] = rnd(io, y[d] + b[d]);
  }
  for (int64_t d = 0; d < D; d++) o[d] = y[d];
  for (int64_t i = 0; i < R / 2; i++) {
    const int64_t a = neox ? i : 2 * i, p = neox ? i + R / 2 : 2 * i + 1;
    const float ca = y[a] * c_half[i], sp = y[p] * s_half[i], cp = y[p] * c_half[i], sa = y[a] * s_half[i];
    o[a] = rnd(io, ca - sp);
    o[p] = rnd(io, cp + sa);
  }
}

static void case_split(uint64_t seed, qkvfuse_rounding mode) {
  tk_rng r;
  tk_rng_seed(&r, seed);
  static const qkvfuse_dtype fdt[] = {BF16, BF16, BF16, F16, F32};
  static const int64_t Ds[] = {16, 32, 48, 64, 80, 96, 128, 200, 256};
  const qkvfuse_dtype dt = TK_PICK(&r, fdt), out_dt = tk_rng_chance(&r, 0.2) ? F32 : dt;
  const int64_t D = TK_PICK(&r, Ds), Nkv = tk_rng_range(&r, 1, 3);
  const int64_t Nq = tk_rng_chance(&r, 0.7) ? Nkv * tk_rng_range(&r, 1, 4) : tk_rng_range(&r, 1, 6);
  const int64_t R = tk_rng_chance(&r, 0.5) ? D : 2 * tk_rng_range(&r, 1, D / 2);
  const int64_t T = tk_rng_chance(&r, 0.1) ? tk_rng_range(&r, 0, 1) : tk_rng_range(&r, 2, 40);
  const int64_t H = (Nq + 2 * Nkv) * D, max_pos = tk_rng_range(&r, 1, 300);
  const int neox = tk_rng_chance(&r, 0.7), bias = tk_rng_chance(&r, 0.5);
  const float eps = tk_rng_chance(&r, 0.5) ? 1e-6f : 1e-5f;
  const double amp = tk_rng_loguniform(&r, 0.05, 20);
  hbuf in, qw, kw, qb = {0}, kb = {0}, csc, pos, q, k, v;
  hb_make(&in, dt, 2, (int64_t[]){T, H}, 0);
  hb_fill(&in, &r, amp, 0, 0);
  const qkvfuse_dtype gdt = tk_rng_chance(&r, 0.7) ? dt : F32;
  hb_make(&qw, gdt, 1, &D, 0), hb_fill(&qw, &r, 0, 0.5, 1.5);
  hb_make(&kw, gdt, 1, &D, 0), hb_fill(&kw, &r, 0, 0.5, 1.5);
  if (bias) {
    hb_make(&qb, gdt, 1, &D, 0), hb_fill(&qb, &r, 0.1, 0, 0);
    hb_make(&kb, gdt, 1, &D, 0), hb_fill(&kb, &r, 0.1, 0, 0);
  }
  static const qkvfuse_dtype cdt[] = {BF16, F32, F16};
  hb_make(&csc, TK_PICK(&r, cdt), 2, (int64_t[]){max_pos, R}, 0);
  hb_fill(&csc, &r, 0, -1, 1);
  hb_make(&pos, tk_rng_chance(&r, 0.5) ? I32 : I64, 1, &T, 0);
  for (int64_t t = 0; t < T; t++) hb_set(&pos, t, (double)tk_rng_range(&r, 0, max_pos - 1));
  hb_make(&q, out_dt, 2, (int64_t[]){T, Nq * D}, 0xA5);
  hb_make(&k, out_dt, 2, (int64_t[]){T, Nkv * D}, 0xA5);
  hb_make(&v, out_dt, 2, (int64_t[]){T, Nkv * D}, 0xA5);
  hbuf wq, wk, wv;
  hb_copy(&wq, &q), hb_copy(&wk, &k), hb_copy(&wv, &v);

  qkvfuse_named_options o = QKVFUSE_NAMED_OPTIONS_INIT;
  o.rounding = mode;
  const qkvfuse_status st = qkvfuse_split_qkv_rmsnorm_rope_ex(
      &in.t, &qw.t, &kw.t, Nq * D, Nkv * D, D, (double)eps, &csc.t, &pos.t, R == D && tk_rng_chance(&r, 0.5) ? 0 : R,
      bias ? &qb.t : NULL, bias ? &kb.t : NULL, neox, &q.t, &k.t, &v.t, &o, NULL, NULL);
  const char *what = mode == QKVFUSE_ROUNDING_ASCEND_TRITON ? "split_qkv_rmsnorm_rope ascend_triton"
                                                            : "split_qkv_rmsnorm_rope unfused_parity";
  if (verbose)
    printf("%s: %s->%s T=%lld Nq=%lld Nkv=%lld D=%lld R=%lld %s bias=%d table %s\n", what, tk_name(dt),
           tk_name(out_dt), (long long)T, (long long)Nq, (long long)Nkv, (long long)D, (long long)R,
           neox ? "neox" : "interleaved", bias, tk_name(csc.t.dtype));
  if (st != QKVFUSE_SUCCESS) {
    failf(what, seed, "status %s: %s", qkvfuse_status_string(st), qkvfuse_last_error());
  } else {
    float x[MAXD], w[MAXD], b[MAXD], ch[MAXD / 2], sh[MAXD / 2], oh[MAXD];
    for (int64_t t = 0; t < T; t++) {
      const int64_t p = (int64_t)hb_get(&pos, t);
      for (int64_t i = 0; i < R / 2; i++)
        ch[i] = (float)hb_get(&csc, p * R + i), sh[i] = (float)hb_get(&csc, p * R + R / 2 + i);
      for (int64_t h = 0; h < Nq + Nkv; h++) {
        const int is_q = h < Nq;
        for (int64_t d = 0; d < D; d++) {
          x[d] = (float)hb_get(&in, t * H + h * D + d);
          w[d] = (float)hb_get(is_q ? &qw : &kw, d);
          if (bias) b[d] = (float)hb_get(is_q ? &qb : &kb, d);
        }
        if (mode == QKVFUSE_ROUNDING_ASCEND_TRITON)
          triton_head(x, D, R, neox, eps, w, bias ? b : NULL, ch, sh, oh);
        else
          composition_head(x, D, R, neox, eps, w, bias ? b : NULL, ch, sh, out_dt, oh);
        for (int64_t d = 0; d < D; d++) {
          if (is_q) hb_set(&wq, t * Nq * D + h * D + d, oh[d]);
          else hb_set(&wk, t * Nkv * D + (h - Nq) * D + d, oh[d]);
        }
      }
      for (int64_t j = 0; j < Nkv * D; j++) hb_set(&wv, t * Nkv * D + j, hb_get(&in, t * H + (Nq + Nkv) * D + j));
    }
    (void)(same_bytes(&q, &wq, "q", what, seed) && same_bytes(&k, &wk, "k", what, seed) &&
           same_bytes(&v, &wv, "v", what, seed));
  }
  hb_free(&in), hb_free(&qw), hb_free(&kw), hb_free(&csc), hb_free(&pos);
  if (bias) hb_free(&qb), hb_free(&kb);
  hb_free(&q), hb_free(&k), hb_free(&v), hb_free(&wq), hb_free(&wk), hb_free(&wv);
}

/* ---- seed 001: CANN QkvRmsNormRopeCache ---------------------------------------------------- */

/* One head in the seed's formulas, each stage a tensor of the I/O dtype io:
 * rms = sqrt(mean(x^2) + epsilon), y = (x / rms) * gamma; y_embed = (y * cos)
 * + cat(-y2, y1) * sin with the full-length cos and sin of the token. */
static void cann_head(const float *x, int64_t D, float eps, const float *g, const float *c, const float *s,
                      qkvfuse_dtype io, float *o) {
  float y[MAXD];
  const float rms = sqrtf(sum_squares_exact(x, D) / (float)D + eps);
  for (int64_t d = 0; d < D; d++) {
    const float n = x[d] / rms;
    y[d] = rnd(io, n * g[d]);
  }
  const int64_t h = D / 2;
  for (int64_t d = 0; d < D; d++) {
    const float rot = d < h ? -y[d + h] : y[d - h];
    const float yc = y[d] * c[d], rs = rot * s[d];
    o[d] = rnd(io, yc + rs);
  }
}

static void case_cache(uint64_t seed) {
  tk_rng r;
  tk_rng_seed(&r, seed);
  static const int64_t Ds[] = {32, 64, 96, 128, 128, 160, 256};
  const qkvfuse_dtype dt = tk_rng_chance(&r, 0.5) ? BF16 : F16;
  const int64_t D = TK_PICK(&r, Ds), Nkv = tk_rng_range(&r, 1, 2), Nq = Nkv * tk_rng_range(&r, 1, 4);
  const int64_t B = tk_rng_range(&r, 1, 3), S = tk_rng_chance(&r, 0.1) ? 0 : tk_rng_range(&r, 1, 14), T = B * S;
  const int64_t N = Nq + 2 * Nkv, H = N * D, W = Nkv * D;
  const int kq = (int)tk_rng_range(&r, 0, 2), vq = (int)tk_rng_range(&r, 0, 2); /* none, sym, asym */
  const int64_t bs = tk_rng_chance(&r, 0.5) ? 16 : 32, blocks = T / bs + 2;
  const float eps = tk_rng_chance(&r, 0.5) ? 1e-6f : 1e-5f;
  const double amp = tk_rng_loguniform(&r, 0.05, 20);
  const int out_qkv = tk_rng_chance(&r, 0.7);
  hbuf qkv, qg, kg, cs, sn, idx, qo, qbq, kbq, vbq, kc, vc, ks = {0}, vs = {0}, ko = {0}, vo = {0};
  hb_make(&qkv, dt, 2, (int64_t[]){T, H}, 0), hb_fill(&qkv, &r, amp, 0, 0);
  hb_make(&qg, dt, 1, &D, 0), hb_fill(&qg, &r, 0, 0.5, 1.5);
  hb_make(&kg, dt, 1, &D, 0), hb_fill(&kg, &r, 0, 0.5, 1.5);
  hb_make(&cs, dt, 2, (int64_t[]){T, D}, 0), hb_fill(&cs, &r, 0, -1, 1);
  hb_make(&sn, dt, 2, (int64_t[]){T, D}, 0), hb_fill(&sn, &r, 0, -1, 1);
  /* distinct slots, some -1 */
  hb_make(&idx, I64, 1, &T, 0);
  int64_t *perm = shuffled(&r, blocks * bs);
  for (int64_t t = 0; t < T; t++) hb_set(&idx, t, tk_rng_chance(&r, 0.15) ? -1.0 : (double)perm[t]);
  free(perm);
  const qkvfuse_dtype kdt = kq ? I8 : dt, vdt = vq ? I8 : dt;
  const int64_t kc_c = 32 / (int64_t)tk_size(kdt), vc_c = 32 / (int64_t)tk_size(vdt);
  hb_make(&kc, kdt, 4, (int64_t[]){blocks, W / kc_c, bs, kc_c}, 0x5A);
  hb_make(&vc, vdt, 4, (int64_t[]){blocks, W / vc_c, bs, vc_c}, 0x5A);
  if (kq) hb_make(&ks, F32, 2, (int64_t[]){Nkv, D}, 0), hb_fill(&ks, &r, 0, 0.005, 0.08);
  if (vq) hb_make(&vs, F32, 2, (int64_t[]){Nkv, D}, 0), hb_fill(&vs, &r, 0, 0.005, 0.08);
  if (kq == 2) hb_make(&ko, F32, 2, (int64_t[]){Nkv, D}, 0), hb_fill(&ko, &r, 0, -20, 20);
  if (vq == 2) hb_make(&vo, F32, 2, (int64_t[]){Nkv, D}, 0), hb_fill(&vo, &r, 0, -20, 20);
  hb_make(&qo, dt, 2, (int64_t[]){T, Nq * D}, 0xA5);
  hb_make(&qbq, dt, 2, (int64_t[]){T, Nq * D}, 0xA5);
  hb_make(&kbq, dt, 2, (int64_t[]){T, W}, 0xA5);
  hb_make(&vbq, dt, 2, (int64_t[]){T, W}, 0xA5);
  hbuf wq, wqb, wkb, wvb, wkc, wvc;
  hb_copy(&wq, &qo), hb_copy(&wqb, &qbq), hb_copy(&wkb, &kbq), hb_copy(&wvb, &vbq), hb_copy(&wkc, &kc),
      hb_copy(&wvc, &vc);

  qkvfuse_named_options o = QKVFUSE_NAMED_OPTIONS_INIT;
  o.rounding = QKVFUSE_ROUNDING_CANN;
  const int64_t qkv_size[4] = {B, S, N, D}, head_nums[3] = {Nq, Nkv, Nkv};
  const qkvfuse_status st = qkvfuse_qkv_rmsnorm_rope_cache_ex(
      &qkv.t, &qg.t, &kg.t, &cs.t, &sn.t, &idx.t, &qo.t, &kc.t, &vc.t, kq ? &ks.t : NULL, vq ? &vs.t : NULL,
      kq == 2 ? &ko.t : NULL, vq == 2 ? &vo.t : NULL, out_qkv ? &qbq.t : NULL, out_qkv ? &kbq.t : NULL,
      out_qkv ? &vbq.t : NULL, qkv_size, head_nums, (double)eps, "PA_NZ", out_qkv, &o, NULL, NULL);
  const char *what = "qkv_rmsnorm_rope_cache cann";
  if (verbose)
    printf("%s: %s B=%lld S=%lld Nq=%lld Nkv=%lld D=%lld k=%d v=%d bs=%lld out_qkv=%d\n", what, tk_name(dt),
           (long long)B, (long long)S, (long long)Nq, (long long)Nkv, (long long)D, kq, vq, (long long)bs, out_qkv);
  if (st != QKVFUSE_SUCCESS) {
    failf(what, seed, "status %s: %s", qkvfuse_status_string(st), qkvfuse_last_error());
  } else {
    float x[MAXD], g[MAXD], c[MAXD], s[MAXD], oh[MAXD], krow[MAXD * 8], vrow[MAXD * 8];
    int item2 = 1;
    for (int64_t t = 0; t < T; t++) {
      for (int64_t d = 0; d < D; d++) c[d] = (float)hb_get(&cs, t * D + d), s[d] = (float)hb_get(&sn, t * D + d);
      for (int64_t h = 0; h < Nq + Nkv; h++) {
        const int is_q = h < Nq;
        for (int64_t d = 0; d < D; d++)
          x[d] = (float)hb_get(&qkv, t * H + h * D + d), g[d] = (float)hb_get(is_q ? &qg : &kg, d);
        cann_head(x, D, eps, g, c, s, dt, oh);
        for (int64_t d = 0; d < D; d++) {
          if (is_q) {
            hb_set(&wq, t * Nq * D + h * D + d, oh[d]);
            if (out_qkv) hb_set(&wqb, t * Nq * D + h * D + d, oh[d]);
          } else {
            krow[(h - Nq) * D + d] = oh[d];
          }
        }
      }
      for (int64_t j = 0; j < W; j++) {
        vrow[j] = (float)hb_get(&qkv, t * H + (Nq + Nkv) * D + j);
        if (out_qkv) hb_set(&wkb, t * W + j, krow[j]), hb_set(&wvb, t * W + j, vrow[j]);
      }
      const int64_t slot = (int64_t)hb_get(&idx, t);
      if (slot < 0) continue;
      /* PA_NZ: element j of the row at [slot / bs][j / c][slot % bs][j % c]; quantized from the
       * rounded k / v, the values k_out_before_quant / v_out_before_quant hold */
      for (int64_t j = 0; j < W; j++) {
        const int64_t ko_ = ((slot / bs * (W / kc_c) + j / kc_c) * bs + slot % bs) * kc_c + j % kc_c;
        const int64_t vo_ = ((slot / bs * (W / vc_c) + j / vc_c) * bs + slot % bs) * vc_c + j % vc_c;
        const double kv = kq ? quant_int8(krow[j], (float)hb_get(&ks, j), kq == 2 ? (float)hb_get(&ko, j) : 0, kq == 2)
                             : krow[j];
        hb_set(&wkc, ko_, kv);
        hb_set(&wvc, vo_, vq ? quant_int8(vrow[j], (float)hb_get(&vs, j), vq == 2 ? (float)hb_get(&vo, j) : 0, vq == 2)
                             : vrow[j]);
        /* item 2: the cache byte is the quantization of what k_out_before_quant holds */
        if (kq && out_qkv &&
            hb_get(&kc, ko_) != quant_int8((float)hb_get(&kbq, t * W + j), (float)hb_get(&ks, j),
                                           kq == 2 ? (float)hb_get(&ko, j) : 0, kq == 2))
          item2 = 0;
      }
    }
    checks++;
    if (!item2) failf(what, seed, "k_cache is not the quantization of k_out_before_quant");
    (void)(same_bytes(&qo, &wq, "q_out", what, seed) && same_bytes(&qbq, &wqb, "q_out_before_quant", what, seed) &&
           same_bytes(&kbq, &wkb, "k_out_before_quant", what, seed) &&
           same_bytes(&vbq, &wvb, "v_out_before_quant", what, seed) && same_bytes(&kc, &wkc, "k_cache", what, seed) &&
           same_bytes(&vc, &wvc, "v_cache", what, seed));
  }
  hb_free(&qkv), hb_free(&qg), hb_free(&kg), hb_free(&cs), hb_free(&sn), hb_free(&idx), hb_free(&qo);
  hb_free(&qbq), hb_free(&kbq), hb_free(&vbq), hb_free(&kc), hb_free(&vc);
  if (kq) hb_free(&ks);
  if (vq) hb_free(&vs);
  if (kq == 2) hb_free(&ko);
  if (vq == 2) hb_free(&vo);
  hb_free(&wq), hb_free(&wqb), hb_free(&wkb), hb_free(&wvb), hb_free(&wkc), hb_free(&wvc);
}

/* ---- seed 003: CANN DequantRopeQuantKvcache ---------------------------------------------- */

static void case_dequant(uint64_t seed) {
  tk_rng r;
  tk_rng_seed(&r, seed);
  static const qkvfuse_dtype xdt[] = {BF16, F16, I32, I32};
  static const int64_t Ds[] = {16, 32, 64, 80, 96, 128, 200};
  const qkvfuse_dtype dt = TK_PICK(&r, xdt);
  const qkvfuse_dtype io = dt == I32 ? (tk_rng_chance(&r, 0.5) ? BF16 : F16) : dt;
  const int64_t D = TK_PICK(&r, Ds), Nkv = tk_rng_range(&r, 1, 2), Nq = Nkv * tk_rng_range(&r, 1, 4);
  const int three = tk_rng_chance(&r, 0.6), page = tk_rng_chance(&r, 0.5);
  const int64_t B = tk_rng_range(&r, 1, 4), S = three ? tk_rng_range(&r, 1, 9) : 1, T = B * S;
  const int64_t H = (Nq + 2 * Nkv) * D, W = Nkv * D;
  const int kasym = tk_rng_chance(&r, 0.5), vasym = tk_rng_chance(&r, 0.5), kv_output = tk_rng_chance(&r, 0.6);
  const int act = dt == I32 && tk_rng_chance(&r, 0.5);
  static const qkvfuse_dtype bdt[] = {QKVFUSE_DTYPE_NONE, F32, F16, BF16, I32};
  const qkvfuse_dtype bias_dt = dt == I32 ? TK_PICK(&r, bdt) : QKVFUSE_DTYPE_NONE;
  hbuf x, cs, sn, kc, vc, idx, ks, vs, ko = {0}, vo = {0}, ws = {0}, as = {0}, bi = {0}, qo, k_o = {0}, v_o = {0};
  if (three) hb_make(&x, dt, 3, (int64_t[]){B, S, H}, 0);
  else hb_make(&x, dt, 2, (int64_t[]){B, H}, 0);
  if (dt == I32) {
    for (int64_t i = 0; i < x.n; i++) hb_set(&x, i, (double)tk_rng_range(&r, -30000, 30000));
    hb_make(&ws, F32, 1, &H, 0), hb_fill(&ws, &r, 0, 1e-4, 3e-4);
    if (act) hb_make(&as, F32, 1, &T, 0), hb_fill(&as, &r, 0, 0.5, 2);
    if (bias_dt == I32) {
      hb_make(&bi, I32, 1, &H, 0);
      for (int64_t i = 0; i < H; i++) hb_set(&bi, i, (double)tk_rng_range(&r, -3, 3));
    } else if (bias_dt) {
      hb_make(&bi, bias_dt, 1, &H, 0), hb_fill(&bi, &r, 0.5, 0, 0);
    }
  } else {
    hb_fill(&x, &r, tk_rng_loguniform(&r, 0.05, 20), 0, 0);
  }
  if (three) {
    hb_make(&cs, io, 4, (int64_t[]){B, S, 1, D}, 0), hb_make(&sn, io, 4, (int64_t[]){B, S, 1, D}, 0);
  } else {
    hb_make(&cs, io, 2, (int64_t[]){B, D}, 0), hb_make(&sn, io, 2, (int64_t[]){B, D}, 0);
  }
  hb_fill(&cs, &r, 0, -1, 1), hb_fill(&sn, &r, 0, -1, 1);
  int64_t C1, C2;
  if (page) {
    const int64_t bs = 8;
    C1 = T / bs + 2, C2 = bs;
    hb_make(&idx, I32, 1, &T, 0);
    int64_t *perm = shuffled(&r, C1 * C2);
    for (int64_t t = 0; t < T; t++) hb_set(&idx, t, (double)perm[t]);
    free(perm);
  } else {
    C1 = B + tk_rng_range(&r, 0, 1), C2 = S + tk_rng_range(&r, 0, 6);
    hb_make(&idx, I32, 1, &B, 0);
    for (int64_t b = 0; b < B; b++) hb_set(&idx, b, (double)tk_rng_range(&r, 0, C2 - S));
  }
  hb_make(&kc, I8, 4, (int64_t[]){C1, C2, Nkv, D}, 0x5A);
  hb_make(&vc, I8, 4, (int64_t[]){C1, C2, Nkv, D}, 0x5A);
  hb_make(&ks, F32, 2, (int64_t[]){Nkv, D}, 0), hb_fill(&ks, &r, 0, 0.005, 0.08);
  hb_make(&vs, F32, 2, (int64_t[]){Nkv, D}, 0), hb_fill(&vs, &r, 0, 0.005, 0.08);
  if (kasym) hb_make(&ko, F32, 2, (int64_t[]){Nkv, D}, 0), hb_fill(&ko, &r, 0, -20, 20);
  if (vasym) hb_make(&vo, F32, 2, (int64_t[]){Nkv, D}, 0), hb_fill(&vo, &r, 0, -20, 20);
  hb_make(&qo, io, 2, (int64_t[]){T, Nq * D}, 0xA5);
  if (kv_output) hb_make(&k_o, io, 2, (int64_t[]){T, W}, 0xA5), hb_make(&v_o, io, 2, (int64_t[]){T, W}, 0xA5);
  hbuf wq, wk = {0}, wv = {0}, wkc, wvc;
  hb_copy(&wq, &qo), hb_copy(&wkc, &kc), hb_copy(&wvc, &vc);
  if (kv_output) hb_copy(&wk, &k_o), hb_copy(&wv, &v_o);

  qkvfuse_named_options o = QKVFUSE_NAMED_OPTIONS_INIT;
  o.rounding = QKVFUSE_ROUNDING_CANN;
  const int64_t splits[3] = {Nq * D, W, W};
  const qkvfuse_status st = qkvfuse_dequant_rope_quant_kvcache_ex(
      &x.t, &cs.t, &sn.t, &kc.t, &vc.t, &idx.t, &ks.t, &vs.t, kasym ? &ko.t : NULL, vasym ? &vo.t : NULL,
      dt == I32 ? &ws.t : NULL, act ? &as.t : NULL, bias_dt ? &bi.t : NULL, splits, "static", "BSND", kv_output,
      page ? "page" : "contiguous", &qo.t, kv_output ? &k_o.t : NULL, kv_output ? &v_o.t : NULL, &o, NULL, NULL);
  const char *what = "dequant_rope_quant_kvcache cann";
  if (verbose)
    printf("%s: %s->%s x %dd B=%lld S=%lld Nq=%lld Nkv=%lld D=%lld %s kv_output=%d bias %s\n", what, tk_name(dt),
           tk_name(io), three ? 3 : 2, (long long)B, (long long)S, (long long)Nq, (long long)Nkv, (long long)D,
           page ? "page" : "contiguous", kv_output, bias_dt ? tk_name(bias_dt) : "-");
  if (st != QKVFUSE_SUCCESS) {
    failf(what, seed, "status %s: %s", qkvfuse_status_string(st), qkvfuse_last_error());
  } else {
    float xr[MAXD * 16], c[MAXD], s[MAXD];
    for (int64_t t = 0; t < T; t++) {
      /* dequant: Cast, Mul weight_scale, Muls activation_scale, Add bias; the result a tensor of
       * the output dtype when x is int32 (float x is used as it is) */
      for (int64_t col = 0; col < H; col++) {
        float v = (float)hb_get(&x, t * H + col);
        if (dt == I32) {
          v = v * (float)hb_get(&ws, col);
          if (act) v = v * (float)hb_get(&as, t);
          if (bias_dt) v = v + (float)hb_get(&bi, col);
          v = rnd(io, v);
        }
        xr[col] = v;
      }
      for (int64_t d = 0; d < D; d++) c[d] = (float)hb_get(&cs, t * D + d), s[d] = (float)hb_get(&sn, t * D + d);
      /* RoPE: k*cos + rotate(k)*sin (sin of the first half negated): two Muls, one Add, rounded */
      for (int64_t h = 0; h < Nq + Nkv; h++)
        for (int64_t d = 0; d < D; d++) {
          const float y = xr[h * D + d], partner = d < D / 2 ? xr[h * D + d + D / 2] : xr[h * D + d - D / 2];
          const float sg = d < D / 2 ? -s[d] : s[d];
          const float yc = y * c[d], ps = partner * sg;
          const float out = rnd(io, yc + ps);
          if (h < Nq) hb_set(&wq, t * Nq * D + h * D + d, out);
          else xr[H + (h - Nq) * D + d] = out; /* k after RoPE, past the row */
        }
      int64_t blk, row;
      if (page) {
        const int64_t sl = (int64_t)hb_get(&idx, t);
        blk = sl / C2, row = sl % C2;
      } else {
        blk = t / S, row = (int64_t)hb_get(&idx, t / S) + t % S;
      }
      for (int64_t j = 0; j < W; j++) {
        const float kk = xr[H + j], vv = xr[(Nq + Nkv) * D + j];
        if (kv_output) hb_set(&wk, t * W + j, kk), hb_set(&wv, t * W + j, vv);
        const int64_t off = (blk * C2 + row) * W + j;
        hb_set(&wkc, off, quant_int8(kk, (float)hb_get(&ks, j), kasym ? (float)hb_get(&ko, j) : 0, kasym));
        hb_set(&wvc, off, quant_int8(vv, (float)hb_get(&vs, j), vasym ? (float)hb_get(&vo, j) : 0, vasym));
      }
    }
    (void)(same_bytes(&qo, &wq, "q_out", what, seed) && (!kv_output || same_bytes(&k_o, &wk, "k_out", what, seed)) &&
           (!kv_output || same_bytes(&v_o, &wv, "v_out", what, seed)) &&
           same_bytes(&kc, &wkc, "k_cache", what, seed) && same_bytes(&vc, &wvc, "v_cache", what, seed));
  }
  hb_free(&x), hb_free(&cs), hb_free(&sn), hb_free(&kc), hb_free(&vc), hb_free(&idx), hb_free(&ks), hb_free(&vs);
  hb_free(&qo), hb_free(&wq), hb_free(&wkc), hb_free(&wvc);
  if (kasym) hb_free(&ko);
  if (vasym) hb_free(&vo);
  if (dt == I32) hb_free(&ws);
  if (act) hb_free(&as);
  if (bias_dt) hb_free(&bi);
  if (kv_output) hb_free(&k_o), hb_free(&v_o), hb_free(&wk), hb_free(&wv);
}

/* ---- the worked example --------------------------------------------------------------------- */

/* D = R = 16, bfloat16, gamma 1, cos_sin_cache row 45 of theta 10000: q[0] is
 * 1.9296875 in the Triton kernel's arithmetic, 1.9375 with one rounding of
 * the float32 RoPE (fused and parity), 1.93699 exactly. */
static void worked_example(void) {
  static const double head[16] = {4, 1, 2, 4, 1, 2, 3, -2, -4, -2, -2, 3, 4, -4, 0, 3};
  const int64_t D = 16, T = 1, max_pos = 46, H = 3 * D;
  hbuf in, g, csc, pos, q, k, v;
  hb_make(&in, BF16, 2, (int64_t[]){T, H}, 0);
  for (int64_t i = 0; i < H; i++) hb_set(&in, i, head[i % D]);
  hb_make(&g, BF16, 1, &D, 0);
  for (int64_t d = 0; d < D; d++) hb_set(&g, d, 1.0);
  hb_make(&csc, BF16, 2, (int64_t[]){max_pos, D}, 0);
  qkvfuse_build_cos_sin_cache(10000.0, NULL, &csc.t);
  hb_make(&pos, I64, 1, &T, 0);
  hb_set(&pos, 0, 45);
  hb_make(&q, BF16, 2, (int64_t[]){T, D}, 0), hb_make(&k, BF16, 2, (int64_t[]){T, D}, 0);
  hb_make(&v, BF16, 2, (int64_t[]){T, D}, 0);
  const struct {
    qkvfuse_rounding mode;
    double want;
  } rows[] = {{QKVFUSE_ROUNDING_ASCEND_TRITON, 1.9296875},
              {QKVFUSE_ROUNDING_FUSED, 1.9375},
              {QKVFUSE_ROUNDING_UNFUSED_PARITY, 1.9375}};
  for (int i = 0; i < 3; i++) {
    qkvfuse_named_options o = QKVFUSE_NAMED_OPTIONS_INIT;
    o.rounding = rows[i].mode;
    qkvfuse_status st = qkvfuse_split_qkv_rmsnorm_rope_ex(&in.t, &g.t, &g.t, D, D, D, 1e-6, &csc.t, &pos.t, 0, NULL,
                                                          NULL, 1, &q.t, &k.t, &v.t, &o, NULL, NULL);
    checks++;
    if (st != QKVFUSE_SUCCESS || hb_get(&q, 0) != rows[i].want)
      failf("worked example", 0, "rounding %d: status %s, q[0] = %.9g; want %.9g", (int)rows[i].mode,
            qkvfuse_status_string(st), hb_get(&q, 0), rows[i].want);
  }
  hb_free(&in), hb_free(&g), hb_free(&csc), hb_free(&pos), hb_free(&q), hb_free(&k), hb_free(&v);
}

/* ---- strict ------------------------------------------------------------------------------------ */

/* Every buffer of one named call; mutate() breaks one constraint (or none). */
typedef struct call {
  int op; /* 0, 1, 3: the seed */
  hbuf t[20];
  int nt;
  const qkvfuse_tensor *a[20];
  int64_t sizes[4], heads[3];
  int is_neox, flag;
  const char *cache_mode;
} call;

enum { C0_IN, C0_QW, C0_KW, C0_CSC, C0_POS, C0_Q, C0_K, C0_V, C0_N };
enum { C1_QKV, C1_QG, C1_KG, C1_COS, C1_SIN, C1_IDX, C1_QO, C1_KC, C1_VC, C1_KS, C1_VS, C1_KO, C1_VO, C1_QB, C1_KB,
       C1_VB, C1_N };
enum { C3_X, C3_COS, C3_SIN, C3_KC, C3_VC, C3_IDX, C3_KS, C3_VS, C3_QO, C3_KO, C3_VO, C3_N };

static qkvfuse_status call_run(call *c, int strict) {
  qkvfuse_named_options o = QKVFUSE_NAMED_OPTIONS_INIT;
  o.strict = strict;
  const qkvfuse_tensor *const *a = c->a;
  if (c->op == 0)
    return qkvfuse_split_qkv_rmsnorm_rope_ex(a[C0_IN], a[C0_QW], a[C0_KW], c->sizes[0], c->sizes[1], c->sizes[2],
                                             1e-6, a[C0_CSC], a[C0_POS], 0, NULL, NULL, c->is_neox, a[C0_Q], a[C0_K],
                                             a[C0_V], &o, NULL, NULL);
  if (c->op == 1)
    return qkvfuse_qkv_rmsnorm_rope_cache_ex(a[C1_QKV], a[C1_QG], a[C1_KG], a[C1_COS], a[C1_SIN], a[C1_IDX], a[C1_QO],
                                             a[C1_KC], a[C1_VC], a[C1_KS], a[C1_VS], a[C1_KO], a[C1_VO], a[C1_QB],
                                             a[C1_KB], a[C1_VB], c->sizes, c->heads, 1e-6, c->cache_mode, 1, &o, NULL,
                                             NULL);
  const int64_t splits[3] = {c->heads[0] * c->sizes[3], c->heads[1] * c->sizes[3], c->heads[1] * c->sizes[3]};
  return qkvfuse_dequant_rope_quant_kvcache_ex(a[C3_X], a[C3_COS], a[C3_SIN], a[C3_KC], a[C3_VC], a[C3_IDX], a[C3_KS],
                                               a[C3_VS], NULL, NULL, NULL, NULL, NULL, splits, NULL, NULL, 1,
                                               c->cache_mode, a[C3_QO], a[C3_KO], a[C3_VO], &o, NULL, NULL);
}

static hbuf *add(call *c, int slot, qkvfuse_dtype dt, int ndim, const int64_t *shape, tk_rng *r, double lo,
                 double hi) {
  hbuf *b = &c->t[slot];
  hb_make(b, dt, ndim, shape, 0x3C);
  if (lo < hi) hb_fill(b, r, 0, lo, hi);
  c->a[slot] = &b->t;
  if (slot >= c->nt) c->nt = slot + 1;
  return b;
}

/* The mutation of a strict row: what it breaks. */
typedef struct row {
  int op;
  const char *what;
  qkvfuse_status want;
  const char *name; /* the argument the message must name */
  int lenient;      /* strict = 0 accepts the call */
} row;

/* A seed-conforming call of op (mutation 0), or one breaking row `m`. */
static void build(call *c, int op, int m) {
  memset(c, 0, sizeof *c);
  c->op = op;
  tk_rng r;
  tk_rng_seed(&r, 900 + (uint64_t)op);
  if (op == 0) {
    /* bfloat16 rows, contiguous; neox */
    const int64_t Nq = 4, Nkv = 2, D = 64, T = 5, H = (Nq + 2 * Nkv) * D, P = 64;
    const qkvfuse_dtype dt = m == 2 ? F16 : BF16;
    c->sizes[0] = Nq * D, c->sizes[1] = Nkv * D, c->sizes[2] = D, c->is_neox = m != 1;
    add(c, C0_IN, dt, 2, (int64_t[]){T, H}, &r, -3, 3);
    add(c, C0_QW, dt, 1, &D, &r, 0.5, 1.5), add(c, C0_KW, dt, 1, &D, &r, 0.5, 1.5);
    add(c, C0_CSC, m == 3 ? F32 : BF16, 2, (int64_t[]){P, D}, &r, -1, 1);
    hbuf *pos = add(c, C0_POS, I64, 1, &T, &r, 0, 0);
    for (int64_t t = 0; t < T; t++) hb_set(pos, t, (double)(7 * t + 3));
    add(c, C0_Q, m == 4 ? F32 : dt, 2, (int64_t[]){T, Nq * D}, &r, 0, 0);
    add(c, C0_K, dt, 2, (int64_t[]){T, Nkv * D}, &r, 0, 0);
    add(c, C0_V, dt, 2, (int64_t[]){T, Nkv * D}, &r, 0, 0);
    if (m == 5) { /* input rows strided: a view of the first H columns of [T, H + 8] */
      hbuf *in = &c->t[C0_IN];
      hb_free(in);
      add(c, C0_IN, dt, 2, (int64_t[]){T, H + 8}, &r, -3, 3);
      in->t.shape[1] = H;
    }
    if (m == 6) { /* q_out in place: the q columns of the input rows */
      static qkvfuse_tensor qv;
      qv = c->t[C0_IN].t;
      qv.shape[1] = Nq * D;
      c->a[C0_Q] = &qv;
    }
    if (m == 7) { /* table rows strided */
      hbuf *t = &c->t[C0_CSC];
      hb_free(t);
      add(c, C0_CSC, BF16, 2, (int64_t[]){P, D + 16}, &r, -1, 1);
      t->t.shape[1] = D;
    }
    return;
  }
  if (op == 1) {
    /* bfloat16, D = 128, PA_NZ, int8 caches of block_size 32, [Nk, D] scales, int64 index */
    const int64_t Nq = 2, Nkv = 1, D = m == 5 ? 64 : 128, B = 2, S = m == 10 ? 40 : 6, T = B * S, W = Nkv * D;
    const int64_t bs = m == 9 ? 16 : 32, blocks = m == 10 ? 3 : 4;
    const qkvfuse_dtype dt = m == 1 ? F32 : BF16;
    c->sizes[0] = B, c->sizes[1] = S, c->sizes[2] = Nq + 2 * Nkv, c->sizes[3] = D;
    c->heads[0] = Nq, c->heads[1] = c->heads[2] = Nkv;
    c->cache_mode = m == 6 ? "PA_BNSD" : "PA_NZ";
    add(c, C1_QKV, dt, 2, (int64_t[]){T, (Nq + 2 * Nkv) * D}, &r, -3, 3);
    add(c, C1_QG, m == 2 ? F32 : dt, 1, &D, &r, 0.5, 1.5), add(c, C1_KG, m == 3 ? F32 : dt, 1, &D, &r, 0.5, 1.5);
    add(c, C1_COS, m == 4 ? F32 : dt, 2, (int64_t[]){T, D}, &r, -1, 1);
    add(c, C1_SIN, m == 4 ? F32 : dt, 2, (int64_t[]){T, D}, &r, -1, 1);
    hbuf *ix = add(c, C1_IDX, m == 12 ? I32 : I64, 1, &T, &r, 0, 0);
    for (int64_t t = 0; t < T; t++) /* distinct slots inside the cache; -1 may repeat */
      hb_set(ix, t, t % 5 == 4 ? -1.0 : (double)(2 * T < blocks * bs ? 2 * t + 1 : t));
    if (m == 13) hb_set(ix, 3, hb_get(ix, 1));
    if (m == 16 || m == 17) { /* index t at element 2t: the check reads the view, not the memory under it */
      hbuf *w = &c->t[C1_IDX];
      double v[64];
      for (int64_t t = 0; t < T; t++) v[t] = hb_get(ix, t);
      if (m == 17) v[T - 2] = v[T - 4]; /* tokens 10 and 8: slots, not -1 */
      hb_free(w);
      add(c, C1_IDX, I64, 1, (int64_t[]){2 * T}, &r, 0, 0);
      for (int64_t t = 0; t < T; t++) hb_set(w, 2 * t, v[t]), hb_set(w, 2 * t + 1, m == 16 ? v[t] : 1000 + t);
      w->t.shape[0] = T, w->t.strides[0] = 2;
    }
    const qkvfuse_dtype kdt = m == 7 ? QKVFUSE_DTYPE_FLOAT8_E4M3FN : I8, vdt = m == 8 ? F16 : I8;
    if (m == 6)
      add(c, C1_KC, kdt, 4, (int64_t[]){blocks, Nkv, bs, D}, &r, 0, 0);
    else
      add(c, C1_KC, kdt, 4, (int64_t[]){blocks, W / (32 / (int64_t)tk_size(kdt)), bs, 32 / (int64_t)tk_size(kdt)}, &r,
          0, 0);
    if (m == 6)
      add(c, C1_VC, vdt, 4, (int64_t[]){blocks, Nkv, bs, D}, &r, 0, 0);
    else
      add(c, C1_VC, vdt, 4, (int64_t[]){blocks, W / (32 / (int64_t)tk_size(vdt)), bs, 32 / (int64_t)tk_size(vdt)}, &r,
          0, 0);
    if (m == 11) add(c, C1_KS, F32, 1, (int64_t[]){W}, &r, 0.01, 0.05);
    else add(c, C1_KS, F32, 2, (int64_t[]){Nkv, D}, &r, 0.01, 0.05);
    if (vdt == I8) add(c, C1_VS, F32, 2, (int64_t[]){Nkv, D}, &r, 0.01, 0.05);
    if (kdt == I8) add(c, C1_KO, F32, 2, (int64_t[]){Nkv, D}, &r, -3, 3);
    add(c, C1_QO, m == 14 ? F32 : dt, 2, (int64_t[]){T, Nq * D}, &r, 0, 0);
    add(c, C1_QB, m == 14 ? F32 : dt, 2, (int64_t[]){T, Nq * D}, &r, 0, 0);
    add(c, C1_KB, m == 15 ? F32 : dt, 2, (int64_t[]){T, W}, &r, 0, 0);
    add(c, C1_VB, dt, 2, (int64_t[]){T, W}, &r, 0, 0);
    return;
  }
  /* op 3: bfloat16 [B, S, H], H = 384; [B, S, 1, D] cos/sin; int8 page caches; int32 indices >= 0 */
  int64_t Nq = 4, Nkv = 1, D = 64;
  if (m == 2) Nq = 64;          /* H = 66 * 64 = 4224 > 4096 */
  if (m == 3) Nq = 1, D = 80;   /* H = 240: not a multiple of 64 */
  if (m == 4) Nq = 6, D = 24;   /* H = 192, D not a multiple of 16 */
  const int64_t B = 2, S = 3, T = B * S, H = (Nq + 2 * Nkv) * D, W = Nkv * D, bs = 8, blocks = 2;
  const qkvfuse_dtype dt = m == 1 ? F32 : BF16, cdt = m == 1 ? F32 : m == 5 ? F16 : BF16, odt = m == 1 ? F32 : BF16;
  c->sizes[3] = D, c->heads[0] = Nq, c->heads[1] = Nkv;
  c->cache_mode = m == 12 ? "contiguous" : "page";
  add(c, C3_X, dt, 3, (int64_t[]){B, S, H}, &r, -3, 3);
  if (m == 6) {
    add(c, C3_COS, cdt, 2, (int64_t[]){T, D}, &r, -1, 1), add(c, C3_SIN, cdt, 2, (int64_t[]){T, D}, &r, -1, 1);
  } else {
    add(c, C3_COS, cdt, 4, (int64_t[]){B, S, 1, D}, &r, -1, 1);
    add(c, C3_SIN, cdt, 4, (int64_t[]){B, S, 1, D}, &r, -1, 1);
  }
  const qkvfuse_dtype kdt = m == 8 ? QKVFUSE_DTYPE_FLOAT8_E4M3FN : I8;
  if (m == 12) {
    add(c, C3_KC, kdt, 4, (int64_t[]){B, S + 2, Nkv, D}, &r, 0, 0), add(c, C3_VC, I8, 4, (int64_t[]){B, S + 2, Nkv, D},
                                                                          &r, 0, 0);
    hbuf *ix = add(c, C3_IDX, I32, 1, &B, &r, 0, 0);
    for (int64_t b = 0; b < B; b++) hb_set(ix, b, 1); /* the same start in every batch: distinct rows */
  } else {
    add(c, C3_KC, kdt, 4, (int64_t[]){blocks, bs, Nkv, D}, &r, 0, 0);
    add(c, C3_VC, I8, 4, (int64_t[]){blocks, bs, Nkv, D}, &r, 0, 0);
    hbuf *ix = add(c, C3_IDX, m == 9 ? I64 : I32, 1, &T, &r, 0, 0);
    for (int64_t t = 0; t < T; t++) hb_set(ix, t, (double)(2 * t + 1));
    if (m == 10) hb_set(ix, 2, -1);
    if (m == 11) hb_set(ix, 4, hb_get(ix, 0));
  }
  if (m == 13) add(c, C3_KS, F32, 1, (int64_t[]){1}, &r, 0.01, 0.05);
  else add(c, C3_KS, F32, 2, (int64_t[]){Nkv, D}, &r, 0.01, 0.05);
  add(c, C3_VS, F32, 2, (int64_t[]){Nkv, D}, &r, 0.01, 0.05);
  add(c, C3_QO, m == 7 ? F32 : odt, 2, (int64_t[]){T, Nq * D}, &r, 0, 0);
  add(c, C3_KO, odt, 2, (int64_t[]){T, W}, &r, 0, 0), add(c, C3_VO, odt, 2, (int64_t[]){T, W}, &r, 0, 0);
}

static void drop(call *c) {
  for (int i = 0; i < c->nt; i++) hb_free(&c->t[i]);
}

static const row ROWS[] = {
    {0, "is_neox = 0 (interleaved pairs)", QKVFUSE_ERROR_INVALID_VALUE, "is_neox", 1},
    {0, "float16 input", QKVFUSE_ERROR_DTYPE, "input", 1},
    {0, "float32 cos_sin_cache", QKVFUSE_ERROR_DTYPE, "cos_sin_cache", 1},
    {0, "float32 q_out", QKVFUSE_ERROR_DTYPE, "q_out", 1},
    {0, "input with strided rows", QKVFUSE_ERROR_STRIDE, "input", 1},
    {0, "q_out in place in the input rows", QKVFUSE_ERROR_STRIDE, "q_out", 1},
    {0, "cos_sin_cache with strided rows", QKVFUSE_ERROR_STRIDE, "cos_sin_cache", 1},
    {1, "float32 qkv", QKVFUSE_ERROR_DTYPE, "qkv", 1},
    {1, "q_gamma of another dtype", QKVFUSE_ERROR_DTYPE, "q_gamma", 1},
    {1, "k_gamma of another dtype", QKVFUSE_ERROR_DTYPE, "k_gamma", 1},
    {1, "cos and sin of another dtype", QKVFUSE_ERROR_DTYPE, "cos", 1},
    {1, "D = 64", QKVFUSE_ERROR_INVALID_VALUE, "qkv_size", 1},
    {1, "cache_mode PA_BNSD", QKVFUSE_ERROR_INVALID_VALUE, "cache_mode", 1},
    {1, "float8 k_cache", QKVFUSE_ERROR_DTYPE, "k_cache", 1},
    {1, "float16 v_cache with bfloat16 qkv", QKVFUSE_ERROR_DTYPE, "v_cache", 1},
    {1, "block_size 16 with int8 caches (not 32 bytes)", QKVFUSE_ERROR_SHAPE, "k_cache", 1},
    {1, "BlockNum < ceil(S / block_size) * B", QKVFUSE_ERROR_SHAPE, "k_cache", 1},
    {1, "k_scale flat [Nk*D]", QKVFUSE_ERROR_SHAPE, "k_scale", 1},
    {1, "int32 index", QKVFUSE_ERROR_DTYPE, "index", 1},
    {1, "a repeated index", QKVFUSE_ERROR_INVALID_VALUE, "index", 1},
    {1, "float32 q_out", QKVFUSE_ERROR_DTYPE, "q_out", 1},
    {1, "float32 k_out_before_quant", QKVFUSE_ERROR_DTYPE, "k_out_before_quant", 1},
    {1, "a strided index of distinct values, repeats between them (accepted)", QKVFUSE_SUCCESS, "", 1},
    {1, "a strided index with a repeat in its second half", QKVFUSE_ERROR_INVALID_VALUE, "index", 1},
    {3, "float32 x", QKVFUSE_ERROR_DTYPE, "x", 1},
    {3, "H = 4224 > 4096", QKVFUSE_ERROR_SHAPE, "x", 1},
    {3, "H = 240, not a multiple of 64", QKVFUSE_ERROR_SHAPE, "x", 1},
    {3, "D = 24, not a multiple of 16", QKVFUSE_ERROR_SHAPE, "k_cache", 1},
    {3, "float16 cos with bfloat16 x", QKVFUSE_ERROR_DTYPE, "cos", 1},
    {3, "cos [B*S, D] for a 3-dim x", QKVFUSE_ERROR_SHAPE, "cos", 1},
    {3, "float32 q_out", QKVFUSE_ERROR_DTYPE, "q_out", 1},
    {3, "float8 k_cache", QKVFUSE_ERROR_DTYPE, "k_cache", 1},
    {3, "int64 indices", QKVFUSE_ERROR_DTYPE, "indices", 1},
    {3, "an index -1", QKVFUSE_ERROR_OUT_OF_RANGE, "indices", 1},
    {3, "a repeated index in page mode", QKVFUSE_ERROR_INVALID_VALUE, "indices", 1},
    {3, "contiguous mode, one start for every batch (accepted)", QKVFUSE_SUCCESS, "", 1},
    {3, "scale_k per tensor", QKVFUSE_ERROR_SHAPE, "scale_k", 1},
};

/* Mutation number of ROWS[i] within its operator (1, 2, ...). */
static int mutation_of(size_t i) {
  int m = 0;
  for (size_t k = 0; k <= i; k++)
    if (ROWS[k].op == ROWS[i].op) m++;
  return m;
}

static void strict_rows(void) {
  /* the conforming call of each seed: accepted, the bytes of strict = 0 */
  for (int op = 0; op <= 3; op += op == 0 ? 1 : 2) {
    call c0, c1;
    build(&c0, op, 0), build(&c1, op, 0);
    const qkvfuse_status s0 = call_run(&c0, 0), s1 = call_run(&c1, 1);
    checks++;
    if (s0 != QKVFUSE_SUCCESS || s1 != QKVFUSE_SUCCESS) {
      failf("strict", (uint64_t)op, "seed %03d's conforming call: strict=0 %s, strict=1 %s: %s", op,
            qkvfuse_status_string(s0), qkvfuse_status_string(s1), qkvfuse_last_error());
    } else {
      for (int i = 0; i < c0.nt; i++)
        if (c0.t[i].mem && memcmp(c0.t[i].mem, c1.t[i].mem, c0.t[i].bytes)) {
          failf("strict", (uint64_t)op, "seed %03d: tensor %d differs between strict = 0 and 1", op, i);
          break;
        }
    }
    drop(&c0), drop(&c1);
  }
  for (size_t i = 0; i < sizeof ROWS / sizeof ROWS[0]; i++) {
    const row *w = &ROWS[i];
    call c;
    build(&c, w->op, mutation_of(i));
    uint8_t *before[20] = {0};
    for (int k = 0; k < c.nt; k++)
      if (c.t[k].mem) before[k] = (uint8_t *)malloc(c.t[k].bytes), memcpy(before[k], c.t[k].mem, c.t[k].bytes);
    const qkvfuse_status st = call_run(&c, 1);
    const char *msg = qkvfuse_last_error();
    char label[160];
    snprintf(label, sizeof label, "strict seed %03d, %s", w->op, w->what);
    checks++;
    if (st != w->want) {
      failf(label, 0, "status %s, want %s (\"%s\")", qkvfuse_status_string(st), qkvfuse_status_string(w->want), msg);
    } else if (st != QKVFUSE_SUCCESS) {
      char cite[32];
      snprintf(cite, sizeof cite, "strict: seed %03d", w->op);
      if (!tk_names_argument(msg, w->name) || !strstr(msg, cite))
        failf(label, 0, "the message must name %s and cite \"%s\": \"%s\"", w->name, cite, msg);
      for (int k = 0; k < c.nt; k++)
        if (before[k] && memcmp(before[k], c.t[k].mem, c.t[k].bytes)) {
          failf(label, 0, "refused, yet tensor %d changed", k);
          break;
        }
      /* the library itself computes the call: the default (strict = 0) takes it */
      const qkvfuse_status lenient = call_run(&c, 0);
      checks++;
      if ((lenient == QKVFUSE_SUCCESS) != w->lenient)
        failf(label, 0, "strict = 0: status %s (\"%s\")", qkvfuse_status_string(lenient), qkvfuse_last_error());
    }
    for (int k = 0; k < c.nt; k++) free(before[k]);
    drop(&c);
  }
  /* the options struct: size and values checked */
  call c;
  build(&c, 0, 0);
  const qkvfuse_tensor *const *a = c.a;
  /* each a bad value of one field: the status, and a message naming options */
  static const struct {
    const char *what;
    uint32_t struct_size;
    int rounding, strict;
    qkvfuse_status want;
  } bad_options[] = {{"struct_size 4", 4, 0, 0, QKVFUSE_ERROR_VERSION},
                     {"rounding COUNT", 0, QKVFUSE_ROUNDING_COUNT, 0, QKVFUSE_ERROR_INVALID_VALUE},
                     {"strict 2", 0, 0, 2, QKVFUSE_ERROR_INVALID_VALUE}};
  for (size_t i = 0; i < sizeof bad_options / sizeof bad_options[0]; i++) {
    qkvfuse_named_options bad = QKVFUSE_NAMED_OPTIONS_INIT;
    if (bad_options[i].struct_size) bad.struct_size = bad_options[i].struct_size;
    bad.rounding = (qkvfuse_rounding)bad_options[i].rounding;
    bad.strict = bad_options[i].strict;
    const qkvfuse_status st = qkvfuse_split_qkv_rmsnorm_rope_ex(
        a[C0_IN], a[C0_QW], a[C0_KW], c.sizes[0], c.sizes[1], c.sizes[2], 1e-6, a[C0_CSC], a[C0_POS], 0, NULL, NULL,
        1, a[C0_Q], a[C0_K], a[C0_V], &bad, NULL, NULL);
    checks++;
    if (st != bad_options[i].want || !tk_names_argument(qkvfuse_last_error(), "options"))
      failf("options", 0, "%s: %s \"%s\"", bad_options[i].what, qkvfuse_status_string(st), qkvfuse_last_error());
  }
  drop(&c);
}

/* CUDA plans refuse the CPU-only modes at plan creation, naming rounding. */
static void cuda_refuses(void) {
  const qkvfuse_rounding modes[2] = {QKVFUSE_ROUNDING_ASCEND_TRITON, QKVFUSE_ROUNDING_CANN};
  for (int i = 0; i < 2; i++) {
    qkvfuse_desc d = QKVFUSE_DESC_INIT;
    d.num_q_heads = d.num_kv_heads = 1, d.head_dim = 64, d.device_type = QKVFUSE_DEVICE_CUDA;
    d.rounding = modes[i];
    qkvfuse_plan *p = NULL;
    const qkvfuse_status st = qkvfuse_plan_create(&d, &p);
    checks++;
    if (st != QKVFUSE_ERROR_UNSUPPORTED || !tk_names_argument(qkvfuse_last_error(), "rounding"))
      failf("cuda plan", 0, "rounding %d: %s \"%s\"", (int)modes[i], qkvfuse_status_string(st), qkvfuse_last_error());
    qkvfuse_plan_destroy(p);
  }
}

int main(int argc, char **argv) {
  const uint64_t seed = tk_arg_u64(argc, argv, "--seed", "QKVFUSE_TEST_SEED", 0x5EED5);
  const uint64_t n = tk_arg_u64(argc, argv, "--cases", "QKVFUSE_TEST_CASES", 60);
  verbose = tk_arg_has(argc, argv, "--verbose");
  for (uint64_t i = 0; i < n; i++) {
    case_split(tk_case_seed(seed, 3 * i), QKVFUSE_ROUNDING_ASCEND_TRITON);
    case_split(tk_case_seed(seed + 1, 3 * i), QKVFUSE_ROUNDING_UNFUSED_PARITY);
    case_cache(tk_case_seed(seed, 3 * i + 1));
    case_dequant(tk_case_seed(seed, 3 * i + 2));
  }
  worked_example();
  strict_rows();
  cuda_refuses();
  printf("test_seed_modes: %d checks (%llu random cases per operator and mode, %d strict rows), %d failed\n", checks,
         (unsigned long long)n, (int)(sizeof ROWS / sizeof ROWS[0]), failed);
  return failed ? 1 : 0;
}
