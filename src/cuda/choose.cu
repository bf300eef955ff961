// SPDX-License-Identifier: Apache-2.0
// The CUDA backend's one choice: which kernel runs a call, its instantiation
// and its schedule (qf_cuda_choose).
#include "cuda/backend.h"
#include "cuda/general.cuh"
#include "cuda/prefill.cuh"
#include "cuda/schedule.h"
#include "cuda/state.h"
#include "cuda/variant.h"

// A divisor for div_by: none (0) where d does not fit 31 bits.
static qf_cu_div divisor_or_none(int64_t d) {
  return d > 0 && d < ((int64_t)1 << 31) ? qf_cuda_divisor((uint32_t)d) : qf_cu_div{0, 0, 0};
}

// The plan's multiprocessors (132, an H100 / H200's, where the device did not say).
static int64_t plan_sms(const qf_cuda_state &state) { return state.sm_count > 0 ? state.sm_count : 132; }

// The dynamic shared memory that spreads a grid of `blocks` blocks, each
// able to hold `resident` per multiprocessor, over the multiprocessors:
// enough that at most cap = ceil(blocks / sms) of them fit on one (the
// kernel reads none of it), or 0 where that limit is not below `resident`
// or the grid is one block. The block scheduler fills a multiprocessor
// before the next, so a grid under one wave would otherwise run on a part
// of them. Bytes: smem_per_sm / cap less 4 KB for each block's static and
// reserved shared memory (each at most 1 KB for the decode kernels on
// sm_80 to sm_90): cap blocks fit and cap + 1 do not while smem_per_sm >
// 4 KB cap (cap + 1); one per multiprocessor (cap = 1): half of it, so that
// two do not fit (nor one of the previous launch's beside it).
static size_t spread_smem(const qf_cuda_state &state, int64_t blocks, int resident) {
  const int64_t sms = plan_sms(state), cap = (blocks + sms - 1) / sms;
  if (blocks < 2 || cap >= resident || state.smem_per_sm <= 0) return 0;
  if (cap == 1) return (size_t)(state.smem_per_sm / 2);
  const int64_t bytes = state.smem_per_sm / cap - 4096;
  return bytes > 4096 * (cap + 1) ? (size_t)bytes : 0;
}

// The streaming kernel's form and schedule, its parameters in K's member of
// the form; returns why it cannot run the call (an index or the shared
// memory would overflow), or nullptr.
//
// Decode-sized calls run the decode form (one (token, head) per group, one
// pass): 16-bit input while its grid is at most five quarters of a wave of
// resident blocks (decode_blocks_per_sm per multiprocessor; just past one
// wave each prefill block walks a token run or two behind its own chain of
// loads, slower than the decode form's short second wave), the append call's
// with a norm while it fits one wave, without one while it takes at most two
// waves and no more waves than the prefill form takes rounds of its resident
// blocks (one (item, run) unit per block each round: the decode form's round
// is the shorter; from three the prefill form's pipelined walks are the
// faster), int32 input while the prefill form would have under 400 threads
// per multiprocessor (up to there the int32 call's decode kernels are the
// faster); each limit's measurements: the form_scan, decode_waves_ab,
// append_limit_ab and int32_decode_ab rows of docs/bench/h100.jsonl. The
// decode form takes one vector per lane (narrow) where that is at most two
// warps per multiprocessor (their time is one instruction chain's, which one
// vector shortens), with interleaved pairs also while its grid fits one wave
// (qf_cuda_schedule_narrow), else two. The prefill form's items are (token,
// heads_per_item heads of one kind); heads_per_item is the largest of 4 (2
// with per-token cos/sin: registers; 2 with int32 input: its stages are
// twice as large) and 2 that still gives about 1024 threads per
// multiprocessor (the prefill form may halve it:
// qf_cuda_schedule_heads_per_item). It runs on the resident blocks
// (prefill_blocks_per_sm per multiprocessor), each keeping one item for the
// launch and walking its token runs (schedule.h). Shared memory holds the
// row stages, for int32 input the item's weight scales and for a quantized
// cache its reciprocal scales. The plan's form may force one form (the
// prefill form then goes down to one head per item).
static const char *streaming_schedule(const qf_cuda_state &state, const qf_problem *p, const qf_cu_problem &problem,
                                      qf_cu_kernel_params *K, qf_cuda_variant *v) {
  const int64_t sms = plan_sms(state);
  const qf_cuda_form form = state.form;
  const bool k_work = p->k_out.data || p->desc->cache_layout != QKVFUSE_CACHE_NONE;
  const bool v_work = p->v_out.data || p->desc->cache_layout != QKVFUSE_CACHE_NONE;
  const bool k_quant = p->k_cache.data && p->desc->k_quant != QKVFUSE_QUANT_NONE;
  const bool v_quant = p->v_cache.data && p->desc->v_quant != QKVFUSE_QUANT_NONE;
  const bool quantized_cache = k_quant || v_quant;
  const int D = (int)p->D;
  const bool i32 = p->in[0].dtype == QKVFUSE_DTYPE_INT32; /* prefill form: two heads per item */
  const int64_t gpb = qf::prefill_groups_per_block(qf::prefill_lanes(D)), runs = (p->T + gpb - 1) / gpb;
  const int64_t groups = p->T * (p->Nq > p->Nkv ? p->Nq : p->Nkv); /* of the kind with most heads */
  const int64_t kind_heads[3] = {p->Nq, k_work ? p->Nkv : 0, v_work ? p->Nkv : 0}; /* 0: no work */
  const int engine = qf::engine_bits(v->engine), decode_resident = qf::decode_blocks_per_sm(engine);
  const int narrow_lanes = qf::decode_lanes(D, 1);
  /* forced, each decode form is one kernel: decode two vectors per lane, decode_narrow one (D <= 256) */
  const bool narrow =
      narrow_lanes && (form == QF_CUDA_FORM_DECODE_NARROW ||
                       (form == QF_CUDA_FORM_BY_SIZE &&
                        qf_cuda_schedule_narrow(p->T, kind_heads, narrow_lanes, qf::kStreamingBlock / narrow_lanes,
                                                sms, decode_resident, v->interleaved)));
  const int decode_lanes = narrow ? narrow_lanes : qf::decode_lanes(D, 2);
  const int64_t decode_gpb = qf::kStreamingBlock / decode_lanes;
  int64_t units = 0;
  qf_cu_prefill_params P = {}; /* the prefill form's, its items set first: they decide the form */
  P.problem = problem;
  auto set_items = [&](int heads_per_item) {
    P.heads_per_item = heads_per_item;
    for (int k = 0; k < 3; k++) P.items[k] = (int32_t)((kind_heads[k] + heads_per_item - 1) / heads_per_item);
  };
  /* div_fixed: indices below 2^31 */
  bool decode = form != QF_CUDA_FORM_PREFILL && groups < 0x7fffffffLL - decode_gpb;
  for (int h = qf::max_heads_per_item(v->cos_sin_rows || i32); h >= (form == QF_CUDA_FORM_PREFILL ? 1 : 2); h >>= 1) {
    set_items(h);
    units = runs * (P.items[0] + P.items[1] + P.items[2]);
    if (units * qf::kStreamingBlock >= sms * 1024) break;
  }
  int64_t decode_kind_blocks[3];
  const int64_t decode_blocks = qf_cuda_schedule_decode_grid(p->T, kind_heads, decode_gpb, decode_kind_blocks);
  const int64_t wave = sms * decode_resident;
  bool decode_over; /* past the decode form's limit (above) */
  if (qf::append_without_norm(engine)) { /* waves of decode blocks against rounds of prefill units */
    const int64_t slots = sms * qf::prefill_blocks_per_sm(engine);
    const int64_t waves = (decode_blocks + wave - 1) / wave, rounds = (units + slots - 1) / slots;
    decode_over = waves > 2 || waves > rounds;
  } else {
    decode_over = decode_blocks > ((engine & qf::kEngineAppend) ? wave : wave + wave / 4);
  }
  if (form == QF_CUDA_FORM_BY_SIZE && (i32 ? units * qf::kStreamingBlock >= sms * 400 : decode_over))
    decode = false;
  if (decode) {
    v->kernel = narrow ? QF_CUDA_KERNEL_DECODE_NARROW : QF_CUDA_KERNEL_DECODE;
    /* preload where the call has a quantized cache: without one the extra
       reads cost more than they hide (int32 input: the weight scales are
       read with the row; no preload) */
    v->preload = narrow && quantized_cache && !i32;
    v->lanes = decode_lanes;
    qf_cu_decode_params &Q = K->decode;
    Q = {};
    Q.problem = problem;
    Q.decode_blocks_q = (int32_t)decode_kind_blocks[0]; /* decode: groups < 2^31 */
    Q.decode_blocks_k = (int32_t)decode_kind_blocks[1];
    Q.div_q_heads = qf_cuda_divisor((uint32_t)p->Nq);
    Q.div_kv_heads = qf_cuda_divisor((uint32_t)p->Nkv);
    Q.page_div = divisor_or_none(p->k_cache.data ? p->k_cache.block_size : 0);
    Q.batch_div = divisor_or_none(p->S);
    v->blocks = (unsigned)decode_blocks;
    /* decode_resident holds for both forms: the narrow form's kernels fit
       at least as many blocks (decode_blocks_per_sm) */
    v->smem = spread_smem(state, decode_blocks, decode_resident);
    return nullptr;
  }
  v->kernel = QF_CUDA_KERNEL_PREFILL;
  v->lanes = qf::prefill_lanes(D);
  v->quantized_cache = v->engine != QF_CUDA_ENGINE_NONE && !i32 && quantized_cache; /* its own kernel (kEngineQuant) */
  if (runs >= 0x7fffffffLL) return "more token runs than 32-bit indices reach"; /* a run (+ a stride) < 2^32 */
  /* the late blocks, then the resident blocks per item of the other runs;
     the forced prefill form takes three (at most one per run), so that on
     test-sized calls every block walks many runs through its stages with a
     run stride above one, the last round of runs is mostly part-filled, as
     in real prefill calls, and calls of 9 runs or more have late blocks (in
     pieces of one below 48; with a quantized cache, 10% of the runs from
     12 to 47) */
  const int64_t items = P.items[0] + P.items[1] + P.items[2];
  const int64_t resident =
      form == QF_CUDA_FORM_PREFILL ? 3 * items : sms * qf::prefill_blocks_per_sm(engine);
  int64_t piece = 1, late_runs = 0;
  qf_cuda_schedule_late_blocks(runs, items, resident, quantized_cache, &late_runs, &piece);
  const int64_t resident_runs = runs - late_runs;
  const int64_t forced = resident_runs < 3 ? (resident_runs > 0 ? resident_runs : 1) : 3;
  int64_t n[3] = {forced, forced, forced};
  if (form != QF_CUDA_FORM_PREFILL)
    set_items(qf_cuda_schedule_heads_per_item(resident_runs, kind_heads, P.heads_per_item, k_quant,
                                              quantized_cache, resident, n));
  const int64_t grid = qf_cuda_schedule_prefill_grid(&P, runs, n, late_runs, piece);
  if (grid >= 0x7fffffffLL) return "more blocks than 31-bit indices reach";
  /* v items of a quantized cache take their lane's two vectors adjacent
     (prefill.cuh: v_adjacent), one 16-byte store of their 16 bytes */
  P.v_adjacent = v_quant && !i32 && qf_cuda_cache_vector_ok(&p->v_cache, 16);
  const bool offsets = p->k_offset.data || p->v_offset.data;
  /* stages (int32: 32-byte vectors), the dequantization and quantization
     tables (the append call reads one scale per cache: no table) */
  const bool qtable = quantized_cache && !(engine & qf::kEngineAppend);
  v->smem = (size_t)qf::kPrefillStages * P.heads_per_item * (i32 ? 4 : 2) * qf::kStreamingBlock * 16 +
            (i32 ? sizeof(float) * P.heads_per_item * (size_t)p->D : 0) +
            (qtable ? sizeof(float) * (offsets ? 2 : 1) * P.heads_per_item * (size_t)p->D : 0);
  /* the default limit of dynamic shared memory */
  if (v->smem > 48 * 1024) return "shared memory over 48 KB";
  v->blocks = (unsigned)grid;
  K->prefill = P;
  return nullptr;
}

// The general kernel's instantiation and tiles (schedule.h:
// qf_cuda_schedule_general_tiles): 16-byte vectors where every row and cache
// allows them, else single elements; a power-of-two group of lanes per head.
static void general_schedule(const qf_cuda_state &state, const qf_problem *p, const qf_cu_problem &problem,
                             qf_cu_kernel_params *K, qf_cuda_variant *v) {
  v->kernel = QF_CUDA_KERNEL_GENERAL;
  qf_cu_general_params &G = K->general;
  G = {};
  G.problem = problem;
  const int vmax = 16 / (int)qkvfuse_dtype_size(p->in[0].dtype);
  v->vec = qf_cuda_vector_ok(p, vmax) ? vmax : 1;
  G.nvec = (int32_t)(p->D / v->vec);
  G.group = qf::pow2_at_least(G.nvec < 32 ? G.nvec : 32);
  v->vecs_per_lane = qf::pow2_at_least((G.nvec + G.group - 1) / G.group);
  const int64_t resident = plan_sms(state) * qf::kGeneralBlocksPerSm;
  int tile_tokens = 1, tile_heads = 1;
  qf_cuda_schedule_general_tiles(problem.T, problem.heads_per_token, qf::kBlock / G.group, problem.R, resident,
                                 &tile_tokens, &tile_heads);
  G.tile_tokens = tile_tokens, G.tile_heads = tile_heads;
  G.head_tiles = (problem.heads_per_token + tile_heads - 1) / tile_heads;
  int64_t blocks = (problem.T + tile_tokens - 1) / tile_tokens * G.head_tiles;
  if (blocks > resident) blocks = resident; /* the kernel walks the tiles grid-stride */
  v->blocks = (unsigned)blocks;
  v->smem = qf::general_smem_bytes(problem.D, problem.R, tile_tokens, qf::kBlock / G.group);
}

qf_cuda_variant qf_cuda_choose(const qf_cuda_state &state, const qf_problem *p, const qf_cu_problem &problem,
                               qf_cu_kernel_params *K) {
  qf_cuda_variant v = {};
  v.input = p->in[0].dtype;
  v.pdl = state.pdl != 0;
  if (!qf_cuda_streaming(state.cc, state.form))
    v.refused = state.form == QF_CUDA_FORM_GENERAL ? "cuda.form is general" : "a device below sm_80";
  else
    v.refused = qf_cuda_streaming_refusal(p, &problem);
  if (!v.refused) {
    v.io16 = qf_cuda_streaming_type(p);
    v.interleaved = p->desc->rope_style == QKVFUSE_ROPE_INTERLEAVED;
    v.cos_sin_rows = p->desc->rope_source == QKVFUSE_ROPE_COS_SIN;
    v.engine = qf_cuda_engine_call(p, &problem);
    v.refused = streaming_schedule(state, p, problem, K, &v);
    if (!v.refused) return v;
  }
  qf_cuda_variant g = {};
  g.input = v.input, g.refused = v.refused, g.pdl = v.pdl;
  general_schedule(state, p, problem, K, &g);
  return g;
}
