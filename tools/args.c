/* SPDX-License-Identifier: Apache-2.0 */
/* Option parsing (see args.h). */
#define _GNU_SOURCE /* getopt_long */
#include "args.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* getopt_long's val of options[i]; above every char, so that no short option collides */
#define OPTION_VAL(i) (256 + (i))

cli_parser cli_parser_make(const char *command, int argc, char **argv, const cli_option *options, int count) {
  cli_parser p = {command, argc, argv, options, count < CLI_MAX_OPTIONS ? count : CLI_MAX_OPTIONS};
  /* 0: a full reset of getopt's state in glibc, musl and the BSDs (before
   * any other parse, 1 would do; 0 also forgets a previous one) */
  optind = 0;
  opterr = 0;
  return p;
}

/* "--help" is every command's, besides its table. */
static const char *option_name(const cli_parser *p, int val) {
  return val == 'h' ? "help" : p->options[val - OPTION_VAL(0)].name;
}

/* A long option that getopt_long refused without naming it: ambiguous (a
 * prefix of two or more names) or unknown. */
static int long_option_error(const cli_parser *p, const char *arg) {
  const char *name = arg + 2, *eq = strchr(name, '=');
  const size_t len = eq ? (size_t)(eq - name) : strlen(name);
  char matches[256] = "";
  int n = 0;
  for (int i = -1; i < p->count; i++) {
    const char *full = i < 0 ? "help" : p->options[i].name;
    if (len == 0 || strncmp(full, name, len) != 0) continue;
    const size_t used = strlen(matches);
    snprintf(matches + used, sizeof matches - used, "%s--%s", n ? ", " : "", full);
    n++;
  }
  if (n < 2) return cli_usage_error(p->command, "unknown option", arg);
  char msg[300];
  snprintf(msg, sizeof msg, "ambiguous option (%s)", matches);
  return cli_usage_error(p->command, msg, arg);
}

int cli_next_option(cli_parser *p, const char **value) {
  *value = NULL;
  const int next = optind > 0 ? optind : 1; /* the argument getopt_long looks at next */
  if (next < p->argc) {
    /* -h is the only short option: any other "-x..." is one unknown option,
     * named whole (getopt_long would name its first letter only) */
    const char *arg = p->argv[next];
    if (arg[0] == '-' && arg[1] != '\0' && arg[1] != '-' && strcmp(arg, "-h") != 0)
      return cli_usage_error(p->command, "unknown option", arg), CLI_OPT_ERROR;
  }
  struct option longopts[CLI_MAX_OPTIONS + 2];
  for (int i = 0; i < p->count; i++)
    longopts[i] = (struct option){p->options[i].name, p->options[i].has_value ? required_argument : no_argument,
                                  NULL, OPTION_VAL(i)};
  longopts[p->count] = (struct option){"help", no_argument, NULL, 'h'};
  longopts[p->count + 1] = (struct option){NULL, 0, NULL, 0};
  /* "+": stop at the first argument that is no option (it is refused below);
   * ":": a missing value is answered ':' rather than '?' */
  const int c = getopt_long(p->argc, p->argv, "+:h", longopts, NULL);
  if (c == -1) {
    if (optind < p->argc) return cli_usage_error(p->command, "unexpected argument", p->argv[optind]), CLI_OPT_ERROR;
    return CLI_OPT_END;
  }
  if (c == 'h') return CLI_OPT_HELP;
  if (c >= OPTION_VAL(0) && c < OPTION_VAL(p->count)) {
    *value = optarg;
    return c - OPTION_VAL(0);
  }
  if (c == ':' && optopt >= OPTION_VAL(0) && optopt < OPTION_VAL(p->count)) /* optopt: the option lacking its value */
    return cli_option_error(p, optopt - OPTION_VAL(0), NULL), CLI_OPT_ERROR;
  /* '?': the refused argument is the one just consumed */
  const char *arg = p->argv[optind - 1];
  if (optopt == 'h' || (optopt >= OPTION_VAL(0) && optopt < OPTION_VAL(p->count))) {
    char msg[80];
    snprintf(msg, sizeof msg, "--%s takes no value", option_name(p, optopt));
    return cli_usage_error(p->command, msg, arg), CLI_OPT_ERROR;
  }
  if (optopt != 0) {
    char opt[3] = {'-', (char)optopt, '\0'};
    return cli_usage_error(p->command, "unknown option", opt), CLI_OPT_ERROR;
  }
  return long_option_error(p, arg), CLI_OPT_ERROR;
}

int cli_option_error(const cli_parser *p, int index, const char *value) {
  char msg[320];
  snprintf(msg, sizeof msg, "--%s needs %s", p->options[index].name, p->options[index].needs);
  return cli_usage_error(p->command, msg, value);
}

int cli_usage_error(const char *command, const char *msg, const char *arg) {
  const char *sp = command ? " " : "", *cmd = command ? command : "";
  const char *shown = arg && arg[0] == '\0' ? "''" : arg; /* an empty value, visibly */
  fprintf(stderr, "qkvfuse%s%s: %s%s%s\nsee 'qkvfuse%s%s --help'\n", sp, cmd, msg, arg ? ": " : "",
          shown ? shown : "", sp, cmd);
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
