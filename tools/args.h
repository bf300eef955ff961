/* SPDX-License-Identifier: Apache-2.0 */
/* Command-line option parsing shared by the commands: "--name value" or
 * "--name=value", strict number parsing, comma-separated lists. */
#ifndef QKVFUSE_TOOLS_ARGS_H
#define QKVFUSE_TOOLS_ARGS_H

#include <stdint.h>

typedef struct cli_args {
  int argc;
  char **argv;
  int i;             /* the argument being looked at */
  const char *value; /* the value of the last matched option */
  int missing_value; /* set when an option that takes a value had none */
} cli_args;

/* Start after the command name (argv[0] is the command). */
cli_args cli_args_make(int argc, char **argv);
/* 1 while arguments remain. */
int cli_args_more(const cli_args *a);
/* 1 (and advance) if the current argument is the flag `name` ("--json"). */
int cli_args_flag(cli_args *a, const char *name);
/* 1 (and advance, a->value set) if the current argument is option `name`
 * with a value; sets a->missing_value when the value is absent. */
int cli_args_option(cli_args *a, const char *name);
/* The current argument (for "unknown option" messages). */
const char *cli_args_current(const cli_args *a);

/* A usage error: one line on stderr, "qkvfuse <command>: <msg>[: <arg>]",
 * and a hint to the command's --help (the help itself is not printed, so
 * the line stays in view). command: "bench", "demo", ... or NULL for the
 * top level. @return 2, the usage-error exit status. */
int cli_usage_error(const char *command, const char *msg, const char *arg);

/* Strict parsers: the whole string must be a number within [lo, hi].
 * @return 0 on success, -1 otherwise. */
int cli_parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out);
int cli_parse_double(const char *s, double lo, double hi, double *out);
/* "1,64,4096" -> out[0..*n); each in [lo, hi]; at most max items. */
int cli_parse_i64_list(const char *s, int64_t lo, int64_t hi, int64_t *out, int max, int *n);

#endif /* QKVFUSE_TOOLS_ARGS_H */
