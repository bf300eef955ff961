/* SPDX-License-Identifier: Apache-2.0 */
/* A program outside the source tree, built against an installed qkvfuse
 * (pkg-config or find_package): it must compile with the installed header
 * only, link, and run one call on the CPU.
 *
 *   consumer shared|static
 * checks that qkvfuse_version_number comes from libqkvfuse.so (shared) or
 * from the program itself (static), that the library is the header's
 * version, and that a split of q out of two qkv rows copies exactly those
 * bytes. Exits 0 when all hold. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include <qkvfuse.h>

int main(int argc, char **argv) {
  if (argc != 2 || (strcmp(argv[1], "shared") != 0 && strcmp(argv[1], "static") != 0)) {
    fprintf(stderr, "usage: consumer shared|static\n");
    return 2;
  }
  Dl_info info;
  if (!dladdr((void *)qkvfuse_version_number, &info) || info.dli_fname == NULL) {
    fprintf(stderr, "consumer: dladdr cannot place qkvfuse_version_number\n");
    return 1;
  }
  const int from_so = strstr(info.dli_fname, "libqkvfuse") != NULL;
  if (from_so != (strcmp(argv[1], "shared") == 0)) {
    fprintf(stderr, "consumer: linked %s, but qkvfuse_version_number comes from %s\n", argv[1], info.dli_fname);
    return 1;
  }
  if (qkvfuse_version_number() != QKVFUSE_VERSION_NUMBER) {
    fprintf(stderr, "consumer: library version %u, header %u\n", qkvfuse_version_number(),
            (unsigned)QKVFUSE_VERSION_NUMBER);
    return 1;
  }

  enum { T = 2, D = 16, H = 3 * D };
  float in[T][H], q[T][D];
  for (int t = 0; t < T; t++)
    for (int i = 0; i < H; i++) in[t][i] = (float)(t * 1000 + i) + 0.25f;
  memset(q, 0, sizeof q);
  const int64_t in_shape[2] = {T, H}, q_shape[2] = {T, D};
  qkvfuse_tensor qkv, q_out;
  qkvfuse_desc desc = QKVFUSE_DESC_INIT;
  desc.num_q_heads = 1;
  desc.num_kv_heads = 1;
  desc.head_dim = D;
  qkvfuse_plan *plan = NULL;
  qkvfuse_args args = QKVFUSE_ARGS_INIT;
  args.qkv = &qkv;
  args.q_out = &q_out;
  if (qkvfuse_tensor_init(&qkv, in, QKVFUSE_DTYPE_FLOAT32, 2, in_shape) != QKVFUSE_SUCCESS ||
      qkvfuse_tensor_init(&q_out, q, QKVFUSE_DTYPE_FLOAT32, 2, q_shape) != QKVFUSE_SUCCESS ||
      qkvfuse_plan_create(&desc, &plan) != QKVFUSE_SUCCESS || qkvfuse_run(plan, &args, NULL) != QKVFUSE_SUCCESS) {
    fprintf(stderr, "consumer: %s\n", qkvfuse_last_error());
    qkvfuse_plan_destroy(plan);
    return 1;
  }
  printf("consumer (%s, %s backend, %s): ", argv[1], qkvfuse_plan_backend_name(plan), info.dli_fname);
  qkvfuse_plan_destroy(plan);
  for (int t = 0; t < T; t++)
    if (memcmp(q[t], in[t], sizeof q[t]) != 0) {
      printf("q row %d differs from the input's q part\n", t);
      return 1;
    }
  printf("ok\n");
  return 0;
}
