/* SPDX-License-Identifier: Apache-2.0 */
/* Command-line option parsing shared by the commands: getopt_long over a
 * command's option table ("--name value" and "--name=value"), one-line usage
 * errors, strict number parsing, comma-separated lists. */
#ifndef QKVFUSE_TOOLS_ARGS_H
#define QKVFUSE_TOOLS_ARGS_H

#include <stdint.h>

/* One long option of a command. */
typedef struct cli_option {
  const char *name;  /* without the dashes: "tokens" */
  int has_value;     /* 1: takes a value ("--tokens 8", "--tokens=8") */
  const char *needs; /* what the value must be, for "--NAME needs NEEDS[: VALUE]" */
} cli_option;

#define CLI_MAX_OPTIONS 24

/* A command's parse of its own argv (argv[0] is the command name). */
typedef struct cli_parser {
  const char *command; /* "bench", "demo", ...: the prefix of its messages */
  int argc;
  char **argv;
  const cli_option *options;
  int count;
} cli_parser;

enum {
  CLI_OPT_END = -1,   /* no options remain (and no other argument) */
  CLI_OPT_HELP = -2,  /* --help or -h */
  CLI_OPT_ERROR = -3, /* a usage error, already printed: exit 2 */
};

/* Start parsing argv with getopt_long (it resets getopt's state). */
cli_parser cli_parser_make(const char *command, int argc, char **argv, const cli_option *options, int count);

/* The next option: its index in options (*value: its value, or NULL when it
 * takes none), CLI_OPT_END, CLI_OPT_HELP, or CLI_OPT_ERROR after a one-line
 * usage error for an unknown or ambiguous option, a missing value, a value
 * given to an option that takes none, or an argument that is no option. */
int cli_next_option(cli_parser *p, const char **value);

/* The usage error "--NAME needs NEEDS[: value]" of option `index`. @return 2. */
int cli_option_error(const cli_parser *p, int index, const char *value);

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
