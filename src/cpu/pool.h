/* SPDX-License-Identifier: Apache-2.0 */
/* A process-wide pool of worker threads for the CPU backend.
 *
 * Workers are created at plan time (qf_pool_reserve), never inside a run,
 * and shared by every plan: the named one-call operators plan on the stack
 * and must not create threads per call. One job runs at a time; a run that
 * finds the pool busy (another thread's call in flight) runs on its calling
 * thread alone, which is correct because the backend's results do not depend
 * on the partition. Workers spin briefly after a job, then sleep. */
#ifndef QKVFUSE_CPU_POOL_H
#define QKVFUSE_CPU_POOL_H

#ifdef __cplusplus
extern "C" {
#endif

#define QF_POOL_MAX_THREADS 256

/* Part `index` of `count` of a job. */
typedef void (*qf_pool_fn)(void *ctx, int index, int count);

/* Make `threads` threads available (threads - 1 workers plus the caller).
 * @return how many are available: `threads`, or fewer if creating a worker
 * failed (at least 1). */
int qf_pool_reserve(int threads);

/* Run fn(ctx, i, count) for i in [0, count): part 0 on the calling thread,
 * the others on workers, and return when all have finished. count is clamped
 * to the workers available; if the pool is busy, fn(ctx, 0, 1) runs instead. */
void qf_pool_run(qf_pool_fn fn, void *ctx, int count);

#ifdef __cplusplus
}
#endif

#endif /* QKVFUSE_CPU_POOL_H */
