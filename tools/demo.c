/* SPDX-License-Identifier: Apache-2.0 */
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
          "backend of the device, on every preset's shapes with random seeded data, and checks every output\n"
          "against the core operator on the reference backend on the CPU: float outputs within 1 ulp of their\n"
          "dtype (on the GPU, or within 8 float32 ulps of the head's largest value: its kernel uses rsqrtf and\n"
          "fused multiply-adds), int8 within 1, cache bytes outside the written slots unchanged. Exits 1 if any\n"
          "check fails.\n"
          "The device used is printed first (stderr) and in the device column.\n"
          "\n"
          "options:\n"
          "  --device D      auto (default: cuda when this build has CUDA and a GPU is usable, else cpu),\n"
          "                  cpu, or cuda (the operators' tensors are copied to the GPU and their outputs\n"
          "                  and caches back; exits 2 if no GPU is usable)\n"
          "  --preset NAME   one preset instead of all: %s\n"
          "  --tokens N      tokens per call, 1..65536 (default 64)\n"
          "  --seed S        random seed, a non-negative integer (default 1)\n"
          "  --dtype T       activations, cos/sin and outputs: bfloat16 (default), float16, float32\n"
          "  --json          one JSON object per result line instead of the table\n"
          "  --help          this text\n",
          tk_preset_names());
}

static int usage_error(const char *msg, const char *arg) { return cli_usage_error("demo", msg, arg); }

static void print_json(const demo_result *r) {
  cli_json j;
  cli_json_begin(&j, stdout);
  cli_json_str(&j, "op", r->op);
  cli_json_str(&j, "preset", r->preset);
  cli_json_str(&j, "device", r->device);
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
    printf(fmt, r->op, r->preset, r->device, tokens, qkvfuse_dtype_name(r->dtype), r->backend, r->norm, r->cache, err,
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

/* The device --device names: auto is cuda when this build has CUDA and a
 * GPU is usable, else cpu. NULL (message printed, *exit_code set) when it
 * names no device or cuda is not usable here. */
static const cli_device *choose_device(const char *name, int *exit_code) {
  const cli_device *dev = NULL;
  if (strcmp(name, "auto") == 0) {
    dev = cli_device_cuda();
    return dev ? dev : cli_device_find("cpu");
  }
  if (strcmp(name, "cpu") != 0 && strcmp(name, "cuda") != 0) {
    *exit_code = usage_error("--device needs auto, cpu or cuda", name);
    return NULL;
  }
  if ((dev = cli_device_find(name)) != NULL) return dev;
  /* The library says why it has no CUDA plan (a build without CUDA, no
   * device, a driver too old); the tool's own table can lack one only when
   * its stream cannot be made. */
  qkvfuse_desc d = QKVFUSE_DESC_INIT;
  d.num_q_heads = d.num_kv_heads = 1;
  d.head_dim = 128;
  d.device_type = QKVFUSE_DEVICE_CUDA;
  qkvfuse_plan *plan;
  char why[320];
  if (qkvfuse_plan_create(&d, &plan) != QKVFUSE_SUCCESS) {
    snprintf(why, sizeof why, "no usable GPU (%s)", qkvfuse_last_error());
  } else {
    qkvfuse_plan_destroy(plan);
    snprintf(why, sizeof why, "no usable GPU (the CUDA stream could not be created)");
  }
  *exit_code = usage_error("--device cuda", why);
  return NULL;
}

int cli_demo(int argc, char **argv) {
  demo_config cfg = {.tokens = 64, .seed = 1, .dtype = QKVFUSE_DTYPE_BFLOAT16};
  const tk_preset *only = NULL;
  const char *device = "auto";
  int json = 0;
  cli_args a = cli_args_make(argc, argv);
  while (cli_args_more(&a)) {
    int64_t v;
    if (cli_args_flag(&a, "--help") || cli_args_flag(&a, "-h")) {
      cli_demo_usage(stdout);
      return 0;
    } else if (cli_args_flag(&a, "--json")) {
      json = 1;
    } else if (cli_args_option(&a, "--device")) {
      if (a.missing_value) return usage_error("--device needs auto, cpu or cuda", NULL);
      device = a.value;
    } else if (cli_args_option(&a, "--preset")) {
      if (a.missing_value || (only = tk_preset_find(a.value)) == NULL) return usage_error("unknown preset", a.value);
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
  int exit_code = 0;
  if ((cfg.dev = choose_device(device, &exit_code)) == NULL) return exit_code;
  /* stderr, so that --json's stdout stays JSON Lines; the rows name the device too */
  fprintf(stderr, "demo: device %s\n", cfg.dev->describe());

  int npresets;
  const tk_preset *presets = tk_presets(&npresets);
  demo_result rows[3 * 16];
  int n = 0, failed = 0, skipped = 0;
  if (npresets > 16) npresets = 16;
  for (int i = 0; i < npresets; i++) {
    const tk_preset *ps = &presets[i];
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
