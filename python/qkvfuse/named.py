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

from . import _arrays, _capi, errors


def _bad(msg):
    return errors.InvalidValueError(errors.QKVFUSE_ERROR_INVALID_VALUE, msg)


def _tensor_ptrs(named, outputs=()):
    """{name: tensor or None} -> ({name: POINTER(Tensor) or None}, keepalive)."""
    keep, ptrs = [], {}
    for name, x in named.items():
        if x is None:
            ptrs[name] = None
        else:
            d = _arrays.describe(x, name, writable=name in outputs, keep=keep)
            keep.append(d)
            ptrs[name] = ctypes.pointer(d)
    return ptrs, keep


def _stream_of(x):
    if _arrays.is_torch(x) and x.is_cuda:
        import torch
        return torch.cuda.current_stream(x.device).cuda_stream or None
    return None


def _cstr(s):
    return None if s is None else s.encode()


# ---- split_qkv_rmsnorm_rope (vllm-ascend) ----------------------------------------------

def split_sizes(input, q_weight, q_hidden_size, kv_hidden_size, head_dim):
    """(q_hidden_size, kv_hidden_size, head_dim) with the missing ones inferred
    from input [T, q_hidden + 2*kv_hidden] and q_weight [head_dim]."""
    if head_dim is None:
        head_dim = int(q_weight.shape[-1])
    width = int(input.shape[-1])
    if q_hidden_size is None and kv_hidden_size is None:
        raise _bad("split_qkv_rmsnorm_rope: give q_hidden_size or kv_hidden_size (Nq*D, Nkv*D)")
    if q_hidden_size is None:
        q_hidden_size = width - 2 * int(kv_hidden_size)
    if kv_hidden_size is None:
        kv_hidden_size = (width - int(q_hidden_size)) // 2
    return int(q_hidden_size), int(kv_hidden_size), int(head_dim)


def split_qkv_rmsnorm_rope(input, q_weight, k_weight, cos_sin_cache, positions, *,
                           q_hidden_size: Optional[int] = None, kv_hidden_size: Optional[int] = None,
                           head_dim: Optional[int] = None, eps: float = 1e-6, rope_dim: Optional[int] = None,
                           q_bias=None, k_bias=None, is_neox: bool = True, q_out=None, k_out=None, v_out=None,
                           out_dtype=None, error_flags=None):
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
    """
    qh, kvh, hd = split_sizes(input, q_weight, q_hidden_size, kv_hidden_size, head_dim)
    rd = 0 if rope_dim is None else int(rope_dim)
    if _arrays.is_torch(input):
        from . import torch_ops
        return torch_ops.split_qkv_rmsnorm_rope(input, q_weight, k_weight, cos_sin_cache, positions, qh, kvh, hd,
                                                float(eps), rd, q_bias, k_bias, bool(is_neox), q_out, k_out, v_out,
                                                out_dtype, error_flags)
    dt = _arrays.dtype_name(out_dtype) if out_dtype is not None else _arrays.dtype_of(input)
    lead = _arrays.shape_of(input)[:-1]
    if q_out is None:
        q_out = _arrays.empty_like_kind(input, lead + (qh,), dt)
    if k_out is None:
        k_out = _arrays.empty_like_kind(input, lead + (kvh,), dt)
    if v_out is None:
        v_out = _arrays.empty_like_kind(input, lead + (kvh,), dt)
    split_qkv_rmsnorm_rope_raw(input, q_weight, k_weight, cos_sin_cache, positions, qh, kvh, hd, eps, rd, q_bias,
                               k_bias, is_neox, q_out, k_out, v_out, error_flags)
    return q_out, k_out, v_out


def split_qkv_rmsnorm_rope_raw(input, q_weight, k_weight, cos_sin_cache, positions, q_hidden_size, kv_hidden_size,
                               head_dim, eps, rope_dim, q_bias, k_bias, is_neox, q_out, k_out, v_out, error_flags):
    p, keep = _tensor_ptrs(dict(input=input, q_weight=q_weight, k_weight=k_weight, cos_sin_cache=cos_sin_cache,
                                positions=positions, q_bias=q_bias, k_bias=k_bias, q_out=q_out, k_out=k_out,
                                v_out=v_out), outputs=("q_out", "k_out", "v_out"))
    s = _capi.lib().qkvfuse_split_qkv_rmsnorm_rope(
        p["input"], p["q_weight"], p["k_weight"], q_hidden_size, kv_hidden_size, head_dim, float(eps),
        p["cos_sin_cache"], p["positions"], rope_dim, p["q_bias"], p["k_bias"], int(bool(is_neox)), p["q_out"],
        p["k_out"], p["v_out"], _arrays.flags_pointer(error_flags), _stream_of(input))
    _capi.check(s, "split_qkv_rmsnorm_rope")


# ---- qkv_rmsnorm_rope_cache (CANN QkvRmsNormRopeCache) --------------------------------------

def cache_sizes(qkv, q_gamma, head_nums, qkv_size):
    if head_nums is None or len(head_nums) != 3:
        raise _bad("qkv_rmsnorm_rope_cache: head_nums must be (Nq, Nk, Nv); got %r" % (head_nums,))
    head_nums = tuple(int(n) for n in head_nums)
    if qkv_size is None:
        d = int(q_gamma.shape[-1])
        qkv_size = (int(qkv.shape[0]), 1, sum(head_nums), d)
    if len(qkv_size) != 4:
        raise _bad("qkv_rmsnorm_rope_cache: qkv_size must be (B, S, N, D); got %r" % (qkv_size,))
    return head_nums, tuple(int(n) for n in qkv_size)


def qkv_rmsnorm_rope_cache(qkv, q_gamma, k_gamma, cos, sin, index, k_cache, v_cache, *,
                           head_nums: Sequence[int], qkv_size: Optional[Sequence[int]] = None,
                           k_scale=None, v_scale=None, k_offset=None, v_offset=None, epsilon: float = 1e-6,
                           cache_mode: str = "PA_NZ", is_output_qkv: bool = False, q_out=None,
                           q_out_before_quant=None, k_out_before_quant=None, v_out_before_quant=None,
                           error_flags=None):
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
    """
    head_nums, qkv_size = cache_sizes(qkv, q_gamma, head_nums, qkv_size)
    if _arrays.is_torch(qkv):
        from . import torch_ops
        return torch_ops.qkv_rmsnorm_rope_cache(qkv, q_gamma, k_gamma, cos, sin, index, k_cache, v_cache, k_scale,
                                                v_scale, k_offset, v_offset, head_nums, qkv_size, float(epsilon),
                                                cache_mode, bool(is_output_qkv), q_out, q_out_before_quant,
                                                k_out_before_quant, v_out_before_quant, error_flags)
    T = int(qkv.shape[0])
    nq, nk, _ = head_nums
    d = qkv_size[3]
    dt = _arrays.dtype_of(qkv)
    if q_out is None:
        q_out = _arrays.empty_like_kind(qkv, (T, nq * d), dt)
    if is_output_qkv:
        if q_out_before_quant is None:
            q_out_before_quant = _arrays.empty_like_kind(qkv, (T, nq * d), _arrays.dtype_of(q_out))
        if k_out_before_quant is None:
            k_out_before_quant = _arrays.empty_like_kind(qkv, (T, nk * d), dt)
        if v_out_before_quant is None:
            v_out_before_quant = _arrays.empty_like_kind(qkv, (T, nk * d), dt)
    qkv_rmsnorm_rope_cache_raw(qkv, q_gamma, k_gamma, cos, sin, index, q_out, k_cache, v_cache, k_scale, v_scale,
                               k_offset, v_offset, q_out_before_quant, k_out_before_quant, v_out_before_quant,
                               qkv_size, head_nums, epsilon, cache_mode, is_output_qkv, error_flags)
    if is_output_qkv:
        return q_out, q_out_before_quant, k_out_before_quant, v_out_before_quant
    return q_out


def qkv_rmsnorm_rope_cache_raw(qkv, q_gamma, k_gamma, cos, sin, index, q_out, k_cache, v_cache, k_scale, v_scale,
                               k_offset, v_offset, q_out_before_quant, k_out_before_quant, v_out_before_quant,
                               qkv_size, head_nums, epsilon, cache_mode, is_output_qkv, error_flags):
    p, keep = _tensor_ptrs(
        dict(qkv=qkv, q_gamma=q_gamma, k_gamma=k_gamma, cos=cos, sin=sin, index=index, q_out=q_out,
             k_cache=k_cache, v_cache=v_cache, k_scale=k_scale, v_scale=v_scale, k_offset=k_offset,
             v_offset=v_offset, q_out_before_quant=q_out_before_quant, k_out_before_quant=k_out_before_quant,
             v_out_before_quant=v_out_before_quant),
        outputs=("q_out", "k_cache", "v_cache", "q_out_before_quant", "k_out_before_quant", "v_out_before_quant"))
    qs = (ctypes.c_int64 * 4)(*qkv_size)
    hn = (ctypes.c_int64 * 3)(*head_nums)
    s = _capi.lib().qkvfuse_qkv_rmsnorm_rope_cache(
        p["qkv"], p["q_gamma"], p["k_gamma"], p["cos"], p["sin"], p["index"], p["q_out"], p["k_cache"],
        p["v_cache"], p["k_scale"], p["v_scale"], p["k_offset"], p["v_offset"], p["q_out_before_quant"],
        p["k_out_before_quant"], p["v_out_before_quant"], qs, hn, float(epsilon), _cstr(cache_mode),
        int(bool(is_output_qkv)), _arrays.flags_pointer(error_flags), _stream_of(qkv))
    _capi.check(s, "qkv_rmsnorm_rope_cache")


# ---- dequant_rope_quant_kvcache (CANN DequantRopeQuantKvcache) ------------------------------

def dequant_sizes(x, k_cache, size_splits):
    """size_splits (Nq*D, Nkv*D, Nkv*D), inferred from k_cache [C1, C2, Nkv, D]
    and x's width when not given."""
    if size_splits is None:
        kv = int(k_cache.shape[2]) * int(k_cache.shape[3])
        size_splits = (int(x.shape[-1]) - 2 * kv, kv, kv)
    if len(size_splits) != 3:
        raise _bad("dequant_rope_quant_kvcache: size_splits must be (Nq*D, Nkv*D, Nkv*D); got %r" % (size_splits,))
    return tuple(int(n) for n in size_splits)


def dequant_out_shapes(x, k_cache, size_splits):
    d = int(k_cache.shape[3])
    lead = _arrays.shape_of(x)[:-1]
    return lead + (size_splits[0] // d, d), lead + (size_splits[1] // d, d)


def dequant_rope_quant_kvcache(x, cos, sin, k_cache, v_cache, indices, scale_k, scale_v,
                               size_splits: Optional[Sequence[int]] = None, *, offset_k=None, offset_v=None,
                               weight_scale=None, activation_scale=None, bias=None, quant_mode: str = "static",
                               layout: str = "BSND", kv_output: bool = False, cache_mode: str = "contiguous",
                               q_out=None, k_out=None, v_out=None, out_dtype=None, error_flags=None):
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
      with ``kv_output``, else None. q's dtype: cos's for int32 x, else x's
      (``out_dtype`` float32 also allowed)
    """
    size_splits = dequant_sizes(x, k_cache, size_splits)
    if _arrays.is_torch(x):
        from . import torch_ops
        return torch_ops.dequant_rope_quant_kvcache(x, cos, sin, k_cache, v_cache, indices, scale_k, scale_v,
                                                    offset_k, offset_v, weight_scale, activation_scale, bias,
                                                    size_splits, quant_mode, layout, bool(kv_output), cache_mode,
                                                    q_out, k_out, v_out, out_dtype, error_flags)
    if out_dtype is not None:
        dt = _arrays.dtype_name(out_dtype)
    else:
        dt = _arrays.dtype_of(cos) if _arrays.dtype_of(x) == "int32" else _arrays.dtype_of(x)
    q_shape, kv_shape = dequant_out_shapes(x, k_cache, size_splits)
    if q_out is None:
        q_out = _arrays.empty_like_kind(x, q_shape, dt)
    if kv_output:
        if k_out is None:
            k_out = _arrays.empty_like_kind(x, kv_shape, dt)
        if v_out is None:
            v_out = _arrays.empty_like_kind(x, kv_shape, dt)
    else:
        k_out = v_out = None
    dequant_rope_quant_kvcache_raw(x, cos, sin, k_cache, v_cache, indices, scale_k, scale_v, offset_k, offset_v,
                                   weight_scale, activation_scale, bias, size_splits, quant_mode, layout, kv_output,
                                   cache_mode, q_out, k_out, v_out, error_flags)
    return q_out, k_out, v_out


def dequant_rope_quant_kvcache_raw(x, cos, sin, k_cache, v_cache, indices, scale_k, scale_v, offset_k, offset_v,
                                   weight_scale, activation_scale, bias, size_splits, quant_mode, layout, kv_output,
                                   cache_mode, q_out, k_out, v_out, error_flags):
    p, keep = _tensor_ptrs(
        dict(x=x, cos=cos, sin=sin, k_cache=k_cache, v_cache=v_cache, indices=indices, scale_k=scale_k,
             scale_v=scale_v, offset_k=offset_k, offset_v=offset_v, weight_scale=weight_scale,
             activation_scale=activation_scale, bias=bias, q_out=q_out, k_out=k_out, v_out=v_out),
        outputs=("k_cache", "v_cache", "q_out", "k_out", "v_out"))
    ss = (ctypes.c_int64 * 3)(*size_splits)
    s = _capi.lib().qkvfuse_dequant_rope_quant_kvcache(
        p["x"], p["cos"], p["sin"], p["k_cache"], p["v_cache"], p["indices"], p["scale_k"], p["scale_v"],
        p["offset_k"], p["offset_v"], p["weight_scale"], p["activation_scale"], p["bias"], ss, _cstr(quant_mode),
        _cstr(layout), int(bool(kv_output)), _cstr(cache_mode), p["q_out"], p["k_out"], p["v_out"],
        _arrays.flags_pointer(error_flags), _stream_of(x))
    _capi.check(s, "dequant_rope_quant_kvcache")
