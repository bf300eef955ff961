/* SPDX-License-Identifier: Apache-2.0 */
/* qkvfuse_build_info: the build's configuration as one JSON object, built
 * once (the detected CPU ISA is only known at run time). */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "qkvfuse.h"
#include "qkvfuse_build_config.h"
#ifdef QKVFUSE_WITH_CPU_BACKEND
#include "cpu/cpu.h"
#endif

#define QF_STR_(x) #x
#define QF_STR(x) QF_STR_(x)

static char build_info[1024];
static pthread_once_t build_info_once = PTHREAD_ONCE_INIT;

/* Appends to build_info. Everything but the architecture list fits in far
 * less than LIST_RESERVE bytes, and the list stops at an entry before it
 * would eat into that reserve, so the object always closes. */
#define LIST_RESERVE 384
static size_t put(size_t at, const char *s) {
  const size_t n = strlen(s);
  if (at + n + 1 > sizeof build_info) return at;
  memcpy(build_info + at, s, n + 1);
  return at + n;
}

/* `"a", "b"` from "a;b" (CMake list), skipping empty entries. */
static size_t put_list(size_t at, const char *list) {
  int first = 1;
  while (*list) {
    const char *end = strchr(list, ';');
    const size_t n = end ? (size_t)(end - list) : strlen(list);
    if (at + n + 4 > sizeof build_info - LIST_RESERVE) break;
    if (n > 0 && n < 64) {
      char item[72];
      snprintf(item, sizeof item, "%s\"%.*s\"", first ? "" : ", ", (int)n, list);
      at = put(at, item);
      first = 0;
    }
    list += n + (end ? 1 : 0);
  }
  return at;
}

static void build(void) {
  size_t at = put(0, "{\"version\": \"" QF_STR(QKVFUSE_VERSION_MAJOR) "." QF_STR(QKVFUSE_VERSION_MINOR) "." QF_STR(
                         QKVFUSE_VERSION_PATCH) "\", \"cuda\": ");
#ifdef QKVFUSE_WITH_CUDA
  at = put(at, "\"" QF_BUILD_CUDA_VERSION "\"");
#else
  at = put(at, "null");
#endif
  at = put(at, ", \"cuda_architectures\": [");
  at = put_list(at, QF_BUILD_CUDA_ARCHITECTURES); /* "" without CUDA */
  at = put(at, "]");
  at = put(at, ", \"cpu_isa\": {\"compiled\": [");
  const char *detected = NULL;
#ifdef QKVFUSE_WITH_CPU_BACKEND
  int first = 1;
  for (int i = 0; i < QF_CPU_ISA_COUNT; i++) {
    if (qf_cpu_kernels_for((qf_cpu_isa)i) == NULL) continue;
    at = put(at, first ? "\"" : ", \"");
    at = put(at, qf_cpu_isa_name((qf_cpu_isa)i));
    at = put(at, "\"");
    first = 0;
    if (qf_cpu_isa_usable((qf_cpu_isa)i)) detected = qf_cpu_isa_name((qf_cpu_isa)i);
  }
#endif
  at = put(at, "], \"detected\": ");
  if (detected) {
    at = put(at, "\"");
    at = put(at, detected);
    at = put(at, "\"");
  } else {
    at = put(at, "null");
  }
  at = put(at, "}, \"backends\": [\"reference\"");
#ifdef QKVFUSE_WITH_CPU_BACKEND
  at = put(at, ", \"cpu\"");
#endif
#ifdef QKVFUSE_WITH_CUDA
  at = put(at, ", \"cuda\"");
#endif
  put(at, "]}");
}

const char *qkvfuse_build_info(void) {
  pthread_once(&build_info_once, build);
  return build_info;
}
