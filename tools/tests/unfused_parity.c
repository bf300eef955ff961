/* SPDX-License-Identifier: Apache-2.0 */
/* unfused_parity: the benchmark's unfused baseline (tools/unfused.c) must be
 * byte-identical to qkvfuse_run on the reference backend in unfused-parity
 * mode, with each stage set it runs: the reference's scalar stages (what
 * `qkvfuse bench` uses for a reference plan) and the CPU backend's SIMD stage
 * kernels of every ISA (qf_cpu_unfused_kernels, what it uses for a cpu-*
 * plan, chosen through the variant cpu.isa). Otherwise the benchmark's
 * speedup would compare different work.
 *
 * The cases are the test kit's random specs (every input dtype, layout,
 * addressing, quantization mode, RoPE source and style, partial RoPE, norms,
 * in-place and strided views, skipped slots), with q_out, k_out and v_out of
 * the I/O dtype (the chain's envelope); every byte of every buffer is
 * compared, and every feature below must have occurred. Outside the envelope
 * the chain must refuse (QKVFUSE_ERROR_UNSUPPORTED).
 *
 * A white-box test: it includes the library's internal headers (core/plan.h
 * for qf_resolve, cpu/cpu.h).
 *
 *   test_unfused_parity [--seed S] [--cases N] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/plan.h"
#include "cpu/cpu.h"
#include "harness.h"
#include "qkvfuse_experimental.h"
#include "unfused.h"

/* The stage sets: the scalar stages, then the CPU backend's per ISA. */
static const char *const sets[] = {"scalar stages", "avx512bf16", "avx512", "avx2", "scalar"};
enum { NSET = 5 };

enum {
  FEATURE_INT32_INPUT,
  FEATURE_PARTIAL_ROPE,
  FEATURE_INTERLEAVED,
  FEATURE_SKIPPED_SLOT,
  FEATURE_IN_PLACE,
  FEATURE_THREADS,
  FEATURE_Q_QUANT,
  FEATURE_PER_HEAD_SCALE,
  FEATURE_PAGE_TABLE,
  FEATURE_CONTIGUOUS,
  FEATURE_COUNT
};
static const char *const feature_names[FEATURE_COUNT] = {
    "int32 input", "partial rope",    "interleaved", "skipped slot", "in place",
    "threads > 1", "quantized q", "per-head scales", "page table", "contiguous cache"};

/* Run c (from its initial bytes) with desc d: the fused op (set < 0) or the
 * unfused chain with stage set `set`. */
static qkvfuse_status run(tk_case *c, const qkvfuse_desc *d, int set) {
  qkvfuse_tensor tens[TK_NSLOT];
  qkvfuse_args a;
  if (tk_case_upload(c, c->dev)) return QKVFUSE_ERROR_OUT_OF_MEMORY;
  tk_case_args(c, TK_AT_DEVICE, tens, &a);
  qkvfuse_plan *plan = NULL;
  qkvfuse_status s = set > 0 ? qkvfuse_experimental_plan_create(d, set == 1 ? "cpu.isa=avx512bf16"
                                                                     : set == 2 ? "cpu.isa=avx512"
                                                                     : set == 3 ? "cpu.isa=avx2"
                                                                                : "cpu.isa=scalar",
                                                                 &plan)
                             : qkvfuse_plan_create(d, &plan);
  if (s == QKVFUSE_SUCCESS && set < 0) s = qkvfuse_run(plan, &a, NULL);
  if (s == QKVFUSE_SUCCESS && set >= 0) {
    qf_problem p;
    s = qf_resolve(plan, &a, &p);
    void *scratch = s == QKVFUSE_SUCCESS ? malloc(qf_unfused_scratch_bytes(&p) + 1) : NULL;
    if (s == QKVFUSE_SUCCESS) {
      const qf_unfused_kernels *k = set > 0 ? qf_cpu_unfused_kernels(plan) : NULL;
      s = set > 0 && !k ? QKVFUSE_ERROR_UNSUPPORTED : qf_unfused_run_with(&p, scratch, k);
    }
    free(scratch);
  }
  qkvfuse_plan_destroy(plan);
  if (tk_case_download(c)) return QKVFUSE_ERROR_OUT_OF_MEMORY;
  return s;
}

/* The spec inside the chain's envelope: q_out (unquantized), k_out and v_out
 * of the I/O dtype, which is the input's for float input; for int32 input
 * q_out's, or with a quantized q the RoPE table's (float32 without one). */
static void envelope(tk_spec *sp) {
  const int table = sp->rope_source == QKVFUSE_ROPE_COS_SIN_CACHE || sp->rope_source == QKVFUSE_ROPE_COS_SIN;
  const qkvfuse_dtype io = sp->qkv_dt != QKVFUSE_DTYPE_INT32 ? sp->qkv_dt
                           : sp->q_quant                      ? (table ? sp->rope_dt : QKVFUSE_DTYPE_FLOAT32)
                                                              : sp->q_out_dt;
  if (!sp->q_quant) sp->q_out_dt = io;
  if (sp->k_out_dt) sp->k_out_dt = io;
  if (sp->v_out_dt) sp->v_out_dt = io;
  tk_spec_fixup(sp);
}

static void features(const tk_spec *s, int threads, int seen[FEATURE_COUNT]) {
  if (s->T == 0) return;
  const int rope = s->rope_source != QKVFUSE_ROPE_NONE, cache = s->layout != QKVFUSE_CACHE_NONE;
  seen[FEATURE_INT32_INPUT] |= s->qkv_dt == QKVFUSE_DTYPE_INT32;
  seen[FEATURE_PARTIAL_ROPE] |= rope && s->R < s->D;
  seen[FEATURE_INTERLEAVED] |= rope && s->rope_style == QKVFUSE_ROPE_INTERLEAVED;
  seen[FEATURE_SKIPPED_SLOT] |= cache && s->skip_prob > 0;
  seen[FEATURE_IN_PLACE] |= s->in_place_q || s->in_place_k;
  seen[FEATURE_THREADS] |= threads > 1 && s->T >= 32;
  seen[FEATURE_Q_QUANT] |= s->q_quant != QKVFUSE_QUANT_NONE;
  seen[FEATURE_PER_HEAD_SCALE] |=
      cache && s->Nkv > 1 && ((s->k_quant && s->k_scale_kind == 4) || (s->v_quant && s->v_scale_kind == 4));
  seen[FEATURE_PAGE_TABLE] |= cache && s->addressing == QKVFUSE_ADDRESS_PAGE_TABLE;
  seen[FEATURE_CONTIGUOUS] |= s->layout == QKVFUSE_CACHE_CONTIGUOUS;
}

/* A float input whose dtype is not q_out's: valid for the operator, outside
 * the chain's envelope, so it must refuse rather than compute other roundings. */
static int check_refusal(uint64_t seed) {
  for (uint64_t i = 0;; i++) {
    tk_rng r;
    tk_rng_seed(&r, tk_case_seed(seed, i));
    tk_spec sp;
    tk_limits lim = {1 << 16, 0};
    tk_spec_random(&sp, &r, &lim);
    sp.rounding = QKVFUSE_ROUNDING_UNFUSED_PARITY;
    if (sp.qkv_dt == QKVFUSE_DTYPE_INT32 || sp.q_quant || sp.in_place_q || sp.q_out_dt == sp.qkv_dt) continue;
    tk_case c;
    if (tk_case_build(&c, &sp, 7)) return 1;
    c.dev = tk_device_cpu();
    qkvfuse_desc d = c.desc;
    d.backend = QKVFUSE_BACKEND_REFERENCE;
    const qkvfuse_status s = run(&c, &d, 0);
    tk_case_free(&c);
    if (s == QKVFUSE_ERROR_UNSUPPORTED) return 0;
    printf("FAIL: %s input with a %s q_out: expected QKVFUSE_ERROR_UNSUPPORTED, got %s: %s\n",
           qkvfuse_dtype_name(sp.qkv_dt), qkvfuse_dtype_name(sp.q_out_dt), qkvfuse_status_string(s),
           qkvfuse_last_error());
    return 1;
  }
}

int main(int argc, char **argv) {
  const uint64_t seed = tk_arg_u64(argc, argv, "--seed", "QKVFUSE_TEST_SEED", 0x0F05E);
  const uint64_t ncases = tk_arg_u64(argc, argv, "--cases", "QKVFUSE_TEST_CASES", 300);
  int failures = 0, ran[NSET] = {0}, seen[FEATURE_COUNT] = {0};
  int64_t compared = 0, refused = 0;
  tk_limits lim = {1 << 18, 0};
  for (uint64_t i = 0; i < ncases; i++) {
    const uint64_t cs = tk_case_seed(seed, i);
    tk_rng r;
    tk_rng_seed(&r, cs);
    tk_spec sp;
    tk_spec_random(&sp, &r, &lim);
    sp.rounding = QKVFUSE_ROUNDING_UNFUSED_PARITY;
    envelope(&sp);
    tk_case c;
    if (tk_case_build(&c, &sp, cs ^ 0xFACE)) return 1;
    c.dev = tk_device_cpu();
    qkvfuse_desc d = c.desc;
    d.backend = QKVFUSE_BACKEND_REFERENCE;
    qkvfuse_status s = run(&c, &d, -1);
    uint8_t *want[TK_NSLOT + 1] = {0};
    for (int b = 0; b <= TK_NSLOT; b++)
      if (c.buf[b].bytes) want[b] = (uint8_t *)malloc(c.buf[b].bytes), memcpy(want[b], c.buf[b].got, c.buf[b].bytes);
    d.num_threads = 1 + (int)(i % 3);
    for (int k = 0; s == QKVFUSE_SUCCESS && k < NSET; k++) {
      d.backend = k == 0 ? QKVFUSE_BACKEND_REFERENCE : QKVFUSE_BACKEND_CPU;
      const qkvfuse_status su = run(&c, &d, k);
      if (su == QKVFUSE_ERROR_UNSUPPORTED && k > 0) { /* an ISA this CPU or build lacks */
        refused++;
        continue;
      }
      ran[k]++;
      if (k == 0) features(&sp, d.num_threads, seen);
      int bad = su != QKVFUSE_SUCCESS;
      for (int b = 0; !bad && b <= TK_NSLOT; b++) {
        if (!c.buf[b].bytes) continue;
        compared += (int64_t)c.buf[b].bytes;
        for (size_t at = 0; at < c.buf[b].bytes; at++) {
          if (c.buf[b].got[at] == want[b][at]) continue;
          printf("FAIL case %llu %s: buffer of %s differs at byte %zu\n", (unsigned long long)i, sets[k],
                 b < TK_NSLOT ? tk_slot_name[b] : "error_flags", at);
          bad = 1;
          break;
        }
      }
      if (su != QKVFUSE_SUCCESS)
        printf("FAIL case %llu %s: %s: %s\n", (unsigned long long)i, sets[k], qkvfuse_status_string(su),
               qkvfuse_last_error());
      if (bad) {
        char desc[1024];
        tk_spec_describe(&sp, desc, sizeof desc);
        printf("  spec: %s\n  rerun: %s --seed 0x%llx --cases %llu\n", desc, argv[0], (unsigned long long)seed,
               (unsigned long long)i + 1);
        failures++;
      }
    }
    if (s != QKVFUSE_SUCCESS) {
      printf("FAIL case %llu: the reference refused a valid call: %s: %s\n", (unsigned long long)i,
             qkvfuse_status_string(s), qkvfuse_last_error());
      failures++;
    }
    for (int b = 0; b <= TK_NSLOT; b++) free(want[b]);
    tk_case_free(&c);
  }
  for (int f = 0; f < FEATURE_COUNT; f++)
    if (!seen[f]) {
      printf("FAIL: no case had %s (raise --cases or widen the generator)\n", feature_names[f]);
      failures++;
    }
  if (!ran[NSET - 1]) {
    printf("FAIL: the CPU backend's scalar kernels never ran\n");
    failures++;
  }
  failures += check_refusal(seed);
  printf("test_unfused_parity: %llu cases; runs with the scalar stages %d, the CPU kernels avx512bf16/avx512/avx2/"
         "scalar %d/%d/%d/%d (%lld refused: ISAs this CPU lacks); %lld bytes compared, %d failures\n",
         (unsigned long long)ncases, ran[0], ran[1], ran[2], ran[3], ran[4], (long long)refused, (long long)compared,
         failures);
  return failures ? 1 : 0;
}
