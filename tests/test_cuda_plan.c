/* SPDX-License-Identifier: Apache-2.0 */
/* The CUDA kernels' schedule (src/cuda/schedule.h) and the backend's
 * device rule (src/cuda/state.h), checked on the CPU, so it runs in CI
 * without a GPU (and in builds without CUDA). Counts of token runs are
 * "chunks" below, the resident blocks "slots":
 * - qf_cuda_divisor: (umulhi(n, mul) + n) >> shift == n / d, computed here in
 *   32-bit unsigned arithmetic as the kernels do, for d in 1..4096, powers of
 *   two and their neighbours, large and random d, and n at 0, near multiples
 *   of d, near 2^31 and at random below 2^31;
 * - qf_cuda_schedule_blocks_per_item: against a brute-force search over every
 *   (n_q, n_k) with n_v as large as the slots allow, on small random and
 *   edge cases: every n >= 1 and <= max(chunks, 1); the counts fit the slots
 *   whenever one block per item does (else one each); the largest block time
 *   ceil(chunks / n) * cost is the smallest any fitting counts reach; and one
 *   more block for every item would not fit (whole rounds);
 * - qf_cuda_schedule_heads_per_item: heads per item hpi or hpi / 2 (at least 2; hpi
 *   with a quantized cache), the blocks per item of qf_cuda_schedule_blocks_per_item
 *   for that choice, and the smaller predicted longest block (chunks * cost
 *   * (5 + 10 heads); ties: hpi), on random shapes; and the choices an
 *   independent model of the rule makes for the bench presets on the
 *   H200's 660 slots;
 * - qf_cuda_schedule_late_blocks: its bounds (a multiple of the piece, a quarter of
 *   the chunks rounded down, none below 3 chunks per resident block; 10%
 *   with a quantized cache from 4 to 15; pieces of 1 or 2) on random shapes,
 *   and its values for the bench shapes;
 * - qf_cuda_schedule_general_tiles: one of its two tilings, the one whose groups walk
 *   fewer tasks in series (ties: all heads), on random shapes up to 5M
 *   tokens, and its tiles for the int32 dequant bench op's shapes.
 * - qf_cuda_schedule_decode_grid: each kind's blocks the fewest that hold
 *   its T x heads groups, on random shapes; and, on the H200's 660 slots
 *   (132 SMs, five blocks of the engine call's decode kernels), the largest
 *   T of each bench preset's split and in place calls whose decode grid
 *   fits them (docs/API.md quotes two);
 * - qf_cuda_schedule_narrow: on the same slots, the largest T of each bench
 *   preset's split call (and of GLM-4-9B's in place call, and of interleaved
 *   and neox variants of the presets) that the narrow decode form takes by
 *   size, every smaller T taken too; none where D > 256;
 * - qf_cuda_streaming: the streaming kernels (sm_80 PTX) on compute
 *   capability 8.0 and later only, whatever the form, unless the form is
 *   general; an sm_75 GPU (and anything older) gets the general kernel for
 *   every call.
 * - the prefill form's decoder over its encoder's output: on random shapes
 *   (q, k, v work or not; 1 to 4 heads per item; the planned blocks per item
 *   or random ones, as the forced prefill form takes; with and without late
 *   blocks), the blocks 0 .. grid - 1 of qf_cuda_schedule_prefill_grid's
 *   launch, read back by qf_cuda_schedule_block (late blocks dealt piece by
 *   piece and kind by kind), each get one item of a kind with work, its
 *   heads inside the kind's, and together cover every (kind, item, token
 *   run) exactly once.
 * This program includes internal headers (the functions are not API).
 *   test_cuda_plan [--cases N] [--seed S] */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/schedule.h"
#include "cuda/state.h"
#include "harness.h"
#include "rng.h"

static int failed;

static void check_divisor(uint32_t d, uint32_t n) {
  const qf_cu_div q = qf_cuda_divisor(d);
  const uint32_t hi = (uint32_t)(((uint64_t)n * q.mul) >> 32);
  const uint32_t got = (uint32_t)(hi + n) >> q.shift;
  if (q.d != d || got != n / d) {
    if (failed++ < 10) printf("FAIL test_cuda_plan divisor d=%u n=%u: %u, want %u\n", d, n, got, n / d);
  }
}

static void divisors(tk_rng *r) {
  uint32_t ds[4096 + 20 * 5 + 200]; /* 1..4096, 2^12..2^31 and their 4 neighbours, random */
  int nd = 0;
  for (uint32_t d = 1; d <= 4096; d++) ds[nd++] = d;
  for (int s = 12; s <= 31; s++)
    for (int e = -2; e <= 2; e++) {
      const int64_t d = ((int64_t)1 << s) + e;
      if (d >= 1 && d <= 0x7fffffff) ds[nd++] = (uint32_t)d;
    }
  for (int i = 0; i < 200; i++) ds[nd++] = 1 + (uint32_t)(tk_rng_next(r) % 0x7fffffffu);
  for (int i = 0; i < nd; i++) {
    const uint32_t d = ds[i];
    const uint32_t top = 0x7fffffffu;
    for (uint32_t n = 0; n < 64; n++) check_divisor(d, n);
    for (uint32_t n = top - 64; n < top; n++) check_divisor(d, n);
    check_divisor(d, top);
    for (uint64_t m = 1; m <= 64 && m * d <= top; m++)
      for (int e = -1; e <= 1; e++) {
        const int64_t n = (int64_t)(m * d) + e;
        if (n >= 0 && n <= top) check_divisor(d, (uint32_t)n);
      }
    const uint64_t q = top / d; /* the largest multiples */
    for (uint64_t m = q > 3 ? q - 3 : 0; m <= q; m++)
      for (int e = -1; e <= 1; e++) {
        const int64_t n = (int64_t)(m * d) + e;
        if (n >= 0 && n <= top) check_divisor(d, (uint32_t)n);
      }
    for (int k = 0; k < 64; k++) check_divisor(d, (uint32_t)(tk_rng_next(r) % ((uint64_t)top + 1)));
  }
}

static int64_t block_time(int64_t chunks, int64_t n, int64_t cost) { return (chunks + n - 1) / n * cost; }

/* The smallest largest block time of counts that fit the slots (brute force:
 * every n_q, n_k; n_v the most the slots leave); -1 if none fits. */
static int64_t best_time(int64_t chunks, const int32_t *items, const int64_t *cost, int64_t slots) {
  const int64_t top = chunks > 1 ? chunks : 1;
  int64_t best = -1;
  for (int64_t a = 1; a <= (items[0] ? top : 1); a++)
    for (int64_t b = 1; b <= (items[1] ? top : 1); b++) {
      const int64_t used = items[0] * a + items[1] * b;
      int64_t c = 1;
      if (items[2]) {
        if (used + items[2] > slots) continue;
        c = (slots - used) / items[2];
        if (c > top) c = top;
      } else if (used > slots) {
        continue;
      }
      const int64_t n[3] = {a, b, c};
      int64_t t = 0;
      for (int k = 0; k < 3; k++)
        if (items[k] && block_time(chunks, n[k], cost[k]) > t) t = block_time(chunks, n[k], cost[k]);
      if (best < 0 || t < best) best = t;
    }
  return best;
}

static void check_blocks(int64_t chunks, const int32_t *items, const int64_t *cost, int64_t slots) {
  int64_t n[3] = {-7, -7, -7};
  qf_cuda_schedule_blocks_per_item(chunks, items, cost, slots, n);
  char what[200] = "";
  const int64_t top = chunks > 1 ? chunks : 1;
  int64_t used = 0, round = 0, t = 0;
  for (int k = 0; k < 3; k++) {
    if (n[k] < 1 || n[k] > top) snprintf(what, sizeof what, "n[%d] = %lld outside [1, %lld]", k, (long long)n[k],
                                          (long long)top);
    used += items[k] * n[k], round += items[k];
    if (items[k] && block_time(chunks, n[k], cost[k]) > t) t = block_time(chunks, n[k], cost[k]);
  }
  const int64_t best = best_time(chunks, items, cost, slots);
  if (!what[0]) {
    if (round > slots) {
      if (n[0] != 1 || n[1] != 1 || n[2] != 1) snprintf(what, sizeof what, "more items than slots, not one block each");
    } else if (used > slots) {
      snprintf(what, sizeof what, "%lld blocks for %lld slots", (long long)used, (long long)slots);
    } else if (t != best) {
      snprintf(what, sizeof what, "largest block time %lld, the best is %lld", (long long)t, (long long)best);
    } else if (used + round <= slots && (!items[0] || n[0] < top) && (!items[1] || n[1] < top) &&
               (!items[2] || n[2] < top)) {
      snprintf(what, sizeof what, "room for another whole round (%lld of %lld slots used)", (long long)used,
               (long long)slots);
    }
  }
  if (what[0] && failed++ < 10)
    printf("FAIL test_cuda_plan blocks_per_item chunks=%lld items=%d,%d,%d cost=%lld,%lld,%lld slots=%lld -> "
           "%lld,%lld,%lld: %s\n",
           (long long)chunks, items[0], items[1], items[2], (long long)cost[0], (long long)cost[1], (long long)cost[2],
           (long long)slots, (long long)n[0], (long long)n[1], (long long)n[2], what);
}

/* The rule's predicted longest block for h heads per item; n[k] its counts. */
static int64_t plan_time(int64_t chunks, const int64_t *heads, int h, int k_quant, int64_t slots, int64_t *n) {
  int32_t items[3];
  for (int k = 0; k < 3; k++) items[k] = (int32_t)((heads[k] + h - 1) / h);
  const int64_t cost[3] = {10, k_quant && heads[1] % h == 0 ? 14 : 10, 10};
  qf_cuda_schedule_blocks_per_item(chunks, items, cost, slots, n);
  int64_t t = 0;
  for (int k = 0; k < 3; k++) {
    if (!items[k]) continue;
    const int64_t nh = heads[k] < h ? heads[k] : h, tk = block_time(chunks, n[k], cost[k]) * (5 + 10 * nh);
    if (tk > t) t = tk;
  }
  return t;
}

/* want: the expected heads per item, or 0 (check against the rule only). */
static void check_plan(int64_t chunks, const int64_t *heads, int hpi, int k_quant, int qcache, int64_t slots,
                       int want) {
  int64_t n[3] = {-7, -7, -7}, m[3];
  const int got = qf_cuda_schedule_heads_per_item(chunks, heads, hpi, k_quant, qcache, slots, n);
  char what[200] = "";
  if (got != hpi && (got * 2 != hpi || got < 2 || qcache)) {
    snprintf(what, sizeof what, "%d heads per item", got);
  } else {
    const int64_t t = plan_time(chunks, heads, got, k_quant, slots, m);
    if (n[0] != m[0] || n[1] != m[1] || n[2] != m[2])
      snprintf(what, sizeof what, "blocks %lld,%lld,%lld, not blocks_per_item's %lld,%lld,%lld", (long long)n[0],
               (long long)n[1], (long long)n[2], (long long)m[0], (long long)m[1], (long long)m[2]);
    const int other = got == hpi ? hpi / 2 : hpi;
    if (!what[0] && other >= 2 && !qcache) {
      const int64_t to = plan_time(chunks, heads, other, k_quant, slots, m);
      if (to < t || (to == t && got != hpi))
        snprintf(what, sizeof what, "%d heads per item (time %lld), %d predicts %lld", got, (long long)t, other,
                 (long long)to);
    }
    if (!what[0] && want && got != want) snprintf(what, sizeof what, "%d heads per item, the model's %d", got, want);
  }
  if (what[0] && failed++ < 10)
    printf("FAIL test_cuda_plan prefill_plan chunks=%lld heads=%lld,%lld,%lld hpi=%d kq=%d qc=%d slots=%lld: %s\n",
           (long long)chunks, (long long)heads[0], (long long)heads[1], (long long)heads[2], hpi, k_quant, qcache,
           (long long)slots, what);
}

/* qf_cuda_schedule_late_blocks: a multiple of the piece, at most a quarter of the
 * chunks and at least a quarter less one piece where it applies; none where
 * a resident block would walk fewer than 3 chunks; with a quantized cache
 * (qcache), from 4 to 15 chunks per block, a tenth of the chunks rounded down;
 * pieces of 1, or 2 from 16 chunks per block; want_tail / want_piece >= 0:
 * the expected values. */
static void check_tail(int64_t chunks, int64_t items, int64_t slots, int qcache, int64_t want_tail,
                       int64_t want_piece) {
  int64_t tail = -1, piece = -1;
  qf_cuda_schedule_late_blocks(chunks, items, slots, qcache, &tail, &piece);
  const double per = (double)chunks * (double)items / (double)slots;
  const int tenth = qcache && per >= 4 && per < 16; /* the 10% rule: 10 tail in (chunks - 10, chunks] */
  char what[96] = "";
  if (piece != (per >= 16 ? 2 : 1))
    snprintf(what, sizeof what, "piece %lld", (long long)piece);
  else if (tail < 0 || tail % piece || 4 * tail > chunks)
    snprintf(what, sizeof what, "tail %lld: not a multiple of the piece within a quarter", (long long)tail);
  else if (tenth ? 10 * tail > chunks || 10 * (tail + 1) <= chunks
                   : per < 3 ? tail != 0 : 4 * (tail + piece) <= chunks)
    snprintf(what, sizeof what, "tail %lld at %.2f chunks per block", (long long)tail, per);
  else if ((want_tail >= 0 && tail != want_tail) || (want_piece >= 0 && piece != want_piece))
    snprintf(what, sizeof what, "tail %lld piece %lld, want %lld / %lld", (long long)tail, (long long)piece,
             (long long)want_tail, (long long)want_piece);
  if (what[0] && failed++ < 10)
    printf("FAIL test_cuda_plan tail chunks=%lld items=%lld slots=%lld qc=%d: %s\n", (long long)chunks,
           (long long)items, (long long)slots, qcache, what);
}

/* qf_cuda_schedule_general_tiles: one of the two tilings (tpb tokens with all heads,
 * tpb giving the groups about four tasks each within 12 KB of cos/sin
 * tables; or one token and min(heads, gpb) heads), the one whose groups walk
 * fewer tasks in series, a one-token tile counted as two (ties: the first);
 * want_tpb / want_hpb > 0: the expected tile. */
static void check_tiles(int64_t T, int heads, int gpb, int R, int64_t resident, int want_tpb, int want_hpb) {
  int tpb = -1, hpb = -1;
  qf_cuda_schedule_general_tiles(T, heads, gpb, R, resident, &tpb, &hpb);
  int many = (4 * gpb + heads - 1) / heads;
  if (R > 0 && many * 8 * R > 12288) many = 12288 / (8 * R);
  if (many < 1) many = 1;
  const int64_t rounds_many = ((T + many - 1) / many + resident - 1) / resident;
  const int64_t rounds_one = (T * ((heads + gpb - 1) / gpb) + resident - 1) / resident;
  const int64_t walk_many = rounds_many * ((many * heads + gpb - 1) / gpb), walk_one = 2 * rounds_one;
  const int one_hpb = heads < gpb ? heads : gpb;
  char what[96] = "";
  if (!(tpb == many && hpb == heads) && !(tpb == 1 && hpb == one_hpb))
    snprintf(what, sizeof what, "tile %d x %d is neither %d x %d nor 1 x %d", tpb, hpb, many, heads, one_hpb);
  else if ((tpb == many && hpb == heads && !(tpb == 1 && hpb == one_hpb)) != (walk_many <= walk_one))
    snprintf(what, sizeof what, "tile %d x %d: walks %lld (all heads) against %lld (one token)", tpb, hpb,
             (long long)walk_many, (long long)walk_one);
  else if (want_tpb > 0 && (tpb != want_tpb || hpb != want_hpb))
    snprintf(what, sizeof what, "tile %d x %d, want %d x %d", tpb, hpb, want_tpb, want_hpb);
  if (what[0] && failed++ < 10)
    printf("FAIL test_cuda_plan general_tiles T=%lld heads=%d gpb=%d R=%d resident=%lld: %s\n", (long long)T, heads,
           gpb, R, (long long)resident, what);
}

/* The decode grid of T tokens (heads per kind, gpb groups per block): each
 * kind's blocks hold its groups and one block fewer would not; the sum. */
static int64_t check_decode_grid(int64_t T, const int64_t *heads, int64_t gpb) {
  int64_t blocks[3], sum = 0;
  const int64_t got = qf_cuda_schedule_decode_grid(T, heads, gpb, blocks);
  for (int k = 0; k < 3; k++) {
    sum += blocks[k];
    if ((blocks[k] * gpb < T * heads[k] || (blocks[k] > 0 && (blocks[k] - 1) * gpb >= T * heads[k])) &&
        failed++ < 10)
      printf("FAIL test_cuda_plan decode grid T=%lld heads[%d]=%lld gpb=%lld: %lld blocks\n", (long long)T, k,
             (long long)heads[k], (long long)gpb, (long long)blocks[k]);
  }
  if (got != sum && failed++ < 10)
    printf("FAIL test_cuda_plan decode grid T=%lld: returned %lld, blocks sum to %lld\n", (long long)T,
           (long long)got, (long long)sum);
  return got;
}

/* The largest T whose decode grid fits `slots` blocks, against want. */
static void check_decode_limit(const char *name, const int64_t *heads, int64_t gpb, int64_t slots, int64_t want) {
  int64_t T = 0;
  while (check_decode_grid(T + 1, heads, gpb) <= slots) T++;
  if (T != want && failed++ < 10)
    printf("FAIL test_cuda_plan decode form of %s: up to T = %lld on %lld slots, want %lld\n", name, (long long)T,
           (long long)slots, (long long)want);
}

/* The largest T (up to 4096) whose call the narrow decode form takes by
 * size on 132 SMs of 5 resident blocks (gpb 128 / lanes), against want;
 * and that the rule holds for every smaller T and no larger one. */
static void check_narrow_limit(const char *name, const int64_t *heads, int64_t lanes, bool interleaved,
                               int64_t want) {
  int64_t last = 0;
  for (int64_t T = 1; T <= 4096; T++)
    if (qf_cuda_schedule_narrow(T, heads, lanes, lanes ? 128 / lanes : 0, 132, 5, interleaved)) {
      if (last != T - 1 && failed++ < 10)
        printf("FAIL test_cuda_plan narrow form of %s: T = %lld after a gap at %lld\n", name, (long long)T,
               (long long)last + 1);
      last = T;
    }
  if (last != want && failed++ < 10)
    printf("FAIL test_cuda_plan narrow form of %s: up to T = %lld, want %lld\n", name, (long long)last,
           (long long)want);
}

static void check_streaming(void) {
  static const int caps[] = {60, 70, 72, 75, 80, 86, 87, 89, 90, 100, 103, 110, 120, 121};
  for (size_t i = 0; i < sizeof caps / sizeof caps[0]; i++)
    for (int form = 0; form <= 4; form++) { /* by size, decode, prefill, decode_narrow, general */
      const int want = caps[i] >= 80 && form != 4, got = qf_cuda_streaming(caps[i], (qf_cuda_form)form);
      if (got != want && failed++ < 10)
        printf("FAIL test_cuda_plan streaming cc=%d form=%d: %d, want %d\n", caps[i], form, got, want);
    }
}

/* The decoder over the encoder's output (see the header). heads[k]: the heads
 * of kind k (0: no work); hpi: heads per item before the plan; forced: random
 * blocks per item instead of the plan's. */
static void check_cover(int64_t chunks, const int64_t *heads, int hpi, int k_quant, int qcache, int64_t slots,
                        int forced, tk_rng *r) {
  qf_cu_prefill_params P;
  memset(&P, 0, sizeof P);
  P.problem.Nq = (int32_t)heads[0];
  P.problem.Nkv = (int32_t)(heads[1] ? heads[1] : heads[2]);
  for (int k = 0; k < 3; k++) P.items[k] = (int32_t)((heads[k] + hpi - 1) / hpi);
  int64_t late = 0, piece = 1, n[3];
  qf_cuda_schedule_late_blocks(chunks, (int64_t)P.items[0] + P.items[1] + P.items[2], slots, qcache, &late, &piece);
  const int64_t resident_runs = chunks - late;
  if (forced) {
    for (int k = 0; k < 3; k++) n[k] = 1 + (int64_t)(tk_rng_next(r) % (uint64_t)resident_runs);
  } else {
    hpi = qf_cuda_schedule_heads_per_item(resident_runs, heads, hpi, k_quant, qcache, slots, n);
    for (int k = 0; k < 3; k++) P.items[k] = (int32_t)((heads[k] + hpi - 1) / hpi);
  }
  P.heads_per_item = hpi;
  const int64_t grid = qf_cuda_schedule_prefill_grid(&P, chunks, n, late, piece);
  const int64_t per_kind = (int64_t)P.items[0] > P.items[1] ? P.items[0] : P.items[1];
  const int64_t width = (per_kind > P.items[2] ? per_kind : P.items[2]) * chunks;
  unsigned char *seen = malloc((size_t)(3 * width));
  if (!seen) return;
  for (int kinds = 0; kinds < 2; kinds++) {
    char what[160] = "";
    memset(seen, 0, (size_t)(3 * width));
    for (int64_t b = 0; b < grid && !what[0]; b++) {
      const qf_prefill_item it = qf_cuda_schedule_block(&P, (unsigned)b, kinds != 0);
      const int64_t kh = it.kind >= 0 && it.kind < 3 ? heads[it.kind] : 0;
      const int64_t want_nh = kh - it.h0 < hpi ? kh - it.h0 : hpi;
      if (!kh || it.h0 < 0 || it.h0 % hpi || it.h0 >= kh || it.nh != want_nh || it.stride < 1 || it.end > chunks) {
        snprintf(what, sizeof what, "block %lld: kind %d heads %d+%d stride %u end %u", (long long)b, it.kind, it.h0,
                 it.nh, it.stride, it.end);
        break;
      }
      for (unsigned c = it.run; c < it.end; c += it.stride) {
        unsigned char *s = &seen[it.kind * width + it.h0 / hpi * chunks + c];
        if (++*s > 1) {
          snprintf(what, sizeof what, "block %lld: run %u of kind %d item %d taken twice", (long long)b, c, it.kind,
                   it.h0 / hpi);
          break;
        }
      }
    }
    for (int k = 0; k < 3 && !what[0]; k++)
      for (int64_t i = 0; i < P.items[k] && !what[0]; i++)
        for (int64_t c = 0; c < chunks && !what[0]; c++)
          if (!seen[k * width + i * chunks + c])
            snprintf(what, sizeof what, "run %lld of kind %d item %lld taken by no block", (long long)c, k,
                     (long long)i);
    if (what[0] && failed++ < 10)
      printf("FAIL test_cuda_plan cover chunks=%lld heads=%lld,%lld,%lld hpi=%d slots=%lld late=%lld/%lld n=%lld,%lld,"
             "%lld kinds=%d grid=%lld: %s\n",
             (long long)chunks, (long long)heads[0], (long long)heads[1], (long long)heads[2], hpi, (long long)slots,
             (long long)late, (long long)piece, (long long)n[0], (long long)n[1], (long long)n[2], kinds,
             (long long)grid, what);
  }
  free(seen);
}

int main(int argc, char **argv) {
  const int cases = (int)tk_arg_u64(argc, argv, "--cases", NULL, 3000);
  tk_rng r;
  tk_rng_seed(&r, tk_arg_u64(argc, argv, "--seed", NULL, 0x91A4));
  divisors(&r);
  check_streaming();
  /* the shapes of the H200 bench presets at T = 4096 and 32768 (chunks of 16 / 20 / 8 tokens) */
  static const struct {
    int64_t chunks;
    int32_t items[3];
    int64_t kcost;
  } fixed[] = {{256, {8, 2, 2}, 14}, {256, {8, 2, 2}, 10}, {256, {8, 2, 0}, 10}, {256, {8, 1, 1}, 10},
               {256, {8, 1, 0}, 10}, {205, {8, 8, 8}, 14}, {512, {4, 2, 2}, 14}, {2048, {8, 2, 2}, 14},
               {1639, {8, 8, 8}, 14}, {0, {8, 2, 2}, 14},  {1, {8, 2, 2}, 14},   {3, {600, 2, 2}, 14}};
  for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++) {
    const int64_t cost[3] = {10, fixed[i].kcost, 10};
    if (fixed[i].chunks <= 300) check_blocks(fixed[i].chunks, fixed[i].items, cost, 528);
  }
  for (int i = 0; i < cases; i++) {
    const int64_t chunks = (int64_t)(tk_rng_next(&r) % 41);
    int32_t items[3];
    for (int k = 0; k < 3; k++) items[k] = (int32_t)(tk_rng_next(&r) % 6);
    if (!items[0]) items[0] = 1;
    const int64_t cost[3] = {10, tk_rng_next(&r) % 2 ? 15 : 10, (int64_t)(5 + tk_rng_next(&r) % 20)};
    const int64_t slots = (int64_t)(1 + tk_rng_next(&r) % 120);
    check_blocks(chunks, items, cost, slots);
  }
  /* the bench presets (chunks at T: 16 tokens for D = 128, 20 for 96, 8 for
     256), split / in place / int8 cache, 660 slots (132 SMs, 5 blocks) */
  static const struct {
    int64_t chunks, heads[3];
    int k_quant, want;
  } presets[] = {
      {128, {32, 8, 8}, 0, 2},    /* Llama split, T = 2048 */
      {256, {32, 8, 8}, 0, 4},    /* Llama split, 4096 */
      {256, {32, 8, 8}, 1, 4},    /* Llama int8 cache, 4096 */
      {2048, {32, 8, 0}, 0, 4},   /* Llama in place, 32768 */
      {256, {32, 2, 0}, 0, 2},    /* GLM-4 in place, 4096 */
      {2048, {32, 2, 0}, 0, 4},   /* GLM-4 in place, 32768 */
      {2048, {32, 2, 2}, 0, 2},   /* GLM-4 split, 32768 */
      {205, {32, 32, 32}, 0, 4},  /* Phi-3 split, 4096 */
      {1639, {32, 32, 32}, 1, 4}, /* Phi-3 int8 cache, 32768 */
      {256, {16, 8, 8}, 0, 2},    /* Gemma-2 split, 2048 */
      {512, {16, 8, 8}, 0, 4},    /* Gemma-2 split, 4096 */
  };
  for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++)
    check_plan(presets[i].chunks, presets[i].heads, 4, presets[i].k_quant, presets[i].k_quant, 660, presets[i].want);
  for (int i = 0; i < cases; i++) {
    const int64_t heads[3] = {(int64_t)(1 + tk_rng_next(&r) % 64), (int64_t)(tk_rng_next(&r) % 17),
                              (int64_t)(tk_rng_next(&r) % 17)};
    const int hpi = tk_rng_next(&r) % 2 ? 4 : 2, k_quant = (int)(tk_rng_next(&r) % 2);
    const int qcache = k_quant || tk_rng_next(&r) % 2;
    check_plan((int64_t)(1 + tk_rng_next(&r) % 3000), heads, hpi, k_quant, qcache,
               (int64_t)(1 + tk_rng_next(&r) % 1400), 0);
  }
  /* the decode form's largest T by size on the H200's 660 slots: groups of
     16 (token, head) pairs for D = 128 and 96 (8 lanes), 8 for D = 256 */
  static const struct {
    const char *name;
    int64_t heads[3], gpb, want;
  } limits[] = {
      {"Llama-3-8B split", {32, 8, 8}, 16, 220},     /* 2T + 2 ceil(T/2) blocks */
      {"Llama-3-8B in place", {32, 8, 0}, 16, 264},  /* 2T + ceil(T/2) */
      {"GLM-4-9B split", {32, 2, 2}, 16, 293},       /* 2T + 2 ceil(T/8) */
      {"GLM-4-9B in place", {32, 2, 0}, 16, 310},    /* 2T + ceil(T/8) */
      {"Phi-3-mini split", {32, 32, 32}, 16, 110},   /* 6T */
      {"Phi-3-mini in place", {32, 32, 0}, 16, 165}, /* 4T */
      {"Gemma-2-9B split", {16, 8, 8}, 8, 165},      /* 4T */
      {"Gemma-2-9B in place", {16, 8, 0}, 8, 220},   /* 3T */
  };
  for (size_t i = 0; i < sizeof limits / sizeof limits[0]; i++)
    check_decode_limit(limits[i].name, limits[i].heads, limits[i].gpb, 660, limits[i].want);
  /* the narrow decode form's largest T by size on the same slots: lanes
     of 16 lanes for D = 96 and 128, 32 for 256, none above; two warps per
     multiprocessor (T x heads x lanes <= 132 x 64), with interleaved pairs
     a grid of one wave (blocks of 8 or 4 (token, head) pairs) */
  static const struct {
    const char *name;
    int64_t heads[3], lanes;
    bool interleaved;
    int64_t want;
  } narrow[] = {
      {"Llama-3-8B split", {32, 8, 8}, 16, false, 11},              /* 768 T <= 8448 */
      {"Phi-3-mini split", {32, 32, 32}, 16, false, 5},             /* 1536 T */
      {"Gemma-2-9B split", {16, 8, 8}, 32, false, 8},               /* 1024 T */
      {"GLM-4-9B split, neox", {32, 2, 2}, 16, false, 14},          /* 576 T */
      {"GLM-4-9B split", {32, 2, 2}, 16, true, 146},                /* 4T + 2 ceil(T/4) <= 660 */
      {"GLM-4-9B in place", {32, 2, 0}, 16, true, 155},             /* 4T + ceil(T/4) */
      {"Llama-3-8B split, interleaved", {32, 8, 8}, 16, true, 110}, /* 6T */
      {"Gemma-2-9B split, interleaved", {16, 8, 8}, 32, true, 82},  /* 8T */
      {"D = 512", {32, 8, 8}, 0, true, 0},
  };
  for (size_t i = 0; i < sizeof narrow / sizeof narrow[0]; i++)
    check_narrow_limit(narrow[i].name, narrow[i].heads, narrow[i].lanes, narrow[i].interleaved, narrow[i].want);
  for (int i = 0; i < cases; i++) {
    const int64_t heads[3] = {(int64_t)(1 + tk_rng_next(&r) % 128), (int64_t)(tk_rng_next(&r) % 33),
                              (int64_t)(tk_rng_next(&r) % 33)};
    check_decode_grid((int64_t)(tk_rng_next(&r) % 100000), heads, (int64_t)1 << (int)(tk_rng_next(&r) % 7));
  }
  /* the tail of bench shapes on the H200's 660 slots (items at the heads
     per item that fill the device), then random ones */
  static const struct {
    int64_t chunks, items;
    int qcache;
    int64_t tail, piece;
  } tails[] = {
      {26, 48, 0, 0, 1},      /* Phi-3, T = 512: 1.9 chunks per block */
      {256, 10, 0, 64, 1},    /* GLM-4 split, 4096: 3.9 */
      {256, 10, 1, 64, 1},    /* GLM-4 int8 cache, 4096: 3.9 */
      {256, 12, 0, 64, 1},    /* Llama split, 4096: 4.7 */
      {256, 12, 1, 25, 1},    /* Llama int8 cache, 4096: 4.7 */
      {205, 24, 0, 51, 1},    /* Phi-3 split, 4096: 7.5 */
      {205, 24, 1, 20, 1},    /* Phi-3 int8 cache, 4096: 7.5 */
      {512, 8, 1, 51, 1},     /* Gemma-2 int8 cache, 4096: 6.2 */
      {2048, 12, 0, 512, 2},  /* Llama split, 32768: 37 */
      {1639, 24, 1, 408, 2},  /* Phi-3 int8 cache, 32768: 60 */
  };
  for (size_t i = 0; i < sizeof tails / sizeof tails[0]; i++)
    check_tail(tails[i].chunks, tails[i].items, 660, tails[i].qcache, tails[i].tail, tails[i].piece);
  for (int i = 0; i < cases; i++)
    check_tail((int64_t)(tk_rng_next(&r) % 5000), (int64_t)(1 + tk_rng_next(&r) % 400),
               (int64_t)(1 + tk_rng_next(&r) % 1400), (int)(tk_rng_next(&r) % 2), -1, -1);
  /* the general kernel's tiles of the int32 dequant bench op (8 groups of 32
     lanes per block, R = D, 528 resident blocks: 132 SMs, 4 blocks): Phi-3
     (96 heads) one token at T <= 128, all heads from 256 (the walks tie
     there); Llama (48 heads) one token to 128, all heads from 256 */
  static const struct {
    int64_t T;
    int heads, R, tpb, hpb;
  } tiles[] = {{1, 96, 96, 1, 8},    {64, 96, 96, 1, 8},    {128, 96, 96, 1, 8},    {256, 96, 96, 1, 96},
               {512, 96, 96, 1, 96}, {64, 48, 128, 1, 8},   {128, 48, 128, 1, 8},   {256, 48, 128, 1, 48},
               {4096, 48, 128, 1, 48}, {4096, 36, 64, 1, 36}, {0, 48, 128, 1, 48}};
  for (size_t i = 0; i < sizeof tiles / sizeof tiles[0]; i++)
    check_tiles(tiles[i].T, tiles[i].heads, 8, tiles[i].R, 528, tiles[i].tpb, tiles[i].hpb);
  for (int i = 0; i < cases; i++) {
    const int64_t T = (int64_t)(tk_rng_next(&r) % 3) == 0 ? (int64_t)(tk_rng_next(&r) % 5000000)
                                                          : (int64_t)(tk_rng_next(&r) % 3000);
    const int gpb = 1 << (int)(tk_rng_next(&r) % 6), R = 2 * (int)(1 + tk_rng_next(&r) % 256);
    check_tiles(T, (int)(1 + tk_rng_next(&r) % 200), gpb, tk_rng_next(&r) % 4 ? R : 0,
                (int64_t)(1 + tk_rng_next(&r) % 2000), 0, 0);
  }
  for (int i = 0; i < cases; i++) {
    const int64_t nkv = (int64_t)(1 + tk_rng_next(&r) % 16), work = (int64_t)(tk_rng_next(&r) % 3);
    const int64_t heads[3] = {(int64_t)(1 + tk_rng_next(&r) % 64), work ? nkv : 0, work == 2 ? nkv : 0};
    const int hpi = 1 << (int)(tk_rng_next(&r) % 3), k_quant = (int)(tk_rng_next(&r) % 2);
    const int qcache = k_quant || tk_rng_next(&r) % 2;
    check_cover((int64_t)(1 + tk_rng_next(&r) % 300), heads, hpi, k_quant && heads[1], qcache,
                (int64_t)(1 + tk_rng_next(&r) % 1400), (int)(tk_rng_next(&r) % 2), &r);
  }
  printf("test_cuda_plan: %d prefill schedules decoded, ", cases);
  printf("divisors, %d + %d block counts, %d + %d prefill plans, %d + %d decode grids, %d narrow form limits, "
         "%d + %d tails and %d + %d general tiles checked, %d failed\n",
         (int)(sizeof fixed / sizeof fixed[0]), cases, (int)(sizeof presets / sizeof presets[0]), cases,
         (int)(sizeof limits / sizeof limits[0]), cases, (int)(sizeof narrow / sizeof narrow[0]),
         (int)(sizeof tails / sizeof tails[0]), cases,
         (int)(sizeof tiles / sizeof tiles[0]), cases, failed);
  return failed ? TK_FAIL : TK_PASS;
}
