// SPDX-License-Identifier: Apache-2.0
/* A kernel that writes late while the next kernel on its stream already runs
 * (test_cuda_pdl.c): it lets its dependents launch at once
 * (griddepcontrol.launch_dependents), waits, then copies the given buffers.
 * A kernel launched after it with programmatic stream serialization (as
 * qkvfuse_run launches its kernels) starts before the copies are made and
 * must see them after its grid dependency wait. sm_90 and later; on older
 * devices the launch has no early start and the test checks plain ordering. */
#include <cuda_runtime.h>
#include <stdint.h>

#include "pdl_writer.h"

static __global__ void late_writer(tk_late_copies c, unsigned wait_ns) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
  uint64_t t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do {
    __nanosleep(1000);
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  } while (t - t0 < wait_ns);
  for (int i = 0; i < c.n; i++) {
    uint8_t *d = static_cast<uint8_t *>(c.dst[i]);
    const uint8_t *s = static_cast<const uint8_t *>(c.src[i]);
    for (size_t b = threadIdx.x; b < c.bytes[i]; b += blockDim.x) d[b] = s[b];
  }
}

extern "C" int tk_launch_late_writer(void *stream, const tk_late_copies *c, unsigned wait_us) {
  late_writer<<<1, 256, 0, (cudaStream_t)stream>>>(*c, wait_us * 1000u);
  return cudaGetLastError() != cudaSuccess;
}
