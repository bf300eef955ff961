/* SPDX-License-Identifier: Apache-2.0 */
/* The CUDA plan's architecture check: on every visible GPU, a plan succeeds
 * exactly when the build's architecture list (CMAKE_CUDA_ARCHITECTURES,
 * compiled in as QKVFUSE_TEST_CUDA_ARCHS) has code the GPU can run, decided
 * here from the list alone:
 * - a cubin "NN-real" (or plain "NN") runs on a GPU of the same major
 *   version and the same or a higher minor (NN = major * 10 + minor);
 *   an architecture-specific one ("90a") only on that exact capability;
 * - PTX "NN-virtual" (or plain "NN") on any GPU of capability NN or later;
 * - "all", "all-major" and "native" cover every GPU here.
 * Where the list covers the GPU, plan creation must succeed on the cuda
 * backend; where it does not, it must return QKVFUSE_ERROR_UNSUPPORTED with
 * a message that starts with the argument (device_id) and names the device
 * (cuda:N, its name, its capability) and the build's architectures, with no
 * CUDA error left for the caller. A build configured with a list that leaves
 * the GPU out (-DCMAKE_CUDA_ARCHITECTURES=80-real on an sm_90 GPU) checks the
 * refusal; a normal build the success.
 *   test_cuda_arch   (exit 77 without a GPU) */
#include <cuda_runtime_api.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "qkvfuse.h"

#ifndef QKVFUSE_TEST_CUDA_ARCHS
#error "QKVFUSE_TEST_CUDA_ARCHS (the build's CMAKE_CUDA_ARCHITECTURES) is not defined"
#endif

/* Whether one entry of the list runs on a GPU of capability cc. */
static int entry_covers(const char *e, int cc) {
  if (!strcmp(e, "all") || !strcmp(e, "all-major") || !strcmp(e, "native")) return 1;
  char *end = NULL;
  const long nn = strtol(e, &end, 10);
  if (end == e || nn <= 0) return 0;
  const int specific = isalpha((unsigned char)*end); /* "90a", "100f": architecture-specific */
  while (isalpha((unsigned char)*end)) end++;
  const int real = strcmp(end, "-virtual") != 0, virt = strcmp(end, "-real") != 0;
  if (specific) return real && nn == cc;
  if (real && nn / 10 == cc / 10 && nn % 10 <= cc % 10) return 1;
  return virt && nn <= cc;
}

static int list_covers(const char *list, int cc) {
  char buf[1024];
  snprintf(buf, sizeof buf, "%s", list);
  for (char *e = strtok(buf, " ;"); e; e = strtok(NULL, " ;"))
    if (entry_covers(e, cc)) return 1;
  return 0;
}

static int failed;

static void fail(int dev, const char *what, const char *msg) {
  failed++;
  printf("FAIL test_cuda_arch cuda:%d: %s\n  message: %s\n", dev, what, msg ? msg : "(none)");
}

int main(void) {
  const char *archs = QKVFUSE_TEST_CUDA_ARCHS;
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    printf("test_cuda_arch: no CUDA device: skipped\n");
    return TK_SKIP;
  }
  int refused = 0;
  for (int dev = 0; dev < n; dev++) {
    struct cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, dev) != cudaSuccess) {
      fail(dev, "cudaGetDeviceProperties failed", NULL);
      continue;
    }
    const int cc = prop.major * 10 + prop.minor;
    const int covered = list_covers(archs, cc);
    qkvfuse_desc d = QKVFUSE_DESC_INIT;
    d.num_q_heads = 8, d.num_kv_heads = 2, d.head_dim = 128, d.rotary_dim = 128;
    d.rope_source = QKVFUSE_ROPE_COS_SIN_CACHE;
    d.device_type = QKVFUSE_DEVICE_CUDA;
    d.device_id = dev;
    qkvfuse_plan *plan = NULL;
    const qkvfuse_status s = qkvfuse_plan_create(&d, &plan);
    const char *msg = qkvfuse_last_error();
    printf("test_cuda_arch: cuda:%d %s (compute capability %d.%d), build for \"%s\": %s, plan %s\n", dev, prop.name,
           prop.major, prop.minor, archs, covered ? "covered" : "not covered", qkvfuse_status_string(s));
    if (s != QKVFUSE_SUCCESS) printf("  message: %s\n", msg);
    if (covered) {
      if (s != QKVFUSE_SUCCESS)
        fail(dev, "the build covers this GPU but the plan failed", msg);
      else if (strcmp(qkvfuse_plan_backend_name(plan), "cuda") != 0)
        fail(dev, "the plan's backend is not cuda", qkvfuse_plan_backend_name(plan));
    } else {
      refused++;
      char want[64];
      snprintf(want, sizeof want, "%d.%d", prop.major, prop.minor);
      char who[32];
      snprintf(who, sizeof who, "cuda:%d", dev);
      if (s != QKVFUSE_ERROR_UNSUPPORTED) {
        fail(dev, "the build does not cover this GPU: want QKVFUSE_ERROR_UNSUPPORTED", msg);
      } else {
        if (!tk_names_argument(msg, "device_id")) fail(dev, "the message does not start with device_id", msg);
        if (!strstr(msg, who)) fail(dev, "the message does not name the device ordinal", msg);
        if (!strstr(msg, prop.name)) fail(dev, "the message does not name the device", msg);
        if (!strstr(msg, want)) fail(dev, "the message does not give the compute capability", msg);
        char buf[1024];
        snprintf(buf, sizeof buf, "%s", archs);
        for (char *e = strtok(buf, " ;"); e; e = strtok(NULL, " ;"))
          if (!strstr(msg, e)) fail(dev, "the message does not list the build's architectures", msg);
      }
      const cudaError_t left = cudaGetLastError();
      if (left != cudaSuccess) fail(dev, "a CUDA error was left for the caller", cudaGetErrorName(left));
    }
    qkvfuse_plan_destroy(plan);
  }
  printf("test_cuda_arch: %d device(s), %d refused, %d failed\n", n, refused, failed);
  return failed ? TK_FAIL : TK_PASS;
}
