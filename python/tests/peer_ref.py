# SPDX-License-Identifier: Apache-2.0
"""PyTorch references of the peer calls that qkvfuse.compat stands in for.

Each function takes the peer's arguments in the peer's order, with its
defaults, and mutates or returns what the peer does. The arithmetic follows
the peer's CUDA kernel: float32 math in the kernel's order (the vLLM norm
adds its squares in the warp's lane order), cos/sin widened from the table's
dtype, the peer's rounding points, and its fp8 conversion (round to nearest
even, saturating to the largest finite value, NaN written as 0x7F). What a
CPU cannot reproduce is left to the tolerance each docstring gives: the
GPU's approximate rsqrtf and nvcc's FMA contraction change float32 results
by a few ulps, so a correct implementation may differ from these references
by one step of the output dtype where a float32 value lies that close to a
rounding boundary.

The fp8 codec here is table-based (every code decoded in float64, nearest
with ties to the even code), independent of torch's own float8 casts.

Peers (repository, file):
  vLLM fused_qk_norm_rope ........ vllm-project/vllm csrc/fused_qknorm_rope_kernel.cu
  vLLM reshape_and_cache_flash ... vllm-project/vllm csrc/cache_kernels.cu,
                                   csrc/quantization/w8a8/fp8/nvidia/quant_utils.cuh
  FlashInfer rope ................ flashinfer-ai/flashinfer flashinfer/rope.py,
                                   include/flashinfer/pos_enc.cuh
  SGLang fused set-KV-buffer ..... sgl-project/sglang sgl-kernel/python/sgl_kernel/elementwise.py,
                                   python/sglang/jit_kernel/rope.py
The facts behind each function are collected in the project notes (peers.md).
"""
from __future__ import annotations

import dataclasses
from typing import Optional, Tuple

import torch

F32 = torch.float32
EPS32 = 2.0 ** -24  # unit roundoff of float32

# ---- number formats ----------------------------------------------------------------------------

# (significand bits incl. the hidden one, minimum normal exponent)
_FORMATS = {
    torch.float32: (24, -126),
    torch.bfloat16: (8, -126),
    torch.float16: (11, -14),
    torch.float8_e4m3fn: (4, -6),
    torch.float8_e5m2: (3, -14),
}

FP8_MAX = {torch.float8_e4m3fn: 448.0, torch.float8_e5m2: 57344.0}


def ulp(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Spacing of dtype's representable numbers at |x| (float64); at 0 the
    smallest subnormal step."""
    p, emin = _FORMATS[dtype]
    a = x.to(torch.float64).abs()
    _, e = torch.frexp(torch.where(a > 0, a, torch.ones_like(a)))
    e = torch.where(a > 0, e - 1, torch.full_like(e, emin))
    return torch.ldexp(torch.ones_like(a), torch.clamp(e, min=emin) - (p - 1))


def _fp8_magnitudes(dtype: torch.dtype) -> torch.Tensor:
    """float64 value of every non-negative finite code, indexed by the code
    (codes of one sign are ordered by value)."""
    if dtype == torch.float8_e4m3fn:
        mant, bias, last = 3, 7, 0x7E
    elif dtype == torch.float8_e5m2:
        mant, bias, last = 2, 15, 0x7B
    else:
        raise TypeError("not an fp8 dtype: %s" % dtype)
    codes = torch.arange(last + 1, dtype=torch.int64)
    e = codes >> mant
    m = (codes & ((1 << mant) - 1)).to(torch.float64)
    frac = torch.where(e == 0, m / (1 << mant), 1 + m / (1 << mant))
    return torch.ldexp(frac, torch.where(e == 0, torch.ones_like(e), e) - bias)


def fp8_encode(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """uint8 codes of float32 x in dtype as CUDA's cvt.rn.satfinite writes them:
    round to nearest, ties to the even code; beyond the largest finite value
    (and +-inf) the largest finite value with x's sign; NaN -> 0x7F; the sign
    of a value that rounds to zero is kept (0x80)."""
    mags = _fp8_magnitudes(dtype)
    a = x.to(F32).to(torch.float64).abs()
    nan = torch.isnan(a)
    a = torch.where(nan, torch.zeros_like(a), torch.clamp(a, max=float(mags[-1])))
    hi = torch.searchsorted(mags, a.contiguous()).clamp(max=mags.numel() - 1)
    lo = (hi - 1).clamp(min=0)
    dlo, dhi = a - mags[lo], mags[hi] - a
    pick_hi = (dhi < dlo) | ((dhi == dlo) & (hi % 2 == 0))
    code = torch.where(pick_hi, hi, lo)
    code = torch.where(a == mags[hi], hi, code)  # exact values (incl. 0 and the maximum)
    code = code | (torch.signbit(x.to(F32)).to(torch.int64) << 7)
    code = torch.where(nan, torch.full_like(code, 0x7F), code)
    return code.to(torch.uint8)


def fp8_decode(codes: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """float64 values of uint8 codes (NaN codes -> nan, e5m2 0x7C/0xFC -> +-inf)."""
    c = codes.to(torch.int64)
    mag_code = c & 0x7F
    mags = _fp8_magnitudes(dtype)
    v = mags[mag_code.clamp(max=mags.numel() - 1)]
    if dtype == torch.float8_e4m3fn:
        v = torch.where(mag_code == 0x7F, torch.full_like(v, float("nan")), v)
    else:
        v = torch.where(mag_code == 0x7C, torch.full_like(v, float("inf")), v)
        v = torch.where(mag_code > 0x7C, torch.full_like(v, float("nan")), v)
    return torch.where(c >= 0x80, -v, v)


def to_fp8(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """fp8_encode(x) as a tensor of dtype."""
    return fp8_encode(x, dtype).view(dtype)


def _as_bytes(cache: torch.Tensor) -> torch.Tensor:
    """A uint8 view of an fp8 (or uint8) cache: writes go to the caller's storage."""
    return cache if cache.dtype == torch.uint8 else cache.view(torch.uint8)


# ---- RoPE, the float32 formulas every peer shares --------------------------------------------------

def _rope_f32(y: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, is_neox: bool) -> torch.Tensor:
    """Rotate the first R = 2*cos.shape[-1] dims of y [..., H, D] (float32) with
    cos, sin [..., R/2] (float32, broadcast over heads); dims >= R pass through.
    neox: o_i = y_i c_i - y_{i+R/2} s_i, o_{i+R/2} = y_{i+R/2} c_i + y_i s_i;
    interleaved: o_2j = y_2j c_j - y_2j+1 s_j, o_2j+1 = y_2j+1 c_j + y_2j s_j."""
    h = cos.shape[-1]
    R = 2 * h
    c, s = cos.unsqueeze(-2), sin.unsqueeze(-2)
    out = y.clone()
    if is_neox:
        a, b = y[..., :h], y[..., h:R]
        out[..., :h] = a * c - b * s
        out[..., h:R] = b * c + a * s
    else:
        a, b = y[..., 0:R:2], y[..., 1:R:2]
        out[..., 0:R:2] = a * c - b * s
        out[..., 1:R:2] = b * c + a * s
    return out


def _rope_terms(y, cos, sin, is_neox):
    """|y_i c| + |y_partner s| per element (|y| past R): the size of the terms
    a float32 RoPE adds, which bounds its absolute rounding error."""
    h = cos.shape[-1]
    R = 2 * h
    c, s = cos.abs().unsqueeze(-2), sin.abs().unsqueeze(-2)
    m = y.abs().clone()
    ya = y.abs()
    if is_neox:
        a, b = ya[..., :h], ya[..., h:R]
        m[..., :h] = a * c + b * s
        m[..., h:R] = b * c + a * s
    else:
        a, b = ya[..., 0:R:2], ya[..., 1:R:2]
        m[..., 0:R:2] = a * c + b * s
        m[..., 1:R:2] = b * c + a * s
    return m


def _cos_sin(cos_sin_cache: torch.Tensor, positions: torch.Tensor):
    """cos, sin [T, R/2] in float32 from the [cos | sin] rows of the table."""
    rows = cos_sin_cache[positions.to(torch.int64)].to(F32)
    h = cos_sin_cache.shape[1] // 2
    return rows[:, :h], rows[:, h:2 * h]


def within_rounding(actual: torch.Tensor, exact: torch.Tensor, magnitude: torch.Tensor, dtype: torch.dtype,
                    k: float = 8.0) -> torch.Tensor:
    """Elementwise: is actual (of dtype) what rounding a value within
    k*2^-24*magnitude of exact can give? Passes one step of dtype at |exact|
    plus that float32 slack; fails anything farther."""
    slack = k * EPS32 * magnitude.to(torch.float64)
    ex = exact.to(torch.float64)
    bound = ulp(ex.abs() + slack, dtype) + slack
    return (actual.to(torch.float64) - ex).abs() <= bound


# ---- vLLM: fused_qk_norm_rope ------------------------------------------------------------------

def _vllm_sumsq(x: torch.Tensor) -> torch.Tensor:
    """Sum of squares over the last dim (D, a multiple of 64) in the warp's
    order: lane l adds x[l*D/32 + i]^2 for i = 0, 1, ... in float32, then the
    lanes combine by XOR butterfly (16, 8, 4, 2, 1)."""
    D = x.shape[-1]
    n = D // 32
    lanes = x.reshape(*x.shape[:-1], 32, n)
    s = lanes[..., 0] * lanes[..., 0]
    for i in range(1, n):
        s = s + lanes[..., i] * lanes[..., i]
    idx = torch.arange(32)
    for m in (16, 8, 4, 2, 1):
        s = s + s[..., idx ^ m]
    return s[..., 0]


def vllm_qk_norm_rope_f32(qkv, num_heads_q, num_heads_k, num_heads_v, head_dim, eps, q_weight, k_weight,
                          cos_sin_cache, is_neox, position_ids):
    """The float32 values fused_qk_norm_rope rounds once into the q and k
    columns, and the RoPE term magnitudes: (out [T, Nq+Nk, D], mag [T, Nq+Nk, D])."""
    T, D = qkv.shape[0], head_dim
    heads = qkv.reshape(T, num_heads_q + num_heads_k + num_heads_v, D)[:, :num_heads_q + num_heads_k].to(F32)
    ss = _vllm_sumsq(heads)
    r = torch.rsqrt(ss / torch.tensor(float(D), dtype=F32) + torch.tensor(eps, dtype=F32))
    w = torch.cat([q_weight.to(F32).expand(num_heads_q, D), k_weight.to(F32).expand(num_heads_k, D)])
    y = heads * (r.unsqueeze(-1) * w)
    cos, sin = _cos_sin(cos_sin_cache, position_ids)
    return _rope_f32(y, cos, sin, is_neox), _rope_terms(y, cos, sin, is_neox)


def vllm_fused_qk_norm_rope(qkv: torch.Tensor, num_heads_q: int, num_heads_k: int, num_heads_v: int,
                            head_dim: int, eps: float, q_weight: torch.Tensor, k_weight: torch.Tensor,
                            cos_sin_cache: torch.Tensor, is_neox: bool, position_ids: torch.Tensor,
                            forced_token_heads_per_warp: int = -1) -> None:
    """torch.ops._C.fused_qk_norm_rope: per-head RMSNorm of the q and k heads
    of qkv [T, (Nq+Nk+Nv)*D] and RoPE from cos_sin_cache [max_pos, R] at
    position_ids [T] (int64), in place; v columns untouched.

    float32 throughout: sum of squares in lane order, r = rsqrt(ss/D + eps),
    y = x * (r * w), RoPE on the unrounded y, one RNE rounding to qkv's dtype.
    forced_token_heads_per_warp only picks the peer's launch shape.

    Tolerance for a correct fused implementation: within_rounding(out,
    vllm_qk_norm_rope_f32(...), k=8) for every element (one step of the I/O
    dtype, plus a few float32 ulps of the RoPE terms where they cancel);
    nearly all elements bit-identical.
    """
    if qkv.dim() != 2 or qkv.dtype not in (torch.float16, torch.bfloat16):
        raise RuntimeError("qkv must be 2-D float16/bfloat16")
    if q_weight.dtype != qkv.dtype or k_weight.dtype != qkv.dtype:
        raise RuntimeError("qkv, q_weight and k_weight must have the same dtype")
    if head_dim not in (64, 128, 256):
        raise RuntimeError("Unsupported head dimension for fusedQKNormRope: %d" % head_dim)
    R = cos_sin_cache.shape[1]
    if R % 2 or R > head_dim:
        raise RuntimeError("rotary_dim must be even and <= head_dim")
    if position_ids.dtype != torch.int64 or position_ids.shape != (qkv.shape[0],):
        raise RuntimeError("position_ids must be int64 [num_tokens]")
    if qkv.shape[1] != (num_heads_q + num_heads_k + num_heads_v) * head_dim:
        raise RuntimeError("QKV tensor size must match total number of heads and head dimension")
    out, _ = vllm_qk_norm_rope_f32(qkv, num_heads_q, num_heads_k, num_heads_v, head_dim, eps, q_weight, k_weight,
                                   cos_sin_cache, is_neox, position_ids)
    T = qkv.shape[0]
    qkv[:, :(num_heads_q + num_heads_k) * head_dim] = out.reshape(T, (num_heads_q + num_heads_k) * head_dim).to(
        qkv.dtype)


# ---- vLLM: reshape_and_cache_flash --------------------------------------------------------------

_VLLM_CACHE_DTYPES = {
    "auto": None, "float16": None, "bfloat16": None,
    "fp8": torch.float8_e4m3fn, "fp8_e4m3": torch.float8_e4m3fn, "fp8_ds_mla": torch.float8_e4m3fn,
    "fp8_e5m2": torch.float8_e5m2,
}


def vllm_reshape_and_cache_flash(key: torch.Tensor, value: torch.Tensor, key_cache: torch.Tensor,
                                 value_cache: torch.Tensor, slot_mapping: torch.Tensor, kv_cache_dtype: str,
                                 k_scale: torch.Tensor, v_scale: torch.Tensor) -> None:
    """torch.ops._C_cache_ops.reshape_and_cache_flash: token t < T =
    len(slot_mapping) with slot s >= 0 goes to key_cache[s // bs, s % bs]
    (bs = key_cache.shape[1]; the cache is [blocks, bs, Nkv, D], NHD or an
    HND-permuted view: the strides decide); s < 0 skips; rows of key past T
    are ignored.

    "auto"/"float16"/"bfloat16": the bits are copied (cache dtype = key's).
    fp8 ("fp8", "fp8_e4m3", "fp8_e5m2"): fp8(float32(x) / scale[h]) with a
    true float32 division, RNE, saturating, NaN -> 0x7F; scale[h] =
    k_scale[h] when k_scale has Nkv elements, else k_scale[0]. A uint8 cache
    receives the codes.

    Tolerance: exact bytes (the division is IEEE on both sides).
    """
    if kv_cache_dtype not in _VLLM_CACHE_DTYPES:
        raise RuntimeError("Unsupported fp8 kv cache data type: %s" % kv_cache_dtype)
    fp8 = _VLLM_CACHE_DTYPES[kv_cache_dtype]
    T = slot_mapping.shape[0]
    Nkv, D = key.shape[1], key.shape[2]
    if k_scale.shape != v_scale.shape or k_scale.numel() not in (1, Nkv):
        raise RuntimeError("k_scale and v_scale must be of shape [1] or [num_heads]")
    slots = slot_mapping.to(torch.int64)
    keep = slots >= 0
    tok = torch.nonzero(keep).flatten()
    blk, row = slots[keep] // key_cache.shape[1], slots[keep] % key_cache.shape[1]
    for src, cache, scale in ((key, key_cache, k_scale), (value, value_cache, v_scale)):
        x = src[:T][tok]
        if fp8 is None:
            if cache.dtype != src.dtype:
                raise RuntimeError("cache dtype must equal the input dtype for kv_cache_dtype auto")
            cache[blk, row] = x
        else:
            s = scale.to(F32).reshape(-1, 1) if scale.numel() > 1 else scale.to(F32).reshape(1, 1)
            _as_bytes(cache)[blk, row] = fp8_encode(x.to(F32) / s, fp8)


def vllm_qk_norm_rope_and_cache(qkv, num_heads_q, num_heads_k, num_heads_v, head_dim, eps, q_weight, k_weight,
                                cos_sin_cache, is_neox, position_ids, key_cache, value_cache, slot_mapping,
                                kv_cache_dtype, k_scale, v_scale) -> None:
    """The chain the compat call fuses: fused_qk_norm_rope on qkv in place,
    then reshape_and_cache_flash of qkv's (now rotated, rounded) k columns and
    its v columns. The k written to an fp8 cache is therefore
    fp8(float(round_io(k_f32)) / scale): rounded twice."""
    vllm_fused_qk_norm_rope(qkv, num_heads_q, num_heads_k, num_heads_v, head_dim, eps, q_weight, k_weight,
                            cos_sin_cache, is_neox, position_ids)
    T, q_w, kv_w = qkv.shape[0], num_heads_q * head_dim, num_heads_k * head_dim
    key = qkv[:, q_w:q_w + kv_w].view(T, num_heads_k, head_dim)
    value = qkv[:, q_w + kv_w:q_w + 2 * kv_w].view(T, num_heads_v, head_dim)
    vllm_reshape_and_cache_flash(key, value, key_cache, value_cache, slot_mapping, kv_cache_dtype, k_scale, v_scale)


# ---- FlashInfer ---------------------------------------------------------------------------------

def _heads(x, head_size):
    """x [n, H*hs] (or [n, H, hs]) viewed as [n, H, hs] (n may be 0)."""
    return x.view(x.shape[0], x.shape[1] * (x.shape[2] if x.dim() == 3 else 1) // head_size, head_size)


def _fi_check(cos_sin_cache, *xs):
    if cos_sin_cache.dtype != F32:
        raise ValueError("cos_sin_cache should be float32")
    for x in xs:
        if x is not None and x.dtype not in (torch.float16, torch.bfloat16):
            raise ValueError("inputs must be float16 or bfloat16")


def flashinfer_apply_rope_with_cos_sin_cache(positions: torch.Tensor, query: torch.Tensor, key: torch.Tensor,
                                             head_size: int, cos_sin_cache: torch.Tensor,
                                             is_neox: bool = True) -> Tuple[torch.Tensor, torch.Tensor]:
    """flashinfer.rope.apply_rope_with_cos_sin_cache: RoPE of query [nnz,
    Nq*hs] and key [nnz, Nk*hs] (float16/bfloat16) on the first R =
    cos_sin_cache.shape[1] dims of each head; returns new (query_out,
    key_out); dims >= R copied. float32 math, one RNE rounding.

    Tolerance: within_rounding against flashinfer_rope_f32 (k=4): one step of
    the dtype, FMA contraction being the only difference."""
    _fi_check(cos_sin_cache, query, key)
    q_out, k_out = (flashinfer_rope_f32(positions, x, head_size, cos_sin_cache, is_neox)[0] for x in (query, key))
    return q_out.reshape(query.shape).to(query.dtype), k_out.reshape(key.shape).to(key.dtype)


def flashinfer_apply_rope_with_cos_sin_cache_inplace(positions: torch.Tensor, query: torch.Tensor,
                                                     key: torch.Tensor, head_size: int,
                                                     cos_sin_cache: torch.Tensor, is_neox: bool = True) -> None:
    """flashinfer.rope.apply_rope_with_cos_sin_cache_inplace: the same values
    written back into query and key (which may be column views of a qkv
    buffer)."""
    qo, ko = flashinfer_apply_rope_with_cos_sin_cache(positions, query, key, head_size, cos_sin_cache, is_neox)
    _heads(query, head_size).copy_(_heads(qo, head_size))
    _heads(key, head_size).copy_(_heads(ko, head_size))


def flashinfer_rope_f32(positions, x, head_size, cos_sin_cache, is_neox):
    """(rotated float32 [nnz, H, hs], term magnitudes) of x [nnz, H*hs] or [nnz, H, hs]."""
    y = _heads(x, head_size).to(F32)
    cos, sin = _cos_sin(cos_sin_cache, positions)
    return _rope_f32(y, cos, sin, is_neox), _rope_terms(y, cos, sin, is_neox)


def _quant_dtype(quantize_dtype, *outs):
    if quantize_dtype is None:
        for o in outs:
            if o is not None:
                return o.dtype
        return torch.float8_e4m3fn
    return quantize_dtype


def _rope_part(x_rope, cos, sin, is_neox):
    """RoPE over the whole last dim of x_rope [nnz, H, R] (float32)."""
    return _rope_f32(x_rope.to(F32), cos, sin, is_neox)


def flashinfer_rope_quantize_fp8(q_rope: torch.Tensor, k_rope: torch.Tensor, q_nope: Optional[torch.Tensor],
                                 k_nope: Optional[torch.Tensor], cos_sin_cache: torch.Tensor,
                                 pos_ids: torch.Tensor, is_neox: bool = True,
                                 quantize_dtype: Optional[torch.dtype] = None, quant_scale_q: float = 1.0,
                                 quant_scale_kv: float = 1.0, q_rope_out: Optional[torch.Tensor] = None,
                                 k_rope_out: Optional[torch.Tensor] = None,
                                 q_nope_out: Optional[torch.Tensor] = None,
                                 k_nope_out: Optional[torch.Tensor] = None, enable_pdl: bool = False,
                                 backend: str = "cuda"):
    """flashinfer.rope.rope_quantize_fp8: q_rope [nnz, Nq, R] and k_rope
    ([nnz, Nkv, R], or [nnz, R] for MLA) rotated; every output
    fp8(float32 value * scale) (scale multiplies; RNE, saturating);
    q_nope/k_nope only scaled and converted. Returns (q_rope_out, k_rope_out,
    q_nope_out, k_nope_out), allocated when not given.

    Tolerance: fp8 outputs equal except one fp8 step where a float32 value
    lies within a few float32 ulps of an fp8 rounding boundary."""
    _fi_check(cos_sin_cache, q_rope, k_rope, q_nope, k_nope)
    qd = _quant_dtype(quantize_dtype, q_rope_out, k_rope_out, q_nope_out, k_nope_out)
    nnz, Nq = q_rope.shape[0], q_rope.shape[1]
    mla = k_rope.dim() == 2
    if q_nope is None:
        q_nope = q_rope.new_empty(nnz, Nq, 0)
    if k_nope is None:
        k_nope = k_rope.new_empty((nnz, 0) if mla else (nnz, k_rope.shape[1], 0))
    outs = [o if o is not None else torch.empty_like(i, dtype=qd)
            for o, i in ((q_rope_out, q_rope), (k_rope_out, k_rope), (q_nope_out, q_nope), (k_nope_out, k_nope))]
    cos, sin = _cos_sin(cos_sin_cache, pos_ids)
    sq, skv = torch.tensor(quant_scale_q, dtype=F32), torch.tensor(quant_scale_kv, dtype=F32)
    k3 = k_rope.unsqueeze(1) if mla else k_rope
    vals = (_rope_part(q_rope, cos, sin, is_neox) * sq,
            _rope_part(k3, cos, sin, is_neox).reshape(k_rope.shape) * skv,
            q_nope.to(F32) * sq, k_nope.to(F32) * skv)
    for o, v in zip(outs, vals):
        _as_bytes(o).copy_(fp8_encode(v, qd))
    return tuple(outs)


def flashinfer_rope_quantize_fp8_append_paged_kv_cache(
        q_rope: torch.Tensor, k_rope: torch.Tensor, q_nope: Optional[torch.Tensor],
        k_nope: Optional[torch.Tensor], v: Optional[torch.Tensor], cos_sin_cache: torch.Tensor,
        pos_ids: torch.Tensor, paged_kv_cache: Tuple[torch.Tensor, torch.Tensor], kv_indices: torch.Tensor,
        kv_indptr: torch.Tensor, batch_indices: torch.Tensor, positions: torch.Tensor, is_neox: bool = True,
        quantize_dtype: Optional[torch.dtype] = None, quant_scale_q: float = 1.0, quant_scale_kv: float = 1.0,
        page_size: int = 16, kv_layout: str = "NHD", q_rope_out: Optional[torch.Tensor] = None,
        q_nope_out: Optional[torch.Tensor] = None, enable_pdl: bool = False):
    """flashinfer.rope.rope_quantize_fp8_append_paged_kv_cache.

    Token t with b = batch_indices[t] >= 0, p = positions[t]:
      page = kv_indices[kv_indptr[b] + p // page_size], entry = p % page_size;
      GQA/MHA: k_cache[page, entry, h] (NHD) or k_cache[page, h, entry] (HND)
      = [fp8(rope(k_rope)*s_kv) | fp8(k_nope*s_kv)], v_cache likewise fp8(v*s_kv);
      MLA (k_rope 2-D, v None, caches (ckv [pages, ps, ckv_dim], kpe [pages, ps, R])):
      kpe = fp8(rope(k_rope)*s_kv), ckv = fp8(k_nope*s_kv).
    q_rope_out = fp8(rope(q_rope)*s_q), q_nope_out = fp8(q_nope*s_q).
    b < 0: the token is skipped entirely, q outputs included.
    RoPE at pos_ids[t]. Returns (q_rope_out, q_nope_out).

    Tolerance: as rope_quantize_fp8 (one fp8 step near boundaries)."""
    _fi_check(cos_sin_cache, q_rope, k_rope, q_nope, k_nope, v)
    mla = k_rope.dim() == 2
    qd = _quant_dtype(quantize_dtype, q_rope_out, q_nope_out)
    nnz, Nq = q_rope.shape[0], q_rope.shape[1]
    if q_nope is None:
        q_nope = q_rope.new_empty(nnz, Nq, 0)
    if k_nope is None:
        k_nope = k_rope.new_empty((nnz, 0) if mla else (nnz, k_rope.shape[1], 0))
    if mla and v is not None:
        raise ValueError("MLA should not have V input (pass None)")
    if not mla and v is None:
        raise ValueError("GQA/MHA expects a V tensor, but got None.")
    c0, c1 = paged_kv_cache
    if c0.dtype != qd or c1.dtype != qd:
        raise ValueError("cache dtype mismatch: expected %s" % qd)
    q_rope_out = q_rope_out if q_rope_out is not None else torch.empty_like(q_rope, dtype=qd)
    q_nope_out = q_nope_out if q_nope_out is not None else torch.empty_like(q_nope, dtype=qd)

    b = batch_indices.to(torch.int64)
    tok = torch.nonzero(b >= 0).flatten()
    b, p = b[tok], positions.to(torch.int64)[tok]
    page = kv_indices.to(torch.int64)[kv_indptr.to(torch.int64)[b] + p // page_size]
    entry = p % page_size

    cos, sin = _cos_sin(cos_sin_cache, pos_ids.to(torch.int64)[tok])
    sq, skv = torch.tensor(quant_scale_q, dtype=F32), torch.tensor(quant_scale_kv, dtype=F32)
    _as_bytes(q_rope_out)[tok] = fp8_encode(_rope_part(q_rope[tok], cos, sin, is_neox) * sq, qd)
    _as_bytes(q_nope_out)[tok] = fp8_encode(q_nope[tok].to(F32) * sq, qd)
    k3 = k_rope[tok].unsqueeze(1) if mla else k_rope[tok]
    k_rot = fp8_encode(_rope_part(k3, cos, sin, is_neox) * skv, qd)
    k_np = fp8_encode(k_nope[tok].to(F32) * skv, qd)
    if mla:
        _as_bytes(c1)[page, entry] = k_rot.squeeze(1)
        _as_bytes(c0)[page, entry] = k_np
        return q_rope_out, q_nope_out
    k_full = torch.cat([k_rot, k_np], dim=-1)
    v_q = fp8_encode(v[tok].to(F32) * skv, qd)
    for cache, val in ((c0, k_full), (c1, v_q)):
        if kv_layout == "NHD":
            _as_bytes(cache)[page, entry] = val
        elif kv_layout == "HND":
            _as_bytes(cache)[page, :, entry] = val
        else:
            raise KeyError(kv_layout)
    return q_rope_out, q_nope_out


# ---- SGLang -------------------------------------------------------------------------------------

@dataclasses.dataclass
class FusedSetKVBufferArg:
    """sgl_kernel.FusedSetKVBufferArg (field order as in sgl-kernel)."""

    value: torch.Tensor
    k_buffer: torch.Tensor
    v_buffer: torch.Tensor
    k_scale: Optional[float]
    v_scale: Optional[float]
    cache_loc: torch.Tensor


def _loc(cache_loc):
    loc = cache_loc.to(torch.int64)
    if bool((loc < 0).any()):
        raise ValueError("cache_loc: negative location (the peer writes out of bounds there)")
    return loc


def sglang_apply_rope_with_cos_sin_cache_inplace(positions: torch.Tensor, query: torch.Tensor,
                                                 key: torch.Tensor, head_size: int,
                                                 cos_sin_cache: torch.Tensor, is_neox: bool = True,
                                                 fused_set_kv_buffer_arg: Optional[FusedSetKVBufferArg] = None,
                                                 enable_pdl: Optional[bool] = None) -> None:
    """sgl_kernel.apply_rope_with_cos_sin_cache_inplace: FlashInfer's RoPE on
    query/key in place; with the fused argument also k_buffer[cache_loc[t]] =
    the rotated key row (the same rounded values) and v_buffer[cache_loc[t]]
    = value[t] (bits copied). Buffers [rows, Nkv*hs] or [rows, Nkv, hs] of
    key's dtype; k_scale and v_scale must be None; cache_loc int64.

    Tolerance: q/k as flashinfer_apply_rope_with_cos_sin_cache; buffers equal
    to the rotated key and to value bit for bit."""
    if cos_sin_cache.dtype != F32:
        raise ValueError("cos_sin_cache should be float32")
    a = fused_set_kv_buffer_arg
    if a is not None:
        assert a.k_scale is None, "k_scale is not yet supported"
        assert a.v_scale is None, "v_scale is not yet supported"
        assert a.cache_loc.dtype == torch.int64, "cache_loc.dtype=%s" % a.cache_loc.dtype
        if a.k_buffer.dtype != key.dtype or a.v_buffer.dtype != key.dtype:
            raise ValueError("k_buffer/v_buffer must have key's dtype")
    flashinfer_apply_rope_with_cos_sin_cache_inplace(positions.long(), query, key, head_size, cos_sin_cache,
                                                     is_neox)
    if a is not None:
        loc = _loc(a.cache_loc)
        _heads(a.k_buffer, head_size)[loc] = _heads(key, head_size)
        _heads(a.v_buffer, head_size)[loc] = _heads(a.value, head_size)


@dataclasses.dataclass
class SglangJitFusedSetKVBufferArg:
    """sglang.jit_kernel.rope.FusedSetKVBufferArg (no scales)."""

    value: torch.Tensor
    k_buffer: torch.Tensor
    v_buffer: torch.Tensor
    cache_loc: torch.Tensor


def sglang_jit_apply_rope_with_cos_sin_cache_inplace(q: torch.Tensor, k: torch.Tensor,
                                                     cos_sin_cache: torch.Tensor, positions: torch.Tensor, *,
                                                     is_neox: bool, rope_dim: int = 0,
                                                     fused_args: Optional[SglangJitFusedSetKVBufferArg] = None
                                                     ) -> None:
    """sglang.jit_kernel.rope.apply_rope_with_cos_sin_cache_inplace: q [T, Nq,
    rope_dim], k [T, Nkv, rope_dim] (3-D views) rotated in place
    (rope_dim = cos_sin_cache width by default). With fused_args (rope_dim
    must equal the head dim): q rotated in place, the rotated k written only
    to k_buffer[cache_loc[t]] ([rows, Nkv*D] 2-D) -- k itself is left as it
    was -- and value[t] copied to v_buffer[cache_loc[t]].

    Tolerance: as flashinfer_apply_rope_with_cos_sin_cache."""
    rope_dim = rope_dim or cos_sin_cache.shape[-1]
    if cos_sin_cache.dtype != F32:
        raise ValueError("cos_sin_cache should be float32")
    if q.shape[-1] != rope_dim or k.shape[-1] != rope_dim or cos_sin_cache.shape[-1] != rope_dim:
        raise ValueError("q, k and cos_sin_cache must have rope_dim as their last dim")
    cos, sin = _cos_sin(cos_sin_cache, positions)
    q_rot = _rope_f32(q.to(F32), cos, sin, is_neox).to(q.dtype)
    k_rot = _rope_f32(k.to(F32), cos, sin, is_neox).to(k.dtype)
    q.copy_(q_rot)
    if fused_args is None:
        k.copy_(k_rot)
        return
    a = fused_args
    loc = _loc(a.cache_loc)
    T, width = k.shape[0], k.shape[1] * k.shape[2]
    a.k_buffer[loc] = k_rot.reshape(T, width)
    a.v_buffer[loc] = a.value.reshape(T, width)
