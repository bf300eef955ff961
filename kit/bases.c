/* SPDX-License-Identifier: Apache-2.0 */
#include "bases.h"

void tk_base_spec(int which, tk_spec *s) {
  tk_spec_default(s);
  switch (which) {
    case TK_BASE_A:
      s->Nq = 4, s->Nkv = 2, s->D = 64, s->R = 32, s->T = 5;
      s->qkv_dt = s->q_out_dt = QKVFUSE_DTYPE_FLOAT16;
      s->k_out_dt = QKVFUSE_DTYPE_FLOAT32, s->v_out_dt = QKVFUSE_DTYPE_FLOAT16;
      s->q_norm = s->k_norm = 1;
      s->q_beta_dt = s->k_beta_dt = QKVFUSE_DTYPE_BFLOAT16;
      s->rope_source = QKVFUSE_ROPE_COS_SIN_CACHE, s->rope_dt = QKVFUSE_DTYPE_FLOAT16, s->max_pos = 16, s->pos_hi = 15;
      s->layout = QKVFUSE_CACHE_PAGED, s->block_size = 4, s->blocks = 3, s->slot_dt = QKVFUSE_DTYPE_INT32;
      s->k_quant = QKVFUSE_QUANT_INT8_ASYM, s->k_scale_kind = 2;
      s->v_quant = QKVFUSE_QUANT_FP8_E4M3, s->v_scale_kind = 0;
      s->qkv_pad = 8, s->out_pad = 8, s->error_flags = 1;
      break;
    case TK_BASE_B:
      s->Nq = 2, s->Nkv = 2, s->D = 32, s->R = 32;
      s->qkv_dt = QKVFUSE_DTYPE_INT32, s->act_scale = 1, s->bias_dt = QKVFUSE_DTYPE_BFLOAT16, s->acc_bits = 16;
      s->rope_source = QKVFUSE_ROPE_COS_SIN, s->rope_dt = QKVFUSE_DTYPE_FLOAT16;
      s->q_out_dt = QKVFUSE_DTYPE_FLOAT16, s->v_out_dt = QKVFUSE_DTYPE_FLOAT32;
      s->layout = QKVFUSE_CACHE_CONTIGUOUS, s->in3d = 1, s->B = 2, s->S = 3, s->cache_batch = 3, s->max_seq = 8;
      s->k_cache_dt = QKVFUSE_DTYPE_FLOAT32, s->v_quant = QKVFUSE_QUANT_INT8_SYM, s->v_scale_kind = 3;
      s->rounding = QKVFUSE_ROUNDING_UNFUSED_PARITY, s->error_flags = 1, s->out_pad = 4;
      break;
    case TK_BASE_C:
      s->Nq = 8, s->Nkv = 2, s->D = 128, s->R = 128, s->T = 7;
      s->qkv_dt = s->q_out_dt = s->k_out_dt = QKVFUSE_DTYPE_BFLOAT16, s->in_place_q = s->in_place_k = 1;
      s->q_norm = s->k_norm = 1, s->gamma_offset = 1, s->q_gamma_dt = s->k_gamma_dt = QKVFUSE_DTYPE_BFLOAT16;
      s->rope_source = QKVFUSE_ROPE_COMPUTED, s->rope_style = QKVFUSE_ROPE_INTERLEAVED, s->pos_dt = QKVFUSE_DTYPE_INT32;
      s->pos_hi = 10000;
      s->scaling.type = QKVFUSE_ROPE_SCALING_YARN, s->scaling.factor = 4, s->scaling.original_max_position = 4096;
      s->layout = QKVFUSE_CACHE_NZ, s->block_size = 16, s->blocks = 2;
      s->k_quant = s->v_quant = QKVFUSE_QUANT_FP8_E4M3, s->k_scale_kind = 1, s->v_scale_kind = 0, s->kv_interleaved = 1;
      s->qkv_pad = 16;
      break;
    case TK_BASE_E:
      s->Nq = 8, s->Nkv = 2, s->D = 64, s->R = 64, s->T = 6;
      s->qkv_dt = s->q_out_dt = QKVFUSE_DTYPE_BFLOAT16;
      s->q_norm = s->k_norm = 1, s->q_gamma_dt = s->k_gamma_dt = QKVFUSE_DTYPE_BFLOAT16;
      s->rope_source = QKVFUSE_ROPE_COS_SIN_CACHE, s->rope_dt = QKVFUSE_DTYPE_BFLOAT16, s->max_pos = 16, s->pos_hi = 15;
      s->pos_dt = s->slot_dt = QKVFUSE_DTYPE_INT64;
      s->layout = QKVFUSE_CACHE_PAGED, s->block_size = 4, s->blocks = 3;
      s->k_quant = QKVFUSE_QUANT_INT8_SYM, s->k_scale_kind = 2;
      s->v_quant = QKVFUSE_QUANT_FP8_E4M3, s->v_scale_kind = 0;
      s->error_flags = 1;
      break;
    case TK_BASE_G:
      tk_base_spec(TK_BASE_E, s);
      s->k_quant = QKVFUSE_QUANT_FP8_E5M2, s->k_scale_kind = 4;
      s->v_quant = QKVFUSE_QUANT_INT8_SYM, s->v_scale_kind = 4;
      break;
    case TK_BASE_F:
      s->Nq = 4, s->Nkv = 2, s->D = 64, s->R = 64, s->T = 5;
      s->qkv_dt = s->k_out_dt = s->v_out_dt = QKVFUSE_DTYPE_BFLOAT16;
      s->q_quant = QKVFUSE_QUANT_FP8_E5M2, s->q_scale_kind = 0;
      s->q_norm = s->k_norm = 1, s->q_gamma_dt = s->k_gamma_dt = QKVFUSE_DTYPE_BFLOAT16;
      s->rope_source = QKVFUSE_ROPE_COS_SIN_CACHE, s->rope_dt = QKVFUSE_DTYPE_BFLOAT16, s->max_pos = 16, s->pos_hi = 15;
      s->layout = QKVFUSE_CACHE_PAGED_HND, s->block_size = 4, s->blocks = 3;
      s->k_quant = QKVFUSE_QUANT_FP8_E5M2, s->k_scale_kind = 4;
      s->v_quant = QKVFUSE_QUANT_INT8_ASYM, s->v_scale_kind = 4;
      s->error_flags = 1;
      break;
    case TK_BASE_P:
      s->Nq = 4, s->Nkv = 2, s->D = 32, s->R = 32, s->T = 6;
      s->qkv_dt = s->q_out_dt = s->k_out_dt = QKVFUSE_DTYPE_BFLOAT16;
      s->q_norm = s->k_norm = 1, s->q_gamma_dt = s->k_gamma_dt = QKVFUSE_DTYPE_BFLOAT16;
      s->rope_source = QKVFUSE_ROPE_COS_SIN_CACHE, s->rope_dt = QKVFUSE_DTYPE_BFLOAT16, s->max_pos = 16, s->pos_hi = 15;
      s->layout = QKVFUSE_CACHE_PAGED_HND, s->block_size = 4, s->addressing = QKVFUSE_ADDRESS_PAGE_TABLE;
      s->pt_batch = 3, s->pt_prefix = 0, s->pt_interleave = 1;
      s->pt_dt[0] = s->pt_dt[2] = QKVFUSE_DTYPE_INT32, s->pt_dt[1] = s->pt_dt[3] = QKVFUSE_DTYPE_INT64;
      s->k_quant = QKVFUSE_QUANT_INT8_SYM, s->k_scale_kind = 0, s->v_cache_dt = QKVFUSE_DTYPE_BFLOAT16;
      s->error_flags = 1;
      break;
    case TK_BASE_I:
      s->Nq = 4, s->Nkv = 2, s->D = 64, s->R = 64, s->T = 9;
      s->qkv_dt = QKVFUSE_DTYPE_INT32, s->act_scale = 1, s->acc_bits = 16;
      s->q_out_dt = QKVFUSE_DTYPE_BFLOAT16;
      s->k_norm = 1, s->k_gamma_dt = QKVFUSE_DTYPE_BFLOAT16;
      s->rope_source = QKVFUSE_ROPE_COS_SIN, s->rope_dt = QKVFUSE_DTYPE_BFLOAT16;
      s->layout = QKVFUSE_CACHE_PAGED, s->block_size = 4, s->blocks = 4, s->slot_dt = QKVFUSE_DTYPE_INT64;
      s->k_quant = s->v_quant = QKVFUSE_QUANT_INT8_SYM, s->k_scale_kind = s->v_scale_kind = 2;
      s->error_flags = 1;
      break;
    default:
      s->Nq = 1, s->Nkv = 1, s->D = 16, s->T = 3;
      break;
  }
  tk_spec_fixup(s);
}
