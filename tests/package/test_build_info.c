/* SPDX-License-Identifier: Apache-2.0 */
/* qkvfuse_build_info against what CMake configured (given on the command
 * line by tests/package/CMakeLists.txt) and against the library's own ISA
 * choice:
 *
 *   test_build_info --cuda VERSION|none --archs "80;90" --isa "scalar;avx2" --backends "reference;cpu"
 *
 * The string must be one JSON object with exactly the documented keys, the
 * header's version, the CUDA version and architecture list CMake compiled
 * with (null and [] without CUDA), the ISA levels built in, and as "detected"
 * the best ISA a CPU plan accepts through QKVFUSE_CPU_ISA (null without the
 * CPU backend). Links the shared library: the public symbol only. */
#define _POSIX_C_SOURCE 200809L
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <qkvfuse.h>

static int failures;
#define CHECK(cond, ...)                                       \
  do {                                                         \
    if (!(cond)) {                                             \
      fprintf(stderr, "test_build_info: FAIL: " __VA_ARGS__); \
      fputc('\n', stderr);                                     \
      failures++;                                              \
    }                                                          \
  } while (0)

/* ---- a JSON reader for what the object may hold: objects, arrays, strings
 * (with escapes), null. Values live in a fixed pool. */
enum { J_NULL, J_STR, J_ARR, J_OBJ };
typedef struct jv {
  int type;
  char str[128];     /* J_STR */
  int n;             /* J_ARR / J_OBJ: number of items */
  int item[16];      /* pool indices */
  char key[16][32];  /* J_OBJ keys */
} jv;
static jv pool[64];
static int npool;
static const char *src;

static void ws(void) {
  while (isspace((unsigned char)*src)) src++;
}

static int parse_string(char *out, size_t cap) {
  if (*src != '"') return 0;
  src++;
  size_t n = 0;
  while (*src && *src != '"') {
    char c = *src++;
    if (c == '\\') {
      c = *src++;
      if (c != '"' && c != '\\' && c != '/') return 0; /* the object needs no other escape */
    } else if ((unsigned char)c < 0x20) {
      return 0;
    }
    if (n + 1 >= cap) return 0;
    out[n++] = c;
  }
  if (*src != '"') return 0;
  src++;
  out[n] = '\0';
  return 1;
}

static int parse_value(void) { /* pool index, -1 on a syntax error */
  ws();
  if (npool >= (int)(sizeof pool / sizeof pool[0])) return -1;
  const int id = npool++;
  jv *v = &pool[id];
  memset(v, 0, sizeof *v);
  if (strncmp(src, "null", 4) == 0) {
    src += 4;
    v->type = J_NULL;
    return id;
  }
  if (*src == '"') {
    v->type = J_STR;
    return parse_string(v->str, sizeof v->str) ? id : -1;
  }
  const char open = *src, close = open == '[' ? ']' : '}';
  if (open != '[' && open != '{') return -1;
  v->type = open == '[' ? J_ARR : J_OBJ;
  src++;
  ws();
  if (*src == close) {
    src++;
    return id;
  }
  for (;;) {
    if (v->n >= 16) return -1;
    if (v->type == J_OBJ) {
      ws();
      if (!parse_string(v->key[v->n], sizeof v->key[v->n])) return -1;
      for (int i = 0; i < v->n; i++)
        if (strcmp(v->key[i], v->key[v->n]) == 0) return -1; /* duplicate key */
      ws();
      if (*src++ != ':') return -1;
    }
    const int item = parse_value();
    if (item < 0) return -1;
    v->item[v->n++] = item;
    ws();
    if (*src == ',') {
      src++;
      continue;
    }
    if (*src++ != close) return -1;
    return id;
  }
}

static const jv *get(const jv *obj, const char *key) {
  for (int i = 0; i < obj->n; i++)
    if (strcmp(obj->key[i], key) == 0) return &pool[obj->item[i]];
  return NULL;
}

/* The array's strings joined by ';' (a CMake list). */
static void join(const jv *arr, char *out, size_t cap) {
  out[0] = '\0';
  for (int i = 0; i < arr->n; i++) {
    const jv *s = &pool[arr->item[i]];
    if (s->type != J_STR) {
      snprintf(out, cap, "<not a string at %d>", i);
      return;
    }
    if (i) strncat(out, ";", cap - strlen(out) - 1);
    strncat(out, s->str, cap - strlen(out) - 1);
  }
}

/* 1 when obj is an object with exactly these keys. */
static int check_keys(const jv *obj, const char *what, const char *const *keys, int nkeys) {
  const int before = failures;
  CHECK(obj->type == J_OBJ, "%s is not an object", what);
  if (obj->type != J_OBJ) return 0;
  CHECK(obj->n == nkeys, "%s has %d keys, expected %d", what, obj->n, nkeys);
  for (int i = 0; i < nkeys; i++) CHECK(get(obj, keys[i]) != NULL, "%s lacks \"%s\"", what, keys[i]);
  return failures == before;
}

static int cpu_plan_accepts(const char *isa) {
  setenv("QKVFUSE_CPU_ISA", isa, 1);
  qkvfuse_desc d = QKVFUSE_DESC_INIT;
  d.num_q_heads = d.num_kv_heads = 1;
  d.head_dim = 64;
  d.backend = QKVFUSE_BACKEND_CPU;
  qkvfuse_plan *plan = NULL;
  const qkvfuse_status s = qkvfuse_plan_create(&d, &plan);
  qkvfuse_plan_destroy(plan);
  unsetenv("QKVFUSE_CPU_ISA");
  return s == QKVFUSE_SUCCESS;
}

int main(int argc, char **argv) {
  const char *want_cuda = NULL, *want_archs = "", *want_isa = "", *want_backends = NULL;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (strcmp(argv[i], "--cuda") == 0) want_cuda = argv[i + 1];
    else if (strcmp(argv[i], "--archs") == 0) want_archs = argv[i + 1];
    else if (strcmp(argv[i], "--isa") == 0) want_isa = argv[i + 1];
    else if (strcmp(argv[i], "--backends") == 0) want_backends = argv[i + 1];
    else {
      fprintf(stderr, "test_build_info: unknown option %s\n", argv[i]);
      return 2;
    }
  }
  if (want_cuda == NULL || want_backends == NULL) {
    fprintf(stderr, "usage: test_build_info --cuda VERSION|none --archs LIST --isa LIST --backends LIST\n");
    return 2;
  }

  const char *info = qkvfuse_build_info();
  CHECK(info != NULL, "qkvfuse_build_info() returned NULL");
  if (info == NULL) return 1;
  CHECK(qkvfuse_build_info() == info, "a second call returned another string");
  printf("qkvfuse_build_info: %s\n", info);
  CHECK(strchr(info, '\n') == NULL, "the string holds a newline");

  src = info;
  const int root_id = parse_value();
  ws();
  CHECK(root_id >= 0 && *src == '\0', "not one JSON object (syntax error near offset %d)", (int)(src - info));
  if (root_id < 0) return 1;
  const jv *root = &pool[root_id];
  static const char *const keys[] = {"version", "cuda", "cuda_architectures", "cpu_isa", "backends"};
  if (!check_keys(root, "the object", keys, 5)) return 1;

  char expect[128], got[512];
  snprintf(expect, sizeof expect, "%d.%d.%d", QKVFUSE_VERSION_MAJOR, QKVFUSE_VERSION_MINOR, QKVFUSE_VERSION_PATCH);
  const jv *version = get(root, "version");
  CHECK(version->type == J_STR && strcmp(version->str, expect) == 0, "version: expected \"%s\"", expect);

  const jv *cuda = get(root, "cuda"), *archs = get(root, "cuda_architectures");
  if (strcmp(want_cuda, "none") == 0) {
    CHECK(cuda->type == J_NULL, "cuda: expected null (no CUDA backend)");
  } else {
    CHECK(cuda->type == J_STR && strcmp(cuda->str, want_cuda) == 0, "cuda: expected \"%s\"", want_cuda);
  }
  CHECK(archs->type == J_ARR, "cuda_architectures is not an array");
  if (archs->type == J_ARR) {
    join(archs, got, sizeof got);
    CHECK(strcmp(got, want_archs) == 0, "cuda_architectures: [%s], expected [%s]", got, want_archs);
  }

  const jv *backends = get(root, "backends");
  CHECK(backends->type == J_ARR, "backends is not an array");
  if (backends->type == J_ARR) {
    join(backends, got, sizeof got);
    CHECK(strcmp(got, want_backends) == 0, "backends: [%s], expected [%s]", got, want_backends);
  }

  const jv *isa = get(root, "cpu_isa");
  static const char *const isa_keys[] = {"compiled", "detected"};
  if (!check_keys(isa, "cpu_isa", isa_keys, 2)) return 1;
  const jv *compiled = get(isa, "compiled"), *detected = get(isa, "detected");
  CHECK(compiled->type == J_ARR, "cpu_isa.compiled is not an array");
  if (compiled->type == J_ARR) {
    join(compiled, got, sizeof got);
    CHECK(strcmp(got, want_isa) == 0, "cpu_isa.compiled: [%s], expected [%s]", got, want_isa);
    /* detected: the last (best) compiled ISA that a CPU plan accepts */
    const char *best = NULL;
    for (int i = 0; i < compiled->n; i++)
      if (cpu_plan_accepts(pool[compiled->item[i]].str)) best = pool[compiled->item[i]].str;
    if (best == NULL) {
      CHECK(detected->type == J_NULL, "cpu_isa.detected: expected null (no ISA usable)");
    } else {
      CHECK(detected->type == J_STR && strcmp(detected->str, best) == 0,
            "cpu_isa.detected: expected \"%s\", the best ISA a CPU plan accepts", best);
    }
  }

  if (failures) {
    fprintf(stderr, "test_build_info: %d failure(s)\n", failures);
    return 1;
  }
  printf("test_build_info: ok\n");
  return 0;
}
