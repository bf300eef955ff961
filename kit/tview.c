/* SPDX-License-Identifier: Apache-2.0 */
#include "tview.h"

#include <string.h>

#include "fp.h"

int64_t tk_numel(const qkvfuse_tensor *t) {
  int64_t n = 1;
  for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
  return n;
}

int64_t tk_elem_offset(const qkvfuse_tensor *t, int64_t flat) {
  int64_t off = 0;
  for (int i = t->ndim - 1; i >= 0; i--) {
    int64_t n = t->shape[i];
    off += (flat % n) * t->strides[i];
    flat /= n;
  }
  return off;
}

double tk_get(const qkvfuse_tensor *t, int64_t flat) {
  return tk_decode(t->dtype, (const char *)t->data + tk_elem_offset(t, flat) * (int64_t)tk_size(t->dtype));
}

int64_t tk_get_int(const qkvfuse_tensor *t, int64_t flat) {
  const char *p = (const char *)t->data + tk_elem_offset(t, flat) * (int64_t)tk_size(t->dtype);
  if (t->dtype == QKVFUSE_DTYPE_INT64) {
    int64_t v;
    memcpy(&v, p, 8);
    return v;
  }
  int32_t v;
  memcpy(&v, p, 4);
  return v;
}
