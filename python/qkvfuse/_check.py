# SPDX-License-Identifier: Apache-2.0
"""The binding's argument checks: every value that crosses into C, checked
against the C type it becomes, before anything is allocated or written.

ctypes converts silently (a Python int wraps modulo 2^64, a string stops at
its first NUL, ``int(bool("no"))`` is 1, a big-endian array's bytes are read
as native), so each public function passes its arguments through these
first. A failure raises a :class:`~qkvfuse.QkvfuseError` subclass whose
message starts with the caller's argument name:

- a value of the wrong Python type: :class:`~qkvfuse.ArgumentTypeError`
  (also a ``TypeError``);
- an integer outside its C type, a flag other than 0/1, a string with a NUL,
  a real not representable in its C type: :class:`~qkvfuse.InvalidValueError`;
- a required tensor that is None: :class:`~qkvfuse.NullPointerError`;
- a tensor on a device other than the call's: :class:`~qkvfuse.DeviceError`.

The checks on a valid value use only isinstance and comparisons (NumPy is
touched on error paths only), so that Dynamo traces them in the wrappers of
the torch operators without a graph break.
"""
from __future__ import annotations

import ctypes
import numbers

import numpy as np

from . import errors

try:  # torch is optional
    import torch as _torch
    _SYMINT = (_torch.SymInt,)
except Exception:  # pragma: no cover - depends on the environment
    _torch = None
    _SYMINT = ()


def _bits(ctype):
    return 8 * ctypes.sizeof(ctype)


# [lo, hi] of each C integer type a value can become.
INT_RANGE = {
    "int64_t": (-(1 << 63), (1 << 63) - 1),
    "int32_t": (-(1 << 31), (1 << 31) - 1),
    "int": (-(1 << (_bits(ctypes.c_int) - 1)), (1 << (_bits(ctypes.c_int) - 1)) - 1),
    "uintptr_t": (0, (1 << _bits(ctypes.c_void_p)) - 1),
}


# float32 rounding, to nearest even: |f| <= 2^-150 becomes 0 and
# |f| >= 2^128 - 2^103 (the largest float plus half its ulp) becomes infinity.
_FLOAT_ZERO = 2.0 ** -150
_FLOAT_INF = 2.0 ** 128 - 2.0 ** 103


def _show(v):
    """repr(v) cut to 60 characters, with its type."""
    r = repr(v)
    if len(r) > 60:
        r = r[:57] + "..."
    return "%s (%s)" % (r, type(v).__name__)


def _type_error(name, what, v):
    return errors.ArgumentTypeError(errors.QKVFUSE_ERROR_INVALID_VALUE,
                                    "%s: must be %s; got %s" % (name, what, _show(v)))


def _value_error(name, msg):
    return errors.InvalidValueError(errors.QKVFUSE_ERROR_INVALID_VALUE, "%s: %s" % (name, msg))


def integer(v, name, ctype="int64_t"):
    """v as a Python int within the C type's range (an int or NumPy integer;
    not a bool or a float). A torch.SymInt (a traced size) passes as is."""
    lo, hi = INT_RANGE[ctype]
    if type(v) is int and lo <= v <= hi:  # the common case, first
        return v
    if isinstance(v, _SYMINT):
        return v
    if isinstance(v, bool) or not isinstance(v, numbers.Integral):  # np.bool_ is not Integral either
        raise _type_error(name, "an integer", v)
    i = int(v)
    if i < lo or i > hi:
        raise _value_error(name, "%d is outside the range of the C type %s [%d, %d]" % (i, ctype, lo, hi))
    return i


def flag(v, name):
    """A flag as a bool: True/False (Python or NumPy), or the integers 0 and 1."""
    if isinstance(v, bool):
        return v
    if isinstance(v, numbers.Integral):
        if v == 0 or v == 1:
            return bool(v)
        raise _value_error(name, "must be a bool (or 0 or 1); got %s" % _show(v))
    if isinstance(v, np.bool_):
        return bool(v)
    raise _type_error(name, "a bool (or 0 or 1)", v)


def _finite(f):
    return f - f == 0.0  # False for infinities and NaN


def real(v, name, ctype="double"):
    """v as a Python float representable in the C type ("double" or "float"):
    a finite value that would round to 0 or overflow there is an error (NaN
    and infinities pass: the library says what it accepts)."""
    if type(v) is float:
        f = v
    elif isinstance(v, bool) or not isinstance(v, numbers.Real):
        raise _type_error(name, "a real number", v)
    else:
        try:
            f = float(v)
        except OverflowError:
            raise _value_error(name, "%s is outside the range of the C type %s" % (_show(v), ctype)) from None
    if ctype == "float" and f != 0.0 and _finite(f):
        a = abs(f)
        if a <= _FLOAT_ZERO or a >= _FLOAT_INF:
            raise _value_error(name, "%r is not representable as a C float (it rounds to %s)"
                               % (f, "0" if a <= _FLOAT_ZERO else "infinity"))
    return f


def string(v, name, choices=None):
    """A str without NUL characters (C would stop at the first), one of
    ``choices`` when given."""
    if not isinstance(v, str):
        raise _type_error(name, "a string" if choices is None else
                          "one of %s" % ", ".join(repr(c) for c in choices), v)
    if "\0" in v:
        raise _value_error(name, "contains a NUL character (C would read only %r); got %r" % (v.split("\0")[0], v))
    if choices is not None and v not in choices:
        raise _value_error(name, "expected one of %s; got %r" % (", ".join(repr(c) for c in choices), v))
    return v


def c_string(v, name):
    """A mode string for a C ``const char *``: None (the library's default) or
    a str without NUL, as UTF-8 bytes."""
    if v is None:
        return None
    s = string(v, name)
    try:
        return s.encode("utf-8")
    except UnicodeEncodeError:
        raise _value_error(name, "is not valid Unicode text; got %r" % (s,)) from None


def integers(v, name, n, ctype="int64_t"):
    """A sequence of exactly n integers (list, tuple, torch.Size, 1-D NumPy
    array) as a tuple of Python ints, each within the C type."""
    if not isinstance(v, (list, tuple)):
        if not (isinstance(v, np.ndarray) and v.ndim == 1):
            raise _type_error(name, "a sequence of %d integers" % n, v)
        v = v.tolist()
    if len(v) != n:
        raise _value_error(name, "must have %d integers; got %d: %s" % (n, len(v), _show(v)))
    return tuple(integer(v[i], "%s[%d]" % (name, i), ctype) for i in range(n))


def last_dim(x, name):
    """x.shape[-1], or a ShapeError for a 0-d array."""
    if len(x.shape) == 0:
        raise errors.ShapeError(errors.QKVFUSE_ERROR_SHAPE, "%s: expected at least 1 dim; got a 0-d tensor" % name)
    return x.shape[-1]


def device_key(x):
    """(type, index) of where x's bytes are: ("cpu", 0) for NumPy arrays."""
    if _torch is not None and isinstance(x, _torch.Tensor):
        d = x.device
        return d.type, (d.index or 0) if d.type != "cpu" else 0
    return "cpu", 0


def device_text(key):
    return "%s:%d" % key if key[0] == "cuda" else key[0]


def same_device(named, device=None, device_name=None):
    """Every tensor of ``named`` ({argument name: tensor or None}, error_flags
    included) on one device: ``device`` ((type, index), the plan's) when given,
    else the first tensor's. A meta tensor among real ones would otherwise
    reach torch's fake kernel, which returns uninitialized outputs; a flag
    word on another device would be written through a wrong-space pointer."""
    ref_name = device_name
    for name, x in named.items():
        if x is None:
            continue
        key = device_key(x)
        if device is None:
            device, ref_name = key, name
        elif key != device:
            raise errors.DeviceError(errors.QKVFUSE_ERROR_DEVICE, "%s: on %s, but the call is on %s (%s)"
                                     % (name, device_text(key), device_text(device), ref_name))
    return device


def torch_tensors(ref_name, *named):
    """On the torch path every tensor argument (in the dicts ``named``) is a
    torch.Tensor: the operator schema takes nothing else."""
    for d in named:
        for name, x in d.items():
            if x is not None and not isinstance(x, _torch.Tensor):
                raise errors.DtypeError(errors.QKVFUSE_ERROR_DTYPE, "%s: expected a torch.Tensor (as %s is); got %s"
                                        % (name, ref_name, type(x).__name__))


def output_sizes(parts, formula, total, x, x_name):
    """Before the binding allocates outputs from sizes the caller gave
    (``parts``: [(argument name, value)]): each >= 0, and ``total`` (their
    ``formula``) equal to x's row width, as the library will require; so no
    allocation is larger than the input it comes from."""
    for name, v in parts:
        if v < 0:
            raise _value_error(name, "must be >= 0; got %d" % v)
    width = last_dim(x, x_name)
    if total != width:
        given = ", ".join("%s = %d" % p for p in parts)
        raise errors.ShapeError(errors.QKVFUSE_ERROR_SHAPE, "%s: %s = %d must equal %s's row width %d (shape[-1])"
                                % (given, formula, total, x_name, width))
