# SPDX-License-Identifier: Apache-2.0
"""The three named operators of SPEC.md, with their seeds' own arguments.

Each takes NumPy arrays (or TypedArrays) or torch tensors. With torch tensors
the call goes through the ``torch.ops.qkvfuse`` custom operator of the same
name (traceable by ``torch.compile``, capturable in CUDA graphs, on the
current CUDA stream). Outputs not given are allocated; caches are written in
place.
"""
from __future__ import annotations

import ctypes
from typing import Optional, Sequence

from . import _arrays, _binding, _capi, _check, errors

if _arrays._torch is not None:
    _TorchTensor, _TorchDtype = _arrays._torch.Tensor, _arrays._torch.dtype
else:  # pragma: no cover - without torch nothing is a torch tensor
    _TorchTensor = _TorchDtype = type("_NoTorch", (), {})


def _bad(msg):
    return errors.InvalidValueError(errors.QKVFUSE_ERROR_INVALID_VALUE, msg)


def _tensor_args(ref_name, required, optional, error_flags):
    """Each tensor argument checked before the binding reads a shape or
    allocates: a NumPy array, TypedArray or torch tensor of native byte order,
    the ``required`` ones present. Returns True for the torch path (the
    ``ref_name`` tensor is a torch tensor), where every tensor must be one."""
    for name, x in required.items():
        _arrays.check_tensor(x, name, required=True)
    for name, x in optional.items():
        _arrays.check_tensor(x, name)
    if _arrays.is_torch(required[ref_name]):
        _check.torch_tensors(ref_name, required, optional, {"error_flags": error_flags})
        return True
    return False


def _mode(s, name):
    """A mode string argument: None (the library's default) or a str without NUL."""
    return None if s is None else _check.string(s, name)


def _tensor_ptrs(named, outputs, error_flags):
    """{name: tensor or None} -> ({name: POINTER(Tensor) or None}, keepalive),
    every tensor and error_flags on the first tensor's device."""
    _check.same_device(dict(named, error_flags=error_flags))
    keep, ptrs = [], {}
    for name, x in named.items():
        if x is None:
            ptrs[name] = None
        else:
            d = _arrays.describe(x, name, writable=name in outputs, keep=keep)
            keep.append(d)
            ptrs[name] = ctypes.pointer(d)
    return ptrs, keep


def _options(rounding, strict):
    """(rounding, strict) checked: a rounding name of the library and a flag."""
    return _check.string(rounding, "rounding", tuple(_capi.ROUNDING)), _check.flag(strict, "strict")


def _options_pointer(rounding, strict):
    """qkvfuse_named_options for the _ex entry points."""
    rounding, strict = _options(rounding, strict)
    return ctypes.pointer(_capi.named_options(_capi.ROUNDING[rounding], strict))


def _stream_of(x):
    if _arrays.is_torch(x) and x.is_cuda:
        import torch
        return torch.cuda.current_stream(x.device).cuda_stream or None
    return None


# ---- split_qkv_rmsnorm_rope (vllm-ascend) ----------------------------------------------

def split_sizes(input, q_weight, q_hidden_size, kv_hidden_size, head_dim):
    """(q_hidden_size, kv_hidden_size, head_dim) with the missing ones inferred
    from input [T, q_hidden + 2*kv_hidden] and q_weight [head_dim]."""
    head_dim = (_check.last_dim(q_weight, "q_weight") if head_dim is None
                else _check.integer(head_dim, "head_dim"))
    width = _check.last_dim(input, "input")
    if q_hidden_size is None and kv_hidden_size is None:
        raise _bad("q_hidden_size: give q_hidden_size or kv_hidden_size (Nq*D, Nkv*D); got neither")
    if q_hidden_size is None:
        kv_hidden_size = _check.integer(kv_hidden_size, "kv_hidden_size")
        q_hidden_size = _check.integer(width - 2 * kv_hidden_size,
                                       "q_hidden_size (input's width - 2 * kv_hidden_size)")
    else:
        q_hidden_size = _check.integer(q_hidden_size, "q_hidden_size")
        if kv_hidden_size is None:
            kv_hidden_size = _check.integer((width - q_hidden_size) // 2,
                                            "kv_hidden_size ((input's width - q_hidden_size) / 2)")
        else:
            kv_hidden_size = _check.integer(kv_hidden_size, "kv_hidden_size")
    return q_hidden_size, kv_hidden_size, head_dim


def check_split_widths(input, q_hidden_size, kv_hidden_size):
    """Before the binding allocates q, k, v from the hidden sizes (see
    _check.output_sizes)."""
    _check.output_sizes((("q_hidden_size", q_hidden_size), ("kv_hidden_size", kv_hidden_size)),
                        "q_hidden_size + 2 * kv_hidden_size", q_hidden_size + 2 * kv_hidden_size, input, "input")


def split_qkv_rmsnorm_rope(input, q_weight, k_weight, cos_sin_cache, positions, *,
                           q_hidden_size: Optional[int] = None, kv_hidden_size: Optional[int] = None,
                           head_dim: Optional[int] = None, eps: float = 1e-6, rope_dim: Optional[int] = None,
                           q_bias=None, k_bias=None, is_neox: bool = True, q_out=None, k_out=None, v_out=None,
                           out_dtype=None, error_flags=None, rounding: str = "fused", strict: bool = False):
    """vllm-ascend ``split_qkv_rmsnorm_rope``: split q/k/v, RMSNorm q and k
    (optional bias), RoPE from a cos/sin cache by position; returns (q, k, v).

    - input [T, q_hidden_size + 2*kv_hidden_size] float32/float16/bfloat16
    - q_weight, k_weight [head_dim]: RMSNorm gammas; q_bias, k_bias [head_dim]
      (both or neither)
    - cos_sin_cache [max_pos, rope_dim], row p = [cos_0..cos_{R/2-1} | sin_0..];
      positions [T] int32/int64
    - q_hidden_size = Nq*D, kv_hidden_size = Nkv*D: give either (the other
      follows from input's width); head_dim defaults to q_weight's length
    - eps 1e-6; rope_dim None = head_dim (partial RoPE when smaller);
      is_neox True (half-split pairs) or False (interleaved pairs)
    - returns q [T, q_hidden_size], k [T, kv_hidden_size] (after RoPE),
      v [T, kv_hidden_size] (a copy), dtype of input (or ``out_dtype`` =
      float32), written into q_out/k_out/v_out when given
    - ``rounding``: ``"fused"`` (default), ``"ascend_triton"`` (bit-identical
      to seed 000's Triton kernel) or ``"unfused_parity"`` (to its PyTorch
      composition); ``strict=True`` also enforces the kernel's own
      constraints (python/README.md, "Rounding modes" and "strict")
    """
    ops = _binding.OPS
    # The torch path without outputs given: straight to the operator, whose
    # kernel checks everything; any failure (a value the schema refuses
    # included) goes the checked way below, which names the argument.
    if (ops is not None and isinstance(input, _TorchTensor) and q_out is None and k_out is None and v_out is None
            and (q_hidden_size is None or type(q_hidden_size) is int)
            and (kv_hidden_size is None or type(kv_hidden_size) is int)
            and (q_hidden_size is not None or kv_hidden_size is not None)
            and (head_dim is None or type(head_dim) is int) and type(eps) is float
            and (rope_dim is None or type(rope_dim) is int) and type(is_neox) is bool
            and (out_dtype is None or isinstance(out_dtype, _TorchDtype))
            and type(rounding) is str and type(strict) is bool):
        try:
            width = input.shape[-1]
            qh = width - 2 * kv_hidden_size if q_hidden_size is None else q_hidden_size
            kvh = (width - qh) // 2 if kv_hidden_size is None else kv_hidden_size
            return ops.split(input, q_weight, k_weight, cos_sin_cache, positions, qh, kvh,
                             q_weight.shape[-1] if head_dim is None else head_dim, eps,
                             0 if rope_dim is None else rope_dim, q_bias, k_bias, is_neox, out_dtype, error_flags,
                             rounding, strict)
        except Exception:  # noqa: BLE001 - reported by the checked path
            pass
    torch_path = _tensor_args("input", dict(input=input, q_weight=q_weight, k_weight=k_weight,
                                            cos_sin_cache=cos_sin_cache, positions=positions),
                              dict(q_bias=q_bias, k_bias=k_bias, q_out=q_out, k_out=k_out, v_out=v_out), error_flags)
    qh, kvh, hd = split_sizes(input, q_weight, q_hidden_size, kv_hidden_size, head_dim)
    eps = _check.real(eps, "eps")
    rd = 0 if rope_dim is None else _check.integer(rope_dim, "rope_dim")
    is_neox = _check.flag(is_neox, "is_neox")
    rounding, strict = _options(rounding, strict)
    if torch_path:
        from . import torch_ops
        return torch_ops.split_qkv_rmsnorm_rope(input, q_weight, k_weight, cos_sin_cache, positions, qh, kvh, hd,
                                                eps, rd, q_bias, k_bias, is_neox, q_out, k_out, v_out,
                                                out_dtype, error_flags, rounding, strict)
    dt = _arrays.dtype_name(out_dtype, "out_dtype") if out_dtype is not None else _arrays.dtype_of(input, "input")
    lead = _arrays.shape_of(input)[:-1]
    if q_out is None or k_out is None or v_out is None:
        check_split_widths(input, qh, kvh)
    if q_out is None:
        q_out = _arrays.empty_like_kind(input, lead + (qh,), dt, "q_out")
    if k_out is None:
        k_out = _arrays.empty_like_kind(input, lead + (kvh,), dt, "k_out")
    if v_out is None:
        v_out = _arrays.empty_like_kind(input, lead + (kvh,), dt, "v_out")
    split_qkv_rmsnorm_rope_raw(input, q_weight, k_weight, cos_sin_cache, positions, qh, kvh, hd, eps, rd, q_bias,
                               k_bias, is_neox, q_out, k_out, v_out, error_flags, rounding, strict)
    return q_out, k_out, v_out


def split_qkv_rmsnorm_rope_raw(input, q_weight, k_weight, cos_sin_cache, positions, q_hidden_size, kv_hidden_size,
                               head_dim, eps, rope_dim, q_bias, k_bias, is_neox, q_out, k_out, v_out, error_flags,
                               rounding="fused", strict=False):
    p, keep = _tensor_ptrs(dict(input=input, q_weight=q_weight, k_weight=k_weight, cos_sin_cache=cos_sin_cache,
                                positions=positions, q_bias=q_bias, k_bias=k_bias, q_out=q_out, k_out=k_out,
                                v_out=v_out), ("q_out", "k_out", "v_out"), error_flags)
    s = _capi.lib().qkvfuse_split_qkv_rmsnorm_rope_ex(
        p["input"], p["q_weight"], p["k_weight"], _check.integer(q_hidden_size, "q_hidden_size"),
        _check.integer(kv_hidden_size, "kv_hidden_size"), _check.integer(head_dim, "head_dim"),
        _check.real(eps, "eps"), p["cos_sin_cache"], p["positions"], _check.integer(rope_dim, "rope_dim"),
        p["q_bias"], p["k_bias"], int(_check.flag(is_neox, "is_neox")), p["q_out"], p["k_out"], p["v_out"],
        _options_pointer(rounding, strict), _arrays.flags_pointer(error_flags), _stream_of(input))
    _capi.check(s, "split_qkv_rmsnorm_rope")


# ---- qkv_rmsnorm_rope_cache (CANN QkvRmsNormRopeCache) --------------------------------------

def cache_sizes(qkv, q_gamma, head_nums, qkv_size):
    """head_nums (Nq, Nk, Nv) and qkv_size (B, S, N, D), the latter inferred
    as (B*S, 1, Nq+Nk+Nv, q_gamma's length) when not given."""
    head_nums = _check.integers(head_nums, "head_nums", 3)
    if qkv_size is None:
        if len(qkv.shape) == 0:
            raise errors.ShapeError(errors.QKVFUSE_ERROR_SHAPE, "qkv: expected [B*S, N*D]; got a 0-d tensor")
        qkv_size = (qkv.shape[0], 1, sum(head_nums), _check.last_dim(q_gamma, "q_gamma"))
    return head_nums, _check.integers(qkv_size, "qkv_size", 4)


def check_cache_widths(qkv, head_nums, qkv_size):
    """Before the binding allocates q and the before-quant outputs (see
    _check.output_sizes)."""
    nq, nk, nv = head_nums
    d = qkv_size[3]
    _check.output_sizes((("head_nums[0]", nq), ("head_nums[1]", nk), ("head_nums[2]", nv), ("qkv_size[3]", d)),
                        "(Nq + Nk + Nv) * D", (nq + nk + nv) * d, qkv, "qkv")


def qkv_rmsnorm_rope_cache(qkv, q_gamma, k_gamma, cos, sin, index, k_cache, v_cache, *,
                           head_nums: Sequence[int], qkv_size: Optional[Sequence[int]] = None,
                           k_scale=None, v_scale=None, k_offset=None, v_offset=None, epsilon: float = 1e-6,
                           cache_mode: str = "PA_NZ", is_output_qkv: bool = False, q_out=None,
                           q_out_before_quant=None, k_out_before_quant=None, v_out_before_quant=None,
                           error_flags=None, rounding: str = "fused", strict: bool = False):
    """CANN ``QkvRmsNormRopeCache``: RMSNorm q and k, RoPE from per-token cos/sin
    (neox, R = D), quantize k and v by the cache dtype (int8: symmetric, or
    asymmetric with offsets; float8_e4m3fn; else none) and scatter them into
    the caches by ``index`` (-1 skips). Caches are written in place.

    - qkv [B*S, (Nq+Nk+Nv)*D] float16/bfloat16/float32; q_gamma, k_gamma [D]
    - cos, sin [B*S, D] (or [B*S, 1, D])
    - index [B*S] int64/int32: slot of each token, -1 skips
    - k_cache, v_cache: ``cache_mode`` ``"PA_NZ"`` (default, [blocks, Nk*D/c,
      block_size, c], c = 32 bytes / element), ``"PA_BNSD"`` ([blocks, Nk,
      block_size, D]), ``"PA"``/``"PA_BSND"`` ([blocks, block_size, Nk, D])
    - k_scale, v_scale [Nk, D] float32 for int8/fp8 caches; k_offset,
      v_offset [Nk, D] for asymmetric int8
    - head_nums (Nq, Nk, Nv); qkv_size (B, S, N, D), default (B*S, 1, N, D)
    - epsilon 1e-6
    - returns q_out [B*S, Nq*D] (dtype of qkv), or with ``is_output_qkv`` the
      tuple (q_out, q_out_before_quant, k_out_before_quant [B*S, Nk*D],
      v_out_before_quant [B*S, Nv*D])
    - ``rounding``: ``"fused"`` (default) or ``"cann"`` (bit-identical to the
      seed's kernel: the caches quantize the k and v the before-quant outputs
      hold); ``strict=True`` also enforces the seed's constraints (D = 128,
      PA_NZ, dtypes equal to qkv's, int64 index without repeats, ...;
      python/README.md, "strict")
    """
    ops = _binding.OPS
    if (ops is not None and isinstance(qkv, _TorchTensor) and q_out is None and q_out_before_quant is None
            and k_out_before_quant is None and v_out_before_quant is None and type(head_nums) in (tuple, list)
            and len(head_nums) == 3 and all(type(h) is int for h in head_nums)
            and (qkv_size is None or type(qkv_size) in (tuple, list) and len(qkv_size) == 4
                 and all(type(n) is int for n in qkv_size))
            and type(epsilon) is float and (cache_mode is None or type(cache_mode) is str)
            and type(is_output_qkv) is bool and type(rounding) is str and type(strict) is bool):
        try:
            if qkv_size is None:
                qkv_size = [qkv.shape[0], 1, head_nums[0] + head_nums[1] + head_nums[2], q_gamma.shape[-1]]
            r = ops.cache(qkv, q_gamma, k_gamma, cos, sin, index, k_cache, v_cache, k_scale, v_scale, k_offset,
                          v_offset, head_nums, qkv_size, epsilon, "PA_NZ" if cache_mode is None else cache_mode,
                          is_output_qkv, error_flags, rounding, strict)
            return r if is_output_qkv else r[0]
        except Exception:  # noqa: BLE001 - reported by the checked path
            pass
    torch_path = _tensor_args("qkv", dict(qkv=qkv, q_gamma=q_gamma, k_gamma=k_gamma, cos=cos, sin=sin, index=index,
                                          k_cache=k_cache, v_cache=v_cache),
                              dict(k_scale=k_scale, v_scale=v_scale, k_offset=k_offset, v_offset=v_offset,
                                   q_out=q_out, q_out_before_quant=q_out_before_quant,
                                   k_out_before_quant=k_out_before_quant, v_out_before_quant=v_out_before_quant),
                              error_flags)
    head_nums, qkv_size = cache_sizes(qkv, q_gamma, head_nums, qkv_size)
    epsilon = _check.real(epsilon, "epsilon")
    cache_mode = _mode(cache_mode, "cache_mode")
    is_output_qkv = _check.flag(is_output_qkv, "is_output_qkv")
    rounding, strict = _options(rounding, strict)
    if torch_path:
        from . import torch_ops
        return torch_ops.qkv_rmsnorm_rope_cache(qkv, q_gamma, k_gamma, cos, sin, index, k_cache, v_cache, k_scale,
                                                v_scale, k_offset, v_offset, head_nums, qkv_size, epsilon,
                                                cache_mode, is_output_qkv, q_out, q_out_before_quant,
                                                k_out_before_quant, v_out_before_quant, error_flags, rounding,
                                                strict)
    nq, nk, nv = head_nums
    d = qkv_size[3]
    dt = _arrays.dtype_of(qkv, "qkv")
    if q_out is None or (is_output_qkv and (q_out_before_quant is None or k_out_before_quant is None
                                            or v_out_before_quant is None)):
        check_cache_widths(qkv, head_nums, qkv_size)
        T = qkv.shape[0]
    if q_out is None:
        q_out = _arrays.empty_like_kind(qkv, (T, nq * d), dt, "q_out")
    if is_output_qkv:
        if q_out_before_quant is None:
            q_out_before_quant = _arrays.empty_like_kind(qkv, (T, nq * d), _arrays.dtype_of(q_out, "q_out"),
                                                         "q_out_before_quant")
        if k_out_before_quant is None:
            k_out_before_quant = _arrays.empty_like_kind(qkv, (T, nk * d), dt, "k_out_before_quant")
        if v_out_before_quant is None:
            v_out_before_quant = _arrays.empty_like_kind(qkv, (T, nv * d), dt, "v_out_before_quant")
    qkv_rmsnorm_rope_cache_raw(qkv, q_gamma, k_gamma, cos, sin, index, q_out, k_cache, v_cache, k_scale, v_scale,
                               k_offset, v_offset, q_out_before_quant, k_out_before_quant, v_out_before_quant,
                               qkv_size, head_nums, epsilon, cache_mode, is_output_qkv, error_flags, rounding,
                               strict)
    if is_output_qkv:
        return q_out, q_out_before_quant, k_out_before_quant, v_out_before_quant
    return q_out


def qkv_rmsnorm_rope_cache_raw(qkv, q_gamma, k_gamma, cos, sin, index, q_out, k_cache, v_cache, k_scale, v_scale,
                               k_offset, v_offset, q_out_before_quant, k_out_before_quant, v_out_before_quant,
                               qkv_size, head_nums, epsilon, cache_mode, is_output_qkv, error_flags,
                               rounding="fused", strict=False):
    p, keep = _tensor_ptrs(
        dict(qkv=qkv, q_gamma=q_gamma, k_gamma=k_gamma, cos=cos, sin=sin, index=index, q_out=q_out,
             k_cache=k_cache, v_cache=v_cache, k_scale=k_scale, v_scale=v_scale, k_offset=k_offset,
             v_offset=v_offset, q_out_before_quant=q_out_before_quant, k_out_before_quant=k_out_before_quant,
             v_out_before_quant=v_out_before_quant),
        ("q_out", "k_cache", "v_cache", "q_out_before_quant", "k_out_before_quant", "v_out_before_quant"),
        error_flags)
    qs = (ctypes.c_int64 * 4)(*_check.integers(qkv_size, "qkv_size", 4))
    hn = (ctypes.c_int64 * 3)(*_check.integers(head_nums, "head_nums", 3))
    s = _capi.lib().qkvfuse_qkv_rmsnorm_rope_cache_ex(
        p["qkv"], p["q_gamma"], p["k_gamma"], p["cos"], p["sin"], p["index"], p["q_out"], p["k_cache"],
        p["v_cache"], p["k_scale"], p["v_scale"], p["k_offset"], p["v_offset"], p["q_out_before_quant"],
        p["k_out_before_quant"], p["v_out_before_quant"], qs, hn, _check.real(epsilon, "epsilon"),
        _check.c_string(cache_mode, "cache_mode"), int(_check.flag(is_output_qkv, "is_output_qkv")),
        _options_pointer(rounding, strict), _arrays.flags_pointer(error_flags), _stream_of(qkv))
    _capi.check(s, "qkv_rmsnorm_rope_cache")


# ---- dequant_rope_quant_kvcache (CANN DequantRopeQuantKvcache) ------------------------------

def dequant_sizes(x, k_cache, size_splits):
    """size_splits (Nq*D, Nkv*D, Nkv*D), inferred from k_cache [C1, C2, Nkv, D]
    and x's width when not given."""
    if size_splits is None:
        _cache_head_dim(k_cache)
        kv = k_cache.shape[2] * k_cache.shape[3]
        size_splits = (_check.last_dim(x, "x") - 2 * kv, kv, kv)
    return _check.integers(size_splits, "size_splits", 3)


def _cache_head_dim(k_cache):
    """D, read from k_cache [C1, C2, Nkv, D] (as the library reads it)."""
    if len(k_cache.shape) != 4 or k_cache.shape[3] < 1:
        raise errors.ShapeError(errors.QKVFUSE_ERROR_SHAPE, "k_cache: expected [C1, C2, Nkv, D] with D >= 1 (D is "
                                "read from it); got shape %s" % (tuple(k_cache.shape),))
    return k_cache.shape[3]


def dequant_out_shapes(x, k_cache, size_splits):
    """q's and k/v's shapes [.., N, D], once the sizes are known to fit x's
    width (see _check.output_sizes)."""
    d = _cache_head_dim(k_cache)
    _check.output_sizes((("size_splits[0]", size_splits[0]), ("size_splits[1]", size_splits[1]),
                         ("size_splits[2]", size_splits[2])), "size_splits[0] + size_splits[1] + size_splits[2]",
                        size_splits[0] + size_splits[1] + size_splits[2], x, "x")
    lead = tuple(x.shape[:-1])
    return lead + (size_splits[0] // d, d), lead + (size_splits[1] // d, d)


def dequant_rope_quant_kvcache(x, cos, sin, k_cache, v_cache, indices, scale_k, scale_v,
                               size_splits: Optional[Sequence[int]] = None, *, offset_k=None, offset_v=None,
                               weight_scale=None, activation_scale=None, bias=None, quant_mode: str = "static",
                               layout: str = "BSND", kv_output: bool = False, cache_mode: str = "contiguous",
                               q_out=None, k_out=None, v_out=None, out_dtype=None, error_flags=None,
                               rounding: str = "fused", strict: bool = False):
    """CANN ``DequantRopeQuantKvcache``: optional int32 dequant, RoPE from
    per-token cos/sin (neox, no norm), int8 quantization of k and v
    (asymmetric when offsets are given), write into the caches in place.

    - x [B, S, H] or [B, H]: float16/bfloat16/float32, or int32 with
      weight_scale [H] (activation_scale [B*S] and bias [H] optional)
    - cos, sin [B, S, 1, D] or [B, D] (R = D)
    - k_cache, v_cache [C1, C2, Nkv, D] int8: ``cache_mode`` ``"contiguous"``
      (default; [batch, max_seq, Nkv, D], ``indices`` [B] start positions) or
      ``"page"`` ([blocks, block_size, Nkv, D], ``indices`` [B*S] slots); -1 skips
    - scale_k, scale_v [Nkv, D] or [Nkv*D] float32; offset_k, offset_v alike
    - size_splits (Nq*D, Nkv*D, Nkv*D), default from k_cache and x's width
    - quant_mode "static", layout "BSND" (the seed's only values)
    - returns (q [B, S, Nq, D] (or [B, Nq, D]), k, v): k and v [.., Nkv, D]
      with ``kv_output``, else empty ([0, .., Nkv, D], as the seed's kOut and
      vOut). q's dtype: cos's for int32 x, else x's (``out_dtype`` float32
      also allowed)
    - with float x, weight_scale, activation_scale and bias are ignored
      (neither read nor checked: the seed says they have no effect); with
      ``kv_output`` False, so are k_out and v_out
    - ``rounding``: ``"fused"`` (default) or ``"cann"`` (bit-identical to the
      seed's kernel: dequantized x and RoPE rounded to the output dtype, the
      caches quantize the rounded k and v); ``strict=True`` also enforces the
      seed's constraints (H <= 4096 and a multiple of 64, int8 caches, int32
      indices >= 0 without repeats in page mode, ...; python/README.md,
      "strict")
    """
    if _float_input(x):
        weight_scale = activation_scale = bias = None
    if type(kv_output) in (bool, int) and not kv_output:  # a valid "no" (other values: the flag check below)
        k_out = v_out = None
    ops = _binding.OPS
    if (ops is not None and isinstance(x, _TorchTensor) and q_out is None and k_out is None and v_out is None
            and (size_splits is None or type(size_splits) in (tuple, list) and len(size_splits) == 3
                 and all(type(n) is int for n in size_splits))
            and (quant_mode is None or type(quant_mode) is str) and (layout is None or type(layout) is str)
            and type(kv_output) is bool and (cache_mode is None or type(cache_mode) is str)
            and (out_dtype is None or isinstance(out_dtype, _TorchDtype))
            and type(rounding) is str and type(strict) is bool):
        try:
            if size_splits is None:
                kv = k_cache.shape[2] * k_cache.shape[3]
                size_splits = [x.shape[-1] - 2 * kv, kv, kv]
            q, k, v = ops.dequant(x, cos, sin, k_cache, v_cache, indices, scale_k, scale_v, offset_k, offset_v,
                                  weight_scale, activation_scale, bias, size_splits,
                                  "static" if quant_mode is None else quant_mode, "BSND" if layout is None else layout,
                                  kv_output, "contiguous" if cache_mode is None else cache_mode, out_dtype,
                                  error_flags, rounding, strict)
            return q, k, v
        except Exception:  # noqa: BLE001 - reported by the checked path
            pass
    torch_path = _tensor_args("x", dict(x=x, cos=cos, sin=sin, k_cache=k_cache, v_cache=v_cache, indices=indices,
                                        scale_k=scale_k, scale_v=scale_v),
                              dict(offset_k=offset_k, offset_v=offset_v, weight_scale=weight_scale,
                                   activation_scale=activation_scale, bias=bias, q_out=q_out, k_out=k_out,
                                   v_out=v_out), error_flags)
    size_splits = dequant_sizes(x, k_cache, size_splits)
    quant_mode, layout = _mode(quant_mode, "quant_mode"), _mode(layout, "layout")
    cache_mode = _mode(cache_mode, "cache_mode")
    kv_output = _check.flag(kv_output, "kv_output")
    rounding, strict = _options(rounding, strict)
    if torch_path:
        from . import torch_ops
        return torch_ops.dequant_rope_quant_kvcache(x, cos, sin, k_cache, v_cache, indices, scale_k, scale_v,
                                                    offset_k, offset_v, weight_scale, activation_scale, bias,
                                                    size_splits, quant_mode, layout, kv_output, cache_mode,
                                                    q_out, k_out, v_out, out_dtype, error_flags, rounding, strict)
    if out_dtype is not None:
        dt = _arrays.dtype_name(out_dtype, "out_dtype")
    else:
        dt = _arrays.dtype_of(cos, "cos") if _arrays.dtype_of(x, "x") == "int32" else _arrays.dtype_of(x, "x")
    if not kv_output:
        k_out = v_out = None
    q_shape, kv_shape = dequant_out_shapes(x, k_cache, size_splits)
    if q_out is None:
        q_out = _arrays.empty_like_kind(x, q_shape, dt, "q_out")
    if kv_output:
        if k_out is None:
            k_out = _arrays.empty_like_kind(x, kv_shape, dt, "k_out")
        if v_out is None:
            v_out = _arrays.empty_like_kind(x, kv_shape, dt, "v_out")
    dequant_rope_quant_kvcache_raw(x, cos, sin, k_cache, v_cache, indices, scale_k, scale_v, offset_k, offset_v,
                                   weight_scale, activation_scale, bias, size_splits, quant_mode, layout, kv_output,
                                   cache_mode, q_out, k_out, v_out, error_flags, rounding, strict)
    if not kv_output:
        empty = (0,) + tuple(kv_shape[1:])
        k_out, v_out = (_arrays.empty_like_kind(x, empty, dt, n) for n in ("k_out", "v_out"))
    return q_out, k_out, v_out


def _float_input(x) -> bool:
    """Whether x is an array or tensor of a dtype other than int32 (the
    dequant operator's scales then have no effect)."""
    if isinstance(x, _TorchTensor):
        return x.dtype != _arrays._torch.int32
    dt = getattr(x, "dtype", None)
    return dt is not None and str(dt) != "int32"


def dequant_rope_quant_kvcache_raw(x, cos, sin, k_cache, v_cache, indices, scale_k, scale_v, offset_k, offset_v,
                                   weight_scale, activation_scale, bias, size_splits, quant_mode, layout, kv_output,
                                   cache_mode, q_out, k_out, v_out, error_flags, rounding="fused", strict=False):
    if _float_input(x):  # ignored, as the library does
        weight_scale = activation_scale = bias = None
    if not kv_output:
        k_out = v_out = None
    p, keep = _tensor_ptrs(
        dict(x=x, cos=cos, sin=sin, k_cache=k_cache, v_cache=v_cache, indices=indices, scale_k=scale_k,
             scale_v=scale_v, offset_k=offset_k, offset_v=offset_v, weight_scale=weight_scale,
             activation_scale=activation_scale, bias=bias, q_out=q_out, k_out=k_out, v_out=v_out),
        ("k_cache", "v_cache", "q_out", "k_out", "v_out"), error_flags)
    ss = (ctypes.c_int64 * 3)(*_check.integers(size_splits, "size_splits", 3))
    s = _capi.lib().qkvfuse_dequant_rope_quant_kvcache_ex(
        p["x"], p["cos"], p["sin"], p["k_cache"], p["v_cache"], p["indices"], p["scale_k"], p["scale_v"],
        p["offset_k"], p["offset_v"], p["weight_scale"], p["activation_scale"], p["bias"], ss,
        _check.c_string(quant_mode, "quant_mode"), _check.c_string(layout, "layout"),
        int(_check.flag(kv_output, "kv_output")), _check.c_string(cache_mode, "cache_mode"), p["q_out"], p["k_out"],
        p["v_out"], _options_pointer(rounding, strict), _arrays.flags_pointer(error_flags), _stream_of(x))
    _capi.check(s, "dequant_rope_quant_kvcache")
