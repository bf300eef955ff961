/* SPDX-License-Identifier: Apache-2.0 */
/* Self-test of the comparators: a test that cannot fail is a defect. After a
 * correct run, corrupt one thing at a time and require tk_compare_case to
 * notice: a high bit of one random element of every output and cache, one
 * random cache byte outside the written rows, one byte of an input's padding
 * (inputs must stay untouched), and a float32 output scaled by (1 + 1e-4). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fp.h"
#include "harness.h"
#include "tview.h"

static int failed, checks;

static int detects(tk_case *c, const tk_oracle *o, const char *what, uint64_t seed) {
  tk_stats st;
  memset(&st, 0, sizeof st);
  tk_compare_case(c, o, &st);
  checks++;
  if (!st.failed) {
    failed++;
    printf("FAIL test_kit: corruption not detected: %s (case seed 0x%llx)\n", what, (unsigned long long)seed);
  }
  return st.failed != 0;
}

/* Flip the second-highest bit of the element at byte p (size es): a large change in every format. */
static void flip(uint8_t *p, size_t es) { p[es - 1] ^= 0x40; }

int main(void) {
  tk_limits lim = {20000, 0};
  int n = 0;
  for (uint64_t i = 0; n < 60 && i < 1000; i++) {
    uint64_t seed = tk_case_seed(0x5E1F, i);
    tk_rng r;
    tk_rng_seed(&r, seed);
    tk_spec s;
    tk_spec_random(&s, &r, &lim);
    if (s.T == 0) continue;
    tk_case c;
    tk_case_build(&c, &s, seed);
    tk_stats st;
    memset(&st, 0, sizeof st);
    if (tk_check_case(&c, QKVFUSE_BACKEND_REFERENCE, tk_run_core, NULL, &st) != TK_PASS) {
      tk_case_free(&c);
      continue; /* test_ops reports library failures; here only the comparators are on trial */
    }
    n++;
    tk_oracle o;
    char err[128];
    tk_case_oracle(&c, &o, err, sizeof err);
    /* one element of each [T, X] output */
    static const int outs[] = {TK_Q_OUT, TK_K_OUT, TK_V_OUT};
    int64_t X[] = {s.Nq * s.D, s.Nkv * s.D, s.Nkv * s.D};
    for (int k = 0; k < 3; k++) {
      tk_view *v = &c.view[outs[k]];
      if (!v->present) continue;
      size_t es = tk_size(v->t.dtype);
      int64_t flat = tk_rng_range(&r, 0, s.T * X[k] - 1);
      uint8_t *p = c.buf[v->buf].got + (v->off + tk_elem_offset(&v->t, flat)) * (int64_t)es;
      flip(p, es);
      detects(&c, &o, tk_slot_name[outs[k]], seed);
      flip(p, es);
      if (v->t.dtype == QKVFUSE_DTYPE_FLOAT32 && c.desc.rounding == QKVFUSE_ROUNDING_FUSED) {
        /* a systematic relative error of 1e-4 (> SPEC's 1e-5), in every element */
        for (int64_t e = 0; e < s.T * X[k]; e++) {
          uint8_t *q = c.buf[v->buf].got + (v->off + tk_elem_offset(&v->t, e)) * 4;
          tk_encode(QKVFUSE_DTYPE_FLOAT32, q, tk_decode(QKVFUSE_DTYPE_FLOAT32, q) * (1 + 1e-4));
        }
        detects(&c, &o, "float32 output off by 1e-4 relative", seed);
        tk_case_download(&c);
      }
    }
    /* caches: one written element, one byte outside the written rows */
    for (int w = 0; w < 2 && s.layout != QKVFUSE_CACHE_NONE; w++) {
      tk_view *v = &c.view[w ? TK_V_CACHE : TK_K_CACHE];
      const int64_t *off = w ? o.vc_off : o.kc_off;
      size_t es = tk_size(v->t.dtype);
      int64_t nw = s.T * s.Nkv * s.D, pick = -1;
      for (int tries = 0; tries < 64 && pick < 0; tries++) {
        int64_t e = tk_rng_range(&r, 0, nw - 1);
        if (off[e] >= 0) pick = off[e];
      }
      if (pick >= 0) {
        uint8_t *p = c.buf[v->buf].got + (v->off + pick) * (int64_t)es;
        flip(p, es);
        detects(&c, &o, w ? "v_cache element" : "k_cache element", seed);
        flip(p, es);
      }
      tk_buf *b = &c.buf[v->buf];
      uint8_t *mark = (uint8_t *)calloc(b->bytes, 1);
      for (int64_t e = 0; e < nw; e++)
        if (o.kc_off[e] >= 0 && c.view[TK_K_CACHE].buf == v->buf)
          memset(mark + (c.view[TK_K_CACHE].off + o.kc_off[e]) * (int64_t)tk_size(c.view[TK_K_CACHE].t.dtype), 1,
                 tk_size(c.view[TK_K_CACHE].t.dtype));
      for (int64_t e = 0; e < nw; e++)
        if (o.vc_off[e] >= 0 && c.view[TK_V_CACHE].buf == v->buf)
          memset(mark + (c.view[TK_V_CACHE].off + o.vc_off[e]) * (int64_t)tk_size(c.view[TK_V_CACHE].t.dtype), 1,
                 tk_size(c.view[TK_V_CACHE].t.dtype));
      for (int tries = 0; tries < 64; tries++) {
        size_t at = (size_t)tk_rng_range(&r, 0, (int64_t)b->bytes - 1);
        if (mark[at]) continue;
        b->got[at] ^= 0x10;
        detects(&c, &o, "a cache byte outside the written rows", seed);
        b->got[at] ^= 0x10;
        break;
      }
      free(mark);
    }
    /* an input's bytes (the last byte of the buffer of qkv, or of q: padding or an element) */
    if (!s.in_place_q && !s.in_place_k) {
      tk_buf *b = &c.buf[c.view[TK_QKV].present ? TK_QKV : c.view[TK_Q].buf];
      b->got[b->bytes - 1] ^= 0x01;
      detects(&c, &o, "a changed input byte", seed);
      b->got[b->bytes - 1] ^= 0x01;
    }
    tk_oracle_free(&o);
    tk_case_free(&c);
  }
  printf("test_kit: %d corruptions over %d cases, %d undetected\n", checks, n, failed);
  return failed ? 1 : 0;
}
