#!/usr/bin/env bash
# A/B benchmark of two source trees in one run: builds the `qkvfuse` CLI of a
# base tree and of this tree side by side, then runs `qkvfuse bench` on each
# in alternation, ROUNDS times, so both see the same machine, clocks and
# neighbours (run-to-run spread between machines is larger than most changes).
# How BENCHMARKS.md's "predicted vs measured" rows are taken.
#
#   scripts/bench-ab.sh prepare REF [DIR]   copy commit REF of this repo into DIR
#                                           (default build-ab/base: ignored by git,
#                                           so pass it in the device tool's carry)
#   scripts/bench-ab.sh run [DIR] -- BENCH_OPTIONS...
#
# Environment: AB_DEVICE (cuda, default, or cpu), CUDA_ARCHS (default 90),
# ROUNDS (default 2), JOBS, BASE_FLAGS / NEW_FLAGS (extra CMAKE_CUDA_FLAGS and
# CMAKE_C_FLAGS of each side, e.g. -DSOME_EXPERIMENT), NEW_ENV (environment of
# the new side's runs, e.g. QKVFUSE_CUDA_PDL=0), OUT (logs; default
# /tmp/qkvfuse-ab). Output: one line per result, "base" or "new" first, then
# op, preset, tokens, fused us, %copy, speed-up over unfused.
set -uo pipefail
cd "$(dirname "$0")/.."
mode=${1:-}
shift || true
case $mode in
  prepare)
    ref=${1:?usage: scripts/bench-ab.sh prepare REF [DIR]}
    dir=${2:-build-ab/base}
    rm -rf "$dir" && mkdir -p "$dir" || exit 1
    git archive "$ref" | tar -x -C "$dir" || { echo "bench-ab: cannot archive $ref" >&2; exit 1; }
    echo "bench-ab: $(git rev-parse --short "$ref") in $dir"
    exit 0
    ;;
  run) ;;
  *)
    sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
    ;;
esac

dir=build-ab/base
if [ $# -gt 0 ] && [ "$1" != "--" ]; then dir=$1; shift; fi
[ "${1:-}" = "--" ] && shift
[ -f "$dir/CMakeLists.txt" ] || { echo "bench-ab: no source tree in $dir (run: scripts/bench-ab.sh prepare REF)" >&2; exit 1; }
OUT=${OUT:-/tmp/qkvfuse-ab}
DEVICE=${AB_DEVICE:-cuda}
ROUNDS=${ROUNDS:-2}
JOBS=${JOBS:-$(nproc)}
mkdir -p "$OUT"

build() { # name source-dir extra-flags
  local b=$OUT/build-$1 cuda=OFF
  [ "$DEVICE" = cuda ] && cuda=ON
  cmake -S "$2" -B "$b" -DCMAKE_BUILD_TYPE=Release -DQKVFUSE_CUDA=$cuda \
    -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCHS:-90}" "-DCMAKE_CUDA_FLAGS=$3" "-DCMAKE_C_FLAGS=$3" \
    >"$OUT/configure-$1.log" 2>&1 &&
    cmake --build "$b" -j "$(( (JOBS + 1) / 2 ))" --target qkvfuse_cli >"$OUT/build-$1.log" 2>&1
}
build base "$dir" "${BASE_FLAGS:-}" &
pb=$!
build new . "${NEW_FLAGS:-}" &
pn=$!
wait $pb || { echo "bench-ab: base build failed ($OUT/build-base.log)" >&2; exit 1; }
wait $pn || { echo "bench-ab: new build failed ($OUT/build-new.log)" >&2; exit 1; }

for r in $(seq 1 "$ROUNDS"); do
  for side in base new; do
    env_args=()
    [ $side = new ] && [ -n "${NEW_ENV:-}" ] && env_args=($NEW_ENV)
    env "${env_args[@]}" "$OUT/build-$side/bin/qkvfuse" bench --device "$DEVICE" --json "$@" \
      >"$OUT/$side-$r.jsonl" 2>"$OUT/$side-$r.err" || { echo "bench-ab: $side bench failed:" >&2; tail -3 "$OUT/$side-$r.err" >&2; exit 1; }
    echo "# round $r: $side"
    python3 -c '
import json, sys
for line in sys.stdin:
    if line.strip():
        r = json.loads(line)
        print(sys.argv[1], r["op"], r["preset"], r["tokens"], "%.2f" % r["us"], "%.0f%%" % r["pct_of_copy"],
              "%.2fx" % r["speedup_vs_unfused"] if r.get("speedup_vs_unfused") else "-")
' $side <"$OUT/$side-$r.jsonl"
  done
done | tee "$OUT/ab.txt"
