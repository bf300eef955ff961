/* SPDX-License-Identifier: Apache-2.0 */
/* Option parsing (see args.h). */
#include "args.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

cli_args cli_args_make(int argc, char **argv) {
  cli_args a = {argc, argv, 1, NULL, 0};
  return a;
}

int cli_args_more(const cli_args *a) { return a->i < a->argc; }

const char *cli_args_current(const cli_args *a) { return a->i < a->argc ? a->argv[a->i] : ""; }

int cli_args_flag(cli_args *a, const char *name) {
  if (a->i >= a->argc || strcmp(a->argv[a->i], name) != 0) return 0;
  a->i++;
  return 1;
}

int cli_args_option(cli_args *a, const char *name) {
  if (a->i >= a->argc) return 0;
  const char *arg = a->argv[a->i];
  const size_t n = strlen(name);
  if (strncmp(arg, name, n) != 0) return 0;
  if (arg[n] == '=') {
    a->value = arg + n + 1;
    a->i++;
    return 1;
  }
  if (arg[n] != '\0') return 0;
  if (a->i + 1 >= a->argc) {
    a->missing_value = 1;
    a->value = NULL;
    a->i++;
    return 1;
  }
  a->value = a->argv[a->i + 1];
  a->i += 2;
  return 1;
}

int cli_usage_error(const char *command, const char *msg, const char *arg) {
  const char *sp = command ? " " : "", *cmd = command ? command : "";
  fprintf(stderr, "qkvfuse%s%s: %s%s%s\nsee 'qkvfuse%s%s --help'\n", sp, cmd, msg, arg ? ": " : "", arg ? arg : "",
          sp, cmd);
  return 2;
}

int cli_parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out) {
  if (s == NULL || *s == '\0') return -1;
  char *end;
  errno = 0;
  const long long v = strtoll(s, &end, 10);
  if (errno != 0 || *end != '\0' || v < lo || v > hi) return -1;
  *out = (int64_t)v;
  return 0;
}

int cli_parse_double(const char *s, double lo, double hi, double *out) {
  if (s == NULL || *s == '\0') return -1;
  char *end;
  errno = 0;
  const double v = strtod(s, &end);
  if (errno != 0 || *end != '\0' || !isfinite(v) || v < lo || v > hi) return -1;
  *out = v;
  return 0;
}

int cli_parse_i64_list(const char *s, int64_t lo, int64_t hi, int64_t *out, int max, int *n) {
  if (s == NULL || *s == '\0') return -1;
  char item[32];
  *n = 0;
  for (const char *p = s;;) {
    const char *comma = strchr(p, ',');
    const size_t len = comma ? (size_t)(comma - p) : strlen(p);
    if (len == 0 || len >= sizeof item || *n >= max) return -1;
    memcpy(item, p, len);
    item[len] = '\0';
    if (cli_parse_i64(item, lo, hi, &out[*n]) != 0) return -1;
    (*n)++;
    if (!comma) return 0;
    p = comma + 1;
  }
}
