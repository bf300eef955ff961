// SPDX-License-Identifier: Apache-2.0
// Where a token's rows go in a cache, for every kernel: an index vector's
// entry, the page table's slot (core/address.h, shared with validation and
// the CPU backends), a row's start and a channel's element offset in the row
// (problem.h: qf_cache_offset's layout, on the kernels' 32-bit channel
// indices: its 64-bit division would be a subroutine).
#ifndef QKVFUSE_CUDA_DEVICE_ADDRESS_CUH
#define QKVFUSE_CUDA_DEVICE_ADDRESS_CUH

#include <stdint.h>

#include "core/address.h"
#include "cuda/params.h"

namespace qf {

// Element offset of the row (block blk, row `row`) in cache C.
__device__ __forceinline__ int64_t cache_row(const qf_cu_cache &C, int64_t blk, int64_t row) {
  return blk * C.s_block + row * C.s_row;
}

// Element offset of channel jj (0 <= jj < Nkv * D) of the row at row0 in
// cache C of chunk `chunk` (any: the general kernel).
__device__ __forceinline__ int64_t cache_element(const qf_cu_cache &C, int64_t row0, int jj, int chunk) {
  return row0 + (int64_t)(jj / chunk) * C.s_chunk + jj % chunk;
}

// Element offset of channel e (a multiple of 8) of kv head kvh of the row at
// row0 in cache C: chunk = D (paged, paged_hnd, contiguous) or a power of
// two (nz), so the offset is a shift and a mask (the streaming kernel;
// ENGINE: chunk = D).
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
// that reads its addressing from the parameters, page table or not. I32:
// every table is int32 (the append call's: eligible.cu), known here, so
// that each load is one 32-bit load, not both widths' behind a select.
template <bool I32 = false>
static __device__ __noinline__ int64_t page_table_slot(qf_page_table pt, int64_t t) {
  if (I32) pt.indptr_dtype = pt.indices_dtype = pt.batch_dtype = pt.pos_dtype = QKVFUSE_DTYPE_INT32;
  return qf_page_table_slot(&pt, t);
}

}  // namespace qf

#endif  // QKVFUSE_CUDA_DEVICE_ADDRESS_CUH
