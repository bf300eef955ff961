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

/* Indexed by the status; a status appended to the enum without its name here
 * fails to compile. */
static const char *const STATUS_NAMES[] = {
    [QKVFUSE_SUCCESS] = "QKVFUSE_SUCCESS",
    [QKVFUSE_ERROR_NULL_POINTER] = "QKVFUSE_ERROR_NULL_POINTER",
    [QKVFUSE_ERROR_INVALID_VALUE] = "QKVFUSE_ERROR_INVALID_VALUE",
    [QKVFUSE_ERROR_DTYPE] = "QKVFUSE_ERROR_DTYPE",
    [QKVFUSE_ERROR_SHAPE] = "QKVFUSE_ERROR_SHAPE",
    [QKVFUSE_ERROR_STRIDE] = "QKVFUSE_ERROR_STRIDE",
    [QKVFUSE_ERROR_ALIGNMENT] = "QKVFUSE_ERROR_ALIGNMENT",
    [QKVFUSE_ERROR_OVERLAP] = "QKVFUSE_ERROR_OVERLAP",
    [QKVFUSE_ERROR_OUT_OF_RANGE] = "QKVFUSE_ERROR_OUT_OF_RANGE",
    [QKVFUSE_ERROR_BAD_SCALE] = "QKVFUSE_ERROR_BAD_SCALE",
    [QKVFUSE_ERROR_DEVICE] = "QKVFUSE_ERROR_DEVICE",
    [QKVFUSE_ERROR_UNSUPPORTED] = "QKVFUSE_ERROR_UNSUPPORTED",
    [QKVFUSE_ERROR_CUDA] = "QKVFUSE_ERROR_CUDA",
    [QKVFUSE_ERROR_OUT_OF_MEMORY] = "QKVFUSE_ERROR_OUT_OF_MEMORY",
    [QKVFUSE_ERROR_VERSION] = "QKVFUSE_ERROR_VERSION",
};
_Static_assert(sizeof STATUS_NAMES / sizeof STATUS_NAMES[0] == QKVFUSE_STATUS_COUNT,
               "every qkvfuse_status has its name in STATUS_NAMES");

const char *qkvfuse_status_string(qkvfuse_status status) {
  return (unsigned)status < QKVFUSE_STATUS_COUNT ? STATUS_NAMES[status] : "QKVFUSE_ERROR_UNKNOWN";
}
