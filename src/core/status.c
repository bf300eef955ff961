/* SPDX-License-Identifier: Apache-2.0 */
/* Status names and the thread-local last-error message. */
#include <stdarg.h>
#include <stdio.h>

#include "core/error.h"

#define QF_ERROR_MAX 512

static _Thread_local char qf_last_error[QF_ERROR_MAX];

qkvfuse_status qf_fail(qkvfuse_status s, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(qf_last_error, sizeof qf_last_error, fmt, ap);
  va_end(ap);
  return s;
}

void qf_clear_error(void) { qf_last_error[0] = '\0'; }

const char *qkvfuse_last_error(void) { return qf_last_error; }

unsigned qkvfuse_version_number(void) { return QKVFUSE_VERSION_NUMBER; }

const char *qkvfuse_status_string(qkvfuse_status status) {
  switch (status) {
    case QKVFUSE_SUCCESS: return "QKVFUSE_SUCCESS";
    case QKVFUSE_ERROR_NULL_POINTER: return "QKVFUSE_ERROR_NULL_POINTER";
    case QKVFUSE_ERROR_INVALID_VALUE: return "QKVFUSE_ERROR_INVALID_VALUE";
    case QKVFUSE_ERROR_DTYPE: return "QKVFUSE_ERROR_DTYPE";
    case QKVFUSE_ERROR_SHAPE: return "QKVFUSE_ERROR_SHAPE";
    case QKVFUSE_ERROR_STRIDE: return "QKVFUSE_ERROR_STRIDE";
    case QKVFUSE_ERROR_ALIGNMENT: return "QKVFUSE_ERROR_ALIGNMENT";
    case QKVFUSE_ERROR_OVERLAP: return "QKVFUSE_ERROR_OVERLAP";
    case QKVFUSE_ERROR_OUT_OF_RANGE: return "QKVFUSE_ERROR_OUT_OF_RANGE";
    case QKVFUSE_ERROR_BAD_SCALE: return "QKVFUSE_ERROR_BAD_SCALE";
    case QKVFUSE_ERROR_DEVICE: return "QKVFUSE_ERROR_DEVICE";
    case QKVFUSE_ERROR_UNSUPPORTED: return "QKVFUSE_ERROR_UNSUPPORTED";
    case QKVFUSE_ERROR_CUDA: return "QKVFUSE_ERROR_CUDA";
    case QKVFUSE_ERROR_OUT_OF_MEMORY: return "QKVFUSE_ERROR_OUT_OF_MEMORY";
    case QKVFUSE_ERROR_VERSION: return "QKVFUSE_ERROR_VERSION";
  }
  return "QKVFUSE_ERROR_UNKNOWN";
}
