/* SPDX-License-Identifier: Apache-2.0 */
/* Oracle vs library on many random shapes and option sets, per backend.
 *
 *   test_ops [--backend reference,auto,cpu] [--seed S] [--cases N] [--only I]
 *            [--max-elems E] [--engine|--append|--dequant] [--rounding MODE] [--wide] [--strided vectors|all]
 *            [--page-table] [--verbose]
 *   test_ops --preset NAME|all [--tokens 1,7,33] [--backend ...] [--seed S]
 * --preset: instead of random cases, a preset's named list of cases (the
 * cases `qkvfuse bench --preset NAME` times: every operator variant at each
 * token count, kit/presets.h) in bfloat16, float16 and float32, the cache
 * variants with both slot modes (a random slot per token; pages).
 * --engine: every case the call an inference engine makes (tk_spec_engine),
 * which the CUDA backend's decode form serves with its dtypes and cache
 * geometry as constants (the engine call: src/cuda/variant.h).
 * --append: every case FlashInfer's append call (tk_spec_append), which the
 * CUDA backend's prefill form serves with its dtypes as constants.
 * --dequant: every case the int32 call (tk_spec_dequant), which both CUDA
 * forms serve with its dtypes and cache geometry as constants.
 * --page-table: every case with a cache in pages (paged, paged_hnd or nz; a
 * case drawn without one gets a paged cache) addressed through a page table.
 * --rounding: every case in that rounding mode (fused, unfused_parity,
 * ascend_triton, cann), against the oracle's model of it.
 * --wide: every case with a head dim above 512 (528, 640, 1024 or any even
 * value up to 1024; tk_spec_random draws them for one case in 16 otherwise).
 * --strided vectors: a random half of each case's vector arguments (weights,
 * scales, offsets, indices) as strided views, which a CPU call copies into
 * its buffer (docs/API.md, "Strides"); --strided all: a random half of all
 * its tensors, rows and caches with a last-dim stride of 2, which only the
 * reference backend takes.
 * (env: QKVFUSE_TEST_BACKENDS, QKVFUSE_TEST_SEED, QKVFUSE_TEST_CASES).
 * Case i of seed S is fully determined by (S, i): a failure prints the
 * command line that reruns exactly that case. Exit 77 (skip) when no
 * requested backend can serve (e.g. the fast CPU backend not built yet). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "presets.h"

/* Value of "--name V" in argv, or NULL. */
static const char *arg_str(int argc, char **argv, const char *name) {
  for (int i = 1; i + 1 < argc; i++)
    if (!strcmp(argv[i], name)) return argv[i + 1];
  return NULL;
}

/* --strided: a random set of the spec's tensors as strided views (vectors
 * only, or with rows every tensor), drawn from a stream of its own; strided
 * vectors give way, the largest first, until their copies fit the call's
 * buffer. */
static void strided_views(tk_spec *sp, uint64_t seed, int rows) {
  tk_rng r;
  tk_rng_seed(&r, seed ^ 0x57A1DEDull);
  const uint64_t present = tk_spec_present(sp);
  sp->strided = 0;
  for (int s = 0; s < TK_NSLOT; s++)
    if ((present >> s & 1) && (rows || tk_slot_is_vector(s)) && tk_rng_chance(&r, 0.5)) sp->strided |= 1ull << s;
  tk_spec_fit_gather(sp);
}

/* test_ops --preset: every case of the named presets against the oracle. */
static int run_presets(int argc, char **argv, const qkvfuse_backend *bes, int nbe, const char *which) {
  int64_t tokens[16];
  int ntokens = 0;
  char list[128];
  snprintf(list, sizeof list, "%s", arg_str(argc, argv, "--tokens") ? arg_str(argc, argv, "--tokens") : "1,7,33");
  for (char *tok = strtok(list, ","); tok && ntokens < 16; tok = strtok(NULL, ",")) {
    char *end;
    tokens[ntokens] = strtoll(tok, &end, 10);
    if (*end || tokens[ntokens] < 0) {
      fprintf(stderr, "test_ops: --tokens: bad count '%s'\n", tok);
      return 2;
    }
    ntokens++;
  }
  int npresets;
  const tk_preset *presets = tk_presets(&npresets);
  if (strcmp(which, "all") != 0 && !tk_preset_find(which)) {
    fprintf(stderr, "test_ops: --preset: unknown preset '%s' (all, %s)\n", which, tk_preset_names());
    return 2;
  }
  const uint64_t seed = tk_arg_u64(argc, argv, "--seed", "QKVFUSE_TEST_SEED", 0x9E5E7);
  static const qkvfuse_dtype dts[] = {QKVFUSE_DTYPE_BFLOAT16, QKVFUSE_DTYPE_FLOAT16, QKVFUSE_DTYPE_FLOAT32};
  int failed = 0, ran = 0, skipped = 0;
  for (int b = 0; b < nbe; b++) {
    for (int p = 0; p < npresets; p++) {
      if (strcmp(which, "all") != 0 && strcmp(which, presets[p].name) != 0) continue;
      for (int d = 0; d < 3; d++)
        for (int page_slots = 0; page_slots < 2; page_slots++) {
          tk_spec specs[TK_OP_COUNT * 16];
          const int n = tk_preset_cases(&presets[p], tokens, ntokens, dts[d], page_slots, specs, TK_OP_COUNT * 16);
          for (int i = 0; i < n; i++) {
            if (page_slots && specs[i].layout == QKVFUSE_CACHE_NONE) continue; /* no slots to lay out */
            const uint64_t cs = tk_case_seed(seed, (uint64_t)(((p * 3 + d) * 2 + page_slots) * 256 + i));
            tk_case c;
            if (tk_case_build(&c, &specs[i], cs)) {
              printf("FAIL: out of memory building a case\n");
              return 1;
            }
            tk_stats st;
            memset(&st, 0, sizeof st);
            const int rc = tk_check_case(&c, bes[b], tk_run_core, NULL, &st);
            tk_case_free(&c);
            if (rc == TK_SKIP) {
              skipped++;
              continue;
            }
            ran++;
            if (rc == TK_FAIL && failed++ < 10) {
              char desc[1024];
              tk_spec_describe(&specs[i], desc, sizeof desc);
              printf("FAIL test_ops --preset %s backend=%s variant %s T=%lld %s%s: %s\n  failing: %s\n  spec: %s\n",
                     presets[p].name, tk_backend_str(bes[b]), tk_op_name((tk_preset_op)(i / ntokens)),
                     (long long)specs[i].T, qkvfuse_dtype_name(dts[d]), page_slots ? " page slots" : "", st.first,
                     st.where, desc);
            }
          }
        }
    }
  }
  printf("test_ops --preset %s: %d cases run, %d skipped, %d failed\n", which, ran, skipped, failed);
  if (failed) return 1;
  return ran ? 0 : TK_SKIP;
}

int main(int argc, char **argv) {
  qkvfuse_backend bes[8];
  int nbe = tk_backends_from(argc, argv, bes, 8);
  if (!nbe) return 2;
  if (arg_str(argc, argv, "--preset")) return run_presets(argc, argv, bes, nbe, arg_str(argc, argv, "--preset"));
  uint64_t seed = tk_arg_u64(argc, argv, "--seed", "QKVFUSE_TEST_SEED", 0x51ced);
  uint64_t ncases = tk_arg_u64(argc, argv, "--cases", "QKVFUSE_TEST_CASES", 400);
  uint64_t only = tk_arg_u64(argc, argv, "--only", NULL, UINT64_MAX);
  if (only != UINT64_MAX && ncases <= only) ncases = only + 1;
  tk_limits lim = {(int64_t)tk_arg_u64(argc, argv, "--max-elems", NULL, 250000), tk_arg_has(argc, argv, "--wide")};
  int verbose = tk_arg_has(argc, argv, "--verbose");
  const tk_spec_shaper shape = tk_shaper_from(argc, argv);
  const int page_table = tk_arg_has(argc, argv, "--page-table");
  /* --rounding MODE: every case in that rounding mode (the random cases draw fused or unfused_parity) */
  const char *rounding = arg_str(argc, argv, "--rounding");
  int rounding_mode = -1;
  for (int m = 0; rounding && m < QKVFUSE_ROUNDING_COUNT; m++)
    if (!strcmp(rounding, tk_rounding_name((qkvfuse_rounding)m))) rounding_mode = m;
  if (rounding && rounding_mode < 0) {
    fprintf(stderr, "--rounding: expected fused, unfused_parity, ascend_triton or cann; got %s\n", rounding);
    return 2;
  }
  const char *strided = arg_str(argc, argv, "--strided");
  if (strided && strcmp(strided, "vectors") != 0 && strcmp(strided, "all") != 0) {
    fprintf(stderr, "test_ops: --strided: expected vectors or all, got '%s'\n", strided);
    return 2;
  }
  int failed_total = 0, ran_total = 0;
  for (int b = 0; b < nbe; b++) {
    tk_stats all;
    memset(&all, 0, sizeof all);
    int ran = 0, failed = 0, skipped = 0;
    /* a backend this build or machine cannot serve at all: skip without building cases */
    const tk_device *dev = tk_device_for_backend(bes[b]);
    qkvfuse_desc probe = QKVFUSE_DESC_INIT;
    qkvfuse_plan *pp = NULL;
    probe.num_q_heads = probe.num_kv_heads = 1, probe.head_dim = 64, probe.backend = bes[b];
    if (dev) probe.device_type = dev->type;
    if (!dev || qkvfuse_plan_create(&probe, &pp) == QKVFUSE_ERROR_UNSUPPORTED) {
      printf("test_ops[%s]: backend not available here, skipped\n", tk_backend_str(bes[b]));
      continue;
    }
    qkvfuse_plan_destroy(pp);
    for (uint64_t i = 0; i < ncases; i++) {
      if (only != UINT64_MAX && i != only) continue;
      uint64_t cs = tk_case_seed(seed, i);
      tk_rng r;
      tk_rng_seed(&r, cs);
      tk_spec sp;
      tk_spec_random(&sp, &r, &lim);
      if (shape) shape(&sp, &r);
      if (rounding_mode >= 0) sp.rounding = (qkvfuse_rounding)rounding_mode;
      if (page_table) {
        if (sp.layout == QKVFUSE_CACHE_NONE || sp.layout == QKVFUSE_CACHE_CONTIGUOUS) sp.layout = QKVFUSE_CACHE_PAGED;
        sp.addressing = QKVFUSE_ADDRESS_PAGE_TABLE;
        tk_spec_fixup(&sp);
      }
      if (strided) strided_views(&sp, cs, !strcmp(strided, "all"));
      tk_case c;
      char desc[1024];
      tk_spec_describe(&sp, desc, sizeof desc);
      if (verbose) printf("case %llu: %s\n", (unsigned long long)i, desc);
      if (tk_case_build(&c, &sp, cs ^ 0xA5A5A5A5ull)) {
        printf("FAIL case %llu: out of memory building it\n", (unsigned long long)i);
        return 1;
      }
      tk_stats st;
      memset(&st, 0, sizeof st);
      int rc = tk_check_case(&c, bes[b], tk_run_core, NULL, &st);
      tk_case_free(&c);
      if (rc == TK_SKIP) {
        skipped++;
        continue;
      }
      ran++;
      tk_stats_merge(&all, &st);
      if (rc == TK_FAIL) {
        if (failed++ < 10) {
          printf("FAIL test_ops backend=%s case=%llu seed=0x%llx: %s\n  failing: %s\n  spec: %s\n  rerun: %s --backend %s --seed 0x%llx --only %llu\n",
                 tk_backend_str(bes[b]), (unsigned long long)i, (unsigned long long)seed, st.first, st.where, desc, argv[0],
                 tk_backend_str(bes[b]), (unsigned long long)seed, (unsigned long long)i);
        }
      }
    }
    printf("test_ops[%s]: %d cases run, %d skipped, %d failed; %lld elements/bytes checked; max error/tolerance %.3f\n",
           tk_backend_str(bes[b]), ran, skipped, failed, (long long)all.checked, all.max_ratio);
    if (verbose) printf("  worst: %s\n", all.worst);
    failed_total += failed;
    ran_total += ran;
  }
  if (failed_total) return 1;
  return ran_total ? 0 : TK_SKIP;
}
