/* SPDX-License-Identifier: Apache-2.0 */
/* The utility API: status strings, dtype helpers and the DLPack mapping,
 * tensor_init, plan helpers, version, the last-error protocol, and the
 * experimental variants (qkvfuse_experimental.h). */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bases.h"
#include "case.h"
#include "harness.h"
#include "qkvfuse_experimental.h"

static int failed, checks;
#define CHECK(cond, ...)                 \
  do {                                   \
    checks++;                            \
    if (!(cond)) {                       \
      failed++;                          \
      printf("FAIL test_api: ");         \
      printf(__VA_ARGS__);               \
      printf("\n");                      \
    }                                    \
  } while (0)

static void status_strings(void) {
  static const char *names[] = {"QKVFUSE_SUCCESS",           "QKVFUSE_ERROR_NULL_POINTER", "QKVFUSE_ERROR_INVALID_VALUE",
                                "QKVFUSE_ERROR_DTYPE",       "QKVFUSE_ERROR_SHAPE",        "QKVFUSE_ERROR_STRIDE",
                                "QKVFUSE_ERROR_ALIGNMENT",   "QKVFUSE_ERROR_OVERLAP",      "QKVFUSE_ERROR_OUT_OF_RANGE",
                                "QKVFUSE_ERROR_BAD_SCALE",   "QKVFUSE_ERROR_DEVICE",       "QKVFUSE_ERROR_UNSUPPORTED",
                                "QKVFUSE_ERROR_CUDA",        "QKVFUSE_ERROR_OUT_OF_MEMORY", "QKVFUSE_ERROR_VERSION"};
  CHECK(sizeof names / sizeof names[0] == QKVFUSE_STATUS_COUNT, "QKVFUSE_STATUS_COUNT = %d, want %zu",
        (int)QKVFUSE_STATUS_COUNT, sizeof names / sizeof names[0]);
  for (int s = 0; s < 15; s++) {
    const char *got = qkvfuse_status_string((qkvfuse_status)s);
    CHECK(got && !strcmp(got, names[s]), "status_string(%d) = \"%s\", want \"%s\"", s, got ? got : "(null)", names[s]);
  }
  static const int unknown[] = {15, 99, -1};
  for (int i = 0; i < 3; i++) {
    const char *got = qkvfuse_status_string((qkvfuse_status)unknown[i]);
    CHECK(got && got[0], "status_string(%d) must be a non-empty string", unknown[i]);
    for (int s = 0; s < 15 && got; s++) CHECK(strcmp(got, names[s]), "status_string(%d) = a known name", unknown[i]);
  }
}

/* Each enum's _COUNT is one past its last value (qkvfuse.h). */
static void enum_counts(void) {
  CHECK(QKVFUSE_STATUS_COUNT == QKVFUSE_ERROR_VERSION + 1, "QKVFUSE_STATUS_COUNT");
  CHECK(QKVFUSE_ROPE_SOURCE_COUNT == QKVFUSE_ROPE_COMPUTED + 1, "QKVFUSE_ROPE_SOURCE_COUNT");
  CHECK(QKVFUSE_ROPE_STYLE_COUNT == QKVFUSE_ROPE_INTERLEAVED + 1, "QKVFUSE_ROPE_STYLE_COUNT");
  CHECK(QKVFUSE_ROPE_SCALING_COUNT == QKVFUSE_ROPE_SCALING_YARN + 1, "QKVFUSE_ROPE_SCALING_COUNT");
  CHECK(QKVFUSE_QUANT_COUNT == QKVFUSE_QUANT_FP8_E5M2 + 1, "QKVFUSE_QUANT_COUNT");
  CHECK(QKVFUSE_CACHE_LAYOUT_COUNT == QKVFUSE_CACHE_CONTIGUOUS + 1, "QKVFUSE_CACHE_LAYOUT_COUNT");
  CHECK(QKVFUSE_ADDRESS_COUNT == QKVFUSE_ADDRESS_PAGE_TABLE + 1, "QKVFUSE_ADDRESS_COUNT");
  CHECK(QKVFUSE_ROUNDING_COUNT == QKVFUSE_ROUNDING_CANN + 1, "QKVFUSE_ROUNDING_COUNT");
  CHECK(QKVFUSE_BACKEND_COUNT == QKVFUSE_BACKEND_CUDA + 1, "QKVFUSE_BACKEND_COUNT");
}

static void dtypes(void) {
  static const qkvfuse_dtype all[] = {QKVFUSE_DTYPE_INT8,    QKVFUSE_DTYPE_INT32,    QKVFUSE_DTYPE_INT64,
                                      QKVFUSE_DTYPE_FLOAT16, QKVFUSE_DTYPE_FLOAT32,  QKVFUSE_DTYPE_BFLOAT16,
                                      QKVFUSE_DTYPE_FLOAT8_E4M3FN, QKVFUSE_DTYPE_FLOAT8_E5M2};
  static const char *names[] = {"int8",     "int32",    "int64",         "float16",
                                "float32",  "bfloat16", "float8_e4m3fn", "float8_e5m2"};
  for (int i = 0; i < 8; i++) {
    uint8_t code = (uint8_t)(all[i] >> 8), bits = (uint8_t)(all[i] & 0xFF);
    CHECK(qkvfuse_dtype_from_dlpack(code, bits, 1) == all[i], "dtype_from_dlpack(%u, %u, 1) != %s", code, bits, names[i]);
    CHECK(qkvfuse_dtype_from_dlpack(code, bits, 2) == QKVFUSE_DTYPE_NONE, "lanes 2 of %s must be NONE", names[i]);
    CHECK(qkvfuse_dtype_from_dlpack(code, bits, 0) == QKVFUSE_DTYPE_NONE, "lanes 0 of %s must be NONE", names[i]);
    CHECK(qkvfuse_dtype_size(all[i]) == bits / 8u, "dtype_size(%s) = %zu", names[i], qkvfuse_dtype_size(all[i]));
    const char *n = qkvfuse_dtype_name(all[i]);
    CHECK(n && !strcmp(n, names[i]), "dtype_name(%s) = \"%s\"", names[i], n ? n : "(null)");
  }
  /* DLPack types the library does not handle: uint8, int16, float64, bfloat16 x32, e4m3fnuz, e5m2fnuz,
   * complex */
  static const uint8_t other[][2] = {{1, 8}, {0, 16}, {2, 64}, {4, 32}, {11, 8}, {13, 8}, {5, 64}, {2, 8}, {0, 1}};
  for (size_t i = 0; i < sizeof other / sizeof other[0]; i++)
    CHECK(qkvfuse_dtype_from_dlpack(other[i][0], other[i][1], 1) == QKVFUSE_DTYPE_NONE,
          "dtype_from_dlpack(%u, %u, 1) must be NONE", other[i][0], other[i][1]);
  /* every (code, bits) pair: exactly the eight above are dtypes */
  int known = 0;
  for (unsigned code = 0; code < 256; code++)
    for (unsigned bits = 0; bits < 256; bits++) {
      const qkvfuse_dtype d = qkvfuse_dtype_from_dlpack((uint8_t)code, (uint8_t)bits, 1);
      const int is_one = d != QKVFUSE_DTYPE_NONE && d == (qkvfuse_dtype)((code << 8) | bits);
      CHECK(d == QKVFUSE_DTYPE_NONE || is_one, "dtype_from_dlpack(%u, %u, 1) = %d", code, bits, (int)d);
      CHECK(is_one || qkvfuse_dtype_size((qkvfuse_dtype)((code << 8) | bits)) == 0, "dtype_size(%u << 8 | %u) of no dtype",
            code, bits);
      known += is_one;
    }
  CHECK(known == 8, "%d (code, bits) pairs are dtypes, want 8", known);
  CHECK(qkvfuse_dtype_size(QKVFUSE_DTYPE_NONE) == 0 && qkvfuse_dtype_size((qkvfuse_dtype)999) == 0, "size of unknown dtypes");
  CHECK(!strcmp(qkvfuse_dtype_name(QKVFUSE_DTYPE_NONE), "?") && !strcmp(qkvfuse_dtype_name((qkvfuse_dtype)999), "?"),
        "name of unknown dtypes must be \"?\"");
}

static void tensor_init(void) {
  float buf[60];
  qkvfuse_tensor t;
  memset(&t, 0x5A, sizeof t);
  int64_t shape[3] = {3, 4, 5};
  CHECK(qkvfuse_tensor_init(&t, buf, QKVFUSE_DTYPE_FLOAT32, 3, shape) == QKVFUSE_SUCCESS, "tensor_init 3-d");
  CHECK(t.data == buf && t.dtype == QKVFUSE_DTYPE_FLOAT32 && t.ndim == 3 && t.device_type == QKVFUSE_DEVICE_CPU &&
            t.device_id == 0,
        "tensor_init fields");
  CHECK(t.shape[0] == 3 && t.shape[1] == 4 && t.shape[2] == 5 && t.strides[0] == 20 && t.strides[1] == 5 && t.strides[2] == 1,
        "tensor_init: row-major strides of [3, 4, 5] must be [20, 5, 1]; got [%lld, %lld, %lld]", (long long)t.strides[0],
        (long long)t.strides[1], (long long)t.strides[2]);
  CHECK(!qkvfuse_last_error()[0], "last_error after a successful tensor_init");
  CHECK(qkvfuse_tensor_init(&t, buf, QKVFUSE_DTYPE_INT8, 0, NULL) == QKVFUSE_SUCCESS && t.ndim == 0, "tensor_init scalar");
  CHECK(qkvfuse_tensor_init(&t, buf, QKVFUSE_DTYPE_INT8, 7, shape) == QKVFUSE_ERROR_INVALID_VALUE && qkvfuse_last_error()[0],
        "tensor_init ndim 7 must be INVALID_VALUE with a message");
  CHECK(qkvfuse_tensor_init(&t, buf, QKVFUSE_DTYPE_INT8, -1, shape) == QKVFUSE_ERROR_INVALID_VALUE, "tensor_init ndim -1");
  CHECK(qkvfuse_tensor_init(NULL, buf, QKVFUSE_DTYPE_INT8, 1, shape) == QKVFUSE_ERROR_NULL_POINTER, "tensor_init(NULL)");
  CHECK(qkvfuse_tensor_init(&t, buf, QKVFUSE_DTYPE_INT8, 2, NULL) == QKVFUSE_ERROR_NULL_POINTER, "tensor_init shape NULL");
  /* negative sizes and extents whose strides overflow int64: SHAPE, and *t as it was */
  static const int64_t bad[][3] = {{3, -1, 5},
                                   {(int64_t)1 << 40, (int64_t)1 << 40, 2},
                                   {INT64_MAX, 2, 1},
                                   {2, (int64_t)1 << 61, 4},
                                   {0, INT64_MAX, INT64_MAX},
                                   {(int64_t)1 << 61, 1, 1}}; /* 2^61 float32: 2^63 bytes */
  for (int i = 0; i < 6; i++) {
    qkvfuse_tensor before;
    memset(&t, 0x3C, sizeof t);
    memcpy(&before, &t, sizeof t);
    const qkvfuse_status st = qkvfuse_tensor_init(&t, buf, QKVFUSE_DTYPE_FLOAT32, 3, bad[i]);
    CHECK(st == QKVFUSE_ERROR_SHAPE && strstr(qkvfuse_last_error(), "shape"),
          "tensor_init [%lld, %lld, %lld]: %s (\"%s\"), want QKVFUSE_ERROR_SHAPE naming shape", (long long)bad[i][0],
          (long long)bad[i][1], (long long)bad[i][2], qkvfuse_status_string(st), qkvfuse_last_error());
    CHECK(!memcmp(&t, &before, sizeof t), "tensor_init [%lld, %lld, %lld] changed *t although refused",
          (long long)bad[i][0], (long long)bad[i][1], (long long)bad[i][2]);
  }
  /* the largest accepted: 2^62 bytes, zero dims counted as 1 */
  const int64_t edge[3] = {(int64_t)1 << 30, 0, (int64_t)1 << 30};
  CHECK(qkvfuse_tensor_init(&t, buf, QKVFUSE_DTYPE_FLOAT32, 3, edge) == QKVFUSE_SUCCESS && t.strides[0] == (int64_t)1 << 30,
        "tensor_init [2^30, 0, 2^30] float32 must succeed with strides[0] = 2^30");
}

static void plans(void) {
  qkvfuse_plan_destroy(NULL); /* must be a no-op */
  CHECK(!strcmp(qkvfuse_plan_backend_name(NULL), "?"), "plan_backend_name(NULL) must be \"?\"");
  qkvfuse_desc d = QKVFUSE_DESC_INIT;
  d.num_q_heads = 2, d.num_kv_heads = 1, d.head_dim = 64;
  static const qkvfuse_backend bes[] = {QKVFUSE_BACKEND_REFERENCE, QKVFUSE_BACKEND_AUTO, QKVFUSE_BACKEND_CPU};
  for (int i = 0; i < 3; i++) {
    qkvfuse_plan *p = NULL;
    qkvfuse_args bad = QKVFUSE_ARGS_INIT;
    qkvfuse_run(NULL, &bad, NULL); /* leave an error behind: a success must clear it */
    d.backend = bes[i];
    qkvfuse_status st = qkvfuse_plan_create(&d, &p);
    if (bes[i] == QKVFUSE_BACKEND_CPU && st == QKVFUSE_ERROR_UNSUPPORTED) {
      CHECK(qkvfuse_last_error()[0] && p == NULL, "unsupported backend: message and no plan");
      continue;
    }
    CHECK(st == QKVFUSE_SUCCESS && p, "plan_create backend %s: %s", tk_backend_str(bes[i]), qkvfuse_last_error());
    CHECK(!qkvfuse_last_error()[0], "last_error not cleared by a successful plan_create");
    const char *n = qkvfuse_plan_backend_name(p);
    CHECK(n && n[0] && strcmp(n, "?"), "plan_backend_name of a %s plan: \"%s\"", tk_backend_str(bes[i]), n ? n : "(null)");
    if (bes[i] == QKVFUSE_BACKEND_REFERENCE) CHECK(!strcmp(n, "reference"), "reference plan named \"%s\"", n);
    qkvfuse_plan_destroy(p);
  }
  d.backend = QKVFUSE_BACKEND_CUDA; /* a CUDA backend for CPU tensors cannot serve */
  qkvfuse_plan *p = NULL;
  qkvfuse_status st = qkvfuse_plan_create(&d, &p);
  CHECK(st == QKVFUSE_ERROR_UNSUPPORTED || st == QKVFUSE_ERROR_DEVICE, "CUDA backend with a CPU device: %s",
        qkvfuse_status_string(st));
  CHECK(p == NULL, "a failed plan_create must leave *plan NULL");
  qkvfuse_plan_destroy(p);
}

/* Version-1 structs (0.1's layout: struct_size up to the fields version 2
 * added) are still served, with the added fields' defaults. */
static void struct_versions(void) {
  qkvfuse_desc d = QKVFUSE_DESC_INIT;
  d.num_q_heads = 1, d.num_kv_heads = 1, d.head_dim = 16;
  d.struct_size = (uint32_t)offsetof(qkvfuse_desc, q_quant), d.version = 1;
  d.q_quant = (qkvfuse_quant_mode)77; /* past a version-1 struct: never read */
  qkvfuse_plan *p = NULL;
  CHECK(qkvfuse_plan_create(&d, &p) == QKVFUSE_SUCCESS, "a version-1 desc: %s", qkvfuse_last_error());
  float in[48], out[16], want[16];
  for (int i = 0; i < 48; i++) in[i] = (float)i - 20.0f;
  for (int i = 0; i < 16; i++) want[i] = in[i], out[i] = -1.0f;
  const int64_t sh_in[2] = {1, 48}, sh_out[2] = {1, 16};
  qkvfuse_tensor x, q;
  qkvfuse_tensor_init(&x, in, QKVFUSE_DTYPE_FLOAT32, 2, sh_in);
  qkvfuse_tensor_init(&q, out, QKVFUSE_DTYPE_FLOAT32, 2, sh_out);
  qkvfuse_args a = QKVFUSE_ARGS_INIT;
  a.qkv = &x, a.q_out = &q;
  a.struct_size = (uint32_t)offsetof(qkvfuse_args, q), a.version = 1;
  a.q = &q; /* past a version-1 struct: never read */
  CHECK(p && qkvfuse_run(p, &a, NULL) == QKVFUSE_SUCCESS, "a version-1 args: %s", qkvfuse_last_error());
  CHECK(!memcmp(out, want, sizeof out), "a version-1 call: q_out is not q");
  a.version = 2; /* a version-2 number with a version-1 size */
  CHECK(p && qkvfuse_run(p, &a, NULL) == QKVFUSE_ERROR_VERSION && strstr(qkvfuse_last_error(), "args"),
        "args version 2 with version 1's size must be QKVFUSE_ERROR_VERSION");
  qkvfuse_plan_destroy(p);
  d.version = 2;
  CHECK(qkvfuse_plan_create(&d, &p) == QKVFUSE_ERROR_VERSION && p == NULL,
        "desc version 2 with version 1's size must be QKVFUSE_ERROR_VERSION");
}

/* The name of the backend a CPU-backend plan gets with per-plan variants vs
 * (NULL: qkvfuse_plan_create), or "" when plan creation fails. */
static const char *cpu_backend(const char *vs) {
  static char name[64];
  qkvfuse_desc d = QKVFUSE_DESC_INIT;
  d.num_q_heads = d.num_kv_heads = 1, d.head_dim = 64, d.backend = QKVFUSE_BACKEND_CPU;
  qkvfuse_plan *p = NULL;
  const qkvfuse_status s = vs ? qkvfuse_experimental_plan_create(&d, vs, &p) : qkvfuse_plan_create(&d, &p);
  snprintf(name, sizeof name, "%s", s == QKVFUSE_SUCCESS ? qkvfuse_plan_backend_name(p) : "");
  qkvfuse_plan_destroy(p);
  return name;
}

static void variants(void) {
  /* process-wide: bad keys and values name the argument and change nothing */
  CHECK(qkvfuse_experimental_set(NULL, "scalar") == QKVFUSE_ERROR_NULL_POINTER &&
            tk_names_argument(qkvfuse_last_error(), "key"),
        "experimental_set(NULL): %s", qkvfuse_last_error());
  CHECK(qkvfuse_experimental_set("cpu.nope", "scalar") == QKVFUSE_ERROR_INVALID_VALUE &&
            tk_names_argument(qkvfuse_last_error(), "key"),
        "experimental_set(unknown key): %s", qkvfuse_last_error());
  const char *bad_values[][2] = {{"cpu.isa", "avx9"}, {"cuda.form", "decode1"}, {"cuda.pdl", "2"}, {"cpu.isa", "AVX2"}};
  for (int i = 0; i < 4; i++)
    CHECK(qkvfuse_experimental_set(bad_values[i][0], bad_values[i][1]) == QKVFUSE_ERROR_INVALID_VALUE &&
              tk_names_argument(qkvfuse_last_error(), "value"),
          "experimental_set(%s, %s): %s", bad_values[i][0], bad_values[i][1], qkvfuse_last_error());
  const char *best = cpu_backend(NULL);
  if (!best[0]) return; /* no CPU backend in this build: nothing a variant could steer */
  CHECK(qkvfuse_experimental_set("cpu.isa", "scalar") == QKVFUSE_SUCCESS && !strcmp(cpu_backend(NULL), "cpu-scalar"),
        "cpu.isa=scalar set process-wide: a CPU plan is %s", cpu_backend(NULL));
  CHECK(qkvfuse_last_error()[0] == '\0', "last error after a successful experimental_set");
  CHECK(qkvfuse_experimental_set("cpu.isa", "avx9") != QKVFUSE_SUCCESS && !strcmp(cpu_backend(NULL), "cpu-scalar"),
        "a rejected experimental_set changed the variant");
  /* per plan: over the process-wide one */
  CHECK(!strcmp(cpu_backend("cpu.isa=auto"), best), "cpu.isa=auto per plan over scalar: %s, want %s",
        cpu_backend("cpu.isa=auto"), best);
  CHECK(!strcmp(cpu_backend("cuda.form=decode_narrow,cuda.pdl=0"), "cpu-scalar"),
        "CUDA keys on a CPU plan: recorded, the process-wide cpu.isa kept: %s",
        cpu_backend("cuda.form=decode_narrow,cuda.pdl=0"));
  CHECK(qkvfuse_experimental_set("cpu.isa", NULL) == QKVFUSE_SUCCESS && !strcmp(cpu_backend(NULL), best),
        "cpu.isa unset: %s, want %s", cpu_backend(NULL), best);
  /* the environment alias: read when no variant is set, a variant over it */
  setenv("QKVFUSE_CPU_ISA", "scalar", 1);
  CHECK(!strcmp(cpu_backend(NULL), "cpu-scalar"), "QKVFUSE_CPU_ISA=scalar: %s", cpu_backend(NULL));
  CHECK(!strcmp(cpu_backend("cpu.isa=auto"), best), "cpu.isa=auto over QKVFUSE_CPU_ISA=scalar: %s",
        cpu_backend("cpu.isa=auto"));
  unsetenv("QKVFUSE_CPU_ISA");
  /* malformed lists: INVALID_VALUE naming variants, no plan */
  static const char *bad[] = {"cpu.isa",        "cpu.isa=",     "=scalar",          "x=1",     "cpu.isa=avx2,",
                              "cpu.isa=scalar,cpu.isa=avx2", "cuda.pdl=2", "cpu.isa=scalar;cuda.pdl=0", ","};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    qkvfuse_desc d = QKVFUSE_DESC_INIT;
    d.num_q_heads = d.num_kv_heads = 1, d.head_dim = 64;
    qkvfuse_plan *p = (qkvfuse_plan *)&d; /* must become NULL */
    const qkvfuse_status s = qkvfuse_experimental_plan_create(&d, bad[i], &p);
    CHECK(s == QKVFUSE_ERROR_INVALID_VALUE && p == NULL && tk_names_argument(qkvfuse_last_error(), "variants"),
          "variants \"%s\": %s, %s", bad[i], qkvfuse_status_string(s), qkvfuse_last_error());
    if (s == QKVFUSE_SUCCESS) qkvfuse_plan_destroy(p);
  }
  CHECK(!strcmp(cpu_backend(""), best) && !strcmp(cpu_backend("cpu.isa=scalar"), "cpu-scalar"),
        "variants \"\" and cpu.isa=scalar per plan");
}

/* qkvfuse_experimental_explain of a on a plan of d with variants vs, into
 * out[n]: the status. With `refused` (naming the case), a run of a must give
 * the same status and message. */
static qkvfuse_status explain_plan(const qkvfuse_desc *d, const char *vs, const qkvfuse_args *a, const char *refused,
                                   char *out, size_t n) {
  qkvfuse_plan *p = NULL;
  qkvfuse_status st = qkvfuse_experimental_plan_create(d, vs, &p);
  if (st == QKVFUSE_SUCCESS) st = qkvfuse_experimental_explain(p, a, out, n);
  if (refused && p) {
    char msg[512];
    snprintf(msg, sizeof msg, "%s", qkvfuse_last_error());
    const qkvfuse_status run = qkvfuse_run(p, a, NULL);
    CHECK(run == st && !strcmp(msg, qkvfuse_last_error()), "explain of %s: %s (%s), run: %s (%s)", refused,
          qkvfuse_status_string(st), msg, qkvfuse_status_string(run), qkvfuse_last_error());
  }
  qkvfuse_plan_destroy(p);
  return st;
}

/* qkvfuse_experimental_explain on plan variants vs, backend be (2 threads),
 * for the case of spec s (fixed up), its row width one wider where break_args:
 * the text into out[n]; the status. */
static qkvfuse_status explain_spec(const tk_spec *s, const char *vs, qkvfuse_backend be, int break_args, char *out,
                                   size_t n) {
  const tk_device *dev = be == QKVFUSE_BACKEND_CUDA ? tk_device_for_backend(be) : NULL;
  tk_case c;
  tk_case_build(&c, s, 7);
  qkvfuse_tensor tens[TK_NSLOT];
  qkvfuse_args a;
  if (dev && tk_case_upload(&c, dev)) {
    tk_case_free(&c);
    return QKVFUSE_ERROR_CUDA;
  }
  tk_case_args(&c, dev ? TK_AT_DEVICE : TK_AT_INIT, tens, &a);
  if (break_args) tens[TK_QKV].shape[tens[TK_QKV].ndim - 1] += 1; /* a row width the heads do not give */
  qkvfuse_desc d = c.desc;
  d.backend = be, d.num_threads = 2;
  if (dev) d.device_type = QKVFUSE_DEVICE_CUDA, d.device_id = dev->id;
  const qkvfuse_status st = explain_plan(&d, vs, &a, break_args ? "a bad call" : NULL, out, n);
  tk_case_free(&c);
  return st;
}

/* explain_spec for a case of head_dim D and rotary_dim R (neox), q written
 * as q_quant's fp8 (or NONE). */
static qkvfuse_status explain_case_q(const char *vs, qkvfuse_backend be, int64_t D, int64_t R,
                                     qkvfuse_quant_mode q_quant, int break_args, char *out, size_t n) {
  tk_spec s;
  tk_spec_default(&s);
  s.Nq = 4, s.Nkv = 2, s.D = D, s.R = R, s.T = 40;
  s.rope_source = QKVFUSE_ROPE_COS_SIN_CACHE, s.rope_style = QKVFUSE_ROPE_NEOX;
  /* the streaming kernel's case on CUDA: 16-bit input and outputs, no cache */
  s.qkv_dt = s.q_out_dt = s.rope_dt = s.q_gamma_dt = s.k_gamma_dt = QKVFUSE_DTYPE_BFLOAT16;
  s.k_out_dt = s.v_out_dt = QKVFUSE_DTYPE_NONE, s.layout = QKVFUSE_CACHE_NONE;
  s.q_quant = q_quant;
  tk_spec_fixup(&s);
  return explain_spec(&s, vs, be, break_args, out, n);
}

static qkvfuse_status explain_case(const char *vs, qkvfuse_backend be, int64_t D, int64_t R, int break_args, char *out,
                                   size_t n) {
  return explain_case_q(vs, be, D, R, QKVFUSE_QUANT_NONE, break_args, out, n);
}

/* explain_spec on CUDA for a kit base case (kit/bases.h). */
static qkvfuse_status explain_base(int base, const char *vs, char *out, size_t n) {
  tk_spec s;
  tk_base_spec(base, &s);
  return explain_spec(&s, vs, QKVFUSE_BACKEND_CUDA, 0, out, n);
}

/* explain on the CPU backend with 2 threads, for a paged-cache case of T
 * tokens, slot_mapping strided or not, token `bad`'s slot out of the cache
 * (bad < 0: none): the text into out[n]; the status (the run's, compared). */
static qkvfuse_status explain_slots(int64_t T, int strided, int64_t bad, char *out, size_t n) {
  tk_spec s;
  tk_spec_default(&s);
  s.Nq = 4, s.Nkv = 2, s.D = 64, s.R = 64, s.T = T;
  s.rope_source = QKVFUSE_ROPE_COS_SIN_CACHE, s.rope_style = QKVFUSE_ROPE_NEOX;
  s.layout = QKVFUSE_CACHE_PAGED, s.block_size = 16, s.blocks = T / 16 + 2, s.skip_prob = 0;
  if (strided) s.strided = (uint64_t)1 << TK_SLOT_MAPPING;
  tk_spec_fixup(&s);
  tk_case c;
  tk_case_build(&c, &s, 9);
  if (bad >= 0) tk_case_poke(&c, TK_SLOT_MAPPING, bad, (double)(s.blocks * s.block_size)); /* one past the last slot */
  qkvfuse_tensor tens[TK_NSLOT];
  qkvfuse_args a;
  tk_case_args(&c, TK_AT_INIT, tens, &a);
  qkvfuse_desc d = c.desc;
  d.backend = QKVFUSE_BACKEND_CPU, d.num_threads = 2;
  const qkvfuse_status st = explain_plan(&d, NULL, &a, bad >= 0 ? "a bad slot" : NULL, out, n);
  tk_case_free(&c);
  return st;
}

static void explain(void) {
  char text[256];
  CHECK(explain_case(NULL, QKVFUSE_BACKEND_REFERENCE, 64, 64, 0, text, sizeof text) == QKVFUSE_SUCCESS &&
            !strcmp(text, "reference"),
        "explain on the reference: \"%s\" (%s)", text, qkvfuse_last_error());
  CHECK(explain_case(NULL, QKVFUSE_BACKEND_REFERENCE, 64, 64, 0, NULL, 8) == QKVFUSE_ERROR_NULL_POINTER &&
            tk_names_argument(qkvfuse_last_error(), "buf"),
        "explain with buf NULL: %s", qkvfuse_last_error());
  CHECK(explain_case(NULL, QKVFUSE_BACKEND_REFERENCE, 64, 64, 0, text, 0) == QKVFUSE_ERROR_NULL_POINTER,
        "explain with n = 0: %s", qkvfuse_last_error());
  CHECK(explain_case(NULL, QKVFUSE_BACKEND_REFERENCE, 64, 64, 1, text, sizeof text) == QKVFUSE_ERROR_SHAPE && !text[0],
        "explain of a bad row width: %s, text \"%s\"", qkvfuse_last_error(), text);
  CHECK(explain_case(NULL, QKVFUSE_BACKEND_REFERENCE, 64, 64, 0, text, 4) == QKVFUSE_SUCCESS && !strcmp(text, "ref"),
        "explain truncated to n - 1 bytes: \"%s\"", text);
  /* the CUDA backend (with a GPU): the streaming kernel's form, or the general kernel and why */
  if (tk_device_for_backend(QKVFUSE_BACKEND_CUDA)) {
    CHECK(explain_case("cuda.form=general", QKVFUSE_BACKEND_CUDA, 128, 128, 0, text, sizeof text) == QKVFUSE_SUCCESS &&
              strstr(text, "general kernel") && strstr(text, "(not the streaming kernel: cuda.form is general)"),
          "explain with cuda.form=general: \"%s\" (%s)", text, qkvfuse_last_error());
    CHECK(explain_case("cuda.form=prefill", QKVFUSE_BACKEND_CUDA, 128, 128, 0, text, sizeof text) == QKVFUSE_SUCCESS &&
              strstr(text, "streaming kernel, prefill form"),
          "explain with cuda.form=prefill: \"%s\" (%s)", text, qkvfuse_last_error());
    CHECK(explain_case("cuda.form=decode", QKVFUSE_BACKEND_CUDA, 128, 128, 0, text, sizeof text) == QKVFUSE_SUCCESS &&
              strstr(text, "streaming kernel, decode form"), /* two vectors per lane, at any size */
          "explain with cuda.form=decode: \"%s\" (%s)", text, qkvfuse_last_error());
    for (int f = 0; f < 2; f++) /* a quantized q: the streaming kernel too, in both forms */
      CHECK(explain_case_q(f ? "cuda.form=prefill" : "cuda.form=decode", QKVFUSE_BACKEND_CUDA, 128, 128,
                           QKVFUSE_QUANT_FP8_E4M3, 0, text, sizeof text) == QKVFUSE_SUCCESS &&
                strstr(text, f ? "streaming kernel, prefill form" : "decode form"),
            "explain with q as fp8, cuda.form=%s: \"%s\" (%s)", f ? "prefill" : "decode", text, qkvfuse_last_error());
    CHECK(explain_case(NULL, QKVFUSE_BACKEND_CUDA, 72, 72, 0, text, sizeof text) == QKVFUSE_SUCCESS &&
              strstr(text, "general kernel") && strstr(text, "(not the streaming kernel: "),
          "explain with D = 72 on CUDA: \"%s\" (%s)", text, qkvfuse_last_error());
    CHECK(explain_case(NULL, QKVFUSE_BACKEND_CUDA, 128, 128, 1, text, sizeof text) == QKVFUSE_ERROR_SHAPE,
          "explain of a bad row width on CUDA: %s", qkvfuse_last_error());
    /* int32 input: the streaming kernel in either form (by size: base I is decode-sized), as the int32
       call (base I is one) or with int32 slots not; with a bias (and parity), the general kernel */
    CHECK(explain_base(TK_BASE_I, NULL, text, sizeof text) == QKVFUSE_SUCCESS &&
              strstr(text, "streaming kernel, narrow decode form (int32 call)"),
          "explain of int32 input: \"%s\" (%s)", text, qkvfuse_last_error());
    CHECK(explain_base(TK_BASE_I, "cuda.form=prefill", text, sizeof text) == QKVFUSE_SUCCESS &&
              strstr(text, "streaming kernel, prefill form (int32 call)"),
          "explain of int32 input, cuda.form=prefill: \"%s\" (%s)", text, qkvfuse_last_error());
    CHECK(explain_base(TK_BASE_I, "cuda.form=decode", text, sizeof text) == QKVFUSE_SUCCESS &&
              strstr(text, "streaming kernel, decode form (int32 call)"),
          "explain of int32 input, cuda.form=decode: \"%s\" (%s)", text, qkvfuse_last_error());
    {
      tk_spec s;
      tk_base_spec(TK_BASE_I, &s);
      s.slot_dt = QKVFUSE_DTYPE_INT32;
      tk_spec_fixup(&s);
      CHECK(explain_spec(&s, NULL, QKVFUSE_BACKEND_CUDA, 0, text, sizeof text) == QKVFUSE_SUCCESS &&
                strstr(text, "streaming kernel, narrow decode form (int32 input)"),
            "explain of int32 input with int32 slots: \"%s\" (%s)", text, qkvfuse_last_error());
    }
    CHECK(explain_base(TK_BASE_B, NULL, text, sizeof text) == QKVFUSE_SUCCESS && strstr(text, "general kernel"),
          "explain of int32 input with a bias: \"%s\" (%s)", text, qkvfuse_last_error());
  }
  /* the CPU backend: which path, and why not the direct one (8 lanes with avx2, 1 scalar) */
  if (!cpu_backend(NULL)[0]) return;
  CHECK(explain_case("cpu.isa=scalar", QKVFUSE_BACKEND_CPU, 64, 64, 1, text, sizeof text) == QKVFUSE_ERROR_SHAPE,
        "explain of a bad row width on cpu-scalar: %s", qkvfuse_last_error());
  CHECK(explain_case("cpu.isa=scalar", QKVFUSE_BACKEND_CPU, 64, 64, 0, text, sizeof text) == QKVFUSE_SUCCESS &&
            !strcmp(text, "cpu-scalar: buffered path (not the direct path: the scalar kernels have no direct path), "
                          "2 threads"),
        "explain on cpu-scalar: \"%s\"", text);
  if (!cpu_backend("cpu.isa=avx2")[0]) return;
  CHECK(explain_case("cpu.isa=avx2", QKVFUSE_BACKEND_CPU, 64, 64, 0, text, sizeof text) == QKVFUSE_SUCCESS &&
            !strcmp(text, "cpu-avx2: direct path, 2 threads"),
        "explain on cpu-avx2, D = R = 64: \"%s\"", text);
  CHECK(explain_case("cpu.isa=avx2", QKVFUSE_BACKEND_CPU, 72, 72, 0, text, sizeof text) == QKVFUSE_SUCCESS &&
            strstr(text, "cpu-avx2: buffered path (not the direct path: rotary_dim / 2 is not a multiple"),
        "explain on cpu-avx2, D = R = 72: \"%s\"", text);
  CHECK(explain_case("cpu.isa=avx2", QKVFUSE_BACKEND_CPU, 68, 64, 0, text, sizeof text) == QKVFUSE_SUCCESS &&
            strstr(text, "(not the direct path: head_dim or head_dim - rotary_dim is not a multiple"),
        "explain on cpu-avx2, D = 68, R = 64: \"%s\"", text);
  /* a paged cache on 2 threads: k/v by cache-slot owner; a strided slot_mapping is gathered and checked */
  for (int strided = 0; strided < 2; strided++) {
    CHECK(explain_slots(256, strided, -1, text, sizeof text) == QKVFUSE_SUCCESS &&
              strstr(text, ", 2 threads, k/v heads by cache-slot owner"),
          "explain with a paged cache, %s slot_mapping: \"%s\" (%s)", strided ? "strided" : "contiguous", text,
          qkvfuse_last_error());
    CHECK(explain_slots(256, strided, 100, text, sizeof text) == QKVFUSE_ERROR_OUT_OF_RANGE &&
              strstr(qkvfuse_last_error(), "slot_mapping[100]") && !text[0],
          "explain with %s slot_mapping[100] outside the cache: %s, text \"%s\"", strided ? "strided" : "contiguous",
          qkvfuse_last_error(), text);
  }
  /* below one thread's share of work (T H = 20480 < 32768 elements), two
     threads still: k/v by slot owner beside the q heads; below 4096 one */
  CHECK(explain_slots(40, 0, -1, text, sizeof text) == QKVFUSE_SUCCESS &&
            strstr(text, ", 2 threads, k/v heads by cache-slot owner"),
        "explain with a small paged-cache call: \"%s\"", text);
  { /* a decode call of Llama-3-8B's shape: one token, its q heads in two pieces and its k/v heads */
    tk_spec s;
    tk_spec_default(&s);
    s.Nq = 32, s.Nkv = 8, s.D = 128, s.R = 128, s.T = 1;
    s.rope_source = QKVFUSE_ROPE_COS_SIN_CACHE, s.rope_style = QKVFUSE_ROPE_NEOX;
    s.layout = QKVFUSE_CACHE_PAGED, s.block_size = 16, s.blocks = 2, s.skip_prob = 0;
    tk_spec_fixup(&s);
    CHECK(explain_spec(&s, NULL, QKVFUSE_BACKEND_CPU, 0, text, sizeof text) == QKVFUSE_SUCCESS &&
              strstr(text, ", 2 threads, each token in 3 pieces (q heads in 2, k and v heads), k/v heads by "
                           "cache-slot owner"),
          "explain of a one-token call: \"%s\"", text);
  }
  CHECK(explain_slots(7, 0, -1, text, sizeof text) == QKVFUSE_SUCCESS && strstr(text, ", 1 thread") &&
            !strstr(text, "owner"),
        "explain with a paged cache on one thread: \"%s\"", text);
}

int main(void) {
  CHECK(qkvfuse_version_number() == QKVFUSE_VERSION_NUMBER, "version_number %u, header %d", qkvfuse_version_number(),
        QKVFUSE_VERSION_NUMBER);
  status_strings();
  enum_counts();
  dtypes();
  tensor_init();
  plans();
  struct_versions();
  variants();
  explain();
  printf("test_api: %d checks, %d failed\n", checks, failed);
  return failed ? 1 : 0;
}
