# SPDX-License-Identifier: Apache-2.0
"""Arrays and tensors as qkvfuse_tensor descriptors.

NumPy arrays cross through ``__array_interface__`` data (strides converted
from bytes to elements); PyTorch tensors through ``data_ptr()`` and
``stride()`` (already in elements). NumPy has no bfloat16 or float8 dtypes
(float8_e4m3fn, float8_e5m2): use ml_dtypes arrays (recognized by dtype
name) or wrap the raw bits in a :class:`TypedArray`.
"""
from __future__ import annotations

import ctypes
import numbers

import numpy as np

from . import _capi, errors

try:  # torch is optional; the package works on NumPy alone
    import torch as _torch
except Exception:  # pragma: no cover - depends on the environment
    _torch = None

DTYPE_NAMES = tuple(_capi.DTYPE)
FLOAT_DTYPES = ("float32", "float16", "bfloat16")

_NP_STORAGE = {"bfloat16": np.uint16, "float8_e4m3fn": np.uint8, "float8_e5m2": np.uint8}


class TypedArray:
    """A NumPy array of raw bits standing for a dtype NumPy lacks.

    ``storage`` is a uint16 array for ``"bfloat16"`` or a uint8 array for
    ``"float8_e4m3fn"`` / ``"float8_e5m2"``; ``dtype`` names the type. Indexing returns a
    TypedArray view, so column blocks and cache views work as with any array.
    Outputs the package allocates for TypedArray inputs are TypedArrays too.
    """

    __slots__ = ("storage", "dtype")

    def __init__(self, storage, dtype):
        dtype = dtype_name(dtype)
        want = _NP_STORAGE.get(dtype)
        if want is None:
            raise errors.DtypeError(errors.QKVFUSE_ERROR_DTYPE,
                                    "TypedArray: dtype must be bfloat16, float8_e4m3fn or float8_e5m2; got %s" % dtype)
        storage = np.asarray(storage)
        _native(storage, "TypedArray")
        if storage.dtype != want:
            raise errors.DtypeError(errors.QKVFUSE_ERROR_DTYPE, "TypedArray: %s needs %s storage; got %s"
                                    % (dtype, np.dtype(want).name, storage.dtype))
        self.storage = storage
        self.dtype = dtype

    @classmethod
    def empty(cls, shape, dtype):
        return cls(np.empty(shape, _NP_STORAGE[dtype_name(dtype)]), dtype)

    @classmethod
    def zeros(cls, shape, dtype):
        return cls(np.zeros(shape, _NP_STORAGE[dtype_name(dtype)]), dtype)

    @property
    def shape(self):
        return self.storage.shape

    @property
    def ndim(self):
        return self.storage.ndim

    def reshape(self, *shape):
        return TypedArray(self.storage.reshape(*shape), self.dtype)

    def copy(self):
        return TypedArray(self.storage.copy(), self.dtype)

    def __getitem__(self, index):
        return TypedArray(self.storage[index], self.dtype)

    def __repr__(self):
        return "TypedArray(dtype=%s, shape=%s)" % (self.dtype, self.storage.shape)


def is_torch(x) -> bool:
    return _torch is not None and isinstance(x, _torch.Tensor)


def is_torch_device(d) -> bool:
    return _torch is not None and isinstance(d, _torch.device)


_DTYPE_ALIASES = {"float": "float32", "half": "float16", "bf16": "bfloat16", "fp16": "float16", "fp32": "float32",
                  "fp8": "float8_e4m3fn", "float8_e4m3": "float8_e4m3fn", "e4m3": "float8_e4m3fn",
                  "e5m2": "float8_e5m2"}


def dtype_name(dt, name="dtype") -> str:
    """Canonical name of a dtype given as a string, NumPy dtype, torch dtype or
    TypedArray dtype; ``name``: the caller's argument, for the message."""
    if isinstance(dt, str):
        text = dt
    elif _torch is not None and isinstance(dt, _torch.dtype):
        text = str(dt).replace("torch.", "")
    elif dt is None or isinstance(dt, (bool, numbers.Number)):  # np.dtype(None) would be float64
        text = repr(dt)
    else:
        try:
            d = np.dtype(dt)
            text = d.name if d.isnative else "%s (byte order %r)" % (d.name, d.byteorder)
        except Exception:  # np.dtype raises TypeError or ValueError for what is not a dtype
            text = repr(dt)
    text = _DTYPE_ALIASES.get(text, text)
    if text not in _capi.DTYPE:
        raise errors.DtypeError(errors.QKVFUSE_ERROR_DTYPE,
                                "%s: qkvfuse handles %s; got %s" % (name, ", ".join(DTYPE_NAMES), text))
    return text


def dtype_of(x, name="dtype") -> str:
    """The qkvfuse dtype name of an array or tensor (``name``: the argument x is)."""
    if isinstance(x, TypedArray):
        return x.dtype
    return dtype_name(x.dtype, name)


def torch_dtype(dt, name="dtype"):
    return getattr(_torch, dtype_name(dt, name))


def _fail(cls, code, name, msg):
    raise cls(code, "%s: %s" % (name, msg))


def _native(arr, name):
    """A NumPy array whose bytes are in the machine's order: the library reads
    them as native, so a byte-swapped array would be misread, not converted."""
    if not arr.dtype.isnative:
        _fail(errors.DtypeError, errors.QKVFUSE_ERROR_DTYPE, name,
              "byte order %r (non-native: %s); qkvfuse reads native-endian data only: convert with "
              "arr.astype(arr.dtype.newbyteorder('='))" % (arr.dtype.byteorder, arr.dtype.str))


def check_tensor(x, name, required=False):
    """x (None allowed unless ``required``) is a NumPy array, TypedArray or
    torch tensor, with native byte order: what ``describe`` accepts, checked
    before the binding reads shapes or allocates."""
    if x is None:
        if required:
            _fail(errors.NullPointerError, errors.QKVFUSE_ERROR_NULL_POINTER, name, "required, got None")
        return None
    if is_torch(x):  # first: the torch path is traced by Dynamo, and NumPy is no part of it
        return x
    if isinstance(x, np.ndarray):
        _native(x, name)
    elif isinstance(x, TypedArray):
        _native(x.storage, name)
    else:
        _fail(errors.DtypeError, errors.QKVFUSE_ERROR_DTYPE, name,
              "expected a NumPy array, qkvfuse.TypedArray or torch.Tensor; got %s" % type(x).__name__)
    return x


def contiguous_where_unused(shape, strides):
    """strides with the contiguous stride at size-1 dims (and every dim of an
    empty tensor), whatever the array says: no element is reached through
    them, and the library checks strides as given."""
    strides = list(strides)
    empty = 0 in shape
    inner = 1
    for k in range(len(shape) - 1, -1, -1):
        if shape[k] == 1 or empty:
            strides[k] = inner
        inner *= max(shape[k], 1)
    return strides


def describe(x, name, *, writable=False, keep=None) -> _capi.Tensor:
    """A qkvfuse_tensor for x (NumPy array, TypedArray or torch tensor).

    ``keep``: a list that receives the objects the descriptor points into, so
    the caller can hold them for the duration of the call.
    """
    if _torch is not None and isinstance(x, _torch.Tensor):
        code = _TORCH_CODES.get(x.dtype)
        if code is None:
            tname = str(x.dtype).replace("torch.", "")
            _fail(errors.DtypeError, errors.QKVFUSE_ERROR_DTYPE, name,
                  "dtype %s is not one qkvfuse handles (%s)" % (tname, ", ".join(DTYPE_NAMES)))
        dev = x.device
        if dev.type == "cuda":
            dev_type, dev_id = _capi.DEVICE_CUDA, dev.index or 0
        elif dev.type == "cpu":
            dev_type, dev_id = _capi.DEVICE_CPU, 0
        else:  # a meta tensor has no bytes: it must never reach the library
            _fail(errors.DeviceError, errors.QKVFUSE_ERROR_DEVICE, name,
                  "tensors must be on cpu or cuda; got %s" % dev)
        if x.layout != _torch.strided:
            _fail(errors.StrideError, errors.QKVFUSE_ERROR_STRIDE, name,
                  "expected a dense (strided) tensor; got layout %s" % x.layout)
        if x.is_neg():  # a negative-bit view: its bytes hold the values before negation
            _fail(errors.DtypeError, errors.QKVFUSE_ERROR_DTYPE, name,
                  "a negative view (torch._neg_view) holds the un-negated bytes; materialize it with .resolve_neg()")
        shape, strides = x.shape, x.stride()
        ptr = x.data_ptr()
    else:
        if isinstance(x, np.ndarray):
            arr = x
            _native(arr, name)
            code = _NP_CODES.get(arr.dtype)
            if code is None:
                code = _capi.DTYPE.get(arr.dtype.name)  # ml_dtypes bfloat16 / float8_e4m3fn / float8_e5m2
                if code is None:
                    _fail(errors.DtypeError, errors.QKVFUSE_ERROR_DTYPE, name,
                          "NumPy dtype %s is not one qkvfuse handles (%s; bfloat16/float8 through ml_dtypes or "
                          "qkvfuse.TypedArray)" % (arr.dtype.name, ", ".join(DTYPE_NAMES)))
        elif isinstance(x, TypedArray):
            arr, code = x.storage, _capi.DTYPE[x.dtype]
            _native(arr, name)
        else:
            _fail(errors.DtypeError, errors.QKVFUSE_ERROR_DTYPE, name,
                  "expected a NumPy array, qkvfuse.TypedArray or torch.Tensor; got %s" % type(x).__name__)
        if writable and not arr.flags.writeable:
            _fail(errors.InvalidValueError, errors.QKVFUSE_ERROR_INVALID_VALUE, name,
                  "the output array is read-only")
        item = arr.itemsize
        shape = arr.shape
        strides = []
        for k, (n, s) in enumerate(zip(shape, arr.strides)):
            if s % item or s < 0:
                if n > 1:
                    _fail(errors.StrideError, errors.QKVFUSE_ERROR_STRIDE, name,
                          "stride[%d] = %d bytes is not a non-negative multiple of the %d-byte element"
                          % (k, s, item))
                s = 0
            strides.append(s // item)
        ptr = arr.__array_interface__["data"][0]
        dev_type, dev_id = _capi.DEVICE_CPU, 0
    ndim = len(shape)
    if ndim > _capi.MAX_DIMS:
        _fail(errors.ShapeError, errors.QKVFUSE_ERROR_SHAPE, name,
              "at most %d dims; got %d" % (_capi.MAX_DIMS, ndim))
    if 1 in shape or 0 in shape:
        strides = contiguous_where_unused(shape, strides)
    t = _capi.Tensor(ptr or None, code, dev_type, dev_id, ndim, _I64x6(*shape), _I64x6(*strides))
    if keep is not None:
        keep.append(x)
    return t


_I64x6 = ctypes.c_int64 * _capi.MAX_DIMS
_NP_CODES = {np.dtype(n): _capi.DTYPE[n] for n in ("int8", "int32", "int64", "float16", "float32")}


if _torch is not None:
    _TORCH_CODES = {getattr(_torch, n): _capi.DTYPE[n] for n in DTYPE_NAMES if hasattr(_torch, n)}
else:  # pragma: no cover
    _TORCH_CODES = {}


def flags_pointer(flags, name="error_flags"):
    """Address of a uint32 error-flag word: a 1-element (or larger, first element
    used) uint32/int32 NumPy array or torch tensor, or None."""
    if flags is None:
        return None
    if is_torch(flags):
        ok = flags.dtype in (_torch.int32, getattr(_torch, "uint32", _torch.int32)) and flags.numel() >= 1
        if not ok:
            _fail(errors.DtypeError, errors.QKVFUSE_ERROR_DTYPE, name,
                  "expected a uint32 or int32 tensor with at least 1 element; got %s %s"
                  % (flags.dtype, tuple(flags.shape)))
        return flags.data_ptr()
    if isinstance(flags, np.ndarray):
        _native(flags, name)
    if isinstance(flags, np.ndarray) and flags.dtype in (np.uint32, np.int32) and flags.size >= 1:
        if not flags.flags.writeable:
            _fail(errors.InvalidValueError, errors.QKVFUSE_ERROR_INVALID_VALUE, name, "the array is read-only")
        return flags.__array_interface__["data"][0]
    _fail(errors.DtypeError, errors.QKVFUSE_ERROR_DTYPE, name,
          "expected a uint32 NumPy array or torch tensor with at least 1 element; got %r" % (type(flags).__name__,))


def device_of(x):
    """(device_type, device_id) of an array or tensor."""
    if is_torch(x):
        if x.device.type == "cuda":
            return _capi.DEVICE_CUDA, x.device.index or 0
        return _capi.DEVICE_CPU, 0
    return _capi.DEVICE_CPU, 0


def empty_like_kind(ref, shape, dtype, name):
    """A new NumPy output ``name`` of `shape`/`dtype` (a TypedArray for
    bfloat16/float8; ml_dtypes arrays when `ref` is one). NumPy's refusal
    (too large, no memory) becomes OutOfMemoryError naming the output."""
    dtype = dtype_name(dtype)
    try:
        if dtype in _NP_STORAGE:
            if isinstance(ref, np.ndarray) and ref.dtype.name == dtype:  # ml_dtypes
                return np.empty(shape, ref.dtype)
            return TypedArray.empty(shape, dtype)
        return np.empty(shape, dtype)
    except (MemoryError, ValueError, OverflowError) as e:
        raise errors.OutOfMemoryError(errors.QKVFUSE_ERROR_OUT_OF_MEMORY, "%s: cannot allocate %s %s: %s"
                                      % (name, list(shape), dtype, e)) from None


def shape_of(x):
    return tuple(int(n) for n in x.shape)

