/* qkvfuse demo: options, the loop over presets and operators, the report. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "args.h"
#include "commands.h"
#include "demo.h"
#include "json.h"
#include "tensors.h"

void cli_demo_usage(FILE *f) {
  fprintf(f,
          "usage: qkvfuse demo [options]\n"
          "\n"
          "Runs each named operator (split_qkv_rmsnorm_rope, qkv_rmsnorm_rope_cache with int8 nz caches,\n"
          "dequant_rope_quant_kvcache with int32 input and int8 contiguous or page caches) on the default\n"
          "backend, on every preset's shapes with random seeded data, and checks every output against the\n"
          "core operator on the reference backend: float outputs within 1 ulp of their dtype, int8 within 1,\n"
          "cache bytes outside the written slots unchanged. Exits 1 if any check fails.\n"
          "\n"
          "options:\n"
          "  --preset NAME   one preset instead of all: %s\n"
          "  --tokens N      tokens per call, 1..65536 (default 64)\n"
          "  --seed S        random seed, a non-negative integer (default 1)\n"
          "  --dtype T       activations, cos/sin and outputs: bfloat16 (default), float16, float32\n"
          "  --json          one JSON object per result line instead of the table\n"
          "  --help          this text\n",
          cli_preset_names());
}

static int usage_error(const char *msg, const char *arg) {
  fprintf(stderr, "qkvfuse demo: %s%s%s\n\n", msg, arg ? ": " : "", arg ? arg : "");
  cli_demo_usage(stderr);
  return 2;
}

static void print_json(const demo_result *r) {
  cli_json j;
  cli_json_begin(&j, stdout);
  cli_json_str(&j, "op", r->op);
  cli_json_str(&j, "preset", r->preset);
  cli_json_str(&j, "device", "cpu");
  cli_json_int(&j, "tokens", r->tokens);
  cli_json_str(&j, "dtype", qkvfuse_dtype_name(r->dtype));
  cli_json_str(&j, "backend", r->backend);
  cli_json_str(&j, "norm", r->norm);
  cli_json_str(&j, "cache", r->cache);
  cli_json_num(&j, "max_err", r->max_err);
  cli_json_bool(&j, "ok", r->ok);
  cli_json_bool(&j, "skipped", r->skipped);
  cli_json_str(&j, "note", r->note[0] ? r->note : NULL);
  cli_json_end(&j);
}

static void print_table(const demo_result *rows, int n) {
  const char *fmt = "%-26s %-11s %-6s %6s %-8s %-9s %-11s %-26s %7s  %s\n";
  printf(fmt, "op", "preset", "device", "tokens", "dtype", "backend", "norm", "cache", "max err", "result");
  for (int i = 0; i < n; i++) {
    const demo_result *r = &rows[i];
    char tokens[24], err[24];
    snprintf(tokens, sizeof tokens, "%" PRId64, r->tokens);
    if (r->skipped)
      snprintf(err, sizeof err, "-");
    else if (isfinite(r->max_err))
      snprintf(err, sizeof err, "%g", r->max_err);
    else
      snprintf(err, sizeof err, "inf");
    printf(fmt, r->op, r->preset, "cpu", tokens, qkvfuse_dtype_name(r->dtype), r->backend, r->norm, r->cache, err,
           r->skipped ? "skip"
           : r->ok    ? "ok"
                      : "FAIL");
  }
  printf(
      "\nmax err: largest difference from the reference over all outputs, in steps of each output's dtype\n"
      "(ulps for floats, integer steps for int8). norm: model = the model's own q/k RMSNorm; synthetic =\n"
      "the model has none, the op's norm runs with random unit-ish weights; omitted = the model has one,\n"
      "the op does not.\n");
  int header = 0;
  for (int i = 0; i < n; i++) {
    if (rows[i].note[0] == '\0') continue;
    if (!header++) printf("\nnotes:\n");
    printf("  %s / %s: %s\n", rows[i].op, rows[i].preset, rows[i].note);
  }
}

int cli_demo(int argc, char **argv) {
  demo_config cfg = {64, 1, QKVFUSE_DTYPE_BFLOAT16};
  const cli_preset *only = NULL;
  int json = 0;
  cli_args a = cli_args_make(argc, argv);
  while (cli_args_more(&a)) {
    int64_t v;
    if (cli_args_flag(&a, "--help") || cli_args_flag(&a, "-h")) {
      cli_demo_usage(stdout);
      return 0;
    } else if (cli_args_flag(&a, "--json")) {
      json = 1;
    } else if (cli_args_option(&a, "--preset")) {
      if (a.missing_value || (only = cli_preset_find(a.value)) == NULL) return usage_error("unknown preset", a.value);
    } else if (cli_args_option(&a, "--tokens")) {
      if (a.missing_value || cli_parse_i64(a.value, 1, 65536, &cfg.tokens) != 0)
        return usage_error("--tokens needs an integer in 1..65536", a.value);
    } else if (cli_args_option(&a, "--seed")) {
      if (a.missing_value || cli_parse_i64(a.value, 0, INT64_MAX, &v) != 0)
        return usage_error("--seed needs a non-negative integer", a.value);
      cfg.seed = (uint64_t)v;
    } else if (cli_args_option(&a, "--dtype")) {
      if (a.missing_value || (cfg.dtype = cli_float_dtype_parse(a.value)) == QKVFUSE_DTYPE_NONE)
        return usage_error("--dtype needs bfloat16, float16 or float32", a.value);
    } else {
      return usage_error("unknown option", cli_args_current(&a));
    }
  }

  int npresets;
  const cli_preset *presets = cli_presets(&npresets);
  demo_result rows[3 * 16];
  int n = 0, failed = 0, skipped = 0;
  if (npresets > 16) npresets = 16;
  for (int i = 0; i < npresets; i++) {
    const cli_preset *ps = &presets[i];
    if (only && ps != only) continue;
    if (!json) fprintf(stderr, "demo: %s (%s), %" PRId64 " tokens\n", ps->name, ps->model, cfg.tokens);
    demo_split_qkv_rmsnorm_rope(ps, &cfg, &rows[n]);
    demo_qkv_rmsnorm_rope_cache(ps, &cfg, &rows[n + 1]);
    demo_dequant_rope_quant_kvcache(ps, i, &cfg, &rows[n + 2]);
    for (int k = n; k < n + 3; k++) {
      failed += !rows[k].ok;
      skipped += rows[k].skipped;
      if (json) print_json(&rows[k]);
    }
    n += 3;
  }
  if (!json) {
    print_table(rows, n);
    printf("\n%d checks: %d passed, %d skipped, %d failed\n", n, n - failed - skipped, skipped, failed);
  }
  return failed ? 1 : 0;
}
