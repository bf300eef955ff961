/* SPDX-License-Identifier: Apache-2.0 */
/* Hand-checked cache layouts: a small config (Nq = 2, Nkv = 2, D = 48,
 * blocks = 3, block_size = 4) where known tokens with known slots must land at
 * byte offsets computed by hand below, for paged, paged_hnd, nz (bf16: c = 16;
 * int8: c = 32, whose second chunk spans the two heads) and contiguous; the
 * bytes there are exactly the input (bf16 in, bf16 cache) or the input's
 * integer (float32 integer inputs, int8 cache with scale 1); every other byte
 * of the caches is still the poison. The same destinations given by a page
 * table (desc.cache_addressing page_table, int64 and int32 tables) land at
 * the same hand-computed offsets. The oracle comparison runs as well.
 *   test_layouts [--backend reference,auto] */
#include <stdio.h>
#include <string.h>

#include "fp.h"
#include "harness.h"
#include "tview.h"

typedef struct run {
  int64_t t, j0, n, off; /* token t, elements j0..j0+n-1 of its k/v row, at element offset off */
} run;

typedef struct layout_case {
  const char *name;
  qkvfuse_cache_layout layout;
  int int8; /* 0: bf16 cache, 1: int8 cache */
  int pt;   /* 0: slot_mapping; 1, 2: the page table below, of int64 / int32 tensors */
  run runs[16];
  int nruns;
} layout_case;

/* Element offsets, by hand. Nkv*D = 96.
 * paged [3, 4, 2, 48]: block stride 4*96 = 384, row stride 96.
 *   slot 6 -> block 1 row 2: 384 + 2*96 = 576;  slot 9 -> block 2 row 1: 768 + 96 = 864.
 * paged_hnd [3, 2, 4, 48]: block 384, head 4*48 = 192, row 48.
 *   slot 6: head 0 at 384 + 2*48 = 480, head 1 at 480 + 192 = 672;
 *   slot 9: head 0 at 768 + 48 = 816, head 1 at 1008.
 * nz bf16, c = 16: [3, 6, 4, 16]: block 6*4*16 = 384, chunk 4*16 = 64, row 16.
 *   slot 6: chunk k at 384 + 2*16 + 64k = 416 + 64k;  slot 9: 768 + 16 + 64k = 784 + 64k.
 * nz int8, c = 32: [3, 3, 4, 32]: block 3*4*32 = 384, chunk 4*32 = 128, row 32.
 *   slot 6: chunk k at 384 + 2*32 + 128k = 448 + 128k;  slot 9: 768 + 32 + 128k = 800 + 128k.
 * contiguous [3, 8, 2, 48], input [B = 3, S = 2, H], index {3, -1, 5}: batch 768, seq 96.
 *   t0 = (b0, i0) -> [0][3] = 288; t1 -> [0][4] = 384; b1 skipped; t4 -> [2][5] = 1536 + 480 = 2016;
 *   t5 -> [2][6] = 2112.
 * Page table (the caches then have 6 blocks, the tables' bound: the strides
 * and so the offsets above do not change): kv_indptr {1, 2, 4} (sequence 0:
 * kv_indices[1], sequence 1: kv_indices[2..3]; entry 0 is never read),
 * kv_indices {7, 2, 0, 1, 9, 9}, batch_indices {1, -1, 0}, kv_positions
 * {6, 999, 1}:
 *   t0: sequence 1, position 6 -> kv_indices[2 + 6/4] = 1, row 6%4 = 2: slot 6's block 1 row 2;
 *   t1: skipped (its position is not read);
 *   t2: sequence 0, position 1 -> kv_indices[1 + 0] = 2, row 1: slot 9's block 2 row 1. */
#define PAGED_RUNS {{0, 0, 96, 576}, {2, 0, 96, 864}}, 2
#define HND_RUNS {{0, 0, 48, 480}, {0, 48, 48, 672}, {2, 0, 48, 816}, {2, 48, 48, 1008}}, 4
#define NZ16_RUNS                                                                                                \
  {{0, 0, 16, 416}, {0, 16, 16, 480}, {0, 32, 16, 544}, {0, 48, 16, 608}, {0, 64, 16, 672}, {0, 80, 16, 736},     \
   {2, 0, 16, 784}, {2, 16, 16, 848}, {2, 32, 16, 912}, {2, 48, 16, 976}, {2, 64, 16, 1040}, {2, 80, 16, 1104}}, \
      12
#define NZ32_RUNS {{0, 0, 32, 448}, {0, 32, 32, 576}, {0, 64, 32, 704}, {2, 0, 32, 800}, {2, 32, 32, 928}, {2, 64, 32, 1056}}, 6
static const layout_case CASES[] = {
    {"paged bf16", QKVFUSE_CACHE_PAGED, 0, 0, PAGED_RUNS},
    {"paged int8", QKVFUSE_CACHE_PAGED, 1, 0, PAGED_RUNS},
    {"paged_hnd bf16", QKVFUSE_CACHE_PAGED_HND, 0, 0, HND_RUNS},
    {"paged_hnd int8", QKVFUSE_CACHE_PAGED_HND, 1, 0, HND_RUNS},
    {"nz bf16 (c=16)", QKVFUSE_CACHE_NZ, 0, 0, NZ16_RUNS},
    {"nz int8 (c=32)", QKVFUSE_CACHE_NZ, 1, 0, NZ32_RUNS},
    {"contiguous bf16", QKVFUSE_CACHE_CONTIGUOUS, 0, 0, {{0, 0, 96, 288}, {1, 0, 96, 384}, {4, 0, 96, 2016}, {5, 0, 96, 2112}}, 4},
    {"contiguous int8", QKVFUSE_CACHE_CONTIGUOUS, 1, 0, {{0, 0, 96, 288}, {1, 0, 96, 384}, {4, 0, 96, 2016}, {5, 0, 96, 2112}}, 4},
    {"page table: paged bf16", QKVFUSE_CACHE_PAGED, 0, 1, PAGED_RUNS},
    {"page table (int32): paged int8", QKVFUSE_CACHE_PAGED, 1, 2, PAGED_RUNS},
    {"page table: paged_hnd int8", QKVFUSE_CACHE_PAGED_HND, 1, 1, HND_RUNS},
    {"page table (int32): paged_hnd bf16", QKVFUSE_CACHE_PAGED_HND, 0, 2, HND_RUNS},
    {"page table (int32): nz bf16 (c=16)", QKVFUSE_CACHE_NZ, 0, 2, NZ16_RUNS},
    {"page table: nz int8 (c=32)", QKVFUSE_CACHE_NZ, 1, 1, NZ32_RUNS},
};

static int check_layout(const layout_case *L, qkvfuse_backend be, int64_t *bytes_checked) {
  tk_spec s;
  tk_spec_default(&s);
  s.Nq = 2, s.Nkv = 2, s.D = 48;
  s.layout = L->layout;
  s.slot_dt = QKVFUSE_DTYPE_INT64;
  if (L->layout == QKVFUSE_CACHE_CONTIGUOUS) s.in3d = 1, s.B = 3, s.S = 2, s.cache_batch = 3, s.max_seq = 8;
  else s.T = 3, s.block_size = 4, s.blocks = 3;
  if (L->pt) {
    s.addressing = QKVFUSE_ADDRESS_PAGE_TABLE;
    s.pt_batch = 2, s.pt_prefix = 0, s.pt_lead = 1, s.pt_tail = 0;
    for (int i = 0; i < 4; i++) s.pt_dt[i] = L->pt == 1 ? QKVFUSE_DTYPE_INT64 : QKVFUSE_DTYPE_INT32;
    s.pt_dt[2] = QKVFUSE_DTYPE_INT64; /* dtypes may differ between the four */
  }
  if (L->int8) {
    s.qkv_dt = s.q_out_dt = QKVFUSE_DTYPE_FLOAT32;
    s.k_quant = s.v_quant = QKVFUSE_QUANT_INT8_SYM;
  } else {
    s.qkv_dt = s.q_out_dt = s.k_cache_dt = s.v_cache_dt = QKVFUSE_DTYPE_BFLOAT16;
  }
  tk_spec_fixup(&s);
  tk_case c;
  tk_case_build(&c, &s, 77);
  int64_t H = 6 * 48;
  tk_rng r;
  tk_rng_seed(&r, 5);
  if (L->int8) {
    for (int64_t i = 0; i < s.T * H; i++) tk_case_poke(&c, TK_QKV, i, (double)(tk_rng_range(&r, 1, 100) * (tk_rng_chance(&r, 0.5) ? 1 : -1)));
    tk_case_poke(&c, TK_K_SCALE, 0, 1.0);
    tk_case_poke(&c, TK_V_SCALE, 0, 1.0);
  }
  static const double paged_slots[] = {6, -1, 9}, contig_idx[] = {3, -1, 5};
  static const double indptr[] = {1, 2, 4}, indices[] = {7, 2, 0, 1, 9, 9}, batch[] = {1, -1, 0}, pos[] = {6, 999, 1};
  if (L->pt) {
    if (tk_numel(&c.view[TK_KV_INDICES].t) != 6 || s.blocks != 6) {
      printf("FAIL test_layouts %s: the page table's kv_indices / blocks are not the 6 assumed here\n", L->name);
      tk_case_free(&c);
      return 1;
    }
    for (int i = 0; i < 6; i++) tk_case_poke(&c, TK_KV_INDICES, i, indices[i]);
    for (int i = 0; i < 3; i++) {
      tk_case_poke(&c, TK_KV_INDPTR, i, indptr[i]);
      tk_case_poke(&c, TK_BATCH_INDICES, i, batch[i]);
      tk_case_poke(&c, TK_KV_POSITIONS, i, pos[i]);
    }
  } else {
    for (int i = 0; i < 3; i++)
      tk_case_poke(&c, TK_SLOT_MAPPING, i, L->layout == QKVFUSE_CACHE_CONTIGUOUS ? contig_idx[i] : paged_slots[i]);
  }

  tk_stats st;
  memset(&st, 0, sizeof st);
  int rc = tk_check_case(&c, be, tk_run_core, NULL, &st); /* runs, downloads, compares with the oracle */
  for (int w = 0; w < 2 && rc != TK_SKIP; w++) {
    int slot = w ? TK_V_CACHE : TK_K_CACHE;
    const tk_buf *b = &c.buf[c.view[slot].buf];
    size_t es = tk_size(c.view[slot].t.dtype);
    uint8_t mark[8192] = {0};
    for (int k = 0; k < L->nruns; k++) {
      const run *u = &L->runs[k];
      for (int64_t j = u->j0; j < u->j0 + u->n; j++) {
        /* the input element of token t, column (Nq + w*Nkv)*D + j */
        const tk_view *x = &c.view[TK_QKV];
        const uint8_t *src = c.buf[TK_QKV].init + tk_elem_offset(&x->t, u->t * H + (2 + w * 2) * 48 + j) * (int64_t)tk_size(x->t.dtype);
        uint8_t want[4];
        if (L->int8) {
          int8_t q = (int8_t)tk_decode(x->t.dtype, src);
          memcpy(want, &q, 1);
        } else {
          memcpy(want, src, 2);
        }
        size_t at = (size_t)(u->off + (j - u->j0)) * es;
        (*bytes_checked) += (int64_t)es;
        if (memcmp(b->got + at, want, es))
          tk_stats_fail(&st, "%s %s: token %lld element %lld: bytes at offset %zu are not the expected ones", L->name,
                        w ? "v_cache" : "k_cache", (long long)u->t, (long long)j, at);
        memset(mark + at, 1, es);
      }
    }
    tk_cmp_untouched(&st, w ? "v_cache" : "k_cache", b->got, b->init, mark, b->bytes);
    (*bytes_checked) += (int64_t)b->bytes;
  }
  if (st.failed) printf("FAIL test_layouts backend=%s layout=%s: %s\n", tk_backend_str(be), L->name, st.first);
  tk_case_free(&c);
  return rc == TK_SKIP ? -1 : st.failed ? 1 : 0;
}

int main(int argc, char **argv) {
  qkvfuse_backend bes[8];
  int nbe = tk_backends_from(argc, argv, bes, 8), failed = 0, ran = 0;
  int64_t bytes = 0;
  for (int b = 0; b < nbe; b++)
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
      int r = check_layout(&CASES[i], bes[b], &bytes);
      if (r >= 0) ran++, failed += r;
    }
  printf("test_layouts: %d layout cases, %d failed; %lld cache bytes checked\n", ran, failed, (long long)bytes);
  return failed ? 1 : ran ? 0 : TK_SKIP;
}
