/* SPDX-License-Identifier: Apache-2.0 */
/* Concurrency (qkvfuse.h: plans are immutable, qkvfuse_run may be
 * called on one plan from many threads): 8 threads share 6 plans (the four
 * base specs and two random ones) and run them in a different random order
 * each, on their own buffers, interleaved with calls whose data is bad
 * (position or slot out of range) or whose arguments are bad (a NULL q_out).
 * Every successful run must be byte-identical to the single-threaded run of
 * its case (itself checked against the oracle); every failing run must return
 * the single-threaded status and message, on its own thread's
 * qkvfuse_last_error(), with nothing written.
 *   test_concurrency [--backend reference,auto,cuda] [--threads N] [--rounds R] */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bases.h"
#include "fp.h"
#include "harness.h"
#include "tview.h"

#define NPLANS 6
#define MAX_THREADS 32

typedef struct job_spec {
  tk_spec sp;
  uint64_t seed;
  int bad;                  /* 0 valid, 1 bad data (CPU: OUT_OF_RANGE), 2 q_out NULL */
  qkvfuse_status want_status;
  char want_msg[512];
  uint8_t *want[TK_NSLOT + 1]; /* single-threaded result bytes */
} job_spec;

static job_spec specs[NPLANS][3];
static qkvfuse_plan *plans[NPLANS];
static qkvfuse_backend backend;
static const tk_device *dev;
static int rounds = 3;

typedef struct worker_state {
  int index;
  int mismatches, bad_status, bad_msg;
  char first[512];
} worker_state;

/* Apply job kind `bad` to a freshly built case (same seed: same bytes). */
static void make_bad(tk_case *c, int bad) {
  if (bad != 1) return;
  tk_view *w = c->view[TK_SLOT_MAPPING].present    ? &c->view[TK_SLOT_MAPPING]
               : c->view[TK_BATCH_INDICES].present ? &c->view[TK_BATCH_INDICES]
                                                   : &c->view[TK_POSITIONS];
  if (!w->present) return;
  /* element 0 far outside any table: its low 32 bits are 5, a valid index */
  int64_t v = ((int64_t)1 << 32) + 5;
  uint8_t *p = c->buf[w->buf].init + w->off * (int64_t)tk_size(w->t.dtype);
  if (w->t.dtype == QKVFUSE_DTYPE_INT64) memcpy(p, &v, 8);
  else {
    int32_t x = -9;
    memcpy(p, &x, 4);
  }
}

/* Run job (plan k, kind b) on a case; 0 ok, else records the failure. */
static qkvfuse_status run_job(int k, int b, tk_case *c, char *msg, size_t msglen) {
  qkvfuse_tensor tens[TK_NSLOT];
  qkvfuse_args a;
  tk_case_upload(c, dev);
  tk_case_args(c, TK_AT_DEVICE, tens, &a);
  if (b == 2) a.q_out = NULL;
  qkvfuse_status st = qkvfuse_run(plans[k], &a, dev->stream);
  snprintf(msg, msglen, "%s", qkvfuse_last_error());
  tk_case_download(c);
  return st;
}

static void *worker(void *arg) {
  worker_state *w = (worker_state *)arg;
  tk_rng r;
  tk_rng_seed(&r, 0xC0C0 + (uint64_t)w->index);
  tk_case cases[NPLANS][3];
  for (int k = 0; k < NPLANS; k++)
    for (int b = 0; b < 3; b++) {
      tk_case_build(&cases[k][b], &specs[k][b].sp, specs[k][b].seed);
      make_bad(&cases[k][b], specs[k][b].bad);
    }
  int order[NPLANS * 3];
  for (int round = 0; round < rounds; round++) {
    for (int i = 0; i < NPLANS * 3; i++) order[i] = i;
    for (int i = NPLANS * 3 - 1; i > 0; i--) { /* a different order on every thread and round */
      int j = (int)tk_rng_range(&r, 0, i), x = order[i];
      order[i] = order[j], order[j] = x;
    }
    for (int i = 0; i < NPLANS * 3; i++) {
      const int k = order[i] / 3, b = order[i] % 3;
      job_spec *js = &specs[k][b];
      tk_case *c = &cases[k][b];
      char msg[512];
      qkvfuse_status st = run_job(k, b, c, msg, sizeof msg);
      if (st != js->want_status) {
        if (!w->bad_status++)
          snprintf(w->first, sizeof w->first, "plan %d job %d: status %s, single-threaded %s", k, b,
                   qkvfuse_status_string(st), qkvfuse_status_string(js->want_status));
        continue;
      }
      if (strcmp(msg, js->want_msg)) {
        if (!w->bad_msg++)
          snprintf(w->first, sizeof w->first, "plan %d job %d: last error \"%.200s\", single-threaded \"%.200s\"", k, b,
                   msg, js->want_msg);
      }
      for (int q = 0; q <= TK_NSLOT; q++)
        if (c->buf[q].bytes && memcmp(c->buf[q].got, js->want[q], c->buf[q].bytes)) {
          if (!w->mismatches++)
            snprintf(w->first, sizeof w->first, "plan %d job %d: buffer of %s differs from the single-threaded run", k,
                     b, q < TK_NSLOT ? tk_slot_name[q] : "error_flags");
        }
    }
  }
  for (int k = 0; k < NPLANS; k++)
    for (int b = 0; b < 3; b++) tk_case_free(&cases[k][b]);
  return NULL;
}

/* Specs, single-threaded reference results, plans. 0 on success. */
static int prepare(void) {
  static const int bases[4] = {TK_BASE_A, TK_BASE_B, TK_BASE_C, TK_BASE_D};
  tk_rng r;
  tk_rng_seed(&r, 0x5EC0);
  for (int k = 0; k < NPLANS; k++) {
    tk_spec sp;
    if (k < 4) {
      tk_base_spec(bases[k], &sp);
      if (k != 1) sp.T = 64, sp.blocks = 0; /* enough tokens to split, when a backend has threads */
      tk_spec_fixup(&sp);
    } else {
      tk_limits lim = {1 << 15, 0};
      tk_spec_random(&sp, &r, &lim);
    }
    for (int b = 0; b < 3; b++) {
      job_spec *js = &specs[k][b];
      js->sp = sp;
      js->seed = 0xAB00 + (uint64_t)k;
      js->bad = b;
      tk_case c;
      tk_case_build(&c, &sp, js->seed);
      make_bad(&c, b);
      if (b == 0) { /* the valid job, against the oracle first */
        tk_stats st;
        memset(&st, 0, sizeof st);
        if (tk_check_case(&c, backend, tk_run_core, NULL, &st) != TK_PASS) {
          printf("FAIL test_concurrency backend=%s plan %d single-threaded: %s\n", tk_backend_str(backend), k, st.first);
          tk_case_free(&c);
          return -1;
        }
        qkvfuse_desc d = c.desc;
        d.backend = backend, d.device_type = dev->type, d.device_id = dev->id;
        if (qkvfuse_plan_create(&d, &plans[k]) != QKVFUSE_SUCCESS) return -1;
      }
      js->want_status = run_job(k, b, &c, js->want_msg, sizeof js->want_msg);
      /* job 1's status depends on the case (T = 0, no index tensor: valid); the others' do not */
      if ((b == 0 && js->want_status != QKVFUSE_SUCCESS) || (b == 2 && js->want_status != QKVFUSE_ERROR_NULL_POINTER)) {
        printf("FAIL test_concurrency plan %d job %d: single-threaded status %s\n", k, b,
               qkvfuse_status_string(js->want_status));
        tk_case_free(&c);
        return -1;
      }
      for (int q = 0; q <= TK_NSLOT; q++)
        if (c.buf[q].bytes) {
          js->want[q] = (uint8_t *)malloc(c.buf[q].bytes);
          memcpy(js->want[q], c.buf[q].got, c.buf[q].bytes);
          if (b > 0 && backend != QKVFUSE_BACKEND_CUDA && js->want_status != QKVFUSE_SUCCESS &&
              memcmp(c.buf[q].got, c.buf[q].init, c.buf[q].bytes) && q != TK_FLAGS_BUF) {
            printf("FAIL test_concurrency plan %d job %d: a failing call wrote %s\n", k, b, tk_slot_name[q]);
            tk_case_free(&c);
            return -1;
          }
        }
      tk_case_free(&c);
    }
  }
  return 0;
}

int main(int argc, char **argv) {
  qkvfuse_backend bes[8];
  const int nbe = tk_backends_from(argc, argv, bes, 8);
  int nthreads = (int)tk_arg_u64(argc, argv, "--threads", NULL, 8);
  rounds = (int)tk_arg_u64(argc, argv, "--rounds", NULL, 3);
  if (nthreads > MAX_THREADS) nthreads = MAX_THREADS;
  int failed = 0, ran = 0;
  for (int bi = 0; bi < nbe; bi++) {
    backend = bes[bi];
    dev = tk_device_for_backend(backend);
    if (!dev) continue;
    ran++;
    memset(specs, 0, sizeof specs);
    memset(plans, 0, sizeof plans);
    if (prepare()) {
      failed++;
    } else {
      pthread_t th[MAX_THREADS];
      static worker_state ws[MAX_THREADS];
      for (int i = 0; i < nthreads; i++) {
        memset(&ws[i], 0, sizeof ws[i]);
        ws[i].index = i;
        pthread_create(&th[i], NULL, worker, &ws[i]);
      }
      int mism = 0, bst = 0, bmsg = 0;
      for (int i = 0; i < nthreads; i++) {
        pthread_join(th[i], NULL);
        if ((ws[i].mismatches || ws[i].bad_status || ws[i].bad_msg) && !(mism + bst + bmsg))
          printf("FAIL test_concurrency backend=%s thread %d: %s\n", tk_backend_str(backend), i, ws[i].first);
        mism += ws[i].mismatches, bst += ws[i].bad_status, bmsg += ws[i].bad_msg;
      }
      if (mism + bst + bmsg) failed++;
      printf("test_concurrency[%s]: %d threads x %d rounds x %d jobs on %d shared plans: %d differing buffers, %d "
             "wrong statuses, %d wrong messages\n",
             tk_backend_str(backend), nthreads, rounds, NPLANS * 3, NPLANS, mism, bst, bmsg);
    }
    for (int k = 0; k < NPLANS; k++) {
      qkvfuse_plan_destroy(plans[k]);
      for (int b = 0; b < 3; b++)
        for (int q = 0; q <= TK_NSLOT; q++) free(specs[k][b].want[q]);
    }
  }
  if (!ran) {
    printf("test_concurrency: no device for the requested backends, skipped\n");
    return TK_SKIP;
  }
  return failed ? 1 : 0;
}
