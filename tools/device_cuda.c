/* SPDX-License-Identifier: Apache-2.0 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime under -std=c11 */
/* The CUDA device of the benchmark and the demo (see device.h): device
 * memory and copies to and from it, a copy kernel as the bandwidth baseline,
 * the unfused kernels, and timing by CUDA-graph replay.
 *
 * Timing: the calls of a subject are captured into graphs of kGraphCalls
 * launches each, the graphs together cycling through every rotated instance
 * (so the inputs stream past the L2 cache), and each replay is timed with
 * events; a call's time is the median replay time / kGraphCalls. This is the
 * method of the targets in the CUDA issue: launch gaps shrink to what a graph
 * has, and the host's validation is outside the timed region. */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "../kit/device.h"
#include "unfused_cuda.h"
#include "device.h"
#include "measure.h"

enum { kGraphCalls = 100, kMaxGraphs = 64, kMinSamples = 5, kMaxSamples = 1 << 16 };

static cudaStream_t g_stream;

static int check(cudaError_t e, const char *what) {
  if (e == cudaSuccess) return 0;
  fprintf(stderr, "qkvfuse: cuda: %s: %s\n", what, cudaGetErrorString(e));
  return 1;
}

static void *cuda_alloc(size_t bytes) {
  void *p = NULL;
  return cudaMalloc(&p, bytes ? bytes : 1) == cudaSuccess ? p : NULL;
}

static void cuda_release(void *p) { cudaFree(p); }

/* Both directions are queued on g_stream and waited for. g_stream does not
 * synchronize with the legacy default stream, so a plain cudaMemcpy would be
 * unordered with the calls on g_stream: an upload from pageable memory
 * returns before its DMA is done, and a download would not wait for the
 * calls that write what it reads. */
static void cuda_upload(void *dst, const void *src, size_t bytes) {
  if (check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, g_stream), "cudaMemcpyAsync (upload)")) return;
  check(cudaStreamSynchronize(g_stream), "cudaStreamSynchronize (upload)");
}

static void cuda_download(void *dst, const void *src, size_t bytes) {
  if (check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, g_stream), "cudaMemcpyAsync (download)")) return;
  check(cudaStreamSynchronize(g_stream), "cudaStreamSynchronize (download)");
}

/* The two baselines; the bench takes the faster at each size (neither wins
 * at every size on the H200). A 16-byte-access copy kernel: */
static void cuda_copy(void *dst, const void *src, size_t bytes, int threads) {
  (void)threads;
  qf_cuda_copy_bytes(dst, src, bytes, g_stream);
}

/* and cudaMemcpyAsync in pieces of at most 256 MiB, each but the last a
 * whole number of 4 KiB pages (the baseline BENCHMARKS.md defines). */
static void cuda_copy_engine(void *dst, const void *src, size_t bytes) {
  const size_t piece = (size_t)256 << 20;
  for (size_t off = 0; off < bytes; off += piece) {
    const size_t n = bytes - off < piece ? bytes - off : piece;
    if (check(cudaMemcpyAsync((char *)dst + off, (const char *)src + off, n, cudaMemcpyDeviceToDevice, g_stream),
              "cudaMemcpyAsync (copy baseline)"))
      return;
  }
}

static qkvfuse_status cuda_unfused(const qkvfuse_plan *plan, const qf_problem *p, void *scratch) {
  return qf_cuda_unfused_run(plan, p, scratch, g_stream);
}

static void cuda_sync(void) { check(cudaStreamSynchronize(g_stream), "cudaStreamSynchronize"); }

static double cuda_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static size_t cuda_l2_bytes(void) {
  int dev = 0, l2 = 0;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev);
  return l2 > 0 ? (size_t)l2 : (size_t)50 << 20;
}

static void *cuda_stream(void) { return (void *)g_stream; }

/* "cuda:0 (NVIDIA H200, 132 SMs)": the device the calls run on. */
static const char *cuda_describe(void) {
  static char text[320];
  int dev = 0;
  struct cudaDeviceProp prop;
  if (check(cudaGetDevice(&dev), "cudaGetDevice") ||
      check(cudaGetDeviceProperties(&prop, dev), "cudaGetDeviceProperties"))
    snprintf(text, sizeof text, "cuda:%d", dev);
  else
    snprintf(text, sizeof text, "cuda:%d (%s, %d SMs)", dev, prop.name, prop.multiProcessorCount);
  return text;
}

static int by_value(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static cli_timing cuda_measure(const cli_device *dev, int (*fn)(void *, int64_t), void *ctx, int64_t n,
                               double min_time) {
  cli_timing r = {-1.0, 0};
  int64_t ngraphs = (n + kGraphCalls - 1) / kGraphCalls;
  if (ngraphs < 1) ngraphs = 1;
  if (ngraphs > kMaxGraphs) ngraphs = kMaxGraphs;
  cudaGraphExec_t exec[kMaxGraphs];
  int built = 0, failed = 0;
  for (int64_t g = 0; g < ngraphs && !failed; g++) {
    cudaGraph_t graph;
    if (check(cudaStreamBeginCapture(g_stream, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture")) break;
    for (int k = 0; k < kGraphCalls && !failed; k++) failed = fn(ctx, (g * kGraphCalls + k) % n) != 0;
    const cudaError_t e = cudaStreamEndCapture(g_stream, &graph);
    if (failed || check(e, "cudaStreamEndCapture")) {
      failed = 1;
      if (e == cudaSuccess) cudaGraphDestroy(graph);
      break;
    }
    failed = check(cudaGraphInstantiate(&exec[g], graph, 0), "cudaGraphInstantiate");
    cudaGraphDestroy(graph);
    if (!failed) built++;
  }
  cudaEvent_t start, stop;
  double *s = NULL;
  if (failed || check(cudaEventCreate(&start), "cudaEventCreate") || check(cudaEventCreate(&stop), "cudaEventCreate"))
    goto done;
  s = malloc(sizeof *s * kMaxSamples);
  if (s == NULL) goto events;
  /* warm-up: every graph once, and at least a tenth of the budget */
  const double t0 = dev->now();
  int64_t g = 0;
  do {
    cudaGraphLaunch(exec[g], g_stream);
    g = (g + 1) % built;
    cuda_sync();
  } while (g != 0 || dev->now() - t0 < 0.1 * min_time);
  int64_t count = 0;
  const double t1 = dev->now();
  while (count < kMinSamples || (dev->now() - t1 < min_time && count < kMaxSamples)) {
    cudaEventRecord(start, g_stream);
    cudaGraphLaunch(exec[g], g_stream);
    cudaEventRecord(stop, g_stream);
    if (check(cudaEventSynchronize(stop), "graph replay")) goto events;
    float ms = 0.0f;
    cudaEventElapsedTime(&ms, start, stop);
    s[count++] = (double)ms * 1e-3 / kGraphCalls;
    g = (g + 1) % built;
  }
  qsort(s, (size_t)count, sizeof *s, by_value);
  r.median_s = count % 2 ? s[count / 2] : 0.5 * (s[count / 2 - 1] + s[count / 2]);
  r.samples = count * kGraphCalls;
events:
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
done:
  free(s);
  for (int i = 0; i < built; i++) cudaGraphExecDestroy(exec[i]);
  return r;
}

/* The kit's CUDA device with its transfers on g_stream. */
static const tk_device *cuda_kit(void) { return tk_device_cuda_on((void *)g_stream); }

static const cli_device cuda_device = {
    .name = "cuda",
    .kit = cuda_kit,
    .type = QKVFUSE_DEVICE_CUDA,
    .alloc = cuda_alloc,
    .free = cuda_release,
    .upload = cuda_upload,
    .download = cuda_download,
    .copy = cuda_copy,
    .copy_engine = cuda_copy_engine,
    .unfused_scratch_bytes = qf_cuda_unfused_scratch_bytes,
    .unfused_run = cuda_unfused,
    .sync = cuda_sync,
    .now = cuda_now,
    .llc_bytes = cuda_l2_bytes,
    .stream = cuda_stream,
    .measure = cuda_measure,
    .describe = cuda_describe,
};

const cli_device *cli_device_cuda(void) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) return NULL;
  if (g_stream == NULL && check(cudaStreamCreateWithFlags(&g_stream, cudaStreamNonBlocking), "cudaStreamCreate"))
    return NULL;
  return &cuda_device;
}
