/* SPDX-License-Identifier: Apache-2.0 */
/* The GPU fuzz loop: random valid cases (every layout, dtype,
 * quantization, RoPE source, stride and view the test kit generates), then
 * data the kernels must survive: positions outside [0, max_pos) (or outside
 * [0, 2^31) for computed RoPE), slots and contiguous starts outside the cache
 * (incl. values whose low 32 bits are valid), page-table entries outside
 * their ranges (batch indices, positions, kv_indptr, block numbers; the
 * header's rule, as the oracle reads it, says which tokens drop), zero / NaN / Inf scales and
 * non-finite offsets. Every device buffer sits between two guard regions of a
 * known pattern (canaries), checked after every call. docs/API.md "Errors"
 * on CUDA is the contract:
 *   - the call returns success (it stays capturable);
 *   - error_flags holds exactly the bits of the kinds injected (a bad scale
 *     may go unreported when no token writes a cache row);
 *   - a token with a bad position or slot writes nothing (no q_out/k_out/
 *     v_out row, no cache row; contiguous: a bad start drops its batch);
 *   - a bad scale or offset skips its head's cache rows (every head for a
 *     per-tensor scale) and nothing else; a bad q_scale every q head's q_out;
 *   - every other element equals the float64 oracle within SPEC's tolerances,
 *     every other byte (and every guard byte) is unchanged.
 * Run it under compute-sanitizer (scripts/gpu-check.sh sanitize): memcheck
 * then also proves no access leaves an allocation, initcheck that no
 * uninitialized byte is read.
 *   test_cuda_fuzz [--iters N] [--seed S] [--engine|--append|--dequant] [--verbose]   (exit 77 without a GPU)
 * --engine: every case the call an inference engine makes (tk_spec_engine),
 * which the CUDA backend serves with its dtypes and cache geometry compiled
 * in (the engine call: src/cuda/variant.h; random valid cases rarely are one);
 * --append: every case FlashInfer's append call (tk_spec_append), likewise;
 * --dequant: every case the int32 call (tk_spec_dequant), likewise. */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fp.h"
#include "harness.h"
#include "tview.h"

#define GUARD 256
#define MAX_ALLOCS 64

/* ---- a device whose buffers sit between canaries ---------------------------------- */

typedef struct guarded {
  void *base;
  size_t bytes;
} guarded;

static guarded allocs[MAX_ALLOCS];
static int nallocs;
static uint8_t guard_pattern[GUARD];

static void *g_alloc(size_t n) {
  if (nallocs >= MAX_ALLOCS) return NULL;
  uint8_t *p = NULL;
  if (cudaMalloc((void **)&p, n + 2 * GUARD) != cudaSuccess) return NULL;
  /* the head guard, and the tail guard right after the n bytes (not rounded up: one byte past shows) */
  if (cudaMemcpy(p, guard_pattern, GUARD, cudaMemcpyHostToDevice) != cudaSuccess ||
      cudaMemcpy(p + GUARD + n, guard_pattern, GUARD, cudaMemcpyHostToDevice) != cudaSuccess) {
    cudaFree(p);
    return NULL;
  }
  allocs[nallocs++] = (guarded){p, n};
  return p + GUARD;
}

static void g_release(void *q) {
  for (int i = 0; i < nallocs; i++)
    if ((uint8_t *)allocs[i].base + GUARD == (uint8_t *)q) {
      cudaFree(allocs[i].base);
      allocs[i] = allocs[--nallocs];
      return;
    }
}

static int g_upload(void *d, const void *h, size_t n) { return cudaMemcpy(d, h, n, cudaMemcpyHostToDevice) != cudaSuccess; }
static int g_download(void *h, const void *d, size_t n) { return cudaMemcpy(h, d, n, cudaMemcpyDeviceToHost) != cudaSuccess; }
static int g_sync(void *s) { return cudaStreamSynchronize((cudaStream_t)s) != cudaSuccess; }

static const tk_device GUARDED = {"cuda-guarded", QKVFUSE_DEVICE_CUDA, 0, g_alloc, g_release, g_upload, g_download, g_sync, NULL};

/* Every guard of every live buffer still holds its pattern. */
static void guards_check(tk_stats *st) {
  uint8_t got[GUARD];
  for (int i = 0; i < nallocs; i++) {
    const uint8_t *b = (const uint8_t *)allocs[i].base;
    for (int w = 0; w < 2; w++) {
      const uint8_t *src = w ? b + GUARD + allocs[i].bytes : b;
      if (cudaMemcpy(got, src, GUARD, cudaMemcpyDeviceToHost) != cudaSuccess) {
        tk_stats_fail(st, "guard download failed");
        return;
      }
      for (int k = 0; k < GUARD; k++)
        if (got[k] != guard_pattern[k]) {
          tk_stats_fail(st, "guard %s buffer %d (%zu bytes) changed at byte %s%d", w ? "after" : "before", i,
                        allocs[i].bytes, w ? "+" : "-", w ? k : GUARD - k);
          return;
        }
    }
  }
}

/* ---- one iteration ----------------------------------------------------------------- */

static void poke_raw(tk_case *c, int slot, int64_t flat, int64_t v) {
  tk_view *w = &c->view[slot];
  uint8_t *p = c->buf[w->buf].init + (w->off + tk_elem_offset(&w->t, flat)) * (int64_t)tk_size(w->t.dtype);
  if (w->t.dtype == QKVFUSE_DTYPE_INT64) {
    memcpy(p, &v, 8);
  } else {
    int32_t x = (int32_t)v;
    memcpy(p, &x, 4);
  }
}

static void poke_f(tk_case *c, int slot, int64_t flat, double v) {
  tk_view *w = &c->view[slot];
  tk_encode(w->t.dtype, c->buf[w->buf].init + (w->off + tk_elem_offset(&w->t, flat)) * (int64_t)tk_size(w->t.dtype), v);
}

/* A value outside [0, lim) (never -1 for a slot: -1 is "skip"). */
static int64_t bad_index(tk_rng *r, int64_t lim, int is_slot) {
  const int64_t two32 = (int64_t)1 << 32;
  const int64_t vals[] = {lim, lim + 1, -2, -1000, INT32_MAX, INT32_MIN, two32, two32 + 1, two32 - 1,
                          -two32 - 1, INT64_MIN, INT64_MAX, lim + ((int64_t)1 << 31), -1};
  int64_t v = TK_PICK(r, vals);
  if (v == -1 && is_slot) v = -3;
  if (v >= 0 && v < lim) v = lim; /* lim itself when it is that large */
  return v;
}

/* shape: the call every case is made (tk_shaper_from), or NULL */
static int iteration(uint64_t seed, tk_spec_shaper shape, int verbose) {
  tk_rng r;
  tk_rng_seed(&r, seed);
  tk_limits lim = {tk_rng_chance(&r, 0.2) ? 1 << 18 : 1 << 13, 0};
  tk_spec s;
  tk_spec_random(&s, &r, &lim);
  if (shape) shape(&s, &r);
  if (s.max_pos > 256) s.max_pos = 256;
  s.error_flags = 1;
  tk_spec_fixup(&s);
  tk_case c;
  if (tk_case_build(&c, &s, seed ^ 0xC0DA)) return 1;
  tk_oracle o;
  char err[160];
  tk_stats st;
  memset(&st, 0, sizeof st);
  if (tk_case_oracle(&c, &o, err, sizeof err)) {
    printf("FAIL test_cuda_fuzz seed=0x%llx: oracle: %s\n", (unsigned long long)seed, err);
    tk_case_free(&c);
    return 1;
  }
  const int64_t T = s.T, KV = s.Nkv * s.D;
  uint8_t *skip = (uint8_t *)calloc((size_t)T + 1, 1), *bad_pos_tok = (uint8_t *)calloc((size_t)T + 1, 1);
  uint8_t *head_skip = (uint8_t *)calloc((size_t)(s.Nq + 2 * s.Nkv), 1);
  uint32_t want = 0;
  char injected[256] = "";
  /* bad positions: some tokens */
  if (T > 0 && c.view[TK_POSITIONS].present && tk_rng_chance(&r, 0.5)) {
    const int64_t plim = s.rope_source == QKVFUSE_ROPE_COS_SIN_CACHE ? s.max_pos : ((int64_t)1 << 31);
    for (int k = 0, n = (int)tk_rng_range(&r, 1, 3); k < n; k++) {
      int64_t t = tk_rng_range(&r, 0, T - 1), v = bad_index(&r, plim, 0);
      if (c.view[TK_POSITIONS].t.dtype == QKVFUSE_DTYPE_INT32 && (v > INT32_MAX || v < INT32_MIN)) v = -5;
      poke_raw(&c, TK_POSITIONS, t, v);
      bad_pos_tok[t] = skip[t] = 1;
      want |= QKVFUSE_DATA_ERROR_POSITION;
      snprintf(injected + strlen(injected), sizeof injected - strlen(injected), " pos[%lld]=%lld", (long long)t, (long long)v);
    }
  }
  /* bad slots / starts: tokens (batches) disjoint from the bad positions */
  if (T > 0 && s.layout != QKVFUSE_CACHE_NONE && s.addressing == QKVFUSE_ADDRESS_SLOTS && tk_rng_chance(&r, 0.5)) {
    const int contiguous = s.layout == QKVFUSE_CACHE_CONTIGUOUS;
    const int64_t n_idx = contiguous ? s.B : T, slim = contiguous ? s.max_seq - s.S + 1 : s.blocks * s.block_size;
    for (int k = 0, n = (int)tk_rng_range(&r, 1, 3); k < n; k++) {
      int64_t i = tk_rng_range(&r, 0, n_idx - 1), t0 = contiguous ? i * s.S : i, t1 = contiguous ? t0 + s.S : i + 1;
      int clash = 0;
      for (int64_t t = t0; t < t1; t++) clash |= bad_pos_tok[t];
      if (clash) continue;
      int64_t v = bad_index(&r, slim, 1);
      if (c.view[TK_SLOT_MAPPING].t.dtype == QKVFUSE_DTYPE_INT32 && (v > INT32_MAX || v < INT32_MIN)) v = -7;
      poke_raw(&c, TK_SLOT_MAPPING, i, v);
      for (int64_t t = t0; t < t1; t++) skip[t] = 1;
      want |= QKVFUSE_DATA_ERROR_SLOT;
      snprintf(injected + strlen(injected), sizeof injected - strlen(injected), " slot[%lld]=%lld", (long long)i, (long long)v);
    }
  }
  /* a bad page table: entries outside their ranges. A token whose destination
     the header's rule then finds bad drops; every other keeps its row (a
     poked kv_indptr entry only ends the sequence before it later) */
  uint32_t may_slot = 0;
  if (T > 0 && s.addressing == QKVFUSE_ADDRESS_PAGE_TABLE && tk_rng_chance(&r, 0.5)) {
    static const int tabs[4] = {TK_KV_INDPTR, TK_KV_INDICES, TK_BATCH_INDICES, TK_KV_POSITIONS};
    const int64_t nidx = tk_numel(&c.view[TK_KV_INDICES].t);
    for (int k = 0, n = (int)tk_rng_range(&r, 1, 3); k < n; k++) {
      const int which = tabs[tk_rng_range(&r, 0, 3)];
      const int64_t cnt = tk_numel(&c.view[which].t);
      if (cnt == 0) continue;
      const int64_t i = tk_rng_range(&r, 0, cnt - 1);
      const int64_t range = which == TK_KV_INDPTR ? nidx + 1 : which == TK_KV_INDICES ? s.blocks
                            : which == TK_BATCH_INDICES ? s.pt_batch : (nidx + 1) * s.block_size;
      int64_t v = bad_index(&r, range, which == TK_BATCH_INDICES);
      if (c.view[which].t.dtype == QKVFUSE_DTYPE_INT32 && (v > INT32_MAX || v < INT32_MIN)) v = -7;
      poke_raw(&c, which, i, v);
      snprintf(injected + strlen(injected), sizeof injected - strlen(injected), " %s[%lld]=%lld", tk_slot_name[which],
               (long long)i, (long long)v);
    }
    qkvfuse_tensor host[TK_NSLOT];
    qkvfuse_args ha;
    tk_case_args(&c, TK_AT_INIT, host, &ha);
    int sure = 0, any = 0;
    for (int64_t t = 0; t < T; t++) {
      int64_t blk, row;
      if (tk_oracle_page_dest(&ha, ha.k_cache, s.layout, t, &blk, &row) >= 0) continue;
      skip[t] = 1, any = 1;
      sure |= !bad_pos_tok[t]; /* a token with a bad position too: reported for that, maybe not for this */
    }
    if (sure) want |= QKVFUSE_DATA_ERROR_SLOT;
    else if (any) may_slot = QKVFUSE_DATA_ERROR_SLOT;
  }
  /* tokens that still write a cache row: a kernel meets a bad scale only through them */
  int writers = 0;
  for (int64_t t = 0; t < T && s.layout != QKVFUSE_CACHE_NONE; t++) writers |= !skip[t] && o.kc_off[t * KV] >= 0;
  /* a bad scale or offset: its head's cache rows (all heads for a per-tensor one); a bad q_scale: q_out */
  const int scale_slots[5] = {TK_K_SCALE, TK_V_SCALE, TK_K_OFFSET, TK_V_OFFSET, TK_Q_SCALE};
  if ((s.layout != QKVFUSE_CACHE_NONE || s.q_quant) && tk_rng_chance(&r, 0.3)) {
    int which = scale_slots[tk_rng_range(&r, 0, 4)];
    if (which == TK_Q_SCALE && c.view[which].present) {
      const double vals[] = {0.0, -0.0, NAN, INFINITY, -INFINITY};
      const double v = vals[tk_rng_range(&r, 0, 4)];
      poke_f(&c, which, 0, v);
      for (int64_t h = 0; h < s.Nq; h++) head_skip[h] = 1;
      writers |= T > 0; /* every kernel checks a q scale when it runs (T > 0) */
      want |= QKVFUSE_DATA_ERROR_SCALE;
      snprintf(injected + strlen(injected), sizeof injected - strlen(injected), " q_scale=%g", v);
    } else if (which != TK_Q_SCALE && c.view[which].present) {
      const int64_t n = tk_numel(&c.view[which].t), j = tk_rng_range(&r, 0, n - 1);
      const int is_off = which == TK_K_OFFSET || which == TK_V_OFFSET;
      const double vals[] = {0.0, -0.0, NAN, INFINITY, -INFINITY};
      double v = vals[tk_rng_range(&r, is_off ? 2 : 0, 4)];
      poke_f(&c, which, j, v);
      const int64_t h = n == 1 ? -1 : n == KV ? j / s.D : j; /* per tensor, per channel, per kv head */
      int64_t *off = (which == TK_K_SCALE || which == TK_K_OFFSET) ? o.kc_off : o.vc_off;
      for (int64_t t = 0; t < T; t++)
        for (int64_t q = 0; q < KV; q++)
          if (h < 0 || q / s.D == h) off[t * KV + q] = -1;
      want |= QKVFUSE_DATA_ERROR_SCALE;
      snprintf(injected + strlen(injected), sizeof injected - strlen(injected), " %s[%lld]=%g", tk_slot_name[which],
               (long long)j, v);
    }
  }
  for (int64_t t = 0; t < T; t++)
    if (skip[t])
      for (int64_t q = 0; q < KV; q++) o.kc_off[t * KV + q] = o.vc_off[t * KV + q] = -1;
  o.row_skip = skip;
  o.head_skip = head_skip;

  int rc = 0;
  if (tk_case_upload(&c, &GUARDED)) {
    tk_stats_fail(&st, "upload failed");
  } else {
    qkvfuse_tensor tens[TK_NSLOT];
    qkvfuse_args a;
    tk_case_args(&c, TK_AT_DEVICE, tens, &a);
    int unsupported = 0;
    qkvfuse_status r2 = tk_run_core(&c, &a, QKVFUSE_BACKEND_CUDA, NULL, &unsupported);
    cudaError_t ce = cudaDeviceSynchronize();
    if (r2 != QKVFUSE_SUCCESS)
      tk_stats_fail(&st, "status %s (%s), want success", qkvfuse_status_string(r2), qkvfuse_last_error());
    if (ce != cudaSuccess) tk_stats_fail(&st, "CUDA error after the call: %s", cudaGetErrorString(ce));
    if (!st.failed && tk_case_download(&c)) tk_stats_fail(&st, "download failed");
    if (!st.failed) {
      uint32_t f;
      memcpy(&f, c.buf[TK_FLAGS_BUF].got, 4);
      /* with no token writing a cache row, whether the bad scale is reported is not specified */
      const uint32_t may = (writers ? 0u : QKVFUSE_DATA_ERROR_SCALE) | may_slot;
      if ((f | may) != (want | may)) tk_stats_fail(&st, "error_flags 0x%x, want 0x%x", f, want);
      tk_compare_case(&c, &o, &st);
      guards_check(&st);
    }
  }
  if (st.failed) {
    char d[1400];
    tk_spec_describe(&s, d, sizeof d);
    printf("FAIL test_cuda_fuzz seed=0x%llx (rerun: test_cuda_fuzz --seed 0x%llx --iters 1)\n  case: %s\n  injected:%s\n"
           "  %s\n  failing: %s\n",
           (unsigned long long)seed, (unsigned long long)seed, d, injected[0] ? injected : " nothing", st.first, st.where);
    rc = 1;
  } else if (verbose) {
    printf("ok seed=0x%llx T=%lld layout=%d injected:%s\n", (unsigned long long)seed, (long long)T, (int)s.layout,
           injected[0] ? injected : " nothing");
  }
  o.row_skip = NULL;
  o.head_skip = NULL;
  tk_oracle_free(&o);
  free(skip);
  free(head_skip);
  free(bad_pos_tok);
  tk_case_free(&c);
  return rc;
}

int main(int argc, char **argv) {
  if (tk_variants_from(argc, argv) != 0) return 2;
  if (!tk_device_cuda()) {
    printf("test_cuda_fuzz: no CUDA device, skipped\n");
    return TK_SKIP;
  }
  const uint64_t iters = tk_arg_u64(argc, argv, "--iters", "QKVFUSE_TEST_CASES", 300);
  const uint64_t seed = tk_arg_u64(argc, argv, "--seed", "QKVFUSE_TEST_SEED", 0xF022C0DAull);
  const int verbose = tk_arg_has(argc, argv, "--verbose");
  const tk_spec_shaper shape = tk_shaper_from(argc, argv);
  for (int k = 0; k < GUARD; k++) guard_pattern[k] = (uint8_t)(0x5B ^ (k * 29)) | 1;
  int failed = 0;
  for (uint64_t i = 0; i < iters; i++) {
    /* --iters 1 --seed S reruns exactly the case printed as seed=S */
    const uint64_t cs = iters == 1 ? seed : tk_case_seed(seed, i);
    failed += iteration(cs, shape, verbose);
    if (failed >= 10) break;
  }
  printf("test_cuda_fuzz: %llu iterations, %d failed\n", (unsigned long long)iters, failed);
  return failed ? 1 : 0;
}
