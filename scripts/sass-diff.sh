#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Device code of two source trees compared instruction by instruction: builds
# the library's objects (target qkvfuse_obj) of commit BASE_REF and of this
# tree for one GPU architecture, disassembles every kernel (cuobjdump -sass)
# and prints, per kernel, "identical" or "differs" with a diff of the first
# differences. Use it for any change that must leave the kernels' code as it
# is (moves, renames, host-side refactors): identical SASS runs identically.
#
#   scripts/sass-diff.sh BASE_REF
#
# Kernel names are demangled, their parameter lists dropped and renamed
# kernels mapped to today's names (RENAMES, sed expressions), so a renamed
# kernel compares with its old self. A kernel that differs only in
# constant-bank offsets (c[0x0][0x...] and c[0x0][R+0x...]: a parameter
# struct laid out anew) is reported as "differs in constant-bank offsets
# only"; parameter offsets a kernel computes as immediates still differ.
# Exit status 1 when a kernel differs otherwise or is missing on one side.
#
# Environment: ARCH (default 90: sm_90 SASS), JOBS (default 2), OUT (default
# build-sass: ignored by git; base/ and new/ builds are kept and rebuilt
# incrementally), CUOBJDUMP (default: cuobjdump on PATH or in the CUDA
# toolkit; the triton wheel also ships one), CONTEXT (diff lines shown per
# kernel, default 30), RENAMES (extra sed expressions for kernel names).
set -uo pipefail
cd "$(dirname "$0")/.."
ref=${1:?usage: scripts/sass-diff.sh BASE_REF}
arch=${ARCH:-90}
jobs=${JOBS:-2}
out=${OUT:-build-sass}
context=${CONTEXT:-30}
renames="s/qf::fused_kernel</qf::general_kernel</;s/qf::fast_kernel</qf::prefill_kernel</;${RENAMES:-}"
dump=${CUOBJDUMP:-$(command -v cuobjdump || echo /usr/local/cuda/bin/cuobjdump)}
[ -x "$dump" ] || { echo "sass-diff: no cuobjdump (set CUOBJDUMP)" >&2; exit 2; }
base_sha=$(git rev-parse --verify "$ref^{commit}") || { echo "sass-diff: no commit $ref" >&2; exit 2; }

# build SRC BUILD: the library's objects of one tree
build() {
  nice cmake -S "$1" -B "$2" -DCMAKE_BUILD_TYPE=Release -DQKVFUSE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$arch-real" \
    > "$2.log" 2>&1 && nice cmake --build "$2" -j"$jobs" --target qkvfuse_obj >> "$2.log" 2>&1 ||
    { echo "sass-diff: building $1 failed, see $2.log" >&2; exit 2; }
}
if [ "$(cat "$out/base/sha" 2>/dev/null)" != "$base_sha" ]; then
  rm -rf "$out/base" && mkdir -p "$out/base/src" && git archive "$base_sha" | tar -x -C "$out/base/src" || exit 2
  echo "$base_sha" > "$out/base/sha"
fi
mkdir -p "$out/new"
echo "sass-diff: building $(git rev-parse --short "$base_sha") and this tree for sm_$arch" >&2
build "$out/base/src" "$out/base/build"
build . "$out/new/build"

# sass SIDE: every kernel of a side's objects as "== name" then its
# instructions (addresses and encodings dropped)
sass() {
  for o in $(find "$out/$1/build/CMakeFiles/qkvfuse_obj.dir" -name '*.o' | sort); do
    "$dump" -sass "$o" 2>/dev/null
  done |
    awk '/Function : / { print "== " $3; next }
         /^ +\/\*[0-9a-f]+\*\// { sub(/^ +\/\*[0-9a-f]+\*\/ +/, ""); sub(/ *\/\*.*$/, ""); print }' |
    c++filt |
    sed -E "/^== /{s/^== void /== /;s/\(anonymous namespace\):://g;s/\(.*\)$//;$renames}" > "$out/$1.sass"
}
sass base; sass new
python3 - "$out/base.sass" "$out/new.sass" "$context" <<'EOF'
import difflib, re, sys
def kernels(path):
    k, name = {}, None
    for line in open(path):
        line = line.rstrip("\n")
        if line.startswith("== "):
            name = line[3:]
            k.setdefault(name, [])
        elif name:
            k[name].append(line)
    return k
base, new, context = kernels(sys.argv[1]), kernels(sys.argv[2]), int(sys.argv[3])
cbank = lambda code: [re.sub(r"c\[0x0\]\[([A-Z0-9]+\+)?0x[0-9a-f]+\]", "c[0x0][*]", s) for s in code]
bad = counts = 0
for name in sorted(set(base) | set(new)):
    if name not in base or name not in new:
        print(f"{name}: only in {'base' if name in base else 'new'}"); bad += 1; continue
    if base[name] == new[name]:
        print(f"{name}: identical ({len(new[name])} instructions)"); continue
    if cbank(base[name]) == cbank(new[name]):
        print(f"{name}: differs in constant-bank offsets only"); counts += 1; continue
    bad += 1
    print(f"{name}: differs ({len(base[name])} -> {len(new[name])} instructions)")
    diff = list(difflib.unified_diff(base[name], new[name], "base", "new", n=2, lineterm=""))
    print("\n".join("    " + d for d in diff[:context]))
print(f"sass-diff: {len(set(base) | set(new))} kernels, {bad} differ, {counts} in constant-bank offsets only")
sys.exit(1 if bad else 0)
EOF
