/* SPDX-License-Identifier: Apache-2.0 */
/* The commands of the qkvfuse CLI. Each takes its own argv (argv[0] is the
 * command name) and returns the process exit status: 0 success, 1 a failed
 * check or call, 2 a usage error. */
#ifndef QKVFUSE_TOOLS_COMMANDS_H
#define QKVFUSE_TOOLS_COMMANDS_H

#include <stdio.h>

int cli_demo(int argc, char **argv);
int cli_bench(int argc, char **argv);

void cli_demo_usage(FILE *f);
void cli_bench_usage(FILE *f);

#endif /* QKVFUSE_TOOLS_COMMANDS_H */
