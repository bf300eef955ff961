#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Every source, build and script file git tracks names its licence in its
# first three lines (SPDX-License-Identifier: Apache-2.0, LICENSE at the top).
# Exit 0 when all do, 1 listing the ones that do not, 77 outside a git checkout.
cd "$(dirname "$0")/.." || exit 1
files=$(git ls-files 2>/dev/null) || { echo "check-spdx: not a git checkout, skipped"; exit 77; }
[ -n "$files" ] || { echo "check-spdx: not a git checkout, skipped"; exit 77; }
missing=0 checked=0
for f in $files; do
  case $f in
    fuzz/corpus/*) continue ;;
    *.c | *.h | *.cu | *.cuh | *.py | *.sh | *.cmake | *.in | *.map | */CMakeLists.txt | CMakeLists.txt | Makefile | .ci/run) ;;
    *) continue ;;
  esac
  checked=$((checked + 1))
  if ! head -n 3 "$f" | grep -q "SPDX-License-Identifier: Apache-2.0"; then
    echo "check-spdx: $f: no SPDX-License-Identifier: Apache-2.0 in its first three lines"
    missing=$((missing + 1))
  fi
done
echo "check-spdx: $checked files, $missing without the licence line"
[ "$missing" -eq 0 ]
