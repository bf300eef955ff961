/* SPDX-License-Identifier: Apache-2.0 */
/* RoPE frequencies: qkvfuse_rope_inv_freq and qkvfuse_build_cos_sin_cache for
 * every scaling rule, R and dtype, against the test kit's extended-precision
 * rules (oracle_rope.c); rows up to max_pos = 2^17; and the computed-cos/sin
 * path of the core op at positions near 2^24, 2^30 and 2^31 - 1 against the
 * oracle (whose angles are long double), on every rule.
 *   test_rope_freq [--backend reference,auto] [--verbose] */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compare.h"
#include "fp.h"
#include "harness.h"
#include "oracle.h"
#include "tview.h"

static int failed, checks;
static double max_rel;

#define FAILF(...)                   \
  do {                               \
    if (failed++ < 20) {             \
      printf("FAIL test_rope_freq: "); \
      printf(__VA_ARGS__);           \
      printf("\n");                  \
    }                                \
  } while (0)

static const char *RULE[] = {"none", "linear", "ntk", "llama3", "yarn"};

/* A list of rules with parameters, including the edges: factor <= 1,
 * YaRN's degenerate ramp (low == high -> +0.001), Llama-3 custom bands. */
static int scalings(qkvfuse_rope_scaling *out) {
  static const qkvfuse_rope_scaling init = QKVFUSE_ROPE_SCALING_INIT;
  int n = 0;
  qkvfuse_rope_scaling s = init;
  out[n++] = s;
  s = init, s.type = QKVFUSE_ROPE_SCALING_LINEAR, s.factor = 4, out[n++] = s;
  s.factor = 0.5, out[n++] = s;
  s = init, s.type = QKVFUSE_ROPE_SCALING_NTK, s.factor = 8, out[n++] = s;
  s.factor = 1.7, out[n++] = s;
  s = init, s.type = QKVFUSE_ROPE_SCALING_LLAMA3, s.factor = 8, s.original_max_position = 8192, s.low_freq_factor = 1,
  s.high_freq_factor = 4, out[n++] = s;
  s.factor = 32, s.original_max_position = 512, s.low_freq_factor = 0.7, s.high_freq_factor = 2.5, out[n++] = s;
  s = init, s.type = QKVFUSE_ROPE_SCALING_YARN, s.factor = 40, s.original_max_position = 4096, out[n++] = s;
  s.factor = 4, s.original_max_position = 32768, s.beta_fast = 16, s.beta_slow = 2, s.extrapolation_factor = 0.6,
  s.attn_factor = 1.3, out[n++] = s;
  s.factor = 0.8, out[n++] = s;                                    /* factor <= 1: mscale = attn_factor */
  s = init, s.type = QKVFUSE_ROPE_SCALING_YARN, s.factor = 2, s.original_max_position = 4, out[n++] = s; /* low == high */
  return n;
}

static void check_inv_freq(void) {
  qkvfuse_rope_scaling sc[16];
  int n = scalings(sc);
  static const int64_t Rs[] = {2, 4, 16, 64, 80, 128, 130, 512};
  static const double thetas[] = {10000, 500000, 1e6, 2.5};
  for (int k = 0; k < n; k++)
    for (size_t ri = 0; ri < sizeof Rs / sizeof Rs[0]; ri++)
      for (size_t ti = 0; ti < sizeof thetas / sizeof thetas[0]; ti++) {
        int64_t R = Rs[ri];
        if (sc[k].type == QKVFUSE_ROPE_SCALING_NTK && R == 2) continue; /* R/(R-2): see check_inv_freq_errors */
        long double want[256], wm;
        double got[256], gm = -1;
        if (tk_rope_freqs(thetas[ti], &sc[k], R, want, &wm)) {
          FAILF("oracle rejected valid parameters (%s)", RULE[sc[k].type]);
          continue;
        }
        checks++;
        qkvfuse_status st = qkvfuse_rope_inv_freq(thetas[ti], &sc[k], R, got, &gm);
        if (st != QKVFUSE_SUCCESS) {
          FAILF("rope_inv_freq %s R=%lld theta=%g: %s %s", RULE[sc[k].type], (long long)R, thetas[ti],
                qkvfuse_status_string(st), qkvfuse_last_error());
          continue;
        }
        for (int64_t i = 0; i < R / 2; i++) {
          double rel = fabs((double)((got[i] - want[i]) / want[i]));
          if (rel > max_rel) max_rel = rel;
          if (!(rel <= 1e-12))
            FAILF("rope_inv_freq %s (case %d) R=%lld theta=%g: f[%lld] = %.17g, want %.17g", RULE[sc[k].type], k,
                  (long long)R, thetas[ti], (long long)i, got[i], (double)want[i]);
        }
        if (!(fabs(gm - (double)wm) <= 1e-12 * fabs((double)wm)))
          FAILF("rope_inv_freq %s (case %d): mscale %.17g, want %.17g", RULE[sc[k].type], k, gm, (double)wm);
        if (qkvfuse_rope_inv_freq(thetas[ti], &sc[k], R, got, NULL) != QKVFUSE_SUCCESS) FAILF("mscale NULL rejected");
      }
}

static void expect_status(const char *what, qkvfuse_status got, qkvfuse_status want, const char *names) {
  checks++;
  const char *msg = qkvfuse_last_error();
  if (got != want)
    FAILF("%s: status %s, want %s (%s)", what, qkvfuse_status_string(got), qkvfuse_status_string(want), msg);
  else if (want != QKVFUSE_SUCCESS && !tk_names_argument(msg, names))
    FAILF("%s: message \"%s\" does not name %s", what, msg, names);
  else if (want == QKVFUSE_SUCCESS && msg[0])
    FAILF("%s: qkvfuse_last_error() \"%s\" after success", what, msg);
}

/* R past 1024, as an argument and as an empty table's width: INVALID_VALUE at
 * once, nothing written. */
static void big_r(const qkvfuse_rope_scaling *s, double *m) {
  static const int64_t Rs[] = {1026, (int64_t)1 << 28, (int64_t)1 << 40, INT64_MAX - 1};
  double f[4] = {7, 7, 7, 7}, m0 = *m;
  for (int i = 0; i < 4; i++) {
    expect_status("inv_freq R past 1024", qkvfuse_rope_inv_freq(1e4, s, Rs[i], f, m), QKVFUSE_ERROR_INVALID_VALUE,
                  "rotary_dim");
    if (f[0] != 7 || *m != m0) FAILF("inv_freq R = %lld wrote its outputs although refused", (long long)Rs[i]);
    qkvfuse_tensor t;
    const int64_t shape[2] = {0, Rs[i]};
    float one = 7;
    qkvfuse_tensor_init(&t, &one, QKVFUSE_DTYPE_FLOAT32, 2, shape);
    expect_status("build_cos_sin_cache [0, R past 1024]", qkvfuse_build_cos_sin_cache(1e4, s, &t),
                  QKVFUSE_ERROR_INVALID_VALUE, "cos_sin_cache");
    if (one != 7) FAILF("build_cos_sin_cache [0, %lld] wrote memory although refused", (long long)Rs[i]);
  }
}

static void check_inv_freq_errors(void) {
  static const qkvfuse_rope_scaling init = QKVFUSE_ROPE_SCALING_INIT;
  double f[256], m;
  qkvfuse_rope_scaling s = init;
  /* the parameter is `theta`; the library names it after the descriptor field, which is as clear */
  expect_status("inv_freq theta 1", qkvfuse_rope_inv_freq(1.0, &s, 64, f, &m), QKVFUSE_ERROR_INVALID_VALUE, "theta|rope_theta");
  expect_status("inv_freq theta NaN", qkvfuse_rope_inv_freq(NAN, &s, 64, f, &m), QKVFUSE_ERROR_INVALID_VALUE, "theta|rope_theta");
  expect_status("inv_freq R odd", qkvfuse_rope_inv_freq(1e4, &s, 63, f, &m), QKVFUSE_ERROR_INVALID_VALUE, "rotary_dim");
  expect_status("inv_freq R 0", qkvfuse_rope_inv_freq(1e4, &s, 0, f, &m), QKVFUSE_ERROR_INVALID_VALUE, "rotary_dim");
  /* the header allows an even R in [2, 1024] here (the descriptor bounds R by D <= 512) */
  {
    static double big[512];
    expect_status("inv_freq R 1024", qkvfuse_rope_inv_freq(1e4, &s, 1024, big, &m), QKVFUSE_SUCCESS, "");
    if (!(fabs(big[511] - pow(1e4, -1022.0 / 1024.0)) <= 1e-15 * pow(1e4, -1022.0 / 1024.0)))
      FAILF("inv_freq R 1024: f_511 = %.17g, want %.17g", big[511], pow(1e4, -1022.0 / 1024.0));
  }
  /* past the bound, refused before any work proportional to R (2^40 would run for hours) */
  big_r(&s, &m);
  expect_status("inv_freq out NULL", qkvfuse_rope_inv_freq(1e4, &s, 64, NULL, &m), QKVFUSE_ERROR_NULL_POINTER, "inv_freq");
  /* scaling NULL: the header is silent; the library takes it as no scaling. Pin that: same as NONE. */
  {
    double g[32], gm2 = 0;
    expect_status("inv_freq scaling NULL", qkvfuse_rope_inv_freq(1e4, NULL, 64, g, &gm2), QKVFUSE_SUCCESS, "");
    qkvfuse_rope_inv_freq(1e4, &s, 64, f, &m);
    if (memcmp(f, g, 32 * sizeof(double)) || gm2 != m) FAILF("inv_freq with scaling NULL differs from SCALING_NONE");
  }
  s.type = QKVFUSE_ROPE_SCALING_LINEAR, s.factor = 0;
  expect_status("inv_freq linear factor 0", qkvfuse_rope_inv_freq(1e4, &s, 64, f, &m), QKVFUSE_ERROR_INVALID_VALUE, "scaling.factor|rope_scaling.factor|factor");
  /* static NTK: theta * factor^(R/(R-2)) has no value at R = 2 */
  s = init, s.type = QKVFUSE_ROPE_SCALING_NTK, s.factor = 2;
  expect_status("inv_freq ntk with R = 2", qkvfuse_rope_inv_freq(1e4, &s, 2, f, &m), QKVFUSE_ERROR_INVALID_VALUE, "rotary_dim|scaling|rope_scaling");
  s = init, s.type = QKVFUSE_ROPE_SCALING_YARN, s.factor = 2, s.original_max_position = 0;
  expect_status("inv_freq yarn L 0", qkvfuse_rope_inv_freq(1e4, &s, 64, f, &m), QKVFUSE_ERROR_INVALID_VALUE, "scaling.original_max_position|rope_scaling.original_max_position|original_max_position");
  s = init, s.type = (qkvfuse_rope_scaling_type)7;
  expect_status("inv_freq type 7", qkvfuse_rope_inv_freq(1e4, &s, 64, f, &m), QKVFUSE_ERROR_INVALID_VALUE, "scaling|rope_scaling");
}

/* Build [max_pos, R] (row stride ld) and check rows (all, or every `step`-th plus the last 64). */
static void check_build(const qkvfuse_rope_scaling *sc, double theta, qkvfuse_dtype dt, int64_t max_pos, int64_t R,
                        int64_t ld, int64_t step) {
  if (ld == 0) ld = R;
  size_t es = tk_size(dt), bytes = (size_t)(max_pos * ld) * es;
  uint8_t *buf = (uint8_t *)aligned_alloc(256, (bytes + 255) / 256 * 256), *init = (uint8_t *)malloc(bytes);
  tk_rng r;
  tk_rng_seed(&r, 77);
  tk_fill_poison(&r, init, bytes);
  memcpy(buf, init, bytes);
  qkvfuse_tensor t;
  int64_t shape[2] = {max_pos, R};
  qkvfuse_tensor_init(&t, buf, dt, 2, shape);
  t.strides[0] = ld;
  checks++;
  qkvfuse_status st = qkvfuse_build_cos_sin_cache(theta, sc, &t);
  if (st != QKVFUSE_SUCCESS) {
    FAILF("build_cos_sin_cache %s %s [%lld, %lld] ld %lld: %s (%s)", RULE[sc->type], tk_name(dt), (long long)max_pos,
          (long long)R, (long long)ld, qkvfuse_status_string(st), qkvfuse_last_error());
    free(buf), free(init);
    return;
  }
  long double f[512], ms;
  tk_rope_freqs(theta, sc, R, f, &ms);
  tk_stats s;
  memset(&s, 0, sizeof s);
  for (int64_t p = 0; p < max_pos; p++) {
    if (step > 1 && p % step && p < max_pos - 64) continue;
    for (int64_t i = 0; i < R; i++) {
      long double ang = (long double)p * f[i % (R / 2)];
      double v = (double)((i < R / 2 ? cosl(ang) : sinl(ang)) * ms);
      /* the builder reduces the angle in double (a few ulps of p*f of slack)
       * and may round through float32 on the way to 16 bits (as vLLM's
       * float32 cache .to(dtype) does): half a float32 ulp more */
      double e = (double)(fabsl(ang) * ms) * 0x1.0p-48 + 0.5 * tk_ulp(QKVFUSE_DTYPE_FLOAT32, v), ratio;
      double got = tk_decode(dt, buf + (size_t)(p * ld + i) * es);
      if (!tk_check_elem(dt, QKVFUSE_DTYPE_NONE, v, e, got, &ratio))
        tk_stats_fail(&s, "row %lld col %lld: got %.9g want %.12g", (long long)p, (long long)i, got, v);
      if (ratio > max_rel) max_rel = ratio;
    }
    for (int64_t i = R; i < ld; i++)
      if (memcmp(buf + (size_t)(p * ld + i) * es, init + (size_t)(p * ld + i) * es, es))
        tk_stats_fail(&s, "row %lld: padding element %lld written", (long long)p, (long long)i);
  }
  if (s.failed)
    FAILF("build_cos_sin_cache %s %s theta=%g [%lld, %lld] ld %lld: %s", RULE[sc->type], tk_name(dt), theta,
          (long long)max_pos, (long long)R, (long long)ld, s.first);
  free(buf), free(init);
}

static void check_build_errors(void) {
  static const qkvfuse_rope_scaling none = QKVFUSE_ROPE_SCALING_INIT;
  float data[64 * 16];
  uint8_t init[sizeof data];
  tk_rng r;
  tk_rng_seed(&r, 3);
  tk_fill_poison(&r, init, sizeof init);
  struct {
    const char *what;
    qkvfuse_dtype dt;
    int ndim;
    int64_t s0, s1;
    double theta;
    qkvfuse_status want;
    const char *names;
    int cuda;
  } bad[] = {
      {"int8 cache", QKVFUSE_DTYPE_INT8, 2, 64, 16, 1e4, QKVFUSE_ERROR_DTYPE, "cos_sin_cache", 0},
      {"1-d cache", QKVFUSE_DTYPE_FLOAT32, 1, 64, 16, 1e4, QKVFUSE_ERROR_SHAPE, "cos_sin_cache", 0},
      {"R odd", QKVFUSE_DTYPE_FLOAT32, 2, 64, 15, 1e4, QKVFUSE_ERROR_INVALID_VALUE, "cos_sin_cache|rotary_dim", 0},
      {"R 0", QKVFUSE_DTYPE_FLOAT32, 2, 64, 0, 1e4, QKVFUSE_ERROR_INVALID_VALUE, "cos_sin_cache|rotary_dim", 0},
      {"theta 0.5", QKVFUSE_DTYPE_FLOAT32, 2, 64, 16, 0.5, QKVFUSE_ERROR_INVALID_VALUE, "theta|rope_theta", 0},
      {"a CUDA tensor", QKVFUSE_DTYPE_FLOAT32, 2, 64, 16, 1e4, QKVFUSE_ERROR_DEVICE, "cos_sin_cache", 1},
  };
  for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
    memcpy(data, init, sizeof data);
    qkvfuse_tensor t;
    int64_t shape[2] = {bad[k].s0, bad[k].s1};
    qkvfuse_tensor_init(&t, data, bad[k].dt, bad[k].ndim, shape);
    if (bad[k].cuda) t.device_type = QKVFUSE_DEVICE_CUDA;
    char what[96];
    snprintf(what, sizeof what, "build_cos_sin_cache %s", bad[k].what);
    expect_status(what, qkvfuse_build_cos_sin_cache(bad[k].theta, &none, &t), bad[k].want, bad[k].names);
    if (memcmp(data, init, sizeof data)) FAILF("%s: the cache was written", what);
  }
  expect_status("build_cos_sin_cache NULL", qkvfuse_build_cos_sin_cache(1e4, &none, NULL), QKVFUSE_ERROR_NULL_POINTER, "cos_sin_cache");
}

/* The core op with computed cos/sin at far positions, against the oracle. */
static void check_far_positions(qkvfuse_backend be, int verbose) {
  qkvfuse_rope_scaling sc[16];
  int n = scalings(sc);
  static const int64_t centers[] = {1 << 24, 1 << 30, 2147483647 - 600, 4096};
  for (int k = 0; k < n; k++)
    for (size_t c = 0; c < sizeof centers / sizeof centers[0]; c++)
      for (int style = 0; style < 2; style++) {
        tk_spec s;
        tk_spec_default(&s);
        s.Nq = 2, s.Nkv = 1, s.D = 128, s.R = (k % 2) ? 128 : 96, s.T = 33;
        s.qkv_dt = QKVFUSE_DTYPE_BFLOAT16, s.q_out_dt = QKVFUSE_DTYPE_FLOAT32, s.k_out_dt = QKVFUSE_DTYPE_BFLOAT16;
        s.rope_source = QKVFUSE_ROPE_COMPUTED, s.rope_style = (qkvfuse_rope_style)style, s.scaling = sc[k];
        s.rope_theta = (k % 3) ? 500000 : 10000;
        s.pos_lo = centers[c] - 500, s.pos_hi = centers[c] + 500;
        s.pos_dt = (c % 2) ? QKVFUSE_DTYPE_INT32 : QKVFUSE_DTYPE_INT64;
        s.layout = QKVFUSE_CACHE_PAGED, s.k_cache_dt = QKVFUSE_DTYPE_FLOAT32, s.v_cache_dt = QKVFUSE_DTYPE_BFLOAT16;
        s.block_size = 16;
        tk_spec_fixup(&s);
        tk_case cs;
        tk_case_build(&cs, &s, 100 + (uint64_t)k);
        tk_stats st;
        memset(&st, 0, sizeof st);
        checks++;
        int rc = tk_check_case(&cs, be, tk_run_core, NULL, &st);
        if (st.max_ratio > max_rel && rc != TK_SKIP) max_rel = st.max_ratio;
        if (rc == TK_FAIL)
          FAILF("computed RoPE backend=%s %s (case %d) positions ~%lld %s: %s (failing: %s)", tk_backend_str(be),
                RULE[sc[k].type], k, (long long)centers[c], style ? "interleaved" : "neox", st.first, st.where);
        else if (verbose)
          printf("ok computed %s positions ~%lld: max err/tol %.3f\n", RULE[sc[k].type], (long long)centers[c], st.max_ratio);
        tk_case_free(&cs);
      }
}

int main(int argc, char **argv) {
  qkvfuse_backend bes[8];
  int nbe = tk_backends_from(argc, argv, bes, 8), verbose = tk_arg_has(argc, argv, "--verbose");
  if (nbe == 1 && bes[0] == QKVFUSE_BACKEND_CUDA) { /* only the device path: the builder is host code */
    if (!tk_device_for_backend(QKVFUSE_BACKEND_CUDA)) return TK_SKIP;
    check_far_positions(bes[0], verbose);
    printf("test_rope_freq[cuda]: %d checks, %d failed; max error/tolerance %.3g\n", checks, failed, max_rel);
    return failed ? 1 : 0;
  }
  check_inv_freq();
  check_inv_freq_errors();
  qkvfuse_rope_scaling sc[16];
  int n = scalings(sc);
  static const qkvfuse_dtype dts[] = {QKVFUSE_DTYPE_FLOAT32, QKVFUSE_DTYPE_FLOAT16, QKVFUSE_DTYPE_BFLOAT16};
  for (int k = 0; k < n; k++)
    for (int d = 0; d < 3; d++) check_build(&sc[k], k % 2 ? 10000 : 1e6, dts[d], 2048, (k % 3 == 1) ? 2 * (2 + k) : 64, 0, 1);
  for (int k = 0; k < n; k++) check_build(&sc[k], 500000, QKVFUSE_DTYPE_FLOAT32, 1 << 17, 8, 0, 97);
  check_build(&sc[0], 10000, QKVFUSE_DTYPE_BFLOAT16, 100, 32, 37, 1); /* padded rows: padding untouched */
  /* the header asks only "R even, >= 2" of the builder (no 512 limit: that is head_dim's) */
  check_build(&sc[7], 10000, QKVFUSE_DTYPE_FLOAT32, 16, 1024, 0, 1);
  check_build_errors();
  for (int b = 0; b < nbe; b++) check_far_positions(bes[b], verbose);
  printf("test_rope_freq: %d checks, %d failed; max error/tolerance (or relative error of f_i) %.3g\n", checks, failed,
         max_rel);
  return failed ? 1 : 0;
}
