/* SPDX-License-Identifier: Apache-2.0 */
/* JSON Lines writer (see json.h). */
#include "json.h"

#include <inttypes.h>
#include <math.h>

static void key(cli_json *j, const char *k) {
  fputs(j->fields++ ? ", " : "", j->f);
  fprintf(j->f, "\"%s\": ", k);
}

static void string(FILE *f, const char *s) {
  fputc('"', f);
  for (; *s; s++) {
    const unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\')
      fprintf(f, "\\%c", c);
    else if (c < 0x20)
      fprintf(f, "\\u%04x", c);
    else
      fputc(c, f);
  }
  fputc('"', f);
}

void cli_json_begin(cli_json *j, FILE *f) {
  j->f = f;
  j->fields = 0;
  fputc('{', f);
}

void cli_json_str(cli_json *j, const char *k, const char *value) {
  key(j, k);
  if (value)
    string(j->f, value);
  else
    fputs("null", j->f);
}

void cli_json_int(cli_json *j, const char *k, int64_t value) {
  key(j, k);
  fprintf(j->f, "%" PRId64, value);
}

void cli_json_num(cli_json *j, const char *k, double value) {
  key(j, k);
  if (isfinite(value))
    fprintf(j->f, "%.6g", value);
  else
    fputs("null", j->f);
}

void cli_json_bool(cli_json *j, const char *k, int value) {
  key(j, k);
  fputs(value ? "true" : "false", j->f);
}

void cli_json_end(cli_json *j) {
  fputs("}\n", j->f);
  fflush(j->f);
}
