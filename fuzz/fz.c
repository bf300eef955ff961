/* SPDX-License-Identifier: Apache-2.0 */
/* The fuzz harness: see fz.h. */
#include "fz.h"

#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compare.h"
#include "core/plan.h" /* qf_resolve: validation alone, for tensors too large to back with memory */
#include "fp.h"
#include "harness.h"
#include "oracle.h"
#include "tview.h"

#if defined(__SANITIZE_ADDRESS__)
#define FZ_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FZ_ASAN 1
#endif
#endif
#ifdef FZ_ASAN
#include <sanitizer/asan_interface.h>
#define FZ_POISON(p, n) ASAN_POISON_MEMORY_REGION((p), (n))
#define FZ_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define FZ_POISON(p, n) ((void)(p), (void)(n))
#define FZ_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

#define I32 QKVFUSE_DTYPE_INT32
#define I64 QKVFUSE_DTYPE_INT64
#define F32 QKVFUSE_DTYPE_FLOAT32

/* ---- choices ---------------------------------------------------------------- */

uint64_t fz_bytes(fz_src *s, int nbytes) {
  uint64_t v = 0;
  for (int k = 0; k < nbytes; k++) v = (v << 8) | (s->i < s->n ? s->p[s->i++] : 0);
  return v;
}

int64_t fz_range(fz_src *s, int64_t lo, int64_t hi) {
  uint64_t span = (uint64_t)(hi - lo) + 1;
  int nb = span <= 0x100 ? 1 : span <= 0x10000 ? 2 : span <= 0x100000000ull ? 4 : 8;
  uint64_t v = fz_bytes(s, nb);
  return span ? lo + (int64_t)(v % span) : (int64_t)v;
}

int fz_chance(fz_src *s, int num) { return (int)fz_bytes(s, 1) < num; }

#define PICK(s, arr) ((arr)[fz_range((s), 0, (int64_t)(sizeof(arr) / sizeof((arr)[0])) - 1)])

/* A size, stride or count near the edges of every range the library checks,
 * or near the current value v. */
static int64_t interesting(fz_src *s, int64_t v) {
  static const int64_t fixed[] = {0, 1, 2, 3, -1, -2, 7, 8, 15, 16, 17, 31, 32, 33, 63, 64, 127, 128, 256, 511,
                                  512, 513, 1026, 1 << 16, 1 << 24, (1 << 24) + 1, INT32_MAX, (int64_t)INT32_MAX + 1,
                                  INT32_MIN, (int64_t)1 << 32, ((int64_t)1 << 32) + 1, (int64_t)1 << 40,
                                  (int64_t)1 << 62, INT64_MAX, INT64_MIN};
  const uint64_t u = (uint64_t)v; /* wrapping: the harness must not overflow itself */
  switch (fz_range(s, 0, 9)) {
    case 0: return (int64_t)(u - 1);
    case 1: return (int64_t)(u + 1);
    case 2: return (int64_t)(u * 2);
    case 3: return v / 2;
    case 4: return (int64_t)(0 - u);
    case 5: return (int64_t)(u + ((uint64_t)1 << 31));
    default: return PICK(s, fixed);
  }
}

/* ---- log and failure -------------------------------------------------------------- */

void fz_log(fz_call *f, const char *fmt, ...) {
  if (f->loglen + 2 >= sizeof f->log) return;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(f->log + f->loglen, sizeof f->log - f->loglen, fmt, ap);
  va_end(ap);
  if (n > 0) f->loglen += (size_t)n < sizeof f->log - f->loglen ? (size_t)n : sizeof f->log - f->loglen - 1;
}

static void fz_fail(fz_call *f, const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  fprintf(stderr, "\nFUZZ INVARIANT VIOLATED: %s\n%s\n", msg, f ? f->log : "");
  fflush(stderr);
  abort();
}

/* ---- guarded buffers ---------------------------------------------------------------- */

static uint8_t canary(size_t i) { return (uint8_t)(0xC5 ^ (i * 0x3B)) | 1; }

/* Fill *b: n bytes between guards; init copied from src, else random
 * non-zero bytes from seed. */
static void buf_make(fz_buf *b, size_t n, const uint8_t *src, uint64_t seed) {
  size_t total = (2 * FZ_GUARD + n + 255) / 256 * 256;
  b->base = (uint8_t *)aligned_alloc(256, total);
  b->init = (uint8_t *)malloc(n ? n : 1);
  if (!b->base || !b->init) abort();
  b->run = b->base + FZ_GUARD;
  b->bytes = n;
  if (src) {
    memcpy(b->init, src, n);
  } else {
    tk_rng r;
    tk_rng_seed(&r, seed);
    tk_fill_poison(&r, b->init, n);
  }
  memcpy(b->run, b->init, n);
  for (size_t i = 0; i < FZ_GUARD; i++) b->base[i] = canary(i);
  for (size_t i = 0; i < total - FZ_GUARD - n; i++) b->run[n + i] = canary(i + 7);
  FZ_POISON(b->base, FZ_GUARD);
  FZ_POISON(b->run + n, total - FZ_GUARD - n);
}

/* A new buffer (see buf_make); its index, or -1 when there are too many. */
static int buf_new(fz_call *f, size_t n, const uint8_t *src, uint64_t seed) {
  if (f->nbuf >= FZ_MAX_BUFS) return -1;
  buf_make(&f->buf[f->nbuf], n, src, seed);
  return f->nbuf++;
}

static void guards_check(fz_call *f, const char *when) {
  for (int k = 0; k < f->nbuf; k++) {
    fz_buf *b = &f->buf[k];
    if (!b->base) continue;
    size_t total = (2 * FZ_GUARD + b->bytes + 255) / 256 * 256, tail = total - FZ_GUARD - b->bytes;
    FZ_UNPOISON(b->base, FZ_GUARD);
    FZ_UNPOISON(b->run + b->bytes, tail);
    for (size_t i = 0; i < FZ_GUARD; i++)
      if (b->base[i] != canary(i)) fz_fail(f, "%s: the guard before buffer %d changed at byte -%zu", when, k, FZ_GUARD - i);
    for (size_t i = 0; i < tail; i++)
      if (b->run[b->bytes + i] != canary(i + 7))
        fz_fail(f, "%s: the guard after buffer %d (%zu bytes) changed at byte +%zu", when, k, b->bytes, i);
    FZ_POISON(b->base, FZ_GUARD);
    FZ_POISON(b->run + b->bytes, tail);
  }
}

/* The buffer holding address p (run memory), or -1. */
static int buf_of(const fz_call *f, const void *p) {
  const uint8_t *q = (const uint8_t *)p;
  for (int k = 0; k < f->nbuf; k++) {
    const fz_buf *b = &f->buf[k];
    if (b->base && q >= b->run && q < b->run + (b->bytes ? b->bytes : 1)) return k;
  }
  return -1;
}

void fz_free(fz_call *f) {
  for (int k = 0; k < f->nbuf; k++) {
    if (!f->buf[k].base) continue;
    size_t total = (2 * FZ_GUARD + f->buf[k].bytes + 255) / 256 * 256;
    FZ_UNPOISON(f->buf[k].base, total);
    free(f->buf[k].base);
    free(f->buf[k].init);
  }
  tk_case_free(&f->c);
  memset(f, 0, sizeof *f);
}

/* ---- tensor extents ----------------------------------------------------------------- */

typedef __int128 wide;

/* Byte extent of t (0: no element; -1: negative shape/stride or bad ndim, which
 * the library must reject; -2: beyond any backing). */
static wide extent_bytes(const qkvfuse_tensor *t) {
  if (t->ndim < 0 || t->ndim > QKVFUSE_MAX_DIMS) return -1;
  size_t es = tk_size(t->dtype);
  if (!es) es = 8;
  wide last = 0;
  for (int k = 0; k < t->ndim; k++) {
    if (t->shape[k] < 0 || t->strides[k] < 0) return -1;
    if (t->shape[k] == 0) return 0;
  }
  for (int k = 0; k < t->ndim; k++) {
    last += (wide)(t->shape[k] - 1) * t->strides[k]; /* < 2^126 each */
    if (last > ((wide)1 << 100)) return (wide)1 << 100; /* far beyond any address */
  }
  return (last + 1) * (wide)es;
}

/* Element count of t (shapes >= 0), capped above 2^64: stride-0 dims can make
 * it far larger than the extent. */
static wide numel_capped(const qkvfuse_tensor *t) {
  wide n = 1;
  for (int k = 0; k < t->ndim && n <= ((wide)1 << 64); k++) n *= t->shape[k];
  return n;
}

static int is_output_slot(int slot) {
  return slot == TK_Q_OUT || slot == TK_K_OUT || slot == TK_V_OUT || slot == TK_K_CACHE || slot == TK_V_CACHE;
}

static int is_data_slot(int slot) {
  return slot == TK_POSITIONS || slot == TK_SLOT_MAPPING || slot == TK_K_SCALE || slot == TK_V_SCALE ||
         slot == TK_K_OFFSET || slot == TK_V_OFFSET || slot == TK_WEIGHT_SCALE || slot == TK_ACT_SCALE ||
         slot == TK_Q_SCALE || slot == TK_KV_INDPTR || slot == TK_KV_INDICES || slot == TK_BATCH_INDICES ||
         slot == TK_KV_POSITIONS;
}

/* ---- setup ---------------------------------------------------------------------------- */

static void point_tensors(fz_call *f) {
  qkvfuse_args init = QKVFUSE_ARGS_INIT;
  f->args = init;
  for (int s = 0; s < TK_NSLOT; s++) {
    const tk_view *v = &f->c.view[s];
    if (!v->present) continue;
    f->tens[s] = v->t;
    f->tens[s].data = f->buf[v->buf].run + v->off * (int64_t)tk_size(v->t.dtype);
    *tk_args_field(&f->args, s) = &f->tens[s];
  }
  if (f->c.buf[TK_FLAGS_BUF].bytes) f->args.error_flags = (uint32_t *)f->buf[TK_FLAGS_BUF].run;
}

/* Constrain a random spec to what a named entry point takes. */
static void named_spec(tk_spec *sp, fz_src *s, int op) {
  static const qkvfuse_dtype fl[] = {QKVFUSE_DTYPE_FLOAT32, QKVFUSE_DTYPE_FLOAT16, QKVFUSE_DTYPE_BFLOAT16};
  sp->in_place_q = sp->in_place_k = 0;
  sp->rounding = QKVFUSE_ROUNDING_FUSED;
  sp->addressing = QKVFUSE_ADDRESS_SLOTS; /* the named operators take slots (index / indices) */
  sp->gamma_offset = 0;
  if (sp->qkv_dt == I32 && op != FZ_DEQUANT) sp->qkv_dt = PICK(s, fl);
  if (sp->q_quant) { /* the named operators never quantize q */
    sp->q_quant = QKVFUSE_QUANT_NONE;
    sp->q_out_dt = sp->qkv_dt == I32 ? F32 : sp->qkv_dt;
  }
  sp->q_gamma_dt = sp->k_gamma_dt = sp->qkv_dt == I32 ? F32 : sp->q_gamma_dt;
  switch (op) {
    case FZ_SPLIT:
      sp->q_norm = sp->k_norm = 1;
      sp->rope_source = QKVFUSE_ROPE_COS_SIN_CACHE;
      sp->layout = QKVFUSE_CACHE_NONE;
      if ((sp->q_beta_dt == QKVFUSE_DTYPE_NONE) != (sp->k_beta_dt == QKVFUSE_DTYPE_NONE)) sp->k_beta_dt = sp->q_beta_dt;
      if (!sp->k_out_dt) sp->k_out_dt = sp->q_out_dt;
      if (!sp->v_out_dt) sp->v_out_dt = sp->q_out_dt;
      sp->in3d = 0;
      break;
    case FZ_RMSNORM_CACHE:
      sp->q_norm = sp->k_norm = 1;
      sp->q_beta_dt = sp->k_beta_dt = QKVFUSE_DTYPE_NONE;
      sp->rope_source = QKVFUSE_ROPE_COS_SIN, sp->rope_style = QKVFUSE_ROPE_NEOX, sp->R = sp->D;
      if (sp->layout == QKVFUSE_CACHE_NONE || sp->layout == QKVFUSE_CACHE_CONTIGUOUS) sp->layout = QKVFUSE_CACHE_NZ;
      /* its caches are int8, e4m3fn or unquantized (fp8 e5m2 is the core operator's) */
      if (sp->k_quant == QKVFUSE_QUANT_FP8_E5M2) sp->k_quant = QKVFUSE_QUANT_FP8_E4M3;
      if (sp->v_quant == QKVFUSE_QUANT_FP8_E5M2) sp->v_quant = QKVFUSE_QUANT_FP8_E4M3;
      if (sp->k_quant == QKVFUSE_QUANT_NONE) sp->k_cache_dt = sp->qkv_dt;
      if (sp->v_quant == QKVFUSE_QUANT_NONE) sp->v_cache_dt = sp->qkv_dt;
      sp->in3d = 0, sp->out_split_heads = 0;
      break;
    default: /* FZ_DEQUANT */
      sp->q_norm = sp->k_norm = 0;
      sp->rope_source = QKVFUSE_ROPE_COS_SIN, sp->rope_style = QKVFUSE_ROPE_NEOX, sp->R = sp->D;
      if (sp->layout != QKVFUSE_CACHE_PAGED) sp->layout = QKVFUSE_CACHE_CONTIGUOUS;
      sp->k_quant = fz_chance(s, 128) ? QKVFUSE_QUANT_INT8_ASYM : QKVFUSE_QUANT_INT8_SYM;
      sp->v_quant = fz_chance(s, 128) ? QKVFUSE_QUANT_INT8_ASYM : QKVFUSE_QUANT_INT8_SYM;
      if (sp->k_quant == QKVFUSE_QUANT_INT8_ASYM) sp->k_scale_kind = sp->v_scale_kind; /* offsets follow the scale */
      sp->kv_interleaved = 0;
      if (sp->qkv_dt != I32) sp->q_out_dt = sp->rope_dt = sp->qkv_dt;
      else sp->q_out_dt = sp->rope_dt;
      sp->k_out_dt = sp->v_out_dt = fz_chance(s, 128) ? sp->q_out_dt : QKVFUSE_DTYPE_NONE;
      if (sp->layout == QKVFUSE_CACHE_PAGED) sp->in3d = 0;
      sp->out_split_heads = 0;
      break;
  }
}

int fz_setup(fz_call *f, fz_src *s, int op) {
  memset(f, 0, sizeof *f);
  if (s->n < 4) return -1;
  const uint64_t seed = fz_bytes(s, 8);
  tk_rng r;
  tk_rng_seed(&r, seed);
  tk_limits lim = {1024 << fz_range(s, 0, 2), 0};
  tk_spec sp;
  tk_spec_random(&sp, &r, &lim);
  if (sp.max_pos > 64) sp.max_pos = fz_range(s, 1, 64);
  if (sp.T > 40) {
    sp.T = fz_range(s, 1, 40);
    sp.B = sp.T, sp.S = 1;
  }
  if (op != FZ_CORE) named_spec(&sp, s, op);
  tk_spec_fixup(&sp);
  if (tk_case_build(&f->c, &sp, seed ^ 0x5EEDull)) abort();
  f->nbuf = TK_NSLOT + 1;
  for (int b = 0; b <= TK_NSLOT; b++) /* buffer b of the case is buffer b here */
    if (f->c.buf[b].bytes) buf_make(&f->buf[b], f->c.buf[b].bytes, f->c.buf[b].init, 0);
  point_tensors(f);
  f->desc = f->c.desc;
  f->named.op = op;
  char d[1200];
  tk_spec_describe(&sp, d, sizeof d);
  fz_log(f, "case: seed=0x%llx %s\n", (unsigned long long)seed, d);
  return 0;
}

/* ---- mutations ------------------------------------------------------------------------- */

static const char *slot_name(int slot) { return slot < TK_NSLOT ? tk_slot_name[slot] : "extra"; }

/* Slots whose args field is set (present), in a list; returns the count. */
static int present_slots(fz_call *f, int *out) {
  int n = 0;
  for (int s = 0; s < TK_NSLOT; s++)
    if (*tk_args_field(&f->args, s)) out[n++] = s;
  return n;
}

/* Write integer v (raw, in the view's own dtype) into element i of slot's data. */
static void poke_int(fz_call *f, const qkvfuse_tensor *t, int64_t i, int64_t v) {
  int b = buf_of(f, t->data);
  if (b < 0) return;
  int64_t off = tk_elem_offset(t, i) * (int64_t)tk_size(t->dtype);
  uint8_t *run = (uint8_t *)t->data + off, *init = f->buf[b].init + (run - f->buf[b].run);
  if (t->dtype == I64) {
    memcpy(run, &v, 8), memcpy(init, &v, 8);
  } else {
    int32_t w = (int32_t)(uint32_t)(uint64_t)v; /* what a caller's int32 tensor would hold: the low 32 bits */
    memcpy(run, &w, 4), memcpy(init, &w, 4);
  }
}

static void poke_float(fz_call *f, const qkvfuse_tensor *t, int64_t i, double v) {
  int b = buf_of(f, t->data);
  if (b < 0) return;
  int64_t off = tk_elem_offset(t, i) * (int64_t)tk_size(t->dtype);
  uint8_t *run = (uint8_t *)t->data + off;
  tk_encode(t->dtype, run, v);
  memcpy(f->buf[b].init + (run - f->buf[b].run), run, tk_size(t->dtype));
}

/* Data values at and around their limits: positions, slots, page-table
 * entries (batch indices, positions, kv_indptr, block numbers), scales (the
 * dequant ones too), offsets, and NaN/Inf in qkv. Applied to the case's
 * (valid) tensors; several calls put several classes of data error in one
 * call. */
static void mutate_data(fz_call *f, fz_src *s) {
  static const int slots[] = {TK_POSITIONS, TK_SLOT_MAPPING, TK_SLOT_MAPPING, TK_K_SCALE,      TK_V_SCALE,  TK_K_OFFSET,
                              TK_V_OFFSET,  TK_QKV,          TK_WEIGHT_SCALE, TK_ACT_SCALE,    TK_Q_SCALE,  TK_Q,
                              TK_K,         TK_V,            TK_KV_INDPTR,    TK_KV_INDICES,   TK_BATCH_INDICES,
                              TK_KV_POSITIONS};
  const int slot = PICK(s, slots);
  const tk_view *v = &f->c.view[slot];
  if (!v->present) return;
  qkvfuse_tensor tv = v->t; /* the case's own view: earlier mutations may have changed f->tens[slot] */
  tv.data = f->buf[v->buf].run + v->off * (int64_t)tk_size(v->t.dtype);
  const qkvfuse_tensor *t = &tv;
  const int64_t n = tk_numel(&v->t);
  if (n == 0) return;
  const int64_t i = fz_chance(s, 64) ? n - 1 : fz_range(s, 0, n - 1);
  const tk_spec *sp = &f->c.sp;
  const int table = slot == TK_KV_INDPTR || slot == TK_KV_INDICES || slot == TK_BATCH_INDICES || slot == TK_KV_POSITIONS;
  if (slot == TK_POSITIONS || slot == TK_SLOT_MAPPING || table) {
    int64_t lim;
    const int64_t nidx = f->c.view[TK_KV_INDICES].present ? tk_numel(&f->c.view[TK_KV_INDICES].t) : 0;
    if (slot == TK_POSITIONS)
      lim = sp->rope_source == QKVFUSE_ROPE_COS_SIN_CACHE ? sp->max_pos : (int64_t)1 << 31;
    else if (slot == TK_KV_INDPTR)
      lim = nidx + 1;
    else if (slot == TK_KV_INDICES)
      lim = sp->blocks;
    else if (slot == TK_BATCH_INDICES)
      lim = sp->pt_batch;
    else if (slot == TK_KV_POSITIONS)
      lim = (nidx + 1) * sp->block_size;
    else
      lim = sp->layout == QKVFUSE_CACHE_CONTIGUOUS ? sp->max_seq - sp->S + 1 : sp->blocks * sp->block_size;
    const int64_t two32 = (int64_t)1 << 32;
    const int64_t vals[] = {-1,        -2,          lim - 1,         lim,           lim + 1,
                            INT32_MAX, INT32_MIN,   (int64_t)1 << 31, two32,        two32 + 1,
                            two32 - 1, two32 + lim - 1, -two32 - 1,  INT64_MIN,     INT64_MAX,
                            0,         lim > 0 ? fz_range(s, 0, lim - 1) : 0,
                            slot != TK_POSITIONS ? tk_get_int(t, fz_range(s, 0, n - 1)) : 0 /* a duplicate */};
    int64_t val = PICK(s, vals);
    poke_int(f, t, i, val);
    fz_log(f, "data: %s[%lld] = %lld (%s)\n", slot_name(slot), (long long)i, (long long)val, tk_name(t->dtype));
  } else if (slot == TK_QKV || slot == TK_Q || slot == TK_K || slot == TK_V) {
    /* NaN propagates through every stage alike in float32 and float64; an Inf
     * (x*x, Inf*0 in the norm) is special-value territory: test_special */
    const double val = fz_chance(s, 128) ? NAN : -NAN;
    if (t->dtype == I32) return; /* int32 has no specials; its limits are test_special's */
    poke_float(f, t, i, val);
    fz_log(f, "data: %s[%lld] = %g\n", slot_name(slot), (long long)i, val);
  } else {
    const double vals[] = {0.0, -0.0, NAN, INFINITY, -INFINITY, 1e-45, FLT_MAX, -FLT_MAX, 1e-30, 3e38, 0.5, -1.0};
    /* a dequant scale multiplies into every later stage: the finite ones stay
     * where float32 neither overflows nor underflows (the oracle's model) */
    const double dequant_vals[] = {0.0, -0.0, NAN, INFINITY, -INFINITY, 0.5, -1.0};
    const int dequant = slot == TK_WEIGHT_SCALE || slot == TK_ACT_SCALE;
    double val = dequant ? PICK(s, dequant_vals) : PICK(s, vals);
    poke_float(f, t, i, val);
    fz_log(f, "data: %s[%lld] = %g\n", slot_name(slot), (long long)i, val);
  }
}

static void mutate_tensor(fz_call *f, fz_src *s) {
  int pres[TK_NSLOT], np = present_slots(f, pres);
  if (!np) return;
  const int slot = pres[fz_range(s, 0, np - 1)];
  const qkvfuse_tensor **field = tk_args_field(&f->args, slot);
  qkvfuse_tensor *t = (qkvfuse_tensor *)*field; /* one of f->tens (the harness owns them) */
  const int k = (int)fz_range(s, 0, 5);
  static const int dts[] = {QKVFUSE_DTYPE_NONE,    QKVFUSE_DTYPE_INT8,    QKVFUSE_DTYPE_INT32,
                            QKVFUSE_DTYPE_INT64,   QKVFUSE_DTYPE_FLOAT16, QKVFUSE_DTYPE_FLOAT32,
                            QKVFUSE_DTYPE_BFLOAT16, QKVFUSE_DTYPE_FLOAT8_E4M3FN, QKVFUSE_DTYPE_FLOAT8_E5M2,
                            QKVFUSE_DTYPE_CODE(2, 64),
                            QKVFUSE_DTYPE_CODE(1, 8), 0x1234, -1};
  switch (fz_range(s, 0, 11)) {
    case 0: *field = NULL; fz_log(f, "args.%s = NULL\n", slot_name(slot)); break;
    case 10: { /* near the top of the address space, often with no element: nothing may offset it */
      if (fz_chance(s, 160)) t->shape[0] = 0;
      t->data = (void *)(UINTPTR_MAX - (uintptr_t)(8 * fz_range(s, 0, 64)) - 7);
      fz_log(f, "%s.data = %p, shape[0] = %lld\n", slot_name(slot), t->data, (long long)t->shape[0]);
      break;
    }
    case 1: t->data = NULL; fz_log(f, "%s.data = NULL\n", slot_name(slot)); break;
    case 2: {
      int64_t by = fz_range(s, 1, 7);
      t->data = (void *)((uintptr_t)t->data + (uintptr_t)by); /* (data may be NULL) */
      fz_log(f, "%s.data += %lld bytes\n", slot_name(slot), (long long)by);
      break;
    }
    case 3: t->dtype = (qkvfuse_dtype)PICK(s, dts); fz_log(f, "%s.dtype = 0x%x\n", slot_name(slot), (unsigned)t->dtype); break;
    case 4: {
      static const int nds[] = {-1, 0, 1, 2, 3, 4, 5, 6, 7, 100};
      int nd = fz_chance(s, 128) ? t->ndim + (fz_chance(s, 128) ? 1 : -1) : PICK(s, nds);
      for (int j = t->ndim < 0 ? 0 : t->ndim; j < nd && j < QKVFUSE_MAX_DIMS; j++) t->shape[j] = 1, t->strides[j] = 1;
      t->ndim = nd;
      fz_log(f, "%s.ndim = %d\n", slot_name(slot), nd);
      break;
    }
    case 5:
    case 6: {
      t->shape[k] = interesting(s, t->shape[k]);
      fz_log(f, "%s.shape[%d] = %lld\n", slot_name(slot), k, (long long)t->shape[k]);
      break;
    }
    case 7:
    case 8: {
      t->strides[k] = interesting(s, t->strides[k]);
      fz_log(f, "%s.strides[%d] = %lld\n", slot_name(slot), k, (long long)t->strides[k]);
      break;
    }
    case 9: {
      static const int types[] = {0, QKVFUSE_DEVICE_CUDA, 3, 7};
      if (fz_chance(s, 128)) t->device_type = (qkvfuse_device_type)PICK(s, types);
      else t->device_id = fz_chance(s, 128) ? 1 : -1;
      fz_log(f, "%s.device = (%d, %d)\n", slot_name(slot), (int)t->device_type, (int)t->device_id);
      break;
    }
    default: { /* an output shares memory with another tensor: the same view, or its data pointer (inputs
                  may alias each other, but their values would then be read as what they are not) */
      const int other = pres[fz_range(s, 0, np - 1)];
      if (!is_output_slot(slot)) return;
      const qkvfuse_tensor *o = *tk_args_field(&f->args, other);
      if (fz_chance(s, 100)) {
        *field = o;
        fz_log(f, "args.%s = args.%s\n", slot_name(slot), slot_name(other));
      } else {
        int64_t el = fz_range(s, 0, 3);
        t->data = (void *)((uintptr_t)o->data + (uintptr_t)(el * (int64_t)tk_size(o->dtype)));
        fz_log(f, "%s.data = %s.data + %lld elements\n", slot_name(slot), slot_name(other), (long long)el);
      }
      break;
    }
  }
}

/* Another view of the same elements: a dim split in two, two dims merged, a
 * unit dim (of any stride) inserted or removed. The library must accept all. */
static void mutate_view(fz_call *f, fz_src *s) {
  int pres[TK_NSLOT], np = present_slots(f, pres);
  if (!np) return;
  const int slot = pres[fz_range(s, 0, np - 1)];
  qkvfuse_tensor *t = (qkvfuse_tensor *)*tk_args_field(&f->args, slot);
  if (t->ndim < 1 || t->ndim > QKVFUSE_MAX_DIMS) return;
  const int k = (int)fz_range(s, 0, t->ndim - 1), n = t->ndim;
  switch (fz_range(s, 0, 3)) {
    case 0: { /* split dim k of size a*b */
      if (n >= QKVFUSE_MAX_DIMS) return;
      int64_t sz = t->shape[k], a = 0;
      for (int64_t c = 2; c <= 64 && c < sz; c++)
        if (sz % c == 0 && (a = c) && fz_chance(s, 128)) break;
      if (!a) return;
      memmove(&t->shape[k + 1], &t->shape[k], (size_t)(n - k) * sizeof(int64_t));
      memmove(&t->strides[k + 1], &t->strides[k], (size_t)(n - k) * sizeof(int64_t));
      t->shape[k] = a, t->shape[k + 1] = sz / a;
      t->strides[k] = (int64_t)((uint64_t)t->strides[k + 1] * (uint64_t)(sz / a)); /* wraps if the stride is odd */
      t->ndim++;
      fz_log(f, "view: %s dim %d split %lld x %lld\n", slot_name(slot), k, (long long)a, (long long)(sz / a));
      break;
    }
    case 1: /* merge dims k, k+1 where they collapse */
      if (k + 1 >= n || (wide)t->strides[k] != (wide)t->shape[k + 1] * t->strides[k + 1] ||
          (wide)t->shape[k + 1] * t->shape[k] > INT64_MAX || (wide)t->shape[k + 1] * t->shape[k] < INT64_MIN)
        return;
      t->shape[k + 1] *= t->shape[k];
      memmove(&t->shape[k], &t->shape[k + 1], (size_t)(n - k - 1) * sizeof(int64_t));
      memmove(&t->strides[k], &t->strides[k + 1], (size_t)(n - k - 1) * sizeof(int64_t));
      t->ndim--;
      fz_log(f, "view: %s dims %d,%d merged\n", slot_name(slot), k, k + 1);
      break;
    case 2: { /* insert a unit dim with an arbitrary stride */
      if (n >= QKVFUSE_MAX_DIMS) return;
      int at = (int)fz_range(s, 0, n);
      memmove(&t->shape[at + 1], &t->shape[at], (size_t)(n - at) * sizeof(int64_t));
      memmove(&t->strides[at + 1], &t->strides[at], (size_t)(n - at) * sizeof(int64_t));
      t->shape[at] = 1;
      t->strides[at] = interesting(s, 1) & INT64_MAX;
      t->ndim++;
      fz_log(f, "view: %s unit dim at %d (stride %lld)\n", slot_name(slot), at, (long long)t->strides[at]);
      break;
    }
    default: /* remove a unit dim */
      if (t->shape[k] != 1) return;
      memmove(&t->shape[k], &t->shape[k + 1], (size_t)(n - k - 1) * sizeof(int64_t));
      memmove(&t->strides[k], &t->strides[k + 1], (size_t)(n - k - 1) * sizeof(int64_t));
      t->ndim--;
      fz_log(f, "view: %s unit dim %d removed\n", slot_name(slot), k);
      break;
  }
}

static void mutate_desc(fz_call *f, fz_src *s) {
  qkvfuse_desc *d = &f->desc;
  static const int enums[] = {0, 1, 2, 3, 4, 5, 9, -1, 0x7fffffff};
  static const float epss[] = {0.0f, -1e-6f, NAN, INFINITY, 1e-30f, 1e-45f, 1e30f, FLT_MAX, 1e-6f, 1.0f};
  static const double reals[] = {0.0, -1.0, NAN, INFINITY, -INFINITY, 1e-300, 1e300, 1.0, 1.0000001, 4.0, 0.5};
  static const int bools[] = {0, 1, 2, -1};
  const int field = (int)fz_range(s, 0, 26);
  switch (field) {
    case 0: d->num_q_heads = interesting(s, d->num_q_heads); break;
    case 1: d->num_kv_heads = interesting(s, d->num_kv_heads); break;
    case 2: d->head_dim = interesting(s, d->head_dim); break;
    case 3: d->rotary_dim = interesting(s, d->rotary_dim); break;
    case 4: d->rope_source = (qkvfuse_rope_source)PICK(s, enums); break;
    case 5: d->rope_style = (qkvfuse_rope_style)PICK(s, enums); break;
    case 6: d->cache_layout = (qkvfuse_cache_layout)PICK(s, enums); break;
    case 7: d->k_quant = (qkvfuse_quant_mode)PICK(s, enums); break;
    case 8: d->v_quant = (qkvfuse_quant_mode)PICK(s, enums); break;
    case 9: d->rounding = (qkvfuse_rounding)PICK(s, enums); break;
    case 10: d->q_norm = PICK(s, bools); break;
    case 11: d->k_norm = PICK(s, bools); break;
    case 12: d->gamma_offset = PICK(s, bools); break;
    case 13: d->eps = PICK(s, epss); break;
    case 14: d->rope_theta = PICK(s, reals) * (fz_chance(s, 128) ? 10000.0 : 1.0); break;
    case 15: d->rope_scaling.type = (qkvfuse_rope_scaling_type)PICK(s, enums); break;
    case 16: { /* not near 0 or huge: see docs/ERRORS.md, "RoPE scaling factor" */
      static const double factors[] = {0.0, -1.0, NAN, INFINITY, -INFINITY, 1000.0, 1.0, 1.0000001, 4.0, 0.5, 2.0};
      d->rope_scaling.factor = PICK(s, factors);
      break;
    }
    case 17: d->rope_scaling.original_max_position = interesting(s, d->rope_scaling.original_max_position); break;
    case 18: d->rope_scaling.low_freq_factor = PICK(s, reals); break;
    case 19: d->rope_scaling.beta_fast = PICK(s, reals); break;
    case 20: {
      static const int nts[] = {-1, 0, 1, 2, 3, 64};
      d->num_threads = PICK(s, nts);
      break;
    }
    case 21: { /* never CUDA: CPU tensors under a CUDA plan are the DEVICE check's, not a kernel's */
      static const int types[] = {0, 3, 7, -1};
      d->device_type = (qkvfuse_device_type)PICK(s, types);
      break;
    }
    case 22: d->device_id = fz_chance(s, 128) ? -1 : 1; break;
    case 23: d->struct_size = (uint32_t)PICK(s, enums); break;
    case 24: d->version = (uint32_t)PICK(s, enums); break;
    case 25: d->q_quant = (qkvfuse_quant_mode)PICK(s, enums); break;
    default: d->cache_addressing = (qkvfuse_cache_addressing)PICK(s, enums); break;
  }
  fz_log(f, "desc #%d: Nq=%lld Nkv=%lld D=%lld R=%lld src=%d style=%d layout=%d quant=%d/%d/q%d round=%d norm=%d/%d/%d "
         "eps=%g theta=%g scaling=(%d, %g, %lld, %g, %g) threads=%d dev=%d/%d size=%u version=%u addressing=%d\n",
         field, (long long)d->num_q_heads, (long long)d->num_kv_heads, (long long)d->head_dim,
         (long long)d->rotary_dim, (int)d->rope_source, (int)d->rope_style, (int)d->cache_layout, (int)d->k_quant,
         (int)d->v_quant, (int)d->q_quant, (int)d->rounding, (int)d->q_norm, (int)d->k_norm, (int)d->gamma_offset,
         (double)d->eps,
         d->rope_theta, (int)d->rope_scaling.type, d->rope_scaling.factor,
         (long long)d->rope_scaling.original_max_position, d->rope_scaling.low_freq_factor,
         d->rope_scaling.beta_fast, (int)d->num_threads, (int)d->device_type, (int)d->device_id, d->struct_size,
         d->version, (int)d->cache_addressing);
}

/* A tensor for an absent slot, with a plausible shape, in a new buffer. */
static void add_tensor(fz_call *f, fz_src *s) {
  int absent[TK_NSLOT], na = 0;
  for (int k = 0; k < TK_NSLOT; k++)
    if (!*tk_args_field(&f->args, k)) absent[na++] = k;
  if (!na) return;
  const int slot = absent[fz_range(s, 0, na - 1)];
  const qkvfuse_desc *d = &f->c.desc;
  const int64_t T = f->c.sp.T, D = d->head_dim, R = d->rotary_dim ? d->rotary_dim : D;
  const int64_t H = (d->num_q_heads + 2 * d->num_kv_heads) * D, KV = d->num_kv_heads * D;
  int64_t shape[4] = {1, 1, 1, 1};
  int nd = 1;
  qkvfuse_dtype dt = F32;
  switch (slot) {
    case TK_QKV: shape[0] = T, shape[1] = H, nd = 2; break;
    case TK_Q: shape[0] = T, shape[1] = d->num_q_heads * D, nd = 2; break;
    case TK_K:
    case TK_V: shape[0] = T, shape[1] = KV, nd = 2; break;
    case TK_WEIGHT_SCALE:
    case TK_BIAS: shape[0] = H; break;
    case TK_ACT_SCALE:
    case TK_POSITIONS:
    case TK_BATCH_INDICES:
    case TK_KV_POSITIONS:
    case TK_SLOT_MAPPING: shape[0] = T, dt = slot == TK_ACT_SCALE ? F32 : I64; break;
    case TK_KV_INDPTR: shape[0] = 2, dt = I64; break;
    case TK_KV_INDICES: shape[0] = 4, dt = I64; break;
    case TK_COS_SIN_CACHE: shape[0] = 16, shape[1] = R, nd = 2; break;
    case TK_COS:
    case TK_SIN: shape[0] = T, shape[1] = R, nd = 2; break;
    case TK_Q_OUT: shape[0] = T, shape[1] = d->num_q_heads * D, nd = 2; break;
    case TK_K_OUT:
    case TK_V_OUT: shape[0] = T, shape[1] = KV, nd = 2; break;
    case TK_K_CACHE:
    case TK_V_CACHE: shape[0] = 4, shape[1] = 4, shape[2] = d->num_kv_heads, shape[3] = D, nd = 4; break;
    case TK_K_SCALE:
    case TK_V_SCALE:
    case TK_K_OFFSET:
    case TK_V_OFFSET:
    case TK_Q_SCALE: break;
    default: shape[0] = D; break; /* gamma, beta */
  }
  qkvfuse_tensor *t = &f->tens[slot];
  qkvfuse_tensor_init(t, NULL, dt, nd, shape);
  wide bytes = extent_bytes(t);
  if (bytes < 0 || bytes > FZ_MAX_BACK) return;
  int b = buf_new(f, (size_t)(bytes > 0 ? bytes : 1), NULL, fz_bytes(s, 4));
  if (b < 0) return;
  t->data = f->buf[b].run;
  int64_t n = tk_numel(t);
  for (int64_t i = 0; i < n; i++) {
    if (dt == I64) poke_int(f, t, i, slot == TK_SLOT_MAPPING ? i : i % 4);
    else if (slot != TK_Q_OUT && slot != TK_K_OUT && slot != TK_V_OUT && slot != TK_K_CACHE && slot != TK_V_CACHE)
      poke_float(f, t, i, 0.5);
  }
  *tk_args_field(&f->args, slot) = t;
  fz_log(f, "args.%s = a new tensor\n", slot_name(slot));
}

static void mutate_args(fz_call *f, fz_src *s) {
  switch (fz_range(s, 0, 8)) {
    case 0: f->args.struct_size = (uint32_t)fz_range(s, 0, sizeof(qkvfuse_args) + 8); fz_log(f, "args.struct_size\n"); break;
    case 1: f->args.version = (uint32_t)fz_range(s, 0, 3); fz_log(f, "args.version = %u\n", f->args.version); break;
    case 2: f->null_args = 1; fz_log(f, "args NULL\n"); break;
    case 3: f->null_plan_out = 1; fz_log(f, "plan out-pointer NULL\n"); break;
    case 4: f->args.error_flags = NULL; fz_log(f, "error_flags NULL\n"); break;
    case 5:
      if (f->args.error_flags && f->buf[TK_FLAGS_BUF].run) { /* from the flags buffer's start: misaligned again and again stays misaligned
                                    (adding to the pointer could make it aligned again, past the buffer) */
        f->args.error_flags = (uint32_t *)(f->buf[TK_FLAGS_BUF].run + fz_range(s, 1, 3));
        fz_log(f, "error_flags misaligned\n");
      }
      break;
    case 6: { /* error_flags inside any tensor of the call (4-byte aligned, so only the overlap is wrong) */
      int pres[TK_NSLOT], np = present_slots(f, pres);
      if (!np) break;
      const int other = pres[fz_range(s, 0, np - 1)];
      const qkvfuse_tensor *o = *tk_args_field(&f->args, other);
      uint32_t *at = (uint32_t *)(((uintptr_t)o->data + 4 * (uintptr_t)fz_range(s, 0, 3) + 3) & ~(uintptr_t)3);
      if (fz_buf_room(f, o->data) < (int64_t)((uintptr_t)at - (uintptr_t)o->data) + 4)
        break; /* inside memory the harness owns (a re-backed tensor leaves it valid) */
      f->args.error_flags = at;
      fz_log(f, "error_flags inside %s\n", slot_name(other));
      break;
    }
    default: add_tensor(f, s); break;
  }
}

void fz_mutate(fz_call *f, fz_src *s) {
  const int k = (int)fz_bytes(s, 1);
  const int nops = k < 48 ? 0 : k < 160 ? 1 : k < 220 ? 2 : 3 + k % 4;
  for (int i = 0; i < nops; i++) {
    const int kind = (int)fz_range(s, 0, 99);
    if (kind < 30) mutate_data(f, s);
    else if (kind < 62) mutate_tensor(f, s);
    else if (kind < 76) mutate_desc(f, s);
    else if (kind < 88) mutate_args(f, s);
    else mutate_view(f, s);
  }
}

/* ---- backing: every tensor the call names lies inside memory it owns ---------------- */

/* Element values of a re-backed tensor that keep float32 arithmetic away
 * from overflow (the oracle's slack assumes finite float32 intermediates);
 * the bytes between elements stay random. */
static void fill_sane(fz_call *f, const qkvfuse_tensor *t, int slot, uint64_t seed) {
  tk_rng r;
  tk_rng_seed(&r, seed);
  const int64_t n = tk_numel(t);
  for (int64_t i = 0; i < n; i++) {
    if (t->dtype == I32 || t->dtype == I64)
      poke_int(f, t, i, slot == TK_QKV || slot == TK_Q || slot == TK_K || slot == TK_V ? tk_rng_range(&r, -1000, 1000) : i % 3);
    else if (tk_is_float(t->dtype) && t->dtype != QKVFUSE_DTYPE_FLOAT8_E4M3FN && t->dtype != QKVFUSE_DTYPE_FLOAT8_E5M2)
      poke_float(f, t, i, (tk_rng_chance(&r, 0.5) ? -1 : 1) * tk_rng_uniform(&r, 0.05, 1.5));
  }
}

/* Tensors that stick out of their buffer get a fresh one (random bytes; index
 * tensors hold small values) of their extent. 0: every tensor backed; 1: a
 * tensor is too large to back (then only validation can run). */
static int back_tensors(fz_call *f, fz_src *s, int *data_unbacked) {
  int unbacked = 0;
  *data_unbacked = 0;
  for (int slot = 0; slot < TK_NSLOT; slot++) {
    qkvfuse_tensor *t = (qkvfuse_tensor *)*tk_args_field(&f->args, slot);
    if (!t || !t->data) continue;
    wide bytes = extent_bytes(t);
    if (bytes <= 0) continue;
    const wide n = numel_capped(t);
    if (n > FZ_MAX_BACK) { /* repeated elements (stride 0): too many to fill or compute */
      unbacked = 1;
      if (is_data_slot(slot)) *data_unbacked = 1;
      fz_log(f, "backing: %s has %g elements: validation only\n", slot_name(slot), (double)n);
      continue;
    }
    int b = buf_of(f, t->data);
    if (b >= 0 && (wide)((uint8_t *)t->data - f->buf[b].run) + bytes <= (wide)f->buf[b].bytes) {
      /* an input whose view changed reads other bytes, or the same bytes as another dtype: give those
       * elements values from the range the oracle models */
      const tk_view *v = &f->c.view[slot];
      const void *orig = v->present ? f->buf[v->buf].run + v->off * (int64_t)tk_size(v->t.dtype) : NULL;
      if (!is_output_slot(slot) && (!v->present || t->data != orig || t->dtype != v->t.dtype || t->ndim != v->t.ndim ||
                                    memcmp(t->shape, v->t.shape, sizeof t->shape) ||
                                    memcmp(t->strides, v->t.strides, sizeof t->strides)))
        fill_sane(f, t, slot, fz_bytes(s, 4));
      continue;
    }
    if (bytes > FZ_MAX_BACK) {
      unbacked = 1;
      if (is_data_slot(slot)) *data_unbacked = 1;
      fz_log(f, "backing: %s spans %g bytes: validation only\n", slot_name(slot), (double)bytes);
      continue;
    }
    const size_t mis = (uintptr_t)t->data % 16;
    int nb = buf_new(f, (size_t)bytes + mis, NULL, fz_bytes(s, 4) + 77);
    if (nb < 0) {
      unbacked = *data_unbacked = 1;
      continue;
    }
    t->data = f->buf[nb].run + mis;
    fill_sane(f, t, slot, fz_bytes(s, 4));
    fz_log(f, "backing: %s in a new buffer of %zu bytes\n", slot_name(slot), (size_t)bytes);
  }
  return unbacked;
}

/* ---- checks ------------------------------------------------------------------------------- */

long fz_counts[QKVFUSE_ERROR_VERSION + 2];

void fz_print_counts(FILE *out) {
  long total = 0;
  for (int k = 0; k <= QKVFUSE_ERROR_VERSION + 1; k++) total += fz_counts[k];
  fprintf(out, "calls by outcome (%ld):", total);
  for (int k = 0; k <= QKVFUSE_ERROR_VERSION; k++)
    if (fz_counts[k]) fprintf(out, " %s %ld", qkvfuse_status_string((qkvfuse_status)k) + 8, fz_counts[k]);
  if (fz_counts[QKVFUSE_ERROR_VERSION + 1]) fprintf(out, " validation-only %ld", fz_counts[QKVFUSE_ERROR_VERSION + 1]);
  fprintf(out, "\n");
}

static int known_status(qkvfuse_status st) { return st >= QKVFUSE_SUCCESS && st <= QKVFUSE_ERROR_VERSION; }

/* A message that names its argument: "name: ..." / "name[..." / "name.field ...". */
static int message_ok(const char *m) {
  if (!m || !((m[0] >= 'a' && m[0] <= 'z') || m[0] == '_')) return 0;
  size_t n = strspn(m, "abcdefghijklmnopqrstuvwxyz_0123456789.");
  return m[n] == ':' || m[n] == ' ' || m[n] == '[';
}

/* Everything unchanged after a failed call, but for a data error's flag bit. */
static void check_untouched(fz_call *f, qkvfuse_status st, const char *be) {
  guards_check(f, be);
  const int flags_buf = f->args.error_flags ? buf_of(f, f->args.error_flags) : -1;
  for (int k = 0; k < f->nbuf; k++) {
    fz_buf *b = &f->buf[k];
    if (!b->base) continue;
    for (size_t i = 0; i < b->bytes; i++) {
      if (b->run[i] == b->init[i]) continue;
      const uint8_t *fl = (const uint8_t *)f->args.error_flags;
      if (k == flags_buf && (st == QKVFUSE_ERROR_OUT_OF_RANGE || st == QKVFUSE_ERROR_BAD_SCALE) &&
          b->run + i >= fl && b->run + i < fl + 4)
        continue; /* checked below */
      fz_fail(f, "%s: %s, yet byte %zu of buffer %d changed (0x%02x -> 0x%02x)", be, qkvfuse_status_string(st), i, k,
              b->init[i], b->run[i]);
    }
  }
  if (f->args.error_flags && (st == QKVFUSE_ERROR_OUT_OF_RANGE || st == QKVFUSE_ERROR_BAD_SCALE) && flags_buf >= 0) {
    uint32_t before, after;
    memcpy(&before, f->buf[flags_buf].init + ((uint8_t *)f->args.error_flags - f->buf[flags_buf].run), 4);
    memcpy(&after, f->args.error_flags, 4);
    /* the returned class's bit, and any other class found in the same call */
    const uint32_t any = QKVFUSE_DATA_ERROR_POSITION | QKVFUSE_DATA_ERROR_SLOT | QKVFUSE_DATA_ERROR_SCALE;
    uint32_t want = st == QKVFUSE_ERROR_BAD_SCALE ? QKVFUSE_DATA_ERROR_SCALE
                                                 : (QKVFUSE_DATA_ERROR_POSITION | QKVFUSE_DATA_ERROR_SLOT);
    if ((after & want) == 0 || (after & before) != before || (after & ~(before | any)))
      fz_fail(f, "%s: %s, error_flags 0x%x -> 0x%x (want one of 0x%x set, no bit outside 0x%x added)", be,
              qkvfuse_status_string(st), before, after, want, any);
  }
}

/* Translate run memory to the buffer's init copy. */
static void *to_init(fz_call *f, const void *p) {
  int b = p ? buf_of(f, p) : -1;
  return b < 0 ? (void *)p : f->buf[b].init + ((const uint8_t *)p - f->buf[b].run);
}

static uint8_t *mask_at(fz_call *f, uint8_t **mask, const void *p) {
  int b = buf_of(f, p);
  return b < 0 ? NULL : mask[b] + ((const uint8_t *)p - f->buf[b].run);
}

static int cmp_off(const void *a, const void *b) {
  const int64_t *x = (const int64_t *)a, *y = (const int64_t *)b;
  return x[0] < y[0] ? -1 : x[0] > y[0] ? 1 : x[1] < y[1] ? -1 : x[1] > y[1];
}

/* Duplicate slots: the later token wins on the CPU (docs/API.md); drop the
 * earlier tokens' expectations at a shared cache element. */
static void keep_last_writer(int64_t *off, int64_t n) {
  int64_t *pairs = (int64_t *)malloc((size_t)(n > 0 ? n : 1) * 2 * sizeof(int64_t));
  int64_t m = 0;
  for (int64_t i = 0; i < n; i++)
    if (off[i] >= 0) pairs[2 * m] = off[i], pairs[2 * m + 1] = i, m++;
  qsort(pairs, (size_t)m, 2 * sizeof(int64_t), cmp_off);
  for (int64_t k = 0; k + 1 < m; k++)
    if (pairs[2 * k] == pairs[2 * k + 2]) off[pairs[2 * k + 1]] = -1;
  free(pairs);
}

/* A successful call: every output element and written cache element against
 * the oracle of (desc, oargs), every other byte unchanged. */
static void check_success(fz_call *f, const qkvfuse_desc *desc, const qkvfuse_args *oargs, const char *be) {
  guards_check(f, be);
  const char *le = qkvfuse_last_error();
  if (!le || le[0]) fz_fail(f, "%s: success, but qkvfuse_last_error() is \"%s\"", be, le ? le : "(null)");
  qkvfuse_tensor host[TK_NSLOT];
  qkvfuse_args ha = *oargs;
  for (int s = 0; s < TK_NSLOT; s++) {
    const qkvfuse_tensor **fld = tk_args_field(&ha, s);
    if (!*fld) continue;
    host[s] = **fld;
    host[s].data = to_init(f, host[s].data);
    *fld = &host[s];
  }
  tk_oracle o;
  char err[256];
  if (tk_oracle_run(desc, &ha, &o, err, sizeof err))
    fz_fail(f, "%s: the library accepted a call the oracle rejects: %s", be, err);
  const int64_t KV = o.Nkv * o.D, QD = o.Nq * o.D;
  keep_last_writer(o.kc_off, o.T * KV);
  keep_last_writer(o.vc_off, o.T * KV);
  uint8_t *mask[FZ_MAX_BUFS] = {0};
  for (int k = 0; k < f->nbuf; k++)
    if (f->buf[k].base) mask[k] = (uint8_t *)calloc(f->buf[k].bytes + 1, 1);
  tk_stats st;
  memset(&st, 0, sizeof st);
  const int parity = desc->rounding != QKVFUSE_ROUNDING_FUSED; /* rounding between stages: no norm-wise bound */
  tk_cmp_output_rows(&st, "q_out", oargs->q_out, mask_at(f, mask, oargs->q_out->data), o.q, o.qs, o.T, QD, o.q_mid,
                     !parity, NULL);
  if (oargs->k_out)
    tk_cmp_output_rows(&st, "k_out", oargs->k_out, mask_at(f, mask, oargs->k_out->data), o.k, o.ks, o.T, KV, o.mid,
                       !parity, NULL);
  if (oargs->v_out)
    tk_cmp_output_rows(&st, "v_out", oargs->v_out, mask_at(f, mask, oargs->v_out->data), o.v, o.vs, o.T, KV,
                       QKVFUSE_DTYPE_NONE, !parity, NULL);
  if (oargs->k_cache)
    tk_cmp_cache(&st, "k_cache", oargs->k_cache, mask_at(f, mask, oargs->k_cache->data), o.kc_off, o.kc, o.kcs,
                 o.T * KV, !parity);
  if (oargs->v_cache)
    tk_cmp_cache(&st, "v_cache", oargs->v_cache, mask_at(f, mask, oargs->v_cache->data), o.vc_off, o.vc, o.vcs,
                 o.T * KV, !parity);
  if (f->named.has_q_copy && f->named.is_output_qkv) { /* q_out_before_quant: q_out's bytes */
    const qkvfuse_tensor *q = oargs->q_out, *c = &f->named.q_copy;
    size_t es = tk_size(q->dtype);
    uint8_t *m = mask_at(f, mask, c->data);
    for (int64_t i = 0; i < o.T * QD; i++) {
      const char *a = (const char *)q->data + tk_elem_offset(q, i) * (int64_t)es;
      const char *b = (const char *)c->data + tk_elem_offset(c, i) * (int64_t)es;
      if (memcmp(a, b, es)) tk_stats_fail(&st, "q_out_before_quant element %lld differs from q_out", (long long)i);
      if (m) memset(m + tk_elem_offset(c, i) * (int64_t)es, 1, es);
    }
  }
  for (int k = 0; k < f->nbuf; k++) {
    if (!f->buf[k].base) continue;
    char name[48];
    snprintf(name, sizeof name, "buffer %d", k);
    tk_cmp_untouched(&st, name, f->buf[k].run, f->buf[k].init, mask[k], f->buf[k].bytes);
    free(mask[k]);
  }
  tk_oracle_free(&o);
  if (st.failed) fz_fail(f, "%s: success, but %lld checks failed; first: %s", be, (long long)st.failed, st.first);
}

/* Validation alone (tensors too large to back): a rejection is fine; an
 * acceptance must at least not have let an extent overflow the address space. */
static void check_validation_only(fz_call *f) {
  qkvfuse_desc d = f->desc;
  d.backend = QKVFUSE_BACKEND_REFERENCE;
  qkvfuse_plan *plan = NULL;
  if (f->named.op != FZ_CORE || qkvfuse_plan_create(&d, &plan) != QKVFUSE_SUCCESS) return;
  qf_problem p;
  qkvfuse_status st = qf_resolve(plan, f->null_args ? NULL : &f->args, &p);
  qkvfuse_plan_destroy(plan);
  fz_counts[QKVFUSE_ERROR_VERSION + 1]++;
  if (st != QKVFUSE_SUCCESS) {
    if (!message_ok(qkvfuse_last_error()))
      fz_fail(f, "validation: %s with message \"%s\"", qkvfuse_status_string(st), qkvfuse_last_error());
    return;
  }
  for (int slot = 0; slot < TK_NSLOT; slot++) {
    const qkvfuse_tensor *t = *tk_args_field(&f->args, slot);
    if (!t || !t->data) continue;
    wide bytes = extent_bytes(t);
    if (bytes > (wide)INT64_MAX || (wide)(uintptr_t)t->data + bytes > (wide)UINTPTR_MAX)
      fz_fail(f, "validation accepted %s spanning %g bytes from %p (beyond the address space)", slot_name(slot),
              (double)bytes, t->data);
  }
}

static qkvfuse_status run_backend(fz_call *f, qkvfuse_backend be, qkvfuse_desc *desc, qkvfuse_args *oargs,
                                  int *desc_ok) {
  *desc = f->desc;
  *oargs = f->args;
  *desc_ok = 1;
  if (f->named.op != FZ_CORE) return fz_call_named(f, desc, oargs, desc_ok);
  desc->backend = be;
  qkvfuse_plan *plan = NULL;
  qkvfuse_status st = qkvfuse_plan_create(desc, f->null_plan_out ? NULL : &plan);
  if (st != QKVFUSE_SUCCESS) return st;
  st = qkvfuse_run(plan, f->null_args ? NULL : &f->args, NULL);
  qkvfuse_plan_destroy(plan);
  return st;
}

void fz_check(fz_call *f, fz_src *s) {
  int data_unbacked;
  if (back_tensors(f, s, &data_unbacked)) {
    if (!data_unbacked) check_validation_only(f);
    return;
  }
  /* the named operators run on the default backend only */
  const qkvfuse_backend bes[2] = {QKVFUSE_BACKEND_REFERENCE, QKVFUSE_BACKEND_AUTO};
  const int nbe = f->named.op == FZ_CORE ? 2 : 1;
  qkvfuse_status first = QKVFUSE_SUCCESS;
  for (int i = 0; i < nbe; i++) {
    const char *be = f->named.op == FZ_CORE ? tk_backend_str(bes[i]) : "named";
    for (int k = 0; k < f->nbuf; k++)
      if (f->buf[k].base) memcpy(f->buf[k].run, f->buf[k].init, f->buf[k].bytes);
    qkvfuse_desc desc;
    qkvfuse_args oargs;
    int desc_ok;
    if (getenv("QKVFUSE_FUZZ_VERBOSE")) /* the case before the call: for a crash inside the library */
      fprintf(stderr, "\n%s-- calling %s\n", f->log, be);
    qkvfuse_status st = run_backend(f, bes[i], &desc, &oargs, &desc_ok);
    char msg[600];
    snprintf(msg, sizeof msg, "%s", qkvfuse_last_error());
    fz_log(f, "%s: %s \"%s\"\n", be, qkvfuse_status_string(st), msg);
    if (!known_status(st)) fz_fail(f, "%s: unknown status %d", be, (int)st);
    fz_counts[st]++;
    /* the backends agree, but that the reference takes rows (and cache
       chunks) of any element stride, which the others refuse */
    const int ref_only = st == QKVFUSE_ERROR_STRIDE && strstr(msg, "the reference backend takes any stride");
    if (i > 0 && st != first && !ref_only)
      fz_fail(f, "%s returned %s but reference returned %s", be, qkvfuse_status_string(st),
              qkvfuse_status_string(first));
    first = st;
    if (st != QKVFUSE_SUCCESS) {
      if (st == QKVFUSE_ERROR_CUDA) fz_fail(f, "%s: a CUDA error from a CPU call", be);
      if (!message_ok(msg)) fz_fail(f, "%s: %s without a message naming an argument: \"%s\"", be,
                                    qkvfuse_status_string(st), msg);
      check_untouched(f, st, be);
    } else {
      if (!desc_ok) fz_fail(f, "%s: success for a named call the documented mapping rejects", be);
      check_success(f, &desc, &oargs, be);
    }
  }
}

/* The frequency functions with any R: they must refuse R past 1024 before any
 * work proportional to it, and never write past R/2 doubles or the table. */
static void check_rope_functions(fz_src *s) {
  static const int64_t Rs[] = {-2, 0, 1, 2, 3, 64, 1024, 1026, (int64_t)1 << 31, (int64_t)1 << 40, INT64_MAX - 1};
  const int64_t R = fz_chance(s, 128) ? 2 * fz_range(s, 1, 512) : PICK(s, Rs);
  const int ok = R >= 2 && R <= 1024 && R % 2 == 0;
  qkvfuse_rope_scaling sc = QKVFUSE_ROPE_SCALING_INIT;
  sc.type = (qkvfuse_rope_scaling_type)fz_range(s, 0, 4), sc.factor = 2.0, sc.original_max_position = 4096;
  double *f = (double *)malloc(512 * sizeof(double));
  const qkvfuse_status st = qkvfuse_rope_inv_freq(1e4, &sc, R, f, NULL);
  if (!ok && st == QKVFUSE_SUCCESS) fz_fail(NULL, "rope_inv_freq: success with R = %lld", (long long)R);
  free(f);
  const int64_t rows = fz_range(s, 0, 2), shape[2] = {rows, R};
  float *tab = (float *)malloc(2 * 1024 * sizeof(float));
  qkvfuse_tensor t;
  if (qkvfuse_tensor_init(&t, rows ? (void *)tab : (void *)(UINTPTR_MAX - 15), QKVFUSE_DTYPE_FLOAT32, 2, shape) ==
          QKVFUSE_SUCCESS &&
      (rows == 0 || ok)) {
    const qkvfuse_status st2 = qkvfuse_build_cos_sin_cache(1e4, &sc, &t);
    if (!ok && st2 == QKVFUSE_SUCCESS) fz_fail(NULL, "build_cos_sin_cache: success with R = %lld", (long long)R);
  }
  free(tab);
}

int fz_one_input(const uint8_t *data, size_t size, int op) {
  static fz_call f; /* large; one input at a time */
  fz_src s = {data, size, 0};
  if (op < 0) op = (int)fz_range(&s, FZ_SPLIT, FZ_DEQUANT);
  if (op == FZ_CORE && fz_chance(&s, 16)) {
    check_rope_functions(&s);
    return 0;
  }
  if (fz_setup(&f, &s, op)) return 0;
  fz_mutate(&f, &s);
  if (op != FZ_CORE) fz_named_mutate(&f, &s);
  fz_check(&f, &s);
  fz_free(&f);
  return 0;
}

int fz_buf_poison(fz_call *f, size_t n, uint64_t seed) { return buf_new(f, n, NULL, seed); }

int64_t fz_buf_room(const fz_call *f, const void *p) {
  const int b = p ? buf_of(f, p) : -1;
  return b < 0 ? -1 : (int64_t)f->buf[b].bytes - (int64_t)((const uint8_t *)p - f->buf[b].run);
}
