// SPDX-License-Identifier: Apache-2.0
// The resolved problem (problem.h) copied into the form the kernels index
// (params.h: qf_cu_problem); each kernel's schedule is choose.cu's.
#include <stdint.h>
#include <string.h>

#include "cuda/backend.h"
#include "cuda/state.h"

void qf_cuda_make_problem(const qkvfuse_plan *plan, const qf_problem *p, qf_cu_problem *P) {
  const qkvfuse_desc *d = p->desc;
  const qf_cuda_state state = qf_cuda_state_of(plan);
  memset(P, 0, sizeof *P);
  const bool write_v = p->v_out.data || d->cache_layout != QKVFUSE_CACHE_NONE;
  P->T = p->T;
  P->S = p->S;
  P->Nq = (int32_t)p->Nq;
  P->Nkv = (int32_t)p->Nkv;
  P->D = (int32_t)p->D;
  P->R = (int32_t)p->R;
  P->heads_per_token = (int32_t)(p->Nq + p->Nkv + (write_v ? p->Nkv : 0));
  P->q_norm = d->q_norm;
  P->k_norm = d->k_norm;
  P->gamma_offset = d->gamma_offset;
  P->parity = d->rounding == QKVFUSE_ROUNDING_UNFUSED_PARITY;
  P->rope_source = d->rope_source;
  P->interleaved = d->rope_style == QKVFUSE_ROPE_INTERLEAVED;
  P->layout = d->cache_layout;
  P->eps = d->eps;
  P->mscale = (float)p->mscale;
  P->io_dtype = p->io_dtype;
  auto mat = [](const qf_mat &m) { return qf_cu_mat{m.data, m.ld, (int32_t)(m.data ? m.dtype : 0)}; };
  auto vec = [](const qf_vec &v) { return qf_cu_vec{v.data, (int32_t)(v.data ? v.dtype : 0), v.n > 1}; };
  for (int i = 0; i < 3; i++) P->in[i] = mat(p->in[i]);
  P->weight_scale = (const float *)p->weight_scale.data;
  P->act_scale = (const float *)p->act_scale.data;
  P->bias = vec(p->bias);
  P->q_gamma = vec(p->q_gamma);
  P->k_gamma = vec(p->k_gamma);
  P->q_beta = vec(p->q_beta);
  P->k_beta = vec(p->k_beta);
  P->positions = vec(p->positions);
  P->cos_sin_cache = mat(p->cos_sin_cache);
  P->max_pos = d->rope_source == QKVFUSE_ROPE_COMPUTED ? ((int64_t)1 << 31) : p->cos_sin_cache.rows;
  P->cos = mat(p->cos);
  P->sin = mat(p->sin);
  P->turns = state.turns;
  P->slot_mapping = vec(p->slot_mapping);
  P->page_table = d->cache_addressing == QKVFUSE_ADDRESS_PAGE_TABLE;
  P->pt = p->page_table;
  P->k_scale = (const float *)p->k_scale.data;
  P->v_scale = (const float *)p->v_scale.data;
  P->k_offset = (const float *)p->k_offset.data;
  P->v_offset = (const float *)p->v_offset.data;
  /* problem.h: k_scale_group is 1 per channel, D per kv head */
  P->k_scale_pc = p->k_scale.n > 1 && p->k_scale_group == 1;
  P->v_scale_pc = p->v_scale.n > 1 && p->v_scale_group == 1;
  P->k_scale_ph = p->k_scale.n > 1 && p->k_scale_group > 1;
  P->v_scale_ph = p->v_scale.n > 1 && p->v_scale_group > 1;
  P->q_quant = d->q_quant;
  P->q_scale = (const float *)p->q_scale.data;
  P->q_out = mat(p->q_out);
  P->k_out = mat(p->k_out);
  P->v_out = mat(p->v_out);
  P->q_copy = mat(p->q_copy);
  auto cache = [](const qf_cache &c, qkvfuse_quant_mode q) {
    return qf_cu_cache{c.data, c.s_block, c.s_row, c.s_chunk, c.chunk, c.blocks, c.block_size,
                       (int32_t)(c.data ? c.dtype : 0), (int32_t)q};
  };
  P->k_cache = cache(p->k_cache, d->k_quant);
  P->v_cache = cache(p->v_cache, d->v_quant);
  if (p->k_cache.data) {
    const qf_cache &k = p->k_cache, &v = p->v_cache;
    const int64_t starts = k.block_size - p->S + 1; /* contiguous: start indices 0 .. block_size - S */
    P->slot_lim = d->cache_layout == QKVFUSE_CACHE_CONTIGUOUS ? (starts > 0 ? starts : 0) : k.blocks * k.block_size;
    P->slot_lin = d->cache_layout != QKVFUSE_CACHE_CONTIGUOUS && k.s_block == k.block_size * k.s_row &&
                  v.s_block == v.block_size * v.s_row;
  }
  P->error_flags = p->error_flags;
}
