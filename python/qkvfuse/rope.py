# SPDX-License-Identifier: Apache-2.0
"""RoPE tables: the cos/sin cache builder and the inverse frequencies of a scaling rule."""
from __future__ import annotations

import ctypes

import numpy as np

from . import _arrays, _capi, _check, errors
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
    theta = _check.real(theta, "theta")
    rule = RopeScaling.from_config(scaling)
    if out is not None:
        build_cos_sin_cache_into(out, theta, rule)
        return out
    want_torch = device is not None or (_arrays._torch is not None and isinstance(dtype, _arrays._torch.dtype))
    if want_torch and _arrays._torch is not None:
        # the operator checks the sizes (table_size) before it allocates
        mp, rd = _check.integer(max_position, "max_position"), _check.integer(rotary_dim, "rotary_dim")
        from . import torch_ops
        return torch_ops.build_cos_sin_cache(mp, rd, theta, rule, dtype, device)
    mp, rd = table_size(max_position, rotary_dim, theta, rule)
    if want_torch:
        raise errors.UnsupportedError(errors.QKVFUSE_ERROR_UNSUPPORTED,
                                      "device: a torch tensor was asked for (device=%r) and torch is not "
                                      "installed" % (device,))
    arr = _arrays.empty_like_kind(None, (mp, rd), _arrays.dtype_name(dtype, "dtype"), "cos_sin_cache")
    build_cos_sin_cache_into(arr, theta, rule)
    return arr


def table_size(max_position, rotary_dim, theta, rule):
    """(max_position, rotary_dim) of a table to allocate, checked first:
    max_position >= 0, and rotary_dim, theta and the rule as the library
    judges them (qkvfuse_rope_inv_freq names rotary_dim and theta)."""
    mp = _check.integer(max_position, "max_position")
    if mp < 0:
        raise errors.InvalidValueError(errors.QKVFUSE_ERROR_INVALID_VALUE,
                                       "max_position: must be >= 0 (rows of the table); got %d" % mp)
    rd = _check.integer(rotary_dim, "rotary_dim")
    # the library refuses rotary_dim > 1024 before writing: a buffer of 512 values serves every valid one
    inv = (ctypes.c_double * 512)()
    ms = ctypes.c_double(0.0)
    sc = RopeScaling.from_config(rule).to_c()
    _capi.check(_capi.lib().qkvfuse_rope_inv_freq(_check.real(theta, "theta"), ctypes.byref(sc), rd, inv,
                                                  ctypes.byref(ms)), "rope_inv_freq")
    return mp, rd


def build_cos_sin_cache_into(out, theta: float, rule: RopeScaling, name="out"):
    """Fill a CPU array/tensor [max_pos, R] (qkvfuse_build_cos_sin_cache)."""
    keep = []
    t = _arrays.describe(_arrays.check_tensor(out, name), name, writable=True, keep=keep)
    sc = rule.to_c()
    _capi.check(_capi.lib().qkvfuse_build_cos_sin_cache(_check.real(theta, "theta"), ctypes.byref(sc),
                                                        ctypes.byref(t)), "build_cos_sin_cache")


def rope_inv_freq(rotary_dim: int, *, theta: float = 10000.0, scaling=None):
    """The inverse frequencies f_i (radians per position, i < rotary_dim/2) and
    the cos/sin multiplier mscale of a scaling rule, in double precision:
    returns ``(np.ndarray[float64] of rotary_dim // 2, mscale)``."""
    rd = _check.integer(rotary_dim, "rotary_dim")
    theta = _check.real(theta, "theta")
    rule = RopeScaling.from_config(scaling).to_c()
    n = max(rd // 2, 1)
    try:
        inv = np.zeros(n, np.float64)
    except (MemoryError, ValueError) as e:
        raise errors.OutOfMemoryError(errors.QKVFUSE_ERROR_OUT_OF_MEMORY,
                                      "rotary_dim: cannot allocate %d inverse frequencies: %s" % (n, e)) from None
    ms = ctypes.c_double(0.0)
    _capi.check(_capi.lib().qkvfuse_rope_inv_freq(theta, ctypes.byref(rule), rd,
                                                  inv.ctypes.data_as(ctypes.POINTER(ctypes.c_double)),
                                                  ctypes.byref(ms)), "rope_inv_freq")
    return inv[: rd // 2], ms.value
