/* SPDX-License-Identifier: Apache-2.0 */
/* examples/quickstart.c: a Qwen3-style attention prologue on the CPU (q/k RMSNorm, RoPE from a cos/sin
 * cache, k and v into a paged cache) in one qkvfuse_run. cc quickstart.c $(pkg-config --cflags --libs qkvfuse) -lm */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <qkvfuse.h>

enum { T = 4, NQ = 4, NKV = 2, D = 64, H = (NQ + 2 * NKV) * D, BLOCKS = 2, BLOCK = 8, MAX_POS = 256 };
static float qkv[T][H], norm_w[D], cos_sin[MAX_POS][D], q[T][NQ][D], k_cache[BLOCKS][BLOCK][NKV][D],
    v_cache[BLOCKS][BLOCK][NKV][D];
static int64_t positions[T], slots[T];

int main(void) {
  for (int t = 0; t < T; t++) {
    positions[t] = 100 + t; /* the tokens' positions in their sequence */
    slots[t] = BLOCK + t;   /* cache rows: block 1, rows 0..T-1 */
    for (int i = 0; i < H; i++) qkv[t][i] = sinf(0.37f * (float)(t * H + i)); /* the QKV projection's output */
  }
  for (int d = 0; d < D; d++) norm_w[d] = 1.0f;

  qkvfuse_tensor t_qkv, t_w, t_cs, t_pos, t_slots, t_q, t_kc, t_vc; /* DLPack-style descriptors */
  qkvfuse_tensor_init(&t_qkv, qkv, QKVFUSE_DTYPE_FLOAT32, 2, (const int64_t[]){T, H});
  qkvfuse_tensor_init(&t_w, norm_w, QKVFUSE_DTYPE_FLOAT32, 1, (const int64_t[]){D});
  qkvfuse_tensor_init(&t_cs, cos_sin, QKVFUSE_DTYPE_FLOAT32, 2, (const int64_t[]){MAX_POS, D});
  qkvfuse_tensor_init(&t_pos, positions, QKVFUSE_DTYPE_INT64, 1, (const int64_t[]){T});
  qkvfuse_tensor_init(&t_slots, slots, QKVFUSE_DTYPE_INT64, 1, (const int64_t[]){T});
  qkvfuse_tensor_init(&t_q, q, QKVFUSE_DTYPE_FLOAT32, 2, (const int64_t[]){T, NQ * D});
  qkvfuse_tensor_init(&t_kc, k_cache, QKVFUSE_DTYPE_FLOAT32, 4, (const int64_t[]){BLOCKS, BLOCK, NKV, D});
  qkvfuse_tensor_init(&t_vc, v_cache, QKVFUSE_DTYPE_FLOAT32, 4, (const int64_t[]){BLOCKS, BLOCK, NKV, D});
  qkvfuse_rope_scaling no_scaling = QKVFUSE_ROPE_SCALING_INIT;
  qkvfuse_build_cos_sin_cache(1e6, &no_scaling, &t_cs); /* theta = 1e6, as Qwen3 */

  qkvfuse_desc desc = QKVFUSE_DESC_INIT; /* the layer's configuration: made into a plan once */
  desc.num_q_heads = NQ; desc.num_kv_heads = NKV; desc.head_dim = D; desc.rotary_dim = D;
  desc.q_norm = desc.k_norm = 1;
  desc.rope_source = QKVFUSE_ROPE_COS_SIN_CACHE;
  desc.cache_layout = QKVFUSE_CACHE_PAGED; /* [blocks, block_size, Nkv, D] */
  qkvfuse_plan *plan;
  if (qkvfuse_plan_create(&desc, &plan) != QKVFUSE_SUCCESS) {
    fprintf(stderr, "%s\n", qkvfuse_last_error()); /* names the bad field, what was expected and given */
    return 1;
  }

  qkvfuse_args args = QKVFUSE_ARGS_INIT; /* this call's tensors */
  args.qkv = &t_qkv; args.q_gamma = &t_w; args.k_gamma = &t_w; args.positions = &t_pos; args.cos_sin_cache = &t_cs;
  args.slot_mapping = &t_slots; args.q_out = &t_q; args.k_cache = &t_kc; args.v_cache = &t_vc;
  if (qkvfuse_run(plan, &args, /*stream*/ NULL) != QKVFUSE_SUCCESS) {
    fprintf(stderr, "%s\n", qkvfuse_last_error());
    return 1;
  }
  printf("%s backend: q [%d, %d], k and v in cache block 1\n", qkvfuse_plan_backend_name(plan), T, NQ * D);
  qkvfuse_plan_destroy(plan);

  /* RMSNorm with weights 1 leaves every head with RMS 1, and RoPE is a rotation: so does every output head.
   * v is written to the cache as it came. */
  int ok = 1;
  for (int t = 0; t < T; t++) {
    for (int h = 0; h < NQ + NKV; h++) {
      const float *x = h < NQ ? q[t][h] : k_cache[1][t][h - NQ];
      double ss = 0;
      for (int d = 0; d < D; d++) ss += (double)x[d] * x[d];
      ok &= fabs(sqrt(ss / D) - 1.0) < 1e-5;
    }
    ok &= memcmp(v_cache[1][t], &qkv[t][(NQ + NKV) * D], sizeof v_cache[1][t]) == 0;
  }
  printf("%s\n", ok ? "ok: every q and k head has RMS 1, v is in the cache" : "FAILED");
  return ok ? 0 : 1;
}
