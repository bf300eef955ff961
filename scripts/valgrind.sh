#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# valgrind memcheck over the CPU test programs of a normal (unsanitized)
# build: every program must finish with no memcheck error (--error-exitcode)
# and no definite leak. memcheck costs ~50x, so the slow programs run a
# representative part (docs/ERRORS.md lists it):
#   test_special, test_layouts, test_api (all of each); test_hostile without
#   offsets64 (memcheck cannot shadow its ~100 GiB sparse regions);
#   test_threads (reference backend); test_ops (reference, 24 random cases);
#   test_errors (every mutation of the four bases, reference backend);
#   test_named (3 random cases and all its argument checks);
#   test_strides (reference backend: the strided vectors' copies too);
#   fuzz_core_replay / fuzz_named_replay (the seed corpus, 150 random inputs).
#   scripts/valgrind.sh BIN_DIR      (exit 77 without valgrind)
set -u
bin=${1:?usage: valgrind.sh BIN_DIR}
here=$(cd "$(dirname "$0")/.." && pwd)
command -v valgrind >/dev/null 2>&1 || { echo "valgrind.sh: SKIPPED: valgrind is not installed"; exit 77; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
vg="valgrind -q --tool=memcheck --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite --track-origins=no"
cat >"$out/jobs" <<JOBS
test_errors --backend reference --only-base A
test_errors --backend reference --only-base C
test_ops --backend reference --cases 24 --seed 0x7A16
test_errors --backend reference --only-base B
test_named --cases 3
test_errors --backend reference --only-base D
test_threads --backend reference
test_special --backend reference,auto
test_layouts --backend reference,auto
test_api
test_hostile --backend reference --no-big
test_strides --backend reference
fuzz_core_replay --random 150 --seed 0x7A1 $here/fuzz/corpus/core
fuzz_named_replay --random 150 --seed 0x7A2 $here/fuzz/corpus/named
JOBS
# two lanes (2 cores), jobs alternating between them; each job's log is kept for the report
lane() {
  i=0
  while read -r prog args; do
    i=$((i + 1))
    [ $((i % 2)) -eq "$1" ] || continue
    if [ -x "$bin/$prog" ]; then
      # shellcheck disable=SC2086
      (cd "$bin" && $vg ./"$prog" $args) >"$out/$i.log" 2>&1
      echo $? >"$out/$i.rc"
    else
      echo "not built" >"$out/$i.log"
      echo missing >"$out/$i.rc"
    fi
  done <"$out/jobs"
}
lane 0 &
lane 1 &
wait
fail=0
n=0
while read -r prog args; do
  n=$((n + 1))
  rc=$(cat "$out/$n.rc" 2>/dev/null || echo "?")
  if [ "$rc" = 0 ]; then
    echo "valgrind.sh: ok   $prog $args"
  else
    fail=$((fail + 1))
    echo "valgrind.sh: FAIL $prog $args (rc $rc)"
    grep -E "==[0-9]+==|FAIL" "$out/$n.log" | head -30
  fi
done <"$out/jobs"
passed=$((n - fail))
echo "valgrind: $passed passed, $fail failed"
[ $fail -eq 0 ]
