/* SPDX-License-Identifier: Apache-2.0 */
/* Weights and positions written by the kernel just before qkvfuse_run on
 * its stream, while the call's kernel already runs. qkvfuse_run launches with
 * programmatic dependent launch, so its kernel may start before the previous
 * one ends; the one-vector decode form reads every token's position before
 * its grid dependency wait (a hint: it prefetches that position's cos/sin
 * lines into L2), and a call with a quantized cache even reads the norm
 * weights and cache scales before the wait, speculatively: each must use
 * what it reads after the wait.
 * Each case runs three times on one stream: with its weights and positions
 * (want); with stale ones (q/k gamma, k/v scales and offsets, positions
 * changed; the outputs must differ from want, or the case could not tell);
 * and with the stale ones in memory while a kernel (pdl_writer.cu) that lets
 * its dependents start at once writes the case's ~30 us later: every output
 * and cache byte and the error flags must equal want's. Cases: decode-sized
 * (one vector per lane: the position-hinted and the speculating forms),
 * mid-sized and prefill-sized calls, with and without a cache, int8
 * (symmetric, asymmetric) and fp8 caches, per-channel and per-tensor scales,
 * float32 and bfloat16 norm weights, neox and interleaved pairs, full and
 * partial RoPE, int32 and int64 positions and slots, an engine's call (bf16
 * tables, int64 indices: the constant-geometry kernel), FlashInfer's append
 * call (its own kernels), and a position outside the table
 * (its stale value inside: the hint is good, the position read after the
 * wait is not).
 *   test_cuda_pdl   (exit 77 without a GPU) */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fp.h"
#include "harness.h"
#include "pdl_writer.h"
#include "tview.h"

typedef struct variant {
  int64_t Nq, Nkv, D, R, T; /* R = 0: D */
  qkvfuse_dtype dt, gamma_dt;
  int gamma_offset;
  qkvfuse_quant_mode kq, vq; /* NONE and NONE: no cache (split) */
  int k_scale_kind, v_scale_kind; /* tk_spec: 0 [1], 2 [Nkv, D] */
  qkvfuse_rope_style style;
  qkvfuse_dtype pos_dt;
  int bad_pos; /* the last token's position outside the table */
  int append;  /* 1: FlashInfer's append call (float32 cos/sin, fp8 q, e4m3 caches through a page table, no norm); 2: with norm */
} variant;

#define BF16 QKVFUSE_DTYPE_BFLOAT16
#define F16 QKVFUSE_DTYPE_FLOAT16
#define F32 QKVFUSE_DTYPE_FLOAT32
#define I32 QKVFUSE_DTYPE_INT32
#define I64 QKVFUSE_DTYPE_INT64
#define NOQ QKVFUSE_QUANT_NONE
#define I8S QKVFUSE_QUANT_INT8_SYM
#define I8A QKVFUSE_QUANT_INT8_ASYM
#define FP8 QKVFUSE_QUANT_FP8_E4M3
#define NEOX QKVFUSE_ROPE_NEOX
#define INTER QKVFUSE_ROPE_INTERLEAVED
static const variant variants[] = {
    /* Nq, Nkv, D, R, T, qkv, gamma, 1 + g, k and v quant, k and v scale kinds, pairs, positions, bad, append */
    {32, 8, 128, 0, 1, BF16, F32, 0, I8S, I8S, 2, 2, NEOX, I32, 0, 0},
    {8, 2, 64, 0, 3, F16, BF16, 1, I8A, FP8, 2, 0, NEOX, I64, 0, 0},
    {4, 4, 96, 0, 2, BF16, BF16, 0, FP8, I8S, 0, 2, NEOX, I32, 0, 0},
    {16, 8, 256, 0, 1, BF16, F32, 1, I8S, I8A, 2, 2, NEOX, I32, 0, 0},
    {32, 2, 128, 64, 2, BF16, F32, 0, I8S, I8S, 2, 2, INTER, I32, 0, 0}, /* GLM-4's pairs */
    {32, 8, 128, 0, 1, BF16, F32, 0, NOQ, NOQ, 0, 0, NEOX, I32, 0, 0},   /* split */
    {16, 2, 128, 64, 3, BF16, BF16, 0, NOQ, NOQ, 0, 0, INTER, I64, 0, 0},
    {8, 4, 64, 32, 4, F16, F32, 0, NOQ, NOQ, 0, 0, NEOX, I32, 1, 0},
    {8, 4, 128, 0, 2, BF16, F32, 0, I8S, FP8, 2, 0, INTER, I32, 1, 0},
    {32, 8, 128, 0, 48, BF16, F32, 0, I8S, I8S, 2, 2, NEOX, I32, 0, 0},   /* the two-vector decode form */
    {32, 8, 128, 0, 600, BF16, BF16, 0, I8A, I8S, 2, 0, NEOX, I64, 0, 0}, /* the prefill form */
    /* an engine's calls: the preloading form with constant dtypes and geometry (the engine call) */
    {32, 8, 128, 0, 1, BF16, BF16, 0, I8S, I8S, 2, 2, NEOX, I64, 0, 0},
    {32, 2, 128, 64, 3, BF16, BF16, 0, FP8, I8S, 0, 2, INTER, I64, 1, 0},
    /* FlashInfer's append call (pos I32; kq, vq as e4m3; append 1: no norm, as FlashInfer's; 2: with norm):
       its own kernels, decode (one and two vectors per lane) and prefill forms */
    {32, 8, 128, 0, 1, BF16, BF16, 0, FP8, FP8, 0, 0, NEOX, I32, 0, 1},
    {32, 8, 128, 64, 5, F16, F16, 0, FP8, FP8, 2, 0, INTER, I32, 1, 2},
    {32, 8, 128, 0, 48, BF16, BF16, 0, FP8, FP8, 0, 0, NEOX, I32, 0, 1},
    {32, 8, 128, 0, 48, BF16, BF16, 0, FP8, FP8, 0, 0, NEOX, I32, 0, 2},
    {32, 8, 128, 0, 600, BF16, BF16, 0, FP8, FP8, 0, 2, NEOX, I32, 0, 1},
    {32, 8, 128, 0, 600, BF16, BF16, 1, FP8, FP8, 0, 2, NEOX, I32, 0, 2},
};

static const int late_slots[] = {TK_Q_GAMMA,  TK_K_GAMMA,  TK_K_SCALE,  TK_V_SCALE,
                                 TK_K_OFFSET, TK_V_OFFSET, TK_POSITIONS};
#define NLATE ((int)(sizeof late_slots / sizeof late_slots[0]))
#define MAX_POS 4096

static void make_spec(const variant *v, tk_spec *s) {
  tk_spec_default(s);
  s->Nq = v->Nq, s->Nkv = v->Nkv, s->D = v->D, s->R = v->R ? v->R : v->D, s->T = v->T, s->B = v->T;
  s->qkv_dt = s->q_out_dt = v->dt;
  s->q_norm = s->k_norm = 1, s->q_gamma_dt = s->k_gamma_dt = v->gamma_dt, s->gamma_offset = v->gamma_offset;
  s->rope_source = QKVFUSE_ROPE_COS_SIN_CACHE, s->rope_style = v->style, s->rope_dt = v->dt;
  s->max_pos = MAX_POS, s->pos_hi = MAX_POS - 1, s->pos_dt = v->pos_dt;
  if (v->kq != NOQ || v->vq != NOQ) {
    s->layout = QKVFUSE_CACHE_PAGED, s->block_size = 16, s->blocks = (v->T + 15) / 16 + 2;
    s->slot_dt = v->pos_dt; /* int64 slots with int64 positions, as engines pass them */
    s->k_quant = v->kq, s->v_quant = v->vq, s->k_scale_kind = v->k_scale_kind, s->v_scale_kind = v->v_scale_kind;
    if (v->append) {
      if (v->append == 1) s->q_norm = s->k_norm = 0; /* FlashInfer's call */
      s->rope_dt = F32, s->q_quant = FP8;
      s->addressing = QKVFUSE_ADDRESS_PAGE_TABLE, s->pt_batch = 2, s->pt_prefix = 20;
      for (int i = 0; i < 4; i++) s->pt_dt[i] = I32;
    }
  } else {
    s->k_out_dt = s->v_out_dt = v->dt; /* split: q, k and v out */
  }
  s->error_flags = 1;
  tk_spec_fixup(s);
}

/* Stale values, written into a copy of the case's initial bytes of the
 * slot's buffer: gamma -> 0.5 - gamma, scale -> 2 scale, offset -> offset +
 * 3, position p -> MAX_POS - 1 - p (never p: MAX_POS is even), or 7 where p
 * is outside the table. */
static void make_stale(const tk_case *c, int slot, uint8_t *stale) {
  const tk_view *w = &c->view[slot];
  qkvfuse_tensor t = w->t;
  t.data = c->buf[w->buf].init + w->off * (int64_t)tk_size(t.dtype);
  const int64_t n = tk_numel(&t);
  for (int64_t i = 0; i < n; i++) {
    const double x = tk_get(&t, i);
    const double y = slot == TK_K_SCALE || slot == TK_V_SCALE     ? 2.0 * x
                     : slot == TK_K_OFFSET || slot == TK_V_OFFSET ? x + 3.0
                     : slot == TK_POSITIONS                       ? (x >= 0 && x < MAX_POS ? MAX_POS - 1 - x : 7)
                                                                  : 0.5 - x;
    tk_encode(t.dtype, stale + (w->off + tk_elem_offset(&t, i)) * (int64_t)tk_size(t.dtype), y);
  }
}

static int differs(const tk_case *c, uint8_t *const *want, const char **which) {
  for (int b = 0; b <= TK_NSLOT; b++)
    if (c->buf[b].bytes && memcmp(c->buf[b].got, want[b], c->buf[b].bytes)) {
      *which = "a buffer";
      for (int s = 0; s < TK_NSLOT; s++)
        if (c->view[s].present && c->view[s].buf == b) *which = tk_slot_name[s];
      if (b == TK_FLAGS_BUF) *which = "error_flags";
      return 1;
    }
  return 0;
}

/* Runs the case on `stream` and downloads it. settle: wait for the uploads
 * first (they go through the legacy stream, which a non-blocking stream does
 * not wait for); not where a kernel is already queued before the call. */
static int run_on(tk_case *c, qkvfuse_plan *plan, cudaStream_t stream, int settle) {
  qkvfuse_tensor tens[TK_NSLOT];
  qkvfuse_args args;
  if (settle && cudaDeviceSynchronize() != cudaSuccess) return -1;
  tk_case_args(c, TK_AT_DEVICE, tens, &args);
  if (qkvfuse_run(plan, &args, stream) != QKVFUSE_SUCCESS) return -1;
  return cudaStreamSynchronize(stream) != cudaSuccess || tk_case_download(c) ? -1 : 0;
}

int main(void) {
  const tk_device *dev = tk_device_cuda();
  if (!dev) {
    printf("test_cuda_pdl: no CUDA device, skipped\n");
    return TK_SKIP;
  }
  cudaStream_t stream;
  cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  int failed = 0, nv = (int)(sizeof variants / sizeof variants[0]);
  for (int vi = 0; vi < nv; vi++) {
    tk_spec sp;
    make_spec(&variants[vi], &sp);
    char desc[512];
    tk_spec_describe(&sp, desc, sizeof desc);
    tk_case c;
    qkvfuse_plan *plan = NULL;
    uint8_t *want[TK_NSLOT + 1] = {0}, *stale[TK_NSLOT + 1] = {0};
    void *truth[TK_NSLOT + 1] = {0};
    const char *which = "";
    int bad = 0;
    if (tk_case_build(&c, &sp, 0x9D100 + (uint64_t)vi)) {
      printf("FAIL test_cuda_pdl case %d: cannot build (%s)\n", vi, desc);
      failed++;
      continue;
    }
    if (variants[vi].bad_pos) { /* the last token's position: MAX_POS + 5 */
      const tk_view *w = &c.view[TK_POSITIONS];
      const int64_t at = w->off + tk_elem_offset(&w->t, sp.T - 1);
      tk_encode(w->t.dtype, c.buf[w->buf].init + at * (int64_t)tk_size(w->t.dtype), MAX_POS + 5);
    }
    qkvfuse_desc d = c.desc;
    d.backend = QKVFUSE_BACKEND_CUDA, d.device_type = QKVFUSE_DEVICE_CUDA, d.device_id = 0;
    if (qkvfuse_plan_create(&d, &plan) != QKVFUSE_SUCCESS) {
      printf("FAIL test_cuda_pdl case %d: %s (%s)\n", vi, qkvfuse_last_error(), desc);
      failed++;
      tk_case_free(&c);
      continue;
    }
    /* 1. the case's weights and positions */
    if (tk_case_upload(&c, dev) || run_on(&c, plan, stream, 1)) bad = 1;
    for (int b = 0; b <= TK_NSLOT && !bad; b++)
      if (c.buf[b].bytes) {
        want[b] = (uint8_t *)malloc(c.buf[b].bytes);
        memcpy(want[b], c.buf[b].got, c.buf[b].bytes);
      }
    /* 2. stale weights and positions: other outputs */
    for (int i = 0; i < NLATE && !bad; i++) {
      const int s = late_slots[i], b = c.view[s].buf;
      if (!c.view[s].present || stale[b]) continue;
      stale[b] = (uint8_t *)malloc(c.buf[b].bytes);
      memcpy(stale[b], c.buf[b].init, c.buf[b].bytes);
      for (int j = i; j < NLATE; j++)
        if (c.view[late_slots[j]].present && c.view[late_slots[j]].buf == b)
          make_stale(&c, late_slots[j], stale[b]);
    }
    if (!bad && tk_case_upload(&c, dev)) bad = 1;
    for (int b = 0; b <= TK_NSLOT && !bad; b++)
      if (stale[b] && cudaMemcpy(c.buf[b].dev, stale[b], c.buf[b].bytes, cudaMemcpyHostToDevice) != cudaSuccess)
        bad = 1;
    if (!bad && run_on(&c, plan, stream, 1)) bad = 1;
    if (!bad && !differs(&c, want, &which)) {
      printf("FAIL test_cuda_pdl case %d: the stale values give the same outputs; the case cannot tell (%s)\n", vi,
             desc);
      failed++;
    }
    /* 3. stale values in memory, the case's written by the kernel before the call, late */
    tk_late_copies lc;
    memset(&lc, 0, sizeof lc);
    if (!bad && tk_case_upload(&c, dev)) bad = 1;
    for (int b = 0; b <= TK_NSLOT && !bad; b++) {
      if (!stale[b]) continue;
      if (cudaMalloc(&truth[b], c.buf[b].bytes) != cudaSuccess ||
          cudaMemcpy(truth[b], c.buf[b].init, c.buf[b].bytes, cudaMemcpyHostToDevice) != cudaSuccess ||
          cudaMemcpy(c.buf[b].dev, stale[b], c.buf[b].bytes, cudaMemcpyHostToDevice) != cudaSuccess) {
        bad = 1;
        break;
      }
      lc.dst[lc.n] = c.buf[b].dev, lc.src[lc.n] = truth[b], lc.bytes[lc.n] = c.buf[b].bytes, lc.n++;
    }
    if (!bad && (cudaDeviceSynchronize() != cudaSuccess || tk_launch_late_writer(stream, &lc, 30))) bad = 1;
    if (!bad && run_on(&c, plan, stream, 0)) bad = 1;
    if (bad) {
      printf("FAIL test_cuda_pdl case %d: a call failed: %s (%s)\n", vi, qkvfuse_last_error(), desc);
      failed++;
    } else if (differs(&c, want, &which)) {
      printf(
          "FAIL test_cuda_pdl case %d: weights and positions written by the previous kernel: %s differs from the run "
          "with them "
          "in place (%s)\n",
          vi, which, desc);
      failed++;
    }
    for (int b = 0; b <= TK_NSLOT; b++) {
      free(want[b]);
      free(stale[b]);
      if (truth[b]) cudaFree(truth[b]);
    }
    qkvfuse_plan_destroy(plan);
    tk_case_free(&c);
  }
  cudaStreamDestroy(stream);
  printf("test_cuda_pdl: %d cases (weights and positions written late by the previous kernel), %d failed\n", nv,
         failed);
  return failed ? 1 : 0;
}
