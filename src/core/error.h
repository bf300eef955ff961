/* SPDX-License-Identifier: Apache-2.0 */
/* Internal error reporting: flat, early-return validation (zstd style).
 * Every failing check records a message in a thread-local buffer that names the
 * argument, what was expected and what was given, and returns its status. */
#ifndef QKVFUSE_CORE_ERROR_H
#define QKVFUSE_CORE_ERROR_H

#include "qkvfuse.h"

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define QF_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define QF_PRINTF(a, b)
#endif

/* Record a message for status s on this thread and return s. */
qkvfuse_status qf_fail(qkvfuse_status s, const char *fmt, ...) QF_PRINTF(2, 3);

/* Clear this thread's message (every public entry point starts with it). */
void qf_clear_error(void);

/* Return status `st` with a message unless `cond` holds. */
#define QF_CHECK(cond, st, ...)                  \
  do {                                           \
    if (!(cond)) return qf_fail((st), __VA_ARGS__); \
  } while (0)

/* Propagate a failed status (its message is already recorded). */
#define QF_FORWARD(expr)                      \
  do {                                        \
    qkvfuse_status qf_st_ = (expr);           \
    if (qf_st_ != QKVFUSE_SUCCESS) return qf_st_; \
  } while (0)

#ifdef __cplusplus
}
#endif

#endif /* QKVFUSE_CORE_ERROR_H */
