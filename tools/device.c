/* SPDX-License-Identifier: Apache-2.0 */
/* The CPU device of the benchmark and the demo (see device.h). */
#define _POSIX_C_SOURCE 200809L /* clock_gettime, pthreads under -std=c11 */

#include "device.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../kit/device.h"
#include "cpu/cpu.h"
#include "unfused.h"
#include "tensors.h"

#define CPU_COPY_MIN_BYTES_PER_THREAD (256 * 1024)
#define CPU_COPY_MAX_THREADS 256
#define CPU_LLC_FALLBACK (32u << 20)

/* Upload and download: host memory on both sides. */
static void cpu_transfer(void *dst, const void *src, size_t bytes) { memcpy(dst, src, bytes); }

typedef struct copy_part {
  char *dst;
  const char *src;
  size_t bytes;
} copy_part;

static void *copy_worker(void *arg) {
  copy_part *c = arg;
  memcpy(c->dst, c->src, c->bytes);
  return NULL;
}

/* memcpy split over up to `threads` threads, each with at least 256 KiB
 * (below that a thread costs more than it copies). */
static void cpu_copy(void *dst, const void *src, size_t bytes, int threads) {
  size_t n = bytes / CPU_COPY_MIN_BYTES_PER_THREAD;
  if (n > (size_t)threads) n = (size_t)threads;
  if (n > CPU_COPY_MAX_THREADS) n = CPU_COPY_MAX_THREADS;
  if (n <= 1) {
    memcpy(dst, src, bytes);
    return;
  }
  pthread_t tid[CPU_COPY_MAX_THREADS];
  copy_part part[CPU_COPY_MAX_THREADS];
  int started[CPU_COPY_MAX_THREADS];
  for (size_t i = 0; i < n; i++) {
    const size_t lo = bytes * i / n / 64 * 64, hi = i + 1 == n ? bytes : bytes * (i + 1) / n / 64 * 64;
    part[i] = (copy_part){(char *)dst + lo, (const char *)src + lo, hi - lo};
  }
  for (size_t i = 1; i < n; i++) started[i] = pthread_create(&tid[i], NULL, copy_worker, &part[i]) == 0;
  copy_worker(&part[0]);
  for (size_t i = 1; i < n; i++) {
    if (started[i])
      pthread_join(tid[i], NULL);
    else
      copy_worker(&part[i]);
  }
}

/* The unfused stages with the fused plan's stage math: the CPU backend's SIMD
 * kernels for a cpu-* plan (fusion vs no fusion at equal code quality), the
 * reference's scalar stages otherwise. */
static qkvfuse_status cpu_unfused_run(const qkvfuse_plan *plan, const qf_problem *p, void *scratch) {
  return qf_unfused_run_with(p, scratch, qf_cpu_unfused_kernels(plan));
}

static void cpu_sync(void) {}

static double cpu_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The largest data or unified cache sysfs reports for cpu0 ("107520K"). */
static size_t cpu_llc_bytes(void) {
  size_t best = 0;
  for (int i = 0; i < 16; i++) {
    char path[96], text[64];
    snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
    FILE *f = fopen(path, "r");
    if (f == NULL) continue;
    const int got = fgets(text, sizeof text, f) != NULL;
    fclose(f);
    if (!got) continue;
    char *end;
    size_t v = (size_t)strtoull(text, &end, 10);
    if (*end == 'K')
      v <<= 10;
    else if (*end == 'M')
      v <<= 20;
    if (v > best) best = v;
  }
  return best ? best : CPU_LLC_FALLBACK;
}

/* The instruction set the CPU backend's plans get (the process-wide cpu.isa
 * variant and QKVFUSE_CPU_ISA honored). */
static const char *cpu_describe(void) {
  static char text[64];
  qf_cpu_isa isa;
  qf_variants v;
  qf_variants_current(&v);
  if (qf_cpu_isa_choose(&v, &isa) == QKVFUSE_SUCCESS)
    snprintf(text, sizeof text, "cpu (%s)", qf_cpu_isa_name(isa));
  else
    snprintf(text, sizeof text, "cpu (no usable instruction set)");
  return text;
}

static const cli_device cpu_device = {
    .name = "cpu",
    .kit = tk_device_cpu,
    .type = QKVFUSE_DEVICE_CPU,
    .alloc = cli_alloc,
    .free = cli_free,
    .upload = cpu_transfer,
    .download = cpu_transfer,
    .copy = cpu_copy,
    .unfused_scratch_bytes = qf_unfused_scratch_bytes,
    .unfused_run = cpu_unfused_run,
    .sync = cpu_sync,
    .now = cpu_now,
    .llc_bytes = cpu_llc_bytes,
    .describe = cpu_describe,
};

#ifndef QKVFUSE_WITH_CUDA
const cli_device *cli_device_cuda(void) { return NULL; }
#endif

const cli_device *cli_device_find(const char *name) {
  if (strcmp(name, "cpu") == 0) return &cpu_device;
  if (strcmp(name, "cuda") == 0) return cli_device_cuda();
  return NULL;
}
