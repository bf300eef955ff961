/* SPDX-License-Identifier: Apache-2.0 */
/* Prints sizeof and offsetof of the public structs as key=value lines, so
 * the Python binding's ctypes mirror (qkvfuse/_capi.py) is checked against
 * the compiler's layout (tests/test_api.py). */
#include <stddef.h>
#include <stdio.h>

#include "qkvfuse.h"

#define SIZE(s) printf("sizeof_%s=%zu\n", #s, sizeof(qkvfuse_##s))
#define OFF(s, f) printf("%s.%s=%zu\n", #s, #f, offsetof(qkvfuse_##s, f))

int main(void) {
  SIZE(tensor);
  OFF(tensor, data); OFF(tensor, dtype); OFF(tensor, device_type); OFF(tensor, device_id);
  OFF(tensor, ndim); OFF(tensor, shape); OFF(tensor, strides);
  SIZE(rope_scaling);
  OFF(rope_scaling, type); OFF(rope_scaling, factor); OFF(rope_scaling, original_max_position);
  OFF(rope_scaling, low_freq_factor); OFF(rope_scaling, high_freq_factor); OFF(rope_scaling, beta_fast);
  OFF(rope_scaling, beta_slow); OFF(rope_scaling, extrapolation_factor); OFF(rope_scaling, attn_factor);
  SIZE(desc);
  OFF(desc, struct_size); OFF(desc, version); OFF(desc, num_q_heads); OFF(desc, num_kv_heads);
  OFF(desc, head_dim); OFF(desc, rotary_dim); OFF(desc, device_type); OFF(desc, device_id);
  OFF(desc, backend); OFF(desc, num_threads); OFF(desc, q_norm); OFF(desc, k_norm); OFF(desc, eps);
  OFF(desc, gamma_offset); OFF(desc, rope_source); OFF(desc, rope_style); OFF(desc, rope_theta);
  OFF(desc, rope_scaling); OFF(desc, cache_layout); OFF(desc, k_quant); OFF(desc, v_quant); OFF(desc, rounding);
  OFF(desc, q_quant); OFF(desc, cache_addressing);
  SIZE(args);
  OFF(args, struct_size); OFF(args, version); OFF(args, qkv); OFF(args, weight_scale); OFF(args, act_scale);
  OFF(args, bias); OFF(args, q_gamma); OFF(args, k_gamma); OFF(args, q_beta); OFF(args, k_beta);
  OFF(args, positions); OFF(args, cos_sin_cache); OFF(args, cos); OFF(args, sin); OFF(args, slot_mapping);
  OFF(args, k_scale); OFF(args, v_scale); OFF(args, k_offset); OFF(args, v_offset); OFF(args, q_out);
  OFF(args, k_out); OFF(args, v_out); OFF(args, k_cache); OFF(args, v_cache); OFF(args, error_flags);
  OFF(args, q); OFF(args, k); OFF(args, v); OFF(args, q_scale);
  OFF(args, kv_indptr); OFF(args, kv_indices); OFF(args, batch_indices); OFF(args, kv_positions);
  SIZE(named_options);
  OFF(named_options, struct_size); OFF(named_options, rounding); OFF(named_options, strict);
  return 0;
}
