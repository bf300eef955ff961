/* SPDX-License-Identifier: Apache-2.0 */
/* Directed cases the random sampler reaches rarely or never:
 *   - NaN, -NaN, +-Inf and huge values quantized to int8 / e4m3 / e5m2 /
 *     16-bit caches and to an fp8 q_out (qkvfuse.h: int8 NaN -> 0, +-Inf ->
 *     127/-128; fp8 NaN -> 0x7F/0xFF keeping the sign; +-Inf and huge values
 *     saturate: e4m3 +-448, e5m2 +-57344), and propagated to float outputs;
 *   - scales whose reciprocal overflows (subnormal), with all-zero tokens:
 *     zero quantizes to zero (plus the offset) on every backend;
 *   - e5m2 rounding edges: ties to even, subnormals, the saturation threshold;
 *   - T = 0 on every layout, also with NULL data pointers (legal for tensors
 *     with no elements);
 *   - every token skipped (slot -1): no cache byte written;
 *   - edges: position max_pos - 1 and a 1-row cos_sin_cache, the last slot of
 *     the cache, contiguous start = max_seq - S, int32 accumulators near
 *     +-2^31, eps much larger than mean(x^2).
 *   test_special [--backend reference,auto] */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "fp.h"
#include "harness.h"
#include "qkvfuse_experimental.h"
#include "tview.h"

static int failed, ran;

static void report(const char *what, qkvfuse_backend be, int rc, const tk_stats *st) {
  if (rc == TK_SKIP) return;
  ran++;
  if (rc != TK_PASS || st->failed) {
    failed++;
    printf("FAIL test_special backend=%s case '%s': %s\n  failing: %s\n", tk_backend_str(be), what, st->first, st->where);
  }
}

static uint8_t cache_byte(const tk_case *c, int slot, int64_t elem_off) {
  const tk_view *w = &c->view[slot];
  return c->buf[w->buf].got[(w->off + elem_off) * (int64_t)tk_size(w->t.dtype)];
}

/* The byte a quantizer writes for special #i of special_values (NaN, -NaN,
 * Inf, -Inf, 1e30, -1e30, 70000, -3e38 over a scale of 0.5 or 0.25), or -1
 * where the mode keeps no fixed pattern for it. */
static int special_byte(qkvfuse_quant_mode q, int i) {
  static const int e4m3[8] = {0x7F, 0xFF, 0x7E, 0xFE, 0x7E, 0xFE, 0x7E, 0xFE};
  static const int e5m2[8] = {0x7F, 0xFF, 0x7B, 0xFB, 0x7B, 0xFB, 0x7B, 0xFB};
  static const int i8[8] = {0x00, 0x00, 0x7F, 0x80, 0x7F, 0x80, 0x7F, 0x80};
  switch (q) {
    case QKVFUSE_QUANT_FP8_E4M3: return e4m3[i];
    case QKVFUSE_QUANT_FP8_E5M2: return e5m2[i];
    case QKVFUSE_QUANT_INT8_SYM:
    case QKVFUSE_QUANT_INT8_ASYM: return i8[i];
    default: return -1;
  }
}

/* What qkvfuse_experimental_explain said of the last plan run_streaming ran
 * on CUDA. */
static char explained[512];

/* tk_run_core, after asking a CUDA plan which kernel it runs (explained). */
static qkvfuse_status run_streaming(tk_case *c, const qkvfuse_args *args, qkvfuse_backend be, void *ctx,
                                    int *unsupported) {
  explained[0] = '\0';
  if (be == QKVFUSE_BACKEND_CUDA) {
    qkvfuse_desc d = c->desc;
    d.backend = be, d.device_type = c->dev->type, d.device_id = c->dev->id;
    qkvfuse_plan *p = NULL;
    if (qkvfuse_experimental_plan_create(&d, (const char *)ctx, &p) == QKVFUSE_SUCCESS) {
      if (qkvfuse_experimental_explain(p, args, explained, sizeof explained) != QKVFUSE_SUCCESS) explained[0] = '\0';
      qkvfuse_plan_destroy(p);
    }
  }
  return tk_run_core(c, args, be, ctx, unsupported);
}

/* The spec of the quantizer cases: N q heads and N kv heads of D = 32, T
 * tokens, no norm or RoPE, a paged cache of `blocks` blocks of 4 rows; io as
 * in special_values. */
static void quant_case_spec(tk_spec *s, int64_t N, int64_t T, int64_t blocks, qkvfuse_dtype io) {
  tk_spec_default(s);
  s->Nq = s->Nkv = N, s->D = 32, s->T = T;
  if (io) s->qkv_dt = s->q_out_dt = io;
  s->k_out_dt = s->v_out_dt = io ? io : QKVFUSE_DTYPE_FLOAT32;
  s->layout = QKVFUSE_CACHE_PAGED, s->block_size = 4, s->blocks = blocks;
}

/* The bfloat16 (io) cases are for the streaming kernels: on CUDA another
 * kernel fails them (but where the general form is forced). */
static void require_streaming(qkvfuse_backend be, qkvfuse_dtype io, int rc, tk_stats *st) {
  if (io && be == QKVFUSE_BACKEND_CUDA && rc == TK_PASS &&
      (!strstr(explained, "streaming kernel") || strstr(explained, "not the streaming kernel")) &&
      !strstr(explained, "cuda.form is general"))
    tk_stats_fail(st, "ran %s, not the streaming kernel", explained[0] ? explained : "(no explanation)");
}

/* Special values in q, k and v (no norm, no RoPE, so they reach the caches
 * and a quantized q_out (qq) as they are), of dtype io (0: float32, with
 * float32 outputs; bfloat16: input and outputs of the CUDA streaming
 * kernels, whose fp8 quantizer gives a NaN its sign on a path of its own). */
static void special_values(qkvfuse_backend be, qkvfuse_quant_mode kq, qkvfuse_quant_mode vq, qkvfuse_dtype kdt,
                           qkvfuse_dtype vdt, qkvfuse_quant_mode qq, qkvfuse_dtype io) {
  tk_spec s;
  quant_case_spec(&s, 1, 4, 2, io);
  s.k_quant = kq, s.v_quant = vq, s.k_cache_dt = kdt, s.v_cache_dt = vdt, s.q_quant = qq;
  tk_spec_fixup(&s);
  tk_case c;
  tk_case_build(&c, &s, 31);
  const double specials[] = {NAN, -NAN, INFINITY, -INFINITY, 1e30, -1e30, 70000.0, -3e38};
  int64_t H = 3 * 32;
  for (int w = 0; w < 3; w++)
    for (int i = 0; i < 8; i++) tk_case_poke(&c, TK_QKV, 1 * H + w * 32 + 3 * i, specials[i]);
  if (kq) tk_case_poke(&c, TK_K_SCALE, 0, 0.5), kq == QKVFUSE_QUANT_INT8_ASYM ? tk_case_poke(&c, TK_K_OFFSET, 0, 3.25) : (void)0;
  if (vq) tk_case_poke(&c, TK_V_SCALE, 0, 0.25), vq == QKVFUSE_QUANT_INT8_ASYM ? tk_case_poke(&c, TK_V_OFFSET, 0, -2.5) : (void)0;
  if (qq) tk_case_poke(&c, TK_Q_SCALE, 0, 0.5);
  for (int t = 0; t < 4; t++) tk_case_poke(&c, TK_SLOT_MAPPING, t, 7 - t);
  tk_stats st;
  memset(&st, 0, sizeof st);
  int rc = tk_check_case(&c, be, io ? run_streaming : tk_run_core, NULL, &st);
  require_streaming(be, io, rc, &st);
  /* the documented encodings, byte for byte (the oracle comparison above
   * already checks NaN-ness and saturation; here the exact patterns) */
  if (rc == TK_PASS) {
    for (int w = 0; w < 3; w++) {
      qkvfuse_quant_mode q = w == 0 ? qq : w == 1 ? kq : vq;
      int slot = w == 0 ? TK_Q_OUT : w == 1 ? TK_K_CACHE : TK_V_CACHE;
      const char *name = w == 0 ? "q_out" : w == 1 ? "k_cache" : "v_cache";
      const qkvfuse_tensor *t = &c.view[slot].t;
      for (int i = 0; i < 8; i++) {
        /* q_out: row 1; the caches: token 1 has slot 6, block 1, row 2 of [2, 4, 1, 32] */
        int64_t off = w == 0 ? tk_elem_offset(t, 32 + 3 * i) : 1 * t->strides[0] + 2 * t->strides[1] + 3 * i;
        uint8_t b = cache_byte(&c, slot, off);
        const int want = special_byte(q, i);
        if (want >= 0 && b != want)
          tk_stats_fail(&st, "%s %s of special #%d: byte 0x%02x, want 0x%02x", name, tk_name(t->dtype), i, b, want);
      }
    }
  }
  char what[96];
  snprintf(what, sizeof what, "special values in %s, q=%s k=%s v=%s", tk_name(c.sp.qkv_dt), tk_name(c.sp.q_out_dt),
           tk_name(c.sp.k_cache_dt), tk_name(c.sp.v_cache_dt));
  report(what, be, rc, &st);
  tk_case_free(&c);
}

/* Scales whose reciprocal overflows float32 (|scale| < 2^-128; the CUDA
 * streaming kernels multiply by a reciprocal: docs/API.md, Quantization)
 * or nearly does, among normal ones: per-channel k scales (some channels
 * subnormal, of either sign), one v scale and the q scale subnormal.
 * Tokens 1 and 5 are all zeros (+0 and -0): x / scale is then zero (plus
 * the offset), never NaN; every other value saturates. io as in
 * special_values. */
static void tiny_scales(qkvfuse_backend be, qkvfuse_quant_mode kq, qkvfuse_quant_mode vq, qkvfuse_quant_mode qq,
                        qkvfuse_dtype io) {
  tk_spec s;
  quant_case_spec(&s, 2, 8, 4, io);
  s.k_quant = kq, s.v_quant = vq, s.q_quant = qq, s.k_scale_kind = 3, s.v_scale_kind = 0;
  tk_spec_fixup(&s);
  tk_case c;
  tk_case_build(&c, &s, 33);
  const int64_t H = (s.Nq + 2 * s.Nkv) * s.D;
  for (int64_t j = 0; j < H; j++) tk_case_poke(&c, TK_QKV, 1 * H + j, 0.0), tk_case_poke(&c, TK_QKV, 5 * H + j, -0.0);
  const double tiny[] = {0x1p-140, -0x1p-149, 0x1p-127, 0x1p-129, -0x1p-126, 0x1p-138};
  for (int i = 0; i < 6; i++) tk_case_poke(&c, TK_K_SCALE, 5 * i + (i & 1) * s.D, tiny[i]);
  tk_case_poke(&c, TK_V_SCALE, 0, -0x1p-145);
  if (qq) tk_case_poke(&c, TK_Q_SCALE, 0, 0x1p-131);
  tk_stats st;
  memset(&st, 0, sizeof st);
  int rc = tk_check_case(&c, be, io ? run_streaming : tk_run_core, NULL, &st);
  require_streaming(be, io, rc, &st);
  char what[112];
  snprintf(what, sizeof what, "scales down to 2^-149 in %s, q=%s k=%s v=%s", tk_name(c.sp.qkv_dt), tk_name(c.sp.q_out_dt),
           tk_name(c.sp.k_cache_dt), tk_name(c.sp.v_cache_dt));
  report(what, be, rc, &st);
  tk_case_free(&c);
}

/* e5m2 rounding edges in q_out, k_cache and v_cache (scales 1, per head for
 * k and v: x / scale is x): ties to even in the normal and subnormal range,
 * the smallest subnormal and half of it, the largest finite and the
 * saturation threshold 61440 (the tie with 65536, which rounds to the even
 * Inf code and then saturates: __NV_SATFINITE). */
static void e5m2_edges(qkvfuse_backend be) {
  static const struct {
    double x;
    uint8_t want;
  } edge[] = {
      {1.0, 0x3C},         {1.125, 0x3C},       {1.375, 0x3E},          {-1.125, 0xBC},
      {53248.0, 0x7A},     {57344.0, 0x7B},     {61439.99609375, 0x7B}, {61440.0, 0x7B},
      {-61440.0, 0xFB},    {0x1p-14, 0x04},     {0x1p-16, 0x01},        {0x1p-17, 0x00},
      {0x3p-17, 0x02},     {-0x5p-17, 0x82},    {0x7p-18, 0x02},        {1e-9, 0x00},
  };
  enum { N = sizeof edge / sizeof edge[0] };
  tk_spec s;
  tk_spec_default(&s);
  s.Nq = 2, s.Nkv = 2, s.D = 32, s.T = 3;
  s.layout = QKVFUSE_CACHE_PAGED_HND, s.block_size = 4, s.blocks = 2;
  s.k_quant = s.v_quant = s.q_quant = QKVFUSE_QUANT_FP8_E5M2, s.k_scale_kind = s.v_scale_kind = 4;
  tk_spec_fixup(&s);
  tk_case c;
  tk_case_build(&c, &s, 32);
  const int64_t H = 6 * 32;
  for (int i = 0; i < N; i++)
    for (int h = 0; h < 6; h++) tk_case_poke(&c, TK_QKV, 2 * H + h * 32 + i, edge[i].x); /* token 2, every head */
  tk_case_poke(&c, TK_Q_SCALE, 0, 1.0);
  for (int h = 0; h < 2; h++) tk_case_poke(&c, TK_K_SCALE, h, 1.0), tk_case_poke(&c, TK_V_SCALE, h, 1.0);
  tk_case_poke(&c, TK_SLOT_MAPPING, 2, 5); /* block 1, row 1 */
  tk_stats st;
  memset(&st, 0, sizeof st);
  int rc = tk_check_case(&c, be, tk_run_core, NULL, &st);
  for (int i = 0; rc == TK_PASS && i < N; i++)
    for (int h = 0; h < 6; h++) {
      const int slot = h < 2 ? TK_Q_OUT : h < 4 ? TK_K_CACHE : TK_V_CACHE, kvh = h % 2;
      const qkvfuse_tensor *t = &c.view[slot].t;
      /* q_out row 2; paged_hnd [blocks, Nkv, block_size, D]: [1][kvh][1][i] */
      const int64_t off = slot == TK_Q_OUT ? tk_elem_offset(t, 2 * 64 + kvh * 32 + i)
                                           : t->strides[0] + kvh * t->strides[1] + t->strides[2] + i;
      const uint8_t b = cache_byte(&c, slot, off);
      if (b != edge[i].want)
        tk_stats_fail(&st, "%s head %d: e5m2 of %.17g is 0x%02x, want 0x%02x", tk_slot_name[slot], kvh, edge[i].x, b,
                      edge[i].want);
    }
  report("e5m2 rounding edges (q_out, per-head k/v scales)", be, rc, &st);
  tk_case_free(&c);
}

static void run_spec(qkvfuse_backend be, const char *what, tk_spec *s, uint64_t seed, void (*edit)(tk_case *)) {
  tk_spec_fixup(s);
  tk_case c;
  tk_case_build(&c, s, seed);
  if (edit) edit(&c);
  tk_stats st;
  memset(&st, 0, sizeof st);
  int rc = tk_check_case(&c, be, tk_run_core, NULL, &st);
  report(what, be, rc, &st);
  tk_case_free(&c);
}

/* A full-featured spec on layout L with T tokens. */
static void featured(tk_spec *s, qkvfuse_cache_layout L, int64_t T) {
  tk_spec_default(s);
  s->Nq = 4, s->Nkv = 2, s->D = 64, s->R = 64, s->T = T;
  s->qkv_dt = s->q_out_dt = QKVFUSE_DTYPE_BFLOAT16, s->k_out_dt = s->v_out_dt = QKVFUSE_DTYPE_FLOAT32;
  s->q_norm = s->k_norm = 1;
  s->rope_source = QKVFUSE_ROPE_COS_SIN_CACHE, s->max_pos = 32, s->pos_hi = 31;
  s->layout = L, s->block_size = 16, s->blocks = 4, s->k_quant = QKVFUSE_QUANT_INT8_SYM, s->v_quant = QKVFUSE_QUANT_FP8_E4M3;
  if (L == QKVFUSE_CACHE_CONTIGUOUS) s->in3d = 1, s->B = 2, s->S = T / 2, s->cache_batch = 2, s->max_seq = 20;
  s->error_flags = 1;
}

static void edit_last_position(tk_case *c) {
  for (int64_t t = 0; t < c->sp.T; t++) tk_case_poke(c, TK_POSITIONS, t, (double)(c->sp.max_pos - 1));
}
static void edit_last_slot(tk_case *c) {
  tk_case_poke(c, TK_SLOT_MAPPING, 0, (double)(c->sp.blocks * c->sp.block_size - 1));
  tk_case_poke(c, TK_SLOT_MAPPING, 1, 0);
}
static void edit_last_start(tk_case *c) {
  tk_case_poke(c, TK_SLOT_MAPPING, 0, (double)(c->sp.max_seq - c->sp.S));
  tk_case_poke(c, TK_SLOT_MAPPING, 1, 0);
}
static void edit_big_acc(tk_case *c) {
  tk_rng r;
  tk_rng_seed(&r, 3);
  int64_t H = (c->sp.Nq + 2 * c->sp.Nkv) * c->sp.D;
  for (int64_t i = 0; i < c->sp.T * H; i++)
    tk_case_poke(c, TK_QKV, i, (double)(tk_rng_chance(&r, 0.5) ? 2147483647 - tk_rng_range(&r, 0, 300) : -2147483647 - 1 + tk_rng_range(&r, 0, 300)));
}

/* Dequant scales multiply, so zero is a value (docs/API.md: one rule for every
 * scale): a zero weight_scale channel of q, k and v, and a zero act_scale. */
static void edit_zero_dequant_scales(tk_case *c) {
  const int64_t D = c->sp.D, Nq = c->sp.Nq, Nkv = c->sp.Nkv;
  tk_case_poke(c, TK_WEIGHT_SCALE, 3, 0.0);
  tk_case_poke(c, TK_WEIGHT_SCALE, Nq * D + 5, -0.0);
  tk_case_poke(c, TK_WEIGHT_SCALE, (Nq + Nkv) * D + D - 1, 0.0);
  tk_case_poke(c, TK_ACT_SCALE, c->sp.T - 1, 0.0);
}

/* The scale rule's first failing entry, where the checks test long vectors in
 * blocks: int32 input with H = 2560 weight_scale channels and per-channel
 * k/v scales of Nkv*D = 512, bad entries in a later block and at the end; the
 * message names the first, and nothing is written. The rule's edges pass:
 * +-FLT_MAX, and +-the smallest subnormal as a divisor (nonzero). */
static void first_bad_scale(qkvfuse_backend be) {
  static const struct {
    int slot;
    int64_t at, later; /* later < 0: none */
    double x;
    const char *name; /* the entry the message names; NULL: the values pass */
  } sc[] = {{TK_WEIGHT_SCALE, 1500, 2400, NAN, "weight_scale[1500]"},
             {TK_WEIGHT_SCALE, 1023, 1024, INFINITY, "weight_scale[1023]"},
             {TK_WEIGHT_SCALE, 2559, -1, -INFINITY, "weight_scale[2559]"},
             {TK_K_SCALE, 511, -1, 0.0, "k_scale[511]"},
             {TK_V_SCALE, 300, 301, -0.0, "v_scale[300]"},
             {TK_WEIGHT_SCALE, 2047, 2048, -FLT_MAX, NULL},
             {TK_K_SCALE, 0, 511, FLT_MAX, NULL},
             {TK_K_SCALE, 1, 2, 0x1p-149, NULL},
             {TK_V_SCALE, 511, -1, -0x1p-149, NULL}};
  const tk_device *dev = tk_device_for_backend(be);
  if (!dev || be == QKVFUSE_BACKEND_CUDA) return; /* CUDA reports data errors in error_flags (test_cuda_data) */
  for (size_t i = 0; i < sizeof sc / sizeof sc[0]; i++) {
    tk_spec s;
    featured(&s, QKVFUSE_CACHE_PAGED, 8);
    s.Nq = 12, s.Nkv = 4, s.D = 128, s.R = 64, s.act_scale = 1;
    s.qkv_dt = QKVFUSE_DTYPE_INT32, s.q_out_dt = QKVFUSE_DTYPE_FLOAT32;
    s.k_scale_kind = s.v_scale_kind = 3;
    tk_spec_fixup(&s);
    tk_case c;
    tk_case_build(&c, &s, 40 + i);
    tk_case_poke(&c, sc[i].slot, sc[i].at, sc[i].x);
    if (sc[i].later >= 0) tk_case_poke(&c, sc[i].slot, sc[i].later, sc[i].x);
    qkvfuse_status r;
    const int moved = tk_run_core_on(&c, dev, be, &r);
    tk_stats st;
    memset(&st, 0, sizeof st);
    const char *msg = qkvfuse_last_error() ? qkvfuse_last_error() : "";
    if (moved) tk_stats_fail(&st, "device %s: a transfer failed", dev->name);
    if (!sc[i].name) {
      if (r != QKVFUSE_SUCCESS)
        tk_stats_fail(&st, "scale %a: status %s, want success (%s)", sc[i].x, qkvfuse_status_string(r), msg);
    } else if (r != QKVFUSE_ERROR_BAD_SCALE)
      tk_stats_fail(&st, "status %s, want QKVFUSE_ERROR_BAD_SCALE", qkvfuse_status_string(r));
    else if (!strstr(msg, sc[i].name))
      tk_stats_fail(&st, "message does not name %s: %s", sc[i].name, msg);
    for (int b = 0; b < TK_NSLOT && sc[i].name; b++)
      if (c.buf[b].bytes && b != TK_FLAGS_BUF)
        tk_cmp_untouched(&st, tk_slot_name[b], c.buf[b].got, c.buf[b].init, NULL, c.buf[b].bytes);
    char what[96];
    if (sc[i].name)
      snprintf(what, sizeof what, "the first bad scale, %s", sc[i].name);
    else
      snprintf(what, sizeof what, "a scale at the rule's edge, %s[%lld] = %a", tk_slot_name[sc[i].slot],
               (long long)sc[i].at, sc[i].x);
    report(what, be, TK_PASS, &st);
    tk_case_free(&c);
  }
}

/* T = 0 with NULL data pointers on every 0-element tensor. */
static void empty_with_null_data(qkvfuse_backend be, qkvfuse_cache_layout L) {
  tk_spec s;
  featured(&s, L, 0);
  if (L == QKVFUSE_CACHE_CONTIGUOUS) s.B = 0, s.S = 3;
  tk_spec_fixup(&s);
  const tk_device *dev = tk_device_for_backend(be);
  if (!dev) return;
  tk_case c;
  tk_case_build(&c, &s, 11);
  tk_case_upload(&c, dev);
  qkvfuse_tensor tens[TK_NSLOT];
  qkvfuse_args a;
  tk_case_args(&c, TK_AT_DEVICE, tens, &a);
  for (int k = 0; k < TK_NSLOT; k++)
    if (c.view[k].present && tk_numel(&tens[k]) == 0) tens[k].data = NULL;
  int unsupported = 0;
  qkvfuse_status r = tk_run_core(&c, &a, be, NULL, &unsupported);
  tk_stats st;
  memset(&st, 0, sizeof st);
  if (r != QKVFUSE_SUCCESS) tk_stats_fail(&st, "T = 0 with NULL data: %s (%s)", qkvfuse_status_string(r), qkvfuse_last_error());
  tk_case_download(&c);
  for (int b = 0; b <= TK_NSLOT; b++)
    if (c.buf[b].bytes) tk_cmp_untouched(&st, b < TK_NSLOT ? tk_slot_name[b] : "error_flags", c.buf[b].got, c.buf[b].init, NULL, c.buf[b].bytes);
  report("T = 0 with NULL data pointers", be, TK_PASS, &st);
  tk_case_free(&c);
}

/* Two tokens with one slot: docs/API.md says the later token wins on the CPU
 * (unspecified on CUDA, so only CPU backends run this). */
static void duplicate_slot(qkvfuse_backend be) {
  const tk_device *dev = tk_device_for_backend(be);
  if (!dev || be == QKVFUSE_BACKEND_CUDA) return;
  tk_spec s;
  featured(&s, QKVFUSE_CACHE_PAGED_HND, 12);
  tk_spec_fixup(&s);
  tk_case c;
  tk_case_build(&c, &s, 30);
  /* slot_mapping is int64 [T] in its own buffer: read token 7's slot, give it to token 3 too */
  tk_view *w = &c.view[TK_SLOT_MAPPING];
  qkvfuse_tensor sm = w->t;
  sm.data = c.buf[w->buf].init + w->off * 8;
  int64_t s7 = tk_get_int(&sm, 7);
  if (s7 < 0) s7 = 5, tk_case_poke(&c, TK_SLOT_MAPPING, 7, 5);
  tk_case_poke(&c, TK_SLOT_MAPPING, 3, (double)s7);
  qkvfuse_status r;
  const int moved = tk_run_core_on(&c, dev, be, &r);
  tk_stats st;
  memset(&st, 0, sizeof st);
  if (moved) tk_stats_fail(&st, "device %s: a transfer failed", dev->name);
  if (r != QKVFUSE_SUCCESS) tk_stats_fail(&st, "duplicate slot: %s (%s)", qkvfuse_status_string(r), qkvfuse_last_error());
  tk_oracle o;
  char err[128];
  tk_case_oracle(&c, &o, err, sizeof err);
  int64_t KV = s.Nkv * s.D;
  for (int64_t j = 0; j < KV; j++) o.kc_off[3 * KV + j] = o.vc_off[3 * KV + j] = -1; /* overwritten by token 7 */
  if (r == QKVFUSE_SUCCESS) tk_compare_case(&c, &o, &st);
  tk_oracle_free(&o);
  report("two tokens with one slot: the later wins (CPU)", be, TK_PASS, &st);
  tk_case_free(&c);
}

int main(int argc, char **argv) {
  qkvfuse_backend bes[8];
  int nbe = tk_backends_from(argc, argv, bes, 8);
  for (int b = 0; b < nbe; b++) {
    qkvfuse_backend be = bes[b];
    const qkvfuse_dtype BF16 = QKVFUSE_DTYPE_BFLOAT16;
    special_values(be, QKVFUSE_QUANT_FP8_E4M3, QKVFUSE_QUANT_INT8_SYM, 0, 0, QKVFUSE_QUANT_NONE, 0);
    special_values(be, QKVFUSE_QUANT_INT8_ASYM, QKVFUSE_QUANT_FP8_E4M3, 0, 0, QKVFUSE_QUANT_FP8_E5M2, 0);
    special_values(be, QKVFUSE_QUANT_FP8_E5M2, QKVFUSE_QUANT_FP8_E5M2, 0, 0, QKVFUSE_QUANT_FP8_E4M3, 0);
    special_values(be, QKVFUSE_QUANT_NONE, QKVFUSE_QUANT_NONE, BF16, QKVFUSE_DTYPE_FLOAT16, QKVFUSE_QUANT_NONE, 0);
    special_values(be, QKVFUSE_QUANT_NONE, QKVFUSE_QUANT_INT8_SYM, QKVFUSE_DTYPE_FLOAT32, 0, QKVFUSE_QUANT_FP8_E5M2, 0);
    special_values(be, QKVFUSE_QUANT_FP8_E4M3, QKVFUSE_QUANT_FP8_E5M2, 0, 0, QKVFUSE_QUANT_FP8_E4M3, BF16);
    special_values(be, QKVFUSE_QUANT_FP8_E5M2, QKVFUSE_QUANT_INT8_SYM, 0, 0, QKVFUSE_QUANT_FP8_E5M2, BF16);
    tiny_scales(be, QKVFUSE_QUANT_FP8_E4M3, QKVFUSE_QUANT_INT8_ASYM, QKVFUSE_QUANT_FP8_E4M3, 0);
    tiny_scales(be, QKVFUSE_QUANT_FP8_E4M3, QKVFUSE_QUANT_FP8_E5M2, QKVFUSE_QUANT_FP8_E4M3, BF16);
    tiny_scales(be, QKVFUSE_QUANT_INT8_SYM, QKVFUSE_QUANT_FP8_E4M3, QKVFUSE_QUANT_FP8_E5M2, BF16);
    tiny_scales(be, QKVFUSE_QUANT_INT8_ASYM, QKVFUSE_QUANT_INT8_SYM, QKVFUSE_QUANT_NONE, BF16);
    e5m2_edges(be);
    first_bad_scale(be);
    for (int L = 0; L <= 4; L++) {
      tk_spec s;
      char what[64];
      featured(&s, (qkvfuse_cache_layout)L, 0);
      snprintf(what, sizeof what, "T = 0, layout %d", L);
      run_spec(be, what, &s, 21, NULL);
      empty_with_null_data(be, (qkvfuse_cache_layout)L);
      if (L == 0) continue;
      featured(&s, (qkvfuse_cache_layout)L, 12);
      s.skip_prob = 1.0;
      snprintf(what, sizeof what, "every slot -1, layout %d", L);
      run_spec(be, what, &s, 22, NULL);
      featured(&s, (qkvfuse_cache_layout)L, 12);
      snprintf(what, sizeof what, "last slot / last start, layout %d", L);
      run_spec(be, what, &s, 23, L == QKVFUSE_CACHE_CONTIGUOUS ? edit_last_start : edit_last_slot);
    }
    tk_spec s;
    featured(&s, QKVFUSE_CACHE_PAGED, 9);
    run_spec(be, "every position = max_pos - 1", &s, 24, edit_last_position);
    featured(&s, QKVFUSE_CACHE_PAGED, 9);
    s.max_pos = 1, s.pos_hi = 0;
    run_spec(be, "a one-row cos_sin_cache", &s, 25, NULL);
    featured(&s, QKVFUSE_CACHE_NZ, 9);
    s.qkv_dt = QKVFUSE_DTYPE_INT32, s.q_out_dt = QKVFUSE_DTYPE_FLOAT32, s.acc_bits = 31, s.act_scale = 1;
    s.bias_dt = QKVFUSE_DTYPE_INT32;
    run_spec(be, "int32 accumulators near +-2^31", &s, 26, edit_big_acc);
    featured(&s, QKVFUSE_CACHE_PAGED, 9);
    s.qkv_dt = QKVFUSE_DTYPE_INT32, s.q_out_dt = QKVFUSE_DTYPE_FLOAT32, s.act_scale = 1;
    run_spec(be, "zero weight_scale channels and a zero act_scale (accepted)", &s, 29, edit_zero_dequant_scales);
    featured(&s, QKVFUSE_CACHE_PAGED_HND, 9);
    s.eps = 1.0f, s.amp = 0.01;
    run_spec(be, "eps >> mean(x^2)", &s, 27, NULL);
    featured(&s, QKVFUSE_CACHE_PAGED_HND, 9);
    s.eps = 1.0f, s.amp = 0.01, s.rounding = QKVFUSE_ROUNDING_UNFUSED_PARITY, s.k_out_dt = QKVFUSE_DTYPE_BFLOAT16;
    run_spec(be, "eps >> mean(x^2), parity", &s, 28, NULL);
    /* unfused parity with bf16 I/O and float32 k_out / k_cache: k is rounded
     * to bf16 after RoPE (qkvfuse.h), so both hold bf16 values */
    featured(&s, QKVFUSE_CACHE_PAGED, 9);
    s.rounding = QKVFUSE_ROUNDING_UNFUSED_PARITY, s.k_quant = QKVFUSE_QUANT_NONE, s.k_cache_dt = QKVFUSE_DTYPE_FLOAT32;
    run_spec(be, "parity: float32 k_out and k_cache hold the bf16-rounded k", &s, 29, NULL);
    duplicate_slot(be);
  }
  printf("test_special: %d directed cases, %d failed\n", ran, failed);
  return failed ? 1 : ran ? 0 : TK_SKIP;
}
