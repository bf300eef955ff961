/* SPDX-License-Identifier: Apache-2.0 */
/* Logical element access to a strided qkvfuse_tensor (strides in elements),
 * the way the header defines it. A tensor listed as [T, X] may come as any
 * view whose row-major logical order is that of [T, X]; logical flat index
 * t*X + c is unraveled over the tensor's own shape, so every view works. */
#ifndef TK_TVIEW_H
#define TK_TVIEW_H

#include <stdint.h>

#include "qkvfuse.h"

int64_t tk_numel(const qkvfuse_tensor *t);
/* Element offset from t->data of the logical element with row-major flat index `flat`. */
int64_t tk_elem_offset(const qkvfuse_tensor *t, int64_t flat);
/* Value of that element (decoded with fp.h). */
double tk_get(const qkvfuse_tensor *t, int64_t flat);
/* Integer value of an int32/int64 element. */
int64_t tk_get_int(const qkvfuse_tensor *t, int64_t flat);

#endif /* TK_TVIEW_H */
