// SPDX-License-Identifier: Apache-2.0
// What a call's tensors allow the kernels: vector access (alignment and
// strides), the streaming kernel's preconditions, and the engine call.
#include <stdint.h>

#include "cuda/backend.h"

static bool aligned(const void *ptr, int64_t bytes) { return ((uintptr_t)ptr % (uintptr_t)bytes) == 0; }

static bool aligned16(const void *ptr) { return ptr == nullptr || aligned(ptr, 16); }

bool qf_cuda_cache_vector_ok(const qf_cache *c, int vec) {
  const int64_t es = (int64_t)qkvfuse_dtype_size(c->dtype);
  return aligned(c->data, vec * es) && c->s_block % vec == 0 && c->s_row % vec == 0 && c->s_chunk % vec == 0 &&
         c->chunk % vec == 0;
}

bool qf_cuda_vector_ok(const qf_problem *p, int vec) {
  if (p->D % vec) return false;
  const qf_mat *mats[] = {&p->in[0], &p->in[1], &p->in[2], &p->q_out, &p->k_out, &p->v_out, &p->q_copy};
  for (const qf_mat *m : mats) {
    if (!m->data) continue;
    const int64_t es = (int64_t)qkvfuse_dtype_size(m->dtype);
    if (!aligned(m->data, vec * es) || (m->rows > 1 && m->ld % vec)) return false;
  }
  const qf_cache *caches[] = {&p->k_cache, &p->v_cache};
  for (const qf_cache *c : caches)
    if (c->data && !qf_cuda_cache_vector_ok(c, vec)) return false;
  return true;
}

qkvfuse_dtype qf_cuda_streaming_type(const qf_problem *p) {
  const qkvfuse_dtype in = p->in[0].dtype;
  if (in != QKVFUSE_DTYPE_INT32) return in;
  const qf_mat *outs[] = {p->desc->q_quant != QKVFUSE_QUANT_NONE ? nullptr : &p->q_out, &p->k_out, &p->v_out};
  for (const qf_mat *m : outs)
    if (m && m->data) return m->dtype;
  const qf_cache *caches[] = {&p->k_cache, &p->v_cache};
  const qkvfuse_quant_mode quant[] = {p->desc->k_quant, p->desc->v_quant};
  for (int i = 0; i < 2; i++)
    if (caches[i]->data && quant[i] == QKVFUSE_QUANT_NONE) return caches[i]->dtype;
  return QKVFUSE_DTYPE_BFLOAT16; /* every output quantized */
}

const char *qf_cuda_streaming_refusal(const qf_problem *p, const qf_cu_problem *P) {
  const qkvfuse_dtype in = p->in[0].dtype, io = qf_cuda_streaming_type(p);
  if (in != QKVFUSE_DTYPE_BFLOAT16 && in != QKVFUSE_DTYPE_FLOAT16 && in != QKVFUSE_DTYPE_INT32)
    return "input not bfloat16, float16 or int32";
  if (io != QKVFUSE_DTYPE_BFLOAT16 && io != QKVFUSE_DTYPE_FLOAT16) return "int32 input with float32 outputs";
  if (P->parity) return "unfused-parity rounding";
  if (p->q_copy.data) return "q written twice (q_copy)";
  if (p->D % 16 || p->D < 32 || p->D > 512 || p->R % 16) return "D not a multiple of 16 in [32, 512] or R not of 16";
  if (!qf_cuda_vector_ok(p, 8)) return "rows or caches not in aligned 8-element vectors";
  /* a quantized q_out is of the fp8 dtype its mode names (validate.c) */
  const qf_mat *outs[] = {p->desc->q_quant != QKVFUSE_QUANT_NONE ? nullptr : &p->q_out, &p->k_out, &p->v_out};
  for (const qf_mat *m : outs)
    if (m && m->data && m->dtype != io) return "an output of another dtype than the input (int32: than its first output)";
  if (p->q_beta.data || p->k_beta.data) return "beta";
  if (p->bias.data) return "int32 dequantization with a bias";
  const qf_cache *caches[] = {&p->k_cache, &p->v_cache};
  const qkvfuse_quant_mode quant[] = {p->desc->k_quant, p->desc->v_quant};
  for (int i = 0; i < 2; i++)
    if (caches[i]->data && quant[i] == QKVFUSE_QUANT_NONE && caches[i]->dtype != io)
      return "a cache of another dtype than the input, not quantized";
  /* per-channel scales and offsets are read as vectors; per-head and per-tensor ones one at a time */
  const bool k_per_channel = P->k_scale_pc != 0, v_per_channel = P->v_scale_pc != 0;
  const void *tables[] = {p->q_gamma.data, p->k_gamma.data, p->cos_sin_cache.data, p->cos.data, p->sin.data,
                          p->weight_scale.data,
                          k_per_channel ? p->k_scale.data : nullptr, v_per_channel ? p->v_scale.data : nullptr,
                          k_per_channel ? p->k_offset.data : nullptr, v_per_channel ? p->v_offset.data : nullptr};
  for (const void *t : tables)
    if (!aligned16(t)) return "a norm weight, cos/sin, weight_scale or per-channel scale table not 16-byte aligned";
  const qf_mat *rows[] = {&p->cos_sin_cache, &p->cos, &p->sin};
  for (const qf_mat *m : rows)
    if (m->data && m->rows > 1 && m->ld % 8) return "cos/sin rows not whole 8-element vectors";
  return nullptr;
}

/* Whether each cache's heads hold their D channels contiguous (the calls
 * qf_cuda_engine_call names all need it). */
static bool heads_contiguous(const qf_problem *p) {
  const qf_cache *caches[] = {&p->k_cache, &p->v_cache};
  for (const qf_cache *c : caches)
    if (c->data && c->chunk != p->D) return false;
  return true;
}

/* The engine call's cache, where the call has one (backend.h): paged with
 * whole rows addressed by int64 slots, int8 or fp8 e4m3 without offsets. */
static bool engine_cache(const qf_problem *p, const qf_cu_problem *P) {
  const qkvfuse_desc *d = p->desc;
  /* the engine call's caches: int8 or fp8 e4m3 (e5m2 would add a third quantizer to every store) */
  if (d->k_quant == QKVFUSE_QUANT_FP8_E5M2 || d->v_quant == QKVFUSE_QUANT_FP8_E5M2) return false;
  if (d->cache_layout == QKVFUSE_CACHE_NONE) return true;
  return d->cache_addressing == QKVFUSE_ADDRESS_SLOTS && d->cache_layout != QKVFUSE_CACHE_CONTIGUOUS && P->slot_lin &&
         p->slot_mapping.dtype == QKVFUSE_DTYPE_INT64 && !p->k_offset.data && !p->v_offset.data;
}

qf_cuda_engine qf_cuda_engine_call(const qf_problem *p, const qf_cu_problem *P) {
  const qkvfuse_desc *d = p->desc;
  const qkvfuse_dtype in = p->in[0].dtype;
  if (in == QKVFUSE_DTYPE_INT32) { /* the int32 call: its tables of the outputs' dtype */
    const qkvfuse_dtype io = qf_cuda_streaming_type(p);
    const bool tables = p->cos.dtype == io && p->sin.dtype == io && (!p->q_gamma.data || p->q_gamma.dtype == io) &&
                        (!p->k_gamma.data || p->k_gamma.dtype == io);
    return d->rope_source == QKVFUSE_ROPE_COS_SIN && tables && d->q_quant == QKVFUSE_QUANT_NONE &&
                   heads_contiguous(p) && engine_cache(p, P)
               ? QF_CUDA_ENGINE_DEQUANT
               : QF_CUDA_ENGINE_NONE;
  }
  if (d->rope_source != QKVFUSE_ROPE_COS_SIN_CACHE || (p->q_gamma.data && p->q_gamma.dtype != in) ||
      (p->k_gamma.data && p->k_gamma.dtype != in))
    return QF_CUDA_ENGINE_NONE;
  if (!heads_contiguous(p)) return QF_CUDA_ENGINE_NONE;
  if (d->q_quant == QKVFUSE_QUANT_FP8_E4M3) {
    /* the append call: every quantizer e4m3, one k and one v scale, int32 positions and page table */
    const qf_page_table *pt = &p->page_table;
    const bool pt_i32 = pt->indptr_dtype == QKVFUSE_DTYPE_INT32 && pt->indices_dtype == QKVFUSE_DTYPE_INT32 &&
                        pt->batch_dtype == QKVFUSE_DTYPE_INT32 && pt->pos_dtype == QKVFUSE_DTYPE_INT32;
    if (!(p->k_cache.data && p->v_cache.data && d->cache_addressing == QKVFUSE_ADDRESS_PAGE_TABLE && pt_i32 &&
          d->k_quant == QKVFUSE_QUANT_FP8_E4M3 && d->v_quant == QKVFUSE_QUANT_FP8_E4M3 &&
          p->positions.dtype == QKVFUSE_DTYPE_INT32 && p->cos_sin_cache.dtype == QKVFUSE_DTYPE_FLOAT32 &&
          !P->k_scale_pc && !P->k_scale_ph && !P->v_scale_pc && !P->v_scale_ph))
      return QF_CUDA_ENGINE_NONE;
    return d->q_norm || d->k_norm ? QF_CUDA_ENGINE_APPEND_NORM : QF_CUDA_ENGINE_APPEND;
  }
  if (d->q_quant != QKVFUSE_QUANT_NONE) return QF_CUDA_ENGINE_NONE; /* the engine call stores q of the input's dtype */
  if (p->positions.dtype != QKVFUSE_DTYPE_INT64 || !engine_cache(p, P)) return QF_CUDA_ENGINE_NONE;
  return p->cos_sin_cache.dtype == in                     ? QF_CUDA_ENGINE_CALL
         : p->cos_sin_cache.dtype == QKVFUSE_DTYPE_FLOAT32 ? QF_CUDA_ENGINE_CALL_F32
                                                           : QF_CUDA_ENGINE_NONE;
}
