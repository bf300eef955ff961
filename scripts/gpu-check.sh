#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# One call on the GPU machine: build with CUDA, run the test suite (GPU tests
# included), compute-sanitizer over the GPU tests, and the CUDA benchmark.
# Results go under $OUT (default /tmp/qkvfuse-gpu): summary.txt, bench.txt,
# bench.json, demo.txt, and the detailed logs (configure, build, ctest, each
# sanitizer run) packed at the end into logs.tgz, so that a device call,
# which returns at most 8 files, brings all of it back; a short summary goes
# to stdout.
#
#   scripts/gpu-check.sh [build] [test] [sanitize] [bench] [demo]   (default: all)
#
# Environment: BUILD (default build-gpu), JOBS, CUDA_ARCHS (default "80;90"),
# CTEST_ARGS (e.g. "-R cuda"), BENCH_ARGS (extra options for
# `qkvfuse bench --device cuda`), SANITIZE_CMD (the one program compute-sanitizer
# runs, relative to $BUILD/bin; default: the GPU test programs the sanitize step
# lists), SANITIZE_ARGS (extra compute-sanitizer options), SANITIZE_TIMEOUT
# (seconds one sanitized program may run; default 1800).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/qkvfuse-gpu}
BUILD=${BUILD:-build-gpu}
JOBS=${JOBS:-$(nproc)}
LOGS=$OUT/logs
mkdir -p "$OUT" "$LOGS"
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
      -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCHS:-80;90}" >"$LOGS/configure.log" 2>&1 || { note "configure FAILED"; tail -20 "$LOGS/configure.log"; exit 1; }
  fi
  cmake --build "$BUILD" -j "$JOBS" >"$LOGS/build.log" 2>&1 || { note "build FAILED"; grep -E "error|Error" "$LOGS/build.log" | head -30; exit 1; }
  note "build ok ($(( $(date +%s) - t0 )) s)"
fi

if has test; then
  (cd "$BUILD" && ctest --output-on-failure -j 4 --timeout 900 ${CTEST_ARGS:-}) >"$LOGS/ctest.log" 2>&1
  rc=$?
  note "ctest rc=$rc: $(grep -E 'tests passed|tests failed' "$LOGS/ctest.log" | tail -1)"
  grep -E "Passed|Failed|Skipped|\*\*\*" "$LOGS/ctest.log" | sed 's/^ *//' | tail -40
  [ $rc -ne 0 ] && status=1
fi

if has sanitize; then
  # compute-sanitizer over the GPU test programs: memcheck (no access
  # outside an allocation, no leak of device memory), racecheck (shared-memory
  # hazards), initcheck (no read of uninitialized device memory), synccheck
  # (barrier misuse). The GPU fuzz loop feeds out-of-range positions and slots
  # and bad scales, with canary-guarded buffers. SANITIZE_CMD (a program of
  # $BUILD/bin and its arguments) replaces the list; SANITIZE_ARGS adds options
  # to every compute-sanitizer command.
  progs=(
    "test_cuda_fuzz --iters 80"
    "test_cuda_data"
    "test_hostile --backend cuda --no-big"
    "test_special --backend cuda"
    "test_layouts --backend cuda"
    "test_ops --backend cuda --cases 24 --seed 0x5A17"
    "test_cuda_streams --rounds 2"
    "test_concurrency --backend cuda --threads 4 --rounds 1"
    "test_cuda_graph"
    "test_cuda_pdl"
  )
  [ -n "${SANITIZE_CMD:-}" ] && progs=("$SANITIZE_CMD")
  # the four tools run side by side (one GPU, separate processes), each over
  # the program list in turn; SANITIZE_TIMEOUT bounds one program's run
  sanitize_tool() {
    local tool=$1 trc=0 p bin log extra summary rc
    for p in "${progs[@]}"; do
      set -- $p
      bin="$BUILD/bin/$1"
      shift
      [ -x "$bin" ] || { echo "   compute-sanitizer $tool: $(basename "$bin") not built"; trc=1; continue; }
      log="$LOGS/sanitize-$tool-$(basename "$bin").log"
      extra=()
      [ "$tool" = memcheck ] && extra=(--leak-check full)
      [ "$tool" = racecheck ] && extra=(--racecheck-report hazard)
      timeout "${SANITIZE_TIMEOUT:-1800}" compute-sanitizer --tool "$tool" --error-exitcode 99 --print-limit 20 \
        ${extra[@]+"${extra[@]}"} ${SANITIZE_ARGS:-} "$bin" "$@" >"$log" 2>&1
      rc=$?
      summary=$(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|LEAK SUMMARY' "$log" | tail -1)
      [ $rc -eq 124 ] && summary="TIMED OUT after ${SANITIZE_TIMEOUT:-1800} s"
      echo "   $tool $(basename "$bin") $*: rc=$rc ${summary:-no summary} ($(grep -E 'passed|failed|skipped' "$log" | tail -1))"
      if [ $rc -ne 0 ]; then
        trc=1
        grep -m 20 -E "Invalid|Error|error|Race|Hazard|Uninitialized|Barrier|FAIL" "$log"
      fi
    done
    echo "== compute-sanitizer $tool: $([ $trc -eq 0 ] && echo clean || echo ERRORS) over ${#progs[@]} programs"
    return $trc
  }
  pids=()
  for tool in memcheck racecheck initcheck synccheck; do
    sanitize_tool "$tool" >"$LOGS/sanitize-$tool.txt" 2>&1 &
    pids+=($!)
  done
  for pid in "${pids[@]}"; do wait "$pid" || status=1; done
  for tool in memcheck racecheck initcheck synccheck; do tee -a "$OUT/summary.txt" <"$LOGS/sanitize-$tool.txt"; done
fi

if has bench; then
  "$BUILD/bin/qkvfuse" bench --device cuda --json-out "$OUT/bench.json" ${BENCH_ARGS:-} >"$OUT/bench.txt" 2>"$LOGS/bench.err"
  rc=$?
  note "bench rc=$rc"
  cat "$OUT/bench.txt"
  [ $rc -ne 0 ] && { status=1; tail -5 "$LOGS/bench.err"; }
fi

if has demo; then
  "$BUILD/bin/qkvfuse" demo >"$OUT/demo.txt" 2>&1
  rc=$?
  note "demo rc=$rc"
  tail -25 "$OUT/demo.txt"
  [ $rc -ne 0 ] && status=1
fi
tar czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$LOGS"
exit $status
