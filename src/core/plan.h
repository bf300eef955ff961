/* SPDX-License-Identifier: Apache-2.0 */
/* The plan: a validated descriptor, the chosen backend and what can be
 * computed once (inverse frequencies). Internal: the public type is opaque. */
#ifndef QKVFUSE_CORE_PLAN_H
#define QKVFUSE_CORE_PLAN_H

#include "problem.h"
#include "qkvfuse.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Bytes of a plan's backend-owned state (qkvfuse_plan.device_state). */
#define QF_PLAN_DEVICE_STATE_BYTES 32

/* A backend runs a validated problem. CPU backends may assume every
 * data-dependent check passed; the CUDA backend must guard them itself. */
typedef qkvfuse_status (*qf_backend_run_fn)(const qkvfuse_plan *plan, const qf_problem *p, void *stream);

/* What the backend's run would do with a validated problem, in words (the
 * kernel or path, and why a faster one is passed over), into buf[n]
 * (qkvfuse_experimental_explain); NULL: the backend's name says it all. */
typedef void (*qf_backend_explain_fn)(const qkvfuse_plan *plan, const qf_problem *p, char *buf, size_t n);

/* A plan's backend variants (include/qkvfuse_experimental.h), validated by
 * the core: each NULL when not set (the backend then reads the key's
 * environment alias, else takes auto), else one of the key's value strings
 * (variants.c's tables, static). The backend reads its keys while the plan is
 * made:
 *   cpu_isa    "auto", "avx512bf16", "avx512", "avx2", "scalar": the CPU backend (cpu/isa.c)
 *   cuda_form  "auto" (by size), "decode", "decode_narrow", "prefill", "general": the
 *              CUDA backend's form (qf_cuda_plan; alias QKVFUSE_CUDA_FORM)
 *   cuda_pdl   "auto", "0", "1": the CUDA backend's launches ("auto" and "1": where the
 *              GPU has it; alias QKVFUSE_CUDA_PDL) */
typedef struct qf_variants {
  const char *cpu_isa, *cuda_form, *cuda_pdl;
} qf_variants;

/* The process-wide variants now (qkvfuse_experimental_set). */
void qf_variants_current(qf_variants *v);
/* Apply a "key=value,..." list (NULL or "": none) over *v; an error names "variants". */
qkvfuse_status qf_variants_parse(const char *list, qf_variants *v);

struct qkvfuse_plan {
  qkvfuse_desc desc;       /* normalized copy (struct_size/version current) */
  qkvfuse_backend backend; /* resolved: never AUTO */
  const char *backend_name;
  qf_backend_run_fn run;
  qf_backend_explain_fn explain;
  int num_threads;         /* resolved thread count for CPU backends */
  int isa;                 /* CPU backend: chosen instruction set (backend-defined) */
  qf_variants variants;    /* what the plan was created with (set before the backend is chosen) */
  double inv_freq[QF_MAX_HEAD_DIM / 2]; /* COMPUTED: f_i, radians per position */
  double mscale;
  /* backend-owned state, opaque to the core (the CUDA backend's device
     facts, launch options and device tables: src/cuda/state.h), held inside
     the plan so that planning allocates nothing on the host; what it owns
     is released by `release` */
  union {
    void *ptr;
    int64_t i64;
    double f64;
    unsigned char bytes[QF_PLAN_DEVICE_STATE_BYTES];
  } device_state;
  void (*release)(struct qkvfuse_plan *plan);
};

/* Fill *plan from *desc without allocating (the named one-call operators keep
 * the plan on the stack), with the process-wide variants.
 * qkvfuse_plan_create = malloc + this. */
qkvfuse_status qf_plan_init(qkvfuse_plan *plan, const qkvfuse_desc *desc);
/* The same with the variants *v (qkvfuse_experimental_plan_create). */
qkvfuse_status qf_plan_init_with(qkvfuse_plan *plan, const qkvfuse_desc *desc, const qf_variants *v);

/* qkvfuse_rope_inv_freq, naming the base `theta_name` in messages. */
qkvfuse_status qf_rope_inv_freq(double theta, const qkvfuse_rope_scaling *s, int64_t R, double *inv_freq,
                                double *mscale, const char *theta_name);

/* Release what qf_plan_init acquired (device tables); the struct itself is
 * the caller's. */
void qf_plan_release(qkvfuse_plan *plan);

/* How the caller names each tensor of qkvfuse_args, for messages: a named
 * operator reports its own argument ("q_weight", "index") where the core
 * calls it q_gamma or slot_mapping. `core` is 1 for qkvfuse_run's own names,
 * whose messages may also cite the descriptor field that requires a tensor. */
typedef struct qf_names {
  const char *qkv, *weight_scale, *act_scale, *bias;
  const char *q_gamma, *k_gamma, *q_beta, *k_beta;
  const char *positions, *cos_sin_cache, *cos, *sin;
  const char *slot_mapping, *k_scale, *v_scale, *k_offset, *v_offset;
  const char *q_out, *k_out, *v_out, *k_cache, *v_cache, *error_flags;
  const char *q_copy;
  int core;
  const char *q, *k, *v, *q_scale, *kv_indptr, *kv_indices, *batch_indices, *kv_positions; /* version 2 */
} qf_names;

extern const qf_names qf_core_names;

/* One call as a named operator makes it: its argument names, and q_copy, a
 * second destination of q (QkvRmsNormRopeCache's q_out_before_quant) or NULL.
 * q_copy is validated and overlap-checked like every other output. check,
 * when set, runs on the validated problem before anything is written (and for
 * T = 0 too): the named operators' strict option (strict.c), with ctx. */
typedef struct qf_call {
  const qf_names *names;
  const qkvfuse_tensor *q_copy;
  qkvfuse_status (*check)(const qf_problem *p, const void *ctx);
  const void *ctx;
} qf_call;

/* Validate args against the plan (shapes, dtypes, strides, alignment, overlap
 * of every tensor and error_flags; for CPU plans also positions, slots and
 * scales, unless strided vectors wait for qf_resolve_gather) and resolve them
 * into *p. Writes nothing but *p, and on a CPU data error the bits of
 * *args->error_flags. call may be NULL (qkvfuse_run's names, no q_copy). */
qkvfuse_status qf_resolve_call(const qkvfuse_plan *plan, const qkvfuse_args *args, const qf_call *call,
                               qf_problem *p);

/* After qf_resolve_call left strided vectors of a CPU call to gather
 * (p->ngather > 0; T > 0): copy each into buf and point the problem at the
 * copies, then make the data checks qf_resolve_call left for them (positions,
 * slots, scales). buf must outlive the run. */
qkvfuse_status qf_resolve_gather(qf_problem *p, qf_gather_buf *buf);

/* qf_resolve_call with qkvfuse_run's names, for callers that read the
 * vectors in place: a strided vector is QKVFUSE_ERROR_STRIDE. */
qkvfuse_status qf_resolve(const qkvfuse_plan *plan, const qkvfuse_args *args, qf_problem *p);

/* Resolve and run (no-op for T = 0), without touching the thread's error
 * message first; call as in qf_resolve_call. */
qkvfuse_status qf_plan_run(const qkvfuse_plan *plan, const qkvfuse_args *args, const qf_call *call, void *stream);

/* Backends. */
qkvfuse_status qf_reference_run(const qkvfuse_plan *plan, const qf_problem *p, void *stream);

#ifdef __cplusplus
}
#endif

#endif /* QKVFUSE_CORE_PLAN_H */
