/* SPDX-License-Identifier: Apache-2.0 */
/* Where the library's tensors live during a test run. The harness keeps the
 * inputs, the poison and the oracle on the host, and moves buffers to and from
 * a device through these hooks: device_cpu.c (host memory) and device_cuda.c
 * (cudaMalloc/cudaMemcpy/cudaStreamSynchronize). Another device plugs in the
 * same way; nothing else in the harness changes. */
#ifndef TK_DEVICE_H
#define TK_DEVICE_H

#include <stddef.h>
#include <stdint.h>

#include "qkvfuse.h"

typedef struct tk_device {
  const char *name;
  qkvfuse_device_type type;
  int32_t id;
  void *(*alloc)(size_t bytes); /* >= 256-byte aligned; NULL on failure */
  void (*release)(void *p);
  int (*upload)(void *dst_dev, const void *src_host, size_t bytes);   /* 0 on success */
  int (*download)(void *dst_host, const void *src_dev, size_t bytes); /* 0 on success */
  int (*sync)(void *stream);                                          /* 0 on success */
  void *stream;                                                       /* passed to qkvfuse_run */
} tk_device;

const tk_device *tk_device_cpu(void);
/* CUDA device 0, or NULL when the test kit is built without CUDA or no GPU is visible. */
const tk_device *tk_device_cuda(void);
/* CUDA device 0 with its transfers queued on `stream` (a cudaStream_t) and
 * waited for, and `stream` passed to qkvfuse_run: for a caller whose calls run
 * on a stream that does not synchronize with the legacy default stream. One
 * stream per process (a later call replaces it); NULL as tk_device_cuda. */
const tk_device *tk_device_cuda_on(void *stream);

/* The device that serves a backend: CUDA for QKVFUSE_BACKEND_CUDA (NULL when
 * there is none), the CPU otherwise. */
const tk_device *tk_device_for_backend(qkvfuse_backend b);

#endif /* TK_DEVICE_H */
