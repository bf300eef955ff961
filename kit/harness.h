/* SPDX-License-Identifier: Apache-2.0 */
/* The backend-parametric harness: run one case on one backend (through a
 * runner: the core op by default, a named entry point in test_named), check
 * every output element against the oracle and every other byte against its
 * initial content, and report. */
#ifndef TK_HARNESS_H
#define TK_HARNESS_H

#include <stdint.h>

#include "case.h"
#include "compare.h"
#include "oracle.h"

enum { TK_PASS = 0, TK_FAIL = 1, TK_SKIP = 77 };

/* Runs the operation of case c on args (device tensors). Returns its status;
 * sets *unsupported when the backend declined the configuration at plan time. */
typedef qkvfuse_status (*tk_runner)(tk_case *c, const qkvfuse_args *args, qkvfuse_backend be, void *ctx,
                                    int *unsupported);

/* The core operator: plan with desc.backend = be, run, destroy. ctx: NULL, or
 * a variants list (const char *, qkvfuse_experimental_plan_create's) for the plan. */
qkvfuse_status tk_run_core(tk_case *c, const qkvfuse_args *args, qkvfuse_backend be, void *ctx, int *unsupported);

/* Upload c's initial bytes to dev, run the core operator on be with device
 * tensors, download: for tests that check a result tk_check_case does not
 * (data errors, duplicate slots). *status is the run's status; returns 0, or
 * -1 if a transfer failed. */
int tk_run_core_on(tk_case *c, const tk_device *dev, qkvfuse_backend be, qkvfuse_status *status);

/* Upload c's initial bytes to be's device, run, download, evaluate the oracle
 * and compare (into st). TK_PASS, TK_FAIL (st->first says why) or TK_SKIP. */
int tk_check_case(tk_case *c, qkvfuse_backend be, tk_runner run, void *ctx, tk_stats *st);
/* The same on device dev (tk_check_case: the backend's device). */
int tk_check_case_on(tk_case *c, const tk_device *dev, qkvfuse_backend be, tk_runner run, void *ctx, tk_stats *st);

/* The oracle of c's initial (host) bytes: what a correct run computes from
 * them. Returns tk_oracle_run's result (0 = ok, err says why otherwise). */
int tk_case_oracle(tk_case *c, tk_oracle *o, char *err, size_t errlen);

/* Compare the downloaded bytes of c with oracle o (every output element,
 * every cache element written, every other byte untouched). */
void tk_compare_case(tk_case *c, const tk_oracle *o, tk_stats *st);

/* Backends: "reference", "auto", "cpu", "cuda". */
int tk_backend_parse(const char *name, qkvfuse_backend *out);
const char *tk_backend_str(qkvfuse_backend b);
/* Backends to test: "--backend a,b" in argv, else $QKVFUSE_TEST_BACKENDS,
 * else "reference,auto". Returns how many (0 on a bad name or variant).
 * Applies the "--variant" options first (tk_variants_from). */
int tk_backends_from(int argc, char **argv, qkvfuse_backend *out, int max);
/* Backend variants (include/qkvfuse_experimental.h): every "--variant
 * key=value[,key=value]" in argv set process-wide, so that every plan the
 * program makes, the named operators' included, gets them. Returns 0, or -1
 * after printing why for a bad one. A cpu.isa this build or CPU cannot serve
 * ends the program with TK_SKIP (77), as a backend that is not there. */
int tk_variants_from(int argc, char **argv);
/* Value of "--name V" in argv, else env, else def (numbers: decimal or 0x). */
uint64_t tk_arg_u64(int argc, char **argv, const char *name, const char *env, uint64_t def);
int tk_arg_has(int argc, char **argv, const char *name);
/* The call every random case of a test is made (--engine: tk_spec_engine,
 * --append: tk_spec_append, --dequant: tk_spec_dequant), or NULL. */
typedef void (*tk_spec_shaper)(tk_spec *s, tk_rng *r);
tk_spec_shaper tk_shaper_from(int argc, char **argv);

/* 1 if an error message names the argument: it starts with one of the
 * '|'-separated names followed by ':', ' ', '.' or '[' (the header's own
 * example: "k_cache: shape[2] must be ..."), so a message that mentions the
 * argument only in passing does not count. */
int tk_names_argument(const char *msg, const char *names);

#endif /* TK_HARNESS_H */
