/* SPDX-License-Identifier: Apache-2.0 */
/* 64-bit indexing on CUDA: a call whose input has T*H > 2^31 elements and
 * whose caches need element offsets > 2^31.
 *
 * qkv [T = 45M, H = 48] bf16 (4.3 GB, 2.16e9 elements; D = 16, the general
 * kernel) or [T = 24M, H = 96] (D = 32, the streaming kernel), q/k RMSNorm, RoPE
 * from a cos_sin_cache, k into a bf16 paged cache and v into an int8 paged
 * cache of 136M slots (offsets up to 2.2e9 elements), slots a bijection
 * t -> t*P mod slots (some -1). Checked on samples against the CPU reference
 * run on just those tokens: the last tokens, the tokens whose input offset
 * crosses 2^31, tokens written to slots above 2^27, random tokens, and
 * unmapped slots (must keep their poison).
 *   test_cuda_big [--head-dim 16|32] [--tokens T]
 * (exit 77 without a GPU; needs ~13 GB (D = 16) or ~22 GB (D = 32) of GPU memory) */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fp.h"
#include "harness.h"

enum { NQ = 1, NKV = 1, BS = 16, MAX_POS = 4096, SAMPLES = 6000 };
static int D = 16, H = 48; /* head dim (--head-dim), H = (NQ + 2 * NKV) * D */
static const int64_t kBlocks = 8500000; /* 136M slots */
static const uint64_t kP = 2654435761u; /* prime > slots: t -> t*P mod slots is a bijection */
static const uint8_t kPoisonK = 0x5A, kPoisonV = 0xA5;

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint64_t next_u64(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return rng_state;
}
static uint16_t rand_bf16(void) { /* a random float in (-2, 2), non-zero, truncated to bf16 */
  const float f = ((float)(next_u64() >> 40) / 16777216.0f) * 3.98f - 1.99f + 1e-3f;
  uint32_t u;
  memcpy(&u, &f, 4);
  return (uint16_t)(u >> 16);
}

static int failed;
#define FAILF(...) (failed++ < 20 ? (printf("FAIL test_cuda_big: " __VA_ARGS__), printf("\n")) : 0)
#define CK(call)                                                                                    \
  do {                                                                                              \
    cudaError_t e_ = (call);                                                                        \
    if (e_ != cudaSuccess) {                                                                        \
      printf("FAIL test_cuda_big: %s: %s\n", #call, cudaGetErrorString(e_));                        \
      return 1;                                                                                     \
    }                                                                                               \
  } while (0)

static qkvfuse_tensor tensor(void *data, qkvfuse_dtype dt, int nd, const int64_t *shape, qkvfuse_device_type dev) {
  qkvfuse_tensor t;
  qkvfuse_tensor_init(&t, data, dt, nd, shape);
  t.device_type = dev;
  return t;
}

/* modular inverse of a mod m (gcd 1) */
static int64_t inv_mod(int64_t a, int64_t m) {
  int64_t t = 0, nt = 1, r = m, nr = a % m;
  while (nr) {
    const int64_t q = r / nr, tt = t - q * nt, rr = r - q * nr;
    t = nt, nt = tt, r = nr, nr = rr;
  }
  return t < 0 ? t + m : t;
}

int main(int argc, char **argv) {
  if (tk_device_for_backend(QKVFUSE_BACKEND_CUDA) == NULL) {
    printf("test_cuda_big: no CUDA device: skipped\n");
    return TK_SKIP;
  }
  D = (int)tk_arg_u64(argc, argv, "--head-dim", NULL, 16);
  if (D != 16 && D != 32) {
    printf("test_cuda_big: --head-dim 16 or 32\n");
    return 2;
  }
  H = (NQ + 2 * NKV) * D;
  const int64_t T = (int64_t)tk_arg_u64(argc, argv, "--tokens", NULL, D == 16 ? 45000000 : 24000000);
  const int64_t NS = kBlocks * BS;
  size_t free_b = 0, total_b = 0;
  CK(cudaMemGetInfo(&free_b, &total_b));
  const size_t need = (size_t)T * H * 2 + (size_t)T * NQ * D * 2 + (size_t)NS * NKV * D * 3 + (size_t)T * 12;
  if (free_b < need + ((size_t)1 << 30)) {
    printf("test_cuda_big: needs %.1f GB of GPU memory, %.1f GB free: skipped\n", need / 1e9, free_b / 1e9);
    return TK_SKIP;
  }
  printf("test_cuda_big: T = %lld, T*H = %.3g elements (2^31 = %.3g), cache offsets up to %.3g\n", (long long)T,
         (double)T * H, 2147483648.0, (double)NS * D);

  /* host inputs */
  uint16_t *qkv = malloc((size_t)T * H * 2), gamma_q[D], gamma_k[D], *csc = malloc((size_t)MAX_POS * D * 2);
  int32_t *pos = malloc((size_t)T * 4);
  int64_t *slot = malloc((size_t)T * 8);
  float vscale = 0.02f;
  if (!qkv || !csc || !pos || !slot) {
    printf("test_cuda_big: host out of memory: skipped\n");
    return TK_SKIP;
  }
  for (int64_t i = 0; i < T * H; i++) qkv[i] = rand_bf16();
  for (int d = 0; d < D; d++) gamma_q[d] = rand_bf16(), gamma_k[d] = rand_bf16();
  for (int64_t p = 0; p < MAX_POS; p++)
    for (int i = 0; i < D / 2; i++) {
      const double a = (double)p * pow(10000.0, -2.0 * i / D);
      tk_encode(QKVFUSE_DTYPE_BFLOAT16, (uint8_t *)&csc[p * D + i], cos(a));
      tk_encode(QKVFUSE_DTYPE_BFLOAT16, (uint8_t *)&csc[p * D + D / 2 + i], sin(a));
    }
  for (int64_t t = 0; t < T; t++) {
    pos[t] = (int32_t)(next_u64() % MAX_POS);
    slot[t] = (next_u64() % 97 == 0) ? -1 : (int64_t)(((unsigned __int128)t * kP) % (uint64_t)NS);
  }

  /* device */
  void *d_qkv, *d_q, *d_kc, *d_vc, *d_pos, *d_slot, *d_gq, *d_gk, *d_csc, *d_vs;
  uint32_t *d_flags;
  CK(cudaMalloc(&d_qkv, (size_t)T * H * 2));
  CK(cudaMalloc(&d_q, (size_t)T * NQ * D * 2));
  CK(cudaMalloc(&d_kc, (size_t)NS * NKV * D * 2));
  CK(cudaMalloc(&d_vc, (size_t)NS * NKV * D));
  CK(cudaMalloc(&d_pos, (size_t)T * 4));
  CK(cudaMalloc(&d_slot, (size_t)T * 8));
  CK(cudaMalloc(&d_gq, D * 2));
  CK(cudaMalloc(&d_gk, D * 2));
  CK(cudaMalloc(&d_csc, (size_t)MAX_POS * D * 2));
  CK(cudaMalloc(&d_vs, 4));
  CK(cudaMalloc((void **)&d_flags, 4));
  CK(cudaMemcpy(d_qkv, qkv, (size_t)T * H * 2, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(d_pos, pos, (size_t)T * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(d_slot, slot, (size_t)T * 8, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(d_gq, gamma_q, D * 2, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(d_gk, gamma_k, D * 2, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(d_csc, csc, (size_t)MAX_POS * D * 2, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(d_vs, &vscale, 4, cudaMemcpyHostToDevice));
  CK(cudaMemset(d_q, 0x7B, (size_t)T * NQ * D * 2));
  CK(cudaMemset(d_kc, kPoisonK, (size_t)NS * NKV * D * 2));
  CK(cudaMemset(d_vc, kPoisonV, (size_t)NS * NKV * D));
  CK(cudaMemset(d_flags, 0, 4));

  qkvfuse_desc desc = QKVFUSE_DESC_INIT;
  desc.num_q_heads = NQ, desc.num_kv_heads = NKV, desc.head_dim = D, desc.rotary_dim = D;
  desc.q_norm = desc.k_norm = 1;
  desc.rope_source = QKVFUSE_ROPE_COS_SIN_CACHE;
  desc.cache_layout = QKVFUSE_CACHE_PAGED;
  desc.v_quant = QKVFUSE_QUANT_INT8_SYM;
  const qkvfuse_device_type CU = QKVFUSE_DEVICE_CUDA, CPU = QKVFUSE_DEVICE_CPU;
  const int64_t s_qkv[2] = {T, H}, s_q[2] = {T, NQ * D}, s_c[4] = {kBlocks, BS, NKV, D}, s_t[1] = {T}, s_d[1] = {D},
                s_csc[2] = {MAX_POS, D}, s_1[1] = {1};
  qkvfuse_tensor x = tensor(d_qkv, QKVFUSE_DTYPE_BFLOAT16, 2, s_qkv, CU), q = tensor(d_q, QKVFUSE_DTYPE_BFLOAT16, 2, s_q, CU),
                 kc = tensor(d_kc, QKVFUSE_DTYPE_BFLOAT16, 4, s_c, CU), vc = tensor(d_vc, QKVFUSE_DTYPE_INT8, 4, s_c, CU),
                 tp = tensor(d_pos, QKVFUSE_DTYPE_INT32, 1, s_t, CU), ts = tensor(d_slot, QKVFUSE_DTYPE_INT64, 1, s_t, CU),
                 gq = tensor(d_gq, QKVFUSE_DTYPE_BFLOAT16, 1, s_d, CU), gk = tensor(d_gk, QKVFUSE_DTYPE_BFLOAT16, 1, s_d, CU),
                 tc = tensor(d_csc, QKVFUSE_DTYPE_BFLOAT16, 2, s_csc, CU), vs = tensor(d_vs, QKVFUSE_DTYPE_FLOAT32, 1, s_1, CU);
  qkvfuse_args a = QKVFUSE_ARGS_INIT;
  a.qkv = &x, a.q_gamma = &gq, a.k_gamma = &gk, a.positions = &tp, a.cos_sin_cache = &tc, a.slot_mapping = &ts;
  a.v_scale = &vs, a.q_out = &q, a.k_cache = &kc, a.v_cache = &vc, a.error_flags = d_flags;
  desc.device_type = CU;
  qkvfuse_plan *plan;
  qkvfuse_status st = qkvfuse_plan_create(&desc, &plan);
  if (st == QKVFUSE_SUCCESS) st = qkvfuse_run(plan, &a, NULL);
  if (st != QKVFUSE_SUCCESS) {
    printf("FAIL test_cuda_big: %s: %s\n", qkvfuse_status_string(st), qkvfuse_last_error());
    return 1;
  }
  CK(cudaDeviceSynchronize());
  uint32_t flags = 1;
  CK(cudaMemcpy(&flags, d_flags, 4, cudaMemcpyDeviceToHost));
  if (flags) FAILF("error_flags = 0x%x on valid data", flags);

  /* samples: last tokens, the 2^31 crossing, high slots, random */
  int64_t sample[SAMPLES];
  const int64_t cross = ((int64_t)1 << 31) / H;
  int n = 0;
  for (int i = 0; i < 1500; i++) sample[n++] = T - 1 - i;
  for (int i = 0; i < 1500; i++) sample[n++] = cross - 750 + i;
  for (int i = 0; n < 4500 && i < 100000000; i++) {
    const int64_t t = (int64_t)(next_u64() % (uint64_t)T);
    if (slot[t] >= ((int64_t)1 << 27)) sample[n++] = t;
  }
  while (n < SAMPLES) sample[n++] = (int64_t)(next_u64() % (uint64_t)T);

  /* the CPU reference on exactly those tokens (slots remapped to 0..n-1) */
  uint16_t *mq = malloc((size_t)n * H * 2), *rq = malloc((size_t)n * D * 2), *rk = malloc((size_t)n * D * 2);
  int8_t *rv = malloc((size_t)n * D);
  int32_t *mpos = malloc((size_t)n * 4);
  int64_t *mslot = malloc((size_t)n * 8);
  for (int i = 0; i < n; i++) {
    memcpy(mq + (size_t)i * H, qkv + sample[i] * H, H * 2);
    mpos[i] = pos[sample[i]];
    mslot[i] = slot[sample[i]] == -1 ? -1 : i;
  }
  const int64_t m_qkv[2] = {n, H}, m_q[2] = {n, D}, m_c[4] = {n, 1, NKV, D}, m_t[1] = {n};
  qkvfuse_tensor hx = tensor(mq, QKVFUSE_DTYPE_BFLOAT16, 2, m_qkv, CPU), hq = tensor(rq, QKVFUSE_DTYPE_BFLOAT16, 2, m_q, CPU),
                 hk = tensor(rk, QKVFUSE_DTYPE_BFLOAT16, 4, m_c, CPU), hv = tensor(rv, QKVFUSE_DTYPE_INT8, 4, m_c, CPU),
                 hp = tensor(mpos, QKVFUSE_DTYPE_INT32, 1, m_t, CPU), hs = tensor(mslot, QKVFUSE_DTYPE_INT64, 1, m_t, CPU),
                 hgq = tensor(gamma_q, QKVFUSE_DTYPE_BFLOAT16, 1, s_d, CPU),
                 hgk = tensor(gamma_k, QKVFUSE_DTYPE_BFLOAT16, 1, s_d, CPU),
                 hc = tensor(csc, QKVFUSE_DTYPE_BFLOAT16, 2, s_csc, CPU), hvs = tensor(&vscale, QKVFUSE_DTYPE_FLOAT32, 1, s_1, CPU);
  memset(rk, kPoisonK, (size_t)n * D * 2);
  memset(rv, kPoisonV, (size_t)n * D);
  qkvfuse_args ha = QKVFUSE_ARGS_INIT;
  ha.qkv = &hx, ha.q_gamma = &hgq, ha.k_gamma = &hgk, ha.positions = &hp, ha.cos_sin_cache = &hc, ha.slot_mapping = &hs;
  ha.v_scale = &hvs, ha.q_out = &hq, ha.k_cache = &hk, ha.v_cache = &hv;
  desc.device_type = CPU;
  desc.backend = QKVFUSE_BACKEND_REFERENCE;
  qkvfuse_plan *ref;
  st = qkvfuse_plan_create(&desc, &ref);
  if (st == QKVFUSE_SUCCESS) st = qkvfuse_run(ref, &ha, NULL);
  if (st != QKVFUSE_SUCCESS) {
    printf("FAIL test_cuda_big: reference: %s: %s\n", qkvfuse_status_string(st), qkvfuse_last_error());
    return 1;
  }

  /* compare: bf16 within one ulp (the GPU's sum of squares runs in another
   * order), int8 within 1 */
  int64_t checked = 0;
  for (int i = 0; i < n; i++) {
    const int64_t t = sample[i];
    uint16_t gq_row[D], gk_row[D];
    int8_t gv_row[D];
    CK(cudaMemcpy(gq_row, (uint16_t *)d_q + t * D, D * 2, cudaMemcpyDeviceToHost));
    for (int d = 0; d < D; d++) {
      const double want = tk_decode(QKVFUSE_DTYPE_BFLOAT16, (const uint8_t *)&rq[i * D + d]);
      const double got = tk_decode(QKVFUSE_DTYPE_BFLOAT16, (const uint8_t *)&gq_row[d]);
      if (!(fabs(got - want) <= tk_ulp(QKVFUSE_DTYPE_BFLOAT16, want)))
        FAILF("q_out[%lld][%d] = %.8g, reference %.8g", (long long)t, d, got, want);
    }
    checked += D;
    if (slot[t] < 0) continue;
    CK(cudaMemcpy(gk_row, (uint16_t *)d_kc + slot[t] * D, D * 2, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(gv_row, (int8_t *)d_vc + slot[t] * D, D, cudaMemcpyDeviceToHost));
    for (int d = 0; d < D; d++) {
      const double want = tk_decode(QKVFUSE_DTYPE_BFLOAT16, (const uint8_t *)&rk[i * D + d]);
      const double got = tk_decode(QKVFUSE_DTYPE_BFLOAT16, (const uint8_t *)&gk_row[d]);
      if (!(fabs(got - want) <= tk_ulp(QKVFUSE_DTYPE_BFLOAT16, want)))
        FAILF("k_cache slot %lld (token %lld) [%d] = %.8g, reference %.8g", (long long)slot[t], (long long)t, d, got,
              want);
      if (abs(gv_row[d] - rv[i * D + d]) > 1)
        FAILF("v_cache slot %lld (token %lld) [%d] = %d, reference %d", (long long)slot[t], (long long)t, d, gv_row[d],
              rv[i * D + d]);
    }
    checked += 2 * D;
  }
  /* slots no token maps to keep their poison, high ones included */
  const int64_t pinv = inv_mod((int64_t)(kP % (uint64_t)NS), NS);
  int unmapped = 0;
  for (int tries = 0; unmapped < 2000 && tries < 10000000; tries++) {
    const int64_t s = NS - 1 - (int64_t)(next_u64() % (uint64_t)(NS / 2));
    const int64_t t = (int64_t)(((unsigned __int128)s * (uint64_t)pinv) % (uint64_t)NS);
    if (t < T && slot[t] != -1) continue; /* written */
    uint16_t k_row[D];
    int8_t v_row[D];
    CK(cudaMemcpy(k_row, (uint16_t *)d_kc + s * D, D * 2, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(v_row, (int8_t *)d_vc + s * D, D, cudaMemcpyDeviceToHost));
    for (int d = 0; d < D; d++)
      if (k_row[d] != (uint16_t)(kPoisonK * 0x101) || (uint8_t)v_row[d] != kPoisonV)
        FAILF("slot %lld (no token) was written", (long long)s);
    unmapped++;
  }
  printf("test_cuda_big: %d sampled tokens (%lld elements) vs the reference, %d unwritten slots checked, %d failures\n",
         n, (long long)checked, unmapped, failed);
  qkvfuse_plan_destroy(plan);
  qkvfuse_plan_destroy(ref);
  return failed ? 1 : 0;
}
