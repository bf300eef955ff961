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
#include "qkvfuse_experimental.h"
#include "table.h"
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
          "  copy     memcpy of bytes/2, so that its read + write traffic equals the operator's bytes (on CUDA the\n"
          "           faster of a 16-byte-access copy kernel and cudaMemcpyAsync in pieces of <= 256 MiB)\n"
          "bytes = every input read once + every output written once (cos_sin_cache: the T rows used; caches:\n"
          "the rows written). Each time is the median of per-call samples after a warm-up; calls cycle through\n"
          "enough copies of the tensors to stream past the last-level cache (their descriptors, qkvfuse_tensor,\n"
          "are one set pointed at each copy in turn: in cache, as a caller's are). The tensors are the test kit's\n"
          "cases of the preset (kit/presets.h); before timing, a case of at most 512 tokens runs once and its\n"
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
          "                    of 100 launches, inputs rotated past the L2 cache)\n"
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
          "  --json            one JSON object per result line instead of the table (with, in \"kernel\",\n"
          "                    the kernel or path the fused call ran and why a faster one was passed over;\n"
          "                    on CUDA, copy_kernel_us, copy_memcpy_us and copy_by: the copy that won)\n"
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
  cli_table *table;     /* the rows, printed once all are measured (without --json) */
} bench_options;

/* ---- the three subjects ----------------------------------------------------------- */

static void call_failed(const bench_case *c, const char *what, qkvfuse_status s) {
  fprintf(stderr, "qkvfuse bench: %s %s T=%" PRId64 ": %s failed: %s: %s\n", tk_op_name(c->spec.op),
          c->spec.preset->name, c->spec.tokens, what, qkvfuse_status_string(s), qkvfuse_last_error());
}

static int run_fused(void *ctx, int64_t i) {
  bench_case *c = ctx;
  const qkvfuse_status s = qkvfuse_run(c->plan, bench_case_args(c, i), c->dev->stream ? c->dev->stream() : NULL);
  if (s != QKVFUSE_SUCCESS) call_failed(c, "qkvfuse_run", s);
  return s != QKVFUSE_SUCCESS;
}

/* Validation included, as qkvfuse_run includes it. */
static int run_unfused(void *ctx, int64_t i) {
  bench_case *c = ctx;
  qf_problem p;
  qkvfuse_status s = qf_resolve(c->plan, bench_case_args(c, i), &p);
  if (s == QKVFUSE_SUCCESS) s = c->dev->unfused_run(c->plan, &p, c->scratch);
  if (s != QKVFUSE_SUCCESS) call_failed(c, "the unfused path", s);
  return s != QKVFUSE_SUCCESS;
}

/* The scalar reference on the same tensors (--reference); ctx: a ref_ctx. */
typedef struct ref_ctx {
  bench_case *c;
  const qkvfuse_plan *plan;
} ref_ctx;

static int run_reference(void *ctx, int64_t i) {
  const ref_ctx *r = ctx;
  const qkvfuse_status s = qkvfuse_run(r->plan, bench_case_args(r->c, i), NULL);
  if (s != QKVFUSE_SUCCESS) call_failed(r->c, "the reference", s);
  return s != QKVFUSE_SUCCESS;
}

static int run_copy(void *ctx, int64_t i) {
  const bench_case *c = ctx;
  const size_t off = (size_t)i * c->copy_stride;
  c->dev->copy((char *)c->copy_dst + off, (const char *)c->copy_src + off, c->copy_bytes, c->spec.threads);
  return 0;
}

static int run_copy_engine(void *ctx, int64_t i) {
  const bench_case *c = ctx;
  const size_t off = (size_t)i * c->copy_stride;
  c->dev->copy_engine((char *)c->copy_dst + off, (const char *)c->copy_src + off, c->copy_bytes);
  return 0;
}

/* ---- one row ------------------------------------------------------------------------ */

typedef struct bench_row {
  double us, unfused_us, ref_us;     /* NAN: not measured */
  double copy_us;                    /* the faster of the two copies */
  double copy_kernel_us, copy_engine_us; /* dev->copy, dev->copy_engine (NAN: none) */
} bench_row;

static double gbps(size_t bytes, double us) { return us > 0 ? (double)bytes / (us * 1e3) : NAN; }

/* The memory a case's calls cycle through: every set of per-call tensors
 * (fused and unfused calls), and the copy's source and destination buffers. */
static size_t rotate_bytes_of(const bench_case *c) { return (size_t)c->instances * c->instance_bytes; }

static size_t copy_rotate_bytes_of(const bench_case *c) { return (size_t)c->copy_instances * 2 * c->copy_stride; }

/* The table's columns; the last two with --reference only. */
static const char *const table_headers[] = {"op",       "preset", "tokens", "dtype", "backend", "thr",
                                            "MB",       "rot MB", "fused us", "GB/s", "copy",  "%copy",
                                            "unfused us", "speedup", "ref us", "vs ref"};
static const char table_align[] = "llrllrrrrrrrrrrr";

static void table_row(cli_table *t, const bench_case *c, const bench_row *r) {
  cli_table_cell(t, "%s", tk_op_name(c->spec.op));
  cli_table_cell(t, "%s", c->spec.preset->name);
  cli_table_cell(t, "%" PRId64, c->spec.tokens);
  cli_table_cell(t, "%s", qkvfuse_dtype_name(c->spec.dtype));
  cli_table_cell(t, "%s", qkvfuse_plan_backend_name(c->plan));
  cli_table_cell(t, "%d", c->spec.threads);
  cli_table_cell(t, "%.3f", (double)c->bytes / 1e6);
  cli_table_cell(t, "%.3f", (double)rotate_bytes_of(c) / 1e6);
  cli_table_cell(t, "%.2f", r->us);
  cli_table_cell(t, "%.2f", gbps(c->bytes, r->us));
  cli_table_cell(t, "%.2f", gbps(c->bytes, r->copy_us));
  cli_table_cell(t, "%.0f%%", 100.0 * r->copy_us / r->us);
  if (isnan(r->unfused_us)) {
    cli_table_cell(t, "n/a");
    cli_table_cell(t, "n/a");
  } else {
    cli_table_cell(t, "%.2f", r->unfused_us);
    cli_table_cell(t, "%.2fx", r->unfused_us / r->us);
  }
  if (t->columns > 14) {
    cli_table_cell(t, "%.2f", r->ref_us);
    cli_table_cell(t, "%.2fx", r->ref_us / r->us);
  }
}

static void print_json(FILE *f, const bench_case *c, const bench_row *r) {
  cli_json j;
  cli_json_begin(&j, f);
  cli_json_str(&j, "op", tk_op_name(c->spec.op));
  cli_json_str(&j, "preset", c->spec.preset->name);
  cli_json_str(&j, "device", c->dev->name);
  cli_json_int(&j, "tokens", c->spec.tokens);
  cli_json_str(&j, "dtype", qkvfuse_dtype_name(c->spec.dtype));
  cli_json_str(&j, "input_dtype", qkvfuse_dtype_name(c->args.qkv->dtype));
  cli_json_str(&j, "backend", qkvfuse_plan_backend_name(c->plan));
  char kernel[256];
  if (qkvfuse_experimental_explain(c->plan, &c->args, kernel, sizeof kernel) == QKVFUSE_SUCCESS)
    cli_json_str(&j, "kernel", kernel);
  cli_json_int(&j, "threads", c->spec.threads);
  cli_json_str(&j, "norm", c->norm);
  if (c->args.slot_mapping) cli_json_str(&j, "slots", c->spec.page_slots ? "pages" : "tokens");
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
  if (!isnan(r->copy_engine_us)) {
    cli_json_str(&j, "copy_by", r->copy_engine_us < r->copy_kernel_us ? "memcpy" : "kernel");
    cli_json_num(&j, "copy_kernel_us", r->copy_kernel_us);
    cli_json_num(&j, "copy_memcpy_us", r->copy_engine_us);
  }
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
  bench_row r = {NAN, NAN, NAN, NAN, NAN, NAN};
  const cli_timing fused = cli_measure(dev, run_fused, &c, c.instances, o->min_time);
  const cli_timing copy = cli_measure(dev, run_copy, &c, c.copy_instances, o->min_time);
  cli_timing engine = {NAN, 0};
  if (dev->copy_engine) engine = cli_measure(dev, run_copy_engine, &c, c.copy_instances, o->min_time);
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
  int failed = fused.median_s < 0 || copy.median_s < 0 || engine.median_s < 0 || unfused.median_s < 0 ||
               ref.median_s < 0;
  if (!failed) {
    r.us = fused.median_s * 1e6;
    r.copy_kernel_us = copy.median_s * 1e6;
    r.copy_engine_us = engine.median_s * 1e6;
    r.copy_us = r.copy_engine_us < r.copy_kernel_us ? r.copy_engine_us : r.copy_kernel_us;
    r.unfused_us = unfused.median_s * 1e6;
    r.ref_us = ref.median_s * 1e6;
    if (o->json)
      print_json(stdout, &c, &r);
    else
      table_row(o->table, &c, &r);
    if (o->json_file) print_json(o->json_file, &c, &r);
  }
  bench_case_free(&c);
  return failed;
}

/* --device cuda on a build or machine without one (the parser takes no other
 * name that the device table can lack). */
static int device_unavailable(void) {
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

enum {
  OPT_JSON,
  OPT_JSON_OUT,
  OPT_REFERENCE,
  OPT_PRESET,
  OPT_TOKENS,
  OPT_OP,
  OPT_DTYPE,
  OPT_BACKEND,
  OPT_THREADS,
  OPT_DEVICE,
  OPT_MIN_TIME,
  OPT_ROTATE_MB,
  OPT_SLOTS,
  OPT_SEED,
  OPT_COUNT
};

/* @return 0, or -1 with *exit_code set: 0 after --help, 2 after a usage error. */
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
  char presets_needed[300], ops_needed[200], unknown_op[200], unknown_preset[300];
  snprintf(presets_needed, sizeof presets_needed, "a preset name (the presets: %s)", tk_preset_names());
  snprintf(ops_needed, sizeof ops_needed, "a comma-separated list of variants (the variants: %s)", tk_op_names());
  snprintf(unknown_op, sizeof unknown_op, "--op: unknown variant (the variants: %s)", tk_op_names());
  snprintf(unknown_preset, sizeof unknown_preset, "--preset: unknown preset (the presets: %s)", tk_preset_names());
  const cli_option options[OPT_COUNT] = {
      [OPT_JSON] = {"json", 0, NULL},
      [OPT_JSON_OUT] = {"json-out", 1, "a file name"},
      [OPT_REFERENCE] = {"reference", 0, NULL},
      [OPT_PRESET] = {"preset", 1, presets_needed},
      [OPT_TOKENS] = {"tokens", 1, "a comma-separated list of integers in 1..1048576"},
      [OPT_OP] = {"op", 1, ops_needed},
      [OPT_DTYPE] = {"dtype", 1, "bfloat16, float16 or float32"},
      [OPT_BACKEND] = {"backend", 1, "auto, reference, cpu or cuda"},
      [OPT_THREADS] = {"threads", 1, "an integer in 1..256"},
      [OPT_DEVICE] = {"device", 1, "cpu or cuda"},
      [OPT_MIN_TIME] = {"min-time", 1, "seconds in 0.001..60"},
      [OPT_ROTATE_MB] = {"rotate-mb", 1, "a number of MB > 0 and <= 1000000"},
      [OPT_SLOTS] = {"slots", 1, "tokens or pages"},
      [OPT_SEED] = {"seed", 1, "a non-negative integer"},
  };
  cli_parser p = cli_parser_make("bench", argc, argv, options, OPT_COUNT);
  for (;;) {
    const char *value;
    const int opt = cli_next_option(&p, &value);
    int64_t v;
    if (opt == CLI_OPT_END) break;
    if (opt == CLI_OPT_HELP) {
      cli_bench_usage(stdout);
      return *exit_code = 0, -1;
    }
    if (opt == CLI_OPT_ERROR) return *exit_code = 2, -1;
    int bad = 0; /* the value is not what the option needs */
    switch (opt) {
    case OPT_JSON:
      o->json = 1;
      break;
    case OPT_JSON_OUT:
      bad = value[0] == '\0';
      o->json_out = value;
      break;
    case OPT_REFERENCE:
      o->reference = 1;
      break;
    case OPT_PRESET:
      if ((o->only = tk_preset_find(value)) == NULL) return *exit_code = usage_error(unknown_preset, value), -1;
      break;
    case OPT_TOKENS:
      bad = cli_parse_i64_list(value, 1, 1 << 20, o->tokens, MAX_TOKEN_COUNTS, &o->ntokens) != 0;
      break;
    case OPT_OP: {
      char list[64];
      if (strlen(value) >= sizeof list) return *exit_code = usage_error("--op: list too long", value), -1;
      strcpy(list, value);
      o->nops = 0;
      for (char *q = list, *comma; q; q = comma ? comma + 1 : NULL) {
        if ((comma = strchr(q, ','))) *comma = '\0';
        const int op = tk_op_parse(q);
        if (op < 0) return *exit_code = usage_error(unknown_op, q), -1;
        for (int k = 0; k < o->nops; k++)
          if (o->ops[k] == op) return *exit_code = usage_error("--op: variant given twice", q), -1;
        o->ops[o->nops++] = op;
      }
      break;
    }
    case OPT_DTYPE:
      bad = (o->dtype = cli_float_dtype_parse(value)) == QKVFUSE_DTYPE_NONE;
      break;
    case OPT_BACKEND:
      if (strcmp(value, "auto") == 0)
        o->backend = QKVFUSE_BACKEND_AUTO;
      else if (strcmp(value, "reference") == 0)
        o->backend = QKVFUSE_BACKEND_REFERENCE;
      else if (strcmp(value, "cpu") == 0)
        o->backend = QKVFUSE_BACKEND_CPU;
      else if (strcmp(value, "cuda") == 0)
        o->backend = QKVFUSE_BACKEND_CUDA;
      else
        bad = 1;
      break;
    case OPT_THREADS:
      if (!(bad = cli_parse_i64(value, 1, 256, &v) != 0)) o->threads = (int)v;
      break;
    case OPT_DEVICE:
      bad = strcmp(value, "cpu") != 0 && strcmp(value, "cuda") != 0;
      o->device = value;
      break;
    case OPT_MIN_TIME:
      bad = cli_parse_double(value, 0.001, 60.0, &o->min_time) != 0;
      break;
    case OPT_ROTATE_MB:
      /* 0 stands for "not given" (the default span): a 0 given is refused, not read as the default */
      bad = cli_parse_double(value, 0.0, 1e6, &o->rotate_mb) != 0 || !(o->rotate_mb > 0);
      break;
    case OPT_SLOTS:
      bad = strcmp(value, "tokens") != 0 && strcmp(value, "pages") != 0;
      o->page_slots = strcmp(value, "pages") == 0;
      break;
    case OPT_SEED:
      if (!(bad = cli_parse_i64(value, 0, INT64_MAX, &v) != 0)) o->seed = (uint64_t)v;
      break;
    }
    if (bad) return *exit_code = cli_option_error(&p, opt, value), -1;
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
  if (dev == NULL) return device_unavailable();
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
  }
  cli_table table;
  cli_table_init(&table, o.reference ? 16 : 14, table_headers, table_align); /* the rows of every case */
  o.table = &table;
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
  if (!o.json) {
    if (cli_table_print(&table, stdout) != 0) failures++;
    printf(
        "\nMB: bytes one call moves (inputs read once + outputs written once). rot MB: memory the calls cycle\n"
        "through. GB/s = MB / time. copy: GB/s of the best copy of MB/2 (same read + write traffic). %%copy:\n"
        "copy time / fused time. speedup: unfused / fused.\n"
        "%s",
        o.reference ? "ref us: the scalar reference backend (single-threaded) on the same tensors. vs ref: ref / fused.\n"
                    : "");
  }
  cli_table_free(&table);
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
