# SPDX-License-Identifier: Apache-2.0
"""Random cases of the core operator, run through the package and checked
against the float64 oracle.

A case holds its tensors as *bases* (NumPy storage arrays + a qkvfuse dtype
name) and *views* (argument -> base and index), so the same case can be run
on NumPy arrays, torch CPU tensors or torch CUDA tensors: strided rows,
in-place q/k (views of the qkv buffer) and k/v caches that are two halves of
one buffer are views like any other. After the run every base comes back as
NumPy storage and is checked: outputs against the oracle's intervals, cache
bytes that must not change against their initial copy, inputs unchanged.
"""
import math

import numpy as np

import oracle as orc

FLOATS = ("float32", "float16", "bfloat16")
LAYOUTS = ("none", "paged", "paged_hnd", "nz", "contiguous")
ROPES = ("none", "cos_sin_cache", "cos_sin", "computed")
QUANTS = ("none", "int8_sym", "int8_asym", "fp8_e4m3")
QUANTS_EXT = QUANTS + ("fp8_e5m2",)  # extended cases (NumPy): also e5m2 caches
CACHE_DT = {"int8_sym": "int8", "int8_asym": "int8", "fp8_e4m3": "float8_e4m3fn", "fp8_e5m2": "float8_e5m2"}
FP8_DT = {"fp8_e4m3": "float8_e4m3fn", "fp8_e5m2": "float8_e5m2"}
TYPED = ("bfloat16", "float8_e4m3fn", "float8_e5m2")  # NumPy has no such dtype: TypedArray
SCALINGS = (
    None,
    {"type": "linear", "factor": 4.0},
    {"type": "ntk", "factor": 3.0},
    {"type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
     "original_max_position": 8192},
    {"type": "yarn", "factor": 4.0, "original_max_position": 4096, "beta_fast": 32.0, "beta_slow": 1.0,
     "extrapolation_factor": 1.0, "attn_factor": 0.9},
)


def representable(rng, shape, dtype, scale=1.0):
    """Random values exactly representable in dtype (returned as float64)."""
    v = rng.standard_normal(shape) * scale
    return orc.round_to(v, dtype) if dtype in orc.FORMATS else v


class Case:
    def __init__(self, seed, backend="auto", extended=False):
        """extended: also a quantized q, fp8 e5m2 caches and per-head scales
        (run()'s NumPy path)."""
        self.seed, self.backend, self.extended = seed, backend, extended
        self.bases = {}   # name -> [storage, dtype]
        self.views = {}   # arg name -> (base name, index tuple)
        self.kwargs = {}  # non-tensor arguments of qkvfuse.run
        self.outputs = []  # argument names the run writes
        self.allocate = False  # let run() allocate q/k/v outputs
        _generate(self, np.random.default_rng(seed))

    def add(self, name, values, dtype, view=None, index=()):
        self.bases[name] = [orc.encode(values, dtype), dtype]
        self.views[view or name] = (name, index)

    def describe(self):
        k = dict(self.kwargs)
        return ("seed=%d backend=%s T=%d Nq=%d Nkv=%d D=%d R=%d in=%s q_out=%s q_quant=%s layout=%s kq=%s vq=%s "
                "scales=%s rope=%s/%s parity=%s inplace=%s extended=%s split=%s/%s"
                % (self.seed, self.backend, self.T, self.Nq, self.Nkv, self.D, self.R, self.in_dt, self.q_dt,
                   self.qq, self.layout, self.kq, self.vq, self.scale_kinds, self.rope, k.get("rope_style"),
                   self.parity, self.inplace, self.extended, self.split, self.split_v))


def _generate(c, rng):
    ch = lambda seq: seq[rng.integers(len(seq))]  # noqa: E731
    c.in_dt = ch(FLOATS + ("int32",))
    c.Nkv = int(ch((1, 1, 2, 3)))
    c.Nq = c.Nkv * int(ch((1, 2, 4)))
    if rng.random() < 0.25:  # any head counts: Nkv need not divide Nq
        c.Nq = int(rng.integers(1, 9))
    c.D = int(ch((16, 32, 48, 64, 64, 80, 96, 128, 128, 256, 512, 528, 1024)))
    c.layout = ch(LAYOUTS)
    c.rope = ch(ROPES)
    c.parity = bool(rng.random() < 0.35)
    D, Nq, Nkv = c.D, c.Nq, c.Nkv
    H = (Nq + 2 * Nkv) * D
    small = D >= 256
    if c.layout == "contiguous":
        B, S = int(rng.integers(1, 4)), int(rng.integers(1, 4 if small else 5))
    else:
        B, S = int(rng.integers(0, 5 if small else 11)), 1
        if rng.random() < 0.2 and B > 0:  # [B, S, H] input with a paged cache
            B, S = max(B // 2, 1), 2
    c.B, c.S, c.T = B, S, B * S
    T = c.T
    three_d = c.layout == "contiguous" or S > 1
    lead = (B, S) if three_d else (T,)

    # ---- input
    pad = int(rng.integers(1, 9)) if rng.random() < 0.3 else 0
    if c.in_dt == "int32":
        acc = rng.integers(-2 ** 15, 2 ** 15, size=lead + (H + pad,)).astype(np.float64)
        c.add("qkv_buf", acc, "int32", view="qkv", index=(Ellipsis, slice(0, H)))
        c.add("weight_scale", rng.uniform(2e-5, 2e-4, H) * np.where(rng.random(H) < 0.1, -1, 1), "float32")
        if rng.random() < 0.6:
            c.add("act_scale", orc.round_to(rng.uniform(0.5, 2.0, T), "float32"), "float32")
        if rng.random() < 0.6:
            bdt = ch(FLOATS + ("int32",))
            bv = np.rint(rng.uniform(-3, 3, H)) if bdt == "int32" else representable(rng, H, bdt, 0.5)
            c.add("bias", bv, bdt)
    else:
        c.add("qkv_buf", representable(rng, lead + (H + pad,), c.in_dt, 2.0), c.in_dt, view="qkv",
              index=(Ellipsis, slice(0, H)))

    # ---- norm
    c.kwargs["eps"] = float(ch((1e-6, 1e-5, 0.25)))
    c.kwargs["gamma_offset"] = bool(rng.random() < 0.25)
    for h in "qk":
        if rng.random() < 0.7:
            gdt = ch(FLOATS)
            c.add(h + "_gamma", representable(rng, D, gdt, 0.5) + (0 if c.kwargs["gamma_offset"] else 1), gdt)
            if rng.random() < 0.3:
                c.add(h + "_beta", representable(rng, D, gdt, 0.3), gdt)

    # ---- RoPE
    c.R = 0 if c.rope == "none" else (D if rng.random() < 0.6 else 2 * int(rng.integers(1, D // 2 + 1)))
    R = c.R
    c.kwargs["rope"] = c.rope
    c.kwargs["rotary_dim"] = R if rng.random() < 0.5 or c.rope == "computed" else None
    c.kwargs["rope_style"] = ch(("neox", "interleaved"))
    table_dt = ch(FLOATS)
    if c.rope in ("cos_sin_cache", "computed"):
        pdt = ch(("int32", "int64"))
        if c.rope == "cos_sin_cache":
            max_pos = int(rng.integers(max(T, 1), 3 * max(T, 1) + 8))
            ang = rng.uniform(-math.pi, math.pi, (max_pos, R // 2))
            c.add("cos_sin_cache", np.concatenate([np.cos(ang), np.sin(ang)], 1), table_dt)
            pos = rng.integers(0, max_pos, T)
        else:
            hi = 2 ** 24 if rng.random() < 0.3 else 4096
            pos = rng.integers(0, hi, T)
            c.kwargs["rope_theta"] = float(ch((10000.0, 500000.0, 1e6)))
            sc = ch(SCALINGS)
            c.kwargs["rope_scaling"] = None if (sc and sc["type"] == "ntk" and R <= 2) else sc
        c.add("positions", pos.astype(np.float64), pdt)
    elif c.rope == "cos_sin":
        ang = rng.uniform(-math.pi, math.pi, lead + (R,))
        cdims = lead + (R,)
        c.add("cos", np.cos(ang).reshape(cdims), table_dt)
        c.add("sin", np.sin(ang).reshape(cdims), table_dt)
    c.table_dt = table_dt if c.rope in ("cos_sin_cache", "cos_sin") else None

    # ---- outputs: dtype rules of SPEC.md stage 5
    def out_dtype():
        if c.in_dt != "int32":
            return ch((c.in_dt, "float32"))
        if c.table_dt is not None:
            return ch((c.table_dt, "float32"))
        return ch(FLOATS)

    c.q_dt = out_dtype()
    c.k_dt = out_dtype() if rng.random() < 0.5 else None
    c.v_dt = out_dtype() if rng.random() < 0.5 else None
    # the I/O dtype (unfused parity's rounding target): q_out's, or with a
    # quantized q the dtype q_out has unquantized (docs/API.md)
    c.io_dt, c.qq = c.q_dt, "none"
    if c.extended and rng.random() < 0.3:
        c.qq = ch(("fp8_e4m3", "fp8_e5m2"))
        c.io_dt = c.in_dt if c.in_dt != "int32" else (c.table_dt or "float32")
        c.q_dt = FP8_DT[c.qq]
        qs = rng.uniform(0.005, 0.05) if c.qq == "fp8_e4m3" else 10.0 ** rng.uniform(-4.5, -1)
        qs = orc.round_to(qs * (-1 if rng.random() < 0.1 else 1), "float32")
        c.add("q_scale", np.full((1,) if rng.random() < 0.5 else (), qs), "float32")
    c.inplace = c.in_dt != "int32" and c.q_dt == c.in_dt and rng.random() < 0.25
    nan = lambda shape: np.full(shape, np.nan)  # noqa: E731  (poison: never a valid result)
    if c.inplace:
        c.views["q_out"] = ("qkv_buf", (Ellipsis, slice(0, Nq * D)))
        if c.k_dt == c.in_dt and rng.random() < 0.6:
            c.views["k_out"] = ("qkv_buf", (Ellipsis, slice(Nq * D, (Nq + Nkv) * D)))
        c.outputs.append("qkv_buf")
    if "q_out" not in c.views:
        c.add("q_out", nan(lead + (Nq * D,)), c.q_dt)
        c.outputs.append("q_out")
    for name, dt in (("k_out", c.k_dt), ("v_out", c.v_dt)):
        if dt is not None and name not in c.views:
            c.add(name, nan(lead + (Nkv * D,)), dt)
            c.outputs.append(name)
    kv_dts = {d for d in (c.k_dt, c.v_dt) if d is not None}
    if c.qq == "none":
        same_dt, c.alloc_dt = kv_dts <= {c.q_dt}, c.q_dt
    else:  # a float8 q_out of its own; k and v outputs of one dtype (out_dtype) or the default
        same_dt = len(kv_dts) <= 1
        c.alloc_dt = kv_dts.pop() if kv_dts else None
    c.allocate = not c.inplace and same_dt and rng.random() < 0.4
    if c.qq != "none":
        c.kwargs["q_quant"] = c.qq
    c.kwargs["rounding"] = "unfused_parity" if c.parity else "fused"
    c.kwargs["backend"] = c.backend

    # ---- caches
    c.kq = c.vq = "none"
    c.scale_kinds = []
    if c.layout != "none":
        c.kq, c.vq = (ch(QUANTS_EXT), ch(QUANTS_EXT)) if c.extended else (ch(QUANTS), ch(QUANTS))
        kdt = CACHE_DT.get(c.kq, ch(FLOATS))
        vdt = CACHE_DT.get(c.vq, ch(FLOATS))
        if c.layout == "nz":  # c = 32 bytes / element must divide Nkv*D
            if (Nkv * D) % 32:
                c.kq, c.vq = "none", "none"
                kdt, vdt = ch(FLOATS), ch(FLOATS)
        c.kdt, c.vdt = kdt, vdt
        if c.layout == "contiguous":
            batch, seq = B + int(rng.integers(0, 2)), S + int(rng.integers(0, 3))
            starts = rng.integers(0, seq - S + 1, B)
            starts = np.where(rng.random(B) < 0.2, -1, starts)
            c.add("slot_mapping", starts.astype(np.float64), ch(("int32", "int64")))
            c.blocks, c.block_size = batch, seq
        else:
            bs = int(ch((1, 4, 16)))
            blocks = max(1, -(-T // bs) + int(rng.integers(0, 2)))
            slots = rng.permutation(blocks * bs)[:T]
            slots = np.where(rng.random(T) < 0.15, -1, slots)
            c.add("slot_mapping", slots.astype(np.float64), ch(("int32", "int64")))
            c.blocks, c.block_size = blocks, bs
        shared = kdt == vdt and rng.random() < 0.3
        kshape, vshape = _cache_shape(c, kdt), _cache_shape(c, vdt)
        if shared:  # k and v caches: halves of one [blocks, 2, ...] buffer
            init = _cache_init(rng, (kshape[0], 2) + kshape[1:], kdt)
            c.add("kv_cache", init, kdt, view="k_cache", index=(slice(None), 0))
            c.views["v_cache"] = ("kv_cache", (slice(None), 1))
            c.outputs.append("kv_cache")
        else:
            c.add("k_cache", _cache_init(rng, kshape, kdt), kdt)
            c.add("v_cache", _cache_init(rng, vshape, vdt), vdt)
            c.outputs += ["k_cache", "v_cache"]
        c.kwargs["cache_layout"] = c.layout
        for h, mode in (("k", c.kq), ("v", c.vq)):
            if mode == "none":
                continue
            per_channel = rng.random() < 0.5
            n = (Nkv, D) if per_channel else (1,)
            if c.extended and not per_channel and rng.random() < 0.5:
                n = (Nkv,)  # one per kv head
            c.scale_kinds.append(n)
            if mode == "fp8_e4m3":
                sc = rng.uniform(0.005, 0.05, n)
            elif mode == "fp8_e5m2":
                sc = 10.0 ** rng.uniform(-4.5, -1, n)
            else:
                sc = rng.uniform(0.02, 0.06, n)
            sc = orc.round_to(sc * np.where(rng.random(n) < 0.1, -1, 1), "float32")
            c.add(h + "_scale", sc, "float32")
            if mode == "int8_asym":
                c.add(h + "_offset", orc.round_to(rng.uniform(-20, 20, n), "float32"), "float32")
            if rng.random() < 0.5:
                c.kwargs[h + "_quant"] = mode
    c.initial = {n: b[0].copy() for n, b in c.bases.items()}
    # the input as separate q, k, v (column views of the rows), v left out when nothing reads it
    c.split = rng.random() < 0.3
    c.split_v = not c.split or "v_out" in c.bases or c.layout != "none" or rng.random() < 0.5


def _cache_shape(c, dt):
    if c.layout == "paged":
        return (c.blocks, c.block_size, c.Nkv, c.D)
    if c.layout == "paged_hnd":
        return (c.blocks, c.Nkv, c.block_size, c.D)
    if c.layout == "nz":
        w = 32 // np.dtype(orc.STORAGE[dt]).itemsize
        return (c.blocks, c.Nkv * c.D // w, c.block_size, w)
    return (c.blocks, c.block_size, c.Nkv, c.D)  # contiguous [batch, max_seq, Nkv, D]


def _cache_init(rng, shape, dt):
    if dt == "int8":
        return rng.integers(-128, 128, shape).astype(np.float64)
    if dt == "float8_e4m3fn":
        return orc.e4m3_table()[rng.integers(0, 0x7E, shape)]  # finite, non-negative codes
    if dt == "float8_e5m2":
        return orc.e5m2_table()[rng.integers(0, 0x7C, shape)]
    return representable(rng, shape, dt, 1.0)


# ---- running ------------------------------------------------------------------------------

def to_numpy_args(c):
    import qkvfuse
    bases = {}
    for name, (st, dt) in c.bases.items():
        arr = st.copy()
        bases[name] = qkvfuse.TypedArray(arr, dt) if dt in TYPED else arr
    return bases


def to_torch_args(c, device):
    import torch
    bases = {}
    for name, (st, dt) in c.bases.items():
        if dt == "bfloat16":
            t = torch.from_numpy(st.view(np.int16).copy()).view(torch.bfloat16)
        elif dt in ("float8_e4m3fn", "float8_e5m2"):
            t = torch.from_numpy(st.copy()).view(getattr(torch, dt))
        else:
            t = torch.from_numpy(st.copy())
        bases[name] = t.to(device)
    return bases


def storage_of(x, dt):
    """A base (NumPy/TypedArray/torch) back to NumPy storage."""
    import qkvfuse
    if isinstance(x, qkvfuse.TypedArray):
        return x.storage
    if isinstance(x, np.ndarray):
        return x
    import torch
    x = x.detach().cpu()
    if dt == "bfloat16":
        return x.view(torch.int16).numpy().view(np.uint16)
    if dt in ("float8_e4m3fn", "float8_e5m2"):
        return x.view(torch.uint8).numpy()
    return x.numpy()


def run_case(c, bases):
    """Run the case on already-converted bases; returns {output base name: storage}."""
    import qkvfuse
    args = {view: bases[b][idx] if idx else bases[b] for view, (b, idx) in c.views.items()}
    kw = dict(c.kwargs)
    kw.update({k: v for k, v in args.items() if k != "qkv"})
    if c.allocate:
        for name in ("q_out", "k_out", "v_out"):
            kw.pop(name, None)
        if c.alloc_dt is not None:
            kw["out_dtype"] = c.alloc_dt
        kw["return_k"] = c.k_dt is not None
        kw["return_v"] = c.v_dt is not None
    x = args["qkv"]
    if c.split:
        qd, kv = c.Nq * c.D, c.Nkv * c.D
        kw.update(q=x[..., :qd], k=x[..., qd:qd + kv], v=x[..., qd + kv:] if c.split_v else None)
        x = None
    out = qkvfuse.run(x, num_q_heads=c.Nq, num_kv_heads=c.Nkv, head_dim=c.D, **kw)
    got = {n: storage_of(bases[n], c.bases[n][1]) for n in c.bases}
    if c.allocate:  # the returned tensors stand for the outputs
        for name, x in (("q_out", out.q), ("k_out", out.k), ("v_out", out.v)):
            if name in c.bases:
                got[name] = storage_of(x, c.bases[name][1])
        if c.k_dt is not None and out.k is None or c.v_dt is not None and out.v is None:
            raise AssertionError("run(): asked-for k/v output missing")
    return got


# ---- checking -----------------------------------------------------------------------------

def problem_of(c):
    val = lambda n: orc.decode(*c.bases[n]) if n in c.bases else None  # noqa: E731

    def view_val(n):
        if n not in c.views:
            return None
        b, idx = c.views[n]
        v = orc.decode(c.initial[b], c.bases[b][1])
        return v[idx] if idx else v

    T, H = c.T, (c.Nq + 2 * c.Nkv) * c.D
    qkv = view_val("qkv").reshape(T, H)
    cs = view_val("cos")
    return orc.Problem(
        T=T, Nq=c.Nq, Nkv=c.Nkv, D=c.D, R=c.R,
        x=None if c.in_dt == "int32" else qkv, acc=qkv if c.in_dt == "int32" else None,
        ws=val("weight_scale"), act=val("act_scale"), bias=val("bias"),
        q_gamma=val("q_gamma"), k_gamma=val("k_gamma"), q_beta=val("q_beta"), k_beta=val("k_beta"),
        eps=float(np.float32(c.kwargs["eps"])), gamma_offset=c.kwargs["gamma_offset"],
        style=c.kwargs["rope_style"], source=c.rope, cos_sin_cache=val("cos_sin_cache"),
        positions=None if "positions" not in c.bases else val("positions").astype(np.int64),
        cos=None if cs is None else cs.reshape(T, c.R), sin=None if cs is None else view_val("sin").reshape(T, c.R),
        theta=c.kwargs.get("rope_theta", 10000.0),
        scaling=c.kwargs.get("rope_scaling"), io=c.io_dt, parity=c.parity)


def _dest(c, slots):
    """Per token: (block, row) or None."""
    out = []
    for t in range(c.T):
        if c.layout == "contiguous":
            b, i = divmod(t, c.S)
            s = int(slots[b])
            out.append(None if s == -1 else (b, s + i))
        else:
            s = int(slots[t])
            out.append(None if s == -1 else divmod(s, c.block_size))
    return out


def cache_index(layout, Nkv, D, shape, blk, row):
    """Index arrays of the Nkv*D elements of one token's row in a cache."""
    j = np.arange(Nkv * D)
    h, d = j // D, j % D
    if layout in ("paged", "contiguous"):
        return (blk, row, h, d)
    if layout == "paged_hnd":
        return (blk, h, row, d)
    w = shape[3]  # nz
    return (blk, j // w, row, j % w)


def check_cache(name, layout, Nkv, D, got, init, dests, v, s, mode, dt, mid, scale=None, offset=0.0):
    """got/init: decoded cache values; dests: per token (block, row) or None;
    v, s: [T, Nkv*D] oracle values of k (or v) before quantization."""
    lo, hi = init.copy(), init.copy()
    written = np.zeros(got.shape, bool)
    for t, dst in enumerate(dests):
        if dst is None:
            continue
        ix = cache_index(layout, Nkv, D, got.shape, *dst)
        if mode == "none":
            l, u = orc.interval(v[t], s[t], dt, mid)
        else:
            l, u = orc.quant_interval(v[t], s[t], mode, scale, offset, mid)
        lo[ix], hi[ix] = l, u
        written[ix] = True
    orc.check_within(name + " (written rows)", got, lo, hi, written)
    same = (got == init) | (np.isnan(got) & np.isnan(init))
    if not same[~written].all():
        raise AssertionError("%s: %d elements changed outside the written rows" % (name, int((~same & ~written).sum())))


def check_case(c, got):
    """Compare a run's outputs ({base: storage}) with the oracle."""
    p = problem_of(c)
    res = orc.chain(p)
    mid = c.io_dt if c.parity else None
    T = c.T
    # outputs
    for name, key, dt in (("q_out", "q", c.q_dt), ("k_out", "k", c.k_dt), ("v_out", "v", c.v_dt)):
        if dt is None or name not in c.views:
            continue
        b, idx = c.views[name]
        g = orc.decode(got[b], c.bases[b][1])
        g = (g[idx] if idx else g).reshape(res[key][0].shape)
        if key == "q" and c.qq != "none":  # fp8(q / q_scale), q rounded to the I/O dtype first in parity mode
            qs = float(orc.decode(*c.bases["q_scale"]).ravel()[0])
            lo, hi = orc.quant_interval(res[key][0], res[key][1], c.qq, qs, 0.0, mid)
        else:
            lo, hi = orc.interval(res[key][0], res[key][1], dt, mid)
        orc.check_within(name, g, lo, hi)
    # caches
    if c.layout != "none":
        slots = orc.decode(*c.bases["slot_mapping"])
        dests = _dest(c, slots)
        for h, mode, dt in (("k", c.kq, c.kdt), ("v", c.vq, c.vdt)):
            b, idx = c.views[h + "_cache"]
            g = orc.decode(got[b], dt)
            init = orc.decode(c.initial[b], dt)
            g, init = (g[idx], init[idx]) if idx else (g, init)
            v, s = res[h]
            sc = off = None
            if mode != "none":
                sc = orc.decode(*c.bases[h + "_scale"]).ravel()
                off = orc.decode(*c.bases[h + "_offset"]).ravel() if mode == "int8_asym" else 0.0
                if sc.size == c.Nkv and c.Nkv > 1:  # one per kv head: channel j has head j // D's
                    sc = np.repeat(sc, c.D)
                    off = np.repeat(off, c.D) if mode == "int8_asym" else off
            check_cache(h + "_cache", c.layout, c.Nkv, c.D, g, init, dests, v.reshape(T, c.Nkv * c.D),
                        s.reshape(T, c.Nkv * c.D), mode, dt, mid, sc, off)
    # inputs and padding must be untouched
    for n in c.bases:
        if n in c.outputs:
            continue
        if got[n].tobytes() != c.initial[n].tobytes():
            raise AssertionError("input %s was modified" % n)
    if "qkv_buf" in c.outputs:  # in place: only the q (and k) columns may change
        H = (c.Nq + 2 * c.Nkv) * c.D
        keep0 = c.Nq * c.D if "k_out" not in c.views or c.views["k_out"][0] != "qkv_buf" else (c.Nq + c.Nkv) * c.D
        a, b0 = got["qkv_buf"], c.initial["qkv_buf"]
        if not np.array_equal(a[..., keep0:], b0[..., keep0:]):
            raise AssertionError("qkv: bytes outside the in-place q/k columns changed (v columns or padding; H=%d)"
                                 % H)


def check_random(seed, backend, args_of, extended=False):
    """Case(seed, backend, extended), run on the tensors args_of(case) makes
    and checked against the oracle; a failure carries the case's description."""
    c = Case(seed, backend, extended)
    try:
        check_case(c, run_case(c, args_of(c)))
    except Exception as e:
        raise AssertionError("%s\n  case: %s" % (e, c.describe())) from e
