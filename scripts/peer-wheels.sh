#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The peers' Python packages that the GPU machine lacks, as wheels in .whl/
# (git-ignored), for python/bench/bench_peers.py to time side by side: the
# GPU machine reaches no package index, so they travel with the working tree,
# whose copy is limited to 64 MiB a call. flashinfer-python 0.6.0 is the newest
# release whose wheel and needs fit (0.7's wheel alone is 101 MB); its kernels
# are compiled by nvcc on first use. Installed there with
#   python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
# and PYTHONPATH=/tmp/site (scripts/gpu-python.sh does it when .whl/ exists).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
PYVER=${PEER_PYTHON_VERSION:-3.12} # the GPU machine's python3
mkdir -p .whl
grep -qx '/.whl/' "$(git rev-parse --git-common-dir)/info/exclude" 2>/dev/null ||
  echo '/.whl/' >>"$(git rev-parse --git-common-dir)/info/exclude"
for pkg in flashinfer-python==0.6.0 "apache-tvm-ffi>=0.1.6,<0.2" "nvidia-cudnn-frontend>=1.13" "nvidia-cutlass-dsl>=4.3.4"; do
  "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version "$PYVER" --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl "$pkg"
done
du -ch .whl/*.whl | tail -1
