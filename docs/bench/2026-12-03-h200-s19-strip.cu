// Session 19 diagnostic (BENCHMARKS.md, step 91), run from the repository root: nvcc -O3 -std=c++17 -gencode arch=compute_90,code=sm_90 -Iinclude -Isrc
// docs/bench/2026-12-03-h200-s19-strip.cu -o strip && ./strip 32768 D (D: 64, 96, 128, 192 or 256; none: all)
// Diagnostic microbenchmark (not part of the build): the prefill kernel's memory
// pattern alone (no math), for several head dims at the same row width, with
// three ways to store: MODE 0 per-lane 16-byte stores of the lane's vectors
// (fast_kernel's), MODE 1 the warp's token strips stored in row order from a
// row-major stage (whole lines per instruction), MODE 2 one bulk async copy
// (TMA, cp.async.bulk) per token strip from the row-major stage.
// LOADS 0: per-lane cp.async of the lane's vectors (fast_kernel's); 1: the
// warp copies its strips in row order (whole lines).
#include <cuda_runtime.h>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "cuda/fast.cuh"

constexpr int BLOCK = 128, NH = 4, STAGES = 2;

// the prefill kernel's own copy primitives (fast.cuh)
using qf::cp_async16;
__device__ __forceinline__ void cp16(void *s, const void *g, uint64_t pol) { cp_async16(s, g, pol); }
__device__ __forceinline__ void commit() { qf::cp_async_commit(); }
__device__ __forceinline__ void wait1() { qf::cp_async_wait<1>(); }
__device__ __forceinline__ uint64_t evict_first() { return qf::evict_first_policy(); }
__device__ __forceinline__ void bulk_store(void *g, const void *s, unsigned bytes) {
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(g),
               "r"((unsigned)__cvta_generic_to_shared(s)), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }
__device__ __forceinline__ void bulk_wait_read0() { asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory"); }
__device__ __forceinline__ void fence_async_smem() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }

template <int D, int L, int MODE, int LOADS>
__global__ void __launch_bounds__(BLOCK, 5)
    strip(const uint16_t *in, uint16_t *o0, uint16_t *o1, uint16_t *o2, long T, int Nq, int bpi, unsigned chunks) {
  constexpr int G = 32 / L, GPB = 4 * G, SP = NH * D * 2, NL = D / 16, V16 = NH * D / 8;
  extern __shared__ __align__(128) uint4 smem[];
  const int tid = threadIdx.x, u = tid & 31, warp = tid >> 5, gi = u / L, lane = u - gi * L;
  const bool idle = gi >= G;
  const int grp = warp * G + gi;
  const int ipk = Nq / NH, items = 3 * ipk, item = blockIdx.x % items;
  const int kind = item / ipk, h0 = (item % ipk) * NH;
  const long H = 3L * Nq * D, ld = (long)Nq * D;
  uint16_t *out = kind == 0 ? o0 : kind == 1 ? o1 : o2;
  const uint16_t *rows = in + (long)(kind * Nq + h0) * D;
  uint16_t *orow = out + (long)h0 * D;
  const int a = lane, b = lane + NL;
  const uint64_t pol = evict_first();
  // stage addresses: thread-major (MODE 0 with LOADS 0) or row-major per warp
  char *sbase = reinterpret_cast<char *>(smem);
  constexpr bool ROWMAJOR = MODE != 0 || LOADS != 0;
  auto tm = [&](int st, int i, int v) { return smem + ((st * NH + i) * 2 + v) * BLOCK + tid; };
  auto rm = [&](int st, int g) { return sbase + ((st * 4 + warp) * G + g) * SP; }; /* token g of the warp */
  unsigned c = blockIdx.x / items;
  const unsigned stride = bpi;
  auto issue = [&](unsigned cc, int st) {
    if (LOADS == 0) {
      const long t = (long)cc * GPB + grp;
      if (!idle && t < T && lane < NL) {
        const uint16_t *src = rows + t * H;
#pragma unroll
        for (int i = 0; i < NH; i++) {
          void *da = ROWMAJOR ? (void *)(rm(st, gi) + i * D * 2 + 16 * a) : (void *)tm(st, i, 0);
          void *db = ROWMAJOR ? (void *)(rm(st, gi) + i * D * 2 + 16 * b) : (void *)tm(st, i, 1);
          cp16(da, src + i * D + 8 * a, pol);
          cp16(db, src + i * D + 8 * b, pol);
        }
      }
    } else {
      for (int k = u; k < G * V16; k += 32) {
        const int g = k / V16, v = k - g * V16;
        const long t = (long)cc * GPB + warp * G + g;
        if (t < T) cp16(rm(st, g) + 16 * v, rows + t * H + 8 * v, pol);
      }
    }
    commit();
  };
  issue(c, 0);
  for (int st = 0; c < chunks; c += stride, st ^= 1) {
    const unsigned cn = c + stride;
    if (MODE == 2) {
      if (u < G) bulk_wait_read0(); /* the stage refilled next was the source of the last bulk stores */
      __syncwarp();
    }
    issue(cn, st ^ 1);
    wait1();
    if (LOADS == 1) __syncwarp();
    const long t = (long)c * GPB + grp;
    const bool act = !idle && t < T && lane < NL;
    if (MODE == 0) {
#pragma unroll
      for (int i = 0; i < NH; i++) {
        if (!act) continue;
        uint4 ra, rb;
        if (ROWMAJOR) {
          ra = *reinterpret_cast<uint4 *>(rm(st, gi) + i * D * 2 + 16 * a);
          rb = *reinterpret_cast<uint4 *>(rm(st, gi) + i * D * 2 + 16 * b);
        } else {
          ra = *tm(st, i, 0), rb = *tm(st, i, 1);
        }
        uint16_t *o = orow + t * ld + i * D;
        __stcs(reinterpret_cast<uint4 *>(o + 8 * a), ra);
        __stcs(reinterpret_cast<uint4 *>(o + 8 * b), rb);
      }
      if (LOADS == 1) __syncwarp();
    } else if (MODE == 1) {
      __syncwarp();
      for (int k = u; k < G * V16; k += 32) {
        const int g = k / V16, v = k - g * V16;
        const long tt = (long)c * GPB + warp * G + g;
        if (tt < T) __stcs(reinterpret_cast<uint4 *>(orow + tt * ld + 8 * v), *reinterpret_cast<uint4 *>(rm(st, g) + 16 * v));
      }
      __syncwarp();
    } else {
      fence_async_smem();
      __syncwarp();
      if (u < G) {
        const long tt = (long)c * GPB + warp * G + u;
        if (tt < T) bulk_store(orow + tt * ld, rm(st, u), SP);
        bulk_commit();
      }
    }
  }
  if (MODE == 2 && u < G) bulk_wait_read0();
}

// The baseline: a plain 16-byte grid-stride copy, one access in flight per
// thread. Not the project's qf_cuda_copy_bytes (unfused.cu: four in flight),
// which `qkvfuse bench` times: this file builds without the library, so its
// % of copy is against this kernel (3.92-3.94 TB/s at T = 32768 in session
// 19, against the bench copy's 3.89-3.91 TB/s for the same bytes).
__global__ void copyk(const uint4 *s, uint4 *d, long n) {
  for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x) d[i] = s[i];
}

static float timeit(void (*f)(void *), void *arg) {
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0), cudaEventCreate(&e1);
  for (int i = 0; i < 3; i++) f(arg);
  cudaEventRecord(e0);
  const int reps = 20;
  for (int i = 0; i < reps; i++) f(arg);
  cudaEventRecord(e1);
  cudaEventSynchronize(e1);
  float ms;
  cudaEventElapsedTime(&ms, e0, e1);
  return ms / reps;
}

struct Ctx {
  const uint16_t *in;
  uint16_t *o0, *o1, *o2, *cp;
  long T;
  int Nq, grid, bpi, sms;
  unsigned chunks;
  size_t smem;
  void (*k)(const uint16_t *, uint16_t *, uint16_t *, uint16_t *, long, int, int, unsigned);
};
static void run_strip(void *p) {
  Ctx *c = (Ctx *)p;
  c->k<<<c->grid, BLOCK, c->smem>>>(c->in, c->o0, c->o1, c->o2, c->T, c->Nq, c->bpi, c->chunks);
}
static void run_copy(void *p) {
  Ctx *c = (Ctx *)p;
  const long n = c->T * 9216L * 2 / 16;
  copyk<<<c->sms * 8, 512>>>((const uint4 *)c->in, (uint4 *)c->cp, n);
}

template <int D, int L, int MODE, int LOADS>
static void one(Ctx &c, float copy_ms) {
  constexpr int G = 32 / L, GPB = 4 * G;
  c.Nq = 9216 / (3 * D);
  const int items = 3 * (c.Nq / NH);
  c.chunks = (unsigned)((c.T + GPB - 1) / GPB);
  c.bpi = (c.sms * 5) / items;
  c.grid = items * c.bpi;
  const bool rowmajor = MODE != 0 || LOADS != 0;
  c.smem = rowmajor ? (size_t)STAGES * 4 * G * NH * D * 2 : (size_t)STAGES * NH * 2 * BLOCK * 16;
  c.k = strip<D, L, MODE, LOADS>;
  cudaFuncSetAttribute(c.k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)c.smem);
  const float ms = timeit(run_strip, &c);
  cudaError_t e = cudaGetLastError();
  const double bytes = 2.0 * c.T * 9216 * 2;
  printf("D=%3d L=%2d store=%d loads=%d T=%ld: %8.1f us  %6.0f GB/s  %5.1f%% of copy  (blocks %d, smem %zu)%s%s\n", D,
         L, MODE, LOADS, c.T, ms * 1e3, bytes / ms / 1e6, 100.0 * copy_ms / ms, c.grid, c.smem,
         e ? " ERROR " : "", e ? cudaGetErrorString(e) : "");
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  Ctx c = {};
  c.T = argc > 1 ? atol(argv[1]) : 32768;
  cudaDeviceGetAttribute(&c.sms, cudaDevAttrMultiProcessorCount, 0);
  const size_t n = (size_t)c.T * 9216;
  uint16_t *in, *out, *cp;
  cudaMalloc(&in, n * 2), cudaMalloc(&out, n * 2), cudaMalloc(&cp, n * 2);
  if (cudaMemset(in, 0x3c, n * 2) != cudaSuccess) { printf("cuda setup failed: %s\n", cudaGetErrorString(cudaGetLastError())); return 1; }
  c.in = in, c.cp = cp;
  const float copy_ms = timeit(run_copy, &c);
  printf("copy T=%ld: %.1f us %.0f GB/s\n", c.T, copy_ms * 1e3, 2.0 * n * 2 / copy_ms / 1e6);
  // outputs: q [T, Nq D], k, v [T, Nkv D] (MHA) in one buffer, by D
  auto setout = [&](int D) {
    const long w = 9216 / 3;
    c.o0 = out, c.o1 = out + c.T * w, c.o2 = out + 2 * c.T * w;
    (void)D;
  };
#define ALL(D, L)                      \
  setout(D);                           \
  one<D, L, 0, 0>(c, copy_ms);         \
  one<D, L, 0, 1>(c, copy_ms);         \
  one<D, L, 1, 0>(c, copy_ms);         \
  one<D, L, 1, 1>(c, copy_ms);         \
  one<D, L, 2, 0>(c, copy_ms);         \
  one<D, L, 2, 1>(c, copy_ms);
  const int Dsel = argc > 2 ? atoi(argv[2]) : 0;
  for (int r = 0; r < 2; r++) {
    printf("-- round %d\n", r + 1);
    if (!Dsel || Dsel == 64) { ALL(64, 4) }
    if (!Dsel || Dsel == 96) { ALL(96, 6) }
    if (!Dsel || Dsel == 128) { ALL(128, 8) }
    if (!Dsel || Dsel == 192) { ALL(192, 16) }
    if (!Dsel || Dsel == 256) { ALL(256, 16) }
  }
  // check: MODE 2 wrote what it read (last run: D = 256, mode 2 loads 1)
  uint16_t h[8];
  cudaMemcpy(h, out + 12345, 16, cudaMemcpyDeviceToHost);
  printf("check %04x %04x (want 3c3c)\n", h[0], h[7]);
  return 0;
}
