# SPDX-License-Identifier: Apache-2.0
"""PyTorch operators (torch.library, namespace qkvfuse) over the C library.

Every operator exists in two forms:

- functional (``torch.ops.qkvfuse.run``, ``split_qkv_rmsnorm_rope``,
  ``qkv_rmsnorm_rope_cache``, ``dequant_rope_quant_kvcache``): outputs are
  allocated by torch and returned; the KV caches (and the optional
  ``error_flags`` word) are declared mutated and written in place;
- ``*_out``: every output is a declared-mutated argument, nothing is
  allocated (in-place q/k: pass the q/k column views of qkv).

Each has a fake (meta) implementation, so ``torch.compile(fullgraph=True)``
traces a layer that calls them, and a real one that builds qkvfuse_tensor
descriptors from ``data_ptr()``/``stride()`` and calls the library on
``torch.cuda.current_stream()``: no host synchronization and no allocation
outside torch's allocator, so a CUDA graph captures it (create plans for
computed RoPE before capturing: plan creation copies a table to the device).

The core operator takes :func:`qkvfuse.run`'s configuration arguments as
plain schema arguments (ints, floats, strings); the plan is made (and
cached) at run time from them and the tensors.
"""
from __future__ import annotations

import contextlib
import functools
import inspect
from typing import List, Optional, Tuple

import torch

from . import _check, core, errors, named, rope

Tensor = torch.Tensor
OptTensor = Optional[torch.Tensor]

# Registered with torch.library.Library define/impl (a CompositeExplicitAutograd
# kernel: one Python function for CPU and CUDA) rather than
# torch.library.custom_op, whose per-call wrappers (autograd, ADInplaceOrView,
# dynamo-disable) cost more than the whole call otherwise does; the schema is
# still inferred from the annotations, with the mutated arguments marked, and
# each operator has a fake implementation.
_LIB = torch.library.Library("qkvfuse", "FRAGMENT")


def _op(name, mutates_args):
    def register(fn):
        schema = torch.library.infer_schema(fn, mutates_args=mutates_args)
        _LIB.define(name + schema)
        _LIB.impl(name, fn, "CompositeExplicitAutograd")
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
            _check.same_device({n: v for n, v in bound.items() if isinstance(v, torch.Tensor)})
            return fake_fn(*args, **kwargs)

        torch.library.register_fake("qkvfuse::" + op_fn._qkvfuse_name, checked, lib=_LIB)
        return fake_fn
    return register


def _computing_device(x: Tensor, name: str):
    """The real kernels compute on CPU or CUDA tensors only (a call whose
    tensors are all meta belongs to the fake kernel)."""
    if x.device.type not in ("cpu", "cuda"):
        raise errors.DeviceError(errors.QKVFUSE_ERROR_DEVICE,
                                 "%s: tensors must be on cpu or cuda; got %s" % (name, x.device))


_EMPTY = (0,)


def _guard(x: Tensor):
    """Make x's CUDA device current for the call (the library launches on the
    plan's device; torch's current stream is per device)."""
    return torch.cuda.device(x.device) if x.is_cuda else contextlib.nullcontext()


# ---- core operator --------------------------------------------------------------------------

_CORE_INPUTS = ("weight_scale", "act_scale", "bias", "q_gamma", "k_gamma", "q_beta", "k_beta", "positions",
                "cos_sin_cache", "cos", "sin", "slot_mapping", "k_scale", "v_scale", "k_offset", "v_offset")


def _core_alloc(qkv, num_q_heads, num_kv_heads, head_dim, out_dtype, return_k, return_v):
    lead = tuple(qkv.shape[:-1])
    q = torch.empty(lead + (num_q_heads * head_dim,), dtype=out_dtype, device=qkv.device)
    kv_shape = lead + (num_kv_heads * head_dim,)
    k = torch.empty(kv_shape if return_k else _EMPTY, dtype=out_dtype, device=qkv.device)
    v = torch.empty(kv_shape if return_v else _EMPTY, dtype=out_dtype, device=qkv.device)
    return q, k, v


def _core_plan(options, qkv, inputs, k_cache, v_cache):
    """(plan, {arg name: tensor}) of a core call: the plan first, so that a bad
    configuration is the library's error before anything is allocated."""
    _computing_device(qkv, "qkv")
    tensors = dict(zip(_CORE_INPUTS, inputs))
    plan = core.get_plan(core.config_for(options, tensors, k_cache, v_cache), qkv.device)
    tensors.update(qkv=qkv, k_cache=k_cache, v_cache=v_cache)
    return plan, tensors


def _core_call(plan, tensors, q_out, k_out, v_out, error_flags):
    tensors.update(q_out=q_out, k_out=k_out, v_out=v_out)
    with _guard(tensors["qkv"]):
        core.run_raw(plan, tensors, error_flags)


@_op("run", ("k_cache", "v_cache", "error_flags"))
def run_op(qkv: Tensor, weight_scale: OptTensor, act_scale: OptTensor, bias: OptTensor, q_gamma: OptTensor,
           k_gamma: OptTensor, q_beta: OptTensor, k_beta: OptTensor, positions: OptTensor,
           cos_sin_cache: OptTensor, cos: OptTensor, sin: OptTensor, slot_mapping: OptTensor, k_scale: OptTensor,
           v_scale: OptTensor, k_offset: OptTensor, v_offset: OptTensor, k_cache: OptTensor, v_cache: OptTensor,
           error_flags: OptTensor, num_q_heads: int, num_kv_heads: int, head_dim: int, rotary_dim: int, rope: str,
           rope_style: str, rope_theta: float, rope_scaling_type: str, rope_scaling_params: List[float],
           eps: float, gamma_offset: bool, cache_layout: str, k_quant: str, v_quant: str, rounding: str,
           backend: str, num_threads: int, out_dtype: torch.dtype, return_k: bool,
           return_v: bool) -> Tuple[Tensor, Tensor, Tensor]:
    options = (num_q_heads, num_kv_heads, head_dim, rotary_dim, rope, rope_style, rope_theta, rope_scaling_type,
               rope_scaling_params, eps, gamma_offset, cache_layout, k_quant, v_quant, rounding, backend,
               num_threads)
    ins = (weight_scale, act_scale, bias, q_gamma, k_gamma, q_beta, k_beta, positions, cos_sin_cache, cos, sin,
           slot_mapping, k_scale, v_scale, k_offset, v_offset)
    plan, tensors = _core_plan(options, qkv, ins, k_cache, v_cache)
    core.check_out_widths(qkv, num_q_heads, num_kv_heads, head_dim)
    q, k, v = _core_alloc(qkv, num_q_heads, num_kv_heads, head_dim, out_dtype, return_k, return_v)
    _core_call(plan, tensors, q, k if return_k else None, v if return_v else None, error_flags)
    return q, k, v


@_fake(run_op)
def _run_fake(qkv, weight_scale, act_scale, bias, q_gamma, k_gamma, q_beta, k_beta, positions, cos_sin_cache, cos,
              sin, slot_mapping, k_scale, v_scale, k_offset, v_offset, k_cache, v_cache, error_flags, num_q_heads,
              num_kv_heads, head_dim, *options_and_out):
    out_dtype, return_k, return_v = options_and_out[-3:]
    return _core_alloc(qkv, num_q_heads, num_kv_heads, head_dim, out_dtype, return_k, return_v)


@_op("run_out", ("q_out", "k_out", "v_out", "k_cache", "v_cache", "error_flags"))
def run_out_op(qkv: Tensor, weight_scale: OptTensor, act_scale: OptTensor, bias: OptTensor, q_gamma: OptTensor,
               k_gamma: OptTensor, q_beta: OptTensor, k_beta: OptTensor, positions: OptTensor,
               cos_sin_cache: OptTensor, cos: OptTensor, sin: OptTensor, slot_mapping: OptTensor,
               k_scale: OptTensor, v_scale: OptTensor, k_offset: OptTensor, v_offset: OptTensor, q_out: Tensor,
               k_out: OptTensor, v_out: OptTensor, k_cache: OptTensor, v_cache: OptTensor, error_flags: OptTensor,
               num_q_heads: int, num_kv_heads: int, head_dim: int, rotary_dim: int, rope: str, rope_style: str,
               rope_theta: float, rope_scaling_type: str, rope_scaling_params: List[float], eps: float,
               gamma_offset: bool, cache_layout: str, k_quant: str, v_quant: str, rounding: str, backend: str,
               num_threads: int) -> None:
    options = (num_q_heads, num_kv_heads, head_dim, rotary_dim, rope, rope_style, rope_theta, rope_scaling_type,
               rope_scaling_params, eps, gamma_offset, cache_layout, k_quant, v_quant, rounding, backend,
               num_threads)
    ins = (weight_scale, act_scale, bias, q_gamma, k_gamma, q_beta, k_beta, positions, cos_sin_cache, cos, sin,
           slot_mapping, k_scale, v_scale, k_offset, v_offset)
    plan, tensors = _core_plan(options, qkv, ins, k_cache, v_cache)
    _core_call(plan, tensors, q_out, k_out, v_out, error_flags)


@_fake(run_out_op)
def _run_out_fake(*args):
    return None


def _default_dtype(qkv, cos_sin_cache, cos):
    if qkv.dtype != torch.int32:
        return qkv.dtype
    if cos is not None:
        return cos.dtype
    if cos_sin_cache is not None:
        return cos_sin_cache.dtype
    return torch.float32


def run(options, ins: dict, k_cache, v_cache, q_out, k_out, v_out, out_dtype, return_k, return_v,
        error_flags) -> core.Outputs:
    """core.run for torch tensors (traceable by torch.compile)."""
    qkv = ins["qkv"]
    nq, nkv, hd = options[0], options[1], options[2]
    args = [ins[n] for n in _CORE_INPUTS]
    dt = (_default_dtype(qkv, ins["cos_sin_cache"], ins["cos"]) if out_dtype is None
          else _torch_dtype(out_dtype, "out_dtype"))
    if q_out is None and k_out is None and v_out is None:
        q, k, v = torch.ops.qkvfuse.run(qkv, *args, k_cache, v_cache, error_flags, *options, dt, bool(return_k),
                                        bool(return_v))
        return core.Outputs(q, k if return_k else None, v if return_v else None)
    if q_out is None or (k_out is None and return_k) or (v_out is None and return_v):
        core.check_out_widths(qkv, nq, nkv, hd)
    lead = tuple(qkv.shape[:-1])
    if q_out is None:
        q_out = torch.empty(lead + (nq * hd,), dtype=dt, device=qkv.device)
    if k_out is None and return_k:
        k_out = torch.empty(lead + (nkv * hd,), dtype=dt, device=qkv.device)
    if v_out is None and return_v:
        v_out = torch.empty(lead + (nkv * hd,), dtype=dt, device=qkv.device)
    torch.ops.qkvfuse.run_out(qkv, *args, q_out, k_out, v_out, k_cache, v_cache, error_flags, *options)
    return core.Outputs(q_out, k_out, v_out)


# ---- split_qkv_rmsnorm_rope -------------------------------------------------------------------

def _split_alloc(input, q_hidden_size, kv_hidden_size, out_dtype):
    lead = tuple(input.shape[:-1])
    q = torch.empty(lead + (q_hidden_size,), dtype=out_dtype, device=input.device)
    k = torch.empty(lead + (kv_hidden_size,), dtype=out_dtype, device=input.device)
    v = torch.empty(lead + (kv_hidden_size,), dtype=out_dtype, device=input.device)
    return q, k, v


@_op("split_qkv_rmsnorm_rope", ("error_flags",))
def split_op(input: Tensor, q_weight: Tensor, k_weight: Tensor, cos_sin_cache: Tensor, positions: Tensor,
             q_hidden_size: int, kv_hidden_size: int, head_dim: int, eps: float, rope_dim: int, q_bias: OptTensor,
             k_bias: OptTensor, is_neox: bool, out_dtype: torch.dtype,
             error_flags: OptTensor) -> Tuple[Tensor, Tensor, Tensor]:
    _computing_device(input, "input")
    named.check_split_widths(input, q_hidden_size, kv_hidden_size)
    q, k, v = _split_alloc(input, q_hidden_size, kv_hidden_size, out_dtype)
    with _guard(input):
        named.split_qkv_rmsnorm_rope_raw(input, q_weight, k_weight, cos_sin_cache, positions, q_hidden_size,
                                         kv_hidden_size, head_dim, eps, rope_dim, q_bias, k_bias, is_neox, q, k, v,
                                         error_flags)
    return q, k, v


@_fake(split_op)
def _split_fake(input, q_weight, k_weight, cos_sin_cache, positions, q_hidden_size, kv_hidden_size, head_dim, eps,
                rope_dim, q_bias, k_bias, is_neox, out_dtype, error_flags):
    return _split_alloc(input, q_hidden_size, kv_hidden_size, out_dtype)


@_op("split_qkv_rmsnorm_rope_out", ("q_out", "k_out", "v_out", "error_flags"))
def split_out_op(input: Tensor, q_weight: Tensor, k_weight: Tensor, cos_sin_cache: Tensor, positions: Tensor,
                 q_hidden_size: int, kv_hidden_size: int, head_dim: int, eps: float, rope_dim: int,
                 q_bias: OptTensor, k_bias: OptTensor, is_neox: bool, q_out: Tensor, k_out: Tensor, v_out: Tensor,
                 error_flags: OptTensor) -> None:
    with _guard(input):
        named.split_qkv_rmsnorm_rope_raw(input, q_weight, k_weight, cos_sin_cache, positions, q_hidden_size,
                                         kv_hidden_size, head_dim, eps, rope_dim, q_bias, k_bias, is_neox, q_out,
                                         k_out, v_out, error_flags)


@_fake(split_out_op)
def _split_out_fake(*args):
    return None


def split_qkv_rmsnorm_rope(input, q_weight, k_weight, cos_sin_cache, positions, q_hidden_size, kv_hidden_size,
                           head_dim, eps, rope_dim, q_bias, k_bias, is_neox, q_out, k_out, v_out, out_dtype,
                           error_flags):
    dt = input.dtype if out_dtype is None else _torch_dtype(out_dtype, "out_dtype")
    if q_out is None and k_out is None and v_out is None:
        return torch.ops.qkvfuse.split_qkv_rmsnorm_rope(input, q_weight, k_weight, cos_sin_cache, positions,
                                                        q_hidden_size, kv_hidden_size, head_dim, eps, rope_dim,
                                                        q_bias, k_bias, is_neox, dt, error_flags)
    named.check_split_widths(input, q_hidden_size, kv_hidden_size)
    q, k, v = _split_alloc(input, q_hidden_size, kv_hidden_size, dt)
    q_out = q if q_out is None else q_out
    k_out = k if k_out is None else k_out
    v_out = v if v_out is None else v_out
    torch.ops.qkvfuse.split_qkv_rmsnorm_rope_out(input, q_weight, k_weight, cos_sin_cache, positions, q_hidden_size,
                                                 kv_hidden_size, head_dim, eps, rope_dim, q_bias, k_bias, is_neox,
                                                 q_out, k_out, v_out, error_flags)
    return q_out, k_out, v_out


def _torch_dtype(dt, name):
    if isinstance(dt, torch.dtype):
        return dt
    from ._arrays import dtype_name
    return getattr(torch, dtype_name(dt, name))


# ---- qkv_rmsnorm_rope_cache -------------------------------------------------------------------

def _cache_alloc(qkv, head_nums, qkv_size, is_output_qkv):
    T = qkv.shape[0]
    nq, nk, nv = head_nums
    d = qkv_size[3]
    q = torch.empty((T, nq * d), dtype=qkv.dtype, device=qkv.device)
    if not is_output_qkv:
        e = qkv.new_empty(_EMPTY)
        return q, e, qkv.new_empty(_EMPTY), qkv.new_empty(_EMPTY)
    return (q, torch.empty((T, nq * d), dtype=qkv.dtype, device=qkv.device),
            torch.empty((T, nk * d), dtype=qkv.dtype, device=qkv.device),
            torch.empty((T, nv * d), dtype=qkv.dtype, device=qkv.device))


@_op("qkv_rmsnorm_rope_cache", ("k_cache", "v_cache", "error_flags"))
def cache_op(qkv: Tensor, q_gamma: Tensor, k_gamma: Tensor, cos: Tensor, sin: Tensor, index: Tensor,
             k_cache: Tensor, v_cache: Tensor, k_scale: OptTensor, v_scale: OptTensor, k_offset: OptTensor,
             v_offset: OptTensor, head_nums: List[int], qkv_size: List[int], epsilon: float, cache_mode: str,
             is_output_qkv: bool, error_flags: OptTensor) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    _computing_device(qkv, "qkv")
    named.check_cache_widths(qkv, head_nums, qkv_size)
    q, qb, kb, vb = _cache_alloc(qkv, head_nums, qkv_size, is_output_qkv)
    with _guard(qkv):
        named.qkv_rmsnorm_rope_cache_raw(qkv, q_gamma, k_gamma, cos, sin, index, q, k_cache, v_cache, k_scale,
                                         v_scale, k_offset, v_offset, qb if is_output_qkv else None,
                                         kb if is_output_qkv else None, vb if is_output_qkv else None, qkv_size,
                                         head_nums, epsilon, cache_mode, is_output_qkv, error_flags)
    return q, qb, kb, vb


@_fake(cache_op)
def _cache_fake(qkv, q_gamma, k_gamma, cos, sin, index, k_cache, v_cache, k_scale, v_scale, k_offset, v_offset,
                head_nums, qkv_size, epsilon, cache_mode, is_output_qkv, error_flags):
    return _cache_alloc(qkv, head_nums, qkv_size, is_output_qkv)


@_op("qkv_rmsnorm_rope_cache_out", ("q_out", "k_cache", "v_cache", "q_out_before_quant",
                                    "k_out_before_quant", "v_out_before_quant", "error_flags"))
def cache_out_op(qkv: Tensor, q_gamma: Tensor, k_gamma: Tensor, cos: Tensor, sin: Tensor, index: Tensor,
                 q_out: Tensor, k_cache: Tensor, v_cache: Tensor, k_scale: OptTensor, v_scale: OptTensor,
                 k_offset: OptTensor, v_offset: OptTensor, q_out_before_quant: OptTensor,
                 k_out_before_quant: OptTensor, v_out_before_quant: OptTensor, head_nums: List[int],
                 qkv_size: List[int], epsilon: float, cache_mode: str, is_output_qkv: bool,
                 error_flags: OptTensor) -> None:
    with _guard(qkv):
        named.qkv_rmsnorm_rope_cache_raw(qkv, q_gamma, k_gamma, cos, sin, index, q_out, k_cache, v_cache, k_scale,
                                         v_scale, k_offset, v_offset, q_out_before_quant, k_out_before_quant,
                                         v_out_before_quant, qkv_size, head_nums, epsilon, cache_mode,
                                         is_output_qkv, error_flags)


@_fake(cache_out_op)
def _cache_out_fake(*args):
    return None


def qkv_rmsnorm_rope_cache(qkv, q_gamma, k_gamma, cos, sin, index, k_cache, v_cache, k_scale, v_scale, k_offset,
                           v_offset, head_nums, qkv_size, epsilon, cache_mode, is_output_qkv, q_out,
                           q_out_before_quant, k_out_before_quant, v_out_before_quant, error_flags):
    hn, qs = list(head_nums), list(qkv_size)
    mode = "PA_NZ" if cache_mode is None else cache_mode
    if q_out is None and q_out_before_quant is None and k_out_before_quant is None and v_out_before_quant is None:
        q, qb, kb, vb = torch.ops.qkvfuse.qkv_rmsnorm_rope_cache(qkv, q_gamma, k_gamma, cos, sin, index, k_cache,
                                                                 v_cache, k_scale, v_scale, k_offset, v_offset, hn,
                                                                 qs, epsilon, mode, is_output_qkv, error_flags)
        return (q, qb, kb, vb) if is_output_qkv else q
    named.check_cache_widths(qkv, hn, qs)
    q, qb, kb, vb = _cache_alloc(qkv, hn, qs, is_output_qkv)
    q_out = q if q_out is None else q_out
    if is_output_qkv:
        q_out_before_quant = qb if q_out_before_quant is None else q_out_before_quant
        k_out_before_quant = kb if k_out_before_quant is None else k_out_before_quant
        v_out_before_quant = vb if v_out_before_quant is None else v_out_before_quant
    torch.ops.qkvfuse.qkv_rmsnorm_rope_cache_out(qkv, q_gamma, k_gamma, cos, sin, index, q_out, k_cache, v_cache,
                                                 k_scale, v_scale, k_offset, v_offset, q_out_before_quant,
                                                 k_out_before_quant, v_out_before_quant, hn, qs, epsilon, mode,
                                                 is_output_qkv, error_flags)
    if is_output_qkv:
        return q_out, q_out_before_quant, k_out_before_quant, v_out_before_quant
    return q_out


# ---- dequant_rope_quant_kvcache -----------------------------------------------------------------

def _dequant_alloc(x, k_cache, size_splits, out_dtype, kv_output):
    q_shape, kv_shape = named.dequant_out_shapes(x, k_cache, size_splits)
    q = torch.empty(q_shape, dtype=out_dtype, device=x.device)
    k = torch.empty(kv_shape if kv_output else _EMPTY, dtype=out_dtype, device=x.device)
    v = torch.empty(kv_shape if kv_output else _EMPTY, dtype=out_dtype, device=x.device)
    return q, k, v


@_op("dequant_rope_quant_kvcache", ("k_cache", "v_cache", "error_flags"))
def dequant_op(x: Tensor, cos: Tensor, sin: Tensor, k_cache: Tensor, v_cache: Tensor, indices: Tensor,
               scale_k: Tensor, scale_v: Tensor, offset_k: OptTensor, offset_v: OptTensor, weight_scale: OptTensor,
               activation_scale: OptTensor, bias: OptTensor, size_splits: List[int], quant_mode: str, layout: str,
               kv_output: bool, cache_mode: str, out_dtype: torch.dtype,
               error_flags: OptTensor) -> Tuple[Tensor, Tensor, Tensor]:
    _computing_device(x, "x")
    q, k, v = _dequant_alloc(x, k_cache, size_splits, out_dtype, kv_output)
    with _guard(x):
        named.dequant_rope_quant_kvcache_raw(x, cos, sin, k_cache, v_cache, indices, scale_k, scale_v, offset_k,
                                             offset_v, weight_scale, activation_scale, bias, size_splits,
                                             quant_mode, layout, kv_output, cache_mode, q,
                                             k if kv_output else None, v if kv_output else None, error_flags)
    return q, k, v


@_fake(dequant_op)
def _dequant_fake(x, cos, sin, k_cache, v_cache, indices, scale_k, scale_v, offset_k, offset_v, weight_scale,
                  activation_scale, bias, size_splits, quant_mode, layout, kv_output, cache_mode, out_dtype,
                  error_flags):
    return _dequant_alloc(x, k_cache, size_splits, out_dtype, kv_output)


@_op("dequant_rope_quant_kvcache_out", ("k_cache", "v_cache", "q_out", "k_out", "v_out", "error_flags"))
def dequant_out_op(x: Tensor, cos: Tensor, sin: Tensor, k_cache: Tensor, v_cache: Tensor, indices: Tensor,
                   scale_k: Tensor, scale_v: Tensor, offset_k: OptTensor, offset_v: OptTensor,
                   weight_scale: OptTensor, activation_scale: OptTensor, bias: OptTensor, size_splits: List[int],
                   quant_mode: str, layout: str, kv_output: bool, cache_mode: str, q_out: Tensor, k_out: OptTensor,
                   v_out: OptTensor, error_flags: OptTensor) -> None:
    with _guard(x):
        named.dequant_rope_quant_kvcache_raw(x, cos, sin, k_cache, v_cache, indices, scale_k, scale_v, offset_k,
                                             offset_v, weight_scale, activation_scale, bias, size_splits,
                                             quant_mode, layout, kv_output, cache_mode, q_out, k_out, v_out,
                                             error_flags)


@_fake(dequant_out_op)
def _dequant_out_fake(*args):
    return None


def dequant_rope_quant_kvcache(x, cos, sin, k_cache, v_cache, indices, scale_k, scale_v, offset_k, offset_v,
                               weight_scale, activation_scale, bias, size_splits, quant_mode, layout, kv_output,
                               cache_mode, q_out, k_out, v_out, out_dtype, error_flags):
    if out_dtype is not None:
        dt = _torch_dtype(out_dtype, "out_dtype")
    else:
        dt = cos.dtype if x.dtype == torch.int32 else x.dtype
    ss = list(size_splits)
    qm = "static" if quant_mode is None else quant_mode
    lo = "BSND" if layout is None else layout
    cm = "contiguous" if cache_mode is None else cache_mode
    if q_out is None and k_out is None and v_out is None:
        q, k, v = torch.ops.qkvfuse.dequant_rope_quant_kvcache(x, cos, sin, k_cache, v_cache, indices, scale_k,
                                                               scale_v, offset_k, offset_v, weight_scale,
                                                               activation_scale, bias, ss, qm, lo, kv_output, cm, dt,
                                                               error_flags)
        return (q, k, v) if kv_output else (q, None, None)
    q, k, v = _dequant_alloc(x, k_cache, ss, dt, kv_output)
    q_out = q if q_out is None else q_out
    if kv_output:
        k_out = k if k_out is None else k_out
        v_out = v if v_out is None else v_out
    else:
        k_out = v_out = None
    torch.ops.qkvfuse.dequant_rope_quant_kvcache_out(x, cos, sin, k_cache, v_cache, indices, scale_k, scale_v,
                                                     offset_k, offset_v, weight_scale, activation_scale, bias, ss,
                                                     qm, lo, kv_output, cm, q_out, k_out, v_out, error_flags)
    return q_out, k_out, v_out


# ---- cos/sin cache builder ----------------------------------------------------------------------

@_op("build_cos_sin_cache", ())
def build_op(max_position: int, rotary_dim: int, theta: float, scaling_type: str, scaling_params: List[float],
             dtype: torch.dtype, device: torch.device) -> Tensor:
    rule = core.scaling_from_args(scaling_type, scaling_params)
    mp, rd = rope.table_size(max_position, rotary_dim, theta, rule)  # before the table is allocated
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
    return torch.ops.qkvfuse.build_cos_sin_cache(max_position, rotary_dim, theta, sc_type, sc_params,
                                                 _torch_dtype(dtype, "dtype"), dev)
