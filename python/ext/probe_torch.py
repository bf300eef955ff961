# SPDX-License-Identifier: Apache-2.0
"""What CMake needs to build the torch extension against the torch this Python
imports, as CMake `set` lines; exits 1 without a word when torch is missing.
Reads only the torch module's files (no compiler helpers, no CUDA runtime)."""
import os
import sys

try:
    import torch
except Exception:  # not installed, or broken: the package stays ctypes-only
    sys.exit(1)
root = os.path.dirname(os.path.abspath(torch.__file__))
values = {
    "QKVFUSE_TORCH_VERSION": torch.__version__,
    "QKVFUSE_TORCH_INCLUDE": os.path.join(root, "include"),
    "QKVFUSE_TORCH_LIBDIR": os.path.join(root, "lib"),
    "QKVFUSE_TORCH_CXX11_ABI": str(int(bool(getattr(torch._C, "_GLIBCXX_USE_CXX11_ABI", True)))),
    "QKVFUSE_TORCH_CUDA": torch.version.cuda or "",
}
for k, v in values.items():
    print('set(%s "%s")' % (k, v.replace("\\", "/")))
