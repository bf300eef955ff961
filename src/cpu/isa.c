/* SPDX-License-Identifier: Apache-2.0 */
/* Which instruction sets this build has and this CPU can run, and the choice
 * a plan gets (the variant cpu.isa, or QKVFUSE_CPU_ISA). Compiled without ISA flags: it only asks.
 *
 * QF_CPU_HAVE_AVX2 / _AVX512 / _AVX512BF16 are defined by sources.cmake when the
 * compiler could build those kernels. CPU support is read once with CPUID and
 * XGETBV (the OS must save the YMM / ZMM state). */
#define _POSIX_C_SOURCE 200809L

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "cpu/cpu.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define QF_X86 1
#endif

extern const qf_cpu_kernels qf_cpu_kernels_scalar;
#ifdef QF_CPU_HAVE_AVX2
extern const qf_cpu_kernels qf_cpu_kernels_avx2;
#endif
#ifdef QF_CPU_HAVE_AVX512
extern const qf_cpu_kernels qf_cpu_kernels_avx512;
#endif
#ifdef QF_CPU_HAVE_AVX512BF16
extern const qf_cpu_kernels qf_cpu_kernels_avx512bf16;
#endif

static const char *const isa_names[QF_CPU_ISA_COUNT] = {"scalar", "avx2", "avx512", "avx512bf16"};

const char *qf_cpu_isa_name(qf_cpu_isa isa) { return (unsigned)isa < QF_CPU_ISA_COUNT ? isa_names[isa] : "?"; }

const qf_cpu_kernels *qf_cpu_kernels_for(qf_cpu_isa isa) {
  switch (isa) {
    case QF_CPU_ISA_SCALAR:
      return &qf_cpu_kernels_scalar;
#ifdef QF_CPU_HAVE_AVX2
    case QF_CPU_ISA_AVX2:
      return &qf_cpu_kernels_avx2;
#endif
#ifdef QF_CPU_HAVE_AVX512
    case QF_CPU_ISA_AVX512:
      return &qf_cpu_kernels_avx512;
#endif
#ifdef QF_CPU_HAVE_AVX512BF16
    case QF_CPU_ISA_AVX512BF16:
      return &qf_cpu_kernels_avx512bf16;
#endif
    default:
      return NULL;
  }
}

#ifdef QF_X86
static uint64_t xgetbv0(void) {
  uint32_t lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return ((uint64_t)hi << 32) | lo;
}
#endif

/* Bit i set: the CPU and OS can run ISA i. */
static unsigned cpu_isas(void) {
  unsigned set = 1u << QF_CPU_ISA_SCALAR;
#ifdef QF_X86
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return set;
  const int osxsave = (c >> 27) & 1, avx = (c >> 28) & 1, f16c = (c >> 29) & 1;
  if (!osxsave || !avx) return set;
  const uint64_t xcr0 = xgetbv0();
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return set;
  const unsigned max_sub7 = a;
  const int avx2 = (b >> 5) & 1;
  const int avx512 = ((b >> 16) & 1) && ((b >> 17) & 1) && ((b >> 30) & 1) && ((b >> 31) & 1); /* F DQ BW VL */
  int bf16 = 0;
  if (max_sub7 >= 1 && __get_cpuid_count(7, 1, &a, &b, &c, &d)) bf16 = (a >> 5) & 1; /* AVX512_BF16 */
  if (avx2 && f16c && (xcr0 & 0x6) == 0x6) set |= 1u << QF_CPU_ISA_AVX2;
  if (avx512 && avx2 && f16c && (xcr0 & 0xe6) == 0xe6) {
    set |= 1u << QF_CPU_ISA_AVX512;
    if (bf16) set |= 1u << QF_CPU_ISA_AVX512BF16;
  }
#endif
  return set;
}

static unsigned cached_isas(void) {
  static atomic_uint cache; /* 0: not yet asked (the scalar bit is always set) */
  unsigned v = atomic_load(&cache);
  if (v == 0) {
    v = cpu_isas();
    atomic_store(&cache, v);
  }
  return v;
}

int qf_cpu_isa_usable(qf_cpu_isa isa) {
  return (unsigned)isa < QF_CPU_ISA_COUNT && qf_cpu_kernels_for(isa) != NULL && ((cached_isas() >> isa) & 1);
}

qkvfuse_status qf_cpu_isa_choose(const qf_variants *v, qf_cpu_isa *isa) {
  const char *want = v->cpu_isa ? v->cpu_isa : getenv(QF_CPU_ISA_ENV);
  const char *source = v->cpu_isa ? "cpu.isa" : QF_CPU_ISA_ENV;
  if (want == NULL || want[0] == '\0' || strcmp(want, "auto") == 0) {
    *isa = QF_CPU_ISA_SCALAR;
    for (int i = QF_CPU_ISA_COUNT - 1; i > 0; i--)
      if (qf_cpu_isa_usable((qf_cpu_isa)i)) {
        *isa = (qf_cpu_isa)i;
        break;
      }
    return QKVFUSE_SUCCESS;
  }
  for (int i = 0; i < QF_CPU_ISA_COUNT; i++) {
    if (strcmp(want, isa_names[i]) != 0) continue;
    QF_CHECK(qf_cpu_kernels_for((qf_cpu_isa)i) != NULL, QKVFUSE_ERROR_UNSUPPORTED,
             "%s: '%s' requested, but this build of qkvfuse has no %s kernels (compiler without the flags)",
             source, want, want);
    QF_CHECK(qf_cpu_isa_usable((qf_cpu_isa)i), QKVFUSE_ERROR_UNSUPPORTED,
             "%s: '%s' requested, but this CPU (or OS) does not support it", source, want);
    *isa = (qf_cpu_isa)i;
    return QKVFUSE_SUCCESS;
  }
  return qf_fail(QKVFUSE_ERROR_UNSUPPORTED, "%s: unknown value '%s'; expected avx512bf16, avx512, avx2, scalar or auto",
                 source, want);
}
