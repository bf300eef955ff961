/* SPDX-License-Identifier: Apache-2.0 */
/* qkvfuse: the command-line tool. Dispatches to a command, which parses its
 * own options. */
#include <stdio.h>
#include <string.h>

#include "args.h"
#include "commands.h"
#include "qkvfuse.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: qkvfuse <command> [options]\n"
          "\n"
          "Fused attention prologue (split q/k/v, dequant, per-head RMSNorm, RoPE, KV-cache quantize and\n"
          "write) for LLM inference.\n"
          "\n"
          "commands:\n"
          "  demo      run the three named operators on real model shapes and check them against the reference\n"
          "  bench     time the fused operator against the unfused stage-by-stage path and a memcpy of its bytes\n"
          "  version   print the library version, what it was built with, and the default CPU backend\n"
          "  help [command]   this text, or a command's options\n"
          "\n"
          "Run 'qkvfuse <command> --help' for a command's options.\n");
}

static void version_usage(FILE *f) {
  fprintf(f,
          "usage: qkvfuse version\n\nPrints the version of the CLI and of the linked library, what the library\n"
          "was built with (qkvfuse_build_info: CUDA version and architectures, CPU ISA levels), and the\n"
          "backend that the auto backend picks on the CPU.\n");
}

static int version(int argc, char **argv) {
  const char *value;
  cli_parser p = cli_parser_make("version", argc, argv, NULL, 0);
  const int opt = cli_next_option(&p, &value);
  if (opt == CLI_OPT_HELP) {
    version_usage(stdout);
    return 0;
  }
  if (opt != CLI_OPT_END) return 2; /* the parser has no option of its own to return: an error */
  const unsigned v = qkvfuse_version_number();
  printf("qkvfuse %d.%d.%d (library %u.%u.%u)\n", QKVFUSE_VERSION_MAJOR, QKVFUSE_VERSION_MINOR, QKVFUSE_VERSION_PATCH,
         v / 10000, v / 100 % 100, v % 100);
  printf("build: %s\n", qkvfuse_build_info());
  qkvfuse_desc d = QKVFUSE_DESC_INIT;
  d.num_q_heads = d.num_kv_heads = 1;
  d.head_dim = 128;
  qkvfuse_plan *plan;
  if (qkvfuse_plan_create(&d, &plan) == QKVFUSE_SUCCESS) {
    printf("cpu backend (auto): %s\n", qkvfuse_plan_backend_name(plan));
    qkvfuse_plan_destroy(plan);
  }
  d.device_type = QKVFUSE_DEVICE_CUDA;
  if (qkvfuse_plan_create(&d, &plan) == QKVFUSE_SUCCESS) {
    printf("cuda backend (auto): %s\n", qkvfuse_plan_backend_name(plan));
    qkvfuse_plan_destroy(plan);
  } else {
    printf("cuda backend: none (%s)\n", qkvfuse_last_error());
  }
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 2) return cli_usage_error(NULL, "a command is needed (demo, bench, version or help)", NULL);
  const char *cmd = argv[1];
  if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0) {
    if (argc > 2) return cli_usage_error(NULL, "unexpected argument", argv[2]);
    usage(stdout);
    return 0;
  }
  if (strcmp(cmd, "help") == 0) {
    if (argc > 3) return cli_usage_error(NULL, "help: unexpected argument", argv[3]);
    if (argc == 2)
      usage(stdout);
    else if (strcmp(argv[2], "demo") == 0)
      cli_demo_usage(stdout);
    else if (strcmp(argv[2], "bench") == 0)
      cli_bench_usage(stdout);
    else if (strcmp(argv[2], "version") == 0)
      version_usage(stdout);
    else
      return cli_usage_error(NULL, "help: unknown command", argv[2]);
    return 0;
  }
  if (strcmp(cmd, "--version") == 0 || strcmp(cmd, "version") == 0) return version(argc - 1, argv + 1);
  if (strcmp(cmd, "demo") == 0) return cli_demo(argc - 1, argv + 1);
  if (strcmp(cmd, "bench") == 0) return cli_bench(argc - 1, argv + 1);
  if (cmd[0] == '-' && cmd[1] != '\0') return cli_usage_error(NULL, "unknown option", cmd);
  return cli_usage_error(NULL, "unknown command", cmd);
}
