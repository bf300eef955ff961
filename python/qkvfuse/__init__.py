# SPDX-License-Identifier: Apache-2.0
"""qkvfuse: fused attention-prologue operators for LLM inference (Python binding).

The C library (libqkvfuse) does the work; this package describes NumPy arrays
to it through ctypes, and makes PyTorch custom operators
(``torch.ops.qkvfuse.*``) of it when torch is installed: registered by the
compiled extension (python/ext) when one was built for this torch, else in
Python (through ctypes, like NumPy arrays).

Operators (docs/SPEC.md):

- :func:`run` / :class:`Plan`: the core operator (any combination of dequant,
  per-head RMSNorm, RoPE, quantization, KV-cache scatter);
- :func:`split_qkv_rmsnorm_rope` (vllm-ascend), :func:`qkv_rmsnorm_rope_cache`
  (CANN QkvRmsNormRopeCache), :func:`dequant_rope_quant_kvcache` (CANN
  DequantRopeQuantKvcache): the named operators with their seeds' arguments;
- :func:`build_cos_sin_cache`, :func:`rope_inv_freq`: RoPE tables;
- :func:`build_info`: what the loaded library was built with (CUDA version and
  architectures, CPU ISA levels) and the binding kind.
- ``qkvfuse.compat`` (imported on its own, torch only): the calls vLLM,
  FlashInfer and SGLang make today, with their signatures.

Errors raise subclasses of :class:`QkvfuseError` carrying the library's message.
"""
from . import _arrays, errors
from ._arrays import TypedArray
from ._capi import build_info, library_path, version
from .config import Config, RopeScaling
from .core import Outputs, Plan, run
from .errors import (AlignmentError, ArgumentTypeError, BadScaleError, CudaError, DeviceError, DtypeError,
                     InvalidValueError, LibraryNotFoundError, NullPointerError, OutOfMemoryError, OutOfRangeError,
                     OverlapError, QkvfuseError, ShapeError, StrideError, UnsupportedError, VersionError)
from .named import dequant_rope_quant_kvcache, qkv_rmsnorm_rope_cache, split_qkv_rmsnorm_rope
from .rope import build_cos_sin_cache, rope_inv_freq

__version__ = "0.2.0"

# Data-error bits OR-ed into error_flags (qkvfuse.h QKVFUSE_DATA_ERROR_*).
DATA_ERROR_POSITION = 1
DATA_ERROR_SLOT = 2
DATA_ERROR_SCALE = 4

# Register torch.ops.qkvfuse.* at import when torch is installed, so that a
# model compiled before any eager call finds them: the compiled extension
# when one built for this torch is found, else the Python registration
# (_binding.py; QKVFUSE_TORCH_BINDING=python forces the latter).
HAVE_TORCH = False
if _arrays._torch is not None:
    from . import _binding as _b
    try:
        _b.register(_arrays._torch)
        HAVE_TORCH = True
    except Exception as _e:  # an old or broken torch must not break the NumPy API
        if _b.KIND is None and isinstance(_e, ImportError) and "QKVFUSE_TORCH_BINDING=extension" in str(_e):
            raise
        import warnings as _w
        _w.warn("qkvfuse: the PyTorch operators are unavailable (%s: %s); NumPy arrays still work"
                % (type(_e).__name__, _e))

__all__ = [
    "run", "Plan", "Config", "RopeScaling", "Outputs", "TypedArray",
    "split_qkv_rmsnorm_rope", "qkv_rmsnorm_rope_cache", "dequant_rope_quant_kvcache",
    "build_cos_sin_cache", "rope_inv_freq", "version", "build_info", "library_path", "errors",
    "QkvfuseError", "NullPointerError", "InvalidValueError", "ArgumentTypeError", "DtypeError", "ShapeError",
    "StrideError", "AlignmentError", "OverlapError", "OutOfRangeError", "BadScaleError", "DeviceError", "UnsupportedError",
    "CudaError", "OutOfMemoryError", "VersionError", "LibraryNotFoundError",
    "DATA_ERROR_POSITION", "DATA_ERROR_SLOT", "DATA_ERROR_SCALE", "HAVE_TORCH",
]
