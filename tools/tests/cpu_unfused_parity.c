/* SPDX-License-Identifier: Apache-2.0 */
/* The benchmark's unfused baseline with the CPU backend's SIMD stage kernels
 * (tools/unfused.c with qf_cpu_unfused_kernels, what `qkvfuse bench` runs for
 * a cpu-* plan) against the
 * reference backend in unfused-parity mode: byte for byte, under every ISA.
 * The baseline must compute exactly what the fused op computes, or the
 * benchmark's fusion speedup would compare different work.
 *
 * A white-box test: it includes the library's internal headers (core/plan.h
 * for qf_resolve, cpu/cpu.h), as unfused_parity.c does for the scalar unfused
 * path; the cases come from the test kit.
 *
 *   test_cpu_unfused_parity [--seed S] [--cases N] */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/plan.h"
#include "cpu/cpu.h"
#include "harness.h"
#include "unfused.h"

static const char *const isas[] = {"avx512bf16", "avx512", "avx2", "scalar"};
enum { NISA = 4 };

/* Run c (from its initial bytes) with desc d: the fused op (unfused == 0) or
 * the unfused path with d's plan's stage kernels. */
static qkvfuse_status run(tk_case *c, const qkvfuse_desc *d, int unfused) {
  qkvfuse_tensor tens[TK_NSLOT];
  qkvfuse_args a;
  tk_case_upload(c, c->dev);
  tk_case_args(c, TK_AT_DEVICE, tens, &a);
  qkvfuse_plan *plan = NULL;
  qkvfuse_status s = qkvfuse_plan_create(d, &plan);
  if (s == QKVFUSE_SUCCESS && !unfused) s = qkvfuse_run(plan, &a, NULL);
  if (s == QKVFUSE_SUCCESS && unfused) {
    qf_problem p;
    s = qf_resolve(plan, &a, &p);
    void *scratch = s == QKVFUSE_SUCCESS ? malloc(qf_unfused_scratch_bytes(&p) + 1) : NULL;
    if (s == QKVFUSE_SUCCESS) s = qf_unfused_run_with(&p, scratch, qf_cpu_unfused_kernels(plan));
    free(scratch);
  }
  qkvfuse_plan_destroy(plan);
  tk_case_download(c);
  return s;
}

int main(int argc, char **argv) {
  const uint64_t seed = tk_arg_u64(argc, argv, "--seed", "QKVFUSE_TEST_SEED", 0x0F05E);
  const uint64_t ncases = tk_arg_u64(argc, argv, "--cases", "QKVFUSE_TEST_CASES", 120);
  int failures = 0, isa_ran[NISA] = {0};
  int64_t compared = 0, refused = 0;
  tk_limits lim = {1 << 18};
  for (uint64_t i = 0; i < ncases; i++) {
    const uint64_t cs = tk_case_seed(seed, i);
    tk_rng r;
    tk_rng_seed(&r, cs);
    tk_spec sp;
    tk_spec_random(&sp, &r, &lim);
    sp.rounding = QKVFUSE_ROUNDING_UNFUSED_PARITY;
    /* the unfused path runs only I/O-dtype intermediates (tools/unfused.h) */
    if (sp.qkv_dt != QKVFUSE_DTYPE_INT32) sp.q_out_dt = sp.qkv_dt;
    if (sp.k_out_dt) sp.k_out_dt = sp.q_out_dt;
    if (sp.v_out_dt) sp.v_out_dt = sp.q_out_dt;
    tk_spec_fixup(&sp);
    tk_case c;
    if (tk_case_build(&c, &sp, cs ^ 0xFACE)) return 1;
    c.dev = tk_device_cpu();
    qkvfuse_desc d = c.desc;
    d.backend = QKVFUSE_BACKEND_REFERENCE;
    qkvfuse_status s = run(&c, &d, 0);
    uint8_t *want[TK_NSLOT + 1] = {0};
    for (int b = 0; b <= TK_NSLOT; b++)
      if (c.buf[b].bytes) want[b] = (uint8_t *)malloc(c.buf[b].bytes), memcpy(want[b], c.buf[b].got, c.buf[b].bytes);
    for (int k = 0; s == QKVFUSE_SUCCESS && k < NISA; k++) {
      setenv("QKVFUSE_CPU_ISA", isas[k], 1);
      d.backend = QKVFUSE_BACKEND_CPU;
      d.num_threads = 1 + (int)(i % 3);
      const qkvfuse_status su = run(&c, &d, 1);
      if (su == QKVFUSE_ERROR_UNSUPPORTED) { /* an ISA this CPU lacks, or a dtype mix the unfused path refuses */
        refused++;
        continue;
      }
      isa_ran[k]++;
      int bad = su != QKVFUSE_SUCCESS;
      for (int b = 0; !bad && b <= TK_NSLOT; b++) {
        if (!c.buf[b].bytes) continue;
        compared += (int64_t)c.buf[b].bytes;
        for (size_t at = 0; at < c.buf[b].bytes; at++) {
          if (c.buf[b].got[at] == want[b][at]) continue;
          printf("FAIL case %llu %s: buffer of %s differs at byte %zu\n", (unsigned long long)i, isas[k],
                 b < TK_NSLOT ? tk_slot_name[b] : "error_flags", at);
          bad = 1;
          break;
        }
      }
      if (su != QKVFUSE_SUCCESS)
        printf("FAIL case %llu %s: %s: %s\n", (unsigned long long)i, isas[k], qkvfuse_status_string(su),
               qkvfuse_last_error());
      if (bad) {
        char desc[1024];
        tk_spec_describe(&sp, desc, sizeof desc);
        printf("  spec: %s\n", desc);
        failures++;
      }
    }
    unsetenv("QKVFUSE_CPU_ISA");
    for (int b = 0; b <= TK_NSLOT; b++) free(want[b]);
    tk_case_free(&c);
  }
  if (!isa_ran[NISA - 1]) {
    printf("FAIL: the scalar kernels never ran (no case the unfused path accepts)\n");
    failures++;
  }
  printf(
      "test_cpu_unfused: %llu cases; runs per ISA avx512bf16/avx512/avx2/scalar %d/%d/%d/%d (%lld refused); "
      "%lld bytes compared, %d failures\n",
      (unsigned long long)ncases, isa_ran[0], isa_ran[1], isa_ran[2], isa_ran[3], (long long)refused,
      (long long)compared, failures);
  return failures ? 1 : 0;
}
