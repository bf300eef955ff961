# SPDX-License-Identifier: Apache-2.0
"""Drop-in forms of the calls engines make today, computed by qkvfuse.

Each function takes the peer's arguments in the peer's order, with the
peer's defaults, mutates the tensors the peer mutates and returns what the
peer returns; one ``torch.ops.qkvfuse.run_out`` call does the work. The
values are qkvfuse's fused chain (float32 inside, each output rounded once),
which is the peer kernel's own rounding order, so results differ from the
peer's only in float32-level details (the order of the sum of squares,
rsqrtf, FMA contraction): at most one step of the output dtype, in a small
fraction of elements. Where a function differs otherwise (a rounding the
peer chain adds, a scale the peer multiplies by, rows the peer leaves
alone), its docstring says so; python/README.md lists them all.

- vLLM: :func:`fused_qk_norm_rope` (``torch.ops._C.fused_qk_norm_rope``) and
  :func:`fused_qk_norm_rope_and_cache` (that call followed by
  ``reshape_and_cache_flash``, as one call);
- FlashInfer: :func:`flashinfer_apply_rope_with_cos_sin_cache`,
  :func:`flashinfer_apply_rope_with_cos_sin_cache_inplace`,
  :func:`flashinfer_rope_quantize_fp8_append_paged_kv_cache`;
- SGLang (sgl-kernel): :func:`sglang_apply_rope_with_cos_sin_cache_inplace`
  with :class:`FusedSetKVBufferArg`.

The namespaces :data:`vllm`, :data:`flashinfer` and :data:`sglang` hold the
same functions under the peers' own names
(``from qkvfuse.compat import flashinfer; flashinfer.apply_rope_with_cos_sin_cache(...)``).

Errors raise qkvfuse's exceptions (ValueError/TypeError/IndexError/
NotImplementedError subclasses, see qkvfuse.errors) whose message starts with
the caller's argument name, and nothing is written. Scale tensors made from
Python floats are cached per (value, device): call once before capturing a
CUDA graph, as for plans.
"""
from __future__ import annotations

import dataclasses
import importlib.util
import re
import types
from typing import Optional

import torch

from . import _binding, _check, errors

__all__ = ["fused_qk_norm_rope", "fused_qk_norm_rope_and_cache", "flashinfer_apply_rope_with_cos_sin_cache",
           "flashinfer_apply_rope_with_cos_sin_cache_inplace", "flashinfer_rope_quantize_fp8_append_paged_kv_cache",
           "sglang_apply_rope_with_cos_sin_cache_inplace", "FusedSetKVBufferArg", "vllm", "flashinfer", "sglang"]

_NO_SCALING = [1.0, 0.0, 1.0, 4.0, 32.0, 1.0, 1.0, 1.0]  # rope_scaling "none" as the operator's float[]
_STYLE = {True: "neox", False: "interleaved"}
_FP8 = {torch.float8_e4m3fn: "fp8_e4m3", torch.float8_e5m2: "fp8_e5m2"}


def _ops():
    ops = _binding.OPS
    if ops is None:
        raise errors.UnsupportedError(errors.QKVFUSE_ERROR_UNSUPPORTED,
                                      "qkvfuse.compat: the torch.ops.qkvfuse operators are not registered "
                                      "(see the warning qkvfuse gave at import)")
    return ops


# ---- errors ---------------------------------------------------------------------------------

class _Named:
    """Marks an exception this module raised itself: its message already
    names the caller's argument (no renaming)."""


def _own(exc):
    exc._qkvfuse_compat = _Named
    return exc


def _value(name, message):
    return _own(errors.InvalidValueError(errors.QKVFUSE_ERROR_INVALID_VALUE, "%s: %s" % (name, message)))


def _shape(name, message):
    return _own(errors.ShapeError(errors.QKVFUSE_ERROR_SHAPE, "%s: %s" % (name, message)))


def _dtype(name, message):
    return _own(errors.DtypeError(errors.QKVFUSE_ERROR_DTYPE, "%s: %s" % (name, message)))


def _unsupported(name, message):
    return _own(errors.UnsupportedError(errors.QKVFUSE_ERROR_UNSUPPORTED, "%s: %s" % (name, message)))


class _Recheck(Exception):
    """Raised on the fast path when an argument needs the checked path's message."""


_LEAD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_WORD = re.compile(r"\b[A-Za-z_][A-Za-z0-9_]*\b")


def _failure(e, names, checks):
    """The exception to raise for a failed call: first the caller's
    arguments checked against their Python types (``checks()`` raises,
    naming them), then the error itself as the package's exception, its
    leading qkvfuse argument name replaced by the caller's (``names``)."""
    if getattr(e, "_qkvfuse_compat", None) is _Named:
        return e
    try:
        checks()
    except errors.QkvfuseError as bad:
        return bad
    if isinstance(e, _Recheck):  # every check passed after all: a bug here, not the caller's
        raise AssertionError("qkvfuse.compat: an argument was refused without a message") from None
    e = errors.translate(e)
    if not isinstance(e, errors.QkvfuseError):
        return e
    lead = _LEAD.match(e.message)

    def caller(m):  # the leading name, and any other argument name with an underscore (no prose word has one)
        w = m.group(0)
        return names[w] if w in names and (m.start() == 0 or "_" in w) else w
    message = _WORD.sub(caller, e.message) if lead is not None else e.message
    if message != e.message:
        e = type(e)(e.status, message, e.status_name, e.where)
    return e


def _tensor(x, name, required=True):
    if x is None:
        if required:
            raise _own(errors.NullPointerError(errors.QKVFUSE_ERROR_NULL_POINTER, "%s: required, got None" % name))
        return
    if not isinstance(x, torch.Tensor):
        raise _dtype(name, "expected a torch.Tensor; got %s" % type(x).__name__)


def _int(v, name):
    _check.integer(v, name)


def _flag(v, name):
    _check.flag(v, name)


def _eps(v, name):
    _check.real(v, name, "float")


# ---- shared pieces --------------------------------------------------------------------------

_scales: dict = {}


def _reciprocal(value, device, name):
    """A cached float32 [1] tensor on ``device`` holding 1 / float32(value):
    the divisor qkvfuse takes for a peer's multiplier."""
    key = (value, device)
    t = _scales.get(key)
    if t is not None:
        return t
    f = _check.real(value, name, "float")
    if not (f == f and f not in (0.0, float("inf"), float("-inf"))):
        raise _own(errors.BadScaleError(errors.QKVFUSE_ERROR_BAD_SCALE,
                                        "%s: must be finite and nonzero (qkvfuse divides by its reciprocal); got %r"
                                        % (name, value)))
    one = torch.ones(1, dtype=torch.float32)
    t = (one / torch.tensor([f], dtype=torch.float32)).to(device)
    if len(_scales) >= 64:
        _scales.clear()
    _scales[key] = t
    return t


def _heads(x, head_size, name):
    """The head count of x [n, H * head_size] or [n, H, head_size]."""
    if x.dim() == 2:
        width = x.shape[1]
        if head_size <= 0 or width % head_size:
            raise _shape(name, "width %d is not a multiple of head_size = %d" % (width, head_size))
        return width // head_size
    if x.dim() == 3 and x.shape[2] == head_size:
        return x.shape[1]
    raise _shape(name, "expected [num_tokens, num_heads * head_size] or [num_tokens, num_heads, head_size] with "
                 "head_size = %d; got shape %s" % (head_size, tuple(x.shape)))


def _same_strides(a, b):
    """Equal strides wherever the size is above 1 (size-1 dims carry any stride)."""
    return all(n <= 1 or sa == sb for n, sa, sb in zip(a.shape, a.stride(), b.stride()))


def _joined(rope, nope, rope_name, nope_name):
    """One [.., H, R + Dn] view of the tensor whose [..., :R] is ``rope`` and
    whose [..., R:] is ``nope`` (None or zero-width: ``rope`` itself): the
    head layout [rope | nope] qkvfuse reads and writes."""
    if nope is None or nope.shape[-1] == 0:
        return rope
    R = rope.shape[-1]
    adjacent = (nope.dtype == rope.dtype and nope.device == rope.device and nope.dim() == rope.dim()
                and nope.shape[:-1] == rope.shape[:-1] and _same_strides(nope, rope)
                and (rope.stride(-1) == 1 or R <= 1) and (nope.stride(-1) == 1 or nope.shape[-1] <= 1)
                and (rope.numel() == 0 or nope.data_ptr() == rope.data_ptr() + R * rope.element_size()))
    if adjacent:
        try:
            return rope.as_strided(tuple(rope.shape[:-1]) + (R + nope.shape[-1],), rope.stride())
        except RuntimeError:  # outside rope's storage: not one tensor
            pass
    raise _unsupported(nope_name, "qkvfuse reads and writes each head as one row [rope | nope]: %s must be the view "
                       "[..., %d:] of the tensor whose view [..., :%d] is %s (e.g. x[..., :%d] and x[..., %d:]), or "
                       "None / zero-width; got shape %s, strides %s" % (nope_name, R, R, rope_name, R, R,
                                                                       tuple(nope.shape), nope.stride()))


# ---- vLLM -----------------------------------------------------------------------------------

_HPW = (-1, 1, 2, 4, 8)  # forced_token_heads_per_warp: -1 (auto) or the kernel's choices
_VLLM_NAMES = {"qkv": "qkv", "q_out": "qkv", "k_out": "qkv", "q_gamma": "q_weight", "k_gamma": "k_weight",
               "positions": "position_ids", "cos_sin_cache": "cos_sin_cache",
               "rotary_dim": "cos_sin_cache (its width, the rotary dim)", "num_q_heads": "num_heads_q",
               "num_kv_heads": "num_heads_k", "head_dim": "head_dim", "eps": "eps", "k_cache": "key_cache",
               "v_cache": "value_cache", "slot_mapping": "slot_mapping", "k_scale": "k_scale", "v_scale": "v_scale",
               "k_quant": "kv_cache_dtype", "v_quant": "kv_cache_dtype"}


def _vllm_checks(qkv, num_heads_q, num_heads_k, num_heads_v, head_dim, eps, q_weight, k_weight, cos_sin_cache,
                 is_neox, position_ids, forced_token_heads_per_warp):
    _tensor(qkv, "qkv")
    _int(num_heads_q, "num_heads_q")
    _int(num_heads_k, "num_heads_k")
    _int(num_heads_v, "num_heads_v")
    _int(head_dim, "head_dim")
    _eps(eps, "eps")
    _tensor(q_weight, "q_weight")
    _tensor(k_weight, "k_weight")
    _tensor(cos_sin_cache, "cos_sin_cache")
    _flag(is_neox, "is_neox")
    _tensor(position_ids, "position_ids")
    hpw = _check.integer(forced_token_heads_per_warp, "forced_token_heads_per_warp", "int32_t")
    if hpw not in _HPW:
        raise _value("forced_token_heads_per_warp", "must be -1 (auto) or 1, 2, 4, 8; got %d" % hpw)
    if num_heads_v != num_heads_k:
        raise _value("num_heads_v", "must equal num_heads_k = %d (one KV head count); got %d"
                     % (num_heads_k, num_heads_v))
    if qkv.dim() != 2:
        raise _shape("qkv", "must be 2-D [num_tokens, (num_heads_q+num_heads_k+num_heads_v)*head_dim]; got shape %s"
                     % (tuple(qkv.shape),))


def fused_qk_norm_rope(qkv, num_heads_q: int, num_heads_k: int, num_heads_v: int, head_dim: int, eps: float,
                       q_weight, k_weight, cos_sin_cache, is_neox: bool, position_ids,
                       forced_token_heads_per_warp: int = -1) -> None:
    """vLLM's ``fused_qk_norm_rope``, in place on ``qkv``.

    ``qkv`` [T, (Nq+Nk+Nv)*D]: per-head RMSNorm of its q and k heads with
    ``q_weight`` / ``k_weight`` [D] and ``eps``, then RoPE on the first
    R = ``cos_sin_cache.shape[1]`` dims of each head from ``cos_sin_cache``
    [max_pos, R] at ``position_ids`` [T] (neox pairs when ``is_neox``, else
    interleaved). The q and k columns are overwritten; the v columns are not
    touched. Returns None.

    Accepts what the vLLM op accepts (float16/bfloat16 qkv and weights, an
    int64 position tensor, D in {64, 128, 256}) and more (float32, int32
    positions, any even D from 16 to 1024); ``num_heads_v`` must equal
    ``num_heads_k``. ``forced_token_heads_per_warp`` picks the vLLM kernel's
    launch shape and changes no result: it is checked and ignored. Errors
    raise qkvfuse's exceptions (ValueError/TypeError subclasses) naming the
    argument, and leave qkv unchanged.
    """
    try:
        if num_heads_v != num_heads_k or forced_token_heads_per_warp not in _HPW or qkv.dim() != 2:
            raise _Recheck
        qc = num_heads_q * head_dim
        _ops().run_out(qkv, None, None, None, q_weight, k_weight, None, None, position_ids, cos_sin_cache, None, None,
                       None, None, None, None, None, qkv[:, :qc], qkv[:, qc:qc + num_heads_k * head_dim], None, None,
                       None, None, num_heads_q, num_heads_k, head_dim, -1, "cos_sin_cache", _STYLE[is_neox], 10000.0,
                       "none", _NO_SCALING, eps, False, "none", "none", "none", "fused", "auto", 0)
    except Exception as e:  # noqa: BLE001 - re-raised as the package's error naming the caller's argument
        raise _failure(e, _VLLM_NAMES, lambda: _vllm_checks(
            qkv, num_heads_q, num_heads_k, num_heads_v, head_dim, eps, q_weight, k_weight, cos_sin_cache, is_neox,
            position_ids, forced_token_heads_per_warp)) from None


# kv_cache_dtype: (k/v quant mode, the fp8 dtype of the cache or None: the cache has qkv's dtype)
_VLLM_KV = {"auto": ("none", None), "bfloat16": ("none", None), "float16": ("none", None),
            "fp8": ("fp8_e4m3", torch.float8_e4m3fn), "fp8_e4m3": ("fp8_e4m3", torch.float8_e4m3fn),
            "fp8_e5m2": ("fp8_e5m2", torch.float8_e5m2)}


def _vllm_cache(cache, fp8, qkv, name, kv_cache_dtype):
    """The cache as the library takes it: an fp8 cache stored as uint8 viewed
    as its fp8 dtype; an unquantized one must have qkv's dtype (vLLM copies
    the bits)."""
    if fp8 is None:
        if cache.dtype != qkv.dtype:
            raise _dtype(name, "kv_cache_dtype %r stores qkv's dtype %s; got a %s cache"
                         % (kv_cache_dtype, qkv.dtype, cache.dtype))
        return cache
    if cache.dtype == fp8:
        return cache
    if cache.dtype == torch.uint8:
        return cache.view(fp8)
    raise _dtype(name, "kv_cache_dtype %r needs a %s (or uint8) cache; got %s" % (kv_cache_dtype, fp8, cache.dtype))


def fused_qk_norm_rope_and_cache(qkv, num_heads_q: int, num_heads_k: int, num_heads_v: int, head_dim: int,
                                 eps: float, q_weight, k_weight, cos_sin_cache, is_neox: bool, position_ids,
                                 key_cache, value_cache, slot_mapping, kv_cache_dtype: str, k_scale, v_scale,
                                 forced_token_heads_per_warp: int = -1) -> None:
    """vLLM's ``fused_qk_norm_rope`` followed by ``reshape_and_cache_flash``
    of the rotated k and of v, in one call.

    The arguments are ``fused_qk_norm_rope``'s, then
    ``reshape_and_cache_flash``'s own cache arguments (its ``key`` and
    ``value`` are the k and v columns of ``qkv``), then the optional
    ``forced_token_heads_per_warp``. The chain this replaces::

        fused_qk_norm_rope(qkv, num_heads_q, num_heads_k, num_heads_v, head_dim, eps, q_weight, k_weight,
                           cos_sin_cache, is_neox, position_ids)
        q, k, v = qkv.split([num_heads_q * head_dim, num_heads_k * head_dim, num_heads_v * head_dim], dim=-1)
        reshape_and_cache_flash(k.view(-1, num_heads_k, head_dim), v.view(-1, num_heads_v, head_dim),
                                key_cache, value_cache, slot_mapping, kv_cache_dtype, k_scale, v_scale)

    - ``qkv`` [T, (Nq+Nk+Nv)*D]: q and k columns overwritten as by
      :func:`fused_qk_norm_rope` (every one of the T tokens); v columns
      untouched.
    - ``key_cache``, ``value_cache``: [num_blocks, block_size, Nk, D] (NHD),
      or an HND cache [num_blocks, Nk, block_size, D] passed as its
      ``permute(0, 2, 1, 3)`` view, as vLLM passes it (the strides decide).
      Token t < len(slot_mapping) with slot s = ``slot_mapping[t]`` >= 0
      goes to block s // block_size, row s % block_size; s = -1 skips the
      token. ``slot_mapping`` may be shorter than T (vLLM's CUDA-graph
      padding: the tokens past it are normalized and rotated but not
      cached; qkvfuse gets the slots padded with -1, one small torch op,
      only then).
    - ``kv_cache_dtype``: ``"auto"``, ``"bfloat16"``, ``"float16"`` (the
      cache has qkv's dtype and receives the k stored in qkv and the v
      bits: bit-identical to the chain), ``"fp8"``/``"fp8_e4m3"`` or
      ``"fp8_e5m2"`` (cache float8 of that kind, or uint8 holding its
      bytes): fp8(x / scale), round to nearest even, saturating, with
      ``k_scale`` / ``v_scale`` float32 [1] or one per kv head [Nk]
      (ignored for the unquantized caches, as vLLM does).

    fp8 caches are within one fp8 step of the chain's bytes, not identical:
    the chain quantizes the k it stored in qkv (rounded to qkv's dtype once
    more: fp8(float(bf16(k)) / scale)); qkvfuse quantizes the float32 k,
    rounding once (fp8(k / scale)). Where the bf16 rounding moves a value
    onto an fp8 rounding midpoint the two differ by one step (in the tests
    1.6 % of the k bytes for bfloat16 / e4m3, 0.8 % bfloat16 / e5m2, 0.2 %
    float16 / e4m3, 0.1 % float16 / e5m2; none for float32 qkv);
    SPEC.md's precision contract (one rounding of the exact value) allows
    exactly that. v and every unquantized cache are bit-identical. NaN
    inputs keep their sign in fp8 (vLLM writes 0x7F).

    Errors raise qkvfuse's exceptions naming the argument; nothing is
    written (qkv and the caches keep every byte).
    """
    try:
        quant, fp8 = _VLLM_KV[kv_cache_dtype]
        if num_heads_v != num_heads_k or forced_token_heads_per_warp not in _HPW or qkv.dim() != 2:
            raise _Recheck
        kc = _vllm_cache(key_cache, fp8, qkv, "key_cache", kv_cache_dtype)
        vc = _vllm_cache(value_cache, fp8, qkv, "value_cache", kv_cache_dtype)
        T, n = qkv.shape[0], slot_mapping.shape[0]
        if n != T:
            if n > T or slot_mapping.dim() != 1:
                raise _shape("slot_mapping", "expected [n] with n <= num_tokens = %d; got shape %s"
                             % (T, tuple(slot_mapping.shape)))
            slot_mapping = torch.nn.functional.pad(slot_mapping, (0, T - n), value=-1)
        if fp8 is None:
            k_scale = v_scale = None
        qc = num_heads_q * head_dim
        _ops().run_out(qkv, None, None, None, q_weight, k_weight, None, None, position_ids, cos_sin_cache, None, None,
                       slot_mapping, k_scale, v_scale, None, None, qkv[:, :qc],
                       qkv[:, qc:qc + num_heads_k * head_dim], None, kc, vc, None, num_heads_q, num_heads_k,
                       head_dim, -1, "cos_sin_cache", _STYLE[is_neox], 10000.0, "none", _NO_SCALING, eps, False,
                       "paged", quant, quant, "fused", "auto", 0)
    except Exception as e:  # noqa: BLE001 - re-raised as the package's error naming the caller's argument
        def checks():
            _vllm_checks(qkv, num_heads_q, num_heads_k, num_heads_v, head_dim, eps, q_weight, k_weight,
                         cos_sin_cache, is_neox, position_ids, forced_token_heads_per_warp)
            _tensor(key_cache, "key_cache")
            _tensor(value_cache, "value_cache")
            _tensor(slot_mapping, "slot_mapping")
            if slot_mapping.dim() != 1:
                raise _shape("slot_mapping", "expected [n] with n <= num_tokens; got shape %s"
                             % (tuple(slot_mapping.shape),))
            _check.string(kv_cache_dtype, "kv_cache_dtype", tuple(_VLLM_KV))
            quant_given = _VLLM_KV[kv_cache_dtype][1] is not None
            _tensor(k_scale, "k_scale", quant_given)
            _tensor(v_scale, "v_scale", quant_given)
        raise _failure(e, _VLLM_NAMES, checks) from None


# ---- FlashInfer -----------------------------------------------------------------------------

_FI_NAMES = {"q": "query", "k": "key", "q_out": "query", "k_out": "key", "positions": "positions",
             "cos_sin_cache": "cos_sin_cache", "rotary_dim": "cos_sin_cache (its width, the rotary dim)",
             "num_q_heads": "query", "num_kv_heads": "key", "head_dim": "head_size"}
_FI_OUT_NAMES = dict(_FI_NAMES, q_out="query_out", k_out="key_out")


def _fi_checks(positions, query, key, head_size, cos_sin_cache, is_neox):
    _tensor(positions, "positions")
    _tensor(query, "query")
    _tensor(key, "key")
    _int(head_size, "head_size")
    _tensor(cos_sin_cache, "cos_sin_cache")
    _flag(is_neox, "is_neox")
    _heads(query, head_size, "query")
    _heads(key, head_size, "key")


def _rope(positions, query, key, head_size, cos_sin_cache, is_neox, query_out, key_out):
    """RoPE of query and key into query_out and key_out (one run_out)."""
    _ops().run_out(None, None, None, None, None, None, None, None, positions, cos_sin_cache, None, None, None, None,
                   None, None, None, query_out, key_out, None, None, None, None, _heads(query, head_size, "query"),
                   _heads(key, head_size, "key"), head_size, -1, "cos_sin_cache", _STYLE[is_neox], 10000.0, "none",
                   _NO_SCALING, 1e-6, False, "none", "none", "none", "fused", "auto", 0, query, key)


def flashinfer_apply_rope_with_cos_sin_cache(positions, query, key, head_size: int, cos_sin_cache,
                                             is_neox: bool = True):
    """FlashInfer's ``flashinfer.rope.apply_rope_with_cos_sin_cache``:
    returns ``(query_out, key_out)``, new tensors shaped like ``query`` and
    ``key``, which are not modified.

    ``query`` [nnz, Nq * head_size] (or [nnz, Nq, head_size]), ``key``
    [nnz, Nk * head_size] (row-strided views of a qkv buffer are fine; the
    last dim contiguous); ``positions`` [nnz] int32/int64; ``cos_sin_cache``
    [max_pos, R] float32, rows [cos | sin], R <= head_size: RoPE on the
    first R dims of every head (neox pairs when ``is_neox``, else
    interleaved), the other dims copied. float32 math, one rounding: within
    one step of the dtype of FlashInfer's result (FMA contraction is the only
    difference). qkvfuse also takes float32 inputs and float16/bfloat16
    tables (FlashInfer: float16/bfloat16 inputs, float32 tables). Any head
    counts, as in FlashInfer (no GQA ratio needed).
    """
    try:
        query_out, key_out = torch.empty_like(query), torch.empty_like(key)
        _rope(positions, query, key, head_size, cos_sin_cache, is_neox, query_out, key_out)
    except Exception as e:  # noqa: BLE001 - re-raised as the package's error naming the caller's argument
        raise _failure(e, _FI_OUT_NAMES, lambda: _fi_checks(positions, query, key, head_size, cos_sin_cache,
                                                            is_neox)) from None
    return query_out, key_out


def flashinfer_apply_rope_with_cos_sin_cache_inplace(positions, query, key, head_size: int, cos_sin_cache,
                                                     is_neox: bool = True) -> None:
    """FlashInfer's ``flashinfer.rope.apply_rope_with_cos_sin_cache_inplace``:
    :func:`flashinfer_apply_rope_with_cos_sin_cache` written back into
    ``query`` and ``key`` (which may be column views of a qkv buffer; the
    rest of the buffer is not touched). Returns None."""
    try:
        _rope(positions, query, key, head_size, cos_sin_cache, is_neox, query, key)
    except Exception as e:  # noqa: BLE001 - re-raised as the package's error naming the caller's argument
        raise _failure(e, _FI_NAMES, lambda: _fi_checks(positions, query, key, head_size, cos_sin_cache,
                                                        is_neox)) from None


_FI_APPEND_NAMES = {"q": "q_rope", "k": "k_rope", "v": "v", "q_out": "q_rope_out", "positions": "pos_ids",
                    "kv_positions": "positions", "kv_indptr": "kv_indptr", "kv_indices": "kv_indices",
                    "batch_indices": "batch_indices", "cos_sin_cache": "cos_sin_cache",
                    "rotary_dim": "cos_sin_cache (its width, the rotary dim)", "k_cache": "paged_kv_cache[0]",
                    "v_cache": "paged_kv_cache[1]", "q_scale": "quant_scale_q", "k_scale": "quant_scale_kv",
                    "v_scale": "quant_scale_kv", "q_quant": "quantize_dtype", "k_quant": "quantize_dtype",
                    "v_quant": "quantize_dtype", "num_q_heads": "q_rope", "num_kv_heads": "k_rope",
                    "head_dim": "v", "cache_layout": "kv_layout",
                    "cache_addressing": "kv_indptr, kv_indices, batch_indices, positions (page-table addressing)"}
_KV_LAYOUT = {"NHD": ("paged", 1), "HND": ("paged_hnd", 2)}  # layout, the cache's page-size dim


def _fi_append_checks(q_rope, k_rope, q_nope, k_nope, v, cos_sin_cache, pos_ids, paged_kv_cache, kv_indices,
                      kv_indptr, batch_indices, positions, is_neox, quantize_dtype, quant_scale_q, quant_scale_kv,
                      page_size, kv_layout, q_rope_out, q_nope_out, enable_pdl):
    for x, name in ((q_rope, "q_rope"), (k_rope, "k_rope"), (cos_sin_cache, "cos_sin_cache"), (pos_ids, "pos_ids"),
                    (kv_indices, "kv_indices"), (kv_indptr, "kv_indptr"), (batch_indices, "batch_indices"),
                    (positions, "positions")):
        _tensor(x, name)
    for x, name in ((q_nope, "q_nope"), (k_nope, "k_nope"), (q_rope_out, "q_rope_out"), (q_nope_out, "q_nope_out")):
        _tensor(x, name, False)
    _flag(is_neox, "is_neox")
    _flag(enable_pdl, "enable_pdl")
    _int(page_size, "page_size")
    _check.real(quant_scale_q, "quant_scale_q", "float")
    _check.real(quant_scale_kv, "quant_scale_kv", "float")
    _check.string(kv_layout, "kv_layout", tuple(_KV_LAYOUT))
    if quantize_dtype is not None and quantize_dtype not in _FP8:
        raise _value("quantize_dtype", "must be torch.float8_e4m3fn, torch.float8_e5m2 or None; got %r"
                     % (quantize_dtype,))
    if k_rope.dim() == 2:
        raise _unsupported("k_rope", "MLA (2-D k_rope, (ckv_cache, kpe_cache)) is not expressible as one qkvfuse "
                           "call; GQA/MHA take k_rope [nnz, num_kv_heads, rope_dim]")
    if k_rope.dim() != 3:
        raise _shape("k_rope", "expected [nnz, num_kv_heads, rope_dim] (GQA/MHA); got shape %s"
                     % (tuple(k_rope.shape),))
    _tensor(v, "v")
    if not isinstance(paged_kv_cache, (tuple, list)) or len(paged_kv_cache) != 2:
        raise _value("paged_kv_cache", "expected (k_cache, v_cache); got %s" % type(paged_kv_cache).__name__)
    _tensor(paged_kv_cache[0], "paged_kv_cache[0]")
    _tensor(paged_kv_cache[1], "paged_kv_cache[1]")


def flashinfer_rope_quantize_fp8_append_paged_kv_cache(
        q_rope, k_rope, q_nope, k_nope, v, cos_sin_cache, pos_ids, paged_kv_cache, kv_indices, kv_indptr,
        batch_indices, positions, is_neox: bool = True, quantize_dtype: Optional[torch.dtype] = None,
        quant_scale_q: float = 1.0, quant_scale_kv: float = 1.0, page_size: int = 16, kv_layout: str = "NHD",
        q_rope_out=None, q_nope_out=None, enable_pdl: bool = False):
    """FlashInfer's ``flashinfer.rope.rope_quantize_fp8_append_paged_kv_cache``
    (GQA/MHA): RoPE, fp8 quantization of q, k and v, and the append of k and
    v to a paged cache through the page table, in one qkvfuse call. Returns
    ``(q_rope_out, q_nope_out)``.

    - ``q_rope`` [nnz, Nq, R], ``k_rope`` [nnz, Nk, R] and ``q_nope`` /
      ``k_nope`` [nnz, N, D - R] (None: D = R), ``v`` [nnz, Nk, D];
      float16/bfloat16 (float32 too). qkvfuse reads each head as one row
      [rope | nope], so ``q_nope`` must be the view ``x[..., R:]`` of the
      tensor ``x`` whose ``x[..., :R]`` is ``q_rope`` (how a model splits
      its heads; likewise ``k_nope``, and ``q_nope_out`` for a given
      ``q_rope_out``); two unrelated tensors raise UnsupportedError naming
      the argument. Without ``q_rope_out`` / ``q_nope_out`` both are views
      of one new [nnz, Nq, D] tensor (FlashInfer allocates two).
    - ``cos_sin_cache`` [max_pos, R] float32 rows [cos | sin], RoPE at
      ``pos_ids`` [nnz]; neox pairs when ``is_neox``, else interleaved.
    - ``quantize_dtype`` torch.float8_e4m3fn / float8_e5m2 (None: the dtype
      of a given output, else e4m3): the q outputs and both caches.
      ``quant_scale_q``, ``quant_scale_kv``: FlashInfer multiplies by them,
      ``fp8(x * s)``; qkvfuse is given a cached float32 reciprocal
      ``fl(1/s)`` as its scale (the CPU divides by it; the CUDA kernel with
      16-bit input multiplies by its ``rcp.approx``): identical for powers
      of two, otherwise one fp8 step apart where an fp8 rounding boundary
      falls between the two float32 products (rare).
    - ``paged_kv_cache`` (k_cache, v_cache): ``kv_layout`` "NHD"
      [pages, page_size, Nk, D] or "HND" [pages, Nk, page_size, D];
      ``page_size`` must be the cache's. Token t of sequence b =
      ``batch_indices[t]`` at position p = ``positions[t]`` goes to page
      ``kv_indices[kv_indptr[b] + p // page_size]``, entry p % page_size;
      b = -1 skips it. ``kv_indices``, ``kv_indptr``, ``batch_indices``,
      ``positions`` int32 or int64 (on CUDA the call's own kernels take
      them int32, as FlashInfer's; int64 ones run slower generic kernels).
    - A skipped token's q rows are written too (FlashInfer leaves them as
      they were): padding rows, which attention ignores.
    - ``enable_pdl`` (programmatic dependent launch) is accepted and ignored.
      MLA (2-D ``k_rope``) raises UnsupportedError.

    Needs a library with page-table addressing and fp8 q output (qkvfuse
    0.2's version-2 descriptor); an older one raises UnsupportedError.
    """
    try:
        if k_rope.dim() != 3 or v is None:
            raise _Recheck
        qd = quantize_dtype
        if qd is None:
            qd = (q_rope_out.dtype if q_rope_out is not None else q_nope_out.dtype if q_nope_out is not None
                  else torch.float8_e4m3fn)
        quant = _FP8[qd]
        layout, page_dim = _KV_LAYOUT[kv_layout]
        k_cache, v_cache = paged_kv_cache
        if k_cache.dtype != qd or v_cache.dtype != qd:
            raise _dtype("paged_kv_cache", "cache dtype must be quantize_dtype %s; got %s and %s"
                         % (qd, k_cache.dtype, v_cache.dtype))
        if k_cache.dim() == 4 and k_cache.shape[page_dim] != page_size:
            raise _value("page_size", "must be the cache's page size %d (k_cache.shape[%d], kv_layout %s); got %r"
                         % (k_cache.shape[page_dim], page_dim, kv_layout, page_size))
        q = _joined(q_rope, q_nope, "q_rope", "q_nope")
        k = _joined(k_rope, k_nope, "k_rope", "k_nope")
        if q_rope_out is None and q_nope_out is None:
            q_out = torch.empty(q.shape, dtype=qd, device=q.device)
            R, D = q_rope.shape[-1], q.shape[-1]
            q_rope_out = q_out if R == D else q_out.narrow(-1, 0, R)
            q_nope_out = q_out.narrow(-1, R, D - R)
        elif q_rope_out is None:
            raise _value("q_rope_out", "required when q_nope_out is given (one [nnz, Nq, D] tensor holds both)")
        else:
            if q_nope_out is None and q.shape[-1] != q_rope.shape[-1]:
                raise _value("q_nope_out", "required when q_rope_out is given and q_nope is not empty (one "
                             "[nnz, Nq, D] tensor holds both)")
            q_out = _joined(q_rope_out, q_nope_out, "q_rope_out", "q_nope_out")
            if q_nope_out is None:
                q_nope_out = q_rope_out.narrow(-1, q_rope_out.shape[-1], 0)
        dev = q.device
        ks = _reciprocal(quant_scale_kv, dev, "quant_scale_kv")
        _ops().run_out(None, None, None, None, None, None, None, None, pos_ids, cos_sin_cache, None, None, None, ks,
                       ks, None, None, q_out, None, None, k_cache, v_cache, None, q.shape[1], k.shape[1], q.shape[2],
                       -1, "cos_sin_cache", _STYLE[is_neox], 10000.0, "none", _NO_SCALING, 1e-6, False, layout,
                       quant, quant, "fused", "auto", 0, q, k, v, _reciprocal(quant_scale_q, dev, "quant_scale_q"),
                       quant, kv_indptr, kv_indices, batch_indices, positions)
    except Exception as e:  # noqa: BLE001 - re-raised as the package's error naming the caller's argument
        raise _failure(e, _FI_APPEND_NAMES, lambda: _fi_append_checks(
            q_rope, k_rope, q_nope, k_nope, v, cos_sin_cache, pos_ids, paged_kv_cache, kv_indices, kv_indptr,
            batch_indices, positions, is_neox, quantize_dtype, quant_scale_q, quant_scale_kv, page_size, kv_layout,
            q_rope_out, q_nope_out, enable_pdl)) from None
    return q_rope_out, q_nope_out


# ---- SGLang ---------------------------------------------------------------------------------

@dataclasses.dataclass
class _FusedSetKVBufferArg:
    """sgl_kernel's FusedSetKVBufferArg (its fields, in its order): value
    [nnz, Nv * head_size], k_buffer / v_buffer [rows, Nk * head_size] (or
    [rows, Nk, head_size]) of key's dtype, k_scale / v_scale (must be None),
    cache_loc [nnz] int64."""

    value: torch.Tensor
    k_buffer: torch.Tensor
    v_buffer: torch.Tensor
    k_scale: Optional[float]
    v_scale: Optional[float]
    cache_loc: torch.Tensor


_FusedSetKVBufferArg.__name__ = _FusedSetKVBufferArg.__qualname__ = "FusedSetKVBufferArg"
_resolved = {}


def __getattr__(name):
    """``FusedSetKVBufferArg``: sgl_kernel's own class when sgl_kernel is
    importable, else this module's dataclass with its fields (resolved on
    first use, so importing qkvfuse.compat never imports SGLang)."""
    if name != "FusedSetKVBufferArg":
        raise AttributeError("module %r has no attribute %r" % (__name__, name))
    cls = _resolved.get(name)
    if cls is None:
        cls = _FusedSetKVBufferArg
        if importlib.util.find_spec("sgl_kernel") is not None:
            try:
                import sgl_kernel
                cls = getattr(sgl_kernel, "FusedSetKVBufferArg", cls)
            except Exception:  # noqa: BLE001 - an sgl_kernel that does not load: the dataclass serves
                pass
        _resolved[name] = cls
    return cls


_SGL_NAMES = dict(_FI_NAMES, v="fused_set_kv_buffer_arg.value", k_cache="fused_set_kv_buffer_arg.k_buffer",
                  v_cache="fused_set_kv_buffer_arg.v_buffer", slot_mapping="fused_set_kv_buffer_arg.cache_loc")


def _buffer_rows(buf, nk, head_size, name):
    """A KV buffer [rows, Nk * head_size] or [rows, Nk, head_size] as the
    paged cache [rows, 1, Nk, head_size] (block size 1: slot = row)."""
    if buf.dim() == 2 or buf.dim() == 3:
        try:
            return buf.view(buf.shape[0], 1, nk, head_size)
        except RuntimeError:
            pass
    raise _shape(name, "expected [rows, %d] or [rows, %d, %d] (num_kv_heads * head_size, rows contiguous inside); "
                 "got shape %s, strides %s" % (nk * head_size, nk, head_size, tuple(buf.shape), buf.stride()))


def _sgl_checks(positions, query, key, head_size, cos_sin_cache, is_neox, a, enable_pdl):
    _fi_checks(positions, query, key, head_size, cos_sin_cache, is_neox)
    if enable_pdl is not None:
        _flag(enable_pdl, "enable_pdl")
    if a is not None:
        for f in ("value", "k_buffer", "v_buffer", "cache_loc"):
            if not hasattr(a, f):
                raise _value("fused_set_kv_buffer_arg", "has no field %r (expected FusedSetKVBufferArg's value, "
                             "k_buffer, v_buffer, k_scale, v_scale, cache_loc)" % f)
            _tensor(getattr(a, f), "fused_set_kv_buffer_arg." + f)


def sglang_apply_rope_with_cos_sin_cache_inplace(positions, query, key, head_size: int, cos_sin_cache,
                                                 is_neox: bool = True, fused_set_kv_buffer_arg=None,
                                                 enable_pdl: Optional[bool] = None) -> None:
    """sgl-kernel's ``apply_rope_with_cos_sin_cache_inplace``: FlashInfer's
    RoPE of ``query`` and ``key`` in place
    (:func:`flashinfer_apply_rope_with_cos_sin_cache_inplace`), and with
    ``fused_set_kv_buffer_arg`` (a :class:`FusedSetKVBufferArg`, SGLang's or
    any object with its fields) the KV-pool write in the same call:
    ``k_buffer[cache_loc[t]]`` = the rotated key row (the same values written
    to ``key``), ``v_buffer[cache_loc[t]]`` = ``value[t]`` (bits copied).
    Returns None.

    ``k_buffer`` / ``v_buffer`` [rows, Nk * head_size] or [rows, Nk,
    head_size], key's dtype (SGLang's fused path: a bfloat16 pool);
    ``k_scale`` / ``v_scale`` must be None (as SGLang asserts); ``cache_loc``
    [nnz] int64 (int32 accepted). A negative location skips the token
    (SGLang writes out of bounds there). ``enable_pdl`` is accepted and
    ignored.
    """
    a = fused_set_kv_buffer_arg
    try:
        if a is None:
            _rope(positions, query, key, head_size, cos_sin_cache, is_neox, query, key)
            return
        if getattr(a, "k_scale", None) is not None or getattr(a, "v_scale", None) is not None:
            which = "k_scale" if getattr(a, "k_scale", None) is not None else "v_scale"
            raise _value("fused_set_kv_buffer_arg." + which, "must be None (SGLang's fused KV-buffer write takes no "
                         "scale); got %r" % getattr(a, which))
        kb, vb = a.k_buffer, a.v_buffer
        if kb.dtype != key.dtype or vb.dtype != key.dtype:
            raise _dtype("fused_set_kv_buffer_arg.k_buffer" if kb.dtype != key.dtype else
                         "fused_set_kv_buffer_arg.v_buffer", "must have key's dtype %s (the fused write copies the "
                         "rotated key); got %s" % (key.dtype, kb.dtype if kb.dtype != key.dtype else vb.dtype))
        nq, nk = _heads(query, head_size, "query"), _heads(key, head_size, "key")
        _ops().run_out(None, None, None, None, None, None, None, None, positions, cos_sin_cache, None, None,
                       a.cache_loc, None, None, None, None, query, key, None,
                       _buffer_rows(kb, nk, head_size, "fused_set_kv_buffer_arg.k_buffer"),
                       _buffer_rows(vb, nk, head_size, "fused_set_kv_buffer_arg.v_buffer"), None, nq, nk, head_size,
                       -1, "cos_sin_cache", _STYLE[is_neox], 10000.0, "none", _NO_SCALING, 1e-6, False, "paged",
                       "none", "none", "fused", "auto", 0, query, key, a.value)
    except Exception as e:  # noqa: BLE001 - re-raised as the package's error naming the caller's argument
        raise _failure(e, _SGL_NAMES, lambda: _sgl_checks(positions, query, key, head_size, cos_sin_cache, is_neox,
                                                          a, enable_pdl)) from None


# ---- the peers' own names -------------------------------------------------------------------

vllm = types.SimpleNamespace(fused_qk_norm_rope=fused_qk_norm_rope,
                             fused_qk_norm_rope_and_cache=fused_qk_norm_rope_and_cache)
flashinfer = types.SimpleNamespace(
    apply_rope_with_cos_sin_cache=flashinfer_apply_rope_with_cos_sin_cache,
    apply_rope_with_cos_sin_cache_inplace=flashinfer_apply_rope_with_cos_sin_cache_inplace,
    rope_quantize_fp8_append_paged_kv_cache=flashinfer_rope_quantize_fp8_append_paged_kv_cache)
sglang = types.SimpleNamespace(apply_rope_with_cos_sin_cache_inplace=sglang_apply_rope_with_cos_sin_cache_inplace)
