/* SPDX-License-Identifier: Apache-2.0 */
/* A text table whose columns are as wide as their widest cell or header:
 * the rows are kept until the table is printed, so that no long name or
 * large number shifts a column. */
#ifndef QKVFUSE_TOOLS_TABLE_H
#define QKVFUSE_TOOLS_TABLE_H

#include <stdio.h>

#define CLI_TABLE_MAX_COLUMNS 24

typedef struct cli_table {
  int columns;
  const char *headers[CLI_TABLE_MAX_COLUMNS];
  char align[CLI_TABLE_MAX_COLUMNS]; /* 'l' or 'r' */
  char **cells;                      /* row-major, columns per row */
  int count, capacity;               /* cells added, cells allocated */
  int failed;                        /* an allocation failed: the table is incomplete */
} cli_table;

/* align: one 'l' (left) or 'r' (right) per header, e.g. "llr". */
void cli_table_init(cli_table *t, int columns, const char *const *headers, const char *align);
/* The next cell, left to right and row by row, printf-formatted. */
void cli_table_cell(cli_table *t, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* The header and the rows, columns one space apart, no trailing blanks.
 * @return 0, or -1 if a cell was lost to an allocation failure (message printed). */
int cli_table_print(const cli_table *t, FILE *f);
void cli_table_free(cli_table *t);

#endif /* QKVFUSE_TOOLS_TABLE_H */
