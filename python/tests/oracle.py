# SPDX-License-Identifier: Apache-2.0
"""An independent float64 oracle of docs/SPEC.md, in NumPy.

Written from SPEC.md and qkvfuse.h only (it shares nothing with the C test
kit or the package): its own number formats, its own RoPE frequency rules,
its own cache index maps.

Each stage returns the float64 value ``v`` the formulas give and a slack
``s``: a bound on how far a correct float32 evaluation (any summation order,
no FMA needed) may stray from ``v`` before the output's final rounding. A
result passes when it lies in ``[R(v - 2s), R(v + 2s)]`` with R the output's
rounding (and, in unfused-parity mode, the I/O dtype's rounding first): a
correct float32 evaluation followed by one round-to-nearest-even lands there;
a wrong partner, sign, scale, layout or a truncating rounding does not.
"""
import math

import numpy as np

U = 2.0 ** -24  # float32 unit roundoff

# ---- number formats: (significand bits incl. the leading one, min normal exponent, max finite, saturating)
FORMATS = {
    "float32": (24, -126, float(np.finfo(np.float32).max), False),
    "float16": (11, -14, 65504.0, False),
    "bfloat16": (8, -126, float.fromhex("0x1.fep127"), False),
    "float8_e4m3fn": (4, -6, 448.0, True),
    "float8_e5m2": (3, -14, 57344.0, True),  # the quantizers saturate (Inf included), qkvfuse.h
}
STORAGE = {"float32": np.float32, "float16": np.float16, "bfloat16": np.uint16, "float8_e4m3fn": np.uint8,
           "float8_e5m2": np.uint8, "int8": np.int8, "int32": np.int32, "int64": np.int64}


def round_to(x, fmt):
    """float64 -> nearest value of fmt (ties to even), as float64. Overflow:
    inf, or the max finite value for saturating formats. NaN stays NaN."""
    if fmt == "float64":
        return np.asarray(x, np.float64)
    p, emin, fmax, sat = FORMATS[fmt]
    x = np.asarray(x, np.float64)
    ax = np.abs(x)
    with np.errstate(divide="ignore", invalid="ignore"):
        e = np.floor(np.log2(np.where(ax > 0, ax, 1.0)))
    # log2 may be off by one near powers of two: fix with exact comparisons
    e = np.where(np.ldexp(1.0, e.astype(np.int64)) > ax, e - 1, e)
    e = np.where(np.ldexp(1.0, (e + 1).astype(np.int64)) <= ax, e + 1, e)
    q = (np.maximum(e, emin) - (p - 1)).astype(np.int64)
    r = np.ldexp(np.rint(np.ldexp(np.where(np.isfinite(x), x, 0.0), -q)), q)
    with np.errstate(invalid="ignore"):
        over = np.abs(r) > fmax
        r = np.where(over, np.sign(x) * (fmax if sat else np.inf), r)
        r = np.where(np.isfinite(x), r, (np.sign(x) * fmax) if sat else x)
    return np.where(np.isnan(x), np.nan, r)


def ulp(a, fmt):
    """Spacing of fmt at magnitude a (>= 0): one unit in the last place."""
    if fmt == "float64":
        return np.spacing(np.abs(a))
    p, emin, _, _ = FORMATS[fmt]
    a = np.asarray(a, np.float64)
    with np.errstate(divide="ignore"):
        e = np.floor(np.log2(np.where(a > 0, a, 1.0)))
    e = np.where(a > 0, e, emin)
    return np.ldexp(1.0, (np.maximum(e, emin) - (p - 1)).astype(np.int64))


# ---- codecs between float64 values and storage bits

_E4M3 = None


def e4m3_table():
    """The 256 e4m3fn values by bit pattern (0x7F/0xFF are NaN)."""
    global _E4M3
    if _E4M3 is None:
        vals = np.empty(256)
        for b in range(256):
            s = -1.0 if b & 0x80 else 1.0
            e, m = (b >> 3) & 0xF, b & 7
            if e == 15 and m == 7:
                vals[b] = np.nan
            elif e == 0:
                vals[b] = s * m / 8.0 * 2.0 ** -6
            else:
                vals[b] = s * (1 + m / 8.0) * 2.0 ** (e - 7)
        _E4M3 = vals
    return _E4M3


_E5M2 = None


def e5m2_table():
    """The 256 e5m2 values by bit pattern (exponent 31: Inf with mantissa 0, else NaN)."""
    global _E5M2
    if _E5M2 is None:
        vals = np.empty(256)
        for b in range(256):
            s = -1.0 if b & 0x80 else 1.0
            e, m = (b >> 2) & 0x1F, b & 3
            if e == 31:
                vals[b] = s * np.inf if m == 0 else np.nan
            elif e == 0:
                vals[b] = s * m / 4.0 * 2.0 ** -14
            else:
                vals[b] = s * (1 + m / 4.0) * 2.0 ** (e - 15)
        _E5M2 = vals
    return _E5M2


def decode(storage, dtype):
    """Storage array -> float64 values."""
    a = np.asarray(storage)
    if dtype == "bfloat16":
        return (a.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    if dtype == "float8_e4m3fn":
        return e4m3_table()[a.astype(np.int64)]
    if dtype == "float8_e5m2":
        return e5m2_table()[a.astype(np.int64)]
    return a.astype(np.float64)


def encode(values, dtype):
    """float64 values (already representable, or rounded here) -> storage array."""
    v = np.asarray(values, np.float64)
    if dtype in ("int8", "int32", "int64"):
        return v.astype(STORAGE[dtype])
    r = round_to(v, dtype)
    if dtype == "bfloat16":
        return (r.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
    if dtype in ("float8_e4m3fn", "float8_e5m2"):  # codes 0..top are the non-negative finite values, increasing
        pos = e4m3_table()[:0x7F] if dtype == "float8_e4m3fn" else e5m2_table()[:0x7C]
        code = np.searchsorted(pos, np.abs(np.where(np.isnan(r), 0, r))).astype(np.uint8)
        code = np.where(np.isnan(r), 0x7F, code).astype(np.uint8)
        return code | np.where(np.signbit(r), 0x80, 0).astype(np.uint8)
    return r.astype(STORAGE[dtype])


# ---- RoPE frequency rules (SPEC.md stage 3; qkvfuse.h comments)

def inv_freq(theta, R, scaling=None):
    """f_i (radians per position), i < R/2, and mscale, for a scaling rule
    given as a dict with the RopeScaling field names (type, factor, ...)."""
    sc = dict(type="none", factor=1.0, original_max_position=0, low_freq_factor=1.0, high_freq_factor=4.0,
              beta_fast=32.0, beta_slow=1.0, extrapolation_factor=1.0, attn_factor=1.0)
    sc.update(scaling or {})
    kind = sc["type"]
    i = np.arange(R // 2, dtype=np.float64)
    base = theta
    if kind == "ntk":
        base = theta * sc["factor"] ** (R / (R - 2.0))
    f = base ** (-2.0 * i / R)
    mscale = 1.0
    if kind == "linear":
        f = f / sc["factor"]
    elif kind == "llama3":
        orig, lo, hi, fac = sc["original_max_position"], sc["low_freq_factor"], sc["high_freq_factor"], sc["factor"]
        wl = 2 * math.pi / f
        smooth = (orig / wl - lo) / (hi - lo)
        mid = (1 - smooth) * f / fac + smooth * f
        f = np.where(wl < orig / hi, f, np.where(wl > orig / lo, f / fac, mid))
    elif kind == "yarn":
        orig, fac = sc["original_max_position"], sc["factor"]

        def corr(n_rot):  # the dim whose wavelength makes n_rot turns over the original context
            return R * math.log(orig / (n_rot * 2 * math.pi)) / (2 * math.log(theta))

        lo = max(math.floor(corr(sc["beta_fast"])), 0)
        hi = min(math.ceil(corr(sc["beta_slow"])), R - 1)
        if lo == hi:
            hi += 0.001
        ramp = np.clip((i - lo) / (hi - lo), 0, 1)
        extrap = (1 - ramp) * sc["extrapolation_factor"]
        f = f / fac * (1 - extrap) + f * extrap
        mscale = (1.0 if fac <= 1 else 0.1 * math.log(fac) + 1.0) * sc["attn_factor"]
    return f, mscale


# ---- the chain

class Problem:
    """Float64 inputs of one call (values exactly as stored in the tensors).

    x: [T, H] activations (float input) or None; acc: [T, H] int32 values with
    ws [H], act [T] or None, bias [H] or None (int32 input).
    Norm: q_gamma/k_gamma [D] or None, q_beta/k_beta [D] or None, eps (float32
    value), gamma_offset. RoPE: R, style ("neox"/"interleaved"), source
    ("none"/"cos_sin_cache"/"cos_sin"/"computed"); cos_sin_cache [max_pos, R],
    positions [T], cos/sin [T, R], theta, scaling dict.
    io: the I/O dtype (q_out's, or with a quantized q the dtype q_out has
    unquantized: the input's, for int32 input the RoPE table's, else
    float32); parity: bool.
    """

    def __init__(self, **kw):
        self.__dict__.update(kw)


def _rope_tables(p):
    """Full-length cos, sin [T, R] and their slack."""
    R, T = p.R, p.T
    if p.source == "cos_sin":
        return p.cos, p.sin, np.zeros((T, R))
    if p.source == "cos_sin_cache":
        half_c = p.cos_sin_cache[p.positions, : R // 2]
        half_s = p.cos_sin_cache[p.positions, R // 2:]
        sl = np.zeros((T, R // 2))
    else:  # computed
        f, ms = inv_freq(p.theta, R, p.scaling)
        ang = p.positions.astype(np.float64)[:, None] * f[None, :]
        half_c, half_s = np.cos(ang) * ms, np.sin(ang) * ms
        # float32 rounding of cos/sin, and a GPU evaluating sincospi in float32
        # after an exact turn reduction: a few float32 ulps of the unit circle
        sl = (8 * U + 4e-16 * np.abs(ang)) * ms
    if p.style == "interleaved":
        rep = lambda a: np.repeat(a, 2, axis=1)  # noqa: E731
    else:
        rep = lambda a: np.concatenate([a, a], axis=1)  # noqa: E731
    return rep(half_c), rep(half_s), rep(sl)


def _parity_round(p, v, s):
    if not p.parity:
        return v, s
    s = s + ulp(np.abs(v) + s, p.io)
    return round_to(v, p.io), s


def _norm(p, x, sx, gamma, beta):
    """RMSNorm over the last axis (D)."""
    D = x.shape[-1]
    g = gamma + 1.0 if p.gamma_offset else gamma
    ss = np.sum(x * x, axis=-1, keepdims=True)
    inv = 1.0 / np.sqrt(ss / D + p.eps)
    with np.errstate(invalid="ignore", divide="ignore"):
        r_x = np.where(ss > 0, np.sum(np.abs(x) * sx, axis=-1, keepdims=True) / ss, 0.0)
    r_inv = (D / 2.0 + 5.0) * U + r_x
    xig = x * inv * g
    s = np.abs(xig) * (r_inv + 3 * U) + sx * np.abs(inv * g)
    if beta is None:
        return _parity_round(p, xig, s)
    # parity: a chain of ops stores the norm (rounded) before the bias add reads it
    xig, s = _parity_round(p, xig, s)
    y = xig + beta
    return _parity_round(p, y, s + U * (np.abs(xig) + np.abs(beta)))


def _rope(p, y, sy, c, sn, sc):
    """RoPE on the first R dims of y [T, n, D]; c, sn, sc: [T, R]."""
    R = p.R
    o, so = y.copy(), sy.copy()
    if R == 0:
        return o, so
    idx = np.arange(R)
    if p.style == "interleaved":
        partner = idx ^ 1
        sign = np.where(idx % 2 == 0, -1.0, 1.0)
    else:
        partner = np.where(idx < R // 2, idx + R // 2, idx - R // 2)
        sign = np.where(idx < R // 2, -1.0, 1.0)
    c3, s3, sc3 = c[:, None, :], sn[:, None, :], sc[:, None, :]
    a, b = y[..., :R], y[..., partner]
    sa, sb = sy[..., :R], sy[..., partner]
    o[..., :R] = a * c3 + sign * b * s3
    so[..., :R] = (np.abs(c3) * sa + np.abs(s3) * sb + sc3 * (np.abs(a) + np.abs(b))
                   + 2 * U * (np.abs(a * c3) + np.abs(b * s3)) + U * np.abs(o[..., :R]))
    return o, so


def chain(p):
    """The fused chain. Returns dict q, k, v -> (value, slack), shaped
    [T, Nq, D] / [T, Nkv, D] / [T, Nkv, D]: values before the final
    rounding (in parity mode, after every intermediate one)."""
    Nq, Nkv, D, T = p.Nq, p.Nkv, p.D, p.T
    if p.acc is not None:
        prod = p.acc * p.ws[None, :] * (p.act[:, None] if p.act is not None else 1.0)
        b = p.bias[None, :] if p.bias is not None else 0.0
        x = prod + b
        sx = 4 * U * (np.abs(prod) + np.abs(b))
        x, sx = _parity_round(p, x, sx)
    else:
        x, sx = p.x.copy(), np.zeros_like(p.x)
    x = x.reshape(T, Nq + 2 * Nkv, D)
    sx = sx.reshape(T, Nq + 2 * Nkv, D)
    out = {}
    tables = _rope_tables(p) if p.R > 0 else None
    for name, lo, hi, gamma, beta in (("q", 0, Nq, p.q_gamma, p.q_beta), ("k", Nq, Nq + Nkv, p.k_gamma, p.k_beta)):
        y, sy = x[:, lo:hi], sx[:, lo:hi]
        if gamma is not None:
            y, sy = _norm(p, y, sy, gamma, beta)
        if tables is not None:
            y, sy = _rope(p, y, sy, *tables)
        out[name] = (y, sy)
    out["v"] = (x[:, Nq + Nkv:], sx[:, Nq + Nkv:])
    return out


# ---- acceptance

def interval(v, s, fmt, mid=None):
    """[lo, hi] a correct result stored as fmt may take (mid: the unfused-parity
    I/O dtype rounded to first)."""
    lo, hi = v - 2 * s, v + 2 * s
    if mid is not None:
        lo, hi = round_to(lo, mid), round_to(hi, mid)
    return round_to(lo, fmt), round_to(hi, fmt)


def quant_interval(v, s, mode, scale, offset, mid=None):
    """[lo, hi] of a quantized value (int8, e4m3 or e5m2 value): a cache's, or a quantized q_out's."""
    lo, hi = v - 2 * s, v + 2 * s
    if mid is not None:
        lo, hi = round_to(lo, mid), round_to(hi, mid)
    t1, t2 = lo / scale, hi / scale
    if mode == "int8_asym":
        t1, t2 = t1 + offset, t2 + offset
    tl, th = np.minimum(t1, t2), np.maximum(t1, t2)
    slack = 2 * U * (np.maximum(np.abs(tl), np.abs(th)) + (np.abs(offset) if mode == "int8_asym" else 0))
    tl, th = tl - slack, th + slack
    if mode in ("fp8_e4m3", "fp8_e5m2"):
        fmt = "float8_e4m3fn" if mode == "fp8_e4m3" else "float8_e5m2"
        return round_to(tl, fmt), round_to(th, fmt)
    q = lambda t: np.clip(np.rint(t), -128, 127)  # noqa: E731
    return q(tl), q(th)


def check_within(name, got, lo, hi, mask=None):
    """Assert lo <= got <= hi elementwise (where mask); a readable failure."""
    got, lo, hi = np.broadcast_arrays(np.asarray(got, np.float64), lo, hi)
    ok = (got >= lo) & (got <= hi)
    if mask is not None:
        ok |= ~mask
    if not ok.all():
        bad = np.argwhere(~ok)
        i = tuple(bad[0])
        raise AssertionError("%s: %d of %d elements outside the oracle's interval; first at %s: got %r, "
                             "expected [%r, %r]" % (name, len(bad), ok.size, i, got[i], lo[i], hi[i]))
