#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# The whole test suite under AddressSanitizer + UndefinedBehaviorSanitizer:
# a second build tree (CUDA off) compiled and linked with
# -fsanitize=address,undefined -fno-sanitize-recover=all, then its ctest. Any
# report fails the run (halt on the first error, leaks included).
#
#   scripts/sanitize.sh [BUILD_DIR]   (default build-asan)
# Environment: CC (default: cc), JOBS (default 2), CTEST_ARGS (extra ctest options).
set -u
here=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$here/build-asan}
jobs=${JOBS:-2}
flags="-g -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer"
mkdir -p "$build"
if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S "$here" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_FLAGS="$flags" \
    -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=address,undefined" \
    -DQKVFUSE_CUDA=OFF -DQKVFUSE_HARDENING_CHECKS=OFF >"$build/configure.log" 2>&1 || { cat "$build/configure.log"; exit 1; }
fi
cmake --build "$build" -j "$jobs" >"$build/build.log" 2>&1 || { grep -E "error|Error" "$build/build.log" | head -40; exit 1; }
export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
cd "$build" || exit 1
# shellcheck disable=SC2086
ctest -j "$jobs" --output-on-failure ${CTEST_ARGS:-} >"$build/ctest.log" 2>&1
rc=$?
grep -E "tests passed|tests failed|\*\*\*|runtime error|ERROR: AddressSanitizer|ERROR: LeakSanitizer" "$build/ctest.log" | head -40
echo "sanitize.sh: ASan+UBSan suite in $build: rc=$rc (log: $build/ctest.log)"
exit $rc
