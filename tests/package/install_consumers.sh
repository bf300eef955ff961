#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# What a user of an installed qkvfuse does, against this build tree:
#
#   install_consumers.sh install   BUILD WORK CMAKE
#       cmake --install BUILD into WORK/staged, then move the tree to
#       WORK/prefix (the installed files must not depend on where they were
#       installed). Installs what is built; builds nothing.
#   install_consumers.sh pkgconfig WORK CC
#       compile tests/package/consumer/consumer.c with the flags of
#       `pkg-config qkvfuse` (shared) and `pkg-config --static qkvfuse` with
#       libqkvfuse.a (static), and run both.
#   install_consumers.sh cmake     WORK CMAKE CC WITH_CUDA
#       configure tests/package/consumer with find_package(qkvfuse): the
#       shared component and no component with the CUDA toolkit hidden (it must
#       not be needed), the static component with it visible (WITH_CUDA=ON:
#       CUDA::cudart_static must be found and link from C), and, for a CUDA
#       build, the static component with the toolkit hidden (must fail, saying
#       what it needs); build and run each.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
step=${1:?usage: install_consumers.sh install|pkgconfig|cmake ...}
shift

fail() {
  echo "install_consumers.sh $step: FAILED: $*" >&2
  exit 1
}
say() { echo "install_consumers.sh $step: $*"; }

# The environment of a machine without the CUDA toolkit: no nvcc on PATH, no
# variable pointing at one; CMake is also told not to find it.
hide_cuda() {
  nv=$(command -v nvcc 2>/dev/null || true)
  if [ -n "$nv" ]; then
    nvdir=$(dirname "$nv")
    PATH=$(printf '%s' "$PATH" | tr ':' '\n' | grep -v -x -F "$nvdir" | paste -s -d: -)
  fi
  unset CUDA_PATH CUDA_HOME CUDAToolkit_ROOT CUDACXX 2>/dev/null || true
}

case $step in
install)
  build=$1 work=$2 cmake=$3
  rm -rf "$work"
  mkdir -p "$work"
  "$cmake" --install "$build" --prefix "$work/staged" >"$work/install.log" 2>&1 || {
    cat "$work/install.log"
    fail "cmake --install"
  }
  mv "$work/staged" "$work/prefix"
  say "installed into $work/staged, moved to $work/prefix"
  ;;

pkgconfig)
  work=$1 cc=$2
  command -v pkg-config >/dev/null 2>&1 || { say "SKIPPED: pkg-config is not installed"; exit 77; }
  prefix=$work/prefix
  pc=$(find "$prefix" -name qkvfuse.pc | head -n 1)
  [ -n "$pc" ] || fail "no qkvfuse.pc under $prefix"
  PKG_CONFIG_PATH=$(dirname "$pc")
  export PKG_CONFIG_PATH
  libdir=$(pkg-config --variable=libdir qkvfuse)
  [ -f "$libdir/libqkvfuse.a" ] || fail "libdir=$libdir (from $pc) does not hold libqkvfuse.a: the .pc points elsewhere"
  out=$work/pkgconfig
  mkdir -p "$out"
  # shellcheck disable=SC2046
  "$cc" -std=c11 -o "$out/consumer_shared" "$here/consumer/consumer.c" $(pkg-config --cflags --libs qkvfuse) \
    -Wl,-rpath,"$libdir" -ldl || fail "shared link: $cc ... $(pkg-config --cflags --libs qkvfuse)"
  "$out/consumer_shared" shared || fail "the shared consumer"
  # static: libqkvfuse.a itself, then everything `pkg-config --static` adds
  static_libs=
  for word in $(pkg-config --static --libs qkvfuse); do
    [ "$word" = -lqkvfuse ] || static_libs="$static_libs $word"
  done
  # shellcheck disable=SC2046,SC2086
  "$cc" -std=c11 -o "$out/consumer_static" "$here/consumer/consumer.c" $(pkg-config --cflags qkvfuse) \
    "$libdir/libqkvfuse.a" $static_libs -ldl || fail "static link: $cc ... libqkvfuse.a $static_libs"
  "$out/consumer_static" static || fail "the static consumer"
  ;;

cmake)
  work=$1 cmake=$2 cc=$3 with_cuda=$4
  prefix=$work/prefix
  configure() { # name, extra cmake arguments...
    name=$1
    shift
    rm -rf "$work/cmake-$name"
    "$cmake" -S "$here/consumer" -B "$work/cmake-$name" -DCMAKE_C_COMPILER="$cc" -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_PREFIX_PATH="$prefix" "$@" >"$work/cmake-$name.log" 2>&1
  }
  build_run() { # name, link
    "$cmake" --build "$work/cmake-$1" >>"$work/cmake-$1.log" 2>&1 || {
      cat "$work/cmake-$1.log"
      fail "building the $1 consumer"
    }
    "$work/cmake-$1/consumer" "$2" || fail "the $1 consumer"
  }
  (
    hide_cuda
    for link in shared default; do
      configure "$link-nocuda" -DCONSUMER_LINK=$link -DCMAKE_DISABLE_FIND_PACKAGE_CUDAToolkit=TRUE || {
        cat "$work/cmake-$link-nocuda.log"
        fail "find_package(qkvfuse) ($link) needs the CUDA toolkit"
      }
      build_run "$link-nocuda" shared
    done
    if [ "$with_cuda" = ON ]; then
      if configure static-nocuda -DCONSUMER_LINK=static -DCMAKE_DISABLE_FIND_PACKAGE_CUDAToolkit=TRUE; then
        fail "COMPONENTS static of a CUDA build was found without the CUDA toolkit"
      fi
      grep -q "qkvfuse::qkvfuse_static needs CUDAToolkit" "$work/cmake-static-nocuda.log" || {
        cat "$work/cmake-static-nocuda.log"
        fail "COMPONENTS static without the CUDA toolkit: not the message naming it"
      }
      say "ok: COMPONENTS static without the CUDA toolkit fails, naming it"
    fi
  ) || exit 1
  configure static -DCONSUMER_LINK=static || {
    cat "$work/cmake-static.log"
    fail "find_package(qkvfuse COMPONENTS static)"
  }
  build_run static static
  ;;

*)
  fail "unknown step"
  ;;
esac
