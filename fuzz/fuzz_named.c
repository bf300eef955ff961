/* SPDX-License-Identifier: Apache-2.0 */
/* libFuzzer target: the three named operators (split_qkv_rmsnorm_rope,
 * qkv_rmsnorm_rope_cache, dequant_rope_quant_kvcache) with their own
 * arguments mutated too; judged against the core call docs/API.md maps each
 * to. The invariant is fz.h's. */
#include "fz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) { return fz_one_input(data, size, -1); }
