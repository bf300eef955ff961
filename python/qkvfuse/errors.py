# SPDX-License-Identifier: Apache-2.0
"""Exceptions: one class per qkvfuse_status, each also a standard Python error.

Every failing library call raises a subclass of :class:`QkvfuseError` whose
``message`` is the library's own text (``qkvfuse_last_error()``: it names the
argument, what was expected and what was given) and whose ``status`` is the
numeric ``qkvfuse_status``. The classes also derive from the built-in
exception a Python user would catch (``ValueError`` for a bad shape,
``TypeError`` for a bad dtype or an argument of the wrong Python type,
``IndexError`` for a position or slot outside its table, ...). Checks the
binding makes itself before calling the library (an array it cannot describe,
an integer outside its C type, a string with a NUL; see ``_check.py``) raise
the same classes.
"""

import re

QKVFUSE_SUCCESS = 0
QKVFUSE_ERROR_NULL_POINTER = 1
QKVFUSE_ERROR_INVALID_VALUE = 2
QKVFUSE_ERROR_DTYPE = 3
QKVFUSE_ERROR_SHAPE = 4
QKVFUSE_ERROR_STRIDE = 5
QKVFUSE_ERROR_ALIGNMENT = 6
QKVFUSE_ERROR_OVERLAP = 7
QKVFUSE_ERROR_OUT_OF_RANGE = 8
QKVFUSE_ERROR_BAD_SCALE = 9
QKVFUSE_ERROR_DEVICE = 10
QKVFUSE_ERROR_UNSUPPORTED = 11
QKVFUSE_ERROR_CUDA = 12
QKVFUSE_ERROR_OUT_OF_MEMORY = 13
QKVFUSE_ERROR_VERSION = 14


class QkvfuseError(Exception):
    """A qkvfuse call failed. ``status``: the qkvfuse_status number;
    ``status_name``: e.g. ``"QKVFUSE_ERROR_SHAPE"``; ``message``: the
    library's message; ``where``: the function that failed."""

    def __init__(self, status, message, status_name=None, where=None):
        self.status = int(status)
        self.status_name = status_name or _NAMES.get(self.status, "QKVFUSE_ERROR_UNKNOWN")
        self.message = message
        self.where = where
        prefix = "%s: " % where if where else ""
        super().__init__("%s%s [%s]" % (prefix, message, self.status_name))


class NullPointerError(QkvfuseError, ValueError):
    """A required tensor is missing."""


class InvalidValueError(QkvfuseError, ValueError):
    """An option or scalar is out of range, or a tensor the configuration does not use was given."""


class ArgumentTypeError(InvalidValueError, TypeError):
    """An argument of the wrong Python type (None or a string where an integer,
    flag or real number belongs, ...); checked by the binding before the call."""


class DtypeError(QkvfuseError, TypeError):
    """A tensor's dtype is not allowed there."""


class ShapeError(QkvfuseError, ValueError):
    """A tensor's shape does not match."""


class StrideError(QkvfuseError, ValueError):
    """A tensor's strides are not supported (the innermost dim must be contiguous)."""


class AlignmentError(QkvfuseError, ValueError):
    """A data pointer is not aligned to its element size."""


class OverlapError(QkvfuseError, ValueError):
    """An output overlaps an input or another output."""


class OutOfRangeError(QkvfuseError, IndexError):
    """Data-dependent: a position, slot or index outside its table (nothing was written)."""


class BadScaleError(QkvfuseError, ValueError):
    """Data-dependent: a zero or non-finite quantization scale, or a non-finite offset."""


class DeviceError(QkvfuseError, ValueError):
    """Tensors on different devices, or on a device the plan was not made for."""


class UnsupportedError(QkvfuseError, NotImplementedError):
    """A valid request this build cannot serve (e.g. CUDA tensors and no CUDA backend)."""


class CudaError(QkvfuseError, RuntimeError):
    """The CUDA runtime reported an error."""


class OutOfMemoryError(QkvfuseError, MemoryError):
    """Host allocation failed (plan creation)."""


class VersionError(QkvfuseError, RuntimeError):
    """The library and this binding disagree on a struct or version."""


class LibraryNotFoundError(ImportError):
    """libqkvfuse could not be loaded (see the message for the places tried)."""


_CLASSES = {
    QKVFUSE_ERROR_NULL_POINTER: NullPointerError,
    QKVFUSE_ERROR_INVALID_VALUE: InvalidValueError,
    QKVFUSE_ERROR_DTYPE: DtypeError,
    QKVFUSE_ERROR_SHAPE: ShapeError,
    QKVFUSE_ERROR_STRIDE: StrideError,
    QKVFUSE_ERROR_ALIGNMENT: AlignmentError,
    QKVFUSE_ERROR_OVERLAP: OverlapError,
    QKVFUSE_ERROR_OUT_OF_RANGE: OutOfRangeError,
    QKVFUSE_ERROR_BAD_SCALE: BadScaleError,
    QKVFUSE_ERROR_DEVICE: DeviceError,
    QKVFUSE_ERROR_UNSUPPORTED: UnsupportedError,
    QKVFUSE_ERROR_CUDA: CudaError,
    QKVFUSE_ERROR_OUT_OF_MEMORY: OutOfMemoryError,
    QKVFUSE_ERROR_VERSION: VersionError,
}
_NAMES = {
    QKVFUSE_ERROR_NULL_POINTER: "QKVFUSE_ERROR_NULL_POINTER",
    QKVFUSE_ERROR_INVALID_VALUE: "QKVFUSE_ERROR_INVALID_VALUE",
    QKVFUSE_ERROR_DTYPE: "QKVFUSE_ERROR_DTYPE",
    QKVFUSE_ERROR_SHAPE: "QKVFUSE_ERROR_SHAPE",
    QKVFUSE_ERROR_STRIDE: "QKVFUSE_ERROR_STRIDE",
    QKVFUSE_ERROR_ALIGNMENT: "QKVFUSE_ERROR_ALIGNMENT",
    QKVFUSE_ERROR_OVERLAP: "QKVFUSE_ERROR_OVERLAP",
    QKVFUSE_ERROR_OUT_OF_RANGE: "QKVFUSE_ERROR_OUT_OF_RANGE",
    QKVFUSE_ERROR_BAD_SCALE: "QKVFUSE_ERROR_BAD_SCALE",
    QKVFUSE_ERROR_DEVICE: "QKVFUSE_ERROR_DEVICE",
    QKVFUSE_ERROR_UNSUPPORTED: "QKVFUSE_ERROR_UNSUPPORTED",
    QKVFUSE_ERROR_CUDA: "QKVFUSE_ERROR_CUDA",
    QKVFUSE_ERROR_OUT_OF_MEMORY: "QKVFUSE_ERROR_OUT_OF_MEMORY",
    QKVFUSE_ERROR_VERSION: "QKVFUSE_ERROR_VERSION",
}


def from_status(status, status_name, message, where=None):
    """The exception for a library status (an unknown number gives QkvfuseError)."""
    cls = _CLASSES.get(int(status), QkvfuseError)
    return cls(status, message, status_name, where)


_STATUS_BY_NAME = {name: status for status, name in _NAMES.items()}
# the ``where`` of the exceptions the bindings raise after a library call
_WHERE = ("qkvfuse_run", "qkvfuse_plan_create", "split_qkv_rmsnorm_rope", "qkv_rmsnorm_rope_cache",
          "dequant_rope_quant_kvcache", "build_cos_sin_cache", "rope_inv_freq")
_TEXT = re.compile(r"(?s)(.*) \[(QKVFUSE_ERROR_[A-Z_]+)\](?:\n|$)")


def translate(e):
    """The package's exception for one a torch operator raised: the compiled
    extension throws the status's standard class (ValueError, TypeError, ...)
    with the text ``str()`` gives the package's exception ("[where: ]message
    [STATUS_NAME]"), which this reads back; anything else is returned as is."""
    if isinstance(e, QkvfuseError):
        return e
    m = _TEXT.match(str(e))
    if m is None or m.group(2) not in _STATUS_BY_NAME:
        return e
    body, name = m.group(1), m.group(2)
    where = None
    for w in _WHERE:
        if body.startswith(w + ": "):
            where, body = w, body[len(w) + 2:]
            break
    return from_status(_STATUS_BY_NAME[name], name, body, where)
