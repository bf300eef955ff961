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
#include "table.h"
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

static int print_table(const demo_result *rows, int n) {
  static const char *const headers[] = {"op",      "preset", "device", "tokens",  "dtype",
                                        "backend", "norm",   "cache",  "max err", "result"};
  cli_table t;
  cli_table_init(&t, 10, headers, "lllrllllrl");
  for (int i = 0; i < n; i++) {
    const demo_result *r = &rows[i];
    cli_table_cell(&t, "%s", r->op);
    cli_table_cell(&t, "%s", r->preset);
    cli_table_cell(&t, "%s", r->device);
    cli_table_cell(&t, "%" PRId64, r->tokens);
    cli_table_cell(&t, "%s", qkvfuse_dtype_name(r->dtype));
    cli_table_cell(&t, "%s", r->backend);
    cli_table_cell(&t, "%s", r->norm);
    cli_table_cell(&t, "%s", r->cache);
    if (r->skipped)
      cli_table_cell(&t, "-");
    else if (isfinite(r->max_err))
      cli_table_cell(&t, "%g", r->max_err);
    else
      cli_table_cell(&t, "inf");
    cli_table_cell(&t, "%s", r->skipped ? "skip" : r->ok ? "ok" : "FAIL");
  }
  const int lost = cli_table_print(&t, stdout);
  cli_table_free(&t);
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
  return lost;
}

/* The device --device names (auto, cpu or cuda: the parser took no other):
 * auto is cuda when this build has CUDA and a GPU is usable, else cpu. NULL
 * (message printed, *exit_code set) when cuda is not usable here. */
static const cli_device *choose_device(const char *name, int *exit_code) {
  const cli_device *dev = NULL;
  if (strcmp(name, "auto") == 0) {
    dev = cli_device_cuda();
    return dev ? dev : cli_device_find("cpu");
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

enum { OPT_JSON, OPT_DEVICE, OPT_PRESET, OPT_TOKENS, OPT_SEED, OPT_DTYPE, OPT_COUNT };

int cli_demo(int argc, char **argv) {
  demo_config cfg = {.tokens = 64, .seed = 1, .dtype = QKVFUSE_DTYPE_BFLOAT16};
  const tk_preset *only = NULL;
  const char *device = "auto";
  int json = 0;
  char presets_needed[300], unknown_preset[300];
  snprintf(presets_needed, sizeof presets_needed, "a preset name (the presets: %s)", tk_preset_names());
  snprintf(unknown_preset, sizeof unknown_preset, "--preset: unknown preset (the presets: %s)", tk_preset_names());
  const cli_option options[OPT_COUNT] = {
      [OPT_JSON] = {"json", 0, NULL},
      [OPT_DEVICE] = {"device", 1, "auto, cpu or cuda"},
      [OPT_PRESET] = {"preset", 1, presets_needed},
      [OPT_TOKENS] = {"tokens", 1, "an integer in 1..65536"},
      [OPT_SEED] = {"seed", 1, "a non-negative integer"},
      [OPT_DTYPE] = {"dtype", 1, "bfloat16, float16 or float32"},
  };
  cli_parser p = cli_parser_make("demo", argc, argv, options, OPT_COUNT);
  for (;;) {
    const char *value;
    const int opt = cli_next_option(&p, &value);
    int64_t v;
    if (opt == CLI_OPT_END) break;
    if (opt == CLI_OPT_HELP) {
      cli_demo_usage(stdout);
      return 0;
    }
    if (opt == CLI_OPT_ERROR) return 2;
    int bad = 0; /* the value is not what the option needs */
    switch (opt) {
    case OPT_JSON:
      json = 1;
      break;
    case OPT_DEVICE:
      bad = strcmp(value, "auto") != 0 && strcmp(value, "cpu") != 0 && strcmp(value, "cuda") != 0;
      device = value;
      break;
    case OPT_PRESET:
      if ((only = tk_preset_find(value)) == NULL) return usage_error(unknown_preset, value);
      break;
    case OPT_TOKENS:
      bad = cli_parse_i64(value, 1, 65536, &cfg.tokens) != 0;
      break;
    case OPT_SEED:
      if (!(bad = cli_parse_i64(value, 0, INT64_MAX, &v) != 0)) cfg.seed = (uint64_t)v;
      break;
    case OPT_DTYPE:
      bad = (cfg.dtype = cli_float_dtype_parse(value)) == QKVFUSE_DTYPE_NONE;
      break;
    }
    if (bad) return cli_option_error(&p, opt, value);
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
    if (print_table(rows, n) != 0) failed++;
    printf("\n%d checks: %d passed, %d skipped, %d failed\n", n, n - failed - skipped, skipped, failed);
  }
  return failed ? 1 : 0;
}
