# SPDX-License-Identifier: Apache-2.0
"""pytest set-up: import the package from this source tree (unless it is
installed), the tests' helpers from this folder, and shared fixtures.

The library comes from $QKVFUSE_LIBRARY (CTest sets it to the build's
libqkvfuse.so), else the package's own search (see qkvfuse/_capi.py).
"""
import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
if os.environ.get("QKVFUSE_TEST_INSTALLED") != "1":
    sys.path.insert(0, os.path.dirname(HERE))  # python/ : the in-tree package

try:
    import torch  # noqa: F401
    HAVE_TORCH = True
except Exception:
    HAVE_TORCH = False


def cuda_ok():
    return HAVE_TORCH and torch.cuda.is_available()


requires_torch = pytest.mark.skipif(not HAVE_TORCH, reason="torch is not installed")
requires_cuda = pytest.mark.skipif(not cuda_ok(), reason="no CUDA device (or no torch)")


def seeds(n, base):
    """n seeds from base; QKVFUSE_TEST_SEED=S replaces base, QKVFUSE_PY_CASES=N replaces n."""
    base = int(os.environ.get("QKVFUSE_TEST_SEED", str(base)), 0)
    n = int(os.environ.get("QKVFUSE_PY_CASES", n))
    return [base + i for i in range(n)]
