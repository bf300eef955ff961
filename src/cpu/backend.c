/* SPDX-License-Identifier: Apache-2.0 */
/* The CPU backend's driver: plan (ISA and threads) and run (tokens to
 * threads). The kernels (kernels.h) do the math.
 *
 * Threads over tokens, dynamically: threads claim token runs from a shared
 * counter and do every head of each, so a slower core takes fewer. A call
 * of fewer tokens than threads cuts each token instead: its q heads in
 * pieces, its k and v heads one more, each piece claimed alone.
 * With a paged, paged_hnd or nz cache, the k and v heads (k_out, v_out and
 * the cache rows) of a token go instead to the thread that owns the token's
 * cache slot (a hash of the slot's group: the slots whose rows may share a
 * cache line, usually the slot alone; the slot is block * block_size + row of
 * qf_token_dest, from slot_mapping or the page table alike), which does them
 * in increasing token order before it claims token runs: all writes to one
 * slot come from one thread in token order, so with duplicate slots the later
 * token wins, as on the reference (docs/API.md); the claims that follow even
 * out what the hash deals unevenly. No reduction is ever split across
 * threads, so the result does not depend on the thread count or the
 * schedule. */
#define _POSIX_C_SOURCE 200809L

#include <stdatomic.h>
#include <stdio.h>
#include <unistd.h>

#include "core/backends.h"
#include "core/dtype.h"
#include "core/error.h"
#include "cpu/cpu.h"
#include "cpu/pool.h"
#include "reference/stages.h"

/* Below this many input elements per thread, a thread costs more than it saves. */
#define QF_CPU_MIN_ELEMS_PER_THREAD (1 << 15)
/* From this many input elements a call runs on two threads (call_threads). */
#define QF_CPU_MIN_ELEMS_SPLIT (1 << 12)
/* Tokens per claim of the dynamic schedule (fewer when T is small). */
#define QF_CPU_RUN_TOKENS 16

static const char *const backend_names[QF_CPU_ISA_COUNT] = {"cpu-scalar", "cpu-avx2", "cpu-avx512", "cpu-avx512bf16"};

static size_t elem_size(const void *data, qkvfuse_dtype dt) { return data ? qkvfuse_dtype_size(dt) : 0; }

void qf_cpu_call_init(qf_cpu_call *c, const qf_cpu_kernels *k, const qf_problem *p) {
  c->p = p;
  c->parity = p->desc->rounding == QKVFUSE_ROUNDING_UNFUSED_PARITY;
  c->int_input = p->in[0].dtype == QKVFUSE_DTYPE_INT32;
  c->q_beta = c->k_beta = NULL;
  if (p->desc->q_norm) {
    k->norm_weights(p, &p->q_gamma, &p->q_beta, c->q_gamma, c->q_beta_buf);
    if (p->q_beta.data) c->q_beta = c->q_beta_buf;
  }
  if (p->desc->k_norm) {
    k->norm_weights(p, &p->k_gamma, &p->k_beta, c->k_gamma, c->k_beta_buf);
    if (p->k_beta.data) c->k_beta = c->k_beta_buf;
  }
  c->es_in = qkvfuse_dtype_size(p->in[0].dtype);
  c->es_q_out = elem_size(p->q_out.data, p->q_out.dtype);
  c->es_k_out = elem_size(p->k_out.data, p->k_out.dtype);
  c->es_v_out = elem_size(p->v_out.data, p->v_out.dtype);
  c->es_k_cache = elem_size(p->k_cache.data, p->k_cache.dtype);
  c->es_v_cache = elem_size(p->v_cache.data, p->v_cache.dtype);
}

typedef struct cpu_job {
  const qf_cpu_kernels *k;
  qf_cpu_call call;
  int by_slot;        /* with several threads, k/v of tokens with a paged/nz slot go to the slot's owner */
  int slot_shift;     /* slot >> slot_shift: the slots whose rows may share a cache line (slot_group_shift) */
  int cut;            /* a unit is a piece of a token (q pieces, then its k/v heads), not a token */
  int64_t pieces;     /* q pieces per token (cut) */
  int64_t q_step;     /* q heads per piece */
  int64_t units;      /* T units, or T * (pieces + 1) when cut */
  int64_t run;        /* units per claim of the dynamic schedule */
  atomic_llong claim; /* the first unit not yet claimed */
} cpu_job;

/* log2 of the slots that share an owner: those whose cache rows may share a
 * 64-byte line (a row's contiguous piece is `chunk` elements: a head's D, or
 * nz's 32 bytes), so no two threads write one line; otherwise every slot is
 * its own, so consecutive tokens of one page spread over the threads. */
static int slot_group_shift(const qf_problem *p) {
  int shift = 0;
  const qf_cache *caches[] = {&p->k_cache, &p->v_cache};
  for (int i = 0; i < 2; i++) {
    const int64_t piece = caches[i]->chunk * (int64_t)qkvfuse_dtype_size(caches[i]->dtype);
    int s = 0;
    while ((piece << s) < 64) s++;
    if (s > shift) shift = s;
  }
  return shift;
}

/* The thread (of n) that writes cache slot (block, row): a hash of its group. */
static int slot_owner(const qf_problem *p, int shift, int64_t block, int64_t row, int n) {
  uint64_t key = (uint64_t)(block * p->k_cache.block_size + row) >> shift;
  key ^= key >> 31;
  key *= 0x9E3779B97F4A7C15ull;
  key ^= key >> 29;
  return (int)(key % (uint64_t)n);
}

/* Whether a call on n threads gives its k and v heads to slot owners (the
 * file's comment): a cache where two tokens may share a slot (the
 * contiguous layout cannot have duplicate destinations). */
static int by_slot_owner(const qf_problem *p, int64_t n) {
  return n > 1 && p->k_cache.data && p->desc->cache_layout != QKVFUSE_CACHE_CONTIGUOUS;
}

/* Claim the next run of units: [*c0, *c1), empty at the end. */
static void claim(cpu_job *j, int64_t *c0, int64_t *c1) {
  const int64_t U = j->units;
  *c0 = (int64_t)atomic_fetch_add(&j->claim, (long long)j->run);
  if (*c0 > U) *c0 = U;
  *c1 = *c0 + j->run < U ? *c0 + j->run : U;
}

/* Unit u of a call whose tokens are cut: its token *t, its q heads [*q0,
 * *q1) and whether it is the token's k/v unit. */
static int piece_of(const cpu_job *j, int64_t u, int64_t *t, int64_t *q0, int64_t *q1) {
  const int64_t per = j->pieces + 1, k = u % per, Nq = j->call.p->Nq;
  *t = u / per;
  *q0 = k < j->pieces ? k * j->q_step : 0;
  *q1 = k < j->pieces ? (*q0 + j->q_step < Nq ? *q0 + j->q_step : Nq) : 0;
  return k == j->pieces;
}

/* Columns [c0, c1) of input part k of token t read once, a load per cache
 * line in address order (touch_input_rows). */
static void touch_cols(const qf_problem *p, int k, int64_t t, int64_t c0, int64_t c1) {
  const qf_mat *m = &p->in[k];
  if (!m->data) return;
  const size_t es = qkvfuse_dtype_size(m->dtype);
  const volatile char *row = (const char *)m->data + (size_t)(t * m->ld + c0) * es;
  for (size_t b = 0; b < (size_t)(c1 - c0) * es; b += 64) (void)row[b];
}

/* A thread's first tokens [c0, c1), which the software prefetch (run
 * QF_CPU_PREFETCH_TOKENS ahead) does not reach: their input rows read
 * once, a load per cache line in address order, so that the hardware
 * prefetcher streams them in. The kernels read 16 or more head rows in
 * lockstep, which it does not follow: without this, a decode call's rows
 * arrive a few misses at a time. */
static void touch_input_rows(const qf_problem *p, int64_t c0, int64_t c1) {
  for (int64_t t = c0; t < c1; t++)
    for (int k = 0; k < 3; k++) touch_cols(p, k, t, 0, p->in[k].cols);
}

/* The units of a call whose tokens are cut, each read as it starts
 * (touch_cols: no unit is prefetched ahead): q pieces, or a token's k and v
 * heads (with by_slot, those of a token without a cache slot only). */
static void run_pieces(cpu_job *j, int by_slot) {
  const qf_cpu_call *c = &j->call;
  const qf_problem *p = c->p;
  float cos_r[QF_MAX_HEAD_DIM], sin_r[QF_MAX_HEAD_DIM];
  int64_t c0, c1;
  for (claim(j, &c0, &c1); c0 < c1; claim(j, &c0, &c1))
    for (int64_t u = c0; u < c1; u++) {
      int64_t t, q0, q1, block = 0, row = 0;
      const int kv = piece_of(j, u, &t, &q0, &q1);
      const int dest = kv && p->k_cache.data && qf_token_dest(p, t, &block, &row);
      if (kv && by_slot && dest) continue;
      if (kv) {
        touch_cols(p, 1, t, 0, p->in[1].cols);
        touch_cols(p, 2, t, 0, p->in[2].cols);
      } else {
        touch_cols(p, 0, t, q0 * p->D, q1 * p->D);
      }
      if (p->R > 0) j->k->cos_sin(p, t, cos_r, sin_r);
      j->k->token(c, t, cos_r, sin_r, q0, q1, -1, kv, -1, dest, block, row);
    }
}

/* The dynamic part: token runs claimed from a shared counter, so a
 * thread that runs slower (a busy core) takes fewer. Every head of each
 * token, or with by_slot only the q heads (and k/v of skipped tokens). */
static void run_claimed(cpu_job *j, int by_slot) {
  const qf_cpu_call *c = &j->call;
  const qf_problem *p = c->p;
  float cos_r[QF_MAX_HEAD_DIM], sin_r[QF_MAX_HEAD_DIM];
  int64_t c0, c1, n0, n1;
  claim(j, &c0, &c1);
  touch_input_rows(p, c0, c1 - c0 < QF_CPU_PREFETCH_TOKENS ? c1 : c0 + QF_CPU_PREFETCH_TOKENS);
  while (c0 < c1) {
    claim(j, &n0, &n1); /* one run ahead, so the prefetch crosses run boundaries */
    for (int64_t t = c0; t < c1; t++) {
      int64_t ahead = t + QF_CPU_PREFETCH_TOKENS;
      if (ahead >= c1) ahead = n0 + (ahead - c1) < n1 ? n0 + (ahead - c1) : -1;
      int64_t block = 0, row = 0;
      const int dest = p->k_cache.data && qf_token_dest(p, t, &block, &row);
      const int do_kv = !by_slot || !dest;
      if (p->R > 0) j->k->cos_sin(p, t, cos_r, sin_r);
      j->k->token(c, t, cos_r, sin_r, 0, p->Nq, ahead, do_kv, do_kv ? ahead : -1, dest, block, row);
    }
    c0 = n0, c1 = n1;
  }
}

/* The owned part (by_slot only): the k and v heads of the tokens whose cache slot
 * thread i owns, in increasing token order: all writes to one slot come from
 * one thread in token order, so with duplicate slots the later token wins. */
static void run_owned(const cpu_job *j, int i, int n) {
  const qf_cpu_call *c = &j->call;
  const qf_problem *p = c->p;
  float cos_r[QF_MAX_HEAD_DIM], sin_r[QF_MAX_HEAD_DIM];
  int64_t t = 0, block = 0, row = 0, nb = 0, nr = 0;
  /* next owned token from u on (T: none); its destination in *b, *r */
#define QF_NEXT_OWNED(u, b, r) \
  for (; (u) < p->T; (u)++)    \
    if (qf_token_dest(p, (u), (b), (r)) && slot_owner(p, j->slot_shift, *(b), *(r), n) == i) break
  QF_NEXT_OWNED(t, &block, &row);
  while (t < p->T) {
    int64_t next = t + 1;
    QF_NEXT_OWNED(next, &nb, &nr);
    if (p->R > 0) j->k->cos_sin(p, t, cos_r, sin_r);
    j->k->token(c, t, cos_r, sin_r, 0, 0, -1, 1, next < p->T ? next : -1, 1, block, row);
    t = next, block = nb, row = nr;
  }
#undef QF_NEXT_OWNED
}

/* Part i of n. n is the pool's count, which can be 1 when the pool was busy
 * (qf_pool_run), so the slot rule is decided here, the same for every part.
 * The owned k/v heads come first: a thread with fewer of them then claims
 * more token runs. */
static void cpu_worker(void *ctx, int i, int n) {
  cpu_job *j = ctx;
  const int by_slot = j->by_slot && n > 1;
  if (by_slot) run_owned(j, i, n);
  if (j->cut)
    run_pieces(j, by_slot);
  else
    run_claimed(j, by_slot);
}

/* The threads a call runs on: the plan's, fewer for a small call, but two
 * from QF_CPU_MIN_ELEMS_SPLIT input elements (a decode call: its tokens cut
 * into pieces, cut_tokens). */
static int64_t call_threads(const qkvfuse_plan *plan, const qf_problem *p) {
  int64_t n = plan->num_threads;
  int64_t by_work = p->T * p->H / QF_CPU_MIN_ELEMS_PER_THREAD;
  if (by_work < 2 && p->T * p->H >= QF_CPU_MIN_ELEMS_SPLIT) by_work = 2;
  if (n > by_work) n = by_work > 1 ? by_work : 1;
  return n;
}

/* Whether a call on n threads cuts its tokens (fewer tokens than threads),
 * and into how many q pieces each (*pieces; *step q heads each): n / T
 * rounded up, of whole vectors of `lanes` heads (the kernels compute a
 * vector of heads at a time, so a part-filled one costs a full one). */
static int cut_tokens(const qf_problem *p, int64_t n, int lanes, int64_t *pieces, int64_t *step) {
  *pieces = 1, *step = p->Nq;
  if (p->T >= n || p->T < 1) return 0;
  const int64_t want = (n + p->T - 1) / p->T;
  const int64_t s = ((p->Nq + want - 1) / want + lanes - 1) / lanes * lanes;
  if (s < p->Nq) *step = s, *pieces = (p->Nq + s - 1) / s;
  return 1;
}

static qkvfuse_status cpu_run(const qkvfuse_plan *plan, const qf_problem *p, void *stream) {
  (void)stream;
  cpu_job j;
  j.k = qf_cpu_kernels_for((qf_cpu_isa)plan->isa);
  qf_cpu_call_init(&j.call, j.k, p);
  const int64_t n = call_threads(plan, p);
  j.by_slot = by_slot_owner(p, n);
  j.slot_shift = j.by_slot ? slot_group_shift(p) : 0;
  j.cut = cut_tokens(p, n, j.k->lanes, &j.pieces, &j.q_step);
  j.units = j.cut ? p->T * (j.pieces + 1) : p->T;
  j.run = p->T / (4 * n);
  if (j.run > QF_CPU_RUN_TOKENS) j.run = QF_CPU_RUN_TOKENS;
  if (j.run < 1) j.run = 1;
  atomic_init(&j.claim, 0);
  qf_pool_run(cpu_worker, &j, (int)n);
  return QKVFUSE_SUCCESS;
}

static void cpu_explain(const qkvfuse_plan *plan, const qf_problem *p, char *buf, size_t n) {
  const int lanes = qf_cpu_kernels_for((qf_cpu_isa)plan->isa)->lanes;
  const char *why = qf_cpu_direct_refusal(p, lanes);
  const long long threads = (long long)call_threads(plan, p);
  const char *owners = by_slot_owner(p, threads) ? ", k/v heads by cache-slot owner" : "";
  int64_t pieces, step;
  char cut[96] = "";
  if (cut_tokens(p, threads, lanes, &pieces, &step))
    snprintf(cut, sizeof cut, ", each token in %lld pieces (q heads in %lld, k and v heads)", (long long)pieces + 1,
             (long long)pieces);
  if (why)
    snprintf(buf, n, "%s: buffered path (not the direct path: %s), %lld thread%s%s%s", plan->backend_name, why,
             threads, threads == 1 ? "" : "s", cut, owners);
  else
    snprintf(buf, n, "%s: direct path, %lld thread%s%s%s", plan->backend_name, threads, threads == 1 ? "" : "s", cut,
             owners);
}

static int default_threads(void) {
  const long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n < 1 ? 1 : n > QF_POOL_MAX_THREADS ? QF_POOL_MAX_THREADS : (int)n;
}

qkvfuse_status qf_cpu_plan(qkvfuse_plan *plan) {
  qf_cpu_isa isa;
  QF_FORWARD(qf_cpu_isa_choose(&plan->variants, &isa));
  plan->backend = QKVFUSE_BACKEND_CPU;
  plan->isa = (int)isa;
  /* The modes that reproduce an Ascend kernel (an order-free sum of squares,
   * RoPE in bfloat16) have no vector kernels: the reference's code serves
   * them, on the calling thread. */
  if (plan->desc.rounding == QKVFUSE_ROUNDING_ASCEND_TRITON || plan->desc.rounding == QKVFUSE_ROUNDING_CANN) {
    plan->backend_name = "cpu-reference";
    plan->run = qf_reference_run;
    plan->num_threads = 1;
    return QKVFUSE_SUCCESS;
  }
  int n = plan->desc.num_threads > 0 ? plan->desc.num_threads : default_threads();
  if (n > QF_POOL_MAX_THREADS) n = QF_POOL_MAX_THREADS;
  plan->backend_name = backend_names[isa];
  plan->run = cpu_run;
  plan->explain = cpu_explain;
  plan->num_threads = qf_pool_reserve(n);
  return QKVFUSE_SUCCESS;
}

const qf_unfused_kernels *qf_cpu_unfused_kernels(const qkvfuse_plan *plan) {
  const qf_cpu_kernels *k = plan->backend == QKVFUSE_BACKEND_CPU ? qf_cpu_kernels_for((qf_cpu_isa)plan->isa) : NULL;
  return k ? &k->unfused : NULL;
}
