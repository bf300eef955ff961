#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Bounded libFuzzer run of the fuzz targets (fuzz/): a clang build with
# -fsanitize=fuzzer,address,undefined in its own tree, then each target for
# SECONDS from the seed corpus (fuzz/corpus/<target>, read only) plus a working
# corpus kept in the build tree. docs/ERRORS.md says what the targets check.
#
#   scripts/fuzz.sh [--build DIR] [--seconds N] [--targets "core named"] [--jobs J]
#
# Exit: 0 no violation, 1 a violation (the crashing input is left in
# DIR/artifacts/ with the command that replays it), 77 skipped: clang's fuzzer
# runtime cannot be had here (a plain-driver replay of the corpus still runs
# in every build: the fuzz_corpus_* tests).
#
# Where clang or its fuzzer runtime is missing and this runs as root with apt
# (a fresh CI machine of this project's kind), it installs Debian's clang and
# libclang-rt-14-dev first; QKVFUSE_NO_INSTALL=1 turns that off.
# Longer runs: scripts/fuzz.sh --seconds 3600 --build build-fuzz (docs/ERRORS.md).
set -u
here=$(cd "$(dirname "$0")/.." && pwd)
build=$here/build-fuzz
seconds=25
targets="core named"
jobs=2
while [ $# -gt 0 ]; do
  case $1 in
    --build) build=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --targets) targets=$2; shift 2 ;;
    --jobs) jobs=$2; shift 2 ;;
    *) echo "fuzz.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
mkdir -p "$build"

find_clang() {
  for c in clang clang-14 clang-15 clang-16 clang-17 clang-18 clang-19; do
    command -v "$c" >/dev/null 2>&1 && { echo "$c"; return 0; }
  done
  return 1
}

# 0 if $1 links a libFuzzer target with ASan and UBSan.
probe() {
  printf 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n) { return (int)(n && d[0] == 1); }\n' \
    >"$build/probe.c"
  "$1" -fsanitize=fuzzer,address,undefined "$build/probe.c" -o "$build/probe" >"$build/probe.log" 2>&1
}

cc=$(find_clang) && probe "$cc"
if [ $? -ne 0 ] || [ -z "${cc:-}" ]; then
  if [ "${QKVFUSE_NO_INSTALL:-0}" != 1 ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "fuzz.sh: clang's libFuzzer runtime is missing; installing clang and libclang-rt-14-dev with apt-get"
    export DEBIAN_FRONTEND=noninteractive
    { timeout 300 apt-get install -y -q --no-install-recommends clang libclang-rt-14-dev ||
      { timeout 300 apt-get update -q && timeout 300 apt-get install -y -q --no-install-recommends clang libclang-rt-14-dev; }; } \
      >"$build/apt.log" 2>&1 || echo "fuzz.sh: apt-get failed (see $build/apt.log)"
    cc=$(find_clang) && probe "$cc"
  fi
fi
if [ -z "${cc:-}" ] || ! probe "$cc"; then
  echo "fuzz.sh: SKIPPED: no clang with libFuzzer here ($(tail -1 "$build/probe.log" 2>/dev/null))."
  echo "fuzz.sh: the fuzz_corpus_* tests still replay the corpus and random inputs through the plain driver."
  exit 77
fi

flags="-g -fsanitize=address,undefined,fuzzer-no-link -fno-sanitize-recover=all -fno-omit-frame-pointer"
if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S "$here" -B "$build" -DCMAKE_C_COMPILER="$cc" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_C_FLAGS="$flags" -DQKVFUSE_CUDA=OFF -DQKVFUSE_BUILD_TOOLS=OFF -DQKVFUSE_HARDENING_CHECKS=OFF \
    -DQKVFUSE_FUZZ_LIBFUZZER=ON >"$build/configure.log" 2>&1 || { cat "$build/configure.log"; exit 1; }
fi
bins=""
for t in $targets; do bins="$bins fuzz_$t"; done
# shellcheck disable=SC2086
cmake --build "$build" -j "$jobs" --target $bins >"$build/build.log" 2>&1 || { tail -40 "$build/build.log"; exit 1; }

export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
mkdir -p "$build/artifacts"
status=0
for t in $targets; do
  work=$build/corpus-$t
  mkdir -p "$work"
  log=$build/fuzz-$t.log
  # (libFuzzer's own exit code for a crash is 77, ctest's "skipped": make every finding exit 1)
  "$build/bin/fuzz_$t" -max_total_time="$seconds" -timeout=30 -rss_limit_mb=2048 -max_len=512 \
    -error_exitcode=1 -timeout_exitcode=1 \
    -print_final_stats=1 -artifact_prefix="$build/artifacts/$t-" "$work" "$here/fuzz/corpus/$t" >"$log" 2>&1
  rc=$?
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  if [ $rc -ne 0 ]; then
    status=1
    echo "fuzz.sh: fuzz_$t FOUND A VIOLATION (rc $rc) after ${runs:-?} inputs:"
    grep -E "INVARIANT|ERROR: |runtime error|^case:|^[a-z_]+(\.|:| =)|Test unit written|^Base64: " "$log" |
      awk '!seen[$0]++' | head -40
    echo "fuzz.sh: replay: $build/bin/fuzz_$t <the artifact above>   (or fuzz_${t}_replay in any build)"
    # the artifact stays on the machine that ran this; the log line below recreates it anywhere (CI)
    b64=$(sed -n 's/^Base64: //p' "$log" | head -1)
    [ -n "$b64" ] && echo "fuzz.sh: the input, anywhere: echo $b64 | base64 -d > crash; a sanitizer finding" \
      "needs this script's build to show (scripts/fuzz.sh builds build-fuzz/bin/fuzz_$t; run it on crash)"
  else
    echo "fuzz.sh: fuzz_$t: ${runs:-?} inputs in ${seconds} s under ASan+UBSan, invariant held ($(ls "$work" | wc -l) inputs in the working corpus)"
  fi
done
exit $status
