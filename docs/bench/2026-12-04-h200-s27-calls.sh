######## build-ab/s27/call1.sh
#!/usr/bin/env bash
# Session 27 call 1: QF_TAIL / QF_COST scan on tree c (main 0fb137b + s24 env patch), int8 cache at T = 4096.
set -uo pipefail
OUT=${OUT:-/tmp/s27}; mkdir -p "$OUT"
B=$OUT/build-c
t0=$(date +%s)
cmake -S build-ab/s27/c -B /tmp/bc -DCMAKE_BUILD_TYPE=Release -DQKVFUSE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 >"$OUT/configure.log" 2>&1 &&
  cmake --build /tmp/bc -j 16 --target qkvfuse_cli >"$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
echo "built in $(( $(date +%s) - t0 )) s" | tee -a "$OUT/log.txt"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader | tee -a "$OUT/log.txt"
Q=/tmp/bc/bin/qkvfuse
run() { # label preset envs...
  local label=$1 preset=$2; shift 2
  env "$@" $Q bench --device cuda --json --min-time 0.01 --preset $preset --op cache --tokens 4096 2>>"$OUT/err.txt" |
    python3 -c 'import json,sys
for l in sys.stdin:
    if l.strip():
        r=json.loads(l); print(sys.argv[1], r["preset"], r["op"], r["tokens"], "%.2f"%r["us"], "%.1f"%r["pct_of_copy"])' "$label" | tee -a "$OUT/ab.txt"
}
for r in 1 2 3; do
  for s in def 12 18 20 22 25; do
    if [ $s = def ]; then run def phi-3-mini; else run t$s phi-3-mini QF_TAIL=$s,1; fi
  done
  run k13 phi-3-mini QF_COST=10,13,10
  run k17 phi-3-mini QF_COST=10,17,10
  run k17t20 phi-3-mini QF_COST=10,17,10 QF_TAIL=20,1
done
echo "phi done $(( $(date +%s) - t0 )) s" | tee -a "$OUT/log.txt"
for r in 1 2; do
  for p in llama-3-8b qwen3-8b glm-4-9b gemma-2-9b; do
    run def $p; run t18 $p QF_TAIL=18,1; run t20 $p QF_TAIL=20,1; run t12 $p QF_TAIL=12,1
  done
done
echo "all done $(( $(date +%s) - t0 )) s" | tee -a "$OUT/log.txt"
######## build-ab/s27/call2.sh
#!/usr/bin/env bash
# Session 27 call 2: finer QF_TAIL / QF_COST scan on tree c (main 0fb137b + s24 env patch), int8 cache.
set -uo pipefail
OUT=${OUT:-/tmp/s27}; mkdir -p "$OUT"
t0=$(date +%s)
cmake -S build-ab/s27/c -B /tmp/bc -DCMAKE_BUILD_TYPE=Release -DQKVFUSE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 >"$OUT/configure.log" 2>&1 &&
  cmake --build /tmp/bc -j 16 --target qkvfuse_cli >"$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
echo "built in $(( $(date +%s) - t0 )) s" | tee -a "$OUT/log.txt"
Q=/tmp/bc/bin/qkvfuse
run() { # label preset tokens envs...
  local label=$1 preset=$2 tok=$3; shift 3
  env "$@" $Q bench --device cuda --json --min-time 0.01 --preset $preset --op cache --tokens $tok 2>>"$OUT/err.txt" |
    python3 -c 'import json,sys
for l in sys.stdin:
    if l.strip():
        r=json.loads(l); print(sys.argv[1], r["preset"], r["op"], r["tokens"], "%.2f"%r["us"], "%.1f"%r["pct_of_copy"])' "$label" | tee -a "$OUT/ab.txt"
}
cfg() { # label -> env words
  case $1 in
    def) ;; t*k*) echo "QF_TAIL=${1#t}" | sed 's/k.*/,1/'; echo "QF_COST=10,${1#*k},10" ;;
    t*) echo "QF_TAIL=${1#t},1" ;; k*) echo "QF_COST=10,${1#k},10" ;;
  esac
}
for r in 1 2 3; do
  for s in def t12 t10 t8 t6 k14 k13 k12 k11 t12k13 t10k13 t12k12 t10k12; do run $s phi-3-mini 4096 $(cfg $s); done
done
echo "phi done $(( $(date +%s) - t0 )) s" | tee -a "$OUT/log.txt"
for r in 1 2; do
  for p in llama-3-8b qwen3-8b glm-4-9b gemma-2-9b; do
    for s in def t12 t10 k13 k12 t12k13 t10k13; do run $s $p 4096 $(cfg $s); done
  done
done
echo "4096 done $(( $(date +%s) - t0 )) s" | tee -a "$OUT/log.txt"
for p in phi-3-mini llama-3-8b qwen3-8b glm-4-9b gemma-2-9b; do
  for s in def k13 k12 def k13 k12; do run $s $p 32768 $(cfg $s); done
done
echo "all done $(( $(date +%s) - t0 )) s" | tee -a "$OUT/log.txt"
######## build-ab/s27/call3.sh
#!/usr/bin/env bash
# Session 27 call 3: tail share / piece and k cost at T = 32768 (cache, split, in place), split / in place at 4096.
set -uo pipefail
OUT=${OUT:-/tmp/s27}; mkdir -p "$OUT"
t0=$(date +%s)
cmake -S build-ab/s27/c -B /tmp/bc -DCMAKE_BUILD_TYPE=Release -DQKVFUSE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 >"$OUT/configure.log" 2>&1 &&
  cmake --build /tmp/bc -j 16 --target qkvfuse_cli >"$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
echo "built in $(( $(date +%s) - t0 )) s" | tee -a "$OUT/log.txt"
Q=/tmp/bc/bin/qkvfuse
run() { # label preset op tokens envs...
  local label=$1 preset=$2 op=$3 tok=$4; shift 4
  env "$@" $Q bench --device cuda --json --min-time 0.01 --preset $preset --op $op --tokens $tok 2>>"$OUT/err.txt" |
    python3 -c 'import json,sys
for l in sys.stdin:
    if l.strip():
        r=json.loads(l); print(sys.argv[1], r["preset"], r["op"], r["tokens"], "%.2f"%r["us"], "%.1f"%r["pct_of_copy"])' "$label" | tee -a "$OUT/ab.txt"
}
cfg() {
  case $1 in
    def) ;; k*) echo "QF_COST=10,${1#k},10" ;;
    t*p*) local s=${1#t}; echo "QF_TAIL=${s%p*},${s#*p}" ;;
    t*) echo "QF_TAIL=${1#t},1" ;;
  esac
}
for r in 1 2 3; do
  for s in def k16 k17 t20p2 t30p2 t25p1; do run $s phi-3-mini cache 32768 $(cfg $s); done
  for s in def t20p2 t30p2 t25p1; do run $s phi-3-mini split,inplace 32768 $(cfg $s); done
  for s in def t20 t30; do run $s phi-3-mini split,inplace 4096 $(cfg $s); done
done
echo "phi done $(( $(date +%s) - t0 )) s" | tee -a "$OUT/log.txt"
for r in 1 2; do
  for p in llama-3-8b qwen3-8b glm-4-9b gemma-2-9b; do
    for s in def k16 k17 t20p2 t30p2; do run $s $p cache 32768 $(cfg $s); done
  done
done
echo "all done $(( $(date +%s) - t0 )) s" | tee -a "$OUT/log.txt"
######## build-ab/s27/call4.sh
#!/usr/bin/env bash
# Session 27 call 4 (landing run): n = this tree (tail a tenth with a quantized cache from 4 to 15 chunks per
# block, k chunk cost 14), m = tree c with no env (main 0fb137b's plan), e13 = tree c with QF_TAIL=10,1
# QF_COST=10,13,10 (the alternative: k at 13). Bench first, then the GPU tests and sanitizers of n.
set -uo pipefail
OUT=${OUT:-/tmp/s27}; mkdir -p "$OUT"
t0=$(date +%s)
lap() { echo "$* $(( $(date +%s) - t0 )) s" | tee -a "$OUT/log.txt"; }
cfgb() { cmake -S "$1" -B "$2" -DCMAKE_BUILD_TYPE=Release -DQKVFUSE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 >"$OUT/configure-$3.log" 2>&1 &&
  cmake --build "$2" -j 8 --target qkvfuse_cli >"$OUT/build-$3.log" 2>&1; }
cfgb build-ab/s27/c /tmp/bc m & p1=$!
cfgb . /tmp/bn n & p2=$!
wait $p1 || { tail -20 "$OUT/build-m.log"; exit 1; }
wait $p2 || { tail -20 "$OUT/build-n.log"; exit 1; }
lap built
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader | tee -a "$OUT/log.txt"
run() { # label binary preset op tokens envs...
  local label=$1 bin=$2 preset=$3 op=$4 tok=$5; shift 5
  env "$@" $bin bench --device cuda --json --min-time 0.01 --preset $preset --op $op --tokens $tok 2>>"$OUT/err.txt" |
    python3 -c 'import json,sys
for l in sys.stdin:
    if l.strip():
        r=json.loads(l); print(sys.argv[1], r["preset"], r["op"], r["tokens"], "%.2f"%r["us"], "%.1f"%r["pct_of_copy"], "%.2f"%(r.get("speedup_vs_unfused") or 0))' "$label" | tee -a "$OUT/ab.txt"
}
P="phi-3-mini llama-3-8b qwen3-8b glm-4-9b gemma-2-9b"
for p in $P; do run nfull /tmp/bn/bin/qkvfuse $p cache,split,inplace 4096,32768; done
lap full
for r in 1 2 3; do
  for p in $P; do
    [ $r = 3 ] && [ $p != phi-3-mini ] && continue
    run m /tmp/bc/bin/qkvfuse $p cache 4096,32768
    run n /tmp/bn/bin/qkvfuse $p cache 4096,32768
    run e13 /tmp/bc/bin/qkvfuse $p cache 4096 QF_TAIL=10,1 QF_COST=10,13,10
  done
done
lap bench
cmake --build /tmp/bn -j 16 >"$OUT/build-n-all.log" 2>&1 || { tail -20 "$OUT/build-n-all.log"; exit 1; }
lap "built all"
(cd /tmp/bn && ctest -R cuda -j 2 --timeout 300) >"$OUT/ctest.log" 2>&1; echo "ctest rc=$?" | tee -a "$OUT/log.txt"
grep -E 'tests passed|tests failed|Failed|\*\*\*' "$OUT/ctest.log" | tail -8 | tee -a "$OUT/log.txt"
lap ctest
CS=compute-sanitizer; command -v $CS >/dev/null || CS=/usr/local/cuda/bin/compute-sanitizer
(cd /tmp/bn/bin && QKVFUSE_CUDA_FORM=prefill timeout 200 $CS --tool memcheck --error-exitcode 9 ./test_cuda_fuzz --engine --iters 30) >"$OUT/memcheck.log" 2>&1
echo "memcheck rc=$?: $(grep -E 'ERROR SUMMARY' "$OUT/memcheck.log" | tail -1)" | tee -a "$OUT/log.txt"
lap memcheck
(cd /tmp/bn/bin && QKVFUSE_CUDA_FORM=prefill timeout 150 $CS --tool racecheck --error-exitcode 9 ./test_ops --backend cuda --engine --cases 8 --seed 0x5A27) >"$OUT/racecheck.log" 2>&1
echo "racecheck rc=$?: $(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY' "$OUT/racecheck.log" | tail -1)" | tee -a "$OUT/log.txt"
lap done
######## build-ab/s27/call8.sh
#!/usr/bin/env bash
# Session 27 call 8: the general kernel's tiling by the groups' walk (n = this tree) against main 386e494 (m):
# the int32 dequant op, every preset, T = 1..4096; then n's CUDA ctest and memcheck.
set -uo pipefail
OUT=${OUT:-/tmp/s27}; mkdir -p "$OUT"
t0=$(date +%s)
lap() { echo "$* $(( $(date +%s) - t0 )) s" | tee -a "$OUT/log.txt"; }
cmake -S build-ab/s27/m -B /tmp/bm -DCMAKE_BUILD_TYPE=Release -DQKVFUSE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 >/dev/null 2>&1 &&
  cmake --build /tmp/bm -j 8 --target qkvfuse_cli >"$OUT/build-m.log" 2>&1 & p1=$!
cmake -S . -B /tmp/bn -DCMAKE_BUILD_TYPE=Release -DQKVFUSE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 >/dev/null 2>&1 &&
  cmake --build /tmp/bn -j 8 >"$OUT/build-n.log" 2>&1 & p2=$!
wait $p1 || { tail -20 "$OUT/build-m.log"; exit 1; }
wait $p2 || { tail -20 "$OUT/build-n.log"; exit 1; }
lap built
for r in 1 2; do for s in m n; do
  /tmp/b$s/bin/qkvfuse bench --device cuda --json --min-time 0.01 --op dequant --tokens 1,8,16,32,64,128,256,512,1024,4096 2>>"$OUT/err.txt" |
    python3 -c 'import json,sys
for l in sys.stdin:
    if l.strip():
        r=json.loads(l); print(sys.argv[1], r["preset"], r["op"], r["tokens"], "%.2f"%r["us"], "%.1f"%r["pct_of_copy"], "%.2f"%(r.get("unfused_us") or 0), "%.2f"%(r.get("speedup_vs_unfused") or 0))' $s >> "$OUT/ab.txt"
done; done
lap bench
(cd /tmp/bn && ctest -R cuda -j 2 --timeout 200) >"$OUT/ctest.log" 2>&1; echo "ctest rc=$?: $(grep -E 'tests passed|tests failed' "$OUT/ctest.log")" | tee -a "$OUT/log.txt"
grep -E 'Failed|\*\*\*' "$OUT/ctest.log" | head -5
(cd /tmp/bn/bin && timeout 60 compute-sanitizer --tool memcheck --error-exitcode 9 ./test_cuda_fuzz --iters 20) >"$OUT/memcheck.log" 2>&1
echo "sanitizer memcheck rc=$?: $(grep -E 'ERROR SUMMARY' "$OUT/memcheck.log") $(grep iterations "$OUT/memcheck.log")" | tee -a "$OUT/log.txt"
lap done
