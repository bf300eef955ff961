#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# A/B benchmark of two source trees in one run: builds the `qkvfuse` CLI of a
# base tree and of this tree side by side, then runs `qkvfuse bench` on each
# in alternation, ROUNDS times (the order reversed every other round), so
# both see the same machine, clocks and neighbours (run-to-run spread between
# machines is larger than most changes).
# Use it for any claim that a change makes a call faster or slower.
#
#   scripts/bench-ab.sh prepare REF [DIR]   copy commit REF of this repo into DIR
#                                           (default build-ab/base: ignored by git,
#                                           so pass it in the device tool's carry)
#   scripts/bench-ab.sh run [DIR] -- BENCH_OPTIONS...
#
# Environment: AB_DEVICE (cuda, default, or cpu), CUDA_ARCHS (default 90),
# ROUNDS (default 2), JOBS, AB_NEW_BUILD (a build directory of this tree to
# use instead of building it again), AB_VARIANTS (more builds of this tree,
# "name:flag,flag name2:flag", run as further sides), AB_VARIANT_SRC (the
# source tree the variants build from instead of this one, e.g. a copy made
# by `prepare` with experiment switches patched in, so that the switches
# never enter this tree), BASE_FLAGS / NEW_FLAGS (extra CMAKE_CUDA_FLAGS and
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
    awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"
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
if [ -n "${AB_NEW_BUILD:-}" ]; then # a build of this tree that exists already (e.g. gpu-check's)
  mkdir -p "$OUT/build-new/bin" && ln -sf "$(cd "$AB_NEW_BUILD" && pwd)/bin/qkvfuse" "$OUT/build-new/bin/qkvfuse"
  pn=
else
  build new . "${NEW_FLAGS:-}" &
  pn=$!
fi
# variants: more builds of this tree, "name:flags" each (flags joined by commas)
sides=(base new)
vpids=()
for v in ${AB_VARIANTS:-}; do
  name=${v%%:*}
  build "$name" "${AB_VARIANT_SRC:-.}" "$(echo "${v#*:}" | tr ',' ' ')" &
  vpids+=($!)
  sides+=("$name")
done
wait $pb || { echo "bench-ab: base build failed ($OUT/build-base.log)" >&2; exit 1; }
[ -z "$pn" ] || wait $pn || { echo "bench-ab: new build failed ($OUT/build-new.log)" >&2; exit 1; }
for p in ${vpids[@]+"${vpids[@]}"}; do wait "$p" || { echo "bench-ab: a variant build failed" >&2; exit 1; }; done

# Even rounds run the sides in reverse order: a run's place in the round
# biases its time by several percent on a shared machine.
for r in $(seq 1 "$ROUNDS"); do
  order=("${sides[@]}")
  if [ $((r % 2)) = 0 ]; then
    order=()
    for ((i = ${#sides[@]} - 1; i >= 0; i--)); do order+=("${sides[$i]}"); done
  fi
  for side in "${order[@]}"; do
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

# side by side: the median over rounds of each side, and new / base time
python3 - "$OUT" "$ROUNDS" "${sides[@]}" <<'PY' | tee "$OUT/ab-table.txt"
import json, statistics, sys
out, rounds, names = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
rows = {}
for side in names:
    for r in range(1, rounds + 1):
        for line in open(f"{out}/{side}-{r}.jsonl"):
            if line.strip():
                j = json.loads(line)
                rows.setdefault((j["op"], j["preset"], j["tokens"]), {}).setdefault(side, []).append(j)
print("%-8s %-12s %6s" % ("op", "preset", "T") + "".join(" | %9s %5s %5s" % (n + " us", "%copy", "/base") for n in names))
for (op, preset, t), sides in rows.items():
    us = {k: statistics.median(x["us"] for x in v) for k, v in sides.items()}
    pct = {k: statistics.median(x["pct_of_copy"] for x in v) for k, v in sides.items()}
    line = "%-8s %-12s %6d" % (op, preset, t)
    for n in names:
        line += " | %9.2f %4.0f%% %5.3f" % (us[n], pct[n], us[n] / us["base"]) if n in us else " | %21s" % "-"
    print(line)
PY
