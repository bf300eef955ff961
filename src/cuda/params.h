/* SPDX-License-Identifier: Apache-2.0 */
/* Kernel parameters of the CUDA backend: the resolved problem (problem.h)
 * in the form the kernels index, and one by-value struct per kernel that
 * adds its own schedule to it. */
#ifndef QKVFUSE_CUDA_PARAMS_H
#define QKVFUSE_CUDA_PARAMS_H

#include <stdint.h>

#include "core/problem.h"

/* A row view for the kernels: element (r, c) at data + (r * ld + c). */
typedef struct qf_cu_mat {
  void *data;
  int64_t ld;
  int32_t dtype; /* qkvfuse_dtype; 0 = absent */
} qf_cu_mat;

typedef struct qf_cu_vec {
  const void *data;
  int32_t dtype; /* 0 = absent */
  int32_t per_channel; /* scales/offsets: 1 = [Nkv*D], 0 = one value */
} qf_cu_vec;

typedef struct qf_cu_cache {
  void *data;
  int64_t s_block, s_row, s_chunk, chunk;
  int64_t blocks, block_size;
  int32_t dtype;
  int32_t quant; /* qkvfuse_quant_mode */
} qf_cu_cache;

/* n / d for 0 <= n < 2^31 as (umulhi(n, mul) + n) >> shift
 * (device/divide.cuh: div_fixed; schedule.h: qf_cuda_divisor builds it). */
typedef struct qf_cu_div {
  uint32_t d, mul;
  int32_t shift;
} qf_cu_div;

/* The resolved problem (problem.h) as every kernel reads it: sizes, options,
 * tensors, cache views and the page table (params.cu). Each kernel takes its
 * own parameter struct below: this problem and its own schedule fields. */
typedef struct qf_cu_problem {
  /* sizes */
  int64_t T, S;                /* S: tokens per batch (contiguous layout), else 1 */
  int32_t heads_per_token;     /* Nq + Nkv (+ Nkv when v is written) */
  int32_t Nq, Nkv, D, R;

  /* options */
  int32_t q_norm, k_norm, gamma_offset, parity, rope_source, interleaved, layout;
  float eps;
  float mscale;
  int32_t io_dtype;

  qf_cu_mat in[3];               /* the input's q, k and v parts (problem.h); v absent when unread */
  const float *weight_scale, *act_scale;
  qf_cu_vec bias, q_gamma, k_gamma, q_beta, k_beta;
  qf_cu_vec positions;          /* int32/int64 */
  qf_cu_mat cos_sin_cache;      /* rows = max_pos */
  int64_t max_pos;              /* cos_sin_cache rows; 2^31 for COMPUTED */
  qf_cu_mat cos, sin;
  const uint64_t *turns;        /* COMPUTED: R/2 inverse frequencies in turns per position, 0.64 fixed point */
  qf_cu_vec slot_mapping;
  const float *k_scale, *v_scale, *k_offset, *v_offset;
  int32_t k_scale_pc, v_scale_pc; /* per channel ([Nkv*D]); else one per kv head (*_ph) or one for the tensor */
  qf_cu_mat q_out, k_out, v_out;
  qf_cu_cache k_cache, v_cache;
  uint32_t *error_flags;

  /* a token's cache row (streaming.cuh: check_token; general.cuh: the range): its
     slot s (contiguous layout: its batch's start index) is in range iff
     (uint64) s < slot_lim;
     slot_lin: both caches have s_block = block_size * s_row (a paged cache
     of whole rows, vLLM's), so that the row of slot s starts at s * s_row */
  int64_t slot_lim;
  int32_t slot_lin;
  /* q written a second time (problem.h: q_copy); the general kernel only */
  qf_cu_mat q_copy;
  /* k / v scales (and offsets) of one per kv head ([Nkv]): head h's at [h] */
  int32_t k_scale_ph, v_scale_ph;
  /* a quantized q (desc.q_quant, FP8_E4M3 or FP8_E5M2): q_out =
     fp8(q / *q_scale) (the streaming kernel: q * rcp.approx(*q_scale)) */
  int32_t q_quant;
  const float *q_scale;
  /* page-table addressing (core/address.h): where the kernels load a token's
     slot they compute it from the table instead (qf_page_table_slot: -2 for
     a data error, which fails the slot's range check) */
  int32_t page_table;
  qf_page_table pt;
} qf_cu_problem;

/* The streaming kernel's prefill form (prefill.cuh): items (token, up to
 * heads_per_item heads of one kind) dealt to resident and late blocks
 * (schedule.h: qf_cuda_schedule_prefill_grid writes the schedule,
 * qf_cuda_schedule_block reads it). */
typedef struct qf_cu_prefill_params {
  qf_cu_problem problem;
  int32_t heads_per_item;      /* 1..4 */
  int32_t items[3];            /* items per token of each kind (q, k, v); 0: the kind has no work */
  uint32_t runs;               /* token runs, ceil(T / groups per block) */
  int32_t blocks_per_item[3];  /* resident blocks per item of each kind */
  int32_t segment_end[3];      /* resident blocks are dealt in rounds, in segments: a segment's last round + 1 */
  int32_t segment_width[3];    /* its blocks per round (0: unused) */
  int32_t resident_blocks;     /* the rounds' blocks, which walk the runs below resident_runs */
  uint32_t resident_runs;      /* the late blocks take runs resident_runs .. runs - 1, */
  int32_t late_piece;          /* late_piece runs each */
  /* v items of a quantized cache: a lane's vectors adjacent (streaming.cuh:
     v_adjacent) */
  int32_t v_adjacent;
} qf_cu_prefill_params;

/* The streaming kernel's decode form (decode.cuh): one (token, head) per
 * group; the first decode_blocks_q blocks do q, the next decode_blocks_k k,
 * the rest v. */
typedef struct qf_cu_decode_params {
  qf_cu_problem problem;
  int32_t decode_blocks_k;
  qf_cu_div div_q_heads, div_kv_heads; /* a group's (token, head) from its index: by Nq, by Nkv */
  /* a slot's page (slot / block_size) and a contiguous token's batch (t / S)
     as multiplies (device/divide.cuh: div_by); d = 0 where the divisor is >= 2^31 */
  qf_cu_div page_div, batch_div;
  int32_t decode_blocks_q;
} qf_cu_decode_params;

/* The general kernel (general.cuh): tiles of tile_tokens tokens x tile_heads
 * heads, a group of `group` lanes per (token, head) task. */
typedef struct qf_cu_general_params {
  qf_cu_problem problem;
  int32_t nvec;                /* vectors per head: D / VEC */
  int32_t tile_tokens, tile_heads; /* a block's tile: tokens x heads */
  int32_t head_tiles;          /* blocks per token tile: ceil(heads_per_token / tile_heads) */
  int32_t group;               /* lanes per head: a power of two <= 32 */
} qf_cu_general_params;

/* The parameters of one launch: the struct of the kernel its variant names
 * (variant.h: qf_cuda_variant.kernel). */
typedef union qf_cu_kernel_params {
  qf_cu_prefill_params prefill;
  qf_cu_decode_params decode;
  qf_cu_general_params general;
} qf_cu_kernel_params;

#endif /* QKVFUSE_CUDA_PARAMS_H */
