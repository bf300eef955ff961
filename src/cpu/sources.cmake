# SPDX-License-Identifier: Apache-2.0
# The optimized CPU backend: included by the top-level CMakeLists.txt
# before the library is created. The driver (isa.c, backend.c, pool.c) and the
# portable kernels build with the project's flags; each ISA's kernels get their
# own instruction-set flags and are only called after a run-time CPUID check,
# so the library still runs on any x86-64 (and builds elsewhere without them).
include(CheckCCompilerFlag)

set(QKVFUSE_CPU_SOURCES
  src/cpu/isa.c
  src/cpu/backend.c
  src/cpu/pool.c
  src/cpu/kernels_scalar.c
)
set(qkvfuse_cpu_defs "")

if(CMAKE_SYSTEM_PROCESSOR MATCHES "^(x86_64|AMD64|amd64|i[3-6]86)$")
  set(qkvfuse_avx2_flags -mavx2 -mf16c -mprfchw)
  set(qkvfuse_avx512_flags -mavx512f -mavx512bw -mavx512vl -mavx512dq -mf16c -mprfchw)
  check_c_compiler_flag("-mavx2 -mf16c -mprfchw" QKVFUSE_CC_HAS_AVX2)
  check_c_compiler_flag("-mavx512f -mavx512bw -mavx512vl -mavx512dq" QKVFUSE_CC_HAS_AVX512)
  if(QKVFUSE_CC_HAS_AVX2)
    list(APPEND QKVFUSE_CPU_SOURCES src/cpu/kernels_avx2.c)
    set_source_files_properties(src/cpu/kernels_avx2.c PROPERTIES COMPILE_OPTIONS "${qkvfuse_avx2_flags}")
    list(APPEND qkvfuse_cpu_defs QF_CPU_HAVE_AVX2)
  endif()
  check_c_compiler_flag("-mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512bf16" QKVFUSE_CC_HAS_AVX512BF16)
  if(QKVFUSE_CC_HAS_AVX512)
    list(APPEND QKVFUSE_CPU_SOURCES src/cpu/kernels_avx512.c)
    set_source_files_properties(src/cpu/kernels_avx512.c PROPERTIES COMPILE_OPTIONS "${qkvfuse_avx512_flags}")
    list(APPEND qkvfuse_cpu_defs QF_CPU_HAVE_AVX512)
  endif()
  if(QKVFUSE_CC_HAS_AVX512 AND QKVFUSE_CC_HAS_AVX512BF16)
    list(APPEND QKVFUSE_CPU_SOURCES src/cpu/kernels_avx512bf16.c)
    set_source_files_properties(src/cpu/kernels_avx512bf16.c PROPERTIES COMPILE_OPTIONS
                                "${qkvfuse_avx512_flags};-mavx512bf16")
    list(APPEND qkvfuse_cpu_defs QF_CPU_HAVE_AVX512BF16)
  endif()
endif()
set_source_files_properties(src/cpu/isa.c PROPERTIES COMPILE_DEFINITIONS "${qkvfuse_cpu_defs}")

list(APPEND QKVFUSE_SOURCES ${QKVFUSE_CPU_SOURCES})
