# SPDX-License-Identifier: Apache-2.0
"""Unfused-parity mode, bit for bit: the library's reference backend against
a NumPy float32 composition of the separate stages, each rounding its result
to the model dtype (the rounding sequence python/README.md documents):

    x  = input                                   (model dtype)
    ss = sum over d of x[d]*x[d]                 float32, d = 0, 1, ..., D-1 in order
    y  = round(x * (1 / sqrt(ss / D + eps)) * g)   float32 math, g -> (1 + g) with gamma_offset
    y  = round(y + beta)                           with beta: the bias add reads the stored norm
    o  = round(y * cos - y_partner * sin)  (first half / even dims; + for the other), float32, no FMA
    k_cache = quant(o): round(o / scale (+ offset)) to int8 (half to even, saturating) or e4m3fn

The order of the sum of squares is the only freedom a composition has; the
reference backend adds sequentially, and so does this test. (The CUDA kernel's
order is reproduced by the PyTorch composition in examples/, see the GPU tests.)
"""
import numpy as np
import pytest

import oracle as orc
import qkvfuse
from conftest import seeds

F32 = np.float32


def rnd(a, dt):
    """float32 array -> float32 array of values rounded to dt (RNE)."""
    return orc.round_to(a.astype(np.float64), dt).astype(F32)


def compose(x, Nq, Nkv, D, R, style, eps, qg, kg, qb, kb, offset, cos, sin, dt):
    """x [T, H] float32 values of dtype dt; returns q, k [T, N, D] and v, float32."""
    T = x.shape[0]
    x = x.reshape(T, Nq + 2 * Nkv, D)
    outs = []
    for lo, hi, g, b in ((0, Nq, qg, qb), (Nq, Nq + Nkv, kg, kb)):
        h = x[:, lo:hi]
        ss = np.zeros(h.shape[:2], F32)
        for d in range(D):
            ss = ss + h[..., d] * h[..., d]
        inv = F32(1) / np.sqrt(ss / F32(D) + F32(eps))
        gg = (F32(1) + g) if offset else g
        y = rnd(h * inv[..., None] * gg, dt)
        if b is not None:
            y = rnd(y + b, dt)
        o = y.copy()
        if style == "neox":
            half = R // 2
            a1, a2 = y[..., :half], y[..., half:R]
            c1, s1 = cos[:, None, :half], sin[:, None, :half]
            o[..., :half] = a1 * c1 - a2 * s1
            o[..., half:R] = a2 * c1 + a1 * s1
        else:
            a1, a2 = y[..., 0:R:2], y[..., 1:R:2]
            c1, s1 = cos[:, None, :], sin[:, None, :]
            o[..., 0:R:2] = a1 * c1 - a2 * s1
            o[..., 1:R:2] = a2 * c1 + a1 * s1
        outs.append(rnd(o, dt))
    return outs[0], outs[1], x[:, Nq + Nkv:]


@pytest.mark.parametrize("seed", seeds(40, 7000))
def test_parity_bit_identical_to_stage_composition(seed):
    rng = np.random.default_rng(seed)
    dt = ["bfloat16", "float16", "float32"][seed % 3]
    Nkv = int(rng.integers(1, 3))
    Nq = Nkv * int(rng.integers(1, 4))
    D = int(rng.choice([16, 64, 96, 128, 256]))
    R = D if rng.random() < 0.6 else 2 * int(rng.integers(1, D // 2 + 1))
    style = ["neox", "interleaved"][int(rng.integers(2))]
    T, max_pos = int(rng.integers(1, 9)), 64
    H = (Nq + 2 * Nkv) * D
    eps = float(rng.choice([1e-6, 1e-5]))
    offset = bool(rng.random() < 0.3)
    x = orc.round_to(rng.standard_normal((T, H)) * 2, dt)
    qg, kg = (orc.round_to(rng.uniform(0.5, 1.5, D) - (1 if offset else 0), dt) for _ in range(2))
    beta = rng.random() < 0.4
    qb, kb = ((orc.round_to(rng.standard_normal(D) * 0.1, dt) for _ in range(2)) if beta else (None, None))
    csc = qkvfuse.build_cos_sin_cache(max_pos, R, theta=10000.0, dtype="float32")
    pos = rng.integers(0, max_pos, T)
    half = csc[pos]
    if style == "neox":
        cos, sin = np.concatenate([half[:, :R // 2]] * 2, 1), np.concatenate([half[:, R // 2:]] * 2, 1)
        cos_h, sin_h = cos, sin
    else:
        cos_h, sin_h = half[:, :R // 2], half[:, R // 2:]
    quant = ["none", "int8_sym", "fp8_e4m3"][seed % 3]
    blocks, bs = T + 1, 1
    slots = rng.permutation(blocks)[:T]
    scale = F32(0.037)

    store = lambda v: qkvfuse.TypedArray(orc.encode(v, dt), dt) if dt == "bfloat16" else v.astype(orc.STORAGE[dt])  # noqa
    cdt = {"none": dt, "int8_sym": "int8", "fp8_e4m3": "float8_e4m3fn"}[quant]
    cache = lambda: (qkvfuse.TypedArray(np.zeros((blocks, bs, Nkv, D), orc.STORAGE[cdt]), cdt)  # noqa: E731
                     if cdt in ("bfloat16", "float8_e4m3fn") else np.zeros((blocks, bs, Nkv, D), orc.STORAGE[cdt]))
    kc, vc = cache(), cache()
    sc = dict(k_scale=np.array([scale], F32), v_scale=np.array([scale], F32)) if quant != "none" else {}
    out = qkvfuse.run(store(x), num_q_heads=Nq, num_kv_heads=Nkv, head_dim=D, q_gamma=store(qg), k_gamma=store(kg),
                      q_beta=None if qb is None else store(qb), k_beta=None if kb is None else store(kb), eps=eps,
                      gamma_offset=offset, cos_sin_cache=csc, positions=pos, rope_style=style, k_cache=kc,
                      v_cache=vc, slot_mapping=slots, return_k=True, return_v=True, rounding="unfused_parity",
                      backend="reference", **sc)
    q, k, v = compose(x.astype(F32), Nq, Nkv, D, R, style, eps, qg.astype(F32), kg.astype(F32),
                      None if qb is None else qb.astype(F32), None if kb is None else kb.astype(F32), offset,
                      cos_h.astype(F32), sin_h.astype(F32), dt)

    def bits(a):
        return a.storage if isinstance(a, qkvfuse.TypedArray) else a

    for name, got, want in (("q", out.q, q), ("k", out.k, k), ("v", out.v, v)):
        want_bits = orc.encode(want.reshape(T, -1).astype(np.float64), dt)
        assert np.array_equal(bits(got).view(np.uint8), want_bits.view(np.uint8)), \
            "%s differs from the stage-by-stage composition (seed %d)" % (name, seed)
    # the caches hold quant(o) of the rounded k (and v as is)
    for name, got, src in (("k_cache", kc, k), ("v_cache", vc, v)):
        rows = bits(got)[slots, 0]
        t = src.astype(F32)
        if quant == "int8_sym":
            want_c = np.clip(np.rint(t / scale), -128, 127).astype(np.int8)
        elif quant == "fp8_e4m3":
            want_c = orc.encode((t / scale).astype(np.float64), "float8_e4m3fn")
        else:
            want_c = orc.encode(t.astype(np.float64), dt)
        assert np.array_equal(rows.view(np.uint8), want_c.view(np.uint8)), "%s differs (seed %d)" % (name, seed)
