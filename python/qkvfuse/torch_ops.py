# SPDX-License-Identifier: Apache-2.0
"""PyTorch operators (namespace qkvfuse) over the C library: the Python
registration, and the calls the public functions make.

Every operator exists in two forms:

- functional (``torch.ops.qkvfuse.run``, ``split_qkv_rmsnorm_rope``,
  ``qkv_rmsnorm_rope_cache``, ``dequant_rope_quant_kvcache``): outputs are
  allocated by torch and returned; the KV caches (and the optional
  ``error_flags`` word) are declared mutated and written in place;
- ``*_out``: every output is a declared-mutated argument, nothing is
  allocated (in-place q/k: pass the q/k column views of qkv).

Two bindings register them, with the same schemas (:data:`SCHEMAS`), checks
in the same order and the same messages: the compiled extension (python/ext,
C++ kernels for CPU, CUDA and Meta) when one built for this torch is found,
else :func:`register_python_ops` here (one Python kernel for CPU and CUDA,
describing each tensor through ctypes, and a fake implementation). See
_binding.py for the choice. Either way the real kernel calls the library on
the current CUDA stream of the tensors' device, under a guard for that
device: no host synchronization and no allocation outside torch's allocator,
so a CUDA graph captures it (create plans for computed RoPE before capturing:
plan creation copies a table to the device).

The core operator takes :func:`qkvfuse.run`'s configuration arguments as
plain schema arguments (ints, floats, strings); the plan is made (and
cached) at run time from them and the tensors.
"""
from __future__ import annotations

import contextlib
import functools
import inspect

import torch

from . import _binding, _check, core, errors, named, rope

_CORE_TENSORS = ("Tensor? qkv, Tensor? weight_scale, Tensor? act_scale, Tensor? bias, Tensor? q_gamma, "
                 "Tensor? k_gamma, Tensor? q_beta, Tensor? k_beta, Tensor? positions, Tensor? cos_sin_cache, "
                 "Tensor? cos, Tensor? sin, Tensor? slot_mapping, Tensor? k_scale, Tensor? v_scale, "
                 "Tensor? k_offset, Tensor? v_offset")
_CORE_OPTIONS = ("int num_q_heads, int num_kv_heads, int head_dim, int rotary_dim, str rope, str rope_style, "
                 "float rope_theta, str rope_scaling_type, float[] rope_scaling_params, float eps, "
                 "bool gamma_offset, str cache_layout, str k_quant, str v_quant, str rounding, str backend, "
                 "int num_threads")
_CORE_V2 = ('Tensor? q=None, Tensor? k=None, Tensor? v=None, Tensor? q_scale=None, str q_quant="none", '
            "Tensor? kv_indptr=None, Tensor? kv_indices=None, Tensor? batch_indices=None, Tensor? kv_positions=None")

# The named operators' options (qkvfuse_named_options), last and with defaults: calls without them keep working.
_NAMED_OPTIONS = ', str rounding="fused", bool strict=False'

# The operators' schemas; python/ext/qkvfuse_torch.cpp registers the same strings.
SCHEMAS = {
    "run": "(%s, Tensor(a!)? k_cache, Tensor(b!)? v_cache, Tensor(c!)? error_flags, %s, ScalarType? out_dtype, "
           "bool return_k, bool return_v, %s) -> (Tensor, Tensor, Tensor)" % (_CORE_TENSORS, _CORE_OPTIONS, _CORE_V2),
    "run_out": "(%s, Tensor(a!) q_out, Tensor(b!)? k_out, Tensor(c!)? v_out, Tensor(d!)? k_cache, "
               "Tensor(e!)? v_cache, Tensor(f!)? error_flags, %s, %s) -> ()" % (_CORE_TENSORS, _CORE_OPTIONS,
                                                                               _CORE_V2),
    "split_qkv_rmsnorm_rope":
        "(Tensor input, Tensor q_weight, Tensor k_weight, Tensor cos_sin_cache, Tensor positions, "
        "int q_hidden_size, int kv_hidden_size, int head_dim, float eps, int rope_dim, Tensor? q_bias, "
        "Tensor? k_bias, bool is_neox, ScalarType? out_dtype, Tensor(a!)? error_flags" + _NAMED_OPTIONS
        + ") -> (Tensor, Tensor, Tensor)",
    "split_qkv_rmsnorm_rope_out":
        "(Tensor input, Tensor q_weight, Tensor k_weight, Tensor cos_sin_cache, Tensor positions, "
        "int q_hidden_size, int kv_hidden_size, int head_dim, float eps, int rope_dim, Tensor? q_bias, "
        "Tensor? k_bias, bool is_neox, Tensor(a!) q_out, Tensor(b!) k_out, Tensor(c!) v_out, "
        "Tensor(d!)? error_flags" + _NAMED_OPTIONS + ") -> ()",
    "qkv_rmsnorm_rope_cache":
        "(Tensor qkv, Tensor q_gamma, Tensor k_gamma, Tensor cos, Tensor sin, Tensor index, Tensor(a!) k_cache, "
        "Tensor(b!) v_cache, Tensor? k_scale, Tensor? v_scale, Tensor? k_offset, Tensor? v_offset, int[] head_nums, "
        "int[] qkv_size, float epsilon, str cache_mode, bool is_output_qkv, Tensor(c!)? error_flags"
        + _NAMED_OPTIONS + ") -> (Tensor, Tensor, Tensor, Tensor)",
    "qkv_rmsnorm_rope_cache_out":
        "(Tensor qkv, Tensor q_gamma, Tensor k_gamma, Tensor cos, Tensor sin, Tensor index, Tensor(a!) q_out, "
        "Tensor(b!) k_cache, Tensor(c!) v_cache, Tensor? k_scale, Tensor? v_scale, Tensor? k_offset, "
        "Tensor? v_offset, Tensor(d!)? q_out_before_quant, Tensor(e!)? k_out_before_quant, "
        "Tensor(f!)? v_out_before_quant, int[] head_nums, int[] qkv_size, float epsilon, str cache_mode, "
        "bool is_output_qkv, Tensor(g!)? error_flags" + _NAMED_OPTIONS + ") -> ()",
    "dequant_rope_quant_kvcache":
        "(Tensor x, Tensor cos, Tensor sin, Tensor(a!) k_cache, Tensor(b!) v_cache, Tensor indices, Tensor scale_k, "
        "Tensor scale_v, Tensor? offset_k, Tensor? offset_v, Tensor? weight_scale, Tensor? activation_scale, "
        "Tensor? bias, int[] size_splits, str quant_mode, str layout, bool kv_output, str cache_mode, "
        "ScalarType? out_dtype, Tensor(c!)? error_flags" + _NAMED_OPTIONS + ") -> (Tensor, Tensor, Tensor)",
    "dequant_rope_quant_kvcache_out":
        "(Tensor x, Tensor cos, Tensor sin, Tensor(a!) k_cache, Tensor(b!) v_cache, Tensor indices, Tensor scale_k, "
        "Tensor scale_v, Tensor? offset_k, Tensor? offset_v, Tensor? weight_scale, Tensor? activation_scale, "
        "Tensor? bias, int[] size_splits, str quant_mode, str layout, bool kv_output, str cache_mode, "
        "Tensor(c!) q_out, Tensor(d!)? k_out, Tensor(e!)? v_out, Tensor(f!)? error_flags" + _NAMED_OPTIONS
        + ") -> ()",
    "build_cos_sin_cache":
        "(int max_position, int rotary_dim, float theta, str scaling_type, float[] scaling_params, "
        "ScalarType dtype, Device device) -> Tensor",
}

_EMPTY = (0,)
_LIB = None
_KERNELS = {}  # name: (kernel, fake kernel or None)


def _op(name):
    def register(fn):
        _KERNELS[name] = (fn, None)
        fn._qkvfuse_name = name
        return fn
    return register


def _fake(op_fn):
    """Register fake_fn as op_fn's fake (meta) implementation, behind a check
    that every tensor argument is on one device: torch sends a call with a
    meta tensor among CPU or CUDA ones to this kernel, whose outputs would be
    uninitialized memory instead of an error."""
    names = tuple(inspect.signature(op_fn).parameters)

    def register(fake_fn):
        @functools.wraps(fake_fn)
        def checked(*args, **kwargs):
            bound = dict(zip(names, args), **kwargs)
            _check.same_device({n: bound[n] for n in names if isinstance(bound.get(n), torch.Tensor)})
            return fake_fn(*args, **kwargs)

        _KERNELS[op_fn._qkvfuse_name] = (op_fn, checked)
        return fake_fn
    return register


def register_python_ops():
    """Define torch.ops.qkvfuse.* with Python kernels (once per process).

    Registered with torch.library.Library define/impl (a
    CompositeExplicitAutograd kernel: one Python function for CPU and CUDA)
    rather than torch.library.custom_op, whose per-call wrappers (autograd,
    ADInplaceOrView, dynamo-disable) cost more than the whole call otherwise
    does; each operator has a fake implementation."""
    global _LIB
    if _LIB is not None:
        return
    lib = torch.library.Library("qkvfuse", "DEF")
    for name, schema in SCHEMAS.items():
        lib.define(name + schema)
        kernel, fake = _KERNELS[name]
        lib.impl(name, kernel, "CompositeExplicitAutograd")
        if fake is not None:
            torch.library.register_fake("qkvfuse::" + name, fake, lib=lib)
    _LIB = lib


def _computing_device(x, name):
    """The real kernels compute on CPU or CUDA tensors only (a call whose
    tensors are all meta belongs to the fake kernel)."""
    if x.device.type not in ("cpu", "cuda"):
        raise errors.DeviceError(errors.QKVFUSE_ERROR_DEVICE,
                                 "%s: tensors must be on cpu or cuda; got %s" % (name, x.device))


def _guard(x):
    """Make x's CUDA device current for the call (the library launches on the
    plan's device; torch's current stream is per device)."""
    return torch.cuda.device(x.device) if x.is_cuda else contextlib.nullcontext()


def _stream(x):
    return torch.cuda.current_stream(x.device).cuda_stream or None if x.is_cuda else None


# ---- core operator --------------------------------------------------------------------------

_CORE_INPUTS = ("weight_scale", "act_scale", "bias", "q_gamma", "k_gamma", "q_beta", "k_beta", "positions",
                "cos_sin_cache", "cos", "sin", "slot_mapping", "k_scale", "v_scale", "k_offset", "v_offset")
_Q_DTYPES = {"fp8_e4m3": torch.float8_e4m3fn, "fp8_e5m2": torch.float8_e5m2}


def _main(qkv, q):
    """The main input of a core call: qkv, else q."""
    if qkv is not None:
        return qkv, "qkv"
    if q is not None:
        return q, "q"
    raise errors.NullPointerError(errors.QKVFUSE_ERROR_NULL_POINTER, "qkv: required (or q and k); got None")


def _default_dtype(main, cos_sin_cache, cos):
    if main.dtype != torch.int32:
        return main.dtype
    if cos is not None:
        return cos.dtype
    if cos_sin_cache is not None:
        return cos_sin_cache.dtype
    return torch.float32


def _core_alloc(main, main_name, nq, nkv, hd, out_dtype, q_quant, return_k, return_v):
    core.check_out_widths(main, nq, nkv, hd, main_name)
    q_shape, kv_shape = core.out_shapes(main, main_name, nq, nkv, hd)
    q = torch.empty(q_shape, dtype=_Q_DTYPES.get(q_quant, out_dtype), device=main.device)
    k = torch.empty(kv_shape if return_k else _EMPTY, dtype=out_dtype, device=main.device)
    v = torch.empty(kv_shape if return_v else _EMPTY, dtype=out_dtype, device=main.device)
    return q, k, v


def _core_plan(options, tensors, main, main_name):
    """The plan of a core call (the options checked, the configuration
    inferred from them and the tensors): first, so that a bad configuration
    is an error before anything is allocated."""
    _computing_device(main, main_name)
    core.check_kernel_options(options)
    return core.get_plan(core.config_for(options, tensors, tensors["k_cache"], tensors["v_cache"]), main.device)


def _core_call(plan, tensors, main, main_name, error_flags):
    with _guard(main):
        core.run_raw(plan, tensors, error_flags, _stream(main), main_name)


@_op("run")
def run_op(qkv, weight_scale, act_scale, bias, q_gamma, k_gamma, q_beta, k_beta, positions, cos_sin_cache, cos,
           sin, slot_mapping, k_scale, v_scale, k_offset, v_offset, k_cache, v_cache, error_flags, num_q_heads,
           num_kv_heads, head_dim, rotary_dim, rope, rope_style, rope_theta, rope_scaling_type, rope_scaling_params,
           eps, gamma_offset, cache_layout, k_quant, v_quant, rounding, backend, num_threads, out_dtype, return_k,
           return_v, q=None, k=None, v=None, q_scale=None, q_quant="none", kv_indptr=None, kv_indices=None,
           batch_indices=None, kv_positions=None):
    options = (num_q_heads, num_kv_heads, head_dim, rotary_dim, rope, rope_style, rope_theta, rope_scaling_type,
               rope_scaling_params, eps, gamma_offset, cache_layout, k_quant, v_quant, rounding, backend,
               num_threads, q_quant)
    main, main_name = _main(qkv, q)
    tensors = dict(zip(_CORE_INPUTS, (weight_scale, act_scale, bias, q_gamma, k_gamma, q_beta, k_beta, positions,
                                      cos_sin_cache, cos, sin, slot_mapping, k_scale, v_scale, k_offset, v_offset)),
                   qkv=qkv, k_cache=k_cache, v_cache=v_cache, q=q, k=k, v=v, q_scale=q_scale, kv_indptr=kv_indptr,
                   kv_indices=kv_indices, batch_indices=batch_indices, kv_positions=kv_positions)
    plan = _core_plan(options, tensors, main, main_name)
    dt = _default_dtype(main, cos_sin_cache, cos) if out_dtype is None else out_dtype
    qo, ko, vo = _core_alloc(main, main_name, num_q_heads, num_kv_heads, head_dim, dt, q_quant, return_k, return_v)
    tensors.update(q_out=qo, k_out=ko if return_k else None, v_out=vo if return_v else None)
    _core_call(plan, tensors, main, main_name, error_flags)
    return qo, ko, vo


@_fake(run_op)
def _run_fake(qkv, weight_scale, act_scale, bias, q_gamma, k_gamma, q_beta, k_beta, positions, cos_sin_cache, cos,
              sin, slot_mapping, k_scale, v_scale, k_offset, v_offset, k_cache, v_cache, error_flags, num_q_heads,
              num_kv_heads, head_dim, rotary_dim, rope, rope_style, rope_theta, rope_scaling_type,
              rope_scaling_params, eps, gamma_offset, cache_layout, k_quant, v_quant, rounding, backend, num_threads,
              out_dtype, return_k, return_v, q=None, k=None, v=None, q_scale=None, q_quant="none", kv_indptr=None,
              kv_indices=None, batch_indices=None, kv_positions=None):
    main, main_name = _main(qkv, q)
    dt = _default_dtype(main, cos_sin_cache, cos) if out_dtype is None else out_dtype
    return _core_alloc(main, main_name, num_q_heads, num_kv_heads, head_dim, dt, q_quant, return_k, return_v)


@_op("run_out")
def run_out_op(qkv, weight_scale, act_scale, bias, q_gamma, k_gamma, q_beta, k_beta, positions, cos_sin_cache, cos,
               sin, slot_mapping, k_scale, v_scale, k_offset, v_offset, q_out, k_out, v_out, k_cache, v_cache,
               error_flags, num_q_heads, num_kv_heads, head_dim, rotary_dim, rope, rope_style, rope_theta,
               rope_scaling_type, rope_scaling_params, eps, gamma_offset, cache_layout, k_quant, v_quant, rounding,
               backend, num_threads, q=None, k=None, v=None, q_scale=None, q_quant="none", kv_indptr=None,
               kv_indices=None, batch_indices=None, kv_positions=None):
    options = (num_q_heads, num_kv_heads, head_dim, rotary_dim, rope, rope_style, rope_theta, rope_scaling_type,
               rope_scaling_params, eps, gamma_offset, cache_layout, k_quant, v_quant, rounding, backend,
               num_threads, q_quant)
    main, main_name = _main(qkv, q)
    tensors = dict(zip(_CORE_INPUTS, (weight_scale, act_scale, bias, q_gamma, k_gamma, q_beta, k_beta, positions,
                                      cos_sin_cache, cos, sin, slot_mapping, k_scale, v_scale, k_offset, v_offset)),
                   qkv=qkv, k_cache=k_cache, v_cache=v_cache, q=q, k=k, v=v, q_scale=q_scale, q_out=q_out,
                   k_out=k_out, v_out=v_out, kv_indptr=kv_indptr, kv_indices=kv_indices, batch_indices=batch_indices,
                   kv_positions=kv_positions)
    plan = _core_plan(options, tensors, main, main_name)
    _core_call(plan, tensors, main, main_name, error_flags)


@_fake(run_out_op)
def _run_out_fake(*args, **kwargs):
    return None


def _call(op, *args):
    """An operator call whose failure is the package's exception (the
    extension's carries the status in its text)."""
    try:
        return op(*args)
    except Exception as e:  # noqa: BLE001 - translated, or re-raised as it is
        raise errors.translate(e) from None


def run(options, ins: dict, k_cache, v_cache, q_out, k_out, v_out, out_dtype, return_k, return_v,
        error_flags) -> core.Outputs:
    """core.run for torch tensors, arguments checked (traceable by torch.compile)."""
    ops = _binding.OPS
    *opts, q_quant = options
    main, main_name = _main(ins["qkv"], ins["q"])
    args = [ins["qkv"]] + [ins[n] for n in _CORE_INPUTS]
    v2 = (ins["q"], ins["k"], ins["v"], ins["q_scale"], q_quant, ins["kv_indptr"], ins["kv_indices"],
          ins["batch_indices"], ins["kv_positions"])
    dt = None if out_dtype is None else _torch_dtype(out_dtype, "out_dtype")
    if q_out is None and k_out is None and v_out is None:
        q, k, v = _call(ops.run, *args, k_cache, v_cache, error_flags, *opts, dt, bool(return_k), bool(return_v),
                        *v2)
        return core.Outputs(q, k if return_k else None, v if return_v else None)
    if dt is None:
        dt = _default_dtype(main, ins["cos_sin_cache"], ins["cos"])
    nq, nkv, hd = opts[0], opts[1], opts[2]
    if q_out is None or (k_out is None and return_k) or (v_out is None and return_v):
        core.check_out_widths(main, nq, nkv, hd, main_name)
    q_shape, kv_shape = core.out_shapes(main, main_name, nq, nkv, hd)
    if q_out is None:
        q_out = torch.empty(q_shape, dtype=_Q_DTYPES.get(q_quant, dt), device=main.device)
    if k_out is None and return_k:
        k_out = torch.empty(kv_shape, dtype=dt, device=main.device)
    if v_out is None and return_v:
        v_out = torch.empty(kv_shape, dtype=dt, device=main.device)
    _call(ops.run_out, *args, q_out, k_out, v_out, k_cache, v_cache, error_flags, *opts, *v2)
    return core.Outputs(q_out, k_out, v_out)


# ---- split_qkv_rmsnorm_rope -------------------------------------------------------------------

def _split_alloc(input, q_hidden_size, kv_hidden_size, out_dtype):
    named.check_split_widths(input, q_hidden_size, kv_hidden_size)
    lead = tuple(input.shape[:-1])
    q = torch.empty(lead + (q_hidden_size,), dtype=out_dtype, device=input.device)
    k = torch.empty(lead + (kv_hidden_size,), dtype=out_dtype, device=input.device)
    v = torch.empty(lead + (kv_hidden_size,), dtype=out_dtype, device=input.device)
    return q, k, v


def _call_split(input, q_weight, k_weight, cos_sin_cache, positions, q_hidden_size, kv_hidden_size, head_dim, eps,
                rope_dim, q_bias, k_bias, is_neox, q_out, k_out, v_out, error_flags, rounding, strict):
    with _guard(input):
        named.split_qkv_rmsnorm_rope_raw(input, q_weight, k_weight, cos_sin_cache, positions, q_hidden_size,
                                         kv_hidden_size, head_dim, eps, rope_dim, q_bias, k_bias, is_neox, q_out,
                                         k_out, v_out, error_flags, rounding, strict)


@_op("split_qkv_rmsnorm_rope")
def split_op(input, q_weight, k_weight, cos_sin_cache, positions, q_hidden_size, kv_hidden_size, head_dim, eps,
             rope_dim, q_bias, k_bias, is_neox, out_dtype, error_flags, rounding="fused", strict=False):
    _computing_device(input, "input")
    q, k, v = _split_alloc(input, q_hidden_size, kv_hidden_size, input.dtype if out_dtype is None else out_dtype)
    _call_split(input, q_weight, k_weight, cos_sin_cache, positions, q_hidden_size, kv_hidden_size, head_dim, eps,
                rope_dim, q_bias, k_bias, is_neox, q, k, v, error_flags, rounding, strict)
    return q, k, v


@_fake(split_op)
def _split_fake(input, q_weight, k_weight, cos_sin_cache, positions, q_hidden_size, kv_hidden_size, head_dim, eps,
                rope_dim, q_bias, k_bias, is_neox, out_dtype, error_flags, rounding="fused", strict=False):
    return _split_alloc(input, q_hidden_size, kv_hidden_size, input.dtype if out_dtype is None else out_dtype)


@_op("split_qkv_rmsnorm_rope_out")
def split_out_op(input, q_weight, k_weight, cos_sin_cache, positions, q_hidden_size, kv_hidden_size, head_dim, eps,
                 rope_dim, q_bias, k_bias, is_neox, q_out, k_out, v_out, error_flags, rounding="fused", strict=False):
    _call_split(input, q_weight, k_weight, cos_sin_cache, positions, q_hidden_size, kv_hidden_size, head_dim, eps,
                rope_dim, q_bias, k_bias, is_neox, q_out, k_out, v_out, error_flags, rounding, strict)


@_fake(split_out_op)
def _split_out_fake(*args, **kwargs):
    return None


def split_qkv_rmsnorm_rope(input, q_weight, k_weight, cos_sin_cache, positions, q_hidden_size, kv_hidden_size,
                           head_dim, eps, rope_dim, q_bias, k_bias, is_neox, q_out, k_out, v_out, out_dtype,
                           error_flags, rounding="fused", strict=False):
    ops = _binding.OPS
    dt = None if out_dtype is None else _torch_dtype(out_dtype, "out_dtype")
    if q_out is None and k_out is None and v_out is None:
        return _call(ops.split, input, q_weight, k_weight, cos_sin_cache, positions, q_hidden_size, kv_hidden_size,
                     head_dim, eps, rope_dim, q_bias, k_bias, is_neox, dt, error_flags, rounding, strict)
    named.check_split_widths(input, q_hidden_size, kv_hidden_size)
    lead = tuple(input.shape[:-1])
    dt = input.dtype if dt is None else dt
    q_out = torch.empty(lead + (q_hidden_size,), dtype=dt, device=input.device) if q_out is None else q_out
    k_out = torch.empty(lead + (kv_hidden_size,), dtype=dt, device=input.device) if k_out is None else k_out
    v_out = torch.empty(lead + (kv_hidden_size,), dtype=dt, device=input.device) if v_out is None else v_out
    _call(ops.split_out, input, q_weight, k_weight, cos_sin_cache, positions, q_hidden_size, kv_hidden_size,
          head_dim, eps, rope_dim, q_bias, k_bias, is_neox, q_out, k_out, v_out, error_flags, rounding, strict)
    return q_out, k_out, v_out


def _torch_dtype(dt, name):
    if isinstance(dt, torch.dtype):
        return dt
    from ._arrays import dtype_name
    return getattr(torch, dtype_name(dt, name))


# ---- qkv_rmsnorm_rope_cache -------------------------------------------------------------------

def _cache_alloc(qkv, head_nums, qkv_size, is_output_qkv):
    head_nums = _check.integers(head_nums, "head_nums", 3)
    qkv_size = _check.integers(qkv_size, "qkv_size", 4)
    named.check_cache_widths(qkv, head_nums, qkv_size)
    T = qkv.shape[0]
    nq, nk, nv = head_nums
    d = qkv_size[3]
    q = torch.empty((T, nq * d), dtype=qkv.dtype, device=qkv.device)
    if not is_output_qkv:
        e = (torch.empty(_EMPTY, dtype=qkv.dtype, device=qkv.device) for _ in range(3))
        return (q, *e)
    return (q, torch.empty((T, nq * d), dtype=qkv.dtype, device=qkv.device),
            torch.empty((T, nk * d), dtype=qkv.dtype, device=qkv.device),
            torch.empty((T, nv * d), dtype=qkv.dtype, device=qkv.device))


def _call_cache(qkv, q_gamma, k_gamma, cos, sin, index, q_out, k_cache, v_cache, k_scale, v_scale, k_offset, v_offset,
                q_out_before_quant, k_out_before_quant, v_out_before_quant, head_nums, qkv_size, epsilon, cache_mode,
                is_output_qkv, error_flags, rounding, strict):
    with _guard(qkv):
        named.qkv_rmsnorm_rope_cache_raw(qkv, q_gamma, k_gamma, cos, sin, index, q_out, k_cache, v_cache, k_scale,
                                         v_scale, k_offset, v_offset, q_out_before_quant, k_out_before_quant,
                                         v_out_before_quant, qkv_size, head_nums, epsilon, cache_mode,
                                         is_output_qkv, error_flags, rounding, strict)


@_op("qkv_rmsnorm_rope_cache")
def cache_op(qkv, q_gamma, k_gamma, cos, sin, index, k_cache, v_cache, k_scale, v_scale, k_offset, v_offset,
             head_nums, qkv_size, epsilon, cache_mode, is_output_qkv, error_flags, rounding="fused", strict=False):
    _computing_device(qkv, "qkv")
    q, qb, kb, vb = _cache_alloc(qkv, head_nums, qkv_size, is_output_qkv)
    _call_cache(qkv, q_gamma, k_gamma, cos, sin, index, q, k_cache, v_cache, k_scale, v_scale, k_offset, v_offset,
                qb if is_output_qkv else None, kb if is_output_qkv else None, vb if is_output_qkv else None,
                head_nums, qkv_size, epsilon, cache_mode, is_output_qkv, error_flags, rounding, strict)
    return q, qb, kb, vb


@_fake(cache_op)
def _cache_fake(qkv, q_gamma, k_gamma, cos, sin, index, k_cache, v_cache, k_scale, v_scale, k_offset, v_offset,
                head_nums, qkv_size, epsilon, cache_mode, is_output_qkv, error_flags, rounding="fused", strict=False):
    return _cache_alloc(qkv, head_nums, qkv_size, is_output_qkv)


@_op("qkv_rmsnorm_rope_cache_out")
def cache_out_op(qkv, q_gamma, k_gamma, cos, sin, index, q_out, k_cache, v_cache, k_scale, v_scale, k_offset,
                 v_offset, q_out_before_quant, k_out_before_quant, v_out_before_quant, head_nums, qkv_size, epsilon,
                 cache_mode, is_output_qkv, error_flags, rounding="fused", strict=False):
    _call_cache(qkv, q_gamma, k_gamma, cos, sin, index, q_out, k_cache, v_cache, k_scale, v_scale, k_offset, v_offset,
                q_out_before_quant, k_out_before_quant, v_out_before_quant, head_nums, qkv_size, epsilon, cache_mode,
                is_output_qkv, error_flags, rounding, strict)


@_fake(cache_out_op)
def _cache_out_fake(*args, **kwargs):
    return None


def qkv_rmsnorm_rope_cache(qkv, q_gamma, k_gamma, cos, sin, index, k_cache, v_cache, k_scale, v_scale, k_offset,
                           v_offset, head_nums, qkv_size, epsilon, cache_mode, is_output_qkv, q_out,
                           q_out_before_quant, k_out_before_quant, v_out_before_quant, error_flags, rounding="fused",
                           strict=False):
    ops = _binding.OPS
    hn, qs = list(head_nums), list(qkv_size)
    mode = "PA_NZ" if cache_mode is None else cache_mode
    if q_out is None and q_out_before_quant is None and k_out_before_quant is None and v_out_before_quant is None:
        q, qb, kb, vb = _call(ops.cache, qkv, q_gamma, k_gamma, cos, sin, index, k_cache, v_cache, k_scale, v_scale,
                              k_offset, v_offset, hn, qs, epsilon, mode, is_output_qkv, error_flags, rounding, strict)
        return (q, qb, kb, vb) if is_output_qkv else q
    q, qb, kb, vb = _cache_alloc(qkv, hn, qs, is_output_qkv)
    q_out = q if q_out is None else q_out
    if is_output_qkv:
        q_out_before_quant = qb if q_out_before_quant is None else q_out_before_quant
        k_out_before_quant = kb if k_out_before_quant is None else k_out_before_quant
        v_out_before_quant = vb if v_out_before_quant is None else v_out_before_quant
    _call(ops.cache_out, qkv, q_gamma, k_gamma, cos, sin, index, q_out, k_cache, v_cache, k_scale, v_scale, k_offset,
          v_offset, q_out_before_quant, k_out_before_quant, v_out_before_quant, hn, qs, epsilon, mode, is_output_qkv,
          error_flags, rounding, strict)
    if is_output_qkv:
        return q_out, q_out_before_quant, k_out_before_quant, v_out_before_quant
    return q_out


# ---- dequant_rope_quant_kvcache -----------------------------------------------------------------

def _dequant_alloc(x, k_cache, size_splits, out_dtype, kv_output):
    size_splits = _check.integers(size_splits, "size_splits", 3)
    q_shape, kv_shape = named.dequant_out_shapes(x, k_cache, size_splits)
    q = torch.empty(q_shape, dtype=out_dtype, device=x.device)
    if not kv_output:  # the seed's empty kOut, vOut: the first dim 0
        kv_shape = (0,) + tuple(kv_shape[1:])
    k = torch.empty(kv_shape, dtype=out_dtype, device=x.device)
    v = torch.empty(kv_shape, dtype=out_dtype, device=x.device)
    return q, k, v


def _dequant_dtype(x, cos, out_dtype):
    if out_dtype is not None:
        return out_dtype
    return cos.dtype if x.dtype == torch.int32 else x.dtype


def _call_dequant(x, cos, sin, k_cache, v_cache, indices, scale_k, scale_v, offset_k, offset_v, weight_scale,
                  activation_scale, bias, size_splits, quant_mode, layout, kv_output, cache_mode, q_out, k_out, v_out,
                  error_flags, rounding, strict):
    with _guard(x):
        named.dequant_rope_quant_kvcache_raw(x, cos, sin, k_cache, v_cache, indices, scale_k, scale_v, offset_k,
                                             offset_v, weight_scale, activation_scale, bias, size_splits, quant_mode,
                                             layout, kv_output, cache_mode, q_out, k_out, v_out, error_flags,
                                             rounding, strict)


@_op("dequant_rope_quant_kvcache")
def dequant_op(x, cos, sin, k_cache, v_cache, indices, scale_k, scale_v, offset_k, offset_v, weight_scale,
               activation_scale, bias, size_splits, quant_mode, layout, kv_output, cache_mode, out_dtype,
               error_flags, rounding="fused", strict=False):
    _computing_device(x, "x")
    q, k, v = _dequant_alloc(x, k_cache, size_splits, _dequant_dtype(x, cos, out_dtype), kv_output)
    _call_dequant(x, cos, sin, k_cache, v_cache, indices, scale_k, scale_v, offset_k, offset_v, weight_scale,
                  activation_scale, bias, size_splits, quant_mode, layout, kv_output, cache_mode, q,
                  k if kv_output else None, v if kv_output else None, error_flags, rounding, strict)
    return q, k, v


@_fake(dequant_op)
def _dequant_fake(x, cos, sin, k_cache, v_cache, indices, scale_k, scale_v, offset_k, offset_v, weight_scale,
                  activation_scale, bias, size_splits, quant_mode, layout, kv_output, cache_mode, out_dtype,
                  error_flags, rounding="fused", strict=False):
    return _dequant_alloc(x, k_cache, size_splits, _dequant_dtype(x, cos, out_dtype), kv_output)


@_op("dequant_rope_quant_kvcache_out")
def dequant_out_op(x, cos, sin, k_cache, v_cache, indices, scale_k, scale_v, offset_k, offset_v, weight_scale,
                   activation_scale, bias, size_splits, quant_mode, layout, kv_output, cache_mode, q_out, k_out, v_out,
                   error_flags, rounding="fused", strict=False):
    _call_dequant(x, cos, sin, k_cache, v_cache, indices, scale_k, scale_v, offset_k, offset_v, weight_scale,
                  activation_scale, bias, size_splits, quant_mode, layout, kv_output, cache_mode, q_out, k_out, v_out,
                  error_flags, rounding, strict)


@_fake(dequant_out_op)
def _dequant_out_fake(*args, **kwargs):
    return None


def dequant_rope_quant_kvcache(x, cos, sin, k_cache, v_cache, indices, scale_k, scale_v, offset_k, offset_v,
                               weight_scale, activation_scale, bias, size_splits, quant_mode, layout, kv_output,
                               cache_mode, q_out, k_out, v_out, out_dtype, error_flags, rounding="fused",
                               strict=False):
    ops = _binding.OPS
    dt = None if out_dtype is None else _torch_dtype(out_dtype, "out_dtype")
    ss = list(size_splits)
    qm = "static" if quant_mode is None else quant_mode
    lo = "BSND" if layout is None else layout
    cm = "contiguous" if cache_mode is None else cache_mode
    if q_out is None and k_out is None and v_out is None:
        q, k, v = _call(ops.dequant, x, cos, sin, k_cache, v_cache, indices, scale_k, scale_v, offset_k, offset_v,
                        weight_scale, activation_scale, bias, ss, qm, lo, kv_output, cm, dt, error_flags, rounding,
                        strict)
        return q, k, v
    q, k, v = _dequant_alloc(x, k_cache, ss, _dequant_dtype(x, cos, dt), kv_output)
    q_out = q if q_out is None else q_out
    if kv_output:
        k_out = k if k_out is None else k_out
        v_out = v if v_out is None else v_out
    else:
        k_out = v_out = None
    _call(ops.dequant_out, x, cos, sin, k_cache, v_cache, indices, scale_k, scale_v, offset_k, offset_v, weight_scale,
          activation_scale, bias, ss, qm, lo, kv_output, cm, q_out, k_out, v_out, error_flags, rounding, strict)
    return (q_out, k_out, v_out) if kv_output else (q_out, k, v)


# ---- cos/sin cache builder ----------------------------------------------------------------------

@_op("build_cos_sin_cache")
def build_op(max_position, rotary_dim, theta, scaling_type, scaling_params, dtype, device):
    rule = core.scaling_from_args(scaling_type, scaling_params)
    mp, rd = rope.table_size(max_position, rotary_dim, theta, rule)  # before the table is allocated
    if device.type == "meta":  # the shape alone
        return torch.empty((mp, rd), dtype=dtype, device=device)
    try:
        out = torch.empty((mp, rd), dtype=dtype)
    except RuntimeError as e:  # the allocator's refusal
        raise errors.OutOfMemoryError(errors.QKVFUSE_ERROR_OUT_OF_MEMORY,
                                      "cos_sin_cache: cannot allocate [%d, %d] %s: %s" % (mp, rd, dtype, e)) from None
    rope.build_cos_sin_cache_into(out, theta, rule, "cos_sin_cache")
    return out.to(device)


@_fake(build_op)
def _build_fake(max_position, rotary_dim, theta, scaling_type, scaling_params, dtype, device):
    mp, rd = rope.table_size(max_position, rotary_dim, theta, core.scaling_from_args(scaling_type, scaling_params))
    return torch.empty((mp, rd), dtype=dtype, device=device)


def build_cos_sin_cache(max_position, rotary_dim, theta, rule, dtype, device):
    try:
        dev = torch.device("cpu" if device is None else device)
    except (RuntimeError, TypeError, ValueError):
        raise errors.InvalidValueError(errors.QKVFUSE_ERROR_INVALID_VALUE,
                                       "device: expected a torch device ('cpu', 'cuda', 'cuda:N', ...); got %r"
                                       % (device,)) from None
    sc_type, sc_params = core.scaling_args(rule)
    return _call(_binding.OPS.build, max_position, rotary_dim, theta, sc_type, sc_params, _torch_dtype(dtype, "dtype"),
                 dev)
