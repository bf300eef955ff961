// SPDX-License-Identifier: Apache-2.0
// Where a token's rows go in a cache: an index vector's entry, the
// page table's slot (core/address.h), and a channel's element offset in a
// cache row.
#ifndef QKVFUSE_CUDA_DEVICE_ADDRESS_CUH
#define QKVFUSE_CUDA_DEVICE_ADDRESS_CUH

#include <stdint.h>

#include "core/address.h"
#include "cuda/params.h"

namespace qf {

// Element offset of channel jj (a multiple of 8) of a token's row in a cache:
// chunk = D (paged, paged_hnd, contiguous) or a power of two (nz).
template <int ENGINE = 0>
__device__ __forceinline__ int64_t cache_at(const qf_cu_cache &C, int64_t row0, int kvh, int e, int D) {
  if (ENGINE || C.chunk == D) return row0 + kvh * C.s_chunk + e;
  const int jj = kvh * D + e, sh = __ffs((int)C.chunk) - 1;
  return row0 + (int64_t)(jj >> sh) * C.s_chunk + (jj & ((int)C.chunk - 1));
}

// The address of entry i of an int32 / int64 index vector (ld_index's).
__device__ __forceinline__ const void *index_at(const void *p, int dt, int64_t i) {
  return static_cast<const char *>(p) + i * (dt == QKVFUSE_DTYPE_INT64 ? 8 : 4);
}

// Token t's slot under the page table (core/address.h: qf_page_table_slot;
// -1 skips, -2 is a data error), out of line: inlined, its dependent loads
// and checks cost registers (and spills in the prefill form) in every kernel
// that reads its addressing from the parameters, page table or not.
static __device__ __noinline__ int64_t page_table_slot(const qf_page_table pt, int64_t t) {
  return qf_page_table_slot(&pt, t);
}

}  // namespace qf

#endif  // QKVFUSE_CUDA_DEVICE_ADDRESS_CUH
