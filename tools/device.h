/* SPDX-License-Identifier: Apache-2.0 */
/* What the benchmark and the demo need from a device: memory, copies to and
 * from the host, copies (the bandwidth baseline), the unfused path,
 * synchronization, a clock, a description for the user and, where calls are
 * asynchronous, a stream and its own way of timing them. Two tables: cpu
 * (device.c) and cuda (device_cuda.c, in CUDA builds). */
#ifndef QKVFUSE_TOOLS_DEVICE_H
#define QKVFUSE_TOOLS_DEVICE_H

#include <stddef.h>
#include <stdint.h>

#include "core/plan.h"
#include "qkvfuse.h"

struct tk_device;

typedef struct cli_device {
  const char *name;             /* "cpu": what --device takes */
  /* The test kit's device layer on this device (kit/device.h): the memory and
   * transfers of the benchmark's cases; NULL when unusable. */
  const struct tk_device *(*kit)(void);
  qkvfuse_device_type type;     /* desc.device_type of its plans */
  void *(*alloc)(size_t bytes); /* 64-byte aligned; NULL when out of memory */
  void (*free)(void *p);
  void (*upload)(void *dst, const void *src, size_t bytes);            /* host -> device */
  void (*download)(void *dst, const void *src, size_t bytes);          /* device -> host, after the queued work */
  /* device -> device, the baseline: the faster of copy and copy_engine (NULL:
   * none) is the best copy of the same bytes */
  void (*copy)(void *dst, const void *src, size_t bytes, int threads);
  void (*copy_engine)(void *dst, const void *src, size_t bytes);
  /* The unfused stage-by-stage path on this device (NULL: none): its scratch
   * size and one run over a validated problem, scratch from alloc. */
  size_t (*unfused_scratch_bytes)(const qf_problem *p);
  qkvfuse_status (*unfused_run)(const qkvfuse_plan *plan, const qf_problem *p, void *scratch);
  void (*sync)(void);        /* wait for the work queued on the device */
  double (*now)(void);       /* seconds, monotonic */
  size_t (*llc_bytes)(void); /* last-level cache size, for rotating inputs past it */
  void *(*stream)(void);     /* the stream calls are queued on (NULL: none) */
  /* The device in words, for the user: "cpu (avx512bf16)", "cuda:0 (NVIDIA
   * H200, 132 SMs)". A static string. */
  const char *(*describe)(void);
  /* Timing of a subject (see measure.h); NULL: cli_measure's per-call wall clock. */
  struct cli_timing (*measure)(const struct cli_device *dev, int (*fn)(void *, int64_t), void *ctx, int64_t n,
                               double min_time);
} cli_device;

/* The CUDA table, or NULL when this build or machine has none. */
const cli_device *cli_device_cuda(void);

/* @return the device named name, or NULL when this build has none by that name. */
const cli_device *cli_device_find(const char *name);

#endif /* QKVFUSE_TOOLS_DEVICE_H */
