/* SPDX-License-Identifier: Apache-2.0 */
/* Regressions for the bug classes published against peer kernels,
 * one directed test each, where a buggy implementation would corrupt data:
 *
 *   partial_rope  R < D: dims R..D-1 pass through bit-exactly (q_out, k_out,
 *                 the cache), and nothing reads a cos/sin lane >= R: every
 *                 input byte that is not an element (row padding, the lanes
 *                 after R of each cos/sin row) is NaN, so one stray read shows;
 *                 the last cos_sin_cache row is used, so a read past it leaves
 *                 the allocation (ASan in the sanitizer run).
 *   truncation    positions and slots whose low 32 bits are valid (2^32 + p,
 *                 -2^32 - 1 whose low half is -1 = "skip", ...): rejected on
 *                 the CPU with nothing written; on CUDA the token is dropped
 *                 and flagged. An int32 truncation would accept them.
 *   skip_slot     slot -1 on every layout and index dtype writes no cache byte
 *                 (not the last slot, not row -1 of a block or batch), and
 *                 raises no error flag.
 *   offsets64     (CPU) a cache block, a slot, a qkv row, a q_out row and a
 *                 cos_sin_cache row more than 2^31 elements (and 2^32 bytes)
 *                 from their base, in sparse mmap'd regions: the written bytes
 *                 are exact, the poisoned bytes around them unchanged, and
 *                 mincore shows no page outside them was touched.
 *   extents       tensors whose extent passes 2^62 bytes or the end of the
 *                 address space: SHAPE/STRIDE errors, nothing written; a
 *                 tensor of no element is checked with its zero dims as 1,
 *                 and a zero-token call accepts any row stride.
 *
 *   test_hostile [--backend reference,auto,cuda] [--no-big] [--only NAME]
 * --no-big leaves out offsets64 (its sparse regions reserve ~100 GiB of
 * address space, which memcheck cannot shadow). */
#define _DEFAULT_SOURCE /* mmap flags, mincore */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fp.h"
#include "harness.h"
#include "tview.h"

#define F32 QKVFUSE_DTYPE_FLOAT32
#define F16 QKVFUSE_DTYPE_FLOAT16
#define BF16 QKVFUSE_DTYPE_BFLOAT16
#define I32 QKVFUSE_DTYPE_INT32
#define I64 QKVFUSE_DTYPE_INT64

static int failed, ran;

static void report(const char *group, const char *what, qkvfuse_backend be, const tk_stats *st) {
  ran++;
  if (st->failed) {
    failed++;
    printf("FAIL test_hostile %s backend=%s '%s': %s\n  failing: %s\n", group, tk_backend_str(be), what, st->first,
           st->where);
  }
}

/* Raw element write into the initial bytes of slot (int64/int32 as given). */
static void poke_raw(tk_case *c, int slot, int64_t flat, int64_t v) {
  tk_view *w = &c->view[slot];
  uint8_t *p = c->buf[w->buf].init + (w->off + tk_elem_offset(&w->t, flat)) * (int64_t)tk_size(w->t.dtype);
  if (w->t.dtype == I64) {
    memcpy(p, &v, 8);
  } else {
    int32_t x = (int32_t)v;
    memcpy(p, &x, 4);
  }
}

/* Every byte of an input buffer that no view reads becomes 0xFF: NaN in
 * float32, float16 and bfloat16, so a read of a padding lane poisons a result. */
static void nan_gaps(tk_case *c, int buf) {
  tk_buf *b = &c->buf[buf];
  uint8_t *used = (uint8_t *)calloc(b->bytes, 1);
  for (int s = 0; s < TK_NSLOT; s++) {
    const tk_view *v = &c->view[s];
    if (!v->present || v->buf != buf) continue;
    const size_t es = tk_size(v->t.dtype);
    for (int64_t i = 0, n = tk_numel(&v->t); i < n; i++)
      memset(used + (v->off + tk_elem_offset(&v->t, i)) * (int64_t)es, 1, es);
  }
  for (size_t i = 0; i < b->bytes; i++)
    if (!used[i]) b->init[i] = 0xFF;
  free(used);
}

/* Bytes of element `flat` of slot in the initial (in) or downloaded (got) copy. */
static const uint8_t *elem(const tk_case *c, int slot, int64_t flat, int got) {
  const tk_view *w = &c->view[slot];
  const uint8_t *base = got ? c->buf[w->buf].got : c->buf[w->buf].init;
  return base + (w->off + tk_elem_offset(&w->t, flat)) * (int64_t)tk_size(w->t.dtype);
}

/* ---- partial RoPE ------------------------------------------------------------------ */

static void partial_rope(qkvfuse_backend be) {
  static const qkvfuse_rope_source srcs[] = {QKVFUSE_ROPE_COS_SIN_CACHE, QKVFUSE_ROPE_COS_SIN, QKVFUSE_ROPE_COMPUTED};
  static const qkvfuse_dtype dts[] = {F32, F16, BF16};
  static const int64_t Rs[] = {2, 32, 64, 126};
  int k = 0;
  for (int si = 0; si < 3; si++)
    for (int style = 0; style < 2; style++)
      for (int di = 0; di < 3; di++)
        for (int ri = 0; ri < 4; ri++, k++) {
          if ((k % 3) != (ri % 3) && ri != 1) continue; /* a spread of the grid, R = 32 always */
          tk_spec s;
          tk_spec_default(&s);
          s.Nq = 2, s.Nkv = 1, s.D = 128, s.R = Rs[ri], s.T = 5;
          s.qkv_dt = s.q_out_dt = s.k_out_dt = s.v_out_dt = dts[di];
          s.rope_source = srcs[si], s.rope_style = style ? QKVFUSE_ROPE_INTERLEAVED : QKVFUSE_ROPE_NEOX;
          s.rope_dt = dts[(di + 1) % 3];
          s.max_pos = 9, s.pos_hi = 8, s.pos_dt = I64;
          s.q_norm = s.k_norm = (k % 4 == 0); /* the norm runs over all D dims; RoPE still only R */
          s.layout = QKVFUSE_CACHE_PAGED, s.block_size = 4, s.k_cache_dt = s.v_cache_dt = dts[di];
          s.qkv_pad = 24, s.out_pad = 8, s.rope_pad = s.D - s.R + 8; /* garbage lanes right after R */
          s.error_flags = 1;
          tk_spec_fixup(&s);
          tk_case c;
          tk_case_build(&c, &s, 600 + (uint64_t)k);
          for (int b = 0; b < TK_NSLOT; b++) /* inputs only: outputs keep their poison */
            if (c.buf[b].bytes && b != TK_Q_OUT && b != TK_K_OUT && b != TK_V_OUT && b != TK_K_CACHE && b != TK_V_CACHE)
              nan_gaps(&c, b);
          if (srcs[si] == QKVFUSE_ROPE_COS_SIN_CACHE) poke_raw(&c, TK_POSITIONS, 0, s.max_pos - 1); /* the last row */
          tk_stats st;
          memset(&st, 0, sizeof st);
          int rc = tk_check_case(&c, be, tk_run_core, NULL, &st);
          if (rc == TK_SKIP) {
            tk_case_free(&c);
            continue;
          }
          if (!s.q_norm && rc == TK_PASS) { /* dims >= R: the input's bits, in every output */
            const int64_t H = (s.Nq + 2 * s.Nkv) * s.D, es = (int64_t)tk_size(s.qkv_dt);
            for (int64_t t = 0; t < s.T; t++)
              for (int64_t d = s.R; d < s.D; d++) {
                for (int64_t h = 0; h < s.Nq; h++)
                  if (memcmp(elem(&c, TK_QKV, t * H + h * s.D + d, 0), elem(&c, TK_Q_OUT, (t * s.Nq + h) * s.D + d, 1),
                             (size_t)es))
                    tk_stats_fail(&st, "q_out[t=%lld][head %lld][d=%lld]: not the input's bits (pass-through)",
                                  (long long)t, (long long)h, (long long)d);
                if (memcmp(elem(&c, TK_QKV, t * H + s.Nq * s.D + d, 0), elem(&c, TK_K_OUT, t * s.D + d, 1), (size_t)es))
                  tk_stats_fail(&st, "k_out[t=%lld][d=%lld]: not the input's bits (pass-through)", (long long)t,
                                (long long)d);
              }
          }
          char what[160];
          snprintf(what, sizeof what, "%s %s %s R=%lld of D=%lld%s",
                   srcs[si] == QKVFUSE_ROPE_COS_SIN_CACHE ? "cos_sin_cache" : srcs[si] == QKVFUSE_ROPE_COS_SIN ? "cos/sin" : "computed",
                   style ? "interleaved" : "neox", tk_name(dts[di]), (long long)s.R, (long long)s.D,
                   s.q_norm ? " +norm" : "");
          report("partial_rope", what, be, &st);
          tk_case_free(&c);
        }
}

/* ---- positions / slots that only truncation makes valid ------------------------------- */

typedef struct trunc_case {
  const char *what;
  int slot;  /* TK_POSITIONS or TK_SLOT_MAPPING */
  int64_t at;
  int64_t val;
  qkvfuse_cache_layout layout;
} trunc_case;

static void truncation(qkvfuse_backend be) {
  const int64_t two32 = (int64_t)1 << 32;
  const trunc_case cases[] = {
      {"position 2^32 (low half 0)", TK_POSITIONS, 1, two32, QKVFUSE_CACHE_PAGED},
      {"position 2^32 + max_pos - 1", TK_POSITIONS, 3, two32 + 7, QKVFUSE_CACHE_PAGED},
      {"position -2^32 + 3 (low half 3)", TK_POSITIONS, 0, -two32 + 3, QKVFUSE_CACHE_PAGED},
      {"position INT64_MIN + 5", TK_POSITIONS, 2, INT64_MIN + 5, QKVFUSE_CACHE_PAGED},
      {"position 2^31 (negative as int32)", TK_POSITIONS, 2, (int64_t)1 << 31, QKVFUSE_CACHE_PAGED},
      {"slot 2^32 + 1 (low half 1)", TK_SLOT_MAPPING, 0, two32 + 1, QKVFUSE_CACHE_PAGED},
      {"slot 2^32 - 1 (low half -1: skip)", TK_SLOT_MAPPING, 2, two32 - 1, QKVFUSE_CACHE_PAGED},
      {"slot -2^32 - 1 (low half -1: skip)", TK_SLOT_MAPPING, 3, -two32 - 1, QKVFUSE_CACHE_PAGED_HND},
      {"slot INT64_MIN", TK_SLOT_MAPPING, 1, INT64_MIN, QKVFUSE_CACHE_NZ},
      {"slot INT64_MAX", TK_SLOT_MAPPING, 1, INT64_MAX, QKVFUSE_CACHE_PAGED},
      {"contiguous start 2^32 (low half 0)", TK_SLOT_MAPPING, 1, two32, QKVFUSE_CACHE_CONTIGUOUS},
      {"contiguous start 2^32 - 1 (low half -1)", TK_SLOT_MAPPING, 0, two32 - 1, QKVFUSE_CACHE_CONTIGUOUS},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const trunc_case *tc = &cases[i];
    tk_spec s;
    tk_spec_default(&s);
    s.Nq = 2, s.Nkv = 1, s.D = 16, s.R = 16, s.T = 4;
    s.rope_source = QKVFUSE_ROPE_COS_SIN_CACHE, s.max_pos = 8, s.pos_hi = 7, s.pos_dt = I64, s.slot_dt = I64;
    s.layout = tc->layout, s.block_size = 4, s.k_cache_dt = s.v_cache_dt = F32;
    s.k_out_dt = F32, s.error_flags = 1;
    if (tc->layout == QKVFUSE_CACHE_CONTIGUOUS) s.in3d = 1, s.B = 2, s.S = 2, s.cache_batch = 2, s.max_seq = 4;
    tk_spec_fixup(&s);
    tk_case c;
    tk_case_build(&c, &s, 700 + i);
    const tk_device *dev = tk_device_for_backend(be);
    if (!dev) {
      tk_case_free(&c);
      return;
    }
    /* the oracle of the valid case (CUDA keeps every other token), then the bad value */
    tk_oracle o;
    char err[128];
    tk_case_oracle(&c, &o, err, sizeof err);
    poke_raw(&c, tc->slot, tc->at, tc->val);
    tk_stats st;
    memset(&st, 0, sizeof st);
    qkvfuse_status r;
    if (tk_run_core_on(&c, dev, be, &r)) tk_stats_fail(&st, "device %s: a transfer failed", dev->name);
    char msg[512];
    snprintf(msg, sizeof msg, "%s", qkvfuse_last_error());
    uint32_t flags;
    memcpy(&flags, c.buf[TK_FLAGS_BUF].got, 4);
    const uint32_t bit = tc->slot == TK_POSITIONS ? QKVFUSE_DATA_ERROR_POSITION : QKVFUSE_DATA_ERROR_SLOT;
    if (!(flags & bit)) tk_stats_fail(&st, "error_flags 0x%x lacks 0x%x", flags, bit);
    if (be != QKVFUSE_BACKEND_CUDA) {
      if (r != QKVFUSE_ERROR_OUT_OF_RANGE)
        tk_stats_fail(&st, "status %s, want QKVFUSE_ERROR_OUT_OF_RANGE", qkvfuse_status_string(r));
      else if (!tk_names_argument(msg, tc->slot == TK_POSITIONS ? "positions" : "slot_mapping"))
        tk_stats_fail(&st, "message \"%s\" does not name the argument", msg);
      for (int b = 0; b < TK_NSLOT; b++)
        if (c.buf[b].bytes) tk_cmp_untouched(&st, tk_slot_name[b], c.buf[b].got, c.buf[b].init, NULL, c.buf[b].bytes);
    } else { /* CUDA: success (capturable), the token (contiguous: its batch) dropped, the rest exact */
      if (r != QKVFUSE_SUCCESS) tk_stats_fail(&st, "status %s, want success on CUDA", qkvfuse_status_string(r));
      uint8_t skip[8] = {0};
      const int64_t KV = s.Nkv * s.D;
      const int contiguous = tc->layout == QKVFUSE_CACHE_CONTIGUOUS && tc->slot == TK_SLOT_MAPPING;
      for (int64_t t = contiguous ? tc->at * s.S : tc->at; t < (contiguous ? (tc->at + 1) * s.S : tc->at + 1); t++) {
        skip[t] = 1;
        for (int64_t j = 0; j < KV; j++) o.kc_off[t * KV + j] = o.vc_off[t * KV + j] = -1;
      }
      o.row_skip = skip;
      tk_compare_case(&c, &o, &st);
      o.row_skip = NULL;
    }
    tk_oracle_free(&o);
    report("truncation", tc->what, be, &st);
    tk_case_free(&c);
  }
}

/* ---- slot -1 ---------------------------------------------------------------------------- */

static void skip_slot(qkvfuse_backend be) {
  static const qkvfuse_cache_layout layouts[] = {QKVFUSE_CACHE_PAGED, QKVFUSE_CACHE_PAGED_HND, QKVFUSE_CACHE_NZ,
                                                 QKVFUSE_CACHE_CONTIGUOUS};
  for (int li = 0; li < 4; li++)
    for (int wide = 0; wide < 2; wide++) {
      tk_spec s;
      tk_spec_default(&s);
      s.Nq = 2, s.Nkv = 2, s.D = 16, s.T = 6;
      s.layout = layouts[li], s.block_size = 4, s.slot_dt = wide ? I64 : I32;
      s.k_cache_dt = F16, s.v_quant = QKVFUSE_QUANT_INT8_SYM;
      s.k_out_dt = s.v_out_dt = F32, s.error_flags = 1;
      if (layouts[li] == QKVFUSE_CACHE_CONTIGUOUS) s.in3d = 1, s.B = 3, s.S = 2, s.cache_batch = 3, s.max_seq = 4;
      tk_spec_fixup(&s);
      tk_case c;
      tk_case_build(&c, &s, 800 + (uint64_t)(2 * li + wide));
      const int64_t total = s.blocks * s.block_size;
      if (layouts[li] == QKVFUSE_CACHE_CONTIGUOUS) {
        /* batch 0 and 2 skipped: start - 1 + i would land in row 0 of batch 0 and in the last row of batch 1 */
        const int64_t starts[3] = {-1, 2, -1};
        for (int b = 0; b < 3; b++) poke_raw(&c, TK_SLOT_MAPPING, b, starts[b]);
      } else {
        /* the last slot (total - 1), which slot -1 becomes under a modulo or an unsigned wrap, stays free */
        const int64_t slots[6] = {-1, 0, -1, 5, 2, -1};
        for (int t = 0; t < 6; t++) poke_raw(&c, TK_SLOT_MAPPING, t, slots[t]);
      }
      tk_stats st;
      memset(&st, 0, sizeof st);
      if (tk_check_case(&c, be, tk_run_core, NULL, &st) == TK_SKIP) { /* untouched bytes and flags == 0 included */
        tk_case_free(&c);
        return;
      }
      char what[96];
      snprintf(what, sizeof what, "layout %d, %s slot_mapping (%lld slots)", (int)layouts[li], wide ? "int64" : "int32",
               (long long)total);
      report("skip_slot", what, be, &st);
      tk_case_free(&c);
    }
}

/* ---- 64-bit offsets in sparse regions (CPU) ------------------------------------------------- */

typedef struct region {
  uint8_t *p;
  size_t bytes;
} region;

static int region_map(region *r, size_t bytes) {
  r->bytes = bytes;
  r->p = (uint8_t *)mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (r->p == MAP_FAILED) r->p = NULL;
  return r->p != NULL;
}

static void region_unmap(region *r) {
  if (r->p) munmap(r->p, r->bytes);
  r->p = NULL;
}

#define WIN 8192 /* poisoned bytes on each side of every row a call may touch */

static uint8_t pat(size_t off) { return (uint8_t)(0xA7 ^ (off * 131)) | 1; }

/* Poison [off - WIN, off + len + WIN) of r (touching those pages only). */
static void poison_window(region *r, size_t off, size_t len) {
  size_t lo = off > WIN ? off - WIN : 0, hi = off + len + WIN < r->bytes ? off + len + WIN : r->bytes;
  for (size_t i = lo; i < hi; i++) r->p[i] = pat(i);
}

/* The window around [off, off + len) holds its pattern outside `allowed`
 * intervals (pairs of offsets). */
static void check_window(tk_stats *st, const char *name, region *r, size_t off, size_t len, const size_t *allowed,
                         int nallowed) {
  size_t lo = off > WIN ? off - WIN : 0, hi = off + len + WIN < r->bytes ? off + len + WIN : r->bytes;
  for (size_t i = lo; i < hi; i++) {
    int ok = 0;
    for (int k = 0; k < nallowed; k++) ok |= i >= allowed[2 * k] && i < allowed[2 * k + 1];
    if (!ok && r->p[i] != pat(i)) {
      tk_stats_fail(st, "%s: byte %zu (0x%zx) of the region changed outside the written rows", name, i, i);
      return;
    }
  }
}

/* Every resident page of r lies within WIN of one of the n offsets. */
static void check_pages(tk_stats *st, const char *name, region *r, const size_t *offs, int n) {
  const size_t pg = (size_t)sysconf(_SC_PAGESIZE), npages = (r->bytes + pg - 1) / pg;
  unsigned char *vec = (unsigned char *)malloc(npages);
  if (mincore(r->p, r->bytes, vec)) {
    tk_stats_fail(st, "%s: mincore failed", name);
    free(vec);
    return;
  }
  for (size_t i = 0; i < npages; i++) {
    if (!(vec[i] & 1)) continue;
    int ok = 0;
    for (int k = 0; k < n; k++) ok |= i * pg + pg > (offs[k] > 2 * WIN ? offs[k] - 2 * WIN : 0) && i * pg < offs[k] + 2 * WIN + 4096;
    if (!ok) {
      tk_stats_fail(st, "%s: page at offset 0x%zx was touched; only pages near the expected rows may be", name, i * pg);
      break;
    }
  }
  free(vec);
}

static float fval(int64_t i) { return (float)((i * 37) % 201 - 100); } /* small integers: exact everywhere */

static qkvfuse_status run_plan(const qkvfuse_desc *d0, qkvfuse_backend be, const qkvfuse_args *a) {
  qkvfuse_desc d = *d0;
  d.backend = be;
  qkvfuse_plan *p = NULL;
  qkvfuse_status s = qkvfuse_plan_create(&d, &p);
  if (s == QKVFUSE_SUCCESS) s = qkvfuse_run(p, a, NULL);
  qkvfuse_plan_destroy(p);
  return s;
}

/* The common call: Nq = Nkv = 1, D = 16, T = 3 tokens of float32 qkv [3, 48]. */
typedef struct small_call {
  float qkv[3 * 48], q_out[3 * 16];
  int64_t shape2[2];
  qkvfuse_tensor tq, tout;
  qkvfuse_desc d;
  qkvfuse_args a;
} small_call;

static void small_init(small_call *s) {
  memset(s, 0, sizeof *s);
  for (int i = 0; i < 3 * 48; i++) s->qkv[i] = fval(i + 1);
  int64_t sq[2] = {3, 48}, so[2] = {3, 16};
  qkvfuse_tensor_init(&s->tq, s->qkv, F32, 2, sq);
  qkvfuse_tensor_init(&s->tout, s->q_out, F32, 2, so);
  qkvfuse_desc d = QKVFUSE_DESC_INIT;
  d.num_q_heads = d.num_kv_heads = 1, d.head_dim = 16;
  s->d = d;
  qkvfuse_args a = QKVFUSE_ARGS_INIT;
  s->a = a;
  s->a.qkv = &s->tq, s->a.q_out = &s->tout;
}

/* Paged k/v caches [3 blocks, 2, 1, 16] float32 in one region, blocks 2^31 +
 * 64 elements (8 GiB) apart: block 2 starts 2^32 + 128 elements from the base.
 * Each block holds k's two rows, then v's ([:, 0] / [:, 1] of a [3, 2, 2, 1, 16]
 * buffer). */
static void big_block_stride(qkvfuse_backend be, tk_stats *st) {
  const int64_t sb = ((int64_t)1 << 31) + 64;
  region r;
  if (!region_map(&r, (size_t)(3 * sb) * 4 + 4096)) {
    tk_stats_fail(st, "mmap of %g GiB of address space failed", (double)(3 * sb) * 4 / (1 << 30));
    return;
  }
  small_call s;
  small_init(&s);
  int64_t cs[4] = {3, 2, 1, 16}, slots[3] = {5, 2, -1}, three = 3;
  qkvfuse_tensor k, v, sm;
  qkvfuse_tensor_init(&k, r.p, F32, 4, cs);
  k.strides[0] = sb;
  v = k;
  v.data = r.p + 32 * 4; /* v's rows after k's rows of the same block */
  qkvfuse_tensor_init(&sm, slots, I64, 1, &three);
  s.d.cache_layout = QKVFUSE_CACHE_PAGED;
  s.a.k_cache = &k, s.a.v_cache = &v, s.a.slot_mapping = &sm;
  size_t blocks[3]; /* byte offset of each block */
  for (int b = 0; b < 3; b++) {
    blocks[b] = (size_t)(b * sb) * 4;
    poison_window(&r, blocks[b], 256);
  }
  qkvfuse_status rc = run_plan(&s.d, be, &s.a);
  if (rc != QKVFUSE_SUCCESS)
    tk_stats_fail(st, "block stride 2^31+64: %s (%s)", qkvfuse_status_string(rc), qkvfuse_last_error());
  size_t allowed[8];
  for (int t = 0; t < 2; t++) { /* token t -> slot slots[t]: block slots/2, row slots%2 */
    const size_t koff = blocks[slots[t] / 2] + (size_t)(slots[t] % 2) * 64, voff = koff + 128;
    if (memcmp(r.p + koff, &s.qkv[t * 48 + 16], 64) || memcmp(r.p + voff, &s.qkv[t * 48 + 32], 64))
      tk_stats_fail(st, "block stride 2^31+64: token %d's k/v rows (bytes 0x%zx, 0x%zx) are not its k/v", t, koff, voff);
    allowed[4 * t] = koff, allowed[4 * t + 1] = koff + 64, allowed[4 * t + 2] = voff, allowed[4 * t + 3] = voff + 64;
  }
  for (int b = 0; b < 3; b++) check_window(st, "paged cache, block stride 2^31+64", &r, blocks[b], 256, allowed, 4);
  check_pages(st, "paged cache, block stride 2^31+64", &r, blocks, 3);
  region_unmap(&r);
}

/* int8 paged caches [2^31 + 8 blocks, 1, 1, 16], k and v interleaved (32-byte
 * blocks): slots beyond 2^31. */
static void big_slots(qkvfuse_backend be, tk_stats *st) {
  const int64_t nblocks = ((int64_t)1 << 31) + 8;
  region r;
  if (!region_map(&r, (size_t)nblocks * 32 + 4096)) {
    tk_stats_fail(st, "mmap of %g GiB of address space failed", (double)nblocks * 32 / (1 << 30));
    return;
  }
  small_call s;
  small_init(&s);
  int64_t cs[4] = {nblocks, 1, 1, 16}, slots[3] = {((int64_t)1 << 31) + 3, 7, nblocks - 1}, three = 3, one = 1;
  float scale = 1.0f;
  qkvfuse_tensor k, v, sm, sc;
  qkvfuse_tensor_init(&k, r.p, QKVFUSE_DTYPE_INT8, 4, cs);
  k.strides[0] = 32;
  v = k;
  v.data = r.p + 16;
  qkvfuse_tensor_init(&sm, slots, I64, 1, &three);
  qkvfuse_tensor_init(&sc, &scale, F32, 1, &one);
  s.d.cache_layout = QKVFUSE_CACHE_PAGED, s.d.k_quant = s.d.v_quant = QKVFUSE_QUANT_INT8_SYM;
  s.a.k_cache = &k, s.a.v_cache = &v, s.a.slot_mapping = &sm, s.a.k_scale = &sc, s.a.v_scale = &sc;
  size_t offs[3], allowed[6];
  for (int t = 0; t < 3; t++) {
    offs[t] = (size_t)slots[t] * 32;
    poison_window(&r, offs[t], 32);
    allowed[2 * t] = offs[t], allowed[2 * t + 1] = offs[t] + 32;
  }
  qkvfuse_status rc = run_plan(&s.d, be, &s.a);
  if (rc != QKVFUSE_SUCCESS) tk_stats_fail(st, "slots >= 2^31: %s (%s)", qkvfuse_status_string(rc), qkvfuse_last_error());
  for (int t = 0; t < 3; t++)
    for (int j = 0; j < 32; j++) {
      int8_t want = (int8_t)s.qkv[t * 48 + 16 + j]; /* small integers, scale 1: exact */
      if ((int8_t)r.p[offs[t] + (size_t)j] != want) {
        tk_stats_fail(st, "slot %lld: byte %d is %d, want %d", (long long)slots[t], j, (int8_t)r.p[offs[t] + (size_t)j], want);
        break;
      }
    }
  for (int t = 0; t < 3; t++) check_window(st, "int8 cache, slots >= 2^31", &r, offs[t], 32, allowed, 3);
  check_pages(st, "int8 cache, slots >= 2^31", &r, offs, 3);
  region_unmap(&r);
}

/* qkv rows 2^31 + 48 elements apart (row 2 is 16 GiB in), and q_out rows
 * 2^31 + 16 elements apart. */
static void big_rows(qkvfuse_backend be, tk_stats *st) {
  const int64_t ldi = ((int64_t)1 << 31) + 48, ldo = ((int64_t)1 << 31) + 16;
  region ri, ro;
  if (!region_map(&ri, (size_t)(2 * ldi + 48) * 4 + 4096) || !region_map(&ro, (size_t)(2 * ldo + 16) * 4 + 4096)) {
    tk_stats_fail(st, "mmap of 2 x 16 GiB of address space failed");
    region_unmap(&ri);
    return;
  }
  small_call s;
  small_init(&s);
  size_t in_rows[3], out_rows[3], allowed[6];
  for (int t = 0; t < 3; t++) {
    in_rows[t] = (size_t)(t * ldi) * 4, out_rows[t] = (size_t)(t * ldo) * 4;
    poison_window(&ro, out_rows[t], 64);
    memcpy(ri.p + in_rows[t], &s.qkv[t * 48], 48 * 4);
    allowed[2 * t] = out_rows[t], allowed[2 * t + 1] = out_rows[t] + 64;
  }
  s.tq.data = ri.p, s.tq.strides[0] = ldi;
  s.tout.data = ro.p, s.tout.strides[0] = ldo;
  qkvfuse_status rc = run_plan(&s.d, be, &s.a);
  if (rc != QKVFUSE_SUCCESS) tk_stats_fail(st, "row strides 2^31+: %s (%s)", qkvfuse_status_string(rc), qkvfuse_last_error());
  for (int t = 0; t < 3; t++) {
    if (memcmp(ro.p + out_rows[t], &s.qkv[t * 48], 64))
      tk_stats_fail(st, "q_out row %d (byte 0x%zx) is not qkv row %d's q head (qkv rows 2^31+48 elements apart)", t,
                    out_rows[t], t);
    check_window(st, "q_out rows 2^31+16 elements apart", &ro, out_rows[t], 64, allowed, 3);
  }
  check_pages(st, "q_out rows 2^31+16 elements apart", &ro, out_rows, 3);
  region_unmap(&ri);
  region_unmap(&ro);
}

/* cos_sin_cache [2^31 + 16, 2] (R = 2 of D = 16): positions beyond 2^31. */
static void big_positions(qkvfuse_backend be, tk_stats *st) {
  const int64_t rows = ((int64_t)1 << 31) + 16;
  region r;
  if (!region_map(&r, (size_t)rows * 8 + 4096)) {
    tk_stats_fail(st, "mmap of 16 GiB of address space failed");
    return;
  }
  small_call s;
  small_init(&s);
  int64_t pos[3] = {((int64_t)1 << 31) + 5, 3, rows - 1}, three = 3, cshape[2] = {rows, 2};
  const float cs[3][2] = {{0.0f, 1.0f}, {-1.0f, 0.0f}, {0.0f, -1.0f}}; /* exact rotations by 90, 180, 270 degrees */
  for (int t = 0; t < 3; t++) memcpy(r.p + (size_t)pos[t] * 8, cs[t], 8);
  qkvfuse_tensor tcs, tp;
  qkvfuse_tensor_init(&tcs, r.p, F32, 2, cshape);
  qkvfuse_tensor_init(&tp, pos, I64, 1, &three);
  s.d.rope_source = QKVFUSE_ROPE_COS_SIN_CACHE, s.d.rotary_dim = 2;
  s.a.cos_sin_cache = &tcs, s.a.positions = &tp;
  qkvfuse_status rc = run_plan(&s.d, be, &s.a);
  if (rc != QKVFUSE_SUCCESS) tk_stats_fail(st, "positions >= 2^31: %s (%s)", qkvfuse_status_string(rc), qkvfuse_last_error());
  for (int t = 0; t < 3; t++) {
    const float *x = &s.qkv[t * 48], c = cs[t][0], sn = cs[t][1];
    float want[16];
    want[0] = x[0] * c - x[1] * sn;
    want[1] = x[1] * c + x[0] * sn;
    for (int d = 2; d < 16; d++) want[d] = x[d];
    if (memcmp(want, &s.q_out[t * 16], sizeof want))
      tk_stats_fail(st, "q_out row %d: not rotated by row %lld of cos_sin_cache", t, (long long)pos[t]);
  }
  region_unmap(&r);
}

static void offsets64(qkvfuse_backend be) {
  if (be == QKVFUSE_BACKEND_CUDA) return; /* device memory: test_cuda_big */
  void (*fns[4])(qkvfuse_backend, tk_stats *) = {big_block_stride, big_slots, big_rows, big_positions};
  const char *names[4] = {"cache blocks 2^31+64 elements apart", "slots 2^31 and up (int8 cache of 2^31+8 blocks)",
                          "qkv and q_out rows 2^31+ elements apart", "positions 2^31 and up (cos_sin_cache rows)"};
  for (int i = 0; i < 4; i++) {
    tk_stats st;
    memset(&st, 0, sizeof st);
    fns[i](be, &st);
    report("offsets64", names[i], be, &st);
  }
}

/* ---- extents beyond the address space ---------------------------------------------------- */

static void extents(qkvfuse_backend be) {
  if (be == QKVFUSE_BACKEND_CUDA) return; /* the same validation; its CPU form is enough */
  for (int k = 0; k < 8; k++) {
    small_call s;
    small_init(&s);
    float before[3 * 16];
    for (int i = 0; i < 48; i++) s.q_out[i] = before[i] = fval(1000 + i);
    const char *what = "", *name = "";
    qkvfuse_status want = QKVFUSE_ERROR_STRIDE;
    switch (k) {
      case 0: /* 2^61 tokens of 48 float32: more than 2^62 elements */
        s.tq.shape[0] = (int64_t)1 << 61, s.tout.shape[0] = (int64_t)1 << 61;
        what = "qkv [2^61, H]", name = "qkv", want = QKVFUSE_ERROR_SHAPE;
        break;
      case 1: s.tout.strides[0] = (int64_t)1 << 61; what = "q_out row stride 2^61"; name = "q_out"; break;
      case 2: s.tq.strides[0] = INT64_MAX / 2; what = "qkv row stride 2^62"; name = "qkv"; break;
      case 3: /* a view that runs past the top of the address space */
        s.tout.data = (void *)(~(uintptr_t)0 - 63); /* 64 bytes below the top; q_out has 192 */
        what = "q_out at the top of the address space", name = "q_out";
        break;
      case 4: /* [B, S, H] whose B*S wraps int64 */
        s.tq.ndim = 3, s.tq.shape[0] = (int64_t)1 << 32, s.tq.shape[1] = (int64_t)1 << 32, s.tq.shape[2] = 48;
        s.tq.strides[0] = 48, s.tq.strides[1] = 48, s.tq.strides[2] = 1;
        what = "qkv [2^32, 2^32, H] (B*S wraps)", name = "qkv", want = QKVFUSE_ERROR_SHAPE;
        break;
      case 5: /* no element, but the other dims hold more than 2^62 */
        s.tq.ndim = 3, s.tq.shape[0] = (int64_t)1 << 62, s.tq.shape[1] = 0, s.tq.shape[2] = 48;
        s.tq.strides[0] = 0, s.tq.strides[1] = 48, s.tq.strides[2] = 1;
        s.tout.shape[0] = 0;
        what = "qkv [2^62, 0, H] (zero tokens; 2^62 * H elements with the zero as 1)", name = "qkv",
        want = QKVFUSE_ERROR_SHAPE;
        break;
      case 7: /* zero tokens at the top of the address space: no pointer is offset (UBSan's
                 pointer-overflow check in the sanitizer run), error_flags there too */
        s.tq.shape[0] = 0, s.tout.shape[0] = 0;
        s.tq.data = (void *)(~(uintptr_t)0 - 15), s.tout.data = (void *)(~(uintptr_t)0 - 7);
        s.a.error_flags = (uint32_t *)(~(uintptr_t)0 - 3);
        what = "qkv, q_out and error_flags [0, *] at the top of the address space (accepted)", want = QKVFUSE_SUCCESS;
        break;
      default: /* zero tokens: the row stride addresses nothing, so any is fine */
        s.tq.shape[0] = 0, s.tq.strides[0] = INT64_MAX, s.tout.shape[0] = 0, s.tout.strides[0] = INT64_MAX / 3;
        what = "qkv and q_out [0, *] with row strides near 2^63 (accepted)", want = QKVFUSE_SUCCESS;
        break;
    }
    tk_stats st;
    memset(&st, 0, sizeof st);
    qkvfuse_status rc = run_plan(&s.d, be, &s.a);
    if (rc != want)
      tk_stats_fail(&st, "status %s (%s), want %s", qkvfuse_status_string(rc), qkvfuse_last_error(),
                    qkvfuse_status_string(want));
    else if (want != QKVFUSE_SUCCESS && !tk_names_argument(qkvfuse_last_error(), name))
      tk_stats_fail(&st, "message \"%s\" does not name %s", qkvfuse_last_error(), name);
    if (k != 3 && memcmp(before, s.q_out, sizeof before)) tk_stats_fail(&st, "q_out changed");
    report("extents", what, be, &st);
  }
}

int main(int argc, char **argv) {
  qkvfuse_backend bes[8];
  const int nbe = tk_backends_from(argc, argv, bes, 8), big = !tk_arg_has(argc, argv, "--no-big");
  const char *only = NULL;
  for (int i = 1; i + 1 < argc; i++)
    if (!strcmp(argv[i], "--only")) only = argv[i + 1];
  if (!nbe) return 2;
  int devices = 0;
  for (int b = 0; b < nbe; b++) {
    if (!tk_device_for_backend(bes[b])) continue;
    devices++;
#define GROUP(name, call) \
  if (!only || !strcmp(only, name)) call
    GROUP("partial_rope", partial_rope(bes[b]));
    GROUP("truncation", truncation(bes[b]));
    GROUP("skip_slot", skip_slot(bes[b]));
    if (big) GROUP("offsets64", offsets64(bes[b]));
    GROUP("extents", extents(bes[b]));
#undef GROUP
  }
  if (!devices) {
    printf("test_hostile: no device for the requested backends, skipped\n");
    return TK_SKIP;
  }
  printf("test_hostile: %d passed, %d failed%s\n", ran - failed, failed, big ? "" : " (offsets64 left out: --no-big)");
  return failed ? 1 : 0;
}
