/* SPDX-License-Identifier: Apache-2.0 */
/* The validated, resolved form of one call: what every backend consumes.
 *
 * qkvfuse_run validates the public qkvfuse_args against the plan once
 * (validate.c) and reduces every tensor to one of three shapes below. Backends
 * never see qkvfuse_tensor; they see row views with an element row stride,
 * contiguous vectors, and caches reduced to (block, row) + chunk addressing.
 * Elements within a row (and within a cache chunk) are contiguous except on
 * the reference backend, which takes any stride there (qf_mat.inc,
 * qf_cache.s_elem); a CPU call's strided vectors are copied into contiguous
 * ones before a backend runs (qf_gather). */
#ifndef QKVFUSE_CORE_PROBLEM_H
#define QKVFUSE_CORE_PROBLEM_H

#include <stdint.h>

#include "core/address.h"
#include "qkvfuse.h"

#ifdef __cplusplus
extern "C" {
#endif

/* D: any even value in [16, 1024], the D <= 1024 of CANN's
 * DequantRopeQuantKvcache. Head-sized buffers (stack arrays of the
 * reference and the CPU kernels) are bounded by it. */
#define QF_MAX_HEAD_DIM 1024
#define QF_MIN_HEAD_DIM 16
/* The rotary dims the frequency functions serve, bounded before any work
 * proportional to them: every head dim a plan takes. */
#define QF_MAX_ROTARY_DIM QF_MAX_HEAD_DIM

/* A matrix of `rows` rows of `cols` elements; row r starts `ld` elements
 * after row r-1, and element c of a row `inc` elements after element c-1
 * (1 except on the reference backend). data == NULL: absent. */
typedef struct qf_mat {
  void *data;
  qkvfuse_dtype dtype;
  int64_t rows, cols, ld;
  int64_t inc;
} qf_mat;

/* A contiguous vector of n elements. data == NULL: absent. */
typedef struct qf_vec {
  const void *data;
  qkvfuse_dtype dtype;
  int64_t n;
} qf_vec;

/* A KV cache. A token's destination is a (block, row) pair; element j
 * (0 <= j < Nkv*D) of its k or v row lives at element offset
 *   block * s_block + row * s_row + (j / chunk) * s_chunk + (j % chunk) * s_elem
 * paged / paged_hnd / contiguous: chunk = D, s_chunk = the head stride;
 * nz: chunk = c = 32 bytes / element size, s_chunk = stride of dim 1;
 * s_elem = the last dim's stride (1 except on the reference backend).
 * For contiguous, block is the batch and row the sequence position. */
typedef struct qf_cache {
  void *data; /* NULL: absent */
  qkvfuse_dtype dtype;
  int64_t blocks, block_size;
  int64_t s_block, s_row, s_chunk, chunk, s_elem;
} qf_cache;

/* A CPU call's strided vectors are copied, before the backend runs, into one
 * buffer of QF_GATHER_BYTES owned by the call (on its stack: no allocation),
 * each at a 64-byte offset; the kernels then read contiguous vectors. */
#define QF_GATHER_BYTES (64 * 1024)
#define QF_MAX_GATHERS 18 /* every vector argument (validate.c) */

/* One strided vector to gather: the caller's tensor, the pointer (of a
 * qf_vec or of the page table) to point at the copy, and its name. */
typedef struct qf_gather {
  const qkvfuse_tensor *t;
  const void **dst;
  const char *name;
} qf_gather;

/* The call's buffer for them, aligned for every element type. */
typedef union qf_gather_buf {
  unsigned char bytes[QF_GATHER_BYTES];
  int64_t i64;
  double f64;
} qf_gather_buf;

struct qf_names;

typedef struct qf_problem {
  const qkvfuse_desc *desc; /* the plan's normalized descriptor */
  int64_t T;                /* tokens */
  int64_t B, S;             /* contiguous layout: T = B * S (else B = T, S = 1) */
  int64_t Nq, Nkv, D, R, H; /* R = 0 without RoPE */
  /* the rounding target of unfused-parity mode: q_out's dtype; with a quantized
   * q (desc.q_quant) the dtype q_out has unquantized: the input's, or for int32
   * input the RoPE table's (float32 without a table) */
  qkvfuse_dtype io_dtype;

  /* The input in three parts, q [T x Nq*D], k [T x Nkv*D] and v [T x Nkv*D],
   * of one dtype; a packed qkv is three views of its rows. v.data is NULL
   * when nothing reads v. weight_scale and bias index the columns of the
   * logical row [q | k | v]: qf_in_part finds the part of such a column. */
  qf_mat in[3];
  qf_vec weight_scale, act_scale, bias;
  qf_vec q_gamma, k_gamma, q_beta, k_beta;

  qf_vec positions;       /* T */
  qf_mat cos_sin_cache;   /* max_pos x R */
  qf_mat cos, sin;        /* T x R */
  const double *inv_freq; /* COMPUTED: R/2 inverse frequencies (radians per position) */
  double mscale;          /* COMPUTED: multiplier of cos and sin */

  qf_vec slot_mapping; /* T, or B for contiguous; absent with page-table addressing */
  qf_page_table page_table; /* page-table addressing (address.h); indptr NULL otherwise */
  qf_vec k_scale, v_scale, k_offset, v_offset; /* n = 1, Nkv or Nkv*D */
  /* channels of the [Nkv*D] row that share one k / v scale (and offset):
   * Nkv*D (per tensor), D (per kv head) or 1 (per channel); channel j uses
   * element j / group */
  int64_t k_scale_group, v_scale_group;
  qf_vec q_scale; /* desc.q_quant != NONE: 1 element, q_out = fp8(q / q_scale) */

  qf_mat q_out, k_out, v_out; /* T x Nq*D, T x Nkv*D */
  /* T x Nq*D, q_out's dtype: q written a second time (a named operator's
   * extra output); absent unless it is a different view than q_out. The CUDA
   * kernels store it beside q_out, so a token dropped on the device writes
   * neither; for CPU plans the core copies q_out into it after the run, which
   * is the same since a CPU call writes every token or none. */
  qf_mat q_copy;
  qf_cache k_cache, v_cache;
  uint32_t *error_flags;

  /* strided vectors of a CPU call, to copy before it runs (qf_resolve_gather);
   * their copies take gather_bytes of the call's buffer */
  int ngather;
  int64_t gather_bytes;
  qf_gather gather[QF_MAX_GATHERS];
  const struct qf_names *names; /* the caller's argument names, for messages */
} qf_problem;

/* The part of the input (0 q, 1 k, 2 v) holding column *c of the logical row
 * [q | k | v]; *c becomes the column within that part. */
static inline int qf_in_part(const qf_problem *p, int64_t *c) {
  const int64_t nq = p->Nq * p->D, nkv = p->Nkv * p->D;
  if (*c < nq) return 0;
  if (*c < nq + nkv) {
    *c -= nq;
    return 1;
  }
  *c -= nq + nkv;
  return 2;
}

/* Token t's input from column c of [q | k | v] on; a range read from it
 * must stay within c's part. */
static inline const void *qf_in_at(const qf_problem *p, int64_t t, int64_t c) {
  const qf_mat *m = &p->in[qf_in_part(p, &c)];
  return (const char *)m->data + (size_t)(t * m->ld + c * m->inc) * qkvfuse_dtype_size(m->dtype);
}

/* Destination of token t in the caches: returns 0 when the token is skipped
 * (slot -1, batch index -1), else 1 with *block and *row set. The slots or
 * the page table must have been validated (validate.c does it before a CPU
 * backend runs). */
static inline int qf_token_dest(const qf_problem *p, int64_t t, int64_t *block, int64_t *row) {
  if (p->desc->cache_addressing == QKVFUSE_ADDRESS_PAGE_TABLE)
    return qf_page_table_dest(&p->page_table, t, block, row) == QF_PT_OK;
  const qf_vec *sm = &p->slot_mapping;
  if (p->desc->cache_layout == QKVFUSE_CACHE_CONTIGUOUS) {
    int64_t b = t / p->S, i = t - b * p->S;
    int64_t start = qf_pt_load(sm->data, sm->dtype, b);
    if (start == -1) return 0;
    *block = b;
    *row = start + i;
    return 1;
  }
  int64_t s = qf_pt_load(sm->data, sm->dtype, t);
  if (s == -1) return 0;
  *block = s / p->k_cache.block_size;
  *row = s - *block * p->k_cache.block_size;
  return 1;
}

/* Element offset of element j of the row at (block, row). */
static inline int64_t qf_cache_offset(const qf_cache *c, int64_t block, int64_t row, int64_t j) {
  return block * c->s_block + row * c->s_row + (j / c->chunk) * c->s_chunk + (j % c->chunk) * c->s_elem;
}

#ifdef __cplusplus
}
#endif

#endif /* QKVFUSE_CORE_PROBLEM_H */
