// SPDX-License-Identifier: Apache-2.0
// PTX wrappers of the kernels: streaming loads and stores, loads through L2
// only, asynchronous copies into shared memory with an L2 eviction policy,
// L2 prefetches, and the grid dependency wait of programmatic dependent
// launch.
#ifndef QKVFUSE_CUDA_DEVICE_PTX_CUH
#define QKVFUSE_CUDA_DEVICE_PTX_CUH

#include <stdint.h>

namespace qf {


// Programmatic dependent launch (launch.h): let the stream's next kernel
// launch, then wait until the previous kernel has finished and its writes are
// visible. Every kernel of the family calls this before its first global
// memory access. Without the launch attribute (or before sm_90) it costs
// nothing and waits for nothing.
__device__ __forceinline__ void grid_dependency_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// The input rows are read once and the outputs written once: streaming
// loads and stores (evict-first) keep them from displacing the tables and
// the next rows in L2. The loads ask L2 to fetch 256-byte blocks (a
// group's 8-lane half-row is 128 or 256 bytes). Volatile: never moved
// above the grid dependency wait.
__device__ __forceinline__ uint4 ld_stream(const void *p) {
  uint4 v;
  asm volatile("ld.global.cs.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}
template <typename V>
__device__ __forceinline__ void st_stream(void *p, V v) {
  __stcs(reinterpret_cast<V *>(p), v);
}

__device__ __forceinline__ uint64_t evict_first_policy() {
  uint64_t p;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(p));
  return p;
}
__device__ __forceinline__ void cp_async16(void *dst, const void *src, uint64_t policy) {
  asm volatile("cp.async.cg.shared.global.L2::cache_hint.L2::256B [%0], [%1], 16, %2;" ::"r"(
                   (unsigned)__cvta_generic_to_shared(dst)),
               "l"(src), "l"(policy)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

// An L2 prefetch, issued before the grid dependency wait for inputs the
// previous kernel may still be writing: it returns no data, and L2 is the
// point of coherence of device memory, so the loads after the wait still see
// that kernel's writes; it only starts the DRAM fetch early.
__device__ __forceinline__ void prefetch_l2(const void *p) { asm volatile("prefetch.global.L2 [%0];" ::"l"(p)); }

// A 16-byte load through L2 only (ld.global.cg: nothing it reads stays in
// L1, where a load after the grid dependency wait could find it stale), kept
// where it is written (volatile: before that wait).
__device__ __forceinline__ uint4 ld_l2(const void *p) {
  uint4 v;
  asm volatile("ld.global.cg.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}

// 1 / s, approximate (within 1 ulp; SPEC's int8 and fp8 tolerances cover it),
// subnormal results kept.
__device__ __forceinline__ float rcp_approx(float s) {
  float r;
  asm("rcp.approx.f32 %0, %1;" : "=f"(r) : "f"(s));
  return r;
}

// rcp_approx for |s| in [2^-126, 2^126), whose reciprocal is normal: one
// instruction (rcp_approx scales subnormal operands and results around it).
__device__ __forceinline__ float rcp_approx_normal(float s) {
  float r;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(s));
  return r;
}

}  // namespace qf

#endif  // QKVFUSE_CUDA_DEVICE_PTX_CUH
