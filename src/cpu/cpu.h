/* SPDX-License-Identifier: Apache-2.0 */
/* The optimized CPU backend: internal interface between the ISA-independent
 * driver (backend.c: ISA choice, threads, token partition) and the kernels,
 * which are one template (kernels.h) compiled once per instruction set.
 *
 * Every kernel computes each element with the same float32 operations, in
 * the same order, as the scalar reference (reference/stages.h); only the
 * layout of the work in vector lanes differs. The per-head sum of squares of
 * RMSNorm, the one reduction, is accumulated in the reference's sequential
 * order with heads in lanes (a register transpose). So every ISA path is
 * bit-identical to the reference and to the others, whatever the thread
 * count. */
#ifndef QKVFUSE_CPU_CPU_H
#define QKVFUSE_CPU_CPU_H

#include <stddef.h>
#include <stdint.h>

#include "core/plan.h"
#include "cpu/unfused_stages.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Instruction sets, in increasing order of preference. plan->isa holds one. */
typedef enum qf_cpu_isa {
  QF_CPU_ISA_SCALAR = 0,     /* portable C: the kernels with one lane */
  QF_CPU_ISA_AVX2 = 1,       /* AVX2 + F16C, 8 float lanes */
  QF_CPU_ISA_AVX512 = 2,     /* AVX-512 F/BW/VL/DQ, 16 float lanes */
  QF_CPU_ISA_AVX512BF16 = 3, /* the same plus AVX512_BF16 (VCVTNEPS2BF16 for bfloat16 stores) */
  QF_CPU_ISA_COUNT
} qf_cpu_isa;

/* How many tokens ahead the kernels prefetch (kernels.h; the fused kernels
 * get the exact token from the driver, the unfused stages use t + this). */
#define QF_CPU_PREFETCH_TOKENS 2

/* The environment variable that forces an ISA at plan time: the documented
 * alias of the variant cpu.isa, read when a plan has no cpu.isa. */
#define QF_CPU_ISA_ENV "QKVFUSE_CPU_ISA"

/* "scalar", "avx2", "avx512", "avx512bf16". */
const char *qf_cpu_isa_name(qf_cpu_isa isa);
/* 1 if this build has the ISA's kernels and this CPU (and OS) can run them. */
int qf_cpu_isa_usable(qf_cpu_isa isa);
/* The ISA a plan with variants v gets: v->cpu_isa when set, else
 * QKVFUSE_CPU_ISA when set, else auto; auto is the best usable one.
 * QKVFUSE_ERROR_UNSUPPORTED with a message naming the variant or the variable
 * for an unknown value or an ISA this build or CPU lacks. */
qkvfuse_status qf_cpu_isa_choose(const qf_variants *v, qf_cpu_isa *isa);

/* Why a call cannot take the direct path (kernel_direct.h: one pass per head
 * from the input) with vectors of `lanes` float32 lanes, or NULL where it
 * can: every head's dims, its rotated part and the RoPE pairs' halves fill
 * whole vectors. The buffered path (kernel_buffered.h) serves the rest. */
static inline const char *qf_cpu_direct_refusal(const qf_problem *p, int lanes) {
  const int64_t D = p->D, R = p->R;
  if (lanes <= 1) return "the scalar kernels have no direct path";
  if (D % lanes || (D - R) % lanes) return "head_dim or head_dim - rotary_dim is not a multiple of the vector width";
  if (p->desc->rope_style == QKVFUSE_ROPE_INTERLEAVED ? R % lanes : (R / 2) % lanes)
    return p->desc->rope_style == QKVFUSE_ROPE_INTERLEAVED ? "rotary_dim is not a multiple of the vector width"
                                                           : "rotary_dim / 2 is not a multiple of the vector width";
  return NULL;
}

/* One call of the fused op as the kernels see it: the problem plus what the
 * driver prepares once per call (read-only while the workers run). */
typedef struct qf_cpu_call {
  const qf_problem *p;
  int parity;    /* desc.rounding == UNFUSED_PARITY: round to p->io_dtype between stages */
  int int_input; /* qkv is int32 (dequant) */
  /* RMSNorm weights as float32, (1 + g) already applied for gamma_offset;
   * beta == NULL when absent. [D] each. */
  float q_gamma[QF_MAX_HEAD_DIM], k_gamma[QF_MAX_HEAD_DIM];
  float q_beta_buf[QF_MAX_HEAD_DIM], k_beta_buf[QF_MAX_HEAD_DIM];
  const float *q_beta, *k_beta;
  /* element sizes in bytes */
  size_t es_in, es_q_out, es_k_out, es_v_out, es_k_cache, es_v_cache;
} qf_cpu_call;

/* The kernels of one ISA. */
typedef struct qf_cpu_kernels {
  qf_cpu_isa isa;
  int lanes; /* float32 lanes of a vector (QV_W) */
  /* RMSNorm weights of p as float32 [D]: g = gamma (1 + gamma with
   * gamma_offset), b = beta when present (as qf_stage_rmsnorm loads them). */
  void (*norm_weights)(const qf_problem *p, const qf_vec *gamma, const qf_vec *beta, float *g, float *b);
  /* The full-length (R) cos and sin of token t (qf_stage_cos_sin). */
  void (*cos_sin)(const qf_problem *p, int64_t t, float *cos_r, float *sin_r);
  /* Token t: its q heads [q0, q1) (load or dequant, RMSNorm, RoPE, store
   * to q_out; none where q0 == q1); when do_kv, its k heads the same way to
   * k_out, and its v heads (load or dequant) to v_out, both into the caches
   * at (block, row) when have_dest. cos_r/sin_r: the token's full-length cos
   * and sin (R values; unused without RoPE). q_ahead / kv_ahead: the next
   * token whose q / kv heads this thread does, for prefetching (-1: none). */
  void (*token)(const qf_cpu_call *c, int64_t t, const float *cos_r, const float *sin_r, int64_t q0, int64_t q1,
                int64_t q_ahead, int do_kv, int64_t kv_ahead, int have_dest, int64_t block, int64_t row);
  /* The same stage math, stage by stage, for the benchmark's unfused chain (unfused_stages.h). */
  qf_unfused_kernels unfused;
} qf_cpu_kernels;

/* The kernels of an ISA this build has (NULL otherwise). */
const qf_cpu_kernels *qf_cpu_kernels_for(qf_cpu_isa isa);

/* Fill a call's prepared fields for problem p, with the kernels k. */
void qf_cpu_call_init(qf_cpu_call *c, const qf_cpu_kernels *k, const qf_problem *p);

/* The stage kernels of plan's ISA (unfused_stages.h), for the benchmark's
 * unfused chain; NULL unless plan is a CPU-backend plan. */
const qf_unfused_kernels *qf_cpu_unfused_kernels(const qkvfuse_plan *plan);

#ifdef __cplusplus
}
#endif

#endif /* QKVFUSE_CPU_CPU_H */
