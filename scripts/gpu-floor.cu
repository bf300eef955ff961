// SPDX-License-Identifier: Apache-2.0
// The per-call floor of a small kernel timed the way `qkvfuse bench` times
// decode sizes (CUDA-graph replays of 100 launches, inputs rotated over 512
// MB): an empty kernel, a 12 KB copy with and without programmatic dependent
// launch and an L2 prefetch before the grid dependency wait, plus one
// dependent load (index -> table row) or a chain of dependent FMAs. A
// diagnostic, not part of the library:
//
//   nvcc -O3 -gencode=arch=compute_90,code=sm_90 -std=c++17 scripts/gpu-floor.cu -o /tmp/gpu-floor && /tmp/gpu-floor
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("%s: %s\n", #x, cudaGetErrorString(e)); return 1; } } while (0)
__device__ __forceinline__ void pdl_wait() {
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  asm volatile("griddepcontrol.wait;" ::: "memory");
}
struct Args { const uint4 *src; uint4 *dst; const int *idx; const uint4 *table; int n; int pdl; int chain; int dep; int prefetch; };
__global__ void k_empty(Args a) { if (a.pdl) pdl_wait(); }
__global__ void k_work(Args a) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (a.prefetch && i < a.n) asm volatile("prefetch.global.L2 [%0];" ::"l"(a.src + i));
  if (a.pdl) pdl_wait();
  if (i >= a.n) return;
  uint4 v = a.src[i];
  if (a.dep) { const int j = a.idx[0]; const uint4 t = a.table[j * 64 + (i & 63)]; v.x ^= t.x; }
  float f = __uint_as_float(v.y & 0x3fffffffu) + 1.0f;
  for (int k = 0; k < a.chain; k++) f = fmaf(f, 0.999f, 0.001f);
  if (a.chain) v.y = __float_as_uint(f);
  a.dst[i] = v;
}
static int by_value(const void *a, const void *b) {
  const float x = *(const float *)a, y = *(const float *)b;
  return (x > y) - (x < y);
}

int main() {
  const size_t slab = 512u << 20; // 512 MB each: src, dst
  uint4 *src, *dst, *table; int *idx;
  CK(cudaMalloc(&src, slab)); CK(cudaMalloc(&dst, slab)); CK(cudaMalloc(&table, 64u << 20)); CK(cudaMalloc(&idx, 1 << 20));
  CK(cudaMemset(src, 1, slab)); CK(cudaMemset(dst, 0, slab)); CK(cudaMemset(table, 2, 64u << 20));
  static int hidx[1 << 18];
  for (int i = 0; i < (1 << 18); i++) hidx[i] = (int)(((uint32_t)i * 2654435761u) % 8192);
  CK(cudaMemcpy(idx, hidx, sizeof hidx, cudaMemcpyHostToDevice));
  cudaStream_t s; CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  struct Case { const char *name; bool empty; int bytes, threads, pdl, chain, dep, prefetch; };
  const Case cases[] = {
    {"empty 1 block, no PDL", true, 0, 32, 0, 0, 0, 0},
    {"empty 1 block, PDL", true, 0, 32, 1, 0, 0, 0},
    {"empty 6 blocks, PDL", true, 0, 128, 1, 0, 0, 0},
    {"copy 12 KB (6x128 thr), no PDL", false, 12288, 128, 0, 0, 0, 0},
    {"copy 12 KB, PDL", false, 12288, 128, 1, 0, 0, 0},
    {"copy 12 KB, PDL + L2 prefetch", false, 12288, 128, 1, 0, 0, 1},
    {"copy 12 KB (24x32 thr), PDL + prefetch", false, 12288, 32, 1, 0, 0, 1},
    {"copy 24 KB (12x128), PDL + prefetch", false, 24576, 128, 1, 0, 0, 1},
    {"copy 12 KB + idx->table load, PDL + prefetch", false, 12288, 128, 1, 0, 1, 1},
    {"copy 12 KB + 100 dep FMA, PDL + prefetch", false, 12288, 128, 1, 100, 0, 1},
    {"copy 12 KB + 300 dep FMA, PDL + prefetch", false, 12288, 128, 1, 300, 0, 1},
    {"copy 12 KB + 600 dep FMA, PDL + prefetch", false, 12288, 128, 1, 600, 0, 1},
  };
  for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
    const Case &c = cases[ci];
    const int n = c.bytes / 16, blocks = c.empty ? (c.threads == 32 ? 1 : 6) : (n + c.threads - 1) / c.threads;
    const size_t stride = ((size_t)c.bytes + 4095) / 4096 * 4096 + 4096;
    const int inst = (int)(slab / stride) < 4000 ? (int)(slab / stride) : 4000;
    enum { kGraphs = 20 };
    cudaGraphExec_t ex[kGraphs];
    for (int g = 0; g < kGraphs; g++) {
      cudaGraph_t graph;
      CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
      for (int k = 0; k < 100; k++) {
        const int m = (g * 100 + k) % inst;
        Args a{(const uint4 *)((char *)src + m * stride), (uint4 *)((char *)dst + m * stride), idx + (m * 16) % (1 << 18), table, n, c.pdl, c.chain, c.dep, c.prefetch};
        cudaLaunchConfig_t cfg = {}; cudaLaunchAttribute at[1];
        cfg.gridDim = dim3(blocks); cfg.blockDim = dim3(c.threads); cfg.stream = s;
        at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization; at[0].val.programmaticStreamSerializationAllowed = 1;
        cfg.attrs = at; cfg.numAttrs = c.pdl ? 1 : 0;
        CK(cudaLaunchKernelEx(&cfg, c.empty ? k_empty : k_work, a));
      }
      CK(cudaStreamEndCapture(s, &graph));
      CK(cudaGraphInstantiate(&ex[g], graph, 0)); CK(cudaGraphDestroy(graph));
    }
    cudaEvent_t e0, e1; CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
    for (int g = 0; g < kGraphs; g++) CK(cudaGraphLaunch(ex[g], s));
    CK(cudaStreamSynchronize(s));
    float t[5 * kGraphs];
    int nt = 0;
    for (int r = 0; r < 5; r++)
      for (int g = 0; g < kGraphs; g++) {
        CK(cudaEventRecord(e0, s)); CK(cudaGraphLaunch(ex[g], s)); CK(cudaEventRecord(e1, s)); CK(cudaEventSynchronize(e1));
        float ms; CK(cudaEventElapsedTime(&ms, e0, e1)); t[nt++] = ms * 1000.0f / 100.0f;
      }
    qsort(t, nt, sizeof t[0], by_value);
    printf("%-48s %3d blocks: median %.2f us per call (min %.2f)\n", c.name, blocks, t[nt / 2], t[0]);
    for (int g = 0; g < kGraphs; g++) cudaGraphExecDestroy(ex[g]);
    cudaEventDestroy(e0), cudaEventDestroy(e1);
  }
  return 0;
}
