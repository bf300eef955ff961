#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The Python package on the GPU machine, in one call: the pytest suite (CPU and
# CUDA parts: oracle, unfused parity vs the PyTorch composition, torch.compile,
# CUDA graphs, streams, error flags) on the torch binding loaded and its torch
# tests again on the Python registration, the example, and the benchmark
# against PyTorch eager / torch.compile / copy bandwidth and of the host cost
# per call. Builds nothing: it uses the library (and the torch extension, when
# the build's python3 had torch) scripts/gpu-check.sh built (BUILD, default
# build-gpu) and the machine's torch, numpy and pytest (no network needed).
#
#   scripts/gpu-python.sh [test] [example] [bench] [peers] [transformers]   (default: all five)
#
# peers: python/bench/bench_peers.py, qkvfuse.compat against the peers' own
# calls; the FlashInfer wheels travel in .whl/ (scripts/peer-wheels.sh) and
# are installed into /tmp/qkvfuse-peer-site first. transformers:
# python/bench/bench_transformers.py, a transformers model's forward patched
# by qkvfuse.integrations.transformers against unpatched (eager, compile).
#
# Logs and plots go under $OUT (default /tmp/qkvfuse-gpu-python); a summary
# goes to stdout and $OUT/summary.txt. Each part runs on its own (one failing
# does not stop the next) under a time limit. Environment: BUILD, OUT,
# PYTHON (default python3), PYTEST_ARGS (extra pytest options, e.g. -x or
# -k parity), BENCH_ARGS (extra bench options), PEERS_ARGS (extra bench_peers options),
# TEST_TIMEOUT, BENCH_TIMEOUT (s).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/qkvfuse-gpu-python}
BUILD=${BUILD:-build-gpu}
PY=${PYTHON:-python3}
mkdir -p "$OUT"
steps=("$@")
[ ${#steps[@]} -eq 0 ] && steps=(test example bench peers transformers)
has() { local s; for s in "${steps[@]}"; do [ "$s" = "$1" ] && return 0; done; return 1; }
note() { echo "== $*" | tee -a "$OUT/summary.txt"; }
status=0

case $BUILD in /*) ;; *) BUILD=$PWD/$BUILD ;; esac # absolute or relative to the repo
export QKVFUSE_LIBRARY=${QKVFUSE_LIBRARY:-$BUILD/libqkvfuse.so}
export PYTHONPATH=$PWD/python${PYTHONPATH:+:$PYTHONPATH}
export PYTHONDONTWRITEBYTECODE=1
export QKVFUSE_REPORT_DIR=$OUT

note "$(date -u +%FT%TZ) commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet 2>/dev/null || echo '+dirty')"
if [ ! -f "$QKVFUSE_LIBRARY" ]; then
  note "no library at $QKVFUSE_LIBRARY: run scripts/gpu-check.sh build first (or set BUILD / QKVFUSE_LIBRARY)"
  exit 1
fi
set -x
"$PY" - <<'EOF' 2>&1 | tee -a "$OUT/summary.txt"
import sys, numpy, torch, qkvfuse
print("python", sys.version.split()[0], "| numpy", numpy.__version__, "| torch", torch.__version__,
      "| cuda", torch.version.cuda, "| devices", torch.cuda.device_count(),
      "|", torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU")
print("qkvfuse", qkvfuse.version(), "from", qkvfuse.library_path(), "| torch ops:", qkvfuse.HAVE_TORCH,
      "| torch binding:", qkvfuse.build_info()["torch_binding"], qkvfuse.build_info()["torch_extension"] or "",
      qkvfuse.build_info().get("torch_binding_reason", ""))
EOF
{ set +x; } 2>/dev/null

if has test; then
  t0=$(date +%s)
  probe="$BUILD/bin/qkvfuse_abi_probe"
  [ -x "$probe" ] && export QKVFUSE_ABI_PROBE=$probe
  set -x
  timeout "${TEST_TIMEOUT:-1500}" "$PY" -m pytest -p no:cacheprovider -rs -s -v --durations=15 python/tests \
    ${PYTEST_ARGS:-} >"$OUT/pytest.log" 2>&1
  rc=$?
  { set +x; } 2>/dev/null
  note "pytest rc=$rc ($(( $(date +%s) - t0 )) s): $(grep -E '^(=+ )?[0-9]+ (passed|failed)|(passed|failed|error).* in [0-9.]+s' "$OUT/pytest.log" | tail -1)"
  grep -E "^(FAILED|ERROR)|SKIPPED" "$OUT/pytest.log" | head -40
  grep -A12 "qkvfuse (rounding=unfused_parity) vs the PyTorch composition" "$OUT/pytest.log" | head -60 >"$OUT/parity.txt"
  [ -s "$OUT/parity.txt" ] && { note "parity (qkvfuse unfused_parity vs the PyTorch composition; $OUT/parity.json):"; head -12 "$OUT/parity.txt"; }
  [ $rc -ne 0 ] && { status=1; tail -40 "$OUT/pytest.log"; }
  # the torch tests (and qkvfuse.compat's, torch-only) again, on the operators registered in Python
  set -x
  QKVFUSE_TORCH_BINDING=python QKVFUSE_TEST_TORCH_BINDING=python timeout "${TEST_TIMEOUT:-1500}" "$PY" -m pytest \
    -p no:cacheprovider -rs -k "torch or compat" python/tests ${PYTEST_ARGS:-} >"$OUT/pytest-python-binding.log" 2>&1
  rc=$?
  { set +x; } 2>/dev/null
  note "pytest -k 'torch or compat' on the Python registration rc=$rc: $(grep -E '(passed|failed|error).* in [0-9.]+s' "$OUT/pytest-python-binding.log" | tail -1)"
  [ $rc -ne 0 ] && { status=1; grep -E "^(FAILED|ERROR)" "$OUT/pytest-python-binding.log" | head -20; }
fi

if has example; then
  for cache in bfloat16 float8_e4m3fn; do
    set -x
    timeout 600 "$PY" python/examples/qwen3_attention_prologue.py --device cuda --tokens 256 --cache "$cache" \
      >"$OUT/example-$cache.txt" 2>&1
    rc=$?
    { set +x; } 2>/dev/null
    note "example ($cache cache) rc=$rc"
    cat "$OUT/example-$cache.txt" | tail -12
    [ $rc -ne 0 ] && status=1
  done
fi

if has bench; then
  for mode in eager graph; do
    set -x
    timeout "${BENCH_TIMEOUT:-900}" "$PY" python/bench/bench_torch.py --mode "$mode" --json "$OUT/bench-$mode.json" \
      --svg "$OUT/bench-$mode.svg" --png "$OUT/bench-$mode.png" ${BENCH_ARGS:-} >"$OUT/bench-$mode.txt" 2>"$OUT/bench-$mode.err"
    rc=$?
    { set +x; } 2>/dev/null
    note "bench ($mode) rc=$rc"
    cat "$OUT/bench-$mode.txt"
    grep -v "^ *$" "$OUT/bench-$mode.err" | tail -8
    [ $rc -ne 0 ] && status=1
  done
  for binding in auto python; do
    set -x
    QKVFUSE_TORCH_BINDING=$binding timeout "${BENCH_TIMEOUT:-900}" "$PY" python/bench/bench_torch.py --mode host \
      --json "$OUT/bench-host-$binding.json" >"$OUT/bench-host-$binding.txt" 2>"$OUT/bench-host-$binding.err"
    rc=$?
    { set +x; } 2>/dev/null
    note "bench (host cost per call, torch binding $binding) rc=$rc"
    cat "$OUT/bench-host-$binding.txt"
    [ $rc -ne 0 ] && status=1
  done
  set -x
  timeout "${BENCH_TIMEOUT:-900}" "$PY" python/bench/bench_torch.py --mode graph --cache float8_e4m3fn --no-compile \
    --json "$OUT/bench-graph-fp8.json" --svg "$OUT/bench-graph-fp8.svg" ${BENCH_ARGS:-} \
    >"$OUT/bench-graph-fp8.txt" 2>"$OUT/bench-graph-fp8.err"
  rc=$?
  { set +x; } 2>/dev/null
  note "bench (graph, fp8 cache, no compile) rc=$rc"
  cat "$OUT/bench-graph-fp8.txt"
  [ $rc -ne 0 ] && status=1
fi
if has peers; then
  if ls .whl/*.whl >/dev/null 2>&1; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/qkvfuse-peer-site .whl/*.whl \
      >"$OUT/peer-wheels.log" 2>&1 || note "peer wheels: pip install failed (see $OUT/peer-wheels.log)"
  fi
  set -x
  PYTHONPATH=$PYTHONPATH:/tmp/qkvfuse-peer-site timeout "${BENCH_TIMEOUT:-900}" "$PY" python/bench/bench_peers.py \
    --json "$OUT/bench-peers.json" ${PEERS_ARGS:-} >"$OUT/bench-peers.txt" 2>"$OUT/bench-peers.err"
  rc=$?
  { set +x; } 2>/dev/null
  note "bench_peers rc=$rc"
  cat "$OUT/bench-peers.txt"
  grep -v "^ *$" "$OUT/bench-peers.err" | tail -8
  [ $rc -ne 0 ] && status=1
fi
if has transformers; then
  set -x
  timeout "${BENCH_TIMEOUT:-900}" "$PY" python/bench/bench_transformers.py --json-out "$OUT/bench-transformers.jsonl" \
    >"$OUT/bench-transformers.txt" 2>"$OUT/bench-transformers.err"
  rc=$?
  { set +x; } 2>/dev/null
  note "bench_transformers rc=$rc"
  cat "$OUT/bench-transformers.txt"
  grep -v "^ *$" "$OUT/bench-transformers.err" | tail -8
  [ $rc -ne 0 ] && status=1
fi
note "done: status $status; logs in $OUT"
exit $status
