/* SPDX-License-Identifier: Apache-2.0 */
/* The preset table: numbers from each model's config.json. */
#include "presets.h"

#include <string.h>

#define NO_SCALING QKVFUSE_ROPE_SCALING_INIT

/* clang-format off */
static const cli_preset presets[] = {
    /* name          checkpoint                           Nq  Nkv   D    R   pairs                      theta
       scaling                                                                  qk_norm 1+g  eps        context */
    /* Llama 3.1 8B: GQA 32/8, rope_scaling llama3 (factor 8, low 1, high 4, original 8192) */
    {"llama-3-8b",  "meta-llama/Llama-3.1-8B",           32,  8, 128, 128, QKVFUSE_ROPE_NEOX,        500000.0,
     {QKVFUSE_ROPE_SCALING_LLAMA3, 8.0, 8192, 1.0, 4.0, 32.0, 1.0, 1.0, 1.0},  0,      0,   1e-5f,     131072},
    /* Qwen3 8B: per-head q_norm / k_norm before RoPE */
    {"qwen3-8b",    "Qwen/Qwen3-8B",                     32,  8, 128, 128, QKVFUSE_ROPE_NEOX,        1000000.0,
     NO_SCALING,                                                                1,      0,   1e-6f,     40960},
    /* GLM-4 9B: 2 kv heads, RoPE on half of each head, interleaved pairs */
    {"glm-4-9b",    "THUDM/glm-4-9b-chat",               32,  2, 128,  64, QKVFUSE_ROPE_INTERLEAVED, 10000.0,
     NO_SCALING,                                                                0,      0,   1.5625e-7f, 131072},
    /* Phi-3 mini 4k: MHA, head dim 96 */
    {"phi-3-mini",  "microsoft/Phi-3-mini-4k-instruct",  32, 32,  96,  96, QKVFUSE_ROPE_NEOX,        10000.0,
     NO_SCALING,                                                                0,      0,   1e-5f,     4096},
    /* Gemma 2 9B: head dim 256 */
    {"gemma-2-9b",  "google/gemma-2-9b",                 16,  8, 256, 256, QKVFUSE_ROPE_NEOX,        10000.0,
     NO_SCALING,                                                                0,      0,   1e-6f,     8192},
    /* Gemma 3 12B, global-attention layers: q/k norm with (1 + g) weights, linear RoPE scaling 8 */
    {"gemma-3-12b", "google/gemma-3-12b-pt",             16,  8, 256, 256, QKVFUSE_ROPE_NEOX,        1000000.0,
     {QKVFUSE_ROPE_SCALING_LINEAR, 8.0, 0, 1.0, 4.0, 32.0, 1.0, 1.0, 1.0},     1,      1,   1e-6f,     131072},
};
/* clang-format on */

const cli_preset *cli_presets(int *count) {
  *count = (int)(sizeof presets / sizeof presets[0]);
  return presets;
}

const cli_preset *cli_preset_find(const char *name) {
  for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++)
    if (strcmp(presets[i].name, name) == 0) return &presets[i];
  return NULL;
}

const char *cli_preset_names(void) {
  static char names[256];
  if (names[0] == '\0') {
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++) {
      if (i) strcat(names, ", ");
      strcat(names, presets[i].name);
    }
  }
  return names;
}
