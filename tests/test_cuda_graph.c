/* SPDX-License-Identifier: Apache-2.0 */
/* CUDA-graph capture of qkvfuse_run: the call is captured in global capture
 * mode (any allocation or synchronization inside it would invalidate the
 * capture), the graph is replayed (twice unless q/k are in place), and the result is checked against
 * the float64 oracle like any other run, on the base cases and random cases.
 *   test_cuda_graph [--cases N] [--seed S]   (exit 77 without a GPU) */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <string.h>

#include "bases.h"
#include "harness.h"

static int cuda_ok(cudaError_t e, const char *what) {
  if (e == cudaSuccess) return 1;
  printf("  %s: %s\n", what, cudaGetErrorString(e));
  return 0;
}

/* Plan, capture one qkvfuse_run into a graph, replay it twice. */
static qkvfuse_status run_graph(tk_case *c, const qkvfuse_args *args, qkvfuse_backend be, void *ctx,
                                int *unsupported) {
  (void)ctx;
  qkvfuse_desc d = c->desc;
  d.backend = be;
  d.device_type = QKVFUSE_DEVICE_CUDA;
  d.device_id = c->dev->id;
  qkvfuse_plan *plan = NULL;
  qkvfuse_status st = qkvfuse_plan_create(&d, &plan);
  if (st == QKVFUSE_ERROR_UNSUPPORTED) *unsupported = 1;
  if (st != QKVFUSE_SUCCESS) return st;
  cudaStream_t s;
  cudaGraph_t g = NULL;
  cudaGraphExec_t exec = NULL;
  if (!cuda_ok(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate")) {
    qkvfuse_plan_destroy(plan);
    return QKVFUSE_ERROR_CUDA;
  }
  int ok = cuda_ok(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), "cudaStreamBeginCapture");
  if (ok) {
    st = qkvfuse_run(plan, args, s);
    ok = cuda_ok(cudaStreamEndCapture(s, &g), "cudaStreamEndCapture (was the capture invalidated?)");
  }
  if (ok && st == QKVFUSE_SUCCESS) {
    ok = cuda_ok(cudaGraphInstantiate(&exec, g, 0), "cudaGraphInstantiate") &&
         cuda_ok(cudaGraphLaunch(exec, s), "cudaGraphLaunch") &&
         /* a second replay gives the same bytes, unless q/k are rewritten in place */
         (c->sp.in_place_q || c->sp.in_place_k || cuda_ok(cudaGraphLaunch(exec, s), "cudaGraphLaunch")) &&
         cuda_ok(cudaStreamSynchronize(s), "replay");
  }
  if (exec) cudaGraphExecDestroy(exec);
  if (g) cudaGraphDestroy(g);
  cudaStreamDestroy(s);
  qkvfuse_plan_destroy(plan);
  if (st != QKVFUSE_SUCCESS) return st;
  return ok ? QKVFUSE_SUCCESS : QKVFUSE_ERROR_CUDA;
}

int main(int argc, char **argv) {
  if (tk_device_for_backend(QKVFUSE_BACKEND_CUDA) == NULL) {
    printf("test_cuda_graph: no CUDA device: skipped\n");
    return TK_SKIP;
  }
  const uint64_t ncases = tk_arg_u64(argc, argv, "--cases", NULL, 80);
  const uint64_t seed = tk_arg_u64(argc, argv, "--seed", NULL, 0x6A9F);
  int ran = 0, failed = 0;
  tk_stats all;
  memset(&all, 0, sizeof all);
  static const int bases[] = {TK_BASE_A, TK_BASE_B, TK_BASE_C, TK_BASE_D, TK_BASE_E, TK_BASE_F, TK_BASE_G, TK_BASE_I};
  const int nbases = (int)(sizeof bases / sizeof bases[0]);
  for (int i = 0; i < nbases + (int)ncases; i++) {
    tk_spec sp;
    const uint64_t cs = tk_case_seed(seed, (uint64_t)i);
    if (i < nbases) {
      tk_base_spec(bases[i], &sp);
    } else {
      tk_rng r;
      tk_rng_seed(&r, cs);
      const tk_limits lim = {250000, 0};
      tk_spec_random(&sp, &r, &lim);
    }
    tk_case c;
    if (tk_case_build(&c, &sp, cs ^ 0x5A5A)) {
      printf("FAIL test_cuda_graph case %d: out of memory\n", i);
      return 1;
    }
    tk_stats st;
    memset(&st, 0, sizeof st);
    const int rc = tk_check_case(&c, QKVFUSE_BACKEND_CUDA, run_graph, NULL, &st);
    tk_case_free(&c);
    if (rc == TK_SKIP) continue;
    ran++;
    tk_stats_merge(&all, &st);
    if (rc == TK_FAIL && failed++ < 10) {
      char desc[1024];
      tk_spec_describe(&sp, desc, sizeof desc);
      printf("FAIL test_cuda_graph case %d (seed 0x%llx): %s\n  failing: %s\n  spec: %s\n", i,
             (unsigned long long)seed, st.first, st.where, desc);
    }
  }
  printf("test_cuda_graph: %d captured-and-replayed cases, %d failed\n", ran, failed);
  return failed || ran == 0 ? 1 : 0;
}
