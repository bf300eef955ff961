/* SPDX-License-Identifier: Apache-2.0 */
/* Run a test program with the CPU backend forced to one instruction set:
 *
 *   cpu_isa_run ISA PROGRAM [ARGS...]
 *
 * sets QKVFUSE_CPU_ISA=ISA and executes PROGRAM, or exits 77 (skip) when the
 * CPU backend cannot plan with that ISA here (CPU without it, or a build
 * without its kernels), so that a program that would otherwise silently fall
 * back (AUTO -> reference) or fail does not report a meaningless result. */
#define _POSIX_C_SOURCE 200809L /* setenv, execv */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "qkvfuse.h"

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: cpu_isa_run ISA PROGRAM [ARGS...]\n");
    return 2;
  }
  setenv("QKVFUSE_CPU_ISA", argv[1], 1);
  qkvfuse_desc d = QKVFUSE_DESC_INIT;
  d.num_q_heads = d.num_kv_heads = 1, d.head_dim = 64, d.backend = QKVFUSE_BACKEND_CPU;
  qkvfuse_plan *p = NULL;
  const qkvfuse_status s = qkvfuse_plan_create(&d, &p);
  if (s != QKVFUSE_SUCCESS) {
    printf("cpu_isa_run: %s: %s, skipped\n", qkvfuse_status_string(s), qkvfuse_last_error());
    return 77;
  }
  printf("cpu_isa_run: backend %s\n", qkvfuse_plan_backend_name(p));
  fflush(stdout);
  qkvfuse_plan_destroy(p);
  execv(argv[2], argv + 2);
  perror("cpu_isa_run: execv");
  return 2;
}
