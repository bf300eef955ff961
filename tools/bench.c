/* SPDX-License-Identifier: Apache-2.0 */
/* qkvfuse bench: the fused operator against the unfused stage-by-stage path
 * and a memcpy of the same bytes, measured in one run with one thread count. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "args.h"
#include "bench_set.h"
#include "commands.h"
#include "core/plan.h"
#include "device.h"
#include "json.h"
#include "measure.h"
#include "tensors.h"

#define MAX_TOKEN_COUNTS 32

void cli_bench_usage(FILE *f) {
  fprintf(f,
          "usage: qkvfuse bench [options]\n"
          "\n"
          "For each preset, operator variant and token count, times in one run and with one thread count:\n"
          "  fused    qkvfuse_run on the chosen backend\n"
          "  unfused  the same chain as separate passes over all tokens with intermediate tensors in memory\n"
          "           (split, rmsnorm q, rmsnorm k, rope q, rope k, copy v, quantize k/v, scatter k/v), with the\n"
          "           fused backend's stage math (the optimized CPU backend's SIMD kernels for a cpu-* plan, the\n"
          "           reference's scalar code otherwise); argument validation included, as in qkvfuse_run\n"
          "  copy     memcpy of bytes/2, so that its read + write traffic equals the operator's bytes\n"
          "bytes = every input read once + every output written once (cos_sin_cache: the T rows used; caches:\n"
          "the rows written). Each time is the median of per-call samples after a warm-up; calls cycle through\n"
          "enough copies of the tensors to stream past the last-level cache. The tensors are the test kit's\n"
          "cases of the preset (kit/presets.h); before timing, a case of at most 4096 tokens runs once and its\n"
          "fused result is checked against the kit's float64 oracle (a difference fails the case).\n"
          "\n"
          "options:\n"
          "  --preset NAME     one preset instead of all: %s\n"
          "  --tokens LIST     token counts, comma-separated, each 1..1048576 (default 1,16,512,4096;\n"
          "                    with --device cuda 1,8,64,512,4096,32768)\n"
          "  --op LIST         variants, comma-separated (default: all of %s):\n",
          tk_preset_names(), tk_op_names());
  for (int i = 0; i < TK_OP_COUNT; i++) { /* the help of each, its lines under one another */
    fprintf(f, "                      %-8s ", tk_op_name((tk_preset_op)i));
    for (const char *p = tk_op_help((tk_preset_op)i); *p; p++) {
      fputc(*p, f);
      if (*p == '\n') fprintf(f, "%31s", "");
    }
    fputc('\n', f);
  }
  fprintf(f,
          "  --dtype T         activations, cos/sin and outputs: bfloat16 (default), float16, float32\n"
          "  --backend B       fused operator's backend: auto (default), reference, cpu, cuda; one that cannot\n"
          "                    serve the device is refused with the library's reason\n"
          "  --threads N       threads for all three, 1..256 (default 1; desc.num_threads of the fused op)\n"
          "  --device D        cpu (default) or cuda (CUDA builds with a GPU: calls are timed as CUDA-graph replays\n"
          "                    of 100 launches, inputs rotated past the L2 cache; the copy is a 16-byte-access copy kernel)\n"
          "  --min-time S      seconds of samples per measurement, 0.001..60 (default 0.2)\n"
          "  --rotate-mb M     memory the rotated tensor copies should span, in MB, > 0 (default: twice the\n"
          "                    last-level cache); whole copies, at least one, so each row reports the span it\n"
          "                    used: column rot MB, JSON rotate_bytes = instances * set_bytes (the fused and\n"
          "                    unfused calls) and copy_rotate_bytes (the copy)\n"
          "  --seed S          random seed (default 1)\n"
          "  --slots MODE      cache slots of the cache and dequant ops: tokens (default: a random slot per\n"
          "                    token) or pages (consecutive tokens fill pages taken in random order)\n"
          "  --reference       also time the scalar reference backend on the same tensors (columns ref us and\n"
          "                    vs ref: reference / fused); CPU device only\n"
          "  --json            one JSON object per result line instead of the table\n"
          "  --json-out FILE   also write the JSON lines to FILE (with the table or --json on stdout:\n"
          "                    one run gives both)\n"
          "  --help            this text\n");
}

static int usage_error(const char *msg, const char *arg) { return cli_usage_error("bench", msg, arg); }

typedef struct bench_options {
  const tk_preset *only;
  int64_t tokens[MAX_TOKEN_COUNTS];
  int ntokens;
  int ops[TK_OP_COUNT];
  int nops;
  qkvfuse_dtype dtype;
  qkvfuse_backend backend;
  int threads;
  const char *device;
  double min_time;
  double rotate_mb; /* 0: not given, twice the last-level cache */
  uint64_t seed;
  int page_slots;
  int json;
  const char *json_out; /* --json-out FILE */
  FILE *json_file;      /* its stream, open while the cases run */
  int reference;        /* also time the reference backend */
} bench_options;

/* ---- the three subjects ----------------------------------------------------------- */

static void call_failed(const bench_case *c, const char *what, qkvfuse_status s) {
  fprintf(stderr, "qkvfuse bench: %s %s T=%" PRId64 ": %s failed: %s: %s\n", tk_op_name(c->spec.op),
          c->spec.preset->name, c->spec.tokens, what, qkvfuse_status_string(s), qkvfuse_last_error());
}

static int run_fused(void *ctx, int64_t i) {
  const bench_case *c = ctx;
  const qkvfuse_status s = qkvfuse_run(c->plan, &c->args[i], c->dev->stream ? c->dev->stream() : NULL);
  if (s != QKVFUSE_SUCCESS) call_failed(c, "qkvfuse_run", s);
  return s != QKVFUSE_SUCCESS;
}

/* Validation included, as qkvfuse_run includes it. */
static int run_unfused(void *ctx, int64_t i) {
  const bench_case *c = ctx;
  qf_problem p;
  qkvfuse_status s = qf_resolve(c->plan, &c->args[i], &p);
  if (s == QKVFUSE_SUCCESS) s = c->dev->unfused_run(c->plan, &p, c->scratch);
  if (s != QKVFUSE_SUCCESS) call_failed(c, "the unfused path", s);
  return s != QKVFUSE_SUCCESS;
}

/* The scalar reference on the same tensors (--reference); ctx: a ref_ctx. */
typedef struct ref_ctx {
  const bench_case *c;
  const qkvfuse_plan *plan;
} ref_ctx;

static int run_reference(void *ctx, int64_t i) {
  const ref_ctx *r = ctx;
  const qkvfuse_status s = qkvfuse_run(r->plan, &r->c->args[i], NULL);
  if (s != QKVFUSE_SUCCESS) call_failed(r->c, "the reference", s);
  return s != QKVFUSE_SUCCESS;
}

static int run_copy(void *ctx, int64_t i) {
  const bench_case *c = ctx;
  const size_t off = (size_t)i * c->copy_stride;
  c->dev->copy((char *)c->copy_dst + off, (const char *)c->copy_src + off, c->copy_bytes, c->spec.threads);
  return 0;
}

/* ---- one row ------------------------------------------------------------------------ */

typedef struct bench_row {
  double us, copy_us, unfused_us, ref_us; /* NAN: not measured */
} bench_row;

static double gbps(size_t bytes, double us) { return us > 0 ? (double)bytes / (us * 1e3) : NAN; }

/* The memory a case's calls cycle through: every set of per-call tensors
 * (fused and unfused calls), and the copy's source and destination buffers. */
static size_t rotate_bytes_of(const bench_case *c) { return (size_t)c->instances * c->instance_bytes; }

static size_t copy_rotate_bytes_of(const bench_case *c) { return (size_t)c->copy_instances * 2 * c->copy_stride; }

static void print_header(int reference) {
  printf("%-7s %-11s %7s %-8s %-9s %3s %9s %9s %10s %7s %7s %6s %10s %7s", "op", "preset", "tokens", "dtype",
         "backend", "thr", "MB", "rot MB", "fused us", "GB/s", "copy", "%copy", "unfused us", "speedup");
  printf(reference ? " %11s %7s\n" : "\n", "ref us", "vs ref");
}

static void print_row(const bench_case *c, const bench_row *r) {
  char unfused[24], speedup[24];
  if (isnan(r->unfused_us)) {
    snprintf(unfused, sizeof unfused, "n/a");
    snprintf(speedup, sizeof speedup, "n/a");
  } else {
    snprintf(unfused, sizeof unfused, "%.2f", r->unfused_us);
    snprintf(speedup, sizeof speedup, "%.2fx", r->unfused_us / r->us);
  }
  printf("%-7s %-11s %7" PRId64 " %-8s %-9s %3d %9.3f %9.3f %10.2f %7.2f %7.2f %5.0f%% %10s %7s",
         tk_op_name(c->spec.op), c->spec.preset->name, c->spec.tokens, qkvfuse_dtype_name(c->spec.dtype),
         qkvfuse_plan_backend_name(c->plan), c->spec.threads, (double)c->bytes / 1e6,
         (double)rotate_bytes_of(c) / 1e6, r->us, gbps(c->bytes, r->us), gbps(c->bytes, r->copy_us),
         100.0 * r->copy_us / r->us, unfused, speedup);
  if (isnan(r->ref_us))
    printf("\n");
  else
    printf(" %11.2f %6.2fx\n", r->ref_us, r->ref_us / r->us);
  fflush(stdout);
}

static void print_json(FILE *f, const bench_case *c, const bench_row *r) {
  cli_json j;
  cli_json_begin(&j, f);
  cli_json_str(&j, "op", tk_op_name(c->spec.op));
  cli_json_str(&j, "preset", c->spec.preset->name);
  cli_json_str(&j, "device", c->dev->name);
  cli_json_int(&j, "tokens", c->spec.tokens);
  cli_json_str(&j, "dtype", qkvfuse_dtype_name(c->spec.dtype));
  cli_json_str(&j, "input_dtype", qkvfuse_dtype_name(c->args[0].qkv->dtype));
  cli_json_str(&j, "backend", qkvfuse_plan_backend_name(c->plan));
  cli_json_int(&j, "threads", c->spec.threads);
  cli_json_str(&j, "norm", c->norm);
  if (c->args[0].slot_mapping) cli_json_str(&j, "slots", c->spec.page_slots ? "pages" : "tokens");
  cli_json_int(&j, "bytes", (int64_t)c->bytes);
  cli_json_int(&j, "instances", c->instances);
  cli_json_int(&j, "rotate_target_bytes", (int64_t)c->rotate_target);
  cli_json_int(&j, "set_bytes", (int64_t)c->instance_bytes);
  cli_json_int(&j, "rotate_bytes", (int64_t)rotate_bytes_of(c));
  cli_json_int(&j, "copy_rotate_bytes", (int64_t)copy_rotate_bytes_of(c));
  cli_json_num(&j, "us", r->us);
  cli_json_num(&j, "gbps", gbps(c->bytes, r->us));
  cli_json_num(&j, "copy_us", r->copy_us);
  cli_json_num(&j, "copy_gbps", gbps(c->bytes, r->copy_us));
  cli_json_num(&j, "pct_of_copy", 100.0 * r->copy_us / r->us);
  cli_json_num(&j, "unfused_us", r->unfused_us);
  cli_json_num(&j, "unfused_gbps", gbps(c->bytes, r->unfused_us));
  cli_json_num(&j, "speedup_vs_unfused", r->unfused_us / r->us);
  if (!isnan(r->ref_us)) {
    cli_json_num(&j, "reference_us", r->ref_us);
    cli_json_num(&j, "speedup_vs_reference", r->ref_us / r->us);
  }
  cli_json_end(&j);
}

/* Build, measure and report one case. @return 0, or 1 on a failure. */
static int bench_one(const bench_options *o, const cli_device *dev, const bench_spec *spec, size_t rotate_bytes) {
  bench_case c;
  char err[512];
  if (bench_case_make(&c, spec, dev, rotate_bytes, err, sizeof err) != 0) {
    fprintf(stderr, "qkvfuse bench: %s %s T=%" PRId64 ": %s\n", tk_op_name(spec->op), spec->preset->name,
            spec->tokens, err);
    return 1;
  }
  if (spec->tokens <= BENCH_CHECK_MAX_TOKENS && bench_case_check(&c, err, sizeof err) != 0) {
    fprintf(stderr, "qkvfuse bench: %s %s T=%" PRId64 ": %s\n", tk_op_name(spec->op), spec->preset->name,
            spec->tokens, err);
    bench_case_free(&c);
    return 1;
  }
  bench_row r = {NAN, NAN, NAN, NAN};
  const cli_timing fused = cli_measure(dev, run_fused, &c, c.instances, o->min_time);
  const cli_timing copy = cli_measure(dev, run_copy, &c, c.copy_instances, o->min_time);
  cli_timing unfused = {NAN, 0};
  if (dev->unfused_run) unfused = cli_measure(dev, run_unfused, &c, c.instances, o->min_time);
  cli_timing ref = {NAN, 0};
  if (o->reference) {
    qkvfuse_desc d = c.desc;
    d.backend = QKVFUSE_BACKEND_REFERENCE;
    ref_ctx rc = {&c, NULL};
    qkvfuse_plan *plan = NULL;
    if (qkvfuse_plan_create(&d, &plan) == QKVFUSE_SUCCESS) {
      rc.plan = plan;
      ref = cli_measure(dev, run_reference, &rc, c.instances, o->min_time);
    } else {
      ref.median_s = -1;
    }
    qkvfuse_plan_destroy(plan);
  }
  int failed = fused.median_s < 0 || copy.median_s < 0 || unfused.median_s < 0 || ref.median_s < 0;
  if (!failed) {
    r.us = fused.median_s * 1e6;
    r.copy_us = copy.median_s * 1e6;
    r.unfused_us = unfused.median_s * 1e6;
    r.ref_us = ref.median_s * 1e6;
    if (o->json)
      print_json(stdout, &c, &r);
    else
      print_row(&c, &r);
    if (o->json_file) print_json(o->json_file, &c, &r);
  }
  bench_case_free(&c);
  return failed;
}

/* --device cuda on a build or machine without one, and unknown devices. */
static int device_unavailable(const char *name) {
  if (strcmp(name, "cuda") != 0) return usage_error("unknown device (cpu or cuda)", name);
  qkvfuse_desc d = QKVFUSE_DESC_INIT;
  d.num_q_heads = d.num_kv_heads = 1;
  d.head_dim = 128;
  d.device_type = QKVFUSE_DEVICE_CUDA;
  qkvfuse_plan *plan;
  const qkvfuse_status s = qkvfuse_plan_create(&d, &plan);
  if (s != QKVFUSE_SUCCESS) {
    fprintf(stderr, "qkvfuse bench: --device cuda: cannot make a CUDA plan: %s: %s\n", qkvfuse_status_string(s),
            qkvfuse_last_error());
    return 1;
  }
  qkvfuse_plan_destroy(plan);
  fprintf(stderr, "qkvfuse bench: --device cuda: no CUDA device table in this build\n");
  return 1;
}

static int parse_options(int argc, char **argv, bench_options *o, int *exit_code) {
  memset(o, 0, sizeof *o);
  o->nops = TK_OP_COUNT;
  for (int i = 0; i < TK_OP_COUNT; i++) o->ops[i] = i;
  o->dtype = QKVFUSE_DTYPE_BFLOAT16;
  o->backend = QKVFUSE_BACKEND_AUTO;
  o->threads = 1;
  o->device = "cpu";
  o->min_time = 0.2;
  o->seed = 1;
  cli_args a = cli_args_make(argc, argv);
  while (cli_args_more(&a)) {
    int64_t v;
    if (cli_args_flag(&a, "--help") || cli_args_flag(&a, "-h")) {
      cli_bench_usage(stdout);
      return *exit_code = 0, -1;
    } else if (cli_args_flag(&a, "--json")) {
      o->json = 1;
    } else if (cli_args_option(&a, "--json-out")) {
      if (a.missing_value || a.value[0] == '\0') return *exit_code = usage_error("--json-out needs a file name", NULL), -1;
      o->json_out = a.value;
    } else if (cli_args_flag(&a, "--reference")) {
      o->reference = 1;
    } else if (cli_args_option(&a, "--preset")) {
      if (a.missing_value || (o->only = tk_preset_find(a.value)) == NULL)
        return *exit_code = usage_error("unknown preset", a.value), -1;
    } else if (cli_args_option(&a, "--tokens")) {
      if (a.missing_value || cli_parse_i64_list(a.value, 1, 1 << 20, o->tokens, MAX_TOKEN_COUNTS, &o->ntokens) != 0)
        return *exit_code = usage_error("--tokens needs a comma-separated list of integers in 1..1048576", a.value), -1;
    } else if (cli_args_option(&a, "--op")) {
      char list[64], unknown[160];
      snprintf(unknown, sizeof unknown, "--op: unknown variant (the variants: %s)", tk_op_names());
      if (a.missing_value) return *exit_code = usage_error(unknown, "(no value)"), -1;
      if (strlen(a.value) >= sizeof list) return *exit_code = usage_error("--op: list too long", a.value), -1;
      strcpy(list, a.value);
      o->nops = 0;
      for (char *p = list, *comma; p; p = comma ? comma + 1 : NULL) {
        if ((comma = strchr(p, ','))) *comma = '\0';
        const int op = tk_op_parse(p);
        if (op < 0) return *exit_code = usage_error(unknown, p), -1;
        for (int k = 0; k < o->nops; k++)
          if (o->ops[k] == op) return *exit_code = usage_error("--op: variant given twice", p), -1;
        o->ops[o->nops++] = op;
      }
    } else if (cli_args_option(&a, "--dtype")) {
      if (a.missing_value || (o->dtype = cli_float_dtype_parse(a.value)) == QKVFUSE_DTYPE_NONE)
        return *exit_code = usage_error("--dtype needs bfloat16, float16 or float32", a.value), -1;
    } else if (cli_args_option(&a, "--backend")) {
      if (a.missing_value) return *exit_code = usage_error("--backend needs auto, reference, cpu or cuda", NULL), -1;
      if (strcmp(a.value, "auto") == 0)
        o->backend = QKVFUSE_BACKEND_AUTO;
      else if (strcmp(a.value, "reference") == 0)
        o->backend = QKVFUSE_BACKEND_REFERENCE;
      else if (strcmp(a.value, "cpu") == 0)
        o->backend = QKVFUSE_BACKEND_CPU;
      else if (strcmp(a.value, "cuda") == 0)
        o->backend = QKVFUSE_BACKEND_CUDA;
      else
        return *exit_code = usage_error("--backend needs auto, reference, cpu or cuda", a.value), -1;
    } else if (cli_args_option(&a, "--threads")) {
      if (a.missing_value || cli_parse_i64(a.value, 1, 256, &v) != 0)
        return *exit_code = usage_error("--threads needs an integer in 1..256", a.value), -1;
      o->threads = (int)v;
    } else if (cli_args_option(&a, "--device")) {
      if (a.missing_value) return *exit_code = usage_error("--device needs a device name (cpu)", NULL), -1;
      o->device = a.value;
    } else if (cli_args_option(&a, "--min-time")) {
      if (a.missing_value || cli_parse_double(a.value, 0.001, 60.0, &o->min_time) != 0)
        return *exit_code = usage_error("--min-time needs seconds in 0.001..60", a.value), -1;
    } else if (cli_args_option(&a, "--rotate-mb")) {
      /* 0 stands for "not given" (the default span): a 0 given is refused, not read as the default */
      if (a.missing_value || cli_parse_double(a.value, 0.0, 1e6, &o->rotate_mb) != 0 || !(o->rotate_mb > 0))
        return *exit_code = usage_error("--rotate-mb needs a number of MB > 0 and <= 1000000", a.value), -1;
    } else if (cli_args_option(&a, "--slots")) {
      if (a.missing_value || (strcmp(a.value, "tokens") != 0 && strcmp(a.value, "pages") != 0))
        return *exit_code = usage_error("--slots needs tokens or pages", a.value), -1;
      o->page_slots = strcmp(a.value, "pages") == 0;
    } else if (cli_args_option(&a, "--seed")) {
      if (a.missing_value || cli_parse_i64(a.value, 0, INT64_MAX, &v) != 0)
        return *exit_code = usage_error("--seed needs a non-negative integer", a.value), -1;
      o->seed = (uint64_t)v;
    } else {
      return *exit_code = usage_error("unknown option", cli_args_current(&a)), -1;
    }
  }
  if (o->ntokens == 0) { /* no --tokens: decode to prefill sizes, the GPU's up to a long prompt */
    static const int64_t cpu_tokens[] = {1, 16, 512, 4096}, cuda_tokens[] = {1, 8, 64, 512, 4096, 32768};
    const int cuda = strcmp(o->device, "cuda") == 0;
    o->ntokens = (int)(cuda ? sizeof cuda_tokens : sizeof cpu_tokens) / (int)sizeof(int64_t);
    memcpy(o->tokens, cuda ? cuda_tokens : cpu_tokens, (size_t)o->ntokens * sizeof(int64_t));
  }
  return 0;
}

int cli_bench(int argc, char **argv) {
  bench_options o;
  int code = 0;
  if (parse_options(argc, argv, &o, &code) != 0) return code;
  const cli_device *dev = cli_device_find(o.device);
  if (dev == NULL) return device_unavailable(o.device);
  const size_t rotate_bytes = o.rotate_mb > 0 ? (size_t)(o.rotate_mb * 1e6) : 2 * dev->llc_bytes();
  if (o.reference && dev->type != QKVFUSE_DEVICE_CPU) return usage_error("--reference needs --device cpu", NULL);

  /* a backend this build or device cannot serve fails once, here */
  qkvfuse_desc probe = QKVFUSE_DESC_INIT;
  probe.num_q_heads = probe.num_kv_heads = 1;
  probe.head_dim = 128;
  probe.device_type = dev->type;
  probe.backend = o.backend;
  qkvfuse_plan *plan;
  const qkvfuse_status st = qkvfuse_plan_create(&probe, &plan);
  if (st != QKVFUSE_SUCCESS) {
    fprintf(stderr, "qkvfuse bench: cannot make a plan: %s: %s\n", qkvfuse_status_string(st), qkvfuse_last_error());
    return 1;
  }
  qkvfuse_plan_destroy(plan);

  if (o.json_out && (o.json_file = fopen(o.json_out, "w")) == NULL) {
    fprintf(stderr, "qkvfuse bench: --json-out: cannot open %s: %s\n", o.json_out, strerror(errno));
    return 1;
  }
  int npresets, failures = 0;
  const tk_preset *presets = tk_presets(&npresets);
  if (!o.json) {
    printf("device %s, %d thread%s, min time %g s per measurement, rotation target %g MB (%s; rot MB: the\n"
           "span each row's calls cycle through, whole tensor sets), cache slots: %s\n\n",
           dev->name, o.threads, o.threads == 1 ? "" : "s", o.min_time, (double)rotate_bytes / 1e6,
           o.rotate_mb > 0 ? "--rotate-mb" : "twice the last-level cache",
           o.page_slots ? "pages (consecutive tokens per page)" : "tokens (a random slot each)");
    print_header(o.reference);
  }
  for (int i = 0; i < npresets; i++) {
    const tk_preset *ps = &presets[i];
    if (o.only && ps != o.only) continue;
    if (!o.json) fprintf(stderr, "bench: %s (%s)\n", ps->name, ps->model);
    for (int k = 0; k < o.nops; k++)
      for (int t = 0; t < o.ntokens; t++) {
        const bench_spec spec = {(tk_preset_op)o.ops[k],
                                 ps,
                                 o.tokens[t],
                                 o.dtype,
                                 o.threads,
                                 o.backend,
                                 o.seed * 1000003u + (uint64_t)(i * 64 + k * 16 + t),
                                 o.page_slots};
        failures += bench_one(&o, dev, &spec, rotate_bytes);
      }
  }
  if (!o.json)
    printf(
        "\nMB: bytes one call moves (inputs read once + outputs written once). rot MB: memory the calls cycle\n"
        "through. GB/s = MB / time. copy: GB/s of a memcpy of MB/2 (same read + write traffic). %%copy: copy\n"
        "time / fused time. speedup: unfused / fused.\n"
        "%s",
        o.reference ? "ref us: the scalar reference backend (single-threaded) on the same tensors. vs ref: ref / fused.\n"
                    : "");
  if (o.json_file) { /* a write that failed during the run, or the last flush */
    const int lost = ferror(o.json_file);
    const int closed = fclose(o.json_file) == 0, close_err = closed ? 0 : errno; /* errno: the close's failure only */
    if (lost || !closed) {
      fprintf(stderr, "qkvfuse bench: --json-out: cannot write %s: %s\n", o.json_out,
              closed ? "a write failed during the run" : strerror(close_err));
      return 1;
    }
  }
  return failures ? 1 : 0;
}
