#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Check the tools `make demo` / `make test` need; install what is missing where
# that can be done without root (CMake from PyPI). Idempotent and quiet when
# everything is there.
set -e
need_cmake_minor=20
have_cmake() {
  command -v cmake >/dev/null 2>&1 || return 1
  v=$(cmake --version | head -n1 | sed 's/[^0-9.]*\([0-9]*\)\.\([0-9]*\).*/\1 \2/')
  set -- $v
  [ "$1" -gt 3 ] || { [ "$1" -eq 3 ] && [ "$2" -ge $need_cmake_minor ]; }
}
if ! command -v cc >/dev/null 2>&1 && ! command -v gcc >/dev/null 2>&1; then
  echo "setup: no C compiler found; install gcc or clang (e.g. apt-get install build-essential)" >&2
  exit 1
fi
if ! have_cmake; then
  echo "setup: CMake >= 3.$need_cmake_minor not found; installing it from PyPI (python3 -m pip install --user cmake)" >&2
  python3 -m pip install --user --quiet "cmake>=3.$need_cmake_minor" || {
    echo "setup: could not install CMake; install CMake >= 3.$need_cmake_minor and retry" >&2
    exit 1
  }
  export PATH="$HOME/.local/bin:$PATH"
  have_cmake || { echo "setup: cmake installed but not on PATH; add ~/.local/bin to PATH" >&2; exit 1; }
fi
