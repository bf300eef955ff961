/* SPDX-License-Identifier: Apache-2.0 */
/* Data-dependent errors on CUDA (docs/API.md "Errors"): the call returns
 * success (it stays capturable), the QKVFUSE_DATA_ERROR_* bit is OR-ed into
 * error_flags, nothing is read or written out of bounds, a token with a bad
 * position or slot writes nothing at all (no q/k/v outputs, no cache rows), a
 * head whose scale or offset is bad skips its cache rows (a per-tensor one:
 * every head's; a bad q_scale: no q_out at all) -- and every other element is
 * exactly what the oracle says.
 *   test_cuda_data (exit 77 without a GPU) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bases.h"
#include "fp.h"
#include "harness.h"
#include "oracle.h"
#include "tview.h"

typedef struct bad_data {
  const char *what;
  int base;
  int slot;        /* tensor poked */
  int64_t at[2];   /* elements poked (-1: none) */
  double val[2];
  uint32_t flag;
  int drop_tokens; /* 1: the poked positions/slots drop their tokens (contiguous: whole batch);
                      2: the poked act_scale elements drop their tokens;
                      3: page table: at[] are tokens, and the entry of the poked table each reads is
                      poked; every token whose destination the header's rule (the oracle's) then
                      finds bad drops */
  int kv;          /* scale errors: 1 k cache, 2 v cache, 3 weight_scale (its head writes nothing), 4 q_scale
                      (no q head writes q_out) */
} bad_data;

static int failed, ran;

static void one(const bad_data *b, const tk_device *dev) {
  tk_spec s;
  tk_base_spec(b->base, &s);
  if (b->base != TK_BASE_B) s.T = 8, s.blocks = 0;
  s.error_flags = 1;
  tk_spec_fixup(&s);
  tk_case c;
  tk_case_build(&c, &s, 7000 + (uint64_t)b->base);
  /* the oracle of the valid data, then break the data */
  tk_oracle o;
  char err[128];
  tk_case_oracle(&c, &o, err, sizeof err);
  uint8_t *skip = (uint8_t *)calloc((size_t)(s.T + 1), 1);
  uint8_t *head_skip = (uint8_t *)calloc((size_t)(s.Nq + 2 * s.Nkv), 1);
  int64_t KV = s.Nkv * s.D;
  qkvfuse_tensor host[TK_NSLOT];
  qkvfuse_args ha;
  tk_case_args(&c, TK_AT_INIT, host, &ha);
  for (int i = 0; i < 2; i++) {
    if (b->at[i] < 0) continue;
    if (b->drop_tokens == 3) { /* the entry token at[i] reads (its table entries as built: all tokens live) */
      const int64_t t = b->at[i], seq = tk_get_int(ha.batch_indices, t), pos = tk_get_int(ha.kv_positions, t);
      const int64_t entry = b->slot == TK_KV_INDPTR ? seq
                            : b->slot == TK_KV_INDICES ? tk_get_int(ha.kv_indptr, seq) + pos / s.block_size
                                                       : t;
      tk_case_poke(&c, b->slot, entry, b->val[i]);
      continue;
    }
    tk_case_poke(&c, b->slot, b->at[i], b->val[i]);
    if (b->kv == 4) { /* q_scale: every q head, of every token */
      for (int64_t h = 0; h < s.Nq; h++) head_skip[h] = 1;
    } else if (b->kv == 3) { /* a weight_scale channel: its head, of every token, in the outputs and the cache */
      const int64_t h = b->at[i] / s.D, kvh = h < s.Nq ? -1 : (h - s.Nq) % s.Nkv;
      int64_t *off = h < s.Nq ? NULL : h < s.Nq + s.Nkv ? o.kc_off : o.vc_off;
      head_skip[h] = 1;
      for (int64_t t = 0; off && t < s.T; t++)
        for (int64_t j = kvh * s.D; j < (kvh + 1) * s.D; j++) off[t * KV + j] = -1;
    } else if (b->drop_tokens) {
      const int by_batch = b->drop_tokens == 1 && s.layout == QKVFUSE_CACHE_CONTIGUOUS;
      int64_t t0 = by_batch ? b->at[i] * s.S : b->at[i];
      int64_t n = by_batch ? s.S : 1;
      for (int64_t t = t0; t < t0 + n; t++) {
        skip[t] = 1;
        for (int64_t j = 0; j < KV; j++) o.kc_off[t * KV + j] = o.vc_off[t * KV + j] = -1;
      }
    } else {
      /* a bad scale/offset: its head's cache rows (every head, for a per-tensor scale) */
      const int64_t n = tk_numel(&c.view[b->slot].t);
      int64_t h = n == 1 ? -1 : n == s.Nkv * s.D ? b->at[i] / s.D : b->at[i];
      int64_t *off = b->kv == 1 ? o.kc_off : o.vc_off;
      for (int64_t t = 0; t < s.T; t++)
        for (int64_t j = 0; j < KV; j++)
          if (h < 0 || j / s.D == h) off[t * KV + j] = -1;
    }
  }
  int dropped = 0;
  for (int64_t t = 0; b->drop_tokens == 3 && t < s.T; t++) {
    int64_t blk, row;
    if (tk_oracle_page_dest(&ha, ha.k_cache, s.layout, t, &blk, &row) >= 0) continue;
    skip[t] = 1, dropped++;
    for (int64_t j = 0; j < KV; j++) o.kc_off[t * KV + j] = o.vc_off[t * KV + j] = -1;
  }
  o.row_skip = skip;
  o.head_skip = head_skip;
  qkvfuse_status st;
  const int moved = tk_run_core_on(&c, dev, QKVFUSE_BACKEND_CUDA, &st);
  tk_stats ss;
  memset(&ss, 0, sizeof ss);
  if (moved) tk_stats_fail(&ss, "device %s: a transfer failed", dev->name);
  if (st != QKVFUSE_SUCCESS)
    tk_stats_fail(&ss, "status %s (%s), want success: the CUDA call must stay capturable", qkvfuse_status_string(st),
                  qkvfuse_last_error());
  uint32_t f;
  memcpy(&f, c.buf[TK_FLAGS_BUF].got, 4);
  if (!(f & b->flag)) tk_stats_fail(&ss, "error_flags 0x%x lacks 0x%x", f, b->flag);
  if (b->drop_tokens == 3 && !dropped) tk_stats_fail(&ss, "the poked page-table entries drop no token");
  if (st == QKVFUSE_SUCCESS) tk_compare_case(&c, &o, &ss);
  ran++;
  if (ss.failed) {
    failed++;
    printf("FAIL test_cuda_data '%s': %s\n  failing: %s\n", b->what, ss.first, ss.where);
  }
  free(skip), free(head_skip);
  tk_oracle_free(&o);
  tk_case_free(&c);
}

int main(int argc, char **argv) {
  if (tk_variants_from(argc, argv) != 0) return 2;
  const tk_device *dev = tk_device_for_backend(QKVFUSE_BACKEND_CUDA);
  if (!dev) {
    printf("test_cuda_data: no CUDA device, skipped\n");
    return TK_SKIP;
  }
  static const bad_data cases[] = {
      {"positions out of [0, max_pos)", TK_BASE_A, TK_POSITIONS, {2, 5}, {16, -1}, QKVFUSE_DATA_ERROR_POSITION, 1, 0},
      {"computed: negative position", TK_BASE_C, TK_POSITIONS, {3, -1}, {-5, 0}, QKVFUSE_DATA_ERROR_POSITION, 1, 0},
      {"slots outside the cache", TK_BASE_A, TK_SLOT_MAPPING, {1, 6}, {-7, 12}, QKVFUSE_DATA_ERROR_SLOT, 1, 0},
      {"contiguous start + S > max_seq", TK_BASE_B, TK_SLOT_MAPPING, {1, -1}, {6, 0}, QKVFUSE_DATA_ERROR_SLOT, 1, 0},
      {"a zero k_scale channel (head 1)", TK_BASE_A, TK_K_SCALE, {64 + 5, -1}, {0, 0}, QKVFUSE_DATA_ERROR_SCALE, 0, 1},
      {"a NaN per-tensor v_scale", TK_BASE_A, TK_V_SCALE, {0, -1}, {NAN, 0}, QKVFUSE_DATA_ERROR_SCALE, 0, 2},
      {"an Inf k_offset (head 0)", TK_BASE_A, TK_K_OFFSET, {7, -1}, {INFINITY, 0}, QKVFUSE_DATA_ERROR_SCALE, 0, 1},
      {"a zero v_scale channel (flat, head 1)", TK_BASE_B, TK_V_SCALE, {32 + 3, -1}, {0, 0}, QKVFUSE_DATA_ERROR_SCALE, 0, 2},
      /* the dequant scales: a token with a non-finite act_scale, a head with a non-finite weight_scale */
      {"a NaN act_scale (token 5)", TK_BASE_B, TK_ACT_SCALE, {5, -1}, {NAN, 0}, QKVFUSE_DATA_ERROR_SCALE, 2, 0},
      {"an Inf weight_scale channel (q head 1)", TK_BASE_B, TK_WEIGHT_SCALE, {32 + 7, -1}, {INFINITY, 0},
       QKVFUSE_DATA_ERROR_SCALE, 0, 3},
      {"a NaN weight_scale channel (k head 1)", TK_BASE_B, TK_WEIGHT_SCALE, {3 * 32 + 2, -1}, {NAN, 0},
       QKVFUSE_DATA_ERROR_SCALE, 0, 3},
      {"a NaN weight_scale channel (v head 0)", TK_BASE_B, TK_WEIGHT_SCALE, {4 * 32 + 31, -1}, {NAN, 0},
       QKVFUSE_DATA_ERROR_SCALE, 0, 3},
      /* the same on int32 input the streaming kernel takes (every form: data_errors_cuda_*) */
      {"int32 streaming: an Inf act_scale (tokens 2, 7)", TK_BASE_I, TK_ACT_SCALE, {2, 7}, {INFINITY, NAN},
       QKVFUSE_DATA_ERROR_SCALE, 2, 0},
      {"int32 streaming: a NaN weight_scale channel (q head 1)", TK_BASE_I, TK_WEIGHT_SCALE, {64 + 7, -1}, {NAN, 0},
       QKVFUSE_DATA_ERROR_SCALE, 0, 3},
      {"int32 streaming: an Inf weight_scale channel (k head 1)", TK_BASE_I, TK_WEIGHT_SCALE, {5 * 64 + 2, -1},
       {-INFINITY, 0}, QKVFUSE_DATA_ERROR_SCALE, 0, 3},
      {"int32 streaming: a NaN weight_scale channel (v head 0)", TK_BASE_I, TK_WEIGHT_SCALE, {6 * 64 + 63, -1}, {NAN, 0},
       QKVFUSE_DATA_ERROR_SCALE, 0, 3},
      {"int32 streaming: a zero v_scale channel (head 1)", TK_BASE_I, TK_V_SCALE, {64 + 5, -1}, {0, 0},
       QKVFUSE_DATA_ERROR_SCALE, 0, 2},
      {"int32 streaming: slots outside the cache", TK_BASE_I, TK_SLOT_MAPPING, {1, 6}, {-7, 16},
       QKVFUSE_DATA_ERROR_SLOT, 1, 0},
      /* an engine's call (the decode kernel's constant-geometry form) */
      {"engine: positions out of range", TK_BASE_E, TK_POSITIONS, {1, 4}, {16, -3}, QKVFUSE_DATA_ERROR_POSITION, 1, 0},
      {"engine: slots outside the cache", TK_BASE_E, TK_SLOT_MAPPING, {0, 5}, {12, -2}, QKVFUSE_DATA_ERROR_SLOT, 1, 0},
      {"engine: a NaN k_scale channel (head 1)", TK_BASE_E, TK_K_SCALE, {64 + 9, -1}, {NAN, 0}, QKVFUSE_DATA_ERROR_SCALE,
       0, 1},
      {"engine: a zero per-tensor v_scale", TK_BASE_E, TK_V_SCALE, {0, -1}, {0, 0}, QKVFUSE_DATA_ERROR_SCALE, 0, 2},
      /* a quantized q (the general kernel) and per-head scales */
      {"a zero q_scale", TK_BASE_F, TK_Q_SCALE, {0, -1}, {0, 0}, QKVFUSE_DATA_ERROR_SCALE, 0, 4},
      {"a NaN q_scale", TK_BASE_F, TK_Q_SCALE, {0, -1}, {NAN, 0}, QKVFUSE_DATA_ERROR_SCALE, 0, 4},
      {"an Inf q_scale", TK_BASE_F, TK_Q_SCALE, {0, -1}, {-INFINITY, 0}, QKVFUSE_DATA_ERROR_SCALE, 0, 4},
      {"a zero per-head k_scale (head 1)", TK_BASE_F, TK_K_SCALE, {1, -1}, {0, 0}, QKVFUSE_DATA_ERROR_SCALE, 0, 1},
      {"a NaN per-head v_offset (head 0)", TK_BASE_F, TK_V_OFFSET, {0, -1}, {NAN, 0}, QKVFUSE_DATA_ERROR_SCALE, 0, 2},
      {"quantized q: a slot outside the cache (no q_out row either)", TK_BASE_F, TK_SLOT_MAPPING, {3, -1}, {-4, 0},
       QKVFUSE_DATA_ERROR_SLOT, 1, 0},
      /* an engine's call with an e5m2 k cache and per-head scales (the streaming kernel) */
      {"engine: a zero per-head k_scale (head 1)", TK_BASE_G, TK_K_SCALE, {1, -1}, {0, 0}, QKVFUSE_DATA_ERROR_SCALE, 0,
       1},
      {"engine: a NaN per-head v_scale (head 0)", TK_BASE_G, TK_V_SCALE, {0, -1}, {NAN, 0}, QKVFUSE_DATA_ERROR_SCALE, 0,
       2},
      {"engine: e5m2 k cache, slots outside the cache", TK_BASE_G, TK_SLOT_MAPPING, {2, 4}, {12, -3},
       QKVFUSE_DATA_ERROR_SLOT, 1, 0},
      /* page-table addressing: every class of bad entry */
      {"page table: batch indices outside [0, batch)", TK_BASE_P, TK_BATCH_INDICES, {1, 6}, {3, -2},
       QKVFUSE_DATA_ERROR_SLOT, 3, 0},
      {"page table: kv positions negative or past the blocks", TK_BASE_P, TK_KV_POSITIONS, {0, 7}, {-1, 1 << 20},
       QKVFUSE_DATA_ERROR_SLOT, 3, 0},
      {"page table: kv_indptr negative", TK_BASE_P, TK_KV_INDPTR, {2, -1}, {-1, 0}, QKVFUSE_DATA_ERROR_SLOT, 3, 0},
      {"page table: a sequence starting past kv_indices", TK_BASE_P, TK_KV_INDPTR, {5, -1}, {1000, 0},
       QKVFUSE_DATA_ERROR_SLOT, 3, 0},
      {"page table: blocks outside the cache", TK_BASE_P, TK_KV_INDICES, {3, 2}, {-1, 1000}, QKVFUSE_DATA_ERROR_SLOT, 3,
       0},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) one(&cases[i], dev);
  printf("test_cuda_data: %d cases, %d failed\n", ran, failed);
  return failed ? 1 : 0;
}
