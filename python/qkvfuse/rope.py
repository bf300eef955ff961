"""RoPE tables: the cos/sin cache builder and the inverse frequencies of a scaling rule."""
from __future__ import annotations

import ctypes

import numpy as np

from . import _arrays, _capi
from .config import RopeScaling


def build_cos_sin_cache(max_position: int, rotary_dim: int, *, theta: float = 10000.0, scaling=None,
                        dtype="float32", device=None, out=None):
    """A vLLM-style cos/sin cache ``[max_position, rotary_dim]``:
    row p = ``[cos(p f_0) .. cos(p f_{R/2-1}) | sin(p f_0) .. sin(p f_{R/2-1})] * mscale``
    with f_i theta's inverse frequencies after ``scaling`` (a :class:`RopeScaling`
    or a model config's ``rope_scaling`` dict; mscale is 1 except for YaRN).
    Angles are evaluated in double precision and each value rounded once to
    ``dtype`` (float32, float16 or bfloat16), accurate far beyond 2^24.

    Returns a NumPy array (a TypedArray for bfloat16) when ``device`` is None
    and ``dtype`` is not a torch dtype; else a torch tensor on ``device``
    (built on the CPU and copied: call it at model set-up, not inside a CUDA
    graph capture). ``out``: fill this [max_pos, R] CPU array/tensor instead.
    """
    theta = float(theta)
    rule = RopeScaling.from_config(scaling)
    if out is not None:
        build_cos_sin_cache_into(out, theta, rule)
        return out
    mp, rd = _arrays.as_int(max_position, "max_position"), _arrays.as_int(rotary_dim, "rotary_dim")
    want_torch = device is not None or (_arrays._torch is not None and isinstance(dtype, _arrays._torch.dtype))
    if want_torch:
        from . import torch_ops
        return torch_ops.build_cos_sin_cache(mp, rd, theta, rule, dtype, device)
    arr = _arrays.empty_like_kind(None, (max(mp, 0), max(rd, 0)), _arrays.dtype_name(dtype))
    build_cos_sin_cache_into(arr, theta, rule)
    return arr


def build_cos_sin_cache_into(out, theta: float, rule: RopeScaling):
    """Fill a CPU array/tensor [max_pos, R] (qkvfuse_build_cos_sin_cache)."""
    keep = []
    t = _arrays.describe(out, "cos_sin_cache", writable=True, keep=keep)
    sc = rule.to_c()
    _capi.check(_capi.lib().qkvfuse_build_cos_sin_cache(float(theta), ctypes.byref(sc), ctypes.byref(t)),
                "build_cos_sin_cache")


def rope_inv_freq(rotary_dim: int, *, theta: float = 10000.0, scaling=None):
    """The inverse frequencies f_i (radians per position, i < rotary_dim/2) and
    the cos/sin multiplier mscale of a scaling rule, in double precision:
    returns ``(np.ndarray[float64] of rotary_dim // 2, mscale)``."""
    rd = _arrays.as_int(rotary_dim, "rotary_dim")
    rule = RopeScaling.from_config(scaling).to_c()
    inv = np.zeros(max(rd // 2, 1), np.float64)
    ms = ctypes.c_double(0.0)
    _capi.check(_capi.lib().qkvfuse_rope_inv_freq(float(theta), ctypes.byref(rule), rd,
                                                  inv.ctypes.data_as(ctypes.POINTER(ctypes.c_double)),
                                                  ctypes.byref(ms)), "rope_inv_freq")
    return inv[: rd // 2], ms.value
