/* SPDX-License-Identifier: Apache-2.0 */
/* test_cuda_pdl.c's writer kernel (pdl_writer.cu). */
#ifndef TK_PDL_WRITER_H
#define TK_PDL_WRITER_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TK_LATE_MAX 8
typedef struct tk_late_copies {
  int n;
  void *dst[TK_LATE_MAX];
  const void *src[TK_LATE_MAX];
  size_t bytes[TK_LATE_MAX];
} tk_late_copies;

/* Enqueue on `stream` a kernel that lets the next kernel start at once, waits
 * wait_us microseconds, then copies src[i] to dst[i] (device memory). 0 on
 * success. */
int tk_launch_late_writer(void *stream, const tk_late_copies *c, unsigned wait_us);

#ifdef __cplusplus
}
#endif

#endif /* TK_PDL_WRITER_H */
