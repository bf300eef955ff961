/* SPDX-License-Identifier: Apache-2.0 */
/* libFuzzer target: the core operator (qkvfuse_plan_create + qkvfuse_run) on
 * random descriptors, tensors and data, on the reference and auto backends.
 * The invariant is fz.h's. */
#include "fz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) { return fz_one_input(data, size, FZ_CORE); }
