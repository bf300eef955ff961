/* SPDX-License-Identifier: Apache-2.0 */
/* Page-table cache addressing (desc.cache_addressing = PAGE_TABLE): the one
 * definition of where a token's k and v rows go, shared by validation, the
 * CPU backends and every CUDA kernel, so that they cannot disagree.
 *
 * Token t of sequence b = batch_indices[t] at position p = kv_positions[t]
 * goes to block kv_indices[kv_indptr[b] + p / block_size], row
 * p % block_size (FlashInfer's append_paged_kv_cache); b = -1 skips the
 * token. qf_page_table_dest classifies every way the four tensors can fail to
 * give a row, reading only entries that exist, so a caller that stops at the
 * first non-QF_PT_OK result never reads or writes out of bounds. */
#ifndef QKVFUSE_CORE_ADDRESS_H
#define QKVFUSE_CORE_ADDRESS_H

#include <stdint.h>

#include "qkvfuse.h"

/* A function of this header: host and device code under nvcc, plain C
 * elsewhere. */
#if defined(__CUDACC__)
#define QF_HD static __host__ __device__ __forceinline__
#else
#define QF_HD static inline
#endif

/* The page table of one call: the four contiguous int32 / int64 vectors and
 * the caches' geometry. */
typedef struct qf_page_table {
  const void *indptr;    /* kv_indptr [nseq + 1] */
  const void *indices;   /* kv_indices [nindices] */
  const void *batch;     /* batch_indices [T] */
  const void *pos;       /* kv_positions [T] */
  int32_t indptr_dtype, indices_dtype, batch_dtype, pos_dtype; /* qkvfuse_dtype */
  int64_t nseq, nindices;
  int64_t block_size, blocks; /* of k_cache (v_cache has the same) */
} qf_page_table;

/* qf_page_table_dest's results: >= 0 usable, < 0 a data error (all of them
 * QKVFUSE_DATA_ERROR_SLOT). */
enum {
  QF_PT_SKIP = 0,          /* batch_indices[t] = -1 */
  QF_PT_OK = 1,            /* *block, *row set */
  QF_PT_BAD_BATCH = -1,    /* batch_indices[t] outside [0, nseq) and not -1 */
  QF_PT_BAD_POSITION = -2, /* kv_positions[t] < 0 */
  QF_PT_BAD_INDPTR = -3,   /* kv_indptr[b] < 0 or kv_indptr[b + 1] < kv_indptr[b] */
  QF_PT_BAD_PAGE = -4,     /* p / block_size >= kv_indptr[b + 1] - kv_indptr[b] (or block_size 0) */
  QF_PT_BAD_INDEX = -5,    /* kv_indptr[b] + p / block_size >= nindices */
  QF_PT_BAD_BLOCK = -6     /* kv_indices[...] outside [0, blocks) */
};

/* Entry i of an int32 / int64 vector, as int64 (through the read-only data
 * cache on the device: the tables are inputs of the call). */
QF_HD int64_t qf_pt_load(const void *p, int32_t dtype, int64_t i) {
#if defined(__CUDA_ARCH__)
  return dtype == QKVFUSE_DTYPE_INT64 ? (int64_t)__ldg((const long long *)p + i)
                                      : (int64_t)__ldg((const int32_t *)p + i);
#else
  return dtype == QKVFUSE_DTYPE_INT64 ? ((const int64_t *)p)[i] : (int64_t)((const int32_t *)p)[i];
#endif
}

/* Token t's cache row under the page table. Every difference below is of
 * values already known to be >= 0 and every sum stays below an entry's value
 * or nindices, so nothing overflows whatever the tables hold. */
QF_HD int qf_page_table_dest(const qf_page_table *pt, int64_t t, int64_t *block, int64_t *row) {
  /* both of token t's own entries first (they exist for every t < T), so
     that a kernel's walk waits for them together: a chain of three loads */
  const int64_t b = qf_pt_load(pt->batch, pt->batch_dtype, t), p = qf_pt_load(pt->pos, pt->pos_dtype, t);
  /* one test of both first (a compiler would otherwise load p after b's tests) */
  if (b < 0 || b >= pt->nseq || p < 0) {
    if (b == -1) return QF_PT_SKIP;
    return b < 0 || b >= pt->nseq ? QF_PT_BAD_BATCH : QF_PT_BAD_POSITION;
  }
  const int64_t lo = qf_pt_load(pt->indptr, pt->indptr_dtype, b), hi = qf_pt_load(pt->indptr, pt->indptr_dtype, b + 1);
  if (lo < 0 || hi < lo) return QF_PT_BAD_INDPTR;
  if (pt->block_size <= 0) return QF_PT_BAD_PAGE;
  const int64_t page = p / pt->block_size;
  if (page >= hi - lo) return QF_PT_BAD_PAGE;
  if (page >= pt->nindices - lo) return QF_PT_BAD_INDEX; /* lo + page >= nindices, without the sum */
  const int64_t blk = qf_pt_load(pt->indices, pt->indices_dtype, lo + page);
  if (blk < 0 || blk >= pt->blocks) return QF_PT_BAD_BLOCK;
  *block = blk;
  *row = p - page * pt->block_size;
  return QF_PT_OK;
}

/* Token t's slot (block * block_size + row) for the kernels that place
 * slots: -1 skips, -2 is a data error (outside every cache: a slot's range
 * check rejects it). block * block_size + row < blocks * block_size, which
 * the cache's validated extent bounds. */
QF_HD int64_t qf_page_table_slot(const qf_page_table *pt, int64_t t) {
  int64_t block = 0, row = 0;
  const int r = qf_page_table_dest(pt, t, &block, &row);
  return r == QF_PT_OK ? block * pt->block_size + row : r == QF_PT_SKIP ? -1 : -2;
}

#endif /* QKVFUSE_CORE_ADDRESS_H */
