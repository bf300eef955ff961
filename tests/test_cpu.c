/* SPDX-License-Identifier: Apache-2.0 */
/* The optimized CPU backend against the scalar reference, byte for byte.
 *
 * The CPU backend computes every element with the reference's float32
 * operations in the reference's order (docs/CPU.md), so its outputs and caches
 * must equal the reference's exactly, for every instruction set and thread
 * count. On random cases of every option (test kit specs, larger than
 * test_ops's so that several threads take part), some with raw random bit
 * patterns in the input (NaN, Inf, subnormals of every dtype) and some with
 * duplicate cache slots (the later token wins, even across threads), each
 * case runs once on the reference and then on the CPU backend under every ISA
 * this machine has (QKVFUSE_CPU_ISA, read at plan time) with 1, 2, 3 and 7
 * threads; every byte of every buffer must match, except that a NaN output
 * element matches any NaN (payload and sign are not reproducible in C). Also:
 * the ISA variable's errors, and a multi-threaded run in a forked child.
 *
 *   test_cpu [--seed S] [--cases N] [--only I] [--verbose]
 * Exit 77 when this build has no optimized CPU backend. */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/dtype.h"
#include "fp.h"
#include "harness.h"
#include "tview.h"

#define ISA_ENV "QKVFUSE_CPU_ISA"
#define MIN_ELEMS_PER_THREAD 32768 /* docs/CPU.md: a thread per 32768 input elements at most, */
#define MIN_ELEMS_SPLIT 4096       /* but two from 4096 */

static const char *const isas[] = {"avx512bf16", "avx512", "avx2", "scalar"};
static const int thread_counts[] = {1, 2, 3, 7};
enum { NISA = 4, NTHR = 4 };

/* Whether this process can plan the CPU backend with QKVFUSE_CPU_ISA = isa. */
static int isa_usable(const char *isa) {
  setenv(ISA_ENV, isa, 1);
  qkvfuse_desc d = QKVFUSE_DESC_INIT;
  d.num_q_heads = d.num_kv_heads = 1, d.head_dim = 64, d.backend = QKVFUSE_BACKEND_CPU;
  qkvfuse_plan *p = NULL;
  const qkvfuse_status s = qkvfuse_plan_create(&d, &p);
  qkvfuse_plan_destroy(p);
  unsetenv(ISA_ENV);
  return s == QKVFUSE_SUCCESS;
}

/* Run case c (re-uploaded from its initial bytes) on `be` with `threads`. */
static qkvfuse_status run_case(tk_case *c, qkvfuse_backend be, int threads, char *name, size_t n) {
  qkvfuse_tensor tens[TK_NSLOT];
  qkvfuse_args a;
  tk_case_upload(c, c->dev);
  tk_case_args(c, TK_AT_DEVICE, tens, &a);
  qkvfuse_desc d = c->desc;
  d.backend = be;
  d.num_threads = threads;
  qkvfuse_plan *p = NULL;
  qkvfuse_status s = qkvfuse_plan_create(&d, &p);
  if (s == QKVFUSE_SUCCESS) {
    snprintf(name, n, "%s", qkvfuse_plan_backend_name(p));
    s = qkvfuse_run(p, &a, NULL);
  }
  qkvfuse_plan_destroy(p);
  tk_case_download(c);
  return s;
}

/* Write value v into element i of an integer view's initial bytes. */
static void poke_index(tk_case *c, int slot, int64_t i, int64_t v) {
  tk_view *w = &c->view[slot];
  uint8_t *at = c->buf[w->buf].init + (size_t)(w->off + tk_elem_offset(&w->t, i)) * tk_size(w->t.dtype);
  if (w->t.dtype == QKVFUSE_DTYPE_INT64)
    memcpy(at, &v, 8);
  else {
    int32_t v32 = (int32_t)v;
    memcpy(at, &v32, 4);
  }
}

/* Overwrite a fraction of the input (qkv, or q, k and v) with random bit patterns. */
static void raw_bits(tk_case *c, tk_rng *r) {
  static const int slots[] = {TK_QKV, TK_Q, TK_K, TK_V};
  for (int s = 0; s < 4; s++) {
    tk_view *w = &c->view[slots[s]];
    if (!w->present) continue;
    const int64_t n = tk_numel(&w->t);
    const size_t es = tk_size(w->t.dtype);
    for (int64_t k = 0; k < n / 16 + 1 && n > 0; k++) {
      const int64_t i = tk_rng_range(r, 0, n - 1);
      uint64_t bits = tk_rng_next(r);
      if (tk_rng_chance(r, 0.5)) bits &= es == 2 ? 0x807fu : 0x807fffffu; /* a subnormal (bf16 / f32 pattern) */
      memcpy(c->buf[w->buf].init + (size_t)(w->off + tk_elem_offset(&w->t, i)) * es, &bits, es);
    }
  }
}

/* Give some tokens the sequence and position of a later token (page table):
 * both then have its cache row. */
static int duplicate_pages(tk_case *c, tk_rng *r) {
  qkvfuse_tensor bt = c->view[TK_BATCH_INDICES].t, pt = c->view[TK_KV_POSITIONS].t;
  bt.data = c->buf[c->view[TK_BATCH_INDICES].buf].init + (size_t)c->view[TK_BATCH_INDICES].off * tk_size(bt.dtype);
  pt.data = c->buf[c->view[TK_KV_POSITIONS].buf].init + (size_t)c->view[TK_KV_POSITIONS].off * tk_size(pt.dtype);
  int made = 0;
  for (int k = 0; k < 8; k++) {
    const int64_t late = tk_rng_range(r, 1, c->sp.T - 1), early = tk_rng_range(r, 0, late - 1);
    const int64_t b = tk_get_int(&bt, late);
    if (b < 0) continue;
    poke_index(c, TK_BATCH_INDICES, early, b);
    poke_index(c, TK_KV_POSITIONS, early, tk_get_int(&pt, late));
    made = 1;
  }
  return made;
}

/* Give some tokens the slot of a later token (paged, paged_hnd, nz). */
static int duplicate_slots(tk_case *c, tk_rng *r) {
  const tk_view *w = &c->view[TK_SLOT_MAPPING];
  if (c->view[TK_BATCH_INDICES].present && c->sp.T >= 2) return duplicate_pages(c, r);
  if (!w->present || c->sp.layout == QKVFUSE_CACHE_CONTIGUOUS || c->sp.T < 2) return 0;
  qkvfuse_tensor sm = w->t;
  sm.data = c->buf[w->buf].init + (size_t)w->off * tk_size(sm.dtype);
  int made = 0;
  for (int k = 0; k < 8; k++) {
    const int64_t late = tk_rng_range(r, 1, c->sp.T - 1), early = tk_rng_range(r, 0, late - 1);
    const int64_t s = tk_get_int(&sm, late);
    if (s < 0) continue;
    poke_index(c, TK_SLOT_MAPPING, early, s);
    made = 1;
  }
  return made;
}

/* NaN payloads and signs are not reproducible (C does not fix which operand's
 * NaN an operation returns, and compilers commute operands), so an output
 * element that is NaN in both runs matches whatever its bits. tag[i] is the
 * dtype of the output element covering byte i of a buffer (0: not an output). */
static void tag_outputs(tk_case *c, int buf, uint8_t *tag) {
  static const int outs[] = {TK_Q_OUT, TK_K_OUT, TK_V_OUT, TK_K_CACHE, TK_V_CACHE};
  for (size_t k = 0; k < sizeof outs / sizeof outs[0]; k++) {
    const tk_view *w = &c->view[outs[k]];
    if (!w->present || w->buf != buf) continue;
    const size_t es = tk_size(w->t.dtype);
    const int64_t n = tk_numel(&w->t);
    for (int64_t i = 0; i < n; i++)
      tag[(size_t)(w->off + tk_elem_offset(&w->t, i)) * es] = (uint8_t)(w->t.dtype & 0xff) | 1u;
  }
}

static int is_nan(const uint8_t *p, qkvfuse_dtype dt) {
  uint32_t u = 0;
  switch (dt) {
    case QKVFUSE_DTYPE_FLOAT32:
      memcpy(&u, p, 4);
      return (u & 0x7f800000u) == 0x7f800000u && (u & 0x7fffffu);
    case QKVFUSE_DTYPE_FLOAT16:
      memcpy(&u, p, 2);
      return (u & 0x7c00u) == 0x7c00u && (u & 0x3ffu);
    case QKVFUSE_DTYPE_BFLOAT16:
      memcpy(&u, p, 2);
      return (u & 0x7f80u) == 0x7f80u && (u & 0x7fu);
    case QKVFUSE_DTYPE_FLOAT8_E4M3FN:
      return (p[0] & 0x7f) == 0x7f;
    case QKVFUSE_DTYPE_FLOAT8_E5M2:
      return (p[0] & 0x7c) == 0x7c && (p[0] & 0x3);
    default:
      return 0;
  }
}

/* The dtype of the output element starting at byte `start` of a buffer whose
 * element starts are tagged (see tag_outputs); NONE if untagged. */
static qkvfuse_dtype tagged_dtype(const tk_case *c, int buf, size_t start) {
  static const int outs[] = {TK_Q_OUT, TK_K_OUT, TK_V_OUT, TK_K_CACHE, TK_V_CACHE};
  for (size_t k = 0; k < sizeof outs / sizeof outs[0]; k++) {
    const tk_view *w = &c->view[outs[k]];
    if (w->present && w->buf == buf && start % tk_size(w->t.dtype) == 0) return w->t.dtype;
  }
  return QKVFUSE_DTYPE_NONE;
}

/* First byte where got differs from want other than NaN vs NaN, or -1. */
static int64_t first_diff(tk_case *c, int buf, const uint8_t *got, const uint8_t *want, size_t n, int64_t *nans) {
  uint8_t *tag = NULL;
  for (size_t i = 0; i < n; i++) {
    if (got[i] == want[i]) continue;
    if (!tag) {
      tag = (uint8_t *)calloc(n, 1);
      tag_outputs(c, buf, tag);
    }
    /* find the element start: the nearest tagged byte at or below i within 4 bytes */
    size_t start = i;
    while (start > 0 && i - start < 4 && !tag[start]) start--;
    const qkvfuse_dtype dt = tag[start] ? tagged_dtype(c, buf, start) : QKVFUSE_DTYPE_NONE;
    const size_t es = dt ? tk_size(dt) : 0;
    if (dt && i < start + es && is_nan(got + start, dt) && is_nan(want + start, dt)) {
      (*nans)++;
      i = start + es - 1;
      continue;
    }
    free(tag);
    return (int64_t)i;
  }
  free(tag);
  return -1;
}

/* The library's e5m2 codec (core/dtype.h, the element function of every
 * ISA's scalar tail and of the reference) against the test kit's, which is
 * written from the format alone: every code decodes alike; float32 values
 * round alike: a stride through all bit patterns, and every midpoint between
 * neighbouring codes with its float32 neighbours (ties to even, saturation,
 * subnormals, NaN with its sign). */
static int check_e5m2_codec(void) {
  int bad = 0;
  for (uint32_t b = 0; b < 256; b++) {
    const double want = tk_decode(QKVFUSE_DTYPE_FLOAT8_E5M2, &b), got = qf_e5m2_to_f32((uint8_t)b);
    if (!(got == want || (isnan(got) && isnan(want))) && bad++ < 5)
      printf("FAIL e5m2 decode of 0x%02x: library %.9g, test kit %.9g\n", b, got, want);
  }
  uint64_t checked = 0;
  float fs[3];
  for (uint64_t u = 0; u <= 0xffffffffull; u += 0x7f1) { /* a stride through every bit pattern */
    const uint32_t w = (uint32_t)u;
    memcpy(&fs[0], &w, 4);
    uint8_t want;
    tk_encode(QKVFUSE_DTYPE_FLOAT8_E5M2, &want, fs[0]);
    const uint8_t got = qf_f32_to_e5m2(fs[0]);
    checked++;
    if (got != want && bad++ < 5)
      printf("FAIL e5m2 encode of %.9g (0x%08x): library 0x%02x, test kit 0x%02x\n", fs[0], w, got, want);
  }
  for (uint32_t c = 0; c < 256; c++) { /* the midpoint above each finite code (exact in float32), and beside it */
    if ((c & 0x7f) > 0x7b) continue;
    const uint8_t c1 = (uint8_t)(c + 1);
    const double lo = tk_decode(QKVFUSE_DTYPE_FLOAT8_E5M2, &c);
    const double hi = (c & 0x7f) == 0x7b ? (c & 0x80 ? -65536.0 : 65536.0) : tk_decode(QKVFUSE_DTYPE_FLOAT8_E5M2, &c1);
    const float mid = (float)((lo + hi) / 2);
    fs[0] = mid, fs[1] = nextafterf(mid, 0.0f), fs[2] = nextafterf(mid, 2 * mid);
    for (int k = 0; k < 3; k++) {
      uint8_t want;
      tk_encode(QKVFUSE_DTYPE_FLOAT8_E5M2, &want, fs[k]);
      const uint8_t got = qf_f32_to_e5m2(fs[k]);
      checked++;
      if (got != want && bad++ < 5)
        printf("FAIL e5m2 encode of %.9g (code 0x%02x's midpoint%s): library 0x%02x, test kit 0x%02x\n", fs[k], c,
               k == 0 ? "" : k == 1 ? " - 1 ulp" : " + 1 ulp", got, want);
    }
  }
  if (bad) printf("FAIL e5m2 codec: %d mismatches in %llu values\n", bad, (unsigned long long)checked);
  return bad != 0;
}

/* The ISA variable: unknown values are refused with a message naming it;
 * AUTO then falls back to the reference. */
static int check_env_errors(void) {
  int bad = 0;
  qkvfuse_desc d = QKVFUSE_DESC_INIT;
  d.num_q_heads = d.num_kv_heads = 1, d.head_dim = 64;
  qkvfuse_plan *p = NULL;
  setenv(ISA_ENV, "sse9", 1);
  d.backend = QKVFUSE_BACKEND_CPU;
  qkvfuse_status s = qkvfuse_plan_create(&d, &p);
  if (s != QKVFUSE_ERROR_UNSUPPORTED || !tk_names_argument(qkvfuse_last_error(), ISA_ENV)) {
    printf("FAIL %s=sse9: got %s \"%s\"; want QKVFUSE_ERROR_UNSUPPORTED naming %s\n", ISA_ENV, qkvfuse_status_string(s),
           qkvfuse_last_error(), ISA_ENV);
    bad++;
  }
  qkvfuse_plan_destroy(p);
  p = NULL;
  d.backend = QKVFUSE_BACKEND_AUTO;
  s = qkvfuse_plan_create(&d, &p);
  if (s != QKVFUSE_SUCCESS || strcmp(qkvfuse_plan_backend_name(p), "reference") != 0) {
    printf("FAIL %s=sse9 with backend auto: got %s, backend %s; want the reference\n", ISA_ENV,
           qkvfuse_status_string(s), p ? qkvfuse_plan_backend_name(p) : "-");
    bad++;
  }
  qkvfuse_plan_destroy(p);
  unsetenv(ISA_ENV);
  return bad;
}

/* After fork(), a child's multi-threaded run must work (the pool's workers
 * do not survive a fork). The child runs case c on 2 threads and must match
 * `want`; a hang is caught by alarm(). */
static int check_fork(tk_case *c, uint8_t *const *want) {
  fflush(stdout);
  const pid_t pid = fork();
  if (pid == 0) {
    alarm(20);
    char name[64];
    int bad = run_case(c, QKVFUSE_BACKEND_CPU, 2, name, sizeof name) != QKVFUSE_SUCCESS;
    int64_t nans = 0;
    for (int b = 0; !bad && b <= TK_NSLOT; b++)
      bad = c->buf[b].bytes && first_diff(c, b, c->buf[b].got, want[b], c->buf[b].bytes, &nans) >= 0;
    _exit(bad);
  }
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    printf("FAIL: a forked child's 2-thread run %s\n", pid < 0               ? "could not start"
                                                       : WIFSIGNALED(status) ? "hung or crashed"
                                                                             : "differs from the reference");
    return 1;
  }
  return 0;
}

int main(int argc, char **argv) {
  const uint64_t seed = tk_arg_u64(argc, argv, "--seed", "QKVFUSE_TEST_SEED", 0xB17E);
  uint64_t ncases = tk_arg_u64(argc, argv, "--cases", "QKVFUSE_TEST_CASES", 40);
  const uint64_t only = tk_arg_u64(argc, argv, "--only", NULL, UINT64_MAX);
  const int verbose = tk_arg_has(argc, argv, "--verbose");
  if (only != UINT64_MAX && ncases <= only) ncases = only + 1;
  const tk_device *dev = tk_device_cpu();

  int usable[NISA], nusable = 0;
  for (int k = 0; k < NISA; k++) nusable += usable[k] = isa_usable(isas[k]);
  if (!usable[NISA - 1]) {
    printf("test_cpu: this build has no optimized CPU backend, skipped\n");
    return TK_SKIP;
  }
  printf("test_cpu: ISAs:");
  for (int k = 0; k < NISA; k++) printf(" %s%s", isas[k], usable[k] ? "" : " (not on this CPU)");
  printf("\n");

  int failures = check_env_errors() + check_e5m2_codec();
  int64_t runs = 0, multi = 0, dup_multi = 0, cut = 0, raw = 0, bytes = 0, nans = 0;
  int forked = 0;
  tk_limits lim = {1 << 20, 0};
  for (uint64_t i = 0; i < ncases; i++) {
    if (only != UINT64_MAX && i != only) continue;
    const uint64_t cs = tk_case_seed(seed, i);
    tk_rng r;
    tk_rng_seed(&r, cs);
    tk_spec sp;
    tk_spec_random(&sp, &r, &lim);
    if (tk_rng_chance(&r, 0.6) && sp.layout != QKVFUSE_CACHE_CONTIGUOUS) { /* enough tokens for several threads */
      const int64_t H = (sp.Nq + 2 * sp.Nkv) * sp.D;
      sp.T = lim.max_elems / H < 1500 ? lim.max_elems / H : 1500;
      sp.B = sp.T, sp.S = 1, sp.in3d = 0;
      tk_spec_fixup(&sp);
    } else if (tk_rng_chance(&r, 0.4) && sp.layout != QKVFUSE_CACHE_CONTIGUOUS) {
      /* a decode call: 1 to 3 tokens, heads enough for two threads, so that
         with more threads than tokens each token's heads are cut in pieces */
      const int64_t heads = (MIN_ELEMS_SPLIT + sp.D - 1) / sp.D - 2 * sp.Nkv;
      if (sp.Nq < heads) sp.Nq = (heads + sp.Nkv - 1) / sp.Nkv * sp.Nkv;
      sp.T = tk_rng_range(&r, 1, 3);
      sp.B = sp.T, sp.S = 1, sp.in3d = 0;
      tk_spec_fixup(&sp);
    }
    char desc[1024];
    tk_spec_describe(&sp, desc, sizeof desc);
    if (verbose) printf("case %llu: %s\n", (unsigned long long)i, desc);
    tk_case c;
    if (tk_case_build(&c, &sp, cs ^ 0x5EED)) {
      printf("FAIL case %llu: out of memory\n", (unsigned long long)i);
      return 1;
    }
    c.dev = dev;
    const int with_raw = tk_rng_chance(&r, 0.3);
    if (with_raw) raw_bits(&c, &r), raw++;
    const int dups = tk_rng_chance(&r, 0.4) && duplicate_slots(&c, &r);

    char name[64];
    qkvfuse_status s = run_case(&c, QKVFUSE_BACKEND_REFERENCE, 1, name, sizeof name);
    if (s != QKVFUSE_SUCCESS) {
      printf("FAIL case %llu: reference: %s: %s\n  spec: %s\n", (unsigned long long)i, qkvfuse_status_string(s),
             qkvfuse_last_error(), desc);
      failures++;
      tk_case_free(&c);
      continue;
    }
    uint8_t *want[TK_NSLOT + 1];
    for (int b = 0; b <= TK_NSLOT; b++) {
      want[b] = c.buf[b].bytes ? (uint8_t *)malloc(c.buf[b].bytes) : NULL;
      if (want[b]) memcpy(want[b], c.buf[b].got, c.buf[b].bytes);
    }
    const int64_t H = (sp.Nq + 2 * sp.Nkv) * sp.D;
    for (int k = 0; k < NISA; k++) {
      if (!usable[k]) continue;
      setenv(ISA_ENV, isas[k], 1);
      for (int n = 0; n < NTHR; n++) {
        const int threads = thread_counts[n];
        s = run_case(&c, QKVFUSE_BACKEND_CPU, threads, name, sizeof name);
        runs++;
        int64_t effective = sp.T * H / MIN_ELEMS_PER_THREAD;
        if (effective < 2 && sp.T * H >= MIN_ELEMS_SPLIT) effective = 2;
        if (effective > threads) effective = threads;
        multi += effective > 1;
        cut += effective > sp.T; /* fewer tokens than threads: each token cut in pieces */
        dup_multi += effective > 1 && dups;
        int bad = s != QKVFUSE_SUCCESS;
        if (bad)
          printf("FAIL case %llu %s threads=%d: %s: %s\n", (unsigned long long)i, isas[k], threads,
                 qkvfuse_status_string(s), qkvfuse_last_error());
        for (int b = 0; !bad && b <= TK_NSLOT; b++) {
          if (!c.buf[b].bytes) continue;
          const int64_t at = first_diff(&c, b, c.buf[b].got, want[b], c.buf[b].bytes, &nans);
          bytes += (int64_t)c.buf[b].bytes;
          if (at >= 0) {
            printf(
                "FAIL case %llu %s (%s) threads=%d: buffer of %s differs from the reference at byte %lld (got 0x%02x, "
                "want 0x%02x)\n",
                (unsigned long long)i, isas[k], name, threads, b < TK_NSLOT ? tk_slot_name[b] : "error_flags",
                (long long)at, c.buf[b].got[at], want[b][at]);
            bad = 1;
          }
        }
        if (bad) {
          printf("  spec: %s%s%s\n  rerun: %s --seed 0x%llx --only %llu\n", desc, with_raw ? " +raw bits" : "",
                 dups ? " +duplicate slots" : "", argv[0], (unsigned long long)seed, (unsigned long long)i);
          failures++;
          break;
        }
      }
    }
    unsetenv(ISA_ENV);
    if (!forked && multi > 0 && sp.T * H / MIN_ELEMS_PER_THREAD >= 2) failures += check_fork(&c, want), forked = 1;
    for (int b = 0; b <= TK_NSLOT; b++) free(want[b]);
    tk_case_free(&c);
  }
  /* the test must have exercised what it claims */
  if (only == UINT64_MAX && (multi == 0 || dup_multi == 0 || cut == 0 || raw == 0 || !forked)) {
    printf(
        "FAIL: coverage: %lld multi-threaded runs, %lld of them with duplicate slots, %lld with tokens cut in "
        "pieces, %lld cases with raw bits, fork checked: %d\n",
        (long long)multi, (long long)dup_multi, (long long)cut, (long long)raw, forked);
    failures++;
  }
  printf(
      "test_cpu: %llu cases x %d ISAs x %d thread counts: %lld runs (%lld multi-threaded, %lld with duplicate slots, "
      "%lld with tokens cut in pieces), %lld bytes compared (%lld NaN elements with other NaN bits), %d failures\n",
      (unsigned long long)(only == UINT64_MAX ? ncases : 1), nusable, NTHR, (long long)runs, (long long)multi,
      (long long)dup_multi, (long long)cut, (long long)bytes, (long long)nans, failures);
  return failures ? 1 : 0;
}
