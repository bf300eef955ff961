/* SPDX-License-Identifier: Apache-2.0 */
/* The CUDA device of the test kit: device memory through the CUDA runtime.
 * Built when the library is built with CUDA; without a visible GPU,
 * tk_device_for_backend(CUDA) is NULL and the CUDA registrations skip. */
#include <cuda_runtime_api.h>

#include "device.h"

static void *cu_alloc(size_t n) {
  void *p = NULL;
  return cudaMalloc(&p, n ? n : 256) == cudaSuccess ? p : NULL; /* 256-byte aligned */
}
static void cu_release(void *p) { cudaFree(p); }
static int cu_upload(void *dst, const void *src, size_t n) {
  return cudaMemcpy(dst, src, n, cudaMemcpyHostToDevice) != cudaSuccess;
}
static int cu_download(void *dst, const void *src, size_t n) {
  return cudaMemcpy(dst, src, n, cudaMemcpyDeviceToHost) != cudaSuccess;
}
static int cu_sync(void *stream) { return cudaStreamSynchronize((cudaStream_t)stream) != cudaSuccess; }

static const tk_device CUDA = {"cuda", QKVFUSE_DEVICE_CUDA, 0, cu_alloc, cu_release, cu_upload, cu_download, cu_sync, NULL};

const tk_device *tk_device_cuda(void) {
  static int avail = -1; /* probed once (the first call comes before any thread starts) */
  if (avail < 0) {
    int n = 0;
    avail = cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
  }
  return avail ? &CUDA : NULL;
}

static cudaStream_t g_stream; /* tk_device_cuda_on's */

static int st_upload(void *dst, const void *src, size_t n) {
  return cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, g_stream) != cudaSuccess ||
         cudaStreamSynchronize(g_stream) != cudaSuccess;
}
static int st_download(void *dst, const void *src, size_t n) {
  return cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, g_stream) != cudaSuccess ||
         cudaStreamSynchronize(g_stream) != cudaSuccess;
}

const tk_device *tk_device_cuda_on(void *stream) {
  static tk_device on = {"cuda", QKVFUSE_DEVICE_CUDA, 0, cu_alloc, cu_release, st_upload, st_download, cu_sync, NULL};
  if (!tk_device_cuda()) return NULL;
  g_stream = (cudaStream_t)stream;
  on.stream = stream;
  return &on;
}
