# SPDX-License-Identifier: Apache-2.0
"""The rounding modes that reproduce a seed's arithmetic, bit for bit, and the
named operators' strict option (python/README.md, "Rounding modes", "strict").

Each emulation below is written from the seed texts (shared/seeds: 000 the
vllm-ascend Triton kernel and its PyTorch composition, 001 and 003 the CANN
formulas) in NumPy float32, with every rounding the seed's code makes:

    000 Triton:  n = x * (1 / sqrt(sum(x^2) / D + eps)); y = bf16(n * w (+ b))
                 cos, sin = bf16(table row); o1 = bf16(bf16(x1*cos) - bf16(x2*sin)),
                 o2 = bf16(bf16(x2*cos) + bf16(x1*sin))
    000 torch:   y = io(x * inv * w); y = io(y + b); o = io(float32 RoPE)
    001 CANN:    rms = sqrt(mean(x^2) + eps); y = io((x / rms) * gamma);
                 o = io(y * cos + cat(-y2, y1) * sin); caches quantize o (and v)
    003 CANN:    x = io(float(acc) * weight_scale * act_scale + bias) for int32;
                 o = io(k * cos + rotate(k) * sin); caches quantize o (and v)

The one choice a text leaves open, the order of the sum of squares, is the
library's documented one: exact (float64, rounded once to float32) for
ascend_triton and cann, sequential float32 for unfused_parity.
"""
import math

import numpy as np
import pytest

import oracle as orc
import qkvfuse
from conftest import requires_torch, seeds
from qkvfuse import errors

F32 = np.float32


def arr(values, dt):
    st = orc.encode(values, dt)
    return qkvfuse.TypedArray(st, dt) if dt in ("bfloat16", "float8_e4m3fn") else st


def bits(x):
    return (x.storage if isinstance(x, qkvfuse.TypedArray) else np.asarray(x)).view(np.uint8)


def rnd(a, dt):
    """float32 values rounded to dt (ties to even), as float32."""
    return orc.round_to(np.asarray(a, F32).astype(np.float64), dt).astype(F32)


def sum_exact(x):
    """float32 squares, summed exactly (float64) and rounded once to float32."""
    return (x * x).astype(np.float64).sum(-1).astype(F32)


def sum_sequential(x):
    s = np.zeros(x.shape[:-1], F32)
    for d in range(x.shape[-1]):
        s = s + x[..., d] * x[..., d]
    return s


def pairs(R, neox):
    """Indices of the first and second member of each rotated pair."""
    if neox:
        return np.arange(R // 2), np.arange(R // 2) + R // 2
    return np.arange(0, R, 2), np.arange(1, R, 2)


def quant8(v, scale, offset):
    """CANN: Div by the scale, Add the offset (asymmetric), CAST_RINT, saturate."""
    q = v.astype(F32) / scale.astype(F32)
    if offset is not None:
        q = q + offset.astype(F32)
    return np.clip(np.rint(q), -128, 127).astype(np.int8)


def same(got, want, name, dt):
    g, w = bits(got).reshape(-1), orc.encode(np.asarray(want, np.float64).reshape(-1), dt).view(np.uint8)
    es = np.dtype(orc.STORAGE[dt]).itemsize
    diff = np.flatnonzero((g.reshape(-1, es) != w.reshape(-1, es)).any(1))
    assert diff.size == 0, "%s: %d of %d elements differ; first [%d]" % (name, diff.size, g.size // es, diff[0])


# ---- seed 000: split_qkv_rmsnorm_rope ---------------------------------------------------------

def triton_heads(x, w, b, c_half, s_half, R, neox, eps):
    """x [T, n, D] float32; c_half, s_half [T, R/2] as the table holds them."""
    D = x.shape[-1]
    ms = sum_exact(x) / F32(D)
    rstd = F32(1) / np.sqrt(ms + F32(eps))
    n = x * rstd[..., None]
    v = n * w
    if b is not None:
        v = v + b
    y = rnd(v, "bfloat16")
    o = y.copy()
    c, s = rnd(c_half, "bfloat16")[:, None, :], rnd(s_half, "bfloat16")[:, None, :]
    i1, i2 = pairs(R, neox)
    x1, x2 = y[..., i1], y[..., i2]
    o[..., i1] = rnd(rnd(x1 * c, "bfloat16") - rnd(x2 * s, "bfloat16"), "bfloat16")
    o[..., i2] = rnd(rnd(x2 * c, "bfloat16") + rnd(x1 * s, "bfloat16"), "bfloat16")
    return o


def composition_heads(x, w, b, c_half, s_half, R, neox, eps, io):
    """npu_rms_norm (stored), + bias (stored), npu_rotary_embedding (float32, stored)."""
    D = x.shape[-1]
    inv = F32(1) / np.sqrt(sum_sequential(x) / F32(D) + F32(eps))
    y = rnd(x * inv[..., None] * w, io)
    if b is not None:
        y = rnd(y + b, io)
    o = y.copy()
    c, s = c_half[:, None, :], s_half[:, None, :]
    i1, i2 = pairs(R, neox)
    x1, x2 = y[..., i1], y[..., i2]
    o[..., i1] = rnd(x1 * c - x2 * s, io)
    o[..., i2] = rnd(x2 * c + x1 * s, io)
    return o


def split_case(rng, dt, T, Nq, Nkv, D, R, neox, bias, table_dt, out_dt):
    H = (Nq + 2 * Nkv) * D
    max_pos = int(rng.integers(1, 200))
    x = orc.round_to(rng.standard_normal((T, H)) * float(rng.choice([0.1, 1.0, 8.0])), dt)
    qw, kw = (orc.round_to(rng.uniform(0.5, 1.5, D), dt) for _ in range(2))
    qb, kb = (orc.round_to(rng.standard_normal(D) * 0.2, dt) for _ in range(2))
    csc = orc.round_to(rng.uniform(-1, 1, (max_pos, R)), table_dt)
    pos = rng.integers(0, max_pos, T)
    return dict(x=x, qw=qw, kw=kw, qb=qb if bias else None, kb=kb if bias else None, csc=csc, pos=pos, H=H)


@pytest.mark.parametrize("mode", ["ascend_triton", "unfused_parity"])
@pytest.mark.parametrize("seed", seeds(16, 4100))
def test_split_seed_modes_bit_identical(seed, mode):
    rng = np.random.default_rng(seed)
    dt = ["bfloat16", "bfloat16", "float16", "float32"][seed % 4]
    out_dt = dt if rng.random() < 0.8 else "float32"
    Nkv = int(rng.integers(1, 4))
    Nq = Nkv * int(rng.integers(1, 5))
    D = int(rng.choice([16, 40, 64, 96, 128, 192, 256]))
    R = D if rng.random() < 0.5 else 2 * int(rng.integers(1, D // 2 + 1))
    T = int(rng.integers(0, 30))
    neox, bias = bool(rng.random() < 0.7), bool(rng.random() < 0.5)
    table_dt = ["bfloat16", "float32", "float16"][int(rng.integers(3))]
    eps = [1e-6, 1e-5][seed % 2]
    c = split_case(rng, dt, T, Nq, Nkv, D, R, neox, bias, table_dt, out_dt)
    q, k, v = qkvfuse.split_qkv_rmsnorm_rope(
        arr(c["x"], dt), arr(c["qw"], dt), arr(c["kw"], dt), arr(c["csc"], table_dt), c["pos"].astype(np.int64),
        q_hidden_size=Nq * D, eps=eps, rope_dim=R, is_neox=neox,
        q_bias=None if c["qb"] is None else arr(c["qb"], dt), k_bias=None if c["kb"] is None else arr(c["kb"], dt),
        out_dtype=None if out_dt == dt else out_dt, rounding=mode)
    x = c["x"].astype(F32).reshape(T, Nq + 2 * Nkv, D)
    row = c["csc"].astype(F32)[c["pos"]]
    ch, sh = row[:, :R // 2], row[:, R // 2:]
    outs = []
    for lo, hi, w, b in ((0, Nq, c["qw"], c["qb"]), (Nq, Nq + Nkv, c["kw"], c["kb"])):
        w, b = w.astype(F32), None if b is None else b.astype(F32)
        if mode == "ascend_triton":
            outs.append(triton_heads(x[:, lo:hi], w, b, ch, sh, R, neox, eps))
        else:
            outs.append(composition_heads(x[:, lo:hi], w, b, ch, sh, R, neox, eps, out_dt))
    same(q, outs[0], "q", out_dt)
    same(k, outs[1], "k", out_dt)
    same(v, x[:, Nq + Nkv:], "v", out_dt)


def test_worked_example():
    """D = R = 16, bfloat16, gamma 1, row 45 of a theta-10000 table: q[0] is
    1.9296875 in the Triton kernel's arithmetic, 1.9375 with one rounding of
    the float32 RoPE, 1.93699 exactly."""
    head = np.array([4, 1, 2, 4, 1, 2, 3, -2, -4, -2, -2, 3, 4, -4, 0, 3], np.float64)
    x = np.tile(head, 3)[None, :]
    g = np.ones(16)
    csc = qkvfuse.build_cos_sin_cache(46, 16, dtype="bfloat16")
    pos = np.array([45])
    got = {}
    for mode in ("ascend_triton", "fused", "unfused_parity"):
        q, _, _ = qkvfuse.split_qkv_rmsnorm_rope(arr(x, "bfloat16"), arr(g, "bfloat16"), arr(g, "bfloat16"), csc,
                                                 pos, q_hidden_size=16, rounding=mode)
        got[mode] = orc.decode(q.storage, "bfloat16")[0, 0]
    assert got == {"ascend_triton": 1.9296875, "fused": 1.9375, "unfused_parity": 1.9375}
    c, s = orc.decode(csc.storage, "bfloat16")[45, :8], orc.decode(csc.storage, "bfloat16")[45, 8:]
    y = head / math.sqrt(np.mean(head ** 2) + 1e-6)
    assert abs(y[0] * c[0] - y[8] * s[0] - 1.93699) < 1e-5


# ---- seed 001: qkv_rmsnorm_rope_cache ---------------------------------------------------------

def cann_heads(x, g, cos, sin, eps, io):
    """x [T, n, D]; cos, sin [T, D] full length (the seed's half-and-half RoPE)."""
    D, h = x.shape[-1], x.shape[-1] // 2
    rms = np.sqrt(sum_exact(x) / F32(D) + F32(eps))
    y = rnd((x / rms[..., None]) * g, io)
    y_rope = np.concatenate([-y[..., h:], y[..., :h]], -1)
    return rnd(y * cos[:, None, :] + y_rope * sin[:, None, :], io)


def nz_offsets(slots, W, bs, c):
    """Element offsets of row element j of each token's slot in [blocks, W/c, bs, c]."""
    j = np.arange(W)
    s = slots[:, None]
    return ((s // bs * (W // c) + j // c) * bs + s % bs) * c + j % c


@pytest.mark.parametrize("seed", seeds(40, 4300))
def test_qkv_rmsnorm_rope_cache_cann_bit_identical(seed):
    rng = np.random.default_rng(seed)
    dt = ["bfloat16", "float16"][seed % 2]
    Nkv = int(rng.integers(1, 3))
    Nq, D = Nkv * int(rng.integers(1, 4)), int(rng.choice([32, 64, 128, 128, 192]))
    B, S = int(rng.integers(1, 4)), int(rng.integers(0, 12))
    T, N, W = B * S, Nq + 2 * Nkv, Nkv * D
    kq, vq = ["none", "sym", "asym"][int(rng.integers(3))], ["none", "sym", "asym"][int(rng.integers(3))]
    bs = int(rng.choice([16, 32]))
    blocks = T // bs + 2
    eps = [1e-6, 1e-5][seed % 2]
    x = orc.round_to(rng.standard_normal((T, N * D)) * float(rng.choice([0.1, 1.0, 8.0])), dt)
    qg, kg = (orc.round_to(rng.uniform(0.5, 1.5, D), dt) for _ in range(2))
    cos, sin = (orc.round_to(rng.uniform(-1, 1, (T, D)), dt) for _ in range(2))
    slots = rng.permutation(blocks * bs)[:T]
    slots = np.where(rng.random(T) < 0.15, -1, slots).astype(np.int64)
    caches, scales = {}, {}
    for name, mode in (("k", kq), ("v", vq)):
        cdt = "int8" if mode != "none" else dt
        c = 32 // np.dtype(orc.STORAGE[cdt]).itemsize
        caches[name] = (cdt, c, arr(np.zeros((blocks, W // c, bs, c)), cdt))
        if cdt == "bfloat16":
            caches[name][2].storage[...] = 0x5A5A
        else:
            caches[name][2][...] = 0x5A if cdt == "int8" else 7
        scales[name] = (rng.uniform(0.005, 0.08, (Nkv, D)).astype(F32) if mode != "none" else None,
                        rng.uniform(-20, 20, (Nkv, D)).astype(F32) if mode == "asym" else None)
    before = {n: bits(caches[n][2]).copy() for n in caches}
    q, qb, kb, vb = qkvfuse.qkv_rmsnorm_rope_cache(
        arr(x, dt), arr(qg, dt), arr(kg, dt), arr(cos, dt), arr(sin, dt), slots, caches["k"][2], caches["v"][2],
        head_nums=(Nq, Nkv, Nkv), qkv_size=(B, S, N, D), k_scale=scales["k"][0], v_scale=scales["v"][0],
        k_offset=scales["k"][1], v_offset=scales["v"][1], epsilon=eps, is_output_qkv=True, rounding="cann")
    xs = x.astype(F32).reshape(T, N, D)
    cf, sf = cos.astype(F32), sin.astype(F32)
    oq = cann_heads(xs[:, :Nq], qg.astype(F32), cf, sf, eps, dt)
    ok = cann_heads(xs[:, Nq:Nq + Nkv], kg.astype(F32), cf, sf, eps, dt)
    ov = xs[:, Nq + Nkv:]
    same(q, oq, "q_out", dt)
    same(qb, oq, "q_out_before_quant", dt)
    same(kb, ok, "k_out_before_quant", dt)
    same(vb, ov, "v_out_before_quant", dt)
    live = slots >= 0
    for name, rows_in in (("k", ok.reshape(T, W)), ("v", ov.reshape(T, W))):
        cdt, c, cache = caches[name]
        sc, off = scales[name]
        want = before[name].copy().view(orc.STORAGE[cdt]).reshape(-1)
        offs = nz_offsets(slots[live], W, bs, c)
        vals = rows_in[live]
        if cdt == "int8":
            want[offs] = quant8(vals, sc.reshape(-1)[None, :], None if off is None else off.reshape(-1)[None, :])
        else:
            want[offs] = orc.encode(vals.astype(np.float64), cdt)
        assert np.array_equal(bits(cache).reshape(-1), want.view(np.uint8)), "%s_cache differs (seed %d)" % (name, seed)
    # item 2 of the seed: the cache quantizes what k_out_before_quant holds
    if caches["k"][0] == "int8":
        kbv = orc.decode(bits(kb).view(orc.STORAGE[dt]), dt).astype(F32).reshape(T, W)[live]
        offs = nz_offsets(slots[live], W, bs, 32)
        want = quant8(kbv, scales["k"][0].reshape(-1)[None, :],
                      None if scales["k"][1] is None else scales["k"][1].reshape(-1)[None, :])
        assert np.array_equal(bits(caches["k"][2]).view(np.int8).reshape(-1)[offs], want)


# ---- seed 003: dequant_rope_quant_kvcache -----------------------------------------------------

@pytest.mark.parametrize("seed", seeds(20, 4500))
def test_dequant_rope_quant_kvcache_cann_bit_identical(seed):
    rng = np.random.default_rng(seed)
    xdt = ["bfloat16", "float16", "int32", "int32"][seed % 4]
    io = xdt if xdt != "int32" else ["bfloat16", "float16"][int(rng.integers(2))]
    Nkv = int(rng.integers(1, 3))
    Nq, D = Nkv * int(rng.integers(1, 4)), int(rng.choice([16, 32, 48, 64, 128, 200]))
    three, page = bool(rng.random() < 0.6), bool(rng.random() < 0.5)
    B = int(rng.integers(1, 4))
    S = int(rng.integers(1, 8)) if three else 1
    T, H, W = B * S, (Nq + 2 * Nkv) * D, Nkv * D
    kasym, vasym, kv_output = (bool(rng.random() < 0.5) for _ in range(3))
    act, bias_dt = None, None
    if xdt == "int32":
        x = rng.integers(-30000, 30000, (T, H)).astype(np.int32)
        ws = rng.uniform(1e-4, 3e-4, H).astype(F32)
        act = rng.uniform(0.5, 2, T).astype(F32) if rng.random() < 0.5 else None
        bias_dt = [None, "float32", "float16", "bfloat16", "int32"][int(rng.integers(5))]
        bias = (None if bias_dt is None else rng.integers(-3, 4, H).astype(np.int32) if bias_dt == "int32"
                else orc.round_to(rng.standard_normal(H) * 0.5, bias_dt))
    else:
        x = orc.round_to(rng.standard_normal((T, H)) * float(rng.choice([0.1, 1.0, 8.0])), xdt)
        ws = bias = None
    cos, sin = (orc.round_to(rng.uniform(-1, 1, (T, D)), io) for _ in range(2))
    xshape = (B, S, H) if three else (B, H)
    cshape = (B, S, 1, D) if three else (B, D)
    if page:
        C1, C2 = T // 8 + 2, 8
        indices = rng.permutation(C1 * C2)[:T].astype(np.int32)
    else:
        C1, C2 = B + int(rng.integers(0, 2)), S + int(rng.integers(0, 6))
        indices = rng.integers(0, C2 - S + 1, B).astype(np.int32)
    kc = np.full((C1, C2, Nkv, D), 0x5A, np.int8)
    vc = kc.copy()
    sk, sv = (rng.uniform(0.005, 0.08, (Nkv, D)).astype(F32) for _ in range(2))
    ok_, ov_ = (rng.uniform(-20, 20, (Nkv, D)).astype(F32) for _ in range(2))
    xin = x.reshape(xshape) if xdt == "int32" else arr(x.reshape(xshape), xdt)
    q, k, v = qkvfuse.dequant_rope_quant_kvcache(
        xin, arr(cos.reshape(cshape), io), arr(sin.reshape(cshape), io), kc, vc, indices, sk, sv,
        offset_k=ok_ if kasym else None, offset_v=ov_ if vasym else None, weight_scale=ws,
        activation_scale=act, bias=None if bias is None else (bias if bias_dt == "int32" else arr(bias, bias_dt)),
        kv_output=kv_output, cache_mode="page" if page else "contiguous", rounding="cann")
    if xdt == "int32":  # Cast, Mul, Muls, Add in float32; a tensor of the output dtype
        xf = x.astype(F32) * ws[None, :]
        if act is not None:
            xf = xf * act[:, None]
        if bias is not None:
            xf = xf + bias.astype(F32)[None, :]
        xf = rnd(xf, io)
    else:
        xf = x.astype(F32)
    xf = xf.reshape(T, Nq + 2 * Nkv, D)
    cf, sf = cos.astype(F32)[:, None, :], sin.astype(F32)[:, None, :]
    h = D // 2
    rot = np.concatenate([xf[..., h:], xf[..., :h]], -1)
    sg = np.concatenate([-sf[..., :h], sf[..., h:]], -1)
    o = rnd(xf * cf + rot * sg, io)  # two Muls and an Add, sin's first half negated
    oq, ok, ov = o[:, :Nq], o[:, Nq:Nq + Nkv], xf[:, Nq + Nkv:]
    same(q, oq, "q_out", io)
    if kv_output:
        same(k, ok, "k_out", io)
        same(v, ov, "v_out", io)
    if page:
        blk, row = indices // C2, indices % C2
    else:
        t = np.arange(T)
        blk, row = t // S, indices[t // S] + t % S
    for name, cache, vals, sc, off in (("k", kc, ok, sk, ok_ if kasym else None),
                                       ("v", vc, ov, sv, ov_ if vasym else None)):
        want = np.full_like(cache, 0x5A)
        want[blk, row] = quant8(vals, sc[None], None if off is None else off[None])
        assert np.array_equal(cache, want), "%s_cache differs (seed %d)" % (name, seed)


# ---- strict --------------------------------------------------------------------------------------

def seed001_call(mut=None):
    """A QkvRmsNormRopeCache call within every stated constraint (bfloat16,
    D = 128, PA_NZ, int8 caches of block_size 32, [Nk, D] scales, int64 index
    without repeats), or with one broken."""
    rng = np.random.default_rng(7)
    Nq, Nkv, D, B, S, bs, blocks = 2, 1, 128, 2, 5, 32, 2
    if mut == "D":
        D = 64
    if mut == "block_size":
        bs = 16
    if mut == "block_num":
        S, blocks = 40, 3  # 80 tokens fit 96 slots, but ceil(40 / 32) * 2 = 4 blocks
    T, W = B * S, Nkv * D
    dt = "float32" if mut == "qkv" else "bfloat16"
    x = orc.round_to(rng.standard_normal((T, (Nq + 2 * Nkv) * D)), dt)
    g = orc.round_to(rng.uniform(0.5, 1.5, D), dt)
    cs = orc.round_to(rng.uniform(-1, 1, (T, D)), dt)
    index = np.arange(T, dtype=np.int64)
    index[::4] = -1  # -1 may repeat
    if mut == "repeat":
        index[3] = index[1]
    kw = dict(head_nums=(Nq, Nkv, Nkv), qkv_size=(B, S, Nq + 2 * Nkv, D), k_scale=np.full((Nkv, D), 0.02, F32),
              v_scale=np.full((Nkv, D), 0.02, F32), cache_mode="PA_NZ", is_output_qkv=True)
    if mut == "scale_shape":
        kw["k_scale"] = kw["k_scale"].reshape(-1)
    if mut == "index_dtype":
        index = index.astype(np.int32)
    gdt = "float32" if mut == "gamma" else dt
    cdt = "float32" if mut == "cos" else dt
    kc = np.zeros((blocks, W // 32, bs, 32), np.int8)
    vc = (arr(np.zeros((blocks, W // 16, bs, 16)), "float16") if mut == "v_cache"
          else np.zeros((blocks, W // 32, bs, 32), np.int8))
    if mut == "v_cache":
        kw["v_scale"] = None
    args = (arr(x, dt), arr(g, gdt), arr(g, dt), arr(cs, cdt), arr(cs, cdt), index, kc, vc)
    return args, kw


def seed003_call(mut=None):
    """A DequantRopeQuantKvcache call within every stated constraint (bfloat16
    [B, S, H], H = 384, [B, S, 1, D] cos/sin, int8 page caches, int32 indices
    >= 0 without repeats, [Nkv, D] scales), or with one broken."""
    rng = np.random.default_rng(9)
    Nq, Nkv, D, B, S, mode = 4, 1, 64, 2, 3, "page"
    if mut == "H_big":
        Nq = 64  # H = 66 * 64 = 4224
    if mut == "H_align":
        Nq, D = 1, 80  # H = 240
    T, H = B * S, (Nq + 2 * Nkv) * D
    dt = "float32" if mut == "x" else "bfloat16"
    x = arr(orc.round_to(rng.standard_normal((B, S, H)), dt), dt)
    cdt = "float16" if mut == "cos" else dt
    cs = arr(orc.round_to(rng.uniform(-1, 1, (B, S, 1, D)), cdt), cdt)
    kc = np.zeros((2, 8, Nkv, D), np.int8)
    vc = kc.copy()
    indices = (2 * np.arange(T) + 1).astype(np.int32)
    if mut == "negative":
        indices[2] = -1
    if mut == "repeat":
        indices[4] = indices[0]
    if mut == "contiguous_same_start":
        mode, kc, vc = "contiguous", np.zeros((B, S + 2, Nkv, D), np.int8), np.zeros((B, S + 2, Nkv, D), np.int8)
        indices = np.ones(B, np.int32)
    sk = np.full((Nkv, D), 0.02, F32)
    return (x, cs, cs, kc, vc, indices, sk, sk.copy()), dict(kv_output=True, cache_mode=mode)


STRICT_ROWS = [
    # (operator, mutation, exception, the argument the message names)
    ("001", "repeat", errors.InvalidValueError, "index"),
    ("001", "index_dtype", errors.DtypeError, "index"),
    ("001", "D", errors.InvalidValueError, "qkv_size"),
    ("001", "block_size", errors.ShapeError, "k_cache"),
    ("001", "block_num", errors.ShapeError, "k_cache"),
    ("001", "qkv", errors.DtypeError, "qkv"),
    ("001", "gamma", errors.DtypeError, "q_gamma"),
    ("001", "cos", errors.DtypeError, "cos"),
    ("001", "v_cache", errors.DtypeError, "v_cache"),
    ("001", "scale_shape", errors.ShapeError, "k_scale"),
    ("003", "repeat", errors.InvalidValueError, "indices"),
    ("003", "negative", errors.OutOfRangeError, "indices"),
    ("003", "H_big", errors.ShapeError, "x"),
    ("003", "H_align", errors.ShapeError, "x"),
    ("003", "x", errors.DtypeError, "x"),
    ("003", "cos", errors.DtypeError, "cos"),
]


def refused(exc, name, seed, fn, *args, **kw):
    """fn(*args, **kw) raises exc with a message naming `name` and citing the seed."""
    with pytest.raises(exc) as e:
        fn(*args, **kw)
    msg = e.value.message
    assert msg.startswith(name) and msg[len(name)] in ":[ ." and ("strict: seed %s" % seed) in msg, msg


def call_op(op, mut, strict):
    if op == "001":
        args, kw = seed001_call(mut)
        return args, qkvfuse.qkv_rmsnorm_rope_cache(*args, strict=strict, **kw)
    args, kw = seed003_call(mut)
    return args, qkvfuse.dequant_rope_quant_kvcache(*args, strict=strict, **kw)


@pytest.mark.parametrize("op", ["001", "003"])
def test_strict_accepts_the_seed_call(op):
    a0, r0 = call_op(op, None, False)
    a1, r1 = call_op(op, None, True)
    for x, y in zip(a0 + tuple(r0), a1 + tuple(r1)):
        assert np.array_equal(bits(x), bits(y))
    if op == "003":
        call_op(op, "contiguous_same_start", True)  # contiguous mode: no uniqueness rule


@pytest.mark.parametrize("op,mut,exc,name", STRICT_ROWS)
def test_strict_rows(op, mut, exc, name):
    call_op(op, mut, False)  # the library computes the call: strict is off by default
    args, kw = (seed001_call if op == "001" else seed003_call)(mut)
    fn = qkvfuse.qkv_rmsnorm_rope_cache if op == "001" else qkvfuse.dequant_rope_quant_kvcache
    caches = [bits(a).copy() for a in args[6:8]] if op == "001" else [a.copy() for a in args[3:5]]
    refused(exc, name, op, fn, *args, strict=True, **kw)
    now = [bits(a) for a in args[6:8]] if op == "001" else list(args[3:5])
    for before, after in zip(caches, now):
        assert np.array_equal(before, after), "refused, yet a cache changed"


def test_strict_split():
    rng = np.random.default_rng(11)
    T, Nq, Nkv, D = 3, 2, 1, 64
    x = orc.round_to(rng.standard_normal((T, (Nq + 2 * Nkv) * D)), "bfloat16")
    g = np.ones(D)
    csc = qkvfuse.build_cos_sin_cache(8, D, dtype="bfloat16")
    pos = np.arange(T)
    base = dict(q_hidden_size=Nq * D, rounding="ascend_triton")
    qkvfuse.split_qkv_rmsnorm_rope(arr(x, "bfloat16"), arr(g, "bfloat16"), arr(g, "bfloat16"), csc, pos, strict=True,
                                   **base)
    split = qkvfuse.split_qkv_rmsnorm_rope
    xb, gb = arr(x, "bfloat16"), arr(g, "bfloat16")
    refused(errors.InvalidValueError, "is_neox", "000", split, xb, gb, gb, csc, pos, is_neox=False, strict=True,
            **base)
    g16 = g.astype(np.float16)
    refused(errors.DtypeError, "input", "000", split, x.astype(np.float16), g16, g16, csc, pos, strict=True, **base)
    refused(errors.DtypeError, "cos_sin_cache", "000", split, xb, gb, gb, qkvfuse.build_cos_sin_cache(8, D), pos,
            strict=True, **base)
    refused(errors.DtypeError, "q_out", "000", split, xb, gb, gb, csc, pos, out_dtype="float32", strict=True, **base)
    # each call above is one the library computes: strict is off by default
    split(xb, gb, gb, csc, pos, is_neox=False, **base)


def test_rounding_argument_checked():
    x = np.zeros((1, 3 * 16), np.float32)
    g = np.ones(16, np.float32)
    with pytest.raises(errors.InvalidValueError) as e:
        qkvfuse.split_qkv_rmsnorm_rope(x, g, g, qkvfuse.build_cos_sin_cache(2, 16), np.zeros(1, np.int64),
                                       q_hidden_size=16, rounding="triton")
    assert e.value.message.startswith("rounding: ")


# ---- the torch bindings: the same modes and checks through torch.ops.qkvfuse ----------------------

@requires_torch
def test_torch_seed_modes_and_strict():
    import torch
    args, kw = seed001_call()
    t = [torch.from_numpy(bits(a).view(np.int16).copy()).view(torch.bfloat16) if isinstance(a, qkvfuse.TypedArray)
         else torch.from_numpy(np.asarray(a).copy()) for a in args]
    tkw = dict(kw, k_scale=torch.from_numpy(kw["k_scale"]), v_scale=torch.from_numpy(kw["v_scale"]))
    for strict in (False, True):
        q, qb, kb, vb = qkvfuse.qkv_rmsnorm_rope_cache(*t, rounding="cann", strict=strict, **tkw)
        # the NumPy path's bytes
        na, nkw = seed001_call()
        nq, _, nkb, _ = qkvfuse.qkv_rmsnorm_rope_cache(*na, rounding="cann", strict=strict, **nkw)
        assert np.array_equal(q.view(torch.int16).numpy().view(np.uint8), bits(nq))
        assert np.array_equal(kb.view(torch.int16).numpy().view(np.uint8), bits(nkb))
        assert np.array_equal(t[6].numpy(), na[6])
    # straight through the operator (the schema's last two arguments)
    out = torch.ops.qkvfuse.qkv_rmsnorm_rope_cache(*t[:8], tkw["k_scale"], tkw["v_scale"], None, None,
                                                   list(kw["head_nums"]), list(kw["qkv_size"]), 1e-6, "PA_NZ", True,
                                                   None, "cann", True)
    assert torch.equal(out[0], q)
    bad = t[5].clone()
    bad[3] = bad[1]
    refused(errors.InvalidValueError, "index", "001", qkvfuse.qkv_rmsnorm_rope_cache, *t[:5], bad, *t[6:],
            rounding="cann", strict=True, **tkw)
    with pytest.raises(Exception, match="rounding"):
        torch.ops.qkvfuse.qkv_rmsnorm_rope_cache(*t[:8], tkw["k_scale"], tkw["v_scale"], None, None,
                                                 list(kw["head_nums"]), list(kw["qkv_size"]), 1e-6, "PA_NZ", True,
                                                 None, "bogus", False)
    # seed 000 on torch: ascend_triton, the NumPy path's bytes
    rng = np.random.default_rng(5)
    x = orc.round_to(rng.standard_normal((4, 4 * 64)), "bfloat16")
    g = orc.round_to(rng.uniform(0.5, 1.5, 64), "bfloat16")
    csc = qkvfuse.build_cos_sin_cache(16, 64, dtype="bfloat16")
    pos = np.array([1, 5, 9, 15])
    nq = qkvfuse.split_qkv_rmsnorm_rope(arr(x, "bfloat16"), arr(g, "bfloat16"), arr(g, "bfloat16"), csc, pos,
                                        q_hidden_size=128, rounding="ascend_triton")[0]
    tb = lambda a: torch.from_numpy(bits(a).view(np.int16).copy()).view(torch.bfloat16)  # noqa: E731
    tq = qkvfuse.split_qkv_rmsnorm_rope(tb(arr(x, "bfloat16")), tb(arr(g, "bfloat16")), tb(arr(g, "bfloat16")),
                                        tb(csc), torch.from_numpy(pos), q_hidden_size=128, rounding="ascend_triton",
                                        strict=True)[0]
    assert np.array_equal(tq.view(torch.int16).numpy().view(np.uint8), bits(nq))
