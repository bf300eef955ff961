# SPDX-License-Identifier: Apache-2.0
"""The three named operators on NumPy arrays: against the float64 oracle, and
byte-identical to the core operator given the equivalent configuration."""
import math

import numpy as np
import pytest

import cases
import oracle as orc
import qkvfuse
from conftest import seeds

FLOATS = ("float32", "float16", "bfloat16")


def arr(values, dt):
    st = orc.encode(values, dt)
    return qkvfuse.TypedArray(st, dt) if dt in ("bfloat16", "float8_e4m3fn") else st


def val(x):
    if isinstance(x, qkvfuse.TypedArray):
        return orc.decode(x.storage, x.dtype)
    return orc.decode(x, x.dtype.name)


def bits(x):
    return (x.storage if isinstance(x, qkvfuse.TypedArray) else x).view(np.uint8)


def problem(**kw):
    base = dict(acc=None, ws=None, act=None, bias=None, q_gamma=None, k_gamma=None, q_beta=None, k_beta=None,
                eps=float(np.float32(1e-6)), gamma_offset=False, style="neox", source="cos_sin", cos_sin_cache=None,
                positions=None, cos=None, sin=None, theta=10000.0, scaling=None, parity=False)
    base.update(kw)
    return orc.Problem(**base)


@pytest.mark.parametrize("seed", seeds(24, 100))
def test_split_qkv_rmsnorm_rope(seed):
    rng = np.random.default_rng(seed)
    dt = FLOATS[seed % 3]
    Nkv = int(rng.integers(1, 3))
    Nq, D = Nkv * int(rng.integers(1, 5)), int(rng.choice([32, 64, 128, 96]))
    rope_dim = None if rng.random() < 0.5 else 2 * int(rng.integers(1, D // 2 + 1))
    R = rope_dim or D
    T, max_pos, H = int(rng.integers(0, 9)), 32, (Nq + 2 * Nkv) * D
    is_neox = bool(rng.random() < 0.6)
    with_bias = bool(rng.random() < 0.4)
    x = orc.round_to(rng.standard_normal((T, H)) * 2, dt)
    qw, kw = (orc.round_to(rng.uniform(0.5, 1.5, D), dt) for _ in range(2))
    qb, kb = (orc.round_to(rng.standard_normal(D) * 0.2, dt) for _ in range(2))
    ang = rng.uniform(-math.pi, math.pi, (max_pos, R // 2))
    csc = orc.round_to(np.concatenate([np.cos(ang), np.sin(ang)], 1), dt)
    pos = rng.integers(0, max_pos, T)
    eps = 1e-5
    args = (arr(x, dt), arr(qw, dt), arr(kw, dt), arr(csc, dt), pos.astype(np.int64))
    opt = dict(q_bias=arr(qb, dt) if with_bias else None, k_bias=arr(kb, dt) if with_bias else None)
    kwargs = dict(q_hidden_size=Nq * D, eps=eps, rope_dim=rope_dim, is_neox=is_neox, **opt)
    if seed % 2:  # give kv_hidden_size instead (q_hidden_size follows from the width)
        kwargs["kv_hidden_size"] = kwargs.pop("q_hidden_size")
        kwargs["kv_hidden_size"] = Nkv * D
    q, k, v = qkvfuse.split_qkv_rmsnorm_rope(*args, **kwargs)

    p = problem(T=T, Nq=Nq, Nkv=Nkv, D=D, R=R, x=x, q_gamma=qw, k_gamma=kw, q_beta=qb if with_bias else None,
                k_beta=kb if with_bias else None, eps=float(np.float32(eps)),
                style="neox" if is_neox else "interleaved", source="cos_sin_cache", cos_sin_cache=csc,
                positions=pos, io=dt)
    res = orc.chain(p)
    for name, got, key in (("q", q, "q"), ("k", k, "k"), ("v", v, "v")):
        lo, hi = orc.interval(*res[key], dt)
        orc.check_within(name, val(got).reshape(res[key][0].shape), lo, hi)

    core = qkvfuse.run(args[0], num_q_heads=Nq, num_kv_heads=Nkv, head_dim=D, q_gamma=args[1], k_gamma=args[2],
                       cos_sin_cache=args[3], positions=args[4], eps=eps,
                       rope_style="neox" if is_neox else "interleaved", return_k=True, return_v=True,
                       q_beta=opt["q_bias"], k_beta=opt["k_bias"], rotary_dim=rope_dim)
    for a, b in ((q, core.q), (k, core.k), (v, core.v)):
        assert np.array_equal(bits(a), bits(b))


def test_split_in_place_q_and_k():
    """q_out/k_out as the q/k column views of the input (vLLM's in-place form)."""
    rng = np.random.default_rng(3)
    Nq, Nkv, D, T = 4, 2, 64, 5
    H = (Nq + 2 * Nkv) * D
    x = rng.standard_normal((T, H)).astype(np.float32)
    g = np.ones(D, np.float32)
    csc = qkvfuse.build_cos_sin_cache(16, D)
    pos = np.arange(T)
    ref = qkvfuse.split_qkv_rmsnorm_rope(x, g, g, csc, pos, q_hidden_size=Nq * D)
    buf = x.copy()
    v_out = np.empty((T, Nkv * D), np.float32)
    qkvfuse.split_qkv_rmsnorm_rope(buf, g, g, csc, pos, q_hidden_size=Nq * D, q_out=buf[:, :Nq * D],
                                   k_out=buf[:, Nq * D:(Nq + Nkv) * D], v_out=v_out)
    assert np.array_equal(buf[:, :Nq * D], ref[0])
    assert np.array_equal(buf[:, Nq * D:(Nq + Nkv) * D], ref[1])
    assert np.array_equal(buf[:, (Nq + Nkv) * D:], x[:, (Nq + Nkv) * D:])


@pytest.mark.parametrize("seed", seeds(24, 200))
def test_qkv_rmsnorm_rope_cache(seed):
    rng = np.random.default_rng(seed)
    dt = ("float16", "bfloat16", "float32")[seed % 3]
    mode = ("PA_NZ", "PA_BNSD", "PA", "PA_BSND", None)[seed % 5]
    layout = {"PA_NZ": "nz", None: "nz", "PA_BNSD": "paged_hnd", "PA": "paged", "PA_BSND": "paged"}[mode]
    quant = ("int8_sym", "int8_asym", "none", "fp8_e4m3")[(seed // 3) % 4]
    Nkv = int(rng.integers(1, 3))
    Nq, D = Nkv * int(rng.integers(1, 4)), int(rng.choice([64, 128, 32]))
    B, S = int(rng.integers(1, 4)), int(rng.integers(1, 3))
    T, H = B * S, (Nq + 2 * Nkv) * D
    cdt = {"int8_sym": "int8", "int8_asym": "int8", "fp8_e4m3": "float8_e4m3fn", "none": dt}[quant]
    bs = int(rng.choice([4, 16]))
    blocks = -(-T // bs) + 1
    if layout == "nz":
        w = 32 // np.dtype(orc.STORAGE[cdt]).itemsize
        shape = (blocks, Nkv * D // w, bs, w)
    elif layout == "paged_hnd":
        shape = (blocks, Nkv, bs, D)
    else:
        shape = (blocks, bs, Nkv, D)
    init = cases._cache_init(rng, shape, cdt)
    kc, vc = arr(init, cdt), arr(init, cdt)
    x = orc.round_to(rng.standard_normal((T, H)) * 2, dt)
    qg, kg = (orc.round_to(rng.uniform(0.5, 1.5, D), dt) for _ in range(2))
    ang = rng.uniform(-math.pi, math.pi, (T, D // 2))
    cos = orc.round_to(np.concatenate([np.cos(ang)] * 2, 1), dt)
    sin = orc.round_to(np.concatenate([np.sin(ang)] * 2, 1), dt)
    index = np.where(rng.random(T) < 0.2, -1, rng.permutation(blocks * bs)[:T])
    sc = {}
    if quant != "none":
        lo, hi = (0.005, 0.05) if quant == "fp8_e4m3" else (0.02, 0.05)
        sc = dict(k_scale=rng.uniform(lo, hi, (Nkv, D)).astype(np.float32),
                  v_scale=rng.uniform(lo, hi, (Nkv, D)).astype(np.float32))
        if quant == "int8_asym":
            sc.update(k_offset=np.rint(rng.uniform(-9, 9, (Nkv, D))).astype(np.float32),
                      v_offset=np.rint(rng.uniform(-9, 9, (Nkv, D))).astype(np.float32))
    is_output_qkv = bool(seed % 2)
    out = qkvfuse.qkv_rmsnorm_rope_cache(arr(x, dt), arr(qg, dt), arr(kg, dt), arr(cos, dt), arr(sin, dt), index,
                                         kc, vc, head_nums=(Nq, Nkv, Nkv), qkv_size=(B, S, Nq + 2 * Nkv, D),
                                         cache_mode=mode, is_output_qkv=is_output_qkv, **sc)
    p = problem(T=T, Nq=Nq, Nkv=Nkv, D=D, R=D, x=x, q_gamma=qg, k_gamma=kg, cos=cos, sin=sin, io=dt)
    res = orc.chain(p)
    q = out[0] if is_output_qkv else out
    orc.check_within("q_out", val(q).reshape(T, Nq, D), *orc.interval(*res["q"], dt))
    if is_output_qkv:
        assert np.array_equal(bits(out[1]), bits(q)), "q_out_before_quant must equal q_out"
        orc.check_within("k_out_before_quant", val(out[2]).reshape(T, Nkv, D), *orc.interval(*res["k"], dt))
        orc.check_within("v_out_before_quant", val(out[3]).reshape(T, Nkv, D), *orc.interval(*res["v"], dt))
    dests = [None if s == -1 else divmod(int(s), bs) for s in index]
    for name, got, key in (("k_cache", kc, "k"), ("v_cache", vc, "v")):
        v, s = res[key]
        scale = sc[key + "_scale"].ravel().astype(np.float64) if sc else None
        off = sc[key + "_offset"].ravel().astype(np.float64) if quant == "int8_asym" else 0.0
        cases.check_cache(name, layout, Nkv, D, val(got), init, dests, v.reshape(T, -1), s.reshape(T, -1), quant,
                          cdt, None, scale, off)


@pytest.mark.parametrize("seed", seeds(24, 300))
def test_dequant_rope_quant_kvcache(seed):
    rng = np.random.default_rng(seed)
    int_input = seed % 2 == 0
    dt = ("float16", "bfloat16", "float32")[(seed // 2) % 3]
    page = (seed // 6) % 2 == 1
    Nkv = int(rng.integers(1, 3))
    Nq, D = Nkv * int(rng.integers(1, 4)), int(rng.choice([64, 128, 32]))
    B, S = int(rng.integers(1, 4)), int(rng.integers(1, 4))
    two_d = S == 1 and rng.random() < 0.5
    T, H = B * S, (Nq + 2 * Nkv) * D
    lead = (B,) if two_d else (B, S)
    if int_input:
        acc = rng.integers(-2 ** 14, 2 ** 14, (T, H)).astype(np.float64)
        ws = orc.round_to(rng.uniform(1e-4, 3e-4, H), "float32")
        act = orc.round_to(rng.uniform(0.5, 2, T), "float32") if rng.random() < 0.7 else None
        bias_dt = ("float32", "int32", dt)[seed % 3]
        bias = None
        if rng.random() < 0.7:
            bias = (np.rint(rng.uniform(-3, 3, H)) if bias_dt == "int32"
                    else orc.round_to(rng.standard_normal(H), bias_dt))
        x_in = acc.reshape(lead + (H,)).astype(np.int32)
        extra = dict(weight_scale=ws.astype(np.float32),
                     activation_scale=None if act is None else act.astype(np.float32),
                     bias=None if bias is None else arr(bias, bias_dt))
    else:
        xv = orc.round_to(rng.standard_normal((T, H)) * 2, dt)
        x_in, extra = arr(xv.reshape(lead + (H,)), dt), {}
        if rng.random() < 0.5:  # no effect with float x (the seed): not even their shapes are checked
            extra = dict(weight_scale=np.ones(3, np.float32), activation_scale=np.ones(2, np.float32),
                         bias=np.ones(1, np.int64))
    ang = rng.uniform(-math.pi, math.pi, (T, D // 2))
    cos = orc.round_to(np.concatenate([np.cos(ang)] * 2, 1), dt)
    sin = orc.round_to(np.concatenate([np.sin(ang)] * 2, 1), dt)
    cshape = (B, D) if two_d else (B, S, 1, D)
    if page:
        bs = 8
        blocks = -(-T // bs) + 1
        shape = (blocks, bs, Nkv, D)
        indices = np.where(rng.random(T) < 0.2, -1, rng.permutation(blocks * bs)[:T])
        dests = [None if s == -1 else divmod(int(s), bs) for s in indices]
    else:
        seq = S + 2
        shape = (B + 1, seq, Nkv, D)
        indices = np.where(rng.random(B) < 0.2, -1, rng.integers(0, seq - S + 1, B))
        dests = [None if indices[t // S] == -1 else (t // S, int(indices[t // S]) + t % S) for t in range(T)]
    init = cases._cache_init(rng, shape, "int8")
    kc, vc = init.astype(np.int8), init.astype(np.int8)
    sk, sv = (rng.uniform(0.02, 0.05, (Nkv, D)).astype(np.float32) for _ in range(2))
    asym = seed % 3 == 0
    ok_, ov = (np.rint(rng.uniform(-9, 9, Nkv * D)).astype(np.float32) for _ in range(2))
    kv_output = bool((seed // 4) % 2)
    q, k, v = qkvfuse.dequant_rope_quant_kvcache(
        x_in, arr(cos.reshape(cshape), dt), arr(sin.reshape(cshape), dt), kc, vc, indices.astype(np.int32), sk, sv,
        (Nq * D, Nkv * D, Nkv * D) if seed % 4 else None, offset_k=ok_ if asym else None,
        offset_v=ov if asym else None, kv_output=kv_output, cache_mode="page" if page else "contiguous", **extra)
    p = problem(T=T, Nq=Nq, Nkv=Nkv, D=D, R=D, x=None if int_input else xv, acc=acc if int_input else None,
                ws=ws if int_input else None, act=act if int_input else None, bias=bias if int_input else None,
                cos=cos, sin=sin, io=dt)
    res = orc.chain(p)
    assert tuple(q.shape) == lead + (Nq, D)
    orc.check_within("q", val(q).reshape(T, Nq, D), *orc.interval(*res["q"], dt))
    if kv_output:
        orc.check_within("k_out", val(k).reshape(T, Nkv, D), *orc.interval(*res["k"], dt))
        orc.check_within("v_out", val(v).reshape(T, Nkv, D), *orc.interval(*res["v"], dt))
    else:  # the seed's empty kOut / vOut
        assert k.shape == v.shape == (0,) + lead[1:] + (Nkv, D) and str(k.dtype) == str(q.dtype)
    mode = "int8_asym" if asym else "int8_sym"
    for name, got, key, scale, off in (("k_cache", kc, "k", sk, ok_), ("v_cache", vc, "v", sv, ov)):
        vv, ss = res[key]
        cases.check_cache(name, "paged" if page else "contiguous", Nkv, D, got.astype(np.float64), init, dests,
                          vv.reshape(T, -1), ss.reshape(T, -1), mode, "int8", None, scale.ravel().astype(np.float64),
                          off.astype(np.float64) if asym else 0.0)
