/* SPDX-License-Identifier: Apache-2.0 */
/* Thread-safety smoke test (qkvfuse.h: plans are immutable; qkvfuse_run may
 * be called on one plan from many threads; qkvfuse_last_error is per thread):
 *   - 6 threads run one shared plan, each on its own buffers, several times;
 *     every result is byte-identical to a single-threaded run;
 *   - an error on one thread does not show in another thread's last error,
 *     nor does another thread's success clear it.
 *   test_threads [--backend reference,auto] */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bases.h"
#include "harness.h"

#define NTHREADS 6
#define ITERS 4

typedef struct job {
  const qkvfuse_plan *plan;
  tk_case c;
  uint8_t *want[TK_NSLOT + 1];
  int mismatches, errors;
} job;

static void *worker(void *arg) {
  job *j = (job *)arg;
  for (int it = 0; it < ITERS; it++) {
    tk_case_upload(&j->c, j->c.dev);
    qkvfuse_tensor tens[TK_NSLOT];
    qkvfuse_args a;
    tk_case_args(&j->c, TK_AT_DEVICE, tens, &a);
    if (qkvfuse_run(j->plan, &a, j->c.dev->stream) != QKVFUSE_SUCCESS || qkvfuse_last_error()[0]) j->errors++;
    tk_case_download(&j->c);
    for (int b = 0; b <= TK_NSLOT; b++)
      if (j->c.buf[b].bytes && memcmp(j->c.buf[b].got, j->want[b], j->c.buf[b].bytes)) j->mismatches++;
  }
  return NULL;
}

/* ---- per-thread last error ---- */
static pthread_barrier_t bar;
static int le_fail;
static const qkvfuse_plan *le_plan;
static qkvfuse_args le_args;

static void *erring(void *arg) {
  (void)arg;
  qkvfuse_args bad = QKVFUSE_ARGS_INIT; /* qkv NULL */
  qkvfuse_run(le_plan, &bad, NULL);
  char mine[512];
  snprintf(mine, sizeof mine, "%s", qkvfuse_last_error());
  if (!mine[0]) le_fail++;
  pthread_barrier_wait(&bar); /* the other thread now succeeds */
  pthread_barrier_wait(&bar);
  if (strcmp(mine, qkvfuse_last_error())) le_fail++; /* still this thread's message */
  return NULL;
}

static void *succeeding(void *arg) {
  (void)arg;
  pthread_barrier_wait(&bar);
  if (qkvfuse_last_error()[0]) le_fail++; /* the other thread's error is not ours */
  if (qkvfuse_run(le_plan, &le_args, NULL) != QKVFUSE_SUCCESS || qkvfuse_last_error()[0]) le_fail++;
  pthread_barrier_wait(&bar);
  return NULL;
}

int main(int argc, char **argv) {
  qkvfuse_backend bes[8];
  int nbe = tk_backends_from(argc, argv, bes, 8), failed = 0, ran = 0;
  for (int bi = 0; bi < nbe; bi++) {
    const tk_device *dev = tk_device_for_backend(bes[bi]);
    if (!dev) continue;
    ran++;
    tk_spec s;
    tk_base_spec(TK_BASE_A, &s);
    s.T = 300, s.blocks = 0, s.q_out_dt = QKVFUSE_DTYPE_FLOAT32;
    tk_spec_fixup(&s);
    tk_case ref;
    tk_case_build(&ref, &s, 4242);
    tk_stats st;
    memset(&st, 0, sizeof st);
    if (tk_check_case(&ref, bes[bi], tk_run_core, NULL, &st) != TK_PASS) { /* single-threaded, checked */
      printf("FAIL test_threads backend=%s: single-threaded run: %s\n", tk_backend_str(bes[bi]), st.first);
      failed++;
      tk_case_free(&ref);
      continue;
    }
    qkvfuse_desc d = ref.desc;
    d.backend = bes[bi];
    d.device_type = dev->type;
    d.device_id = dev->id;
    qkvfuse_plan *plan = NULL;
    qkvfuse_plan_create(&d, &plan);
    static job jobs[NTHREADS];
    pthread_t th[NTHREADS];
    for (int k = 0; k < NTHREADS; k++) {
      memset(&jobs[k], 0, sizeof jobs[k]);
      jobs[k].plan = plan;
      tk_case_build(&jobs[k].c, &s, 4242);
      jobs[k].c.dev = dev;
      for (int b = 0; b <= TK_NSLOT; b++) jobs[k].want[b] = ref.buf[b].got;
      tk_case_upload(&jobs[k].c, dev);
    }
    for (int k = 0; k < NTHREADS; k++) pthread_create(&th[k], NULL, worker, &jobs[k]);
    int mism = 0, errs = 0;
    for (int k = 0; k < NTHREADS; k++) {
      pthread_join(th[k], NULL);
      mism += jobs[k].mismatches, errs += jobs[k].errors;
    }
    if (mism || errs) {
      printf("FAIL test_threads backend=%s: %d buffers differ from the single-threaded run, %d failed calls\n",
             tk_backend_str(bes[bi]), mism, errs);
      failed++;
    }
    /* last error is thread-local */
    qkvfuse_tensor tens[TK_NSLOT];
    tk_case_upload(&jobs[0].c, dev);
    tk_case_args(&jobs[0].c, TK_AT_DEVICE, tens, &le_args);
    le_plan = plan;
    le_fail = 0;
    pthread_barrier_init(&bar, NULL, 2);
    pthread_t a, b;
    pthread_create(&a, NULL, erring, NULL);
    pthread_create(&b, NULL, succeeding, NULL);
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    pthread_barrier_destroy(&bar);
    if (le_fail) {
      printf("FAIL test_threads backend=%s: qkvfuse_last_error is not per thread (%d checks failed)\n",
             tk_backend_str(bes[bi]), le_fail);
      failed++;
    }
    for (int k = 0; k < NTHREADS; k++) tk_case_free(&jobs[k].c);
    qkvfuse_plan_destroy(plan);
    tk_case_free(&ref);
    printf("test_threads[%s]: %d threads x %d runs of one plan, %d mismatching buffers; last-error isolation %s\n",
           tk_backend_str(bes[bi]), NTHREADS, ITERS, mism, le_fail ? "BROKEN" : "ok");
  }
  return failed ? 1 : ran ? 0 : TK_SKIP;
}
