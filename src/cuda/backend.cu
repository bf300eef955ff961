// SPDX-License-Identifier: Apache-2.0
// The CUDA backend: planning (device checks, the COMPUTED frequency table),
// and run = resolved problem -> kernel parameters -> one launch chosen by
// dispatch(). No allocation and no synchronization inside run.
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/backends.h"
#include "core/error.h"
#include "cuda/backend.h"
#include "cuda/general.cuh"
#include "cuda/prefill.cuh"
#include "cuda/launch.h"
#include "cuda/schedule.h"
#include "cuda/state.h"

namespace {

qkvfuse_status cuda_fail(cudaError_t e, const char *what) {
  return qf_fail(QKVFUSE_ERROR_CUDA, "%s: CUDA error %d (%s): %s", what, (int)e, cudaGetErrorName(e),
                 cudaGetErrorString(e));
}

// Make `device` current for the scope (restores the caller's device).
struct device_guard {
  int prev = -1;
  cudaError_t err = cudaSuccess;
  explicit device_guard(int device) {
    err = cudaGetDevice(&prev);
    if (err == cudaSuccess && prev != device) err = cudaSetDevice(device);
  }
  ~device_guard() {
    int cur = -1;
    if (prev >= 0 && cudaGetDevice(&cur) == cudaSuccess && cur != prev) cudaSetDevice(prev);
  }
};

void release_cuda(qkvfuse_plan *plan) {
  if (plan->device_state) {
    device_guard g(plan->desc.device_id);
    cudaFree(plan->device_state);
    plan->device_state = nullptr;
  }
}

}  // namespace

// A divisor for div_by: none (0) where d does not fit 31 bits.
static qf_cu_div qf_cuda_divisor_or_none(int64_t d) {
  return d > 0 && d < ((int64_t)1 << 31) ? qf_cuda_divisor((uint32_t)d) : qf_cu_div{0, 0, 0};
}

void qf_cuda_make_params(const qkvfuse_plan *plan, const qf_problem *p, qf_cu_params *P) {
  const qkvfuse_desc *d = p->desc;
  memset(P, 0, sizeof *P);
  const bool write_v = p->v_out.data || d->cache_layout != QKVFUSE_CACHE_NONE;
  P->T = p->T;
  P->S = p->S;
  P->Nq = (int32_t)p->Nq;
  P->Nkv = (int32_t)p->Nkv;
  P->D = (int32_t)p->D;
  P->R = (int32_t)p->R;
  P->heads_per_token = (int32_t)(p->Nq + p->Nkv + (write_v ? p->Nkv : 0));
  P->q_norm = d->q_norm;
  P->k_norm = d->k_norm;
  P->gamma_offset = d->gamma_offset;
  P->parity = d->rounding == QKVFUSE_ROUNDING_UNFUSED_PARITY;
  P->rope_source = d->rope_source;
  P->interleaved = d->rope_style == QKVFUSE_ROPE_INTERLEAVED;
  P->layout = d->cache_layout;
  P->eps = d->eps;
  P->mscale = (float)p->mscale;
  P->io_dtype = p->io_dtype;
  auto mat = [](const qf_mat &m) { return qf_cu_mat{m.data, m.ld, (int32_t)(m.data ? m.dtype : 0)}; };
  auto vec = [](const qf_vec &v) { return qf_cu_vec{v.data, (int32_t)(v.data ? v.dtype : 0), v.n > 1}; };
  for (int i = 0; i < 3; i++) P->in[i] = mat(p->in[i]);
  P->weight_scale = (const float *)p->weight_scale.data;
  P->act_scale = (const float *)p->act_scale.data;
  P->bias = vec(p->bias);
  P->q_gamma = vec(p->q_gamma);
  P->k_gamma = vec(p->k_gamma);
  P->q_beta = vec(p->q_beta);
  P->k_beta = vec(p->k_beta);
  P->positions = vec(p->positions);
  P->cos_sin_cache = mat(p->cos_sin_cache);
  P->max_pos = d->rope_source == QKVFUSE_ROPE_COMPUTED ? ((int64_t)1 << 31) : p->cos_sin_cache.rows;
  P->cos = mat(p->cos);
  P->sin = mat(p->sin);
  P->turns = (const uint64_t *)plan->device_state;
  P->slot_mapping = vec(p->slot_mapping);
  P->page_table = d->cache_addressing == QKVFUSE_ADDRESS_PAGE_TABLE;
  P->pt = p->page_table;
  P->k_scale = (const float *)p->k_scale.data;
  P->v_scale = (const float *)p->v_scale.data;
  P->k_offset = (const float *)p->k_offset.data;
  P->v_offset = (const float *)p->v_offset.data;
  /* problem.h: k_scale_group is 1 per channel, D per kv head */
  P->k_scale_pc = p->k_scale.n > 1 && p->k_scale_group == 1;
  P->v_scale_pc = p->v_scale.n > 1 && p->v_scale_group == 1;
  P->k_scale_ph = p->k_scale.n > 1 && p->k_scale_group > 1;
  P->v_scale_ph = p->v_scale.n > 1 && p->v_scale_group > 1;
  P->q_quant = d->q_quant;
  P->q_scale = (const float *)p->q_scale.data;
  P->q_out = mat(p->q_out);
  P->k_out = mat(p->k_out);
  P->v_out = mat(p->v_out);
  P->q_copy = mat(p->q_copy);
  auto cache = [](const qf_cache &c, qkvfuse_quant_mode q) {
    return qf_cu_cache{c.data, c.s_block, c.s_row, c.s_chunk, c.chunk, c.blocks, c.block_size,
                       (int32_t)(c.data ? c.dtype : 0), (int32_t)q};
  };
  P->k_cache = cache(p->k_cache, d->k_quant);
  P->v_cache = cache(p->v_cache, d->v_quant);
  P->page_div = qf_cuda_divisor_or_none(p->k_cache.data ? p->k_cache.block_size : 0);
  P->batch_div = qf_cuda_divisor_or_none(p->S);
  if (p->k_cache.data) {
    const qf_cache &k = p->k_cache, &v = p->v_cache;
    const int64_t starts = k.block_size - p->S + 1; /* contiguous: start indices 0 .. block_size - S */
    P->slot_lim = d->cache_layout == QKVFUSE_CACHE_CONTIGUOUS ? (starts > 0 ? starts : 0) : k.blocks * k.block_size;
    P->slot_lin = d->cache_layout != QKVFUSE_CACHE_CONTIGUOUS && k.s_block == k.block_size * k.s_row &&
                  v.s_block == v.block_size * v.s_row;
  }
  P->error_flags = p->error_flags;
  P->pdl = plan->device_pdl;
}

static bool aligned(const void *ptr, int64_t bytes) { return ((uintptr_t)ptr % (uintptr_t)bytes) == 0; }

// Whether cache c takes vectors of vec elements: its pointer and every
// stride of its layout (block, row, chunk and chunk size) whole vectors.
static bool cache_vector_ok(const qf_cache &c, int vec) {
  const int64_t es = (int64_t)qkvfuse_dtype_size(c.dtype);
  return aligned(c.data, vec * es) && c.s_block % vec == 0 && c.s_row % vec == 0 && c.s_chunk % vec == 0 &&
         c.chunk % vec == 0;
}

bool qf_cuda_vector_ok(const qf_problem *p, int vec) {
  if (p->D % vec) return false;
  const qf_mat *mats[] = {&p->in[0], &p->in[1], &p->in[2], &p->q_out, &p->k_out, &p->v_out, &p->q_copy};
  for (const qf_mat *m : mats) {
    if (!m->data) continue;
    const int64_t es = (int64_t)qkvfuse_dtype_size(m->dtype);
    if (!aligned(m->data, vec * es) || (m->rows > 1 && m->ld % vec)) return false;
  }
  const qf_cache *caches[] = {&p->k_cache, &p->v_cache};
  for (const qf_cache *c : caches)
    if (c->data && !cache_vector_ok(*c, vec)) return false;
  return true;
}

// The plan's multiprocessors (132, an H100 / H200's, where the device did not say).
static int64_t plan_sms(const qkvfuse_plan *plan) { return plan->device_sm_count > 0 ? plan->device_sm_count : 132; }

static bool aligned16(const void *ptr) { return ptr == nullptr || aligned(ptr, 16); }

// The streaming kernel's preconditions (streaming.cuh): 16-bit input, outputs of
// its dtype, rows and caches in aligned 8-element vectors, D a multiple of 16
// in [32, 512], R a multiple of 16, caches of the input dtype or quantized, no
// beta, not parity mode, small tables readable as aligned vectors, q not
// quantized.
static bool streaming_eligible(const qf_problem *p, const qf_cu_params &P) {
  const qkvfuse_dtype in = p->in[0].dtype;
  if ((in != QKVFUSE_DTYPE_BFLOAT16 && in != QKVFUSE_DTYPE_FLOAT16) || P.parity || p->q_copy.data) return false;
  // a quantized q (desc.q_quant) goes to the general kernel: the streaming
  // kernel's q items store rows of the input's dtype (store_head) and read no
  // q scale; quantizing there would add a scale load and a per-vector fp8
  // path to the q items of every call, for a q_out an fp8 attention reads
  if (p->desc->q_quant != QKVFUSE_QUANT_NONE) return false;
  if (p->D % 16 || p->D < 32 || p->D > 512 || p->R % 16 || !qf_cuda_vector_ok(p, 8)) return false;
  const qf_mat *outs[] = {&p->q_out, &p->k_out, &p->v_out};
  for (const qf_mat *m : outs)
    if (m->data && m->dtype != in) return false;
  if (p->q_beta.data || p->k_beta.data || p->weight_scale.data) return false;
  const qf_cache *caches[] = {&p->k_cache, &p->v_cache};
  const qkvfuse_quant_mode quant[] = {p->desc->k_quant, p->desc->v_quant};
  for (int i = 0; i < 2; i++)
    if (caches[i]->data && quant[i] == QKVFUSE_QUANT_NONE && caches[i]->dtype != in) return false;
  /* per-channel scales and offsets are read as vectors; per-head and per-tensor ones one at a time */
  const bool kpc = P.k_scale_pc != 0, vpc = P.v_scale_pc != 0;
  const void *tables[] = {p->q_gamma.data, p->k_gamma.data, p->cos_sin_cache.data, p->cos.data, p->sin.data,
                          kpc ? p->k_scale.data : nullptr, vpc ? p->v_scale.data : nullptr,
                          kpc ? p->k_offset.data : nullptr, vpc ? p->v_offset.data : nullptr};
  for (const void *t : tables)
    if (!aligned16(t)) return false;
  const qf_mat *rows[] = {&p->cos_sin_cache, &p->cos, &p->sin};
  for (const qf_mat *m : rows)
    if (m->data && m->rows > 1 && m->ld % 8) return false;
  return true;
}

// The call the streaming kernel serves with its dtypes and cache geometry
// compiled in (QF_FAST_HOT; streaming.cuh: kEngine): the one vLLM and SGLang make.
// cos/sin from a cos_sin_cache of the input's dtype by int64 positions, norm
// weights of the input's dtype, and a cache, if any, that is paged with
// whole rows (slot_lin: vLLM's [blocks, block_size, Nkv, D]) and a head's D
// channels contiguous, int64 slots, no int8 offsets. A page table
// (cache_addressing page_table) is not that call: the ENGINE kernels read
// slot_mapping as int64 at compile time, so its calls take the kernels that
// read their addressing from the parameters (streaming.cuh: load_token_ix).
static bool engine_call(const qf_problem *p, const qf_cu_params &P) {
  const qkvfuse_dtype in = p->in[0].dtype;
  const bool cache = p->desc->cache_layout != QKVFUSE_CACHE_NONE;
  if (cache && p->desc->cache_addressing != QKVFUSE_ADDRESS_SLOTS) return false;
  const qf_cache *caches[] = {&p->k_cache, &p->v_cache};
  for (const qf_cache *c : caches)
    if (c->data && c->chunk != p->D) return false;
  return p->desc->rope_source == QKVFUSE_ROPE_COS_SIN_CACHE && p->positions.dtype == QKVFUSE_DTYPE_INT64 &&
         p->cos_sin_cache.dtype == in && (!p->q_gamma.data || p->q_gamma.dtype == in) &&
         (!p->k_gamma.data || p->k_gamma.dtype == in) &&
         (!cache || (p->desc->cache_layout != QKVFUSE_CACHE_CONTIGUOUS && P.slot_lin &&
                     p->slot_mapping.dtype == QKVFUSE_DTYPE_INT64 && !p->k_offset.data && !p->v_offset.data));
}

// The streaming kernel's work split. Items are (token, heads_per_item heads of one
// kind); heads_per_item is the largest of 4 (2 with per-token cos/sin: registers) and 2
// that still gives about 1024 threads per multiprocessor (the prefill form
// may halve it: qf_cuda_schedule_heads_per_item). Calls too small
// for that even with two heads per item are decode-sized: they run the
// decode form (one (token, head) per group, one pass; one or two vectors per
// lane). Otherwise the prefill form runs on the resident blocks
// (prefill_blocks_per_sm per multiprocessor: 5 for the kernels that know their
// call, QF_FAST_HOT, whose 40 KB of shared memory at most leave room for
// them; else 4), each block keeping one item for the
// launch and walking its token runs (schedule.h); the blocks per
// item of each kind come from qf_cuda_schedule_heads_per_item. Shared memory
// holds the row stages and, for a quantized cache, the item's reciprocal
// scales. plan->device_form forces a form (the prefill form then goes down to
// one head per item, on one block per item).
// Sets *smem, the launch's variant bits (QF_FAST_DECODE*) and lanes per
// group; returns the grid size, or 0 if an index or the shared memory (48
// KB) would overflow (the general kernel then serves the call).
static int64_t streaming_schedule(const qkvfuse_plan *plan, const qf_problem *p, qf_cu_params *P, size_t *smem, int *variant,
                          int *lanes) {
  const int64_t sms = plan_sms(plan);
  const bool k_work = p->k_out.data || p->desc->cache_layout != QKVFUSE_CACHE_NONE;
  const bool v_work = p->v_out.data || p->desc->cache_layout != QKVFUSE_CACHE_NONE;
  const bool k_quant = p->k_cache.data && p->desc->k_quant != QKVFUSE_QUANT_NONE;
  const bool v_quant = p->v_cache.data && p->desc->v_quant != QKVFUSE_QUANT_NONE;
  const bool qcache = k_quant || v_quant; /* the call has a quantized cache */
  const int D = (int)p->D;
  const int64_t gpb = qf::prefill_groups_per_block(qf::prefill_lanes(D)), tchunks = (p->T + gpb - 1) / gpb;
  const int64_t groups_q = p->T * p->Nq, groups_kv = p->T * p->Nkv;
  const int64_t kind_heads[3] = {p->Nq, k_work ? p->Nkv : 0, v_work ? p->Nkv : 0}; /* 0: no work */
  const int64_t heads = kind_heads[0] + kind_heads[1] + kind_heads[2];
  const int form = plan->device_form;
  /* the decode form's vectors per lane: one for the smallest calls (at
     most two warps per multiprocessor: their time is one instruction
     chain's, which one vector shortens), else two */
  const int l1 = qf::decode_lanes(D, 1);
  const bool nv1 = l1 && (form == 3 || p->T * heads * l1 <= sms * 64);
  const int dlanes = nv1 ? l1 : qf::decode_lanes(D, 2);
  const int64_t dgpb = qf::kStreamingBlock / dlanes;
  int64_t units = 0;
  *smem = 0;
  auto set_items = [&](int heads_per_item) {
    P->heads_per_item = heads_per_item;
    for (int k = 0; k < 3; k++) P->items[k] = (int32_t)((kind_heads[k] + heads_per_item - 1) / heads_per_item);
  };
  bool decode = form != 2 && groups_q < 0x7fffffffLL - dgpb; /* div_fixed: indices below 2^31 */
  for (int heads_per_item = qf::max_heads_per_item(p->desc->rope_source == QKVFUSE_ROPE_COS_SIN); heads_per_item >= (form == 2 ? 1 : 2);
       heads_per_item >>= 1) {
    set_items(heads_per_item);
    units = tchunks * (P->items[0] + P->items[1] + P->items[2]);
    if (units * qf::kStreamingBlock >= sms * 1024) break;
  }
  if (form == 0 && units * qf::kStreamingBlock >= sms * 1024) decode = false;
  if (decode) {
    /* the one-vector form of a call with a quantized cache speculates its
       k and v blocks' norm weights and scales before the grid dependency
       wait (streaming.cuh: decode_kernel, PRELOAD); calls without one do not: for
       them the extra reads cost more than they hide */
    *variant |= QF_FAST_DECODE | (nv1 ? QF_FAST_DECODE_NARROW : 0) | (nv1 && qcache ? QF_FAST_PRELOAD : 0);
    *lanes = dlanes;
    P->decode_blocks_q = (int32_t)((groups_q + dgpb - 1) / dgpb);
    const int32_t blocks_kv = (int32_t)((groups_kv + dgpb - 1) / dgpb);
    P->decode_blocks_k = k_work ? blocks_kv : 0;
    P->div_q_heads = qf_cuda_divisor((uint32_t)p->Nq);
    P->div_kv_heads = qf_cuda_divisor((uint32_t)p->Nkv);
    return P->decode_blocks_q + P->decode_blocks_k + (v_work ? blocks_kv : 0);
  }
  *lanes = qf::prefill_lanes(D);
  if ((*variant & QF_FAST_HOT) && qcache) *variant |= QF_FAST_QUANT; /* its own kernel (streaming.cuh: kEngineQuant) */
  if (tchunks >= 0x7fffffffLL) return 0; /* chunk indices (+ a stride) stay below 2^32 */
  /* the late blocks (qf_cuda_schedule_late_blocks), then the resident
     blocks per item of the other runs (qf_cuda_schedule_heads_per_item);
     the forced prefill form takes three (at most one per run), so that on
     test-sized calls every block walks many runs through its stages with a
     run stride above one, the last round of runs is mostly part-filled, as
     in real prefill calls, and calls of 9 runs or more have late blocks (in
     pieces of one below 48; with a quantized cache, 10% of the runs from
     12 to 47) */
  const int64_t items = P->items[0] + P->items[1] + P->items[2];
  const int64_t slots = form == 2 ? 3 * items : sms * qf::prefill_blocks_per_sm((*variant & QF_FAST_HOT) != 0);
  int64_t piece = 1, tail = 0;
  qf_cuda_schedule_late_blocks(tchunks, items, slots, qcache, &tail, &piece);
  const int64_t head = tchunks - tail;
  const int64_t nf = head < 3 ? (head > 0 ? head : 1) : 3;
  int64_t n[3] = {nf, nf, nf};
  if (form != 2) set_items(qf_cuda_schedule_heads_per_item(head, kind_heads, P->heads_per_item, k_quant, qcache, slots, n));
  const int64_t grid = qf_cuda_schedule_prefill_grid(P, tchunks, n, tail, piece);
  if (grid >= 0x7fffffffLL) return 0;
  /* v items of a quantized cache take their lane's two vectors adjacent
     (streaming.cuh: v_adjacent), one 16-byte store of their bytes (16 one-byte
     elements) */
  P->v_adjacent = v_quant && cache_vector_ok(p->v_cache, 16);
  const bool offsets = p->k_offset.data || p->v_offset.data;
  *smem = (size_t)qf::kPrefillStages * P->heads_per_item * 2 * qf::kStreamingBlock * 16 +
          (qcache ? sizeof(float) * (offsets ? 2 : 1) * P->heads_per_item * (size_t)p->D : 0);
  if (*smem > 48 * 1024) return 0; /* the default limit of dynamic shared memory */
  return grid;
}

static qkvfuse_status qf_cuda_run(const qkvfuse_plan *plan, const qf_problem *p, void *stream) {
  qf_cu_params P;
  qf_cuda_make_params(plan, p, &P);
  device_guard g(plan->desc.device_id);
  if (g.err != cudaSuccess) return cuda_fail(g.err, "cudaSetDevice");
  const qkvfuse_dtype in = p->in[0].dtype;
  if (qf_cuda_streaming(plan->device_cc, (qf_cuda_form)plan->device_form) && streaming_eligible(p, P)) {
    size_t smem = 0;
    int variant = (p->desc->rope_style == QKVFUSE_ROPE_INTERLEAVED ? QF_FAST_INTERLEAVED : 0) |
                  (p->desc->rope_source == QKVFUSE_ROPE_COS_SIN ? QF_FAST_SEPARATE : 0);
    int lanes = 0;
    if (engine_call(p, P)) variant |= QF_FAST_HOT;
    const int64_t blocks = streaming_schedule(plan, p, &P, &smem, &variant, &lanes);
    if (blocks > 0) return qf_cuda_launch(in, 0, 0, lanes, variant, &P, (unsigned)blocks, smem, (cudaStream_t)stream);
  }
  const int in_bytes = (int)qkvfuse_dtype_size(in);
  const int vmax = 16 / in_bytes;
  const int vec = qf_cuda_vector_ok(p, vmax) ? vmax : 1;
  P.nvec = (int32_t)(p->D / vec);
  P.group = qf::pow2_at_least(P.nvec < 32 ? P.nvec : 32);
  const int nv = qf::pow2_at_least((P.nvec + P.group - 1) / P.group);
  const int64_t resident = plan_sms(plan) * qf::kGeneralBlocksPerSm;
  int tile_tokens = 1, tile_heads = 1;
  qf_cuda_schedule_general_tiles(P.T, P.heads_per_token, qf::kBlock / P.group, P.R, resident, &tile_tokens, &tile_heads);
  P.tile_tokens = tile_tokens, P.tile_heads = tile_heads, P.head_tiles = (P.heads_per_token + tile_heads - 1) / tile_heads;
  int64_t blocks = (P.T + P.tile_tokens - 1) / P.tile_tokens * P.head_tiles;
  if (blocks > resident) blocks = resident; /* the kernel walks the tiles grid-stride */
  const size_t smem = qf::general_smem_bytes(P.D, P.R, P.tile_tokens, qf::kBlock / P.group);
  return qf_cuda_launch(in, vec, nv, 0, 0, &P, (unsigned)blocks, smem, (cudaStream_t)stream);
}

// The CUDA architectures this build's device code was compiled for
// (CMAKE_CUDA_ARCHITECTURES), for messages.
#ifndef QKVFUSE_CUDA_ARCHS
#define QKVFUSE_CUDA_ARCHS "(not recorded)"
#endif

// Whether device `dev` (the current device, compute capability cc) can run
// `kernel` of `family`: this build holds a cubin of the device's family or
// PTX its driver compiles. QKVFUSE_ERROR_UNSUPPORTED naming the device and
// the build's architectures where it cannot (the runtime's own error is
// cleared: it is not the caller's).
static qkvfuse_status check_image(int dev, int cc, const void *kernel, const char *family) {
  cudaFuncAttributes attr;
  const cudaError_t e = cudaFuncGetAttributes(&attr, kernel);
  if (e == cudaSuccess) return QKVFUSE_SUCCESS;
  cudaGetLastError();
  switch (e) {
    case cudaErrorInvalidDeviceFunction:
    case cudaErrorNoKernelImageForDevice:
    case cudaErrorInvalidKernelImage:
    case cudaErrorInvalidPtx:
    case cudaErrorUnsupportedPtxVersion:
    case cudaErrorJitCompilerNotFound:
    case cudaErrorJitCompilationDisabled: break;
    default: return cuda_fail(e, "cudaFuncGetAttributes");
  }
  cudaDeviceProp prop;
  const bool named = cudaGetDeviceProperties(&prop, dev) == cudaSuccess;
  return qf_fail(QKVFUSE_ERROR_UNSUPPORTED,
                 "device_id: cuda:%d (%s, compute capability %d.%d) cannot run this build of qkvfuse, built for CUDA "
                 "architectures %s: its %s kernel has no image for the device (%s); build with "
                 "-DCMAKE_CUDA_ARCHITECTURES=%d-real (or a list that includes it)",
                 dev, named ? prop.name : "name unknown", cc / 10, cc % 10, QKVFUSE_CUDA_ARCHS, family,
                 cudaGetErrorName(e), cc);
}

// What a plan needs of a device that cannot change while the process runs:
// its multiprocessors and compute capability, checked to have images of every
// kernel family (below). The first plan for a device queries them; later ones
// (the named operators plan on every call, also inside a graph capture) read
// them. Every access is atomic, so concurrent first plans store alike.
static const int kCachedDevices = 64;
static int g_device_sms[kCachedDevices], g_device_cc[kCachedDevices], g_device_ready[kCachedDevices];

static qkvfuse_status device_facts(int dev, int *sms, int *cc) {
  if (dev < kCachedDevices && __atomic_load_n(&g_device_ready[dev], __ATOMIC_ACQUIRE)) {
    *sms = __atomic_load_n(&g_device_sms[dev], __ATOMIC_RELAXED);
    *cc = __atomic_load_n(&g_device_cc[dev], __ATOMIC_RELAXED);
    return QKVFUSE_SUCCESS;
  }
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0)
    return qf_fail(QKVFUSE_ERROR_UNSUPPORTED, "device_type: cuda requested but no CUDA device is usable (%s)",
                   e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
  QF_CHECK(dev < count, QKVFUSE_ERROR_DEVICE, "device_id: cuda:%d requested; this machine has %d device(s)", dev,
           count);
  e = cudaDeviceGetAttribute(sms, cudaDevAttrMultiProcessorCount, dev);
  int major = 0, minor = 0;
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
  if (e != cudaSuccess) return cuda_fail(e, "cudaDeviceGetAttribute");
  *cc = major * 10 + minor;
  {
    // every kernel family qkvfuse_run may launch on the device has an image
    // for it (refused here, naming the device, rather than at a launch)
    device_guard guard(dev);
    if (guard.err != cudaSuccess) return cuda_fail(guard.err, "cudaSetDevice");
    QF_FORWARD(check_image(dev, *cc, qf_cuda_general_probe(), "general"));
    if (*cc >= QF_CUDA_STREAMING_MIN_CC) QF_FORWARD(check_image(dev, *cc, qf_cuda_streaming_probe(), "streaming"));
  }
  if (dev < kCachedDevices) {
    __atomic_store_n(&g_device_sms[dev], *sms, __ATOMIC_RELAXED);
    __atomic_store_n(&g_device_cc[dev], *cc, __ATOMIC_RELAXED);
    __atomic_store_n(&g_device_ready[dev], 1, __ATOMIC_RELEASE);
  }
  return QKVFUSE_SUCCESS;
}

extern "C" qkvfuse_status qf_cuda_plan(qkvfuse_plan *plan) {
  const qkvfuse_desc *d = &plan->desc;
  int sms = 0, cc = 0;
  QF_FORWARD(device_facts(d->device_id, &sms, &cc));
  plan->device_sm_count = sms;
  plan->device_cc = cc;
  // programmatic dependent launch (launch.h): sm_90 and later, unless the
  // environment says QKVFUSE_CUDA_PDL=0
  const char *pdl = getenv("QKVFUSE_CUDA_PDL");
  plan->device_pdl = cc >= 90 && !(pdl && strcmp(pdl, "0") == 0);
  // the streaming kernel's form: by size, unless QKVFUSE_CUDA_FORM says
  // decode or prefill, or general: no streaming kernel, as below sm_80
  // (tests run each form over every shape)
  const char *form = getenv("QKVFUSE_CUDA_FORM");
  plan->device_form = !form                           ? 0
                      : strcmp(form, "decode") == 0   ? 1
                      : strcmp(form, "prefill") == 0  ? 2
                      : strcmp(form, "decode_narrow") == 0 ? 3
                      : strcmp(form, "general") == 0 ? QF_CUDA_FORM_GENERAL
                                                      : 0;
  plan->backend = QKVFUSE_BACKEND_CUDA;
  plan->backend_name = "cuda";
  plan->run = qf_cuda_run;
  plan->release = release_cuda;
  if (d->rope_source == QKVFUSE_ROPE_COMPUTED) {
    // inverse frequencies in turns per position, 0.64 fixed point: exact
    // angle reduction by a wrapping 64-bit multiply in the kernel
    const int half = (int)(d->rotary_dim / 2);
    uint64_t turns[QF_MAX_HEAD_DIM / 2];
    for (int i = 0; i < half; i++) {
      const double g = plan->inv_freq[i] / 6.283185307179586476925286766559;
      turns[i] = (uint64_t)ldexp(g - floor(g), 64);
    }
    device_guard guard(d->device_id);
    if (guard.err != cudaSuccess) return cuda_fail(guard.err, "cudaSetDevice");
    void *buf = nullptr;
    cudaError_t e = cudaMalloc(&buf, sizeof(uint64_t) * (size_t)half);
    if (e != cudaSuccess) return cuda_fail(e, "cudaMalloc (frequency table)");
    e = cudaMemcpy(buf, turns, sizeof(uint64_t) * (size_t)half, cudaMemcpyHostToDevice);
    if (e != cudaSuccess) {
      cudaFree(buf);
      return cuda_fail(e, "cudaMemcpy (frequency table)");
    }
    plan->device_state = buf;
  }
  return QKVFUSE_SUCCESS;
}
