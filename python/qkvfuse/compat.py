# SPDX-License-Identifier: Apache-2.0
"""Drop-in forms of the calls engines make today, computed by qkvfuse.

Each function takes the peer's arguments in the peer's order and writes what
the peer writes; the values are qkvfuse's fused chain (float32 inside, each
output rounded once), which is the peer kernel's own rounding order, so the
results differ from the peer's only in float32-level details (the order of
the sum of squares, rsqrtf, FMA contraction): at most one step of the output
dtype, in a small fraction of elements.

- :func:`fused_qk_norm_rope`: vLLM ``torch.ops._C.fused_qk_norm_rope``.
"""
from __future__ import annotations

from . import _arrays, _check, core, errors


def _bad(name, message):
    return errors.InvalidValueError(errors.QKVFUSE_ERROR_INVALID_VALUE, "%s: %s" % (name, message))


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
    positions, any even D from 16 to 512); ``num_heads_v`` must equal
    ``num_heads_k``. ``forced_token_heads_per_warp`` picks the vLLM kernel's
    launch shape and changes no result: it is checked and ignored. Errors
    raise qkvfuse's exceptions (ValueError/TypeError subclasses) naming the
    argument, and leave qkv unchanged.
    """
    _arrays.check_tensor(qkv, "qkv", required=True)
    nq = _check.integer(num_heads_q, "num_heads_q")
    nk = _check.integer(num_heads_k, "num_heads_k")
    nv = _check.integer(num_heads_v, "num_heads_v")
    d = _check.integer(head_dim, "head_dim")
    hpw = _check.integer(forced_token_heads_per_warp, "forced_token_heads_per_warp", "int32_t")
    if hpw > 0 and hpw not in (1, 2, 4, 8):
        raise _bad("forced_token_heads_per_warp", "must be -1 (auto) or 1, 2, 4, 8; got %d" % hpw)
    if nv != nk:
        raise _bad("num_heads_v", "must equal num_heads_k = %d (one KV head count); got %d" % (nk, nv))
    shape = _arrays.shape_of(qkv)
    if len(shape) != 2:
        raise errors.ShapeError(errors.QKVFUSE_ERROR_SHAPE,
                                "qkv: must be 2-D [num_tokens, (num_heads_q+num_heads_k+num_heads_v)*head_dim]; "
                                "got shape %s" % (tuple(shape),))
    core.check_out_widths(qkv, nq, nk, d)
    q_cols, k_cols = nq * d, nk * d
    core.run(qkv, num_q_heads=nq, num_kv_heads=nk, head_dim=d, q_gamma=q_weight, k_gamma=k_weight, eps=eps,
             positions=position_ids, cos_sin_cache=cos_sin_cache, rope="cos_sin_cache",
             rope_style="neox" if _check.flag(is_neox, "is_neox") else "interleaved",
             q_out=qkv[:, :q_cols], k_out=qkv[:, q_cols:q_cols + k_cols])
