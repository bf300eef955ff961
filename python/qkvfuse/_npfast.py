# SPDX-License-Identifier: Apache-2.0
"""qkvfuse_run with little per-call Python work.

The descriptors of a call are packed with struct.pack_into into one
per-thread buffer laid out as qkvfuse_args followed by its qkvfuse_tensors,
whose address goes to the library. Only the common case is handled here:
NumPy arrays (and TypedArrays) of native byte order, strides that are
non-negative multiples of the element size, writable outputs; dense torch
tensors of a handled dtype; every one on the plan's device. Anything else
returns None and the caller takes the general path (_arrays.describe), which
accepts what it can and names the argument of what it cannot.
"""
from __future__ import annotations

import ctypes
import struct
import threading

import numpy as np

from . import _arrays, _capi

TENSOR_SIZE = ctypes.sizeof(_capi.Tensor)
ARGS_SIZE = ctypes.sizeof(_capi.Args)
N_V1 = len(_capi.ARG_TENSORS)
N_ALL = N_V1 + len(_capi.ARG_TENSORS_V2)
_OUTPUTS = frozenset(i for i, n in enumerate(_capi.ARG_TENSORS) if n in ("q_out", "k_out", "v_out", "k_cache",
                                                                         "v_cache"))

# qkvfuse_tensor: data, dtype, device_type, device_id, ndim, shape[6], strides[6]
_HEAD = struct.Struct("=Qiiii")
_DIMS = [struct.Struct("=%dq" % n) for n in range(_capi.MAX_DIMS + 1)]
_DIMS_AT = _HEAD.size
_STRIDES_AT = _HEAD.size + 8 * _capi.MAX_DIMS
# qkvfuse_args: struct_size, version, the version-1 tensors, error_flags, the version-2 tensors
_ARGS = struct.Struct("=II%dQQ%dQ" % (N_V1, N_ALL - N_V1))
assert _ARGS.size == ARGS_SIZE and _STRIDES_AT + 8 * _capi.MAX_DIMS == TENSOR_SIZE

_CODES = {np.dtype(n): _capi.DTYPE[n] for n in ("int8", "int32", "int64", "float16", "float32")}
_NAMES = {np.dtype(n): n for n in ("int8", "int32", "int64", "float16", "float32")}
_STORAGE = {np.dtype(np.uint16), np.dtype(np.uint8)}
_FLAG_DTYPES = {np.dtype(np.uint32), np.dtype(np.int32)}
_CPU, _CUDA = _capi.DEVICE_CPU, _capi.DEVICE_CUDA
_torch = _arrays._torch
if _torch is not None:
    _TorchTensor, _STRIDED = _torch.Tensor, _torch.strided
    _TORCH_CODES = dict(_arrays._TORCH_CODES)
    _TORCH_FLAGS = {_torch.int32, getattr(_torch, "uint32", _torch.int32)}
else:  # pragma: no cover - without torch nothing is a torch tensor
    _TorchTensor = type("_NoTorch", (), {})


def _learn(dt):
    """Codes of the ml_dtypes types (bfloat16, float8) by name, once each."""
    name = dt.name
    if dt.isnative and name in _capi.DTYPE and name not in ("uint8", "uint16"):
        _CODES[dt], _NAMES[dt] = _capi.DTYPE[name], name
        return _capi.DTYPE[name]
    return None


def dtype_name(x):
    """The qkvfuse dtype name of an array or TypedArray, or None (the general
    path then says why)."""
    if type(x) is np.ndarray:
        dt = x.dtype
        name = _NAMES.get(dt)
        if name is None and _learn(dt) is not None:
            name = _NAMES[dt]
        return name
    if type(x) is _arrays.TypedArray:
        return x.dtype
    return None


def _address(arr):
    try:  # the fast way needs a writable, C-contiguous, non-empty buffer
        return ctypes.addressof(ctypes.c_char.from_buffer(arr))
    except (TypeError, ValueError, BufferError):
        return arr.__array_interface__["data"][0]


class _Scratch(threading.local):
    def __init__(self):
        self.buf = ctypes.create_string_buffer(ARGS_SIZE + N_ALL * TENSOR_SIZE)
        self.base = ctypes.addressof(self.buf)


_scratch = _Scratch()
_run_fn = None


def _fn():
    global _run_fn
    if _run_fn is None:
        f = _capi.lib()["qkvfuse_run"]  # a prototype of its own: plain addresses
        f.restype = ctypes.c_int
        f.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
        _run_fn = f
    return _run_fn


def _pack_torch(buf, off, x, device):
    """_pack for a torch tensor on `device` (the plan's (type, id))."""
    code = _TORCH_CODES.get(x.dtype)
    if code is None or x.layout is not _STRIDED or x.is_neg():
        return False
    if x.is_cuda:
        if device[0] != _CUDA or x.get_device() != device[1]:
            return False
    elif not x.is_cpu or device[0] != _CPU:
        return False
    shape = x.shape
    nd = len(shape)
    if nd > _capi.MAX_DIMS:
        return False
    strides = x.stride()
    if 1 in shape or 0 in shape:
        strides = _arrays.contiguous_where_unused(shape, strides)
    _HEAD.pack_into(buf, off, x.data_ptr(), code, device[0], device[1], nd)
    _DIMS[nd].pack_into(buf, off + _DIMS_AT, *shape)
    _DIMS[nd].pack_into(buf, off + _STRIDES_AT, *strides)
    return True


def _pack(buf, off, x, writable, device):
    """Write x's qkvfuse_tensor at buf[off]; False when x is not the common case."""
    if isinstance(x, _TorchTensor):
        return _pack_torch(buf, off, x, device)
    if device[0] != _CPU:
        return False
    if type(x) is np.ndarray:
        arr = x
        code = _CODES.get(arr.dtype)
        if code is None:
            code = _learn(arr.dtype)
            if code is None:
                return False
    elif type(x) is _arrays.TypedArray:
        arr = x.storage
        if type(arr) is not np.ndarray or arr.dtype not in _STORAGE:
            return False
        code = _capi.DTYPE[x.dtype]
    else:
        return False
    if writable and not arr.flags.writeable:
        return False
    shape = arr.shape
    nd = len(shape)
    if nd > _capi.MAX_DIMS:
        return False
    item = arr.itemsize
    strides = [s // item for s in arr.strides]
    for k in range(nd):
        s = arr.strides[k]
        if s < 0 or s % item:
            if shape[k] > 1:
                return False
    if 1 in shape or 0 in shape or any(s < 0 for s in strides):
        strides = _arrays.contiguous_where_unused(shape, strides)
    ptr = _address(arr) if arr.size else (arr.__array_interface__["data"][0] or 0)
    _HEAD.pack_into(buf, off, ptr, code, _CPU, 0, nd)
    _DIMS[nd].pack_into(buf, off + _DIMS_AT, *shape)
    _DIMS[nd].pack_into(buf, off + _STRIDES_AT, *strides)
    return True


def flags_address(flags, device=(_CPU, 0)):
    """Address of an error-flag word on `device`, 0 for None, or None when the
    general path must judge it."""
    if flags is None:
        return 0
    if isinstance(flags, _TorchTensor):
        if flags.dtype not in _TORCH_FLAGS or flags.numel() < 1:
            return None
        if flags.is_cuda:
            on_device = device[0] == _CUDA and flags.get_device() == device[1]
        else:
            on_device = flags.is_cpu and device[0] == _CPU
        return flags.data_ptr() if on_device else None
    if (device[0] == _CPU and type(flags) is np.ndarray and flags.dtype in _FLAG_DTYPES and flags.size >= 1
            and flags.flags.writeable):
        return _address(flags)
    return None


def run(plan, tensors, error_flags, stream=None):
    """qkvfuse_run of a plan on `tensors` (qkvfuse_args' tensor fields in
    order, None where absent) and a CUDA stream handle. Returns the status,
    or None when an argument is not the common case (nothing was called)."""
    device = plan.device
    flags = flags_address(error_flags, device)
    if flags is None:
        return None
    sc = _scratch
    buf, base = sc.buf, sc.base
    ptrs = [0] * N_ALL
    off = ARGS_SIZE
    for i in range(N_ALL):
        x = tensors[i]
        if x is None:
            continue
        if not _pack(buf, off, x, i in _OUTPUTS, device):
            return None
        ptrs[i] = base + off
        off += TENSOR_SIZE
    _ARGS.pack_into(buf, 0, ARGS_SIZE, _capi.ARGS_VERSION, *ptrs[:N_V1], flags, *ptrs[N_V1:])
    return _fn()(plan._handle, base, stream)
