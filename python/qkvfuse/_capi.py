# SPDX-License-Identifier: Apache-2.0
"""The C API of libqkvfuse through ctypes: structs, enums, prototypes, loading.

Everything here mirrors include/qkvfuse.h field by field; the rest of the
package never touches ctypes directly. The library is found, in order, at
$QKVFUSE_LIBRARY, next to this file (where `pip install` puts it), in a build
folder of the source tree this file sits in, and by the system's loader.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import json
import os
import threading

from . import errors

# The ABI this binding was written for: the library's major version must be
# this one and its minor this or later (qkvfuse.h's policy: a minor only adds).
ABI_VERSION = (0, 2)
MAX_DIMS = 6

# --- enums (qkvfuse.h numbers; frozen there) ----------------------------------
# Copies of the header's numbers, needed before the library is loaded;
# tests/test_api.py compares each with the header (every value below its
# _COUNT named) and with the library (dtype names and sizes, status names).

DTYPE = {
    "int8": (0 << 8) | 8,
    "int32": (0 << 8) | 32,
    "int64": (0 << 8) | 64,
    "float16": (2 << 8) | 16,
    "float32": (2 << 8) | 32,
    "bfloat16": (4 << 8) | 16,
    "float8_e4m3fn": (10 << 8) | 8,
    "float8_e5m2": (12 << 8) | 8,
}
DEVICE_CPU, DEVICE_CUDA = 1, 2

ROPE_SOURCE = {"none": 0, "cos_sin_cache": 1, "cos_sin": 2, "computed": 3}
ROPE_STYLE = {"neox": 0, "interleaved": 1}
ROPE_SCALING = {"none": 0, "linear": 1, "ntk": 2, "llama3": 3, "yarn": 4}
QUANT = {"none": 0, "int8_sym": 1, "int8_asym": 2, "fp8_e4m3": 3, "fp8_e5m2": 4}
Q_QUANT = {"none": 0, "fp8_e4m3": 3, "fp8_e5m2": 4}  # desc.q_quant: q_out unquantized or fp8
CACHE_LAYOUT = {"none": 0, "paged": 1, "paged_hnd": 2, "nz": 3, "contiguous": 4}
CACHE_ADDRESSING = {"slots": 0, "page_table": 1}  # desc.cache_addressing: slot_mapping or the page table
ROUNDING = {"fused": 0, "unfused_parity": 1, "ascend_triton": 2, "cann": 3}
BACKEND = {"auto": 0, "reference": 1, "cpu": 2, "cuda": 3}

DATA_ERROR_POSITION, DATA_ERROR_SLOT, DATA_ERROR_SCALE = 1, 2, 4

DESC_VERSION = 2
ARGS_VERSION = 2


# --- structs ------------------------------------------------------------------

class Tensor(ctypes.Structure):
    """qkvfuse_tensor: data, dtype, device, ndim, shape, strides (in elements)."""

    _fields_ = [
        ("data", ctypes.c_void_p),
        ("dtype", ctypes.c_int),
        ("device_type", ctypes.c_int),
        ("device_id", ctypes.c_int32),
        ("ndim", ctypes.c_int32),
        ("shape", ctypes.c_int64 * MAX_DIMS),
        ("strides", ctypes.c_int64 * MAX_DIMS),
    ]


class RopeScaling(ctypes.Structure):
    _fields_ = [
        ("type", ctypes.c_int),
        ("factor", ctypes.c_double),
        ("original_max_position", ctypes.c_int64),
        ("low_freq_factor", ctypes.c_double),
        ("high_freq_factor", ctypes.c_double),
        ("beta_fast", ctypes.c_double),
        ("beta_slow", ctypes.c_double),
        ("extrapolation_factor", ctypes.c_double),
        ("attn_factor", ctypes.c_double),
    ]


class Desc(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("version", ctypes.c_uint32),
        ("num_q_heads", ctypes.c_int64),
        ("num_kv_heads", ctypes.c_int64),
        ("head_dim", ctypes.c_int64),
        ("rotary_dim", ctypes.c_int64),
        ("device_type", ctypes.c_int),
        ("device_id", ctypes.c_int32),
        ("backend", ctypes.c_int),
        ("num_threads", ctypes.c_int32),
        ("q_norm", ctypes.c_int32),
        ("k_norm", ctypes.c_int32),
        ("eps", ctypes.c_float),
        ("gamma_offset", ctypes.c_int32),
        ("rope_source", ctypes.c_int),
        ("rope_style", ctypes.c_int),
        ("rope_theta", ctypes.c_double),
        ("rope_scaling", RopeScaling),
        ("cache_layout", ctypes.c_int),
        ("k_quant", ctypes.c_int),
        ("v_quant", ctypes.c_int),
        ("rounding", ctypes.c_int),
        ("q_quant", ctypes.c_int),
        ("cache_addressing", ctypes.c_int),
    ]


TensorP = ctypes.POINTER(Tensor)


class NamedOptions(ctypes.Structure):
    """qkvfuse_named_options: the named operators' _ex options."""
    _fields_ = [("struct_size", ctypes.c_uint32), ("rounding", ctypes.c_int), ("strict", ctypes.c_int32)]


def named_options(rounding=0, strict=False) -> NamedOptions:
    """QKVFUSE_NAMED_OPTIONS_INIT with rounding (a ROUNDING value) and strict."""
    return NamedOptions(ctypes.sizeof(NamedOptions), rounding, int(strict))

# qkvfuse_args' tensor fields, in struct order.
ARG_TENSORS = (
    "qkv", "weight_scale", "act_scale", "bias",
    "q_gamma", "k_gamma", "q_beta", "k_beta",
    "positions", "cos_sin_cache", "cos", "sin",
    "slot_mapping", "k_scale", "v_scale", "k_offset", "v_offset",
    "q_out", "k_out", "v_out", "k_cache", "v_cache",
)
# ... and those after error_flags (version 2).
ARG_TENSORS_V2 = ("q", "k", "v", "q_scale", "kv_indptr", "kv_indices", "batch_indices", "kv_positions")


class Args(ctypes.Structure):
    _fields_ = ([("struct_size", ctypes.c_uint32), ("version", ctypes.c_uint32)]
                + [(name, TensorP) for name in ARG_TENSORS]
                + [("error_flags", ctypes.c_void_p)]
                + [(name, TensorP) for name in ARG_TENSORS_V2])


def rope_scaling_init() -> RopeScaling:
    """QKVFUSE_ROPE_SCALING_INIT."""
    return RopeScaling(0, 1.0, 0, 1.0, 4.0, 32.0, 1.0, 1.0, 1.0)


def desc_init() -> Desc:
    """QKVFUSE_DESC_INIT."""
    d = Desc()
    d.struct_size = ctypes.sizeof(Desc)
    d.version = DESC_VERSION
    d.device_type = DEVICE_CPU
    d.eps = 1e-6
    d.rope_theta = 10000.0
    d.rope_scaling = rope_scaling_init()
    return d


def args_init() -> Args:
    """QKVFUSE_ARGS_INIT."""
    a = Args()
    a.struct_size = ctypes.sizeof(Args)
    a.version = ARGS_VERSION
    return a


# --- loading ------------------------------------------------------------------

_LIB_NAMES = ("libqkvfuse.so", "libqkvfuse.dylib", "qkvfuse.dll")


def _candidates():
    env = os.environ.get("QKVFUSE_LIBRARY")
    if env:
        yield env, "$QKVFUSE_LIBRARY"
        return
    here = os.path.dirname(os.path.abspath(__file__))
    for name in _LIB_NAMES:
        yield os.path.join(here, name), "the package folder"
    # a source checkout: <repo>/python/qkvfuse/ next to <repo>/include/qkvfuse.h
    repo = os.path.dirname(os.path.dirname(here))
    if os.path.isfile(os.path.join(repo, "include", "qkvfuse.h")):
        for build in ("build", "build-gpu"):
            for name in _LIB_NAMES:
                yield os.path.join(repo, build, name), "the source tree's %s/" % build
    found = ctypes.util.find_library("qkvfuse")
    if found:
        yield found, "the system's library path"


_lib = None
_lib_path = None
_lock = threading.Lock()


def _declare(lib):
    c = ctypes
    sigs = {
        "qkvfuse_version_number": (c.c_uint, []),
        "qkvfuse_status_string": (c.c_char_p, [c.c_int]),
        "qkvfuse_last_error": (c.c_char_p, []),
        "qkvfuse_dtype_from_dlpack": (c.c_int, [c.c_uint8, c.c_uint8, c.c_uint16]),
        "qkvfuse_dtype_size": (c.c_size_t, [c.c_int]),
        "qkvfuse_dtype_name": (c.c_char_p, [c.c_int]),
        "qkvfuse_plan_create": (c.c_int, [c.POINTER(Desc), c.POINTER(c.c_void_p)]),
        "qkvfuse_plan_destroy": (None, [c.c_void_p]),
        "qkvfuse_plan_backend_name": (c.c_char_p, [c.c_void_p]),
        "qkvfuse_run": (c.c_int, [c.c_void_p, c.POINTER(Args), c.c_void_p]),
        "qkvfuse_split_qkv_rmsnorm_rope": (c.c_int, [
            TensorP, TensorP, TensorP, c.c_int64, c.c_int64, c.c_int64, c.c_double,
            TensorP, TensorP, c.c_int64, TensorP, TensorP, c.c_int,
            TensorP, TensorP, TensorP, c.c_void_p, c.c_void_p]),
        "qkvfuse_qkv_rmsnorm_rope_cache": (c.c_int, [
            TensorP, TensorP, TensorP, TensorP, TensorP, TensorP, TensorP, TensorP, TensorP,
            TensorP, TensorP, TensorP, TensorP, TensorP, TensorP, TensorP,
            c.POINTER(c.c_int64), c.POINTER(c.c_int64), c.c_double, c.c_char_p, c.c_int,
            c.c_void_p, c.c_void_p]),
        "qkvfuse_dequant_rope_quant_kvcache": (c.c_int, [
            TensorP, TensorP, TensorP, TensorP, TensorP, TensorP, TensorP, TensorP, TensorP,
            TensorP, TensorP, TensorP, TensorP, c.POINTER(c.c_int64), c.c_char_p, c.c_char_p,
            c.c_int, c.c_char_p, TensorP, TensorP, TensorP, c.c_void_p, c.c_void_p]),
        "qkvfuse_split_qkv_rmsnorm_rope_ex": (c.c_int, [
            TensorP, TensorP, TensorP, c.c_int64, c.c_int64, c.c_int64, c.c_double,
            TensorP, TensorP, c.c_int64, TensorP, TensorP, c.c_int,
            TensorP, TensorP, TensorP, c.POINTER(NamedOptions), c.c_void_p, c.c_void_p]),
        "qkvfuse_qkv_rmsnorm_rope_cache_ex": (c.c_int, [
            TensorP, TensorP, TensorP, TensorP, TensorP, TensorP, TensorP, TensorP, TensorP,
            TensorP, TensorP, TensorP, TensorP, TensorP, TensorP, TensorP,
            c.POINTER(c.c_int64), c.POINTER(c.c_int64), c.c_double, c.c_char_p, c.c_int,
            c.POINTER(NamedOptions), c.c_void_p, c.c_void_p]),
        "qkvfuse_dequant_rope_quant_kvcache_ex": (c.c_int, [
            TensorP, TensorP, TensorP, TensorP, TensorP, TensorP, TensorP, TensorP, TensorP,
            TensorP, TensorP, TensorP, TensorP, c.POINTER(c.c_int64), c.c_char_p, c.c_char_p,
            c.c_int, c.c_char_p, TensorP, TensorP, TensorP, c.POINTER(NamedOptions), c.c_void_p, c.c_void_p]),
        "qkvfuse_build_cos_sin_cache": (c.c_int, [c.c_double, c.POINTER(RopeScaling), TensorP]),
        "qkvfuse_rope_inv_freq": (c.c_int, [c.c_double, c.POINTER(RopeScaling), c.c_int64,
                                            c.POINTER(c.c_double), c.POINTER(c.c_double)]),
    }
    for name, (restype, argtypes) in sigs.items():
        fn = getattr(lib, name)
        fn.restype = restype
        fn.argtypes = argtypes
    # optional: a library older than the function still loads (build_info() says what is missing)
    if hasattr(lib, "qkvfuse_build_info"):
        lib.qkvfuse_build_info.restype = c.c_char_p
        lib.qkvfuse_build_info.argtypes = []


def lib():
    """The loaded library (loaded and checked on first use)."""
    global _lib, _lib_path
    if _lib is not None:
        return _lib
    with _lock:
        if _lib is not None:
            return _lib
        tried = []
        for path, where in _candidates():
            if os.sep in path and not os.path.isfile(path):
                tried.append("%s (%s): no such file" % (path, where))
                continue
            try:
                handle = ctypes.CDLL(path)
            except OSError as e:
                tried.append("%s (%s): %s" % (path, where, e))
                continue
            _declare(handle)
            v = handle.qkvfuse_version_number()
            if v // 10000 != ABI_VERSION[0] or v // 100 % 100 < ABI_VERSION[1]:
                raise errors.VersionError(
                    errors.QKVFUSE_ERROR_VERSION,
                    "%s: library version %d.%d.%d; this binding needs %d.%d or a later %d.x"
                    % (path, v // 10000, v // 100 % 100, v % 100, *ABI_VERSION, ABI_VERSION[0]))
            _lib, _lib_path = handle, path
            return _lib
        raise errors.LibraryNotFoundError(
            "libqkvfuse not found; build it (cmake -S . -B build && cmake --build build) or set "
            "QKVFUSE_LIBRARY=/path/to/libqkvfuse.so. Tried:\n  " + "\n  ".join(tried or ["(no candidates)"]))


def library_path() -> str:
    """Path of the loaded shared library."""
    lib()
    return _lib_path


def check(status: int, where: str) -> None:
    """Raise the exception for a non-success status, carrying the library's message."""
    if status == 0:
        return
    L = lib()
    message = (L.qkvfuse_last_error() or b"").decode("utf-8", "replace")
    name = (L.qkvfuse_status_string(status) or b"?").decode()
    raise errors.from_status(status, name, message, where)


def build_info_raw() -> dict:
    """qkvfuse_build_info of the loaded library, parsed."""
    L = lib()
    if not hasattr(L, "qkvfuse_build_info"):
        raise errors.VersionError(errors.QKVFUSE_ERROR_VERSION,
                                  "%s: library %s has no qkvfuse_build_info" % (_lib_path, version()))
    return json.loads(L.qkvfuse_build_info().decode("utf-8"))


def build_info() -> dict:
    """What the loaded library was built with (qkvfuse_build_info), plus the
    bindings: "binding" (NumPy: "ctypes"), "torch_binding" (who registered
    torch.ops.qkvfuse: "extension", "python", or None without torch) and
    "torch_extension" (the compiled extension loaded: its path, the torch
    version it was built against, whether it has CUDA kernels; else None, with
    "torch_binding_reason" saying why the Python registration is used)."""
    info = build_info_raw()
    info["binding"] = "ctypes"
    from . import _binding
    info.update(_binding.info())
    return info


def version() -> str:
    v = lib().qkvfuse_version_number()
    return "%d.%d.%d" % (v // 10000, v // 100 % 100, v % 100)
