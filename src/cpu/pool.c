/* SPDX-License-Identifier: Apache-2.0 */
/* The CPU backend's worker threads (see pool.h).
 *
 * Hand-off: the caller publishes the job, then bumps each participating
 * worker's ticket (release); a worker that sees its ticket change (acquire)
 * runs its part and decrements `pending`. The flags that decide whether a
 * sleeper must be woken (sleepers, caller_asleep) are read and written
 * sequentially consistent against the tickets and `pending`, so a wake-up is
 * never lost.
 *
 * Workers are detached and live until the process ends; after fork() the
 * child's pool is empty and grows again at its next plan. Waits spin for a short while, then
 * sleep on a condition variable, so back-to-back calls (one per layer) skip
 * the futex round trip while an idle process burns no CPU. */
#define _POSIX_C_SOURCE 200809L /* pthreads under -std=c11 */

#include "cpu/pool.h"

#include <pthread.h>
#include <stdatomic.h>

#define SPIN_WORKER 4000  /* pause iterations a worker polls for the next job before sleeping (0.1-0.3 ms) */
#define SPIN_CALLER 20000 /* pause iterations the caller polls for the workers (about a millisecond) */

typedef struct worker {
  atomic_uint ticket; /* bumped by the caller for each job this worker takes part in */
  unsigned seen;      /* worker-private: the last ticket served */
  int index;
} worker;

static struct {
  pthread_mutex_t mu; /* guards creation and the sleeping side of both waits */
  pthread_cond_t wake, done;
  pthread_mutex_t submit; /* one job at a time */
  int nworkers;
  worker w[QF_POOL_MAX_THREADS];
  /* the current job, written before the tickets are bumped */
  qf_pool_fn fn;
  void *ctx;
  int count;
  atomic_int pending;       /* parts not yet finished */
  atomic_int sleepers;      /* workers asleep (or going to sleep) on `wake` */
  atomic_int caller_asleep; /* the caller sleeps on `done` */
} pool = {.mu = PTHREAD_MUTEX_INITIALIZER,
          .wake = PTHREAD_COND_INITIALIZER,
          .done = PTHREAD_COND_INITIALIZER,
          .submit = PTHREAD_MUTEX_INITIALIZER};

static inline void relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

static void finish_part(void) {
  /* seq_cst pairs with the caller's store of caller_asleep and load of pending */
  if (atomic_fetch_sub(&pool.pending, 1) == 1 && atomic_load(&pool.caller_asleep)) {
    pthread_mutex_lock(&pool.mu);
    pthread_cond_signal(&pool.done);
    pthread_mutex_unlock(&pool.mu);
  }
}

static void *worker_main(void *arg) {
  worker *w = arg;
  for (;;) {
    unsigned t = atomic_load_explicit(&w->ticket, memory_order_acquire);
    for (int i = 0; t == w->seen && i < SPIN_WORKER; i++) {
      relax();
      t = atomic_load_explicit(&w->ticket, memory_order_acquire);
    }
    if (t == w->seen) {
      pthread_mutex_lock(&pool.mu);
      atomic_fetch_add(&pool.sleepers, 1);
      /* seq_cst: pairs with the caller's ticket bump and load of sleepers */
      while ((t = atomic_load(&w->ticket)) == w->seen) pthread_cond_wait(&pool.wake, &pool.mu);
      atomic_fetch_sub(&pool.sleepers, 1);
      pthread_mutex_unlock(&pool.mu);
    }
    w->seen = t;
    pool.fn(pool.ctx, w->index, pool.count);
    finish_part();
  }
  return NULL;
}

/* fork(): a child has none of the workers; it starts over with an empty pool
 * (no job can be in flight: prepare holds `submit` across the fork). */
static void fork_prepare(void) {
  pthread_mutex_lock(&pool.submit);
  pthread_mutex_lock(&pool.mu);
}
static void fork_parent(void) {
  pthread_mutex_unlock(&pool.mu);
  pthread_mutex_unlock(&pool.submit);
}
static void fork_child(void) {
  pthread_mutex_init(&pool.mu, NULL);
  pthread_mutex_init(&pool.submit, NULL);
  pthread_cond_init(&pool.wake, NULL);
  pthread_cond_init(&pool.done, NULL);
  for (int i = 0; i < pool.nworkers; i++) atomic_store(&pool.w[i].ticket, 0u);
  pool.nworkers = 0;
  atomic_store(&pool.pending, 0);
  atomic_store(&pool.sleepers, 0);
  atomic_store(&pool.caller_asleep, 0);
}
static void register_fork_handlers(void) { pthread_atfork(fork_prepare, fork_parent, fork_child); }

int qf_pool_reserve(int threads) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  if (threads > QF_POOL_MAX_THREADS) threads = QF_POOL_MAX_THREADS;
  if (threads > 1) pthread_once(&once, register_fork_handlers);
  pthread_mutex_lock(&pool.mu);
  while (pool.nworkers < threads - 1) {
    worker *w = &pool.w[pool.nworkers];
    w->index = pool.nworkers + 1;
    w->seen = atomic_load(&w->ticket);
    pthread_attr_t attr;
    pthread_t tid;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    const int failed = pthread_create(&tid, &attr, worker_main, w) != 0;
    pthread_attr_destroy(&attr);
    if (failed) break;
    pool.nworkers++;
  }
  const int available = pool.nworkers + 1;
  pthread_mutex_unlock(&pool.mu);
  return available < threads ? available : threads;
}

void qf_pool_run(qf_pool_fn fn, void *ctx, int count) {
  if (count > 1) {
    pthread_mutex_lock(&pool.mu);
    if (count > pool.nworkers + 1) count = pool.nworkers + 1;
    pthread_mutex_unlock(&pool.mu);
  }
  if (count <= 1 || pthread_mutex_trylock(&pool.submit) != 0) {
    fn(ctx, 0, 1);
    return;
  }
  pool.fn = fn;
  pool.ctx = ctx;
  pool.count = count;
  atomic_store_explicit(&pool.pending, count - 1, memory_order_relaxed);
  for (int i = 1; i < count; i++) atomic_fetch_add(&pool.w[i - 1].ticket, 1);
  if (atomic_load(&pool.sleepers) > 0) {
    pthread_mutex_lock(&pool.mu);
    pthread_cond_broadcast(&pool.wake);
    pthread_mutex_unlock(&pool.mu);
  }
  fn(ctx, 0, count);
  for (int i = 0; atomic_load_explicit(&pool.pending, memory_order_acquire) > 0 && i < SPIN_CALLER; i++) relax();
  if (atomic_load_explicit(&pool.pending, memory_order_acquire) > 0) {
    pthread_mutex_lock(&pool.mu);
    atomic_store(&pool.caller_asleep, 1);
    while (atomic_load(&pool.pending) > 0) pthread_cond_wait(&pool.done, &pool.mu);
    atomic_store(&pool.caller_asleep, 0);
    pthread_mutex_unlock(&pool.mu);
  }
  pthread_mutex_unlock(&pool.submit);
}
