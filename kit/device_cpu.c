/* SPDX-License-Identifier: Apache-2.0 */
/* The CPU "device": host memory, plain copies. */
#include <stdlib.h>
#include <string.h>

#include "device.h"

static void *cpu_alloc(size_t bytes) {
  size_t n = (bytes + 255) / 256 * 256;
  return aligned_alloc(256, n ? n : 256);
}
static void cpu_release(void *p) { free(p); }
static int cpu_copy(void *dst, const void *src, size_t n) {
  memcpy(dst, src, n);
  return 0;
}
static int cpu_sync(void *stream) {
  (void)stream;
  return 0;
}

static const tk_device CPU = {"cpu", QKVFUSE_DEVICE_CPU, 0, cpu_alloc, cpu_release, cpu_copy, cpu_copy, cpu_sync, NULL};

const tk_device *tk_device_cpu(void) { return &CPU; }

#ifndef QKVFUSE_TEST_CUDA
const tk_device *tk_device_cuda(void) { return NULL; }
const tk_device *tk_device_cuda_on(void *stream) {
  (void)stream;
  return NULL;
}
#endif

const tk_device *tk_device_for_backend(qkvfuse_backend b) {
  return b == QKVFUSE_BACKEND_CUDA ? tk_device_cuda() : &CPU;
}
