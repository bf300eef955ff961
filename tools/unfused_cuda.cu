// SPDX-License-Identifier: Apache-2.0
// The unfused baseline on the GPU: the same stages as separate kernels with
// tensors in memory between them, as an engine runs them without fusion
// (split -> RMSNorm q -> RMSNorm k -> RoPE q, k -> quantize + scatter k, v, like
// vLLM's rms_norm, rotary_embedding and reshape_and_cache kernels). It exists to
// be measured against (qkvfuse bench) and to check unfused-parity mode.
//
// Supported: 16-bit or float32 I/O (input dtype = q_out dtype, k_out/v_out
// the same), or int32 input; D a multiple of 8; 16-byte aligned tensors; q
// not quantized.
#include <cuda_runtime.h>

#include "core/error.h"
#include "cuda/backend.h"
#include "cuda/general.cuh"
#include "cuda/launch.h"
#include "unfused_cuda.h"

namespace {

using namespace qf;

constexpr int kVec = 8;  // elements per thread per access

// Lanes per head: D / 8 rounded up to a power of two (<= 32).
__device__ __forceinline__ int head_lanes(int D) {
  int n = D / kVec, g = 1;
  while (g < n && g < 32) g <<= 1;
  return g;
}

// Stage 1: split (copy) or dequantize the qkv columns into three buffers of the
// I/O dtype: q [T, Nq*D], k [T, Nkv*D], v [T, Nkv*D].
template <typename TIn>
__global__ void split_kernel(const qf_cu_problem P, void *qb, void *kb, void *vb) {
  const int64_t H = (int64_t)(P.Nq + 2 * P.Nkv) * P.D;
  const int64_t nvec_row = H / kVec;
  const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= P.T * nvec_row) return;
  const int64_t t = i / nvec_row, c = (i - t * nvec_row) * kVec;
  const int64_t nq = (int64_t)P.Nq * P.D, nkv = (int64_t)P.Nkv * P.D;
  const int kind = c < nq ? 0 : (c < nq + nkv ? 1 : 2);
  if (!P.in[kind].data) return; /* v, when nothing reads it */
  float x[kVec];
  const TIn *in = reinterpret_cast<const TIn *>(P.in[kind].data) + t * P.in[kind].ld +
                  (c - (kind == 0 ? 0 : (kind == 1 ? nq : nq + nkv)));
  if constexpr (sizeof(TIn) == 2) {
    load_vec<TIn, kVec>(in, x);
  } else {
    float a[4], b[4];
    load_vec<TIn, 4>(in, a);
    load_vec<TIn, 4>(in + 4, b);
#pragma unroll
    for (int k = 0; k < 4; k++) x[k] = a[k], x[k + 4] = b[k];
  }
  if (P.weight_scale) {
    const float as = P.act_scale ? P.act_scale[t] : 1.0f;
#pragma unroll
    for (int k = 0; k < kVec; k++) {
      float y = x[k] * P.weight_scale[c + k];
      if (P.act_scale) y = y * as;
      if (P.bias.data) y = y + ld(P.bias.data, P.bias.dtype, c + k);
      x[k] = y;
    }
  }
  const int64_t qw = (int64_t)P.Nq * P.D, kw = (int64_t)P.Nkv * P.D;
  if (c < qw)
    store_floats<kVec>(qb, P.io_dtype, t * qw + c, x);
  else if (c < qw + kw)
    store_floats<kVec>(kb, P.io_dtype, t * kw + c - qw, x);
  else
    store_floats<kVec>(vb, P.io_dtype, t * kw + c - qw - kw, x);
}

// Load / store one head of a [T, N*D] buffer of the I/O dtype.
__device__ __forceinline__ void load_head(const void *buf, int dt, int64_t idx, float (&x)[kVec]) {
  for (int k = 0; k < kVec; k++) x[k] = ld(buf, dt, idx + k);
}

// Stage 2: RMSNorm of the N heads of a buffer, in place.
__global__ void rmsnorm_kernel(const qf_cu_problem P, void *buf, int N, qf_cu_vec gamma, qf_cu_vec beta) {
  const int G = head_lanes(P.D), lane = threadIdx.x & (G - 1);
  const int64_t task = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / G;
  if (task >= P.T * N) return;
  const unsigned gmask = G == 32 ? 0xffffffffu : (((1u << G) - 1u) << ((threadIdx.x & 31) & ~(G - 1)));
  const bool active = lane < P.D / kVec;
  const int64_t idx = task * P.D + lane * kVec;
  float x[kVec] = {};
  if (active) load_head(buf, P.io_dtype, idx, x);
  float ss = 0.0f;
  for (int k = 0; k < kVec; k++) ss += x[k] * x[k];
  for (int off = G >> 1; off > 0; off >>= 1) ss += __shfl_xor_sync(gmask, ss, off, G);
  const float inv = 1.0f / sqrtf(ss / (float)P.D + P.eps);
  if (!active) return;
  for (int k = 0; k < kVec; k++) {
    const int d = lane * kVec + k;
    float g = ld(gamma.data, gamma.dtype, d);
    if (P.gamma_offset) g = 1.0f + g;
    float y = x[k] * inv * g;
    if (beta.data) y = round_to(y, P.io_dtype) + ld(beta.data, beta.dtype, d); /* rms_norm's stored output + beta */
    x[k] = y;
  }
  store_floats<kVec>(buf, P.io_dtype, idx, x);
}

// Stage 3: RoPE of the N heads of `in` into `out` (same layout, may be the same).
__global__ void rope_kernel(const qf_cu_problem P, const void *in, int64_t in_ld, void *out, int64_t out_ld,
                            int out_dtype, int N) {
  extern __shared__ float smem[];
  const int G = head_lanes(P.D), lane = threadIdx.x & (G - 1);
  const int64_t task = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / G;
  if (task >= P.T * N) return;
  const unsigned gmask = G == 32 ? 0xffffffffu : (((1u << G) - 1u) << ((threadIdx.x & 31) & ~(G - 1)));
  const int64_t t = task / N, h = task - t * N;
  const int64_t pos = P.positions.data ? ld_index(P.positions.data, P.positions.dtype, t) : 0;
  const bool active = lane < P.D / kVec;
  float x[kVec] = {};
  if (active) load_head(in, P.io_dtype, t * in_ld + h * P.D + lane * kVec, x);
  float *ys = smem + (threadIdx.x / G) * P.R;
  for (int k = 0; k < kVec; k++) {
    const int d = lane * kVec + k;
    if (active && d < P.R) ys[d] = x[k];
  }
  __syncwarp(gmask);
  if (!active) return;
  const int half = P.R >> 1;
  for (int k = 0; k < kVec; k++) {
    const int d = lane * kVec + k;
    if (d >= P.R) continue;
    float c, s;
    if (P.rope_source == QKVFUSE_ROPE_COS_SIN) {
      c = ld(P.cos.data, P.cos.dtype, t * P.cos.ld + d);
      s = ld(P.sin.data, P.sin.dtype, t * P.sin.ld + d);
    } else {
      half_cos_sin(P, pos, P.interleaved ? d >> 1 : (d < half ? d : d - half), c, s);
    }
    const bool first = P.interleaved ? (d & 1) == 0 : d < half;
    const int partner = P.interleaved ? (d ^ 1) : (first ? d + half : d - half);
    x[k] = first ? x[k] * c - ys[partner] * s : x[k] * c + ys[partner] * s;
  }
  store_floats<kVec>(out, out_dtype, t * out_ld + h * P.D + lane * kVec, x);
}

// Stage 4 + 5: quantize k and v rows and scatter them into the caches.
__global__ void cache_kernel(const qf_cu_problem P, const void *kb, const void *vb) {
  const int64_t width = (int64_t)P.Nkv * P.D, nvec = width / kVec;
  const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= 2 * P.T * nvec) return;
  const int which = (int)(i / (P.T * nvec));  // 0: k, 1: v
  const int64_t r = i - which * P.T * nvec, t = r / nvec, j = (r - t * nvec) * kVec;
  const qf_cu_cache &C = which ? P.v_cache : P.k_cache;
  int64_t block, row;
  if (P.layout == QKVFUSE_CACHE_CONTIGUOUS) {
    const int64_t b = t / P.S, start = ld_index(P.slot_mapping.data, P.slot_mapping.dtype, b);
    if (start == -1) return;
    block = b;
    row = start + (t - b * P.S);
  } else if (P.page_table) {
    if (qf_page_table_dest(&P.pt, t, &block, &row) != QF_PT_OK) return; /* skipped, or a data error */
  } else {
    const int64_t s = ld_index(P.slot_mapping.data, P.slot_mapping.dtype, t);
    if (s == -1) return;
    block = s / C.block_size;
    row = s - block * C.block_size;
  }
  float x[kVec];
  load_head(which ? vb : kb, P.io_dtype, t * width + j, x);
  const int64_t off = block * C.s_block + row * C.s_row + (j / C.chunk) * C.s_chunk + (j % C.chunk);
  if (C.quant == QKVFUSE_QUANT_NONE) {
    store_floats<kVec>(C.data, C.dtype, off, x);
    return;
  }
  uint8_t q[kVec];
  const int pc = which ? P.v_scale_pc : P.k_scale_pc, ph = which ? P.v_scale_ph : P.k_scale_ph;
  quantize<kVec>(C.quant, x, which ? P.v_scale : P.k_scale, which ? P.v_offset : P.k_offset, pc,
                 pc ? j : ph ? j / P.D : 0, q);
  store_bytes<kVec>(static_cast<uint8_t *>(C.data) + off, q);
}

unsigned blocks_for(int64_t threads) { return (unsigned)((threads + kBlock - 1) / kBlock); }

}  // namespace

size_t qf_cuda_unfused_scratch_bytes(const qf_problem *p) {
  const size_t es = qkvfuse_dtype_size(p->io_dtype);
  return (size_t)p->T * (size_t)((p->Nq + 2 * p->Nkv) * p->D) * es + 256;
}

qkvfuse_status qf_cuda_unfused_run(const qkvfuse_plan *plan, const qf_problem *p, void *scratch, void *stream_) {
  const qkvfuse_desc *d = p->desc;
  const int in_float = p->in[0].dtype != QKVFUSE_DTYPE_INT32;
  QF_CHECK(!in_float || p->in[0].dtype == p->io_dtype, QKVFUSE_ERROR_UNSUPPORTED,
           "unfused: the input's dtype must equal q_out's (or be int32)");
  QF_CHECK((!p->k_out.data || p->k_out.dtype == p->io_dtype) && (!p->v_out.data || p->v_out.dtype == p->io_dtype),
           QKVFUSE_ERROR_UNSUPPORTED, "unfused: k_out/v_out must have q_out's dtype");
  QF_CHECK(d->q_quant == QKVFUSE_QUANT_NONE, QKVFUSE_ERROR_UNSUPPORTED,
           "unfused: a quantized q (desc.q_quant) has no stage in this baseline");
  QF_CHECK(qf_cuda_vector_ok(p, kVec), QKVFUSE_ERROR_UNSUPPORTED,
           "unfused: D and every base and stride must be multiples of 8 elements");
  /* a head is one lane group of at most 32 lanes of kVec elements */
  QF_CHECK(p->D <= 32 * kVec, QKVFUSE_ERROR_UNSUPPORTED, "unfused: D must be at most %d; got %lld", 32 * kVec,
           (long long)p->D);
  if (p->T == 0) return QKVFUSE_SUCCESS;
  cudaStream_t stream = (cudaStream_t)stream_;
  qf_cu_problem P;
  qf_cuda_make_problem(plan, p, &P);
  const size_t es = qkvfuse_dtype_size(p->io_dtype);
  char *qb = (char *)scratch;
  char *kb = qb + (size_t)p->T * (size_t)(p->Nq * p->D) * es;
  char *vb = kb + (size_t)p->T * (size_t)(p->Nkv * p->D) * es;
  const int64_t H = (p->Nq + 2 * p->Nkv) * p->D;
  const unsigned split_blocks = blocks_for(p->T * H / kVec);
  switch (p->in[0].dtype) {
    case QKVFUSE_DTYPE_BFLOAT16: split_kernel<__nv_bfloat16><<<split_blocks, kBlock, 0, stream>>>(P, qb, kb, vb); break;
    case QKVFUSE_DTYPE_FLOAT16: split_kernel<__half><<<split_blocks, kBlock, 0, stream>>>(P, qb, kb, vb); break;
    case QKVFUSE_DTYPE_FLOAT32: split_kernel<float><<<split_blocks, kBlock, 0, stream>>>(P, qb, kb, vb); break;
    default: split_kernel<int32_t><<<split_blocks, kBlock, 0, stream>>>(P, qb, kb, vb); break;
  }
  QF_FORWARD(qf_cuda_launched("unfused split"));
  int G = 1;
  while (G < p->D / kVec && G < 32) G <<= 1;
  const int64_t qw = p->Nq * p->D, kw = p->Nkv * p->D;
  if (d->q_norm) {
    rmsnorm_kernel<<<blocks_for(p->T * p->Nq * G), kBlock, 0, stream>>>(P, qb, (int)p->Nq, P.q_gamma, P.q_beta);
    QF_FORWARD(qf_cuda_launched("unfused rmsnorm q"));
  }
  if (d->k_norm) {
    rmsnorm_kernel<<<blocks_for(p->T * p->Nkv * G), kBlock, 0, stream>>>(P, kb, (int)p->Nkv, P.k_gamma, P.k_beta);
    QF_FORWARD(qf_cuda_launched("unfused rmsnorm k"));
  }
  const size_t smem = (size_t)(kBlock / G) * (size_t)(p->R > 0 ? p->R : 1) * sizeof(float);
  if (p->R > 0) {
    rope_kernel<<<blocks_for(p->T * p->Nq * G), kBlock, smem, stream>>>(P, qb, qw, p->q_out.data, p->q_out.ld,
                                                                         p->q_out.dtype, (int)p->Nq);
    QF_FORWARD(qf_cuda_launched("unfused rope q"));
    rope_kernel<<<blocks_for(p->T * p->Nkv * G), kBlock, smem, stream>>>(P, kb, kw, kb, kw, p->io_dtype,
                                                                          (int)p->Nkv);
    QF_FORWARD(qf_cuda_launched("unfused rope k"));
  } else {
    cudaMemcpy2DAsync(p->q_out.data, (size_t)p->q_out.ld * es, qb, (size_t)qw * es, (size_t)qw * es, (size_t)p->T,
                      cudaMemcpyDeviceToDevice, stream);
  }
  if (p->k_out.data)
    cudaMemcpy2DAsync(p->k_out.data, (size_t)p->k_out.ld * es, kb, (size_t)kw * es, (size_t)kw * es, (size_t)p->T,
                      cudaMemcpyDeviceToDevice, stream);
  if (p->v_out.data)
    cudaMemcpy2DAsync(p->v_out.data, (size_t)p->v_out.ld * es, vb, (size_t)kw * es, (size_t)kw * es, (size_t)p->T,
                      cudaMemcpyDeviceToDevice, stream);
  if (d->cache_layout != QKVFUSE_CACHE_NONE) {
    cache_kernel<<<blocks_for(2 * p->T * kw / kVec), kBlock, 0, stream>>>(P, kb, vb);
    QF_FORWARD(qf_cuda_launched("unfused reshape_and_cache"));
  }
  return qf_cuda_launched("unfused copies");
}

// ---- the copy baseline ------------------------------------------------------------

namespace {

// 16-byte accesses, four in flight per thread, grid-stride; block 0 also
// copies the tail (< 16 bytes), so a copy is one launch.
__global__ void copy_kernel(uint4 *dst, const uint4 *src, int64_t n, int tail) {
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (blockIdx.x == 0 && threadIdx.x < tail)
    reinterpret_cast<unsigned char *>(dst + n)[threadIdx.x] = reinterpret_cast<const unsigned char *>(src + n)[threadIdx.x];
  for (; i + 3 * stride < n; i += 4 * stride) {
    const uint4 a = src[i], b = src[i + stride], c = src[i + 2 * stride], d = src[i + 3 * stride];
    dst[i] = a, dst[i + stride] = b, dst[i + 2 * stride] = c, dst[i + 3 * stride] = d;
  }
  for (; i < n; i += stride) dst[i] = src[i];
}

}  // namespace

qkvfuse_status qf_cuda_copy_bytes(void *dst, const void *src, size_t bytes, void *stream_) {
  cudaStream_t stream = (cudaStream_t)stream_;
  int dev = 0, sms = 132;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  const int64_t n16 = (int64_t)(bytes / 16);
  int64_t blocks = (n16 + kBlock - 1) / kBlock;
  if (blocks > (int64_t)sms * 8) blocks = (int64_t)sms * 8;
  if (blocks < 1) blocks = 1;
  copy_kernel<<<(unsigned)blocks, kBlock, 0, stream>>>((uint4 *)dst, (const uint4 *)src, n16, (int)(bytes % 16));
  return qf_cuda_launched("unfused copy");
}
