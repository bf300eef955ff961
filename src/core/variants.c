/* SPDX-License-Identifier: Apache-2.0 */
/* Backend variants (include/qkvfuse_experimental.h): their keys and values,
 * the process-wide set, and the per-plan list. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/plan.h"
#include "qkvfuse_experimental.h"

/* Each key's values; a recorded variant points at one of these strings, so
 * a snapshot is three pointers and never dangles. */
static const char *const CPU_ISA[] = {"auto", "avx512bf16", "avx512", "avx2", "scalar", NULL};
static const char *const CUDA_FORM[] = {"auto", "decode", "decode_narrow", "prefill", "general", NULL};
static const char *const CUDA_PDL[] = {"auto", "0", "1", NULL};

enum { KEY_CPU_ISA, KEY_CUDA_FORM, KEY_CUDA_PDL, KEY_COUNT };

static const struct {
  const char *name;
  const char *const *values;
  const char *listed; /* the values, for messages */
} KEYS[KEY_COUNT] = {
    {"cpu.isa", CPU_ISA, "auto, avx512bf16, avx512, avx2 or scalar"},
    {"cuda.form", CUDA_FORM, "auto, decode, decode_narrow, prefill or general"},
    {"cuda.pdl", CUDA_PDL, "auto, 0 or 1"},
};

/* The process-wide variants: one atomic pointer per key (NULL: unset). */
static const char *_Atomic g_set[KEY_COUNT];

static const char **field(qf_variants *v, int key) {
  return key == KEY_CPU_ISA ? &v->cpu_isa : key == KEY_CUDA_FORM ? &v->cuda_form : &v->cuda_pdl;
}

/* The key named by the n bytes at name, or -1. */
static int key_of(const char *name, size_t n) {
  for (int k = 0; k < KEY_COUNT; k++)
    if (strlen(KEYS[k].name) == n && strncmp(KEYS[k].name, name, n) == 0) return k;
  return -1;
}

/* The table string equal to the n bytes at value, or NULL. */
static const char *value_of(int key, const char *value, size_t n) {
  for (const char *const *v = KEYS[key].values; *v; v++)
    if (strlen(*v) == n && strncmp(*v, value, n) == 0) return *v;
  return NULL;
}

void qf_variants_current(qf_variants *v) {
  memset(v, 0, sizeof *v);
  for (int k = 0; k < KEY_COUNT; k++) *field(v, k) = atomic_load_explicit(&g_set[k], memory_order_relaxed);
}

qkvfuse_status qkvfuse_experimental_set(const char *key, const char *value) {
  qf_clear_error();
  QF_CHECK(key != NULL, QKVFUSE_ERROR_NULL_POINTER, "key: NULL");
  const int k = key_of(key, strlen(key));
  QF_CHECK(k >= 0, QKVFUSE_ERROR_INVALID_VALUE, "key: unknown variant '%s' (cpu.isa, cuda.form or cuda.pdl)", key);
  const char *v = NULL;
  if (value != NULL && value[0] != '\0') {
    v = value_of(k, value, strlen(value));
    QF_CHECK(v != NULL, QKVFUSE_ERROR_INVALID_VALUE, "value: '%s' is not a value of %s (%s)", value, KEYS[k].name,
             KEYS[k].listed);
  }
  atomic_store_explicit(&g_set[k], v, memory_order_relaxed);
  return QKVFUSE_SUCCESS;
}

qkvfuse_status qf_variants_parse(const char *list, qf_variants *v) {
  int given[KEY_COUNT] = {0};
  for (const char *p = list; p && *p;) {
    const size_t n = strcspn(p, ","), eq = strcspn(p, "=");
    QF_CHECK(eq < n && eq > 0, QKVFUSE_ERROR_INVALID_VALUE, "variants: expected key=value, got '%.*s'", (int)n, p);
    const int k = key_of(p, eq);
    QF_CHECK(k >= 0, QKVFUSE_ERROR_INVALID_VALUE, "variants: unknown key '%.*s' (cpu.isa, cuda.form or cuda.pdl)",
             (int)eq, p);
    QF_CHECK(!given[k], QKVFUSE_ERROR_INVALID_VALUE, "variants: %s given twice", KEYS[k].name);
    const char *val = value_of(k, p + eq + 1, n - eq - 1);
    QF_CHECK(val != NULL, QKVFUSE_ERROR_INVALID_VALUE, "variants: '%.*s' is not a value of %s (%s)",
             (int)(n - eq - 1), p + eq + 1, KEYS[k].name, KEYS[k].listed);
    given[k] = 1;
    *field(v, k) = val;
    p += n;
    if (*p == ',') {
      p++;
      QF_CHECK(*p != '\0', QKVFUSE_ERROR_INVALID_VALUE, "variants: a trailing ','");
    }
  }
  return QKVFUSE_SUCCESS;
}

qkvfuse_status qkvfuse_experimental_plan_create(const qkvfuse_desc *desc, const char *variants,
                                                qkvfuse_plan **out) {
  qf_clear_error();
  QF_CHECK(out != NULL, QKVFUSE_ERROR_NULL_POINTER, "plan: the output pointer is NULL");
  *out = NULL;
  qf_variants v;
  qf_variants_current(&v);
  QF_FORWARD(qf_variants_parse(variants, &v));
  qkvfuse_plan *plan = (qkvfuse_plan *)malloc(sizeof *plan);
  QF_CHECK(plan != NULL, QKVFUSE_ERROR_OUT_OF_MEMORY, "plan: out of host memory (%zu bytes)", sizeof *plan);
  const qkvfuse_status s = qf_plan_init_with(plan, desc, &v);
  if (s != QKVFUSE_SUCCESS) {
    free(plan);
    return s;
  }
  *out = plan;
  return QKVFUSE_SUCCESS;
}
