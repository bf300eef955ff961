/* SPDX-License-Identifier: Apache-2.0 */
/* qkvfuse experimental interface: backend variants for tests and benchmarks.
 *
 * NOT PART OF THE STABLE API. These functions and their keys and values may
 * change or go in any release, minor or patch, without notice; the version
 * and ABI policy of qkvfuse.h does not cover them. They are meant for the
 * project's test harness and benchmarks and for experiments with a backend's
 * internal choices, not for production use. The header is not installed.
 *
 * A variant is a key and a value that steer one backend's internal choice at
 * plan creation. The results of a plan never depend on a variant beyond what
 * SPEC allows (every backend and variant passes the same oracle); only its
 * speed, and whether it can be served at all, may.
 *
 *   key        values                                        steers
 *   cpu.isa    auto, avx512bf16, avx512, avx2, scalar        the CPU backend's instruction set
 *                                                            (auto: the best this CPU and build run)
 *   cuda.form  auto, decode, decode_narrow, prefill, general the CUDA streaming kernel's form
 *                                                            (auto: by size; general: every call on
 *                                                            the general kernel, as below sm_80)
 *   cuda.pdl   auto, 0, 1                                    CUDA programmatic dependent launch
 *                                                            (auto and 1: where the GPU has it)
 *
 * A key not set by either function below takes its environment variable
 * where one exists (QKVFUSE_CPU_ISA, QKVFUSE_CUDA_FORM, QKVFUSE_CUDA_PDL: the
 * documented aliases of these keys), else auto. A variant that names a
 * choice this build or machine cannot serve (cpu.isa=avx512 on a CPU without
 * it) makes the plan's creation fail with QKVFUSE_ERROR_UNSUPPORTED on that
 * backend, as the environment variable does (QKVFUSE_BACKEND_AUTO then falls
 * back to the reference on the CPU). docs/API.md ("Experimental
 * interface") describes them. */
#ifndef QKVFUSE_EXPERIMENTAL_H
#define QKVFUSE_EXPERIMENTAL_H

#include "qkvfuse.h"

#ifdef __cplusplus
extern "C" {
#endif

/**
 * Set a process-wide variant for every plan created afterwards, on any
 * thread, including the plans the named operators make for each call (a plan
 * keeps the variants it was created with). value NULL or "" unsets the key.
 * Safe to call from several threads; which of two racing calls wins is
 * unspecified.
 * @return QKVFUSE_SUCCESS; QKVFUSE_ERROR_NULL_POINTER (key NULL);
 *  QKVFUSE_ERROR_INVALID_VALUE for an unknown key or a value the key does not
 *  take (message names `key` or `value`); nothing changes on an error.
 */
QKVFUSE_API qkvfuse_status qkvfuse_experimental_set(const char *key, const char *value);

/**
 * qkvfuse_plan_create with per-plan variants, which take precedence over the
 * process-wide ones: `variants` is a comma-separated list of key=value
 * ("cpu.isa=avx2,cuda.pdl=0"), each key at most once; NULL or "" is none.
 * @return as qkvfuse_plan_create; QKVFUSE_ERROR_INVALID_VALUE (message
 *  starting with "variants") for a malformed list, an unknown key, a key
 *  given twice or a value the key does not take.
 */
QKVFUSE_API qkvfuse_status qkvfuse_experimental_plan_create(const qkvfuse_desc *desc, const char *variants,
                                                            qkvfuse_plan **plan);

/**
 * What qkvfuse_run(plan, args, stream) would run, in words, without running
 * it: the backend and its kernel or path, and where a faster one is passed
 * over, why ("cuda: general kernel, 8-element vectors, 2 per lane (not the
 * streaming kernel: ...)"; "cpu-avx512bf16: buffered path (not the direct
 * path: ...), 2 threads"; on the CPU also whether the k and v heads go to
 * cache-slot owners). The text is for people and may change in any release.
 * args are validated as qkvfuse_run validates them (on the CPU, data checks
 * included), and a call qkvfuse_run would refuse gets its status and message
 * here too; nothing is read or written on a device.
 * @return QKVFUSE_SUCCESS with buf holding the NUL-terminated text,
 *  truncated to n - 1 bytes; QKVFUSE_ERROR_NULL_POINTER (buf NULL or n 0,
 *  plan or args NULL); any status qkvfuse_run returns for these args.
 */
QKVFUSE_API qkvfuse_status qkvfuse_experimental_explain(const qkvfuse_plan *plan, const qkvfuse_args *args, char *buf,
                                                        size_t n);

#ifdef __cplusplus
}
#endif

#endif /* QKVFUSE_EXPERIMENTAL_H */
