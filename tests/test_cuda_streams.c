/* SPDX-License-Identifier: Apache-2.0 */
/* Concurrency on CUDA streams: 4 host threads share 4 plans (the
 * base specs) and enqueue, on 4 streams (thread i on stream i, and each thread
 * also on stream (i + 1) % 4 every other round, so streams are shared between
 * threads), the upload of a case's initial bytes, qkvfuse_run and the download,
 * all asynchronous, for every plan before one synchronize. Every result must be
 * byte-identical to the single-stream run of the same case (itself checked
 * against the oracle), error_flags included (the bad-data jobs set them).
 *   test_cuda_streams [--rounds R]   (exit 77 without a GPU) */
#define _POSIX_C_SOURCE 200809L
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bases.h"
#include "fp.h"
#include "harness.h"
#include "tview.h"

#define NPLANS 4
#define NTHREADS 4
#define NSTREAMS 4

typedef struct job {
  tk_case c;                 /* host bytes (init) and the single-stream result (got) */
  void *dev[TK_NSLOT + 1];   /* this job's device buffers */
  uint8_t *pinned[TK_NSLOT + 1]; /* page-locked download targets */
  qkvfuse_tensor tens[TK_NSLOT];
  qkvfuse_args args;
} job;

static qkvfuse_plan *plans[NPLANS];
static cudaStream_t streams[NSTREAMS];
static int rounds = 4;

/* Device buffers for a job built from plan k's case; args point at them. */
static int job_init(job *j, const tk_spec *sp, uint64_t seed, int bad) {
  memset(j, 0, sizeof *j);
  if (tk_case_build(&j->c, sp, seed)) return -1;
  if (bad && j->c.view[TK_SLOT_MAPPING].present) { /* slot 0 far outside the cache: dropped and flagged on CUDA */
    tk_view *w = &j->c.view[TK_SLOT_MAPPING];
    uint8_t *p = j->c.buf[w->buf].init + w->off * (int64_t)tk_size(w->t.dtype);
    int64_t v = ((int64_t)1 << 32) + 5;
    int32_t x = -9;
    if (w->t.dtype == QKVFUSE_DTYPE_INT64) memcpy(p, &v, 8);
    else memcpy(p, &x, 4);
  }
  for (int b = 0; b <= TK_NSLOT; b++) {
    if (!j->c.buf[b].bytes) continue;
    if (cudaMalloc(&j->dev[b], j->c.buf[b].bytes) != cudaSuccess) return -1;
    if (cudaMallocHost((void **)&j->pinned[b], j->c.buf[b].bytes) != cudaSuccess) return -1;
  }
  qkvfuse_args init = QKVFUSE_ARGS_INIT;
  j->args = init;
  for (int s = 0; s < TK_NSLOT; s++) {
    const tk_view *v = &j->c.view[s];
    if (!v->present) continue;
    j->tens[s] = v->t;
    j->tens[s].data = (uint8_t *)j->dev[v->buf] + v->off * (int64_t)tk_size(v->t.dtype);
    j->tens[s].device_type = QKVFUSE_DEVICE_CUDA;
    j->tens[s].device_id = 0;
    *tk_args_field(&j->args, s) = &j->tens[s];
  }
  if (j->c.buf[TK_FLAGS_BUF].bytes) j->args.error_flags = (uint32_t *)j->dev[TK_FLAGS_BUF];
  return 0;
}

static void job_free(job *j) {
  for (int b = 0; b <= TK_NSLOT; b++) {
    if (j->dev[b]) cudaFree(j->dev[b]);
    if (j->pinned[b]) cudaFreeHost(j->pinned[b]);
  }
  tk_case_free(&j->c);
}

/* Enqueue upload, run, download on stream s. */
static qkvfuse_status job_enqueue(job *j, int k, cudaStream_t s) {
  for (int b = 0; b <= TK_NSLOT; b++)
    if (j->dev[b]) cudaMemcpyAsync(j->dev[b], j->c.buf[b].init, j->c.buf[b].bytes, cudaMemcpyHostToDevice, s);
  qkvfuse_status st = qkvfuse_run(plans[k], &j->args, s);
  for (int b = 0; b <= TK_NSLOT; b++)
    if (j->dev[b]) cudaMemcpyAsync(j->pinned[b], j->dev[b], j->c.buf[b].bytes, cudaMemcpyDeviceToHost, s);
  return st;
}

static tk_spec specs[NPLANS];
static job want[NPLANS][2];

typedef struct worker_state {
  int index, mismatches, errors;
  char first[256];
} worker_state;

static void *worker(void *arg) {
  worker_state *w = (worker_state *)arg;
  static job jobs[NTHREADS][NPLANS][2];
  job(*mine)[2] = jobs[w->index];
  for (int k = 0; k < NPLANS; k++)
    for (int b = 0; b < 2; b++)
      if (job_init(&mine[k][b], &specs[k], 0xAB00 + (uint64_t)k, b)) w->errors++;
  for (int round = 0; round < rounds && !w->errors; round++) {
    const int si = (w->index + (round % 2)) % NSTREAMS;
    for (int k = 0; k < NPLANS; k++)
      for (int b = 0; b < 2; b++)
        if (job_enqueue(&mine[k][b], k, streams[si]) != QKVFUSE_SUCCESS) w->errors++;
    if (cudaStreamSynchronize(streams[si]) != cudaSuccess) w->errors++;
    for (int k = 0; k < NPLANS; k++)
      for (int b = 0; b < 2; b++)
        for (int q = 0; q <= TK_NSLOT; q++)
          if (mine[k][b].dev[q] && memcmp(mine[k][b].pinned[q], want[k][b].c.buf[q].got, want[k][b].c.buf[q].bytes)) {
            if (!w->mismatches++)
              snprintf(w->first, sizeof w->first, "round %d plan %d job %d stream %d: buffer of %s differs", round, k, b,
                       si, q < TK_NSLOT ? tk_slot_name[q] : "error_flags");
          }
  }
  for (int k = 0; k < NPLANS; k++)
    for (int b = 0; b < 2; b++) job_free(&mine[k][b]);
  return NULL;
}

int main(int argc, char **argv) {
  const tk_device *dev = tk_device_cuda();
  if (!dev) {
    printf("test_cuda_streams: no CUDA device, skipped\n");
    return TK_SKIP;
  }
  rounds = (int)tk_arg_u64(argc, argv, "--rounds", NULL, 4);
  static const int bases[NPLANS] = {TK_BASE_A, TK_BASE_B, TK_BASE_C, TK_BASE_D};
  int failed = 0;
  for (int i = 0; i < NSTREAMS; i++) cudaStreamCreateWithFlags(&streams[i], cudaStreamNonBlocking);
  for (int k = 0; k < NPLANS; k++) {
    tk_base_spec(bases[k], &specs[k]);
    if (k != 1) specs[k].T = 200, specs[k].blocks = 0;
    specs[k].error_flags = 1;
    tk_spec_fixup(&specs[k]);
    /* the single-stream results: the valid job against the oracle, then both on stream 0 */
    tk_case c;
    tk_case_build(&c, &specs[k], 0xAB00 + (uint64_t)k);
    tk_stats st;
    memset(&st, 0, sizeof st);
    if (tk_check_case(&c, QKVFUSE_BACKEND_CUDA, tk_run_core, NULL, &st) != TK_PASS) {
      printf("FAIL test_cuda_streams plan %d single-stream: %s\n", k, st.first);
      failed++;
    }
    qkvfuse_desc d = c.desc;
    d.backend = QKVFUSE_BACKEND_CUDA, d.device_type = QKVFUSE_DEVICE_CUDA, d.device_id = 0;
    if (qkvfuse_plan_create(&d, &plans[k]) != QKVFUSE_SUCCESS) {
      printf("FAIL test_cuda_streams plan %d: %s\n", k, qkvfuse_last_error());
      return 1;
    }
    tk_case_free(&c);
    for (int b = 0; b < 2; b++) {
      job *j = &want[k][b];
      if (job_init(j, &specs[k], 0xAB00 + (uint64_t)k, b) || job_enqueue(j, k, streams[0]) != QKVFUSE_SUCCESS ||
          cudaStreamSynchronize(streams[0]) != cudaSuccess) {
        printf("FAIL test_cuda_streams plan %d job %d single-stream run failed\n", k, b);
        return 1;
      }
      for (int q = 0; q <= TK_NSLOT; q++)
        if (j->dev[q]) memcpy(j->c.buf[q].got, j->pinned[q], j->c.buf[q].bytes);
      if (b == 1 && j->c.buf[TK_FLAGS_BUF].bytes && j->c.view[TK_SLOT_MAPPING].present) {
        uint32_t f;
        memcpy(&f, j->c.buf[TK_FLAGS_BUF].got, 4);
        if (!(f & QKVFUSE_DATA_ERROR_SLOT)) {
          printf("FAIL test_cuda_streams plan %d: a slot outside the cache left error_flags 0x%x\n", k, f);
          failed++;
        }
      }
    }
  }
  pthread_t th[NTHREADS];
  static worker_state ws[NTHREADS];
  for (int i = 0; i < NTHREADS; i++) {
    ws[i].index = i;
    pthread_create(&th[i], NULL, worker, &ws[i]);
  }
  int mism = 0, errs = 0;
  for (int i = 0; i < NTHREADS; i++) {
    pthread_join(th[i], NULL);
    if ((ws[i].mismatches || ws[i].errors) && !(mism + errs))
      printf("FAIL test_cuda_streams thread %d: %s (%d errors)\n", i, ws[i].first, ws[i].errors);
    mism += ws[i].mismatches, errs += ws[i].errors;
  }
  if (mism || errs) failed++;
  cudaError_t ce = cudaDeviceSynchronize();
  if (ce != cudaSuccess) {
    printf("FAIL test_cuda_streams: %s\n", cudaGetErrorString(ce));
    failed++;
  }
  printf("test_cuda_streams: %d threads x %d rounds x %d jobs on %d streams, %d shared plans: %d differing buffers, "
         "%d failed calls\n",
         NTHREADS, rounds, NPLANS * 2, NSTREAMS, NPLANS, mism, errs);
  for (int k = 0; k < NPLANS; k++) {
    qkvfuse_plan_destroy(plans[k]);
    for (int b = 0; b < 2; b++) job_free(&want[k][b]);
  }
  for (int i = 0; i < NSTREAMS; i++) cudaStreamDestroy(streams[i]);
  return failed ? 1 : 0;
}
