/* SPDX-License-Identifier: Apache-2.0 */
/* One JSON object per line (JSON Lines), for --json output. */
#ifndef QKVFUSE_TOOLS_JSON_H
#define QKVFUSE_TOOLS_JSON_H

#include <stdint.h>
#include <stdio.h>

typedef struct cli_json {
  FILE *f;
  int fields; /* written so far in the current object */
} cli_json;

void cli_json_begin(cli_json *j, FILE *f);
void cli_json_str(cli_json *j, const char *key, const char *value); /* NULL value: null */
void cli_json_int(cli_json *j, const char *key, int64_t value);
void cli_json_num(cli_json *j, const char *key, double value); /* non-finite: null */
void cli_json_bool(cli_json *j, const char *key, int value);
void cli_json_end(cli_json *j); /* closes the object and the line */

#endif /* QKVFUSE_TOOLS_JSON_H */
