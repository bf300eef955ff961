/* SPDX-License-Identifier: Apache-2.0 */
/* Element codecs of the test kit, written from the format definitions alone
 * (IEEE 754 binary16/binary32, bfloat16, OCP float8 e4m3fn and e5m2); independent of
 * the library's own conversions, which they are used to check.
 *
 * Every encoder rounds a float64 value ONCE to the target (round to nearest,
 * ties to even). Integers round with rint (ties to even) and saturate. */
#ifndef TK_FP_H
#define TK_FP_H

#include <stddef.h>
#include <stdint.h>

#include "qkvfuse.h"

/* Element at p (any alignment) as a double. */
double tk_decode(qkvfuse_dtype dt, const void *p);

/* Write v to p as dt. Float formats: RNE; binary16/bfloat16/float32 overflow
 * to +-Inf; e4m3fn saturates to +-448 and e5m2 to +-57344 (Inf included: the
 * quantizers' rule, qkvfuse.h), both encode NaN as 0x7F | sign.
 * Integer formats: rint, saturate, NaN -> 0. */
void tk_encode(qkvfuse_dtype dt, void *p, double v);

/* tk_decode(tk_encode(v)): v rounded to dt. */
double tk_round(qkvfuse_dtype dt, double v);

/* Spacing of dt's representable numbers in the binade of |v| (the subnormal
 * spacing below the normal range; 1 for integers). For e4m3fn this is the
 * "e4m3 step at that magnitude", likewise for e5m2. */
double tk_ulp(qkvfuse_dtype dt, double v);

/* Largest finite value of dt. */
double tk_max(qkvfuse_dtype dt);

int tk_is_float(qkvfuse_dtype dt);   /* float32 / float16 / bfloat16 / e4m3fn / e5m2 */
size_t tk_size(qkvfuse_dtype dt);    /* bytes per element, 0 if unknown */
const char *tk_name(qkvfuse_dtype dt);

#endif /* TK_FP_H */
