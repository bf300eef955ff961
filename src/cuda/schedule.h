/* SPDX-License-Identifier: Apache-2.0 */
/* The schedule of the CUDA kernels: how a launch is cut into blocks. The
 * host side (encoder) computes the grid and the schedule fields of each
 * kernel's parameters (params.h); the prefill form's blocks read theirs
 * (qf_cu_prefill_params) back with qf_cuda_schedule_block (decoder). Both
 * live here side by side, in C (host and device code under nvcc), so that
 * tests/test_cuda_plan.c runs the decoder over the encoder's output on the
 * CPU and checks that the blocks of a grid cover every (item, token run)
 * exactly once.
 *
 * Prefill form. An item is (token, up to heads_per_item heads of one kind:
 * q, k or v); a token run is prefill_groups_per_block consecutive tokens, one
 * per group. The grid's first blocks are the resident ones: each keeps its
 * item for the launch and walks that item's runs below resident_runs, from
 * its index among the item's blocks with a stride of their number
 * (blocks_per_item of its kind). Resident blocks are dealt in rounds: round
 * r has one block of every item whose kind has more than r blocks per item,
 * q items first, then k, then v, so that neighbouring blocks hold different
 * items; rounds come in up to three segments of equal width (segment_end:
 * the segment's last round + 1; segment_width: its blocks per round). The
 * late blocks after them take the remaining runs in pieces of late_piece
 * runs, piece by piece, every item's in turn, or (kinds: the kernel of a
 * call with a quantized cache) kind by kind, the longest first: k's, v's,
 * then q's. The hardware starts each late block as a resident block ends,
 * so the multiprocessors that move their bytes faster take more of them. */
#ifndef QKVFUSE_CUDA_SCHEDULE_H
#define QKVFUSE_CUDA_SCHEDULE_H

#include <stdbool.h>
#include <stdint.h>

#include "cuda/params.h"

#if defined(__CUDACC__)
#define QF_SCHEDULE_HD static __host__ __device__ __forceinline__
#else
#define QF_SCHEDULE_HD static inline
#endif
#if defined(__CUDACC__)
#define QF_SCHEDULE_MIN(a, b) min(a, b)
#else
#define QF_SCHEDULE_MIN(a, b) ((a) < (b) ? (a) : (b))
#endif
#if defined(__CUDA_ARCH__)
#define QF_SCHEDULE_UNROLL _Pragma("unroll")
#else
#define QF_SCHEDULE_UNROLL
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* The prefill form's costs of a token run, in tenths of one q head's run: a
 * k run of a quantized cache also quantizes; a run's per-token part
 * (position, slot, cos/sin, the loop) is about half one head's. */
enum { QF_SCHEDULE_RUN_COST = 10, QF_SCHEDULE_QUANTIZED_K_COST = 14, QF_SCHEDULE_TOKEN_COST = 5 };

/* n / d as a multiply-high and a shift, for d >= 1 and n < 2^31:
 * (umulhi(n, mul) + n) >> shift (device/divide.cuh: div_fixed). */
static inline qf_cu_div qf_cuda_divisor(uint32_t d) {
  int shift = 0;
  while (((uint64_t)1 << shift) < d) shift++;
  const uint64_t mul = (((uint64_t)1 << 32) * (((uint64_t)1 << shift) - d)) / d + 1;
  qf_cu_div q = {d, (uint32_t)mul, shift};
  return q;
}

/* The fewest blocks per item of each kind (cnt[k]) whose blocks finish within
 * `bound`, a block of kind k walking `runs` / cnt[k] runs (rounded up) at
 * cost[k] each; whether they fit in `resident` blocks. */
static inline bool qf_schedule_fits(int64_t runs, const int32_t *items, const int64_t *cost, int64_t resident,
                                    int64_t bound, int64_t *cnt) {
  int64_t total = 0;
  for (int k = 0; k < 3; k++) {
    cnt[k] = 1;
    if (!items[k]) continue;
    const int64_t m = bound / cost[k]; /* runs a block of kind k may walk */
    if (m < 1) return false;
    cnt[k] = (runs + m - 1) / m;
    total += items[k] * cnt[k];
  }
  return total <= resident;
}

/* The prefill form's blocks per item of each kind (n[k]; items[k] items of
 * kind k, each of `runs` token runs, a run of kind k costing cost[k] > 0),
 * for `resident` resident blocks. A block's time is its run count,
 * ceil(runs / n[k]), times cost[k], and the call's time the largest of
 * these; a block walks few runs, so the rounding up decides and counts in
 * proportion to cost are not the best. So: the smallest time whose counts
 * fit the resident blocks (binary search: the count falls as the time
 * grows); then the blocks left go in whole rounds, one more block for every
 * item, while they fit (more blocks in flight, the same largest time; equal
 * counts stay equal, which run faster than unequal ones). Where even one
 * block per item does not fit, one block each. */
static inline void qf_cuda_schedule_blocks_per_item(int64_t runs, const int32_t *items, const int64_t *cost,
                                                    int64_t resident, int64_t *n) {
  int64_t lo = 1, hi = 0;
  for (int k = 0; k < 3; k++) hi = cost[k] * runs > hi ? cost[k] * runs : hi;
  if (!qf_schedule_fits(runs, items, cost, resident, hi, n)) {
    n[0] = n[1] = n[2] = 1;
    return;
  }
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    int64_t cnt[3];
    if (qf_schedule_fits(runs, items, cost, resident, mid, cnt))
      hi = mid;
    else
      lo = mid + 1;
  }
  qf_schedule_fits(runs, items, cost, resident, lo, n);
  int64_t used = 0, round = 0;
  for (int k = 0; k < 3; k++) used += items[k] * n[k], round += items[k];
  for (;;) { /* whole rounds: one more block for every item */
    bool room = used + round <= resident;
    for (int k = 0; k < 3; k++) room = room && (!items[k] || n[k] < runs);
    if (!room) break;
    for (int k = 0; k < 3; k++) n[k] += items[k] ? 1 : 0;
    used += round;
  }
}

/* The prefill form's heads per item and blocks per item (n[k]; heads[k] heads
 * of kind k, 0 where the kind has no work; `runs` token runs; `resident`
 * resident blocks): items of heads_per_item heads (the most that fill the
 * device) or of heads_per_item / 2 (at least 2), whichever's longest block is
 * predicted to take less time (ties: heads_per_item), with the blocks per
 * item of qf_cuda_schedule_blocks_per_item. A block's predicted time is its
 * runs times their cost (QF_SCHEDULE_QUANTIZED_K_COST for a quantized k run
 * where every k item is full) times (QF_SCHEDULE_TOKEN_COST + 10 nh), nh
 * the heads of its item. Half the heads per item double the runs to deal,
 * so the last round is less uneven where a block walks few of them. A call
 * with a quantized cache keeps heads_per_item: its halved items run slower
 * than this model predicts. Returns the heads per item. */
static inline int qf_cuda_schedule_heads_per_item(int64_t runs, const int64_t *heads, int heads_per_item, int k_quant,
                                                  int quantized_cache, int64_t resident, int64_t *n) {
  int64_t best = -1;
  int best_h = heads_per_item;
  for (int c = 0; c < 2; c++) {
    const int h = c ? heads_per_item / 2 : heads_per_item;
    if (c && (h < 2 || quantized_cache)) break;
    int32_t items[3];
    for (int k = 0; k < 3; k++) items[k] = (int32_t)((heads[k] + h - 1) / h);
    const int64_t cost[3] = {QF_SCHEDULE_RUN_COST,
                             k_quant && heads[1] % h == 0 ? QF_SCHEDULE_QUANTIZED_K_COST : QF_SCHEDULE_RUN_COST,
                             QF_SCHEDULE_RUN_COST};
    int64_t m[3];
    qf_cuda_schedule_blocks_per_item(runs, items, cost, resident, m);
    int64_t longest = 0;
    for (int k = 0; k < 3; k++) {
      const int64_t nh = heads[k] < h ? heads[k] : h;
      const int64_t tk = items[k] ? (runs + m[k] - 1) / m[k] * cost[k] * (QF_SCHEDULE_TOKEN_COST + 10 * nh) : 0;
      longest = tk > longest ? tk : longest;
    }
    if (best < 0 || longest < best) best = longest, best_h = h, n[0] = m[0], n[1] = m[1], n[2] = m[2];
  }
  return best_h;
}

/* The prefill form's late blocks for `runs` token runs of `items` items on
 * `resident` resident blocks: the last *late_runs runs of every item, in
 * pieces of *piece runs, one block each. A static split ends when the
 * slowest multiprocessor does; the pieces let the faster ones take more.
 * A quarter of the runs (rounded down to whole pieces) where a resident
 * block would walk at least 3 (`per`: runs x items / resident; with fewer,
 * the second wave of blocks costs more than the balance gains), none below;
 * pieces of one run, or of two where it would walk 16 or more (a block start
 * is then the larger cost). With a quantized cache, where a resident block
 * would walk 4 to 15 runs, a tenth of them: fewer pieces, each of which
 * pays a block start, balance as well once the longest start first. */
static inline void qf_cuda_schedule_late_blocks(int64_t runs, int64_t items, int64_t resident, int quantized_cache,
                                                int64_t *late_runs, int64_t *piece) {
  const int64_t per = resident > 0 ? runs * items / resident : 0;
  *piece = per >= 16 ? 2 : 1;
  if (quantized_cache && per >= 4 && per < 16)
    *late_runs = runs / 10;
  else
    *late_runs = per >= 3 ? runs / 4 / *piece * *piece : 0;
}

/* The prefill form's schedule fields of *P for `runs` token runs, n[k]
 * blocks per item of kind k (1 <= n[k]; P->items set) and late_runs runs
 * taken by late blocks of `piece` runs; returns the grid's blocks. */
static inline int64_t qf_cuda_schedule_prefill_grid(qf_cu_prefill_params *P, int64_t runs, const int64_t *n,
                                                    int64_t late_runs, int64_t piece) {
  const int64_t items = (int64_t)P->items[0] + P->items[1] + P->items[2];
  int64_t grid = 0;
  for (int k = 0; k < 3; k++) {
    P->blocks_per_item[k] = (int32_t)n[k];
    grid += P->items[k] * n[k];
  }
  P->runs = (uint32_t)runs;
  P->resident_blocks = (int32_t)grid;
  P->resident_runs = (uint32_t)(runs - late_runs);
  P->late_piece = (int32_t)piece;
  if (late_runs) grid += items * (late_runs / piece);
  /* the rounds' segments: the distinct counts in ascending order; a
     segment's rounds have every item of the kinds with at least its count */
  int64_t prev = 0;
  for (int s = 0; s < 3; s++) {
    int64_t next = 0;
    for (int k = 0; k < 3; k++)
      if (P->items[k] && n[k] > prev && (next == 0 || n[k] < next)) next = n[k];
    int64_t width = 0;
    for (int k = 0; k < 3; k++)
      if (next && n[k] >= next) width += P->items[k];
    P->segment_end[s] = (int32_t)(next ? next : prev);
    P->segment_width[s] = (int32_t)width;
    if (next) prev = next;
  }
  return grid;
}

/* A block's item and token runs in the prefill form (qf_cuda_schedule_block). */
typedef struct qf_prefill_item {
  int kind, h0, nh;            /* kind (0 q, 1 k, 2 v), first head, heads */
  unsigned run, stride, end;   /* the first run, the run stride, the run bound */
} qf_prefill_item;

/* Block b's item and runs (the schedule fields of P: the encoder's above);
 * kinds: late blocks dealt kind by kind (a call with a quantized cache). In
 * C++ kinds is a template argument, a constant before the kernel inlines the
 * function (as a runtime argument it reorders a few of the kernels'
 * instructions). */
#ifdef __cplusplus
}
template <bool kinds>
QF_SCHEDULE_HD qf_prefill_item qf_cuda_schedule_block(const qf_cu_prefill_params *P, unsigned b) {
#else
QF_SCHEDULE_HD qf_prefill_item qf_cuda_schedule_block(const qf_cu_prefill_params *P, unsigned b, bool kinds) {
#endif
  unsigned round = 0, j = 0, c, stride, end;
  const bool resident = b < (unsigned)P->resident_blocks;
  int kind = 0;
  if (resident) {
    unsigned r0 = 0;
    QF_SCHEDULE_UNROLL
    for (int s = 0; s < 3; s++) {
      const unsigned w = (unsigned)P->segment_width[s], n = (unsigned)P->segment_end[s] - r0;
      if (b < n * w) {
        round = r0 + b / w, j = b - (round - r0) * w;
        break;
      }
      b -= n * w, r0 = (unsigned)P->segment_end[s];
    }
  } else if (kinds) { /* a late block, kind by kind (k, v, q): item j of piece `round` */
    const unsigned pieces = (P->runs - P->resident_runs) / (unsigned)P->late_piece;
    b -= (unsigned)P->resident_blocks, kind = 1;
    QF_SCHEDULE_UNROLL
    for (int o = 0; o < 2; o++) {
      const unsigned n = (unsigned)P->items[kind] * pieces;
      if (b < n) break;
      b -= n, kind = kind == 1 ? 2 : 0;
    }
    round = b / (unsigned)P->items[kind], j = b - round * (unsigned)P->items[kind];
  } else { /* a late block: item j of piece `round` */
    const unsigned items = (unsigned)(P->items[0] + P->items[1] + P->items[2]);
    b -= (unsigned)P->resident_blocks, round = b / items, j = b - round * items;
  }
  /* item j of the round's: the kinds with more than `round` blocks per item (the late blocks': all) */
  if (resident || !kinds) {
    while (kind < 2 && ((resident && round >= (unsigned)P->blocks_per_item[kind]) || j >= (unsigned)P->items[kind])) {
      if (!resident || round < (unsigned)P->blocks_per_item[kind]) j -= P->items[kind];
      kind++;
    }
  }
  if (resident) {
    c = round, stride = (unsigned)P->blocks_per_item[kind], end = P->resident_runs;
  } else {
    c = P->resident_runs + round * (unsigned)P->late_piece, stride = 1;
    end = QF_SCHEDULE_MIN(c + (unsigned)P->late_piece, P->runs);
  }
  qf_prefill_item it;
  it.kind = kind, it.h0 = (int)j * P->heads_per_item;
  it.nh = QF_SCHEDULE_MIN(P->heads_per_item, (kind == 0 ? P->problem.Nq : P->problem.Nkv) - it.h0);
  it.run = c, it.stride = stride, it.end = end;
  return it;
}
#ifdef __cplusplus
extern "C" {
#endif

/* The decode form's grid (decode.cuh): for kind k (q, k, v) the blocks of
 * gpb (token, head) groups that cover its T x heads[k] groups (heads[k] = 0:
 * the kind has no work), in blocks[k], q's first; returns their sum. By
 * size, a 16-bit call runs the decode form while the sum is at most five
 * quarters of a wave of resident blocks (choose.cu). */
static inline int64_t qf_cuda_schedule_decode_grid(int64_t T, const int64_t *heads, int64_t gpb, int64_t *blocks) {
  int64_t sum = 0;
  for (int k = 0; k < 3; k++) sum += blocks[k] = (T * heads[k] + gpb - 1) / gpb;
  return sum;
}

/* Whether the decode form takes one vector per lane (the narrow form,
 * decode.cuh: `lanes` lanes per head, gpb (token, head) groups per block)
 * for T tokens of heads[k] heads of kind k: where its lanes are at most
 * two warps per multiprocessor (their time is one instruction chain's,
 * which one vector shortens); with interleaved pairs also while its grid
 * fits one wave of `resident` blocks per multiprocessor, where the
 * two-vector form's interleaved kernels take longer (glm-4-9b, D = 128,
 * R = 64, T = 15-128: 0.80-0.98 of their time in every op; the
 * form_narrow_ab rows of docs/bench/h100.jsonl). lanes 0: none (D > 256). */
static inline bool qf_cuda_schedule_narrow(int64_t T, const int64_t *heads, int64_t lanes, int64_t gpb, int64_t sms,
                                           int64_t resident, bool interleaved) {
  if (lanes <= 0) return false;
  if (T * (heads[0] + heads[1] + heads[2]) * lanes <= sms * 64) return true;
  int64_t blocks[3];
  return interleaved && qf_cuda_schedule_decode_grid(T, heads, gpb, blocks) <= sms * resident;
}

/* The general kernel's tile (general.cuh) for T tokens of `heads` heads,
 * groups_per_block groups per block, R rotary dims and `resident` blocks in
 * flight: either *tile_tokens tokens with all heads (*tile_heads = heads; as
 * many tokens as give the groups about four tasks each, within 12 KB of
 * cos/sin tables), so that a block builds the per-token tables once for
 * many tasks, or one token and min(heads, groups_per_block) heads, one task
 * per group; whichever has its groups walk fewer tasks in series (the
 * kernel is bound by each task's chain of loads; a one-token tile counted
 * as two for its tables; ties: the former). Blocks walk the tiles
 * grid-stride. */
static inline void qf_cuda_schedule_general_tiles(int64_t T, int heads, int groups_per_block, int R, int64_t resident,
                                                  int *tile_tokens, int *tile_heads) {
  const int gpb = groups_per_block;
  const int table_max = R > 0 ? 12288 / (8 * R) : 256; /* cos/sin tables <= 12 KB */
  int many = (4 * gpb + heads - 1) / heads;
  many = many > table_max ? table_max : (many < 1 ? 1 : many);
  const int64_t tiles_many = (T + many - 1) / many, tiles_one = T * ((heads + gpb - 1) / gpb);
  const int64_t walk_many = (tiles_many + resident - 1) / resident * ((many * heads + gpb - 1) / gpb);
  const int64_t walk_one = (tiles_one + resident - 1) / resident * 2;
  if (walk_many <= walk_one) {
    *tile_tokens = many;
    *tile_heads = heads;
  } else {
    *tile_tokens = 1;
    *tile_heads = heads < gpb ? heads : gpb;
  }
}

#ifdef __cplusplus
}
#endif

#endif /* QKVFUSE_CUDA_SCHEDULE_H */
