/* SPDX-License-Identifier: Apache-2.0 */
/* The CUDA backend's host functions shared by its translation units. */
#ifndef QKVFUSE_CUDA_BACKEND_H
#define QKVFUSE_CUDA_BACKEND_H

#include "core/plan.h"
#include "cuda/params.h"

/* The kernels' copy of a resolved problem (params.cu). */
void qf_cuda_make_problem(const qkvfuse_plan *plan, const qf_problem *p, qf_cu_problem *P);

/* May every thread move `vec` consecutive elements as one access: D, bases
 * and strides all multiples of vec elements (eligible.cu)? */
bool qf_cuda_vector_ok(const qf_problem *p, int vec);

/* Does cache c take vectors of vec elements: its pointer and every stride of
 * its layout (block, row, chunk and chunk size) whole vectors? */
bool qf_cuda_cache_vector_ok(const qf_cache *c, int vec);

/* The 16-bit type the streaming kernel computes a call in (its T): the
 * input's, or for int32 input that of its first unquantized output (q_out,
 * k_out, v_out, then the caches; bfloat16 where every output is quantized). */
qkvfuse_dtype qf_cuda_streaming_type(const qf_problem *p);

/* Why the streaming kernel cannot serve the call (a static string), or NULL
 * where it can: 16-bit input, or int32 input with 16-bit outputs and no bias;
 * outputs of that type or a quantized q, rows and caches in aligned 8-element
 * vectors, D a multiple of 16 in [32, 512], R a multiple of 16, caches of that
 * type or quantized, no beta, not parity mode, small tables (weight_scale too)
 * readable as aligned vectors. */
const char *qf_cuda_streaming_refusal(const qf_problem *p, const qf_cu_problem *P);

/* The calls whose dtypes and cache geometry the streaming kernel has
 * compiled in (streaming.cuh: kEngine), or none. */
typedef enum qf_cuda_engine {
  QF_CUDA_ENGINE_NONE,     /* every dtype and layout read from the parameters */
  QF_CUDA_ENGINE_CALL,     /* the engine call (kEngine): vLLM's and SGLang's */
  QF_CUDA_ENGINE_CALL_F32, /* the same with a float32 cos_sin_cache (kEngine | kEngineF32): FlashInfer's RoPE */
  QF_CUDA_ENGINE_APPEND,   /* FlashInfer's fp8 append through a page table (kEngine | kEngineF32 | kEngineAppend) */
  QF_CUDA_ENGINE_APPEND_NORM, /* the same with a norm of q or k (| kEngineNorm) */
  QF_CUDA_ENGINE_DEQUANT   /* the int32 call (kEngine | kEngineRows): DequantRopeQuantKvcache's */
} qf_cuda_engine;

/* Which of those calls this is. The engine call: cos/sin from a
 * cos_sin_cache of the input's dtype (or float32: CALL_F32) by int64
 * positions, q of the input's dtype, norm weights of that dtype, and a
 * cache, if any, that is paged with whole rows (slot_lin: vLLM's [blocks,
 * block_size, Nkv, D]) and a head's D channels contiguous, int64 slots, no
 * int8 offsets, a quantized cache of int8 or fp8 e4m3 (not e5m2). The
 * append call (FlashInfer's rope_quantize_fp8_append_paged_kv_cache):
 * cos/sin from a float32 cos_sin_cache by int32 positions, q written as
 * fp8 e4m3, k and v through a page table into paged e4m3 caches (NHD or
 * HND) with a head's D channels contiguous, and no norm (APPEND_NORM: norm
 * weights of the input's dtype). The int32 call: int32 input (the streaming
 * kernel's), cos and sin given per token as rows of the outputs' dtype, q
 * of that dtype, norm weights (if any) of that dtype and a cache, if any, as
 * the engine call's. */
qf_cuda_engine qf_cuda_engine_call(const qf_problem *p, const qf_cu_problem *P);

#endif /* QKVFUSE_CUDA_BACKEND_H */
