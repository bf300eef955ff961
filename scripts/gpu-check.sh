#!/usr/bin/env bash
# One call on the GPU machine: build with CUDA, run the test suite (GPU tests
# included), compute-sanitizer over the GPU tests, and the CUDA benchmark.
# Logs go under $OUT (default /tmp/qkvfuse-gpu); a short summary goes to stdout.
#
#   scripts/gpu-check.sh [build] [test] [sanitize] [bench] [demo]   (default: all)
#
# Environment: BUILD (default build-gpu), JOBS, CUDA_ARCHS (default "80;90"),
# CTEST_ARGS (e.g. "-R cuda"), BENCH_ARGS (extra options for
# `qkvfuse bench --device cuda`), SANITIZE_CMD (the program compute-sanitizer
# runs, relative to $BUILD/bin; default: test_ops --backend cuda --cases 40).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/qkvfuse-gpu}
BUILD=${BUILD:-build-gpu}
JOBS=${JOBS:-$(nproc)}
mkdir -p "$OUT"
steps=("$@")
[ ${#steps[@]} -eq 0 ] && steps=(build test sanitize bench demo)
has() { local s; for s in "${steps[@]}"; do [ "$s" = "$1" ] && return 0; done; return 1; }
status=0
note() { echo "== $*" | tee -a "$OUT/summary.txt"; }

note "$(date -u +%FT%TZ) commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet 2>/dev/null || echo '+dirty')"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv,noheader \
  2>&1 | tee -a "$OUT/summary.txt"

if has build; then
  t0=$(date +%s)
  if [ ! -f "$BUILD/CMakeCache.txt" ]; then
    cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DQKVFUSE_CUDA=ON \
      -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCHS:-80;90}" >"$OUT/configure.log" 2>&1 || { note "configure FAILED"; tail -20 "$OUT/configure.log"; exit 1; }
  fi
  cmake --build "$BUILD" -j "$JOBS" >"$OUT/build.log" 2>&1 || { note "build FAILED"; grep -E "error|Error" "$OUT/build.log" | head -30; exit 1; }
  note "build ok ($(( $(date +%s) - t0 )) s)"
fi

if has test; then
  (cd "$BUILD" && ctest --output-on-failure -j 4 --timeout 900 ${CTEST_ARGS:-}) >"$OUT/ctest.log" 2>&1
  rc=$?
  note "ctest rc=$rc: $(grep -E 'tests passed|tests failed' "$OUT/ctest.log" | tail -1)"
  grep -E "Passed|Failed|Skipped|\*\*\*" "$OUT/ctest.log" | sed 's/^ *//' | tail -40
  [ $rc -ne 0 ] && status=1
fi

if has sanitize; then
  for tool in memcheck racecheck initcheck synccheck; do
    compute-sanitizer --tool "$tool" --error-exitcode 99 $BUILD/bin/${SANITIZE_CMD:-test_ops --backend cuda --cases 40} \
      >"$OUT/sanitize-$tool.log" 2>&1
    rc=$?
    note "compute-sanitizer $tool rc=$rc: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/sanitize-$tool.log" | tail -1)"
    [ $rc -ne 0 ] && { status=1; grep -m 20 -E "Invalid|Error|error|Race|Uninitialized" "$OUT/sanitize-$tool.log"; }
  done
fi

if has bench; then
  "$BUILD/bin/qkvfuse" bench --device cuda ${BENCH_ARGS:-} >"$OUT/bench.txt" 2>"$OUT/bench.err"
  rc=$?
  "$BUILD/bin/qkvfuse" bench --device cuda --json ${BENCH_ARGS:-} >"$OUT/bench.json" 2>/dev/null
  note "bench rc=$rc"
  cat "$OUT/bench.txt"
  [ $rc -ne 0 ] && { status=1; tail -5 "$OUT/bench.err"; }
fi

if has demo; then
  "$BUILD/bin/qkvfuse" demo >"$OUT/demo.txt" 2>&1
  rc=$?
  note "demo rc=$rc"
  tail -25 "$OUT/demo.txt"
  [ $rc -ne 0 ] && status=1
fi
exit $status
