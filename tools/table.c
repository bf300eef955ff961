/* SPDX-License-Identifier: Apache-2.0 */
/* Text tables sized to their content (see table.h). */
#include "table.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

void cli_table_init(cli_table *t, int columns, const char *const *headers, const char *align) {
  memset(t, 0, sizeof *t);
  t->columns = columns < CLI_TABLE_MAX_COLUMNS ? columns : CLI_TABLE_MAX_COLUMNS;
  for (int c = 0; c < t->columns; c++) {
    t->headers[c] = headers[c];
    t->align[c] = align[c] == 'r' ? 'r' : 'l';
  }
}

void cli_table_cell(cli_table *t, const char *fmt, ...) {
  if (t->failed) return;
  if (t->count == t->capacity) {
    const int capacity = t->capacity ? 2 * t->capacity : 16 * t->columns;
    char **cells = realloc(t->cells, (size_t)capacity * sizeof *cells);
    if (cells == NULL) {
      t->failed = 1;
      return;
    }
    t->cells = cells;
    t->capacity = capacity;
  }
  va_list ap;
  va_start(ap, fmt);
  const int len = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  char *cell = len >= 0 ? malloc((size_t)len + 1) : NULL;
  if (cell == NULL) {
    t->failed = 1;
    return;
  }
  va_start(ap, fmt);
  vsnprintf(cell, (size_t)len + 1, fmt, ap);
  va_end(ap);
  t->cells[t->count++] = cell;
}

/* One line: each cell padded to its column's width, the last one not padded
 * on the right. cells: the line's `columns` strings (a missing one is empty). */
static void print_line(const cli_table *t, FILE *f, const int *width, const char *const *cells) {
  for (int c = 0; c < t->columns; c++) {
    const char *s = cells[c] ? cells[c] : "";
    const int pad = width[c] - (int)strlen(s), last = c == t->columns - 1;
    if (c) fputc(' ', f);
    if (t->align[c] == 'r') fprintf(f, "%*s", pad, "");
    fputs(s, f);
    if (t->align[c] == 'l' && !last) fprintf(f, "%*s", pad, "");
  }
  fputc('\n', f);
}

int cli_table_print(const cli_table *t, FILE *f) {
  int width[CLI_TABLE_MAX_COLUMNS];
  for (int c = 0; c < t->columns; c++) width[c] = (int)strlen(t->headers[c]);
  for (int i = 0; i < t->count; i++) {
    const int len = (int)strlen(t->cells[i]);
    if (len > width[i % t->columns]) width[i % t->columns] = len;
  }
  print_line(t, f, width, t->headers);
  for (int row = 0; row * t->columns < t->count; row++) {
    const char *cells[CLI_TABLE_MAX_COLUMNS] = {0};
    for (int c = 0; c < t->columns && row * t->columns + c < t->count; c++) cells[c] = t->cells[row * t->columns + c];
    print_line(t, f, width, cells);
  }
  if (t->failed) {
    fprintf(stderr, "qkvfuse: out of memory: the table lacks rows\n");
    return -1;
  }
  return 0;
}

void cli_table_free(cli_table *t) {
  for (int i = 0; i < t->count; i++) free(t->cells[i]);
  free(t->cells);
  t->cells = NULL;
  t->count = t->capacity = 0;
}
