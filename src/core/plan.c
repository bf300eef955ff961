/* SPDX-License-Identifier: Apache-2.0 */
/* Descriptor validation, backend choice, and the run entry point. */
#include "core/plan.h"

#include <math.h>
#include <stdlib.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "core/backends.h"
#include "core/error.h"
#include "qkvfuse_experimental.h"

static int is_bool(int32_t v) { return v == 0 || v == 1; }

static qkvfuse_status check_desc(const qkvfuse_desc *d) {
  QF_CHECK(d->num_q_heads >= 1, QKVFUSE_ERROR_INVALID_VALUE, "num_q_heads: must be >= 1; got %lld",
           (long long)d->num_q_heads);
  QF_CHECK(d->num_kv_heads >= 1, QKVFUSE_ERROR_INVALID_VALUE, "num_kv_heads: must be >= 1; got %lld",
           (long long)d->num_kv_heads);
  QF_CHECK(d->num_q_heads <= ((int64_t)1 << 24) && d->num_kv_heads <= ((int64_t)1 << 24), QKVFUSE_ERROR_INVALID_VALUE,
           "num_q_heads: must be <= 2^24; got %lld", (long long)d->num_q_heads);
  QF_CHECK(d->head_dim >= QF_MIN_HEAD_DIM && d->head_dim <= QF_MAX_HEAD_DIM && d->head_dim % 2 == 0,
           QKVFUSE_ERROR_INVALID_VALUE, "head_dim: must be even and in [%d, %d]; got %lld", QF_MIN_HEAD_DIM,
           QF_MAX_HEAD_DIM, (long long)d->head_dim);
  QF_CHECK((unsigned)d->rope_source < QKVFUSE_ROPE_SOURCE_COUNT,
           QKVFUSE_ERROR_INVALID_VALUE, "rope_source: unknown value %d", (int)d->rope_source);
  QF_CHECK((unsigned)d->rope_style < QKVFUSE_ROPE_STYLE_COUNT,
           QKVFUSE_ERROR_INVALID_VALUE, "rope_style: unknown value %d", (int)d->rope_style);
  if (d->rope_source == QKVFUSE_ROPE_NONE) {
    QF_CHECK(d->rotary_dim == 0, QKVFUSE_ERROR_INVALID_VALUE,
             "rotary_dim: must be 0 with rope_source none; got %lld", (long long)d->rotary_dim);
  } else {
    QF_CHECK(d->rotary_dim >= 2 && d->rotary_dim <= d->head_dim && d->rotary_dim % 2 == 0,
             QKVFUSE_ERROR_INVALID_VALUE, "rotary_dim: must be even and in [2, head_dim = %lld]; got %lld",
             (long long)d->head_dim, (long long)d->rotary_dim);
  }
  QF_CHECK(d->eps > 0.0f && isfinite(d->eps), QKVFUSE_ERROR_INVALID_VALUE, "eps: must be finite and > 0; got %g",
           (double)d->eps);
  QF_CHECK(is_bool(d->q_norm), QKVFUSE_ERROR_INVALID_VALUE, "q_norm: must be 0 or 1; got %d", (int)d->q_norm);
  QF_CHECK(is_bool(d->k_norm), QKVFUSE_ERROR_INVALID_VALUE, "k_norm: must be 0 or 1; got %d", (int)d->k_norm);
  QF_CHECK(is_bool(d->gamma_offset), QKVFUSE_ERROR_INVALID_VALUE, "gamma_offset: must be 0 or 1; got %d",
           (int)d->gamma_offset);
  QF_CHECK((unsigned)d->cache_layout < QKVFUSE_CACHE_LAYOUT_COUNT,
           QKVFUSE_ERROR_INVALID_VALUE, "cache_layout: unknown value %d", (int)d->cache_layout);
  QF_CHECK((unsigned)d->k_quant < QKVFUSE_QUANT_COUNT, QKVFUSE_ERROR_INVALID_VALUE,
           "k_quant: unknown value %d", (int)d->k_quant);
  QF_CHECK((unsigned)d->v_quant < QKVFUSE_QUANT_COUNT, QKVFUSE_ERROR_INVALID_VALUE,
           "v_quant: unknown value %d", (int)d->v_quant);
  QF_CHECK((unsigned)d->cache_addressing < QKVFUSE_ADDRESS_COUNT,
           QKVFUSE_ERROR_INVALID_VALUE, "cache_addressing: unknown value %d", (int)d->cache_addressing);
  /* a page table addresses blocks and rows: the contiguous layout has neither */
  QF_CHECK(d->cache_addressing == QKVFUSE_ADDRESS_SLOTS || d->cache_layout == QKVFUSE_CACHE_PAGED ||
               d->cache_layout == QKVFUSE_CACHE_PAGED_HND || d->cache_layout == QKVFUSE_CACHE_NZ,
           QKVFUSE_ERROR_INVALID_VALUE,
           "cache_addressing: page_table needs cache_layout paged, paged_hnd or nz; got cache_layout %d",
           (int)d->cache_layout);
  /* q is quantized to fp8 only: an attention kernel reads an fp8 q, an int8 q has no consumer */
  QF_CHECK(d->q_quant == QKVFUSE_QUANT_NONE || d->q_quant == QKVFUSE_QUANT_FP8_E4M3 ||
               d->q_quant == QKVFUSE_QUANT_FP8_E5M2,
           QKVFUSE_ERROR_INVALID_VALUE, "q_quant: must be none (0), fp8_e4m3 (3) or fp8_e5m2 (4); got %d",
           (int)d->q_quant);
  QF_CHECK(d->cache_layout != QKVFUSE_CACHE_NONE || (d->k_quant == QKVFUSE_QUANT_NONE && d->v_quant == QKVFUSE_QUANT_NONE),
           QKVFUSE_ERROR_INVALID_VALUE, "k_quant: quantization needs a cache; cache_layout is none");
  QF_CHECK((unsigned)d->rounding < QKVFUSE_ROUNDING_COUNT,
           QKVFUSE_ERROR_INVALID_VALUE, "rounding: unknown value %d", (int)d->rounding);
  QF_CHECK(d->num_threads >= 0, QKVFUSE_ERROR_INVALID_VALUE, "num_threads: must be >= 0; got %d",
           (int)d->num_threads);
  QF_CHECK(d->device_type == QKVFUSE_DEVICE_CPU || d->device_type == QKVFUSE_DEVICE_CUDA,
           QKVFUSE_ERROR_INVALID_VALUE, "device_type: must be cpu (1) or cuda (2); got %d", (int)d->device_type);
  QF_CHECK(d->device_id >= 0, QKVFUSE_ERROR_INVALID_VALUE, "device_id: must be >= 0; got %d", (int)d->device_id);
  QF_CHECK((unsigned)d->backend < QKVFUSE_BACKEND_COUNT, QKVFUSE_ERROR_INVALID_VALUE,
           "backend: unknown value %d", (int)d->backend);
  return QKVFUSE_SUCCESS;
}

/* Choose the implementation for the plan's device. */
static qkvfuse_status choose_backend(qkvfuse_plan *plan) {
  const qkvfuse_desc *d = &plan->desc;
  qkvfuse_backend b = d->backend;
  if (d->device_type == QKVFUSE_DEVICE_CUDA) {
    QF_CHECK(b == QKVFUSE_BACKEND_AUTO || b == QKVFUSE_BACKEND_CUDA, QKVFUSE_ERROR_UNSUPPORTED,
             "backend: %s runs on the CPU; the plan's device is cuda",
             b == QKVFUSE_BACKEND_REFERENCE ? "reference" : "cpu");
    /* the modes that reproduce an Ascend kernel's arithmetic run on the CPU only */
    QF_CHECK(d->rounding != QKVFUSE_ROUNDING_ASCEND_TRITON && d->rounding != QKVFUSE_ROUNDING_CANN,
             QKVFUSE_ERROR_UNSUPPORTED,
             "rounding: %s (an Ascend kernel's rounding order) runs on the CPU backends only; the plan's device is "
             "cuda (use fused or unfused_parity there)",
             d->rounding == QKVFUSE_ROUNDING_CANN ? "cann" : "ascend_triton");
    return qf_cuda_plan(plan);
  }
  QF_CHECK(b != QKVFUSE_BACKEND_CUDA, QKVFUSE_ERROR_UNSUPPORTED,
           "backend: cuda needs device_type cuda; the plan's device is cpu");
  if (b == QKVFUSE_BACKEND_CPU || b == QKVFUSE_BACKEND_AUTO) {
    qkvfuse_status s = qf_cpu_plan(plan);
    if (s == QKVFUSE_SUCCESS || b == QKVFUSE_BACKEND_CPU) return s;
    qf_clear_error(); /* AUTO: fall back to the reference */
  }
  plan->backend = QKVFUSE_BACKEND_REFERENCE;
  plan->backend_name = "reference";
  plan->run = qf_reference_run;
  plan->num_threads = 1;
  return QKVFUSE_SUCCESS;
}

qkvfuse_status qf_plan_init(qkvfuse_plan *plan, const qkvfuse_desc *desc) {
  qf_variants v;
  qf_variants_current(&v);
  return qf_plan_init_with(plan, desc, &v);
}

qkvfuse_status qf_plan_init_with(qkvfuse_plan *plan, const qkvfuse_desc *desc, const qf_variants *v) {
  QF_CHECK(desc != NULL, QKVFUSE_ERROR_NULL_POINTER, "desc: NULL");
  /* version 1 is version 2 without q_quant (NONE) */
  const int v1 = desc->struct_size == offsetof(qkvfuse_desc, q_quant) && desc->version == 1;
  QF_CHECK(v1 || (desc->struct_size == sizeof(qkvfuse_desc) && desc->version == QKVFUSE_DESC_VERSION),
           QKVFUSE_ERROR_VERSION,
           "desc: struct_size/version must be %zu/%d or %zu/1 (start from QKVFUSE_DESC_INIT); got %u/%u",
           sizeof(qkvfuse_desc), QKVFUSE_DESC_VERSION, offsetof(qkvfuse_desc, q_quant), desc->struct_size,
           desc->version);
  qkvfuse_desc full = QKVFUSE_DESC_INIT;
  memcpy(&full, desc, desc->struct_size);
  full.struct_size = sizeof full;
  full.version = QKVFUSE_DESC_VERSION;
  desc = &full;
  QF_FORWARD(check_desc(desc));
  memset(plan, 0, sizeof *plan);
  plan->desc = *desc;
  plan->variants = *v;
  plan->mscale = 1.0;
  if (desc->rope_source == QKVFUSE_ROPE_COMPUTED) {
    QF_FORWARD(qf_rope_inv_freq(desc->rope_theta, &desc->rope_scaling, desc->rotary_dim, plan->inv_freq,
                                &plan->mscale, "rope_theta"));
  }
  return choose_backend(plan);
}

qkvfuse_status qkvfuse_plan_create(const qkvfuse_desc *desc, qkvfuse_plan **out) {
  qf_clear_error();
  QF_CHECK(out != NULL, QKVFUSE_ERROR_NULL_POINTER, "plan: the output pointer is NULL");
  *out = NULL;
  qkvfuse_plan *plan = (qkvfuse_plan *)malloc(sizeof *plan);
  QF_CHECK(plan != NULL, QKVFUSE_ERROR_OUT_OF_MEMORY, "plan: out of host memory (%zu bytes)", sizeof *plan);
  qkvfuse_status s = qf_plan_init(plan, desc);
  if (s != QKVFUSE_SUCCESS) {
    free(plan);
    return s;
  }
  *out = plan;
  return QKVFUSE_SUCCESS;
}

void qf_plan_release(qkvfuse_plan *plan) {
  if (plan && plan->release) plan->release(plan);
}

void qkvfuse_plan_destroy(qkvfuse_plan *plan) {
  qf_plan_release(plan);
  free(plan);
}

const char *qkvfuse_plan_backend_name(const qkvfuse_plan *plan) { return plan ? plan->backend_name : "?"; }

/* q_copy on the CPU: the rows of q_out again (see problem.h), element by
 * element where a row is strided (a reference plan's). */
static void copy_q_rows(const qf_problem *p) {
  const qf_mat *src = &p->q_out, *dst = &p->q_copy;
  const size_t es = qkvfuse_dtype_size(src->dtype), row = (size_t)src->cols * es;
  for (int64_t r = 0; r < p->T; r++) {
    char *d = (char *)dst->data + (size_t)(r * dst->ld) * es;
    const char *s = (const char *)src->data + (size_t)(r * src->ld) * es;
    if (src->inc == 1 && dst->inc == 1)
      memcpy(d, s, row);
    else
      for (int64_t c = 0; c < src->cols; c++)
        memcpy(d + (size_t)(c * dst->inc) * es, s + (size_t)(c * src->inc) * es, es);
  }
}

/* A named call's own checks (which may read vector data), then the run. */
static qkvfuse_status checked_run(const qkvfuse_plan *plan, const qf_problem *p, const qf_call *call, void *stream) {
  if (call && call->check) QF_FORWARD(call->check(p, call->ctx));
  if (p->T == 0) return QKVFUSE_SUCCESS;
  QF_FORWARD(plan->run(plan, p, stream));
  if (p->q_copy.data && plan->desc.device_type == QKVFUSE_DEVICE_CPU) copy_q_rows(p);
  return QKVFUSE_SUCCESS;
}

/* A CPU call with strided vectors: their copies live in this frame for the
 * checks and the run, so that only such a call's stack holds the buffer. */
static __attribute__((noinline)) qkvfuse_status run_gathered(const qkvfuse_plan *plan, qf_problem *p,
                                                             const qf_call *call, void *stream) {
  qf_gather_buf buf;
  QF_FORWARD(qf_resolve_gather(p, &buf));
  return checked_run(plan, p, call, stream);
}

qkvfuse_status qf_plan_run(const qkvfuse_plan *plan, const qkvfuse_args *args, const qf_call *call, void *stream) {
  qf_problem p;
  QF_FORWARD(qf_resolve_call(plan, args, call, &p));
  if (p.ngather) return run_gathered(plan, &p, call, stream);
  return checked_run(plan, &p, call, stream);
}

qkvfuse_status qkvfuse_run(const qkvfuse_plan *plan, const qkvfuse_args *args, void *stream) {
  qf_clear_error();
  return qf_plan_run(plan, args, NULL, stream);
}

/* The text of a resolved call. */
static void explain_text(const qkvfuse_plan *plan, const qf_problem *p, char *buf, size_t n) {
  if (plan->explain)
    plan->explain(plan, p, buf, n);
  else
    snprintf(buf, n, "%s", plan->backend_name);
}

/* explain for a CPU call with strided vectors: gathered and checked as the
 * run does (run_gathered), since the text may depend on their values. */
static __attribute__((noinline)) qkvfuse_status explain_gathered(const qkvfuse_plan *plan, qf_problem *p, char *buf,
                                                                 size_t n) {
  qf_gather_buf gb;
  QF_FORWARD(qf_resolve_gather(p, &gb));
  explain_text(plan, p, buf, n);
  return QKVFUSE_SUCCESS;
}

qkvfuse_status qkvfuse_experimental_explain(const qkvfuse_plan *plan, const qkvfuse_args *args, char *buf, size_t n) {
  qf_clear_error();
  QF_CHECK(buf != NULL && n > 0, QKVFUSE_ERROR_NULL_POINTER, "buf: NULL or of size 0");
  buf[0] = '\0';
  qf_problem p;
  QF_FORWARD(qf_resolve_call(plan, args, NULL, &p));
  if (p.ngather) return explain_gathered(plan, &p, buf, n);
  explain_text(plan, &p, buf, n);
  return QKVFUSE_SUCCESS;
}
