# SPDX-License-Identifier: Apache-2.0
"""Hostile inputs through the Python package: every rejected call raises one
of the package's own error classes, with a message that starts with the
caller's argument name, and leaves every byte as it was.

Every buffer of a case is a view into its own arena of random bytes: the
view's neighbours are canaries, and so are the contents of outputs, caches
and the error-flag word. After each rejected call every arena is compared
byte by byte, guards included. Each test runs on NumPy arrays and, where
torch is importable, on torch CPU tensors made with torch.from_numpy (the
same memory, so the same byte checks).

The classes: non-native byte order, integers outside their C type, flags that
are not a bool or 0/1, strings with a NUL, None and wrong Python types, a
negative table size, meta tensors among real ones (torch), allocations the
binding would make from sizes larger than the input; a sweep of hostile
values over every scalar argument; and classes the C core must catch, seen
through Python (error_flags inside a cache, extra outputs aliasing inputs,
messages naming the named operators' own arguments).
"""
import numpy as np
import pytest

import qkvfuse
from conftest import HAVE_TORCH, requires_cuda

if HAVE_TORCH:
    import torch

Nq, Nkv, D, T = 4, 2, 64, 3
H = (Nq + 2 * Nkv) * D
GUARD = 256                # canary bytes on each side of a buffer
FLAG_CANARY = 0xA5A5A5A0   # the data-error bits (1, 2, 4) clear: an OR would show

KINDS = ["numpy", pytest.param("torch", marks=pytest.mark.skipif(not HAVE_TORCH, reason="torch is not installed"))]
NEEDS_TORCH = pytest.mark.skipif(not HAVE_TORCH, reason="torch is not installed")


class Buffers:
    """Arrays carved out of arenas of random bytes, one arena per array."""

    def __init__(self, seed=0):
        self.rng = np.random.default_rng(seed)
        self.arenas = {}

    def new(self, name, shape, dtype, values=None):
        dtype = np.dtype(dtype)
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        arena = np.frombuffer(self.rng.bytes(nbytes + 2 * GUARD), np.uint8).copy()
        a = arena[GUARD:GUARD + nbytes].view(dtype).reshape(shape)
        if values is not None:
            a[...] = values
        self.arenas[name] = arena
        return a

    def snapshot(self):
        self.saved = {k: a.copy() for k, a in self.arenas.items()}

    def changed(self, flag_bit=0):
        """Names of the arenas whose bytes differ from the snapshot; with
        `flag_bit`, the flag word may differ by that data-error bit alone
        (the CPU ORs a data error's bit into error_flags)."""
        out = []
        for k, a in self.arenas.items():
            if np.array_equal(a, self.saved[k]):
                continue
            if k == "error_flags" and flag_bit:
                want = self.saved[k].copy()
                want[GUARD:GUARD + 4].view(np.uint32)[0] |= flag_bit
                if np.array_equal(a, want):
                    continue
            out.append(k)
        return sorted(out)


def as_kind(x, kind):
    """A NumPy array as the test's kind: itself, or a torch tensor on its memory."""
    if kind == "numpy" or not isinstance(x, np.ndarray):
        return x
    if x.dtype == np.uint32:  # torch has no general uint32 tensor; the flag word is int32 there
        x = x.view(np.int32)
    return torch.from_numpy(x)


# ---- one valid call of each operator ------------------------------------------------------------

POSITIONAL = {
    "run": ("qkv",),
    "split": ("input", "q_weight", "k_weight", "cos_sin_cache", "positions"),
    "cache": ("qkv", "q_gamma", "k_gamma", "cos", "sin", "index", "k_cache", "v_cache"),
    "dequant": ("x", "cos", "sin", "k_cache", "v_cache", "indices", "scale_k", "scale_v"),
}
FUNCTIONS = {
    "run": lambda *a, **k: qkvfuse.run(*a, **k),
    "split": lambda *a, **k: qkvfuse.split_qkv_rmsnorm_rope(*a, **k),
    "cache": lambda *a, **k: qkvfuse.qkv_rmsnorm_rope_cache(*a, **k),
    "dequant": lambda *a, **k: qkvfuse.dequant_rope_quant_kvcache(*a, **k),
}


class Case:
    """A valid call of one operator: its tensors (every one in `buf`) and scalars."""

    def __init__(self, op, seed=0):
        self.op, self.buf = op, Buffers(seed)
        rng, new = self.buf.rng, self.buf.new
        csc = qkvfuse.build_cos_sin_cache(16, D)
        if op == "run":
            self.tensors = dict(
                qkv=new("qkv", (T, H), np.float32, rng.standard_normal((T, H))),
                q_gamma=new("q_gamma", (D,), np.float32, rng.uniform(0.5, 1.5, D)),
                k_gamma=new("k_gamma", (D,), np.float32, rng.uniform(0.5, 1.5, D)),
                cos_sin_cache=new("cos_sin_cache", (16, D), np.float32, csc),
                positions=new("positions", (T,), np.int64, [0, 5, 15]),
                k_cache=new("k_cache", (2, 4, Nkv, D), np.int8), v_cache=new("v_cache", (2, 4, Nkv, D), np.int8),
                slot_mapping=new("slot_mapping", (T,), np.int64, [0, 7, -1]),
                k_scale=new("k_scale", (1,), np.float32, 0.05), v_scale=new("v_scale", (1,), np.float32, 0.05),
                q_out=new("q_out", (T, Nq * D), np.float32),
                k_out=new("k_out", (T, Nkv * D), np.float32),
                error_flags=new("error_flags", (1,), np.uint32, FLAG_CANARY))
            self.scalars = dict(num_q_heads=Nq, num_kv_heads=Nkv, head_dim=D, eps=1e-6, rope_theta=10000.0,
                                gamma_offset=False, rope="auto", rope_style="neox", cache_layout="auto",
                                k_quant="auto", v_quant="auto", rounding="fused", backend="auto", num_threads=0,
                                rotary_dim=None, rope_scaling=None, return_k=False, return_v=False)
        elif op == "split":
            self.tensors = dict(
                input=new("input", (T, H), np.float32, rng.standard_normal((T, H))),
                q_weight=new("q_weight", (D,), np.float32, rng.uniform(0.5, 1.5, D)),
                k_weight=new("k_weight", (D,), np.float32, rng.uniform(0.5, 1.5, D)),
                cos_sin_cache=new("cos_sin_cache", (16, D), np.float32, csc),
                positions=new("positions", (T,), np.int64, [3, 0, 15]),
                q_out=new("q_out", (T, Nq * D), np.float32), k_out=new("k_out", (T, Nkv * D), np.float32),
                v_out=new("v_out", (T, Nkv * D), np.float32),
                error_flags=new("error_flags", (1,), np.uint32, FLAG_CANARY))
            self.scalars = dict(q_hidden_size=Nq * D, kv_hidden_size=None, head_dim=None, eps=1e-6, rope_dim=None,
                                is_neox=True)
        elif op == "cache":
            ang = rng.uniform(-3, 3, (T, D))
            self.tensors = dict(
                qkv=new("qkv", (T, H), np.float32, rng.standard_normal((T, H))),
                q_gamma=new("q_gamma", (D,), np.float32, rng.uniform(0.5, 1.5, D)),
                k_gamma=new("k_gamma", (D,), np.float32, rng.uniform(0.5, 1.5, D)),
                cos=new("cos", (T, D), np.float32, np.cos(ang)), sin=new("sin", (T, D), np.float32, np.sin(ang)),
                index=new("index", (T,), np.int64, [0, 17, -1]),
                k_cache=new("k_cache", (2, 16, Nkv, D), np.int8), v_cache=new("v_cache", (2, 16, Nkv, D), np.int8),
                k_scale=new("k_scale", (Nkv, D), np.float32, 0.05),
                v_scale=new("v_scale", (Nkv, D), np.float32, 0.05),
                q_out=new("q_out", (T, Nq * D), np.float32),
                q_out_before_quant=new("q_out_before_quant", (T, Nq * D), np.float32),
                k_out_before_quant=new("k_out_before_quant", (T, Nkv * D), np.float32),
                v_out_before_quant=new("v_out_before_quant", (T, Nkv * D), np.float32),
                error_flags=new("error_flags", (1,), np.uint32, FLAG_CANARY))
            self.scalars = dict(head_nums=(Nq, Nkv, Nkv), qkv_size=None, epsilon=1e-6, cache_mode="PA",
                                is_output_qkv=True)
        elif op == "dequant":
            ang = rng.uniform(-3, 3, (T, 1, 1, D))
            self.tensors = dict(
                x=new("x", (T, 1, H), np.float32, rng.standard_normal((T, 1, H))),
                cos=new("cos", (T, 1, 1, D), np.float32, np.cos(ang)),
                sin=new("sin", (T, 1, 1, D), np.float32, np.sin(ang)),
                k_cache=new("k_cache", (T, 2, Nkv, D), np.int8), v_cache=new("v_cache", (T, 2, Nkv, D), np.int8),
                indices=new("indices", (T,), np.int32, [0, 1, -1]),
                scale_k=new("scale_k", (Nkv * D,), np.float32, 0.05),
                scale_v=new("scale_v", (Nkv * D,), np.float32, 0.05),
                q_out=new("q_out", (T, 1, Nq, D), np.float32),
                k_out=new("k_out", (T, 1, Nkv, D), np.float32), v_out=new("v_out", (T, 1, Nkv, D), np.float32),
                error_flags=new("error_flags", (1,), np.uint32, FLAG_CANARY))
            self.scalars = dict(size_splits=None, quant_mode="static", layout="BSND", kv_output=True,
                                cache_mode="contiguous")
        self.buf.snapshot()

    def call(self, kind, tensors=None, scalars=None, drop=()):
        """The operator on the case's tensors (as `kind`) and scalars, with
        replacements; names in `drop` are left out (the operator allocates)."""
        t = dict(self.tensors, **(tensors or {}))
        s = dict(self.scalars, **(scalars or {}))
        for name in drop:
            t.pop(name, None)
        t = {k: as_kind(v, kind) for k, v in t.items()}
        args = [t.pop(name) for name in POSITIONAL[self.op]]
        return FUNCTIONS[self.op](*args, **t, **s)

    def rejected(self, kind, cls, arg, tensors=None, scalars=None, drop=(), match=None):
        """The call raises cls (a QkvfuseError) whose message starts with
        `arg`, and no arena changed."""
        with pytest.raises(cls) as info:
            self.call(kind, tensors, scalars, drop)
        e = info.value
        assert isinstance(e, qkvfuse.QkvfuseError), "%s: %r is not a qkvfuse error" % (arg, e)
        assert e.message.startswith(arg), "message does not start with %r: %s" % (arg, e.message)
        if match is not None:
            assert match in e.message, e.message
        assert self.buf.changed() == [], "bytes changed by a rejected call: %s" % self.buf.changed()
        return e


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("op", ["run", "split", "cache", "dequant"])
def test_valid_call_writes(op, kind):
    """The control: the same case, unchanged, succeeds and writes its outputs
    (so the byte comparisons of the rejected calls can fail)."""
    c = Case(op)
    c.call(kind)
    changed = c.buf.changed()
    assert "q_out" in changed and "error_flags" not in changed, changed
    assert not set(changed) & set(POSITIONAL[op][:1]), changed


# ---- byte order ----------------------------------------------------------------------------

BIG_ENDIAN = [("run", "qkv"), ("run", "q_gamma"), ("run", "positions"), ("run", "slot_mapping"), ("run", "k_scale"),
              ("run", "q_out"), ("run", "k_out"), ("run", "error_flags"), ("run", "cos_sin_cache"),
              ("split", "input"), ("split", "q_weight"), ("split", "positions"), ("split", "v_out"),
              ("split", "error_flags"), ("cache", "cos"), ("cache", "index"), ("cache", "k_scale"),
              ("cache", "q_out_before_quant"), ("dequant", "x"), ("dequant", "indices"), ("dequant", "scale_v"),
              ("dequant", "k_out")]


@pytest.mark.parametrize("op,arg", BIG_ENDIAN, ids=["%s-%s" % p for p in BIG_ENDIAN])
def test_big_endian_is_rejected(op, arg):
    """A byte-swapped array (NumPy only: torch has no such tensors) holding the
    right values is an error naming it, never read or written as native."""
    c = Case(op)
    a = c.tensors[arg]
    swapped = c.buf.new(arg + "_swapped", a.shape, a.dtype.newbyteorder(">"), a)
    c.buf.snapshot()
    c.rejected("numpy", qkvfuse.DtypeError, arg, tensors={arg: swapped}, match="byte order")


def test_big_endian_typed_array_and_builder_out():
    with pytest.raises(qkvfuse.DtypeError, match="byte order"):
        qkvfuse.TypedArray(np.zeros(4, ">u2"), "bfloat16")
    ta = qkvfuse.TypedArray(np.zeros((T, H), np.uint16), "bfloat16")
    ta.storage = ta.storage.astype(">u2")  # swapped after construction: describe checks again
    with pytest.raises(qkvfuse.DtypeError, match="^qkv: byte order"):
        qkvfuse.run(ta, num_q_heads=Nq, num_kv_heads=Nkv, head_dim=D)
    buf = Buffers()
    out = buf.new("out", (8, D), ">f4")
    buf.snapshot()
    with pytest.raises(qkvfuse.DtypeError, match="^out: byte order"):
        qkvfuse.build_cos_sin_cache(8, D, out=out)
    assert buf.changed() == []


# ---- integers outside their C type -----------------------------------------------------------

WRAP = 1 << 64  # a Python int that ctypes would reduce modulo 2^64 to the valid value
INT_RANGE = [
    ("run", "num_q_heads", WRAP + Nq, "num_q_heads"), ("run", "num_kv_heads", WRAP + Nkv, "num_kv_heads"),
    ("run", "head_dim", WRAP + D, "head_dim"), ("run", "rotary_dim", WRAP + D, "rotary_dim"),
    ("run", "num_q_heads", -(1 << 63) - 1, "num_q_heads"), ("run", "num_threads", 1 << 32, "num_threads"),
    ("run", "num_threads", 1 << 31, "num_threads"),
    ("run", "rope_scaling", {"type": "yarn", "factor": 2.0, "original_max_position_embeddings": WRAP + 4096},
     "rope_scaling.original_max_position"),
    ("split", "q_hidden_size", WRAP + Nq * D, "q_hidden_size"),
    ("split", "kv_hidden_size", WRAP + Nkv * D, "kv_hidden_size"), ("split", "head_dim", WRAP + D, "head_dim"),
    ("split", "rope_dim", WRAP + D, "rope_dim"),
    ("cache", "head_nums", (WRAP + Nq, Nkv, Nkv), "head_nums[0]"),
    ("cache", "head_nums", (Nq, Nkv, Nkv - WRAP), "head_nums[2]"),
    ("cache", "qkv_size", (T, 1, Nq + 2 * Nkv, WRAP + D), "qkv_size[3]"),
    ("dequant", "size_splits", (WRAP + Nq * D, Nkv * D, Nkv * D), "size_splits[0]"),
]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("op,arg,value,name", INT_RANGE, ids=["%s-%s-%d" % (p[0], p[1], i)
                                                               for i, p in enumerate(INT_RANGE)])
def test_integer_outside_its_c_type(op, arg, value, name, kind):
    Case(op).rejected(kind, qkvfuse.InvalidValueError, name, scalars={arg: value}, match="outside the range")


def test_integer_range_of_plans_builders_and_streams():
    with pytest.raises(qkvfuse.InvalidValueError, match="^num_q_heads: .*outside the range of the C type int64_t"):
        qkvfuse.Plan(num_q_heads=WRAP + Nq, num_kv_heads=Nkv, head_dim=D)
    with pytest.raises(qkvfuse.InvalidValueError, match="^num_threads: .*int32_t"):
        qkvfuse.Config(num_q_heads=Nq, num_kv_heads=Nkv, head_dim=D, num_threads=WRAP)
    with pytest.raises(qkvfuse.InvalidValueError, match="^device id: .*int32_t"):
        qkvfuse.Plan(num_q_heads=Nq, num_kv_heads=Nkv, head_dim=D, device="cuda:%d" % (1 << 32))
    with pytest.raises(qkvfuse.InvalidValueError, match="^max_position: .*outside the range"):
        qkvfuse.build_cos_sin_cache(WRAP + 16, D)
    with pytest.raises(qkvfuse.InvalidValueError, match="^rotary_dim: .*outside the range"):
        qkvfuse.build_cos_sin_cache(16, WRAP + D)
    with pytest.raises(qkvfuse.InvalidValueError, match="^rotary_dim: .*outside the range"):
        qkvfuse.rope_inv_freq(WRAP + D)
    c = Case("run")
    plan = qkvfuse.Plan(num_q_heads=Nq, num_kv_heads=Nkv, head_dim=D)
    with pytest.raises(qkvfuse.InvalidValueError, match="^stream: .*uintptr_t"):
        plan.run(c.tensors["qkv"], q_out=c.tensors["q_out"], stream=WRAP)
    with pytest.raises(qkvfuse.InvalidValueError, match="not exactly representable"):
        qkvfuse.run(c.tensors["qkv"], num_q_heads=Nq, num_kv_heads=Nkv, head_dim=D, q_out=c.tensors["q_out"],
                    positions=c.tensors["positions"],
                    rope_scaling={"type": "yarn", "factor": 2.0, "original_max_position": (1 << 60) + 1})
    assert c.buf.changed() == []


# ---- flags -----------------------------------------------------------------------------------

FLAGS = [("run", "gamma_offset"), ("run", "return_k"), ("split", "is_neox"), ("cache", "is_output_qkv"),
         ("dequant", "kv_output")]
BAD_FLAGS = [("no", qkvfuse.ArgumentTypeError), ("1", qkvfuse.ArgumentTypeError), (None, qkvfuse.ArgumentTypeError),
             (1.0, qkvfuse.ArgumentTypeError), (2, qkvfuse.InvalidValueError), (-1, qkvfuse.InvalidValueError),
             (WRAP + 1, qkvfuse.InvalidValueError)]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("value,cls", BAD_FLAGS, ids=[repr(v) for v, _ in BAD_FLAGS])
@pytest.mark.parametrize("op,arg", FLAGS, ids=["%s-%s" % p for p in FLAGS])
def test_flag_is_a_bool_or_0_or_1(op, arg, value, cls, kind):
    """bool("no") is True and ctypes would pass int(2) on: neither reaches C."""
    Case(op).rejected(kind, cls, arg, scalars={arg: value})


@pytest.mark.parametrize("kind", KINDS)
def test_flag_spellings_that_are_accepted(kind):
    outs = []
    for v in (True, 1, np.True_, np.int8(1)):
        c = Case("split")
        c.call(kind, scalars={"is_neox": v})
        outs.append(c.tensors["q_out"].copy())
    c = Case("split")
    c.call(kind, scalars={"is_neox": 0})
    assert all(np.array_equal(outs[0], o) for o in outs[1:]) and not np.array_equal(outs[0], c.tensors["q_out"])
    with pytest.raises(qkvfuse.InvalidValueError, match="^q_norm: must be a bool"):
        qkvfuse.Config(num_q_heads=Nq, num_kv_heads=Nkv, head_dim=D, q_norm="yes")


# ---- strings with a NUL ----------------------------------------------------------------------

NUL = [("cache", "cache_mode", "PA\0_NZ"), ("cache", "cache_mode", "PA_BSND\0"),
       ("dequant", "cache_mode", "contiguous\0page"), ("dequant", "quant_mode", "static\0dynamic"),
       ("dequant", "layout", "BSND\0"), ("run", "rope_style", "neox\0"), ("run", "rope", "auto\0"),
       ("run", "cache_layout", "paged\0nz"), ("run", "rounding", "fused\0"), ("run", "k_quant", "auto\0"),
       ("run", "backend", "auto\0")]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("op,arg,value", NUL, ids=["%s-%s-%d" % (p[0], p[1], i) for i, p in enumerate(NUL)])
def test_string_with_a_nul(op, arg, value, kind):
    """C would read the valid mode before the NUL (the cache case's "PA\\0_NZ"
    reads as its own "PA" and would run)."""
    Case(op).rejected(kind, qkvfuse.InvalidValueError, arg, scalars={arg: value}, match="NUL")


# ---- None, wrong types, bad strings ----------------------------------------------------------

WRONG = [
    ("run", "num_q_heads", None, qkvfuse.ArgumentTypeError, "num_q_heads"),
    ("run", "head_dim", "64", qkvfuse.ArgumentTypeError, "head_dim"),
    ("run", "head_dim", 64.0, qkvfuse.ArgumentTypeError, "head_dim"),
    ("run", "eps", "1e-6", qkvfuse.ArgumentTypeError, "eps"),
    ("run", "eps", 1e-50, qkvfuse.InvalidValueError, "eps"),  # rounds to 0 in the descriptor's float
    ("run", "rope_theta", None, qkvfuse.ArgumentTypeError, "rope_theta"),
    ("run", "rope_theta", 10 ** 400, qkvfuse.InvalidValueError, "rope_theta"),
    ("run", "rope_scaling", "yarn", qkvfuse.ArgumentTypeError, "rope_scaling"),
    ("run", "rope_scaling", {"type": "linear", "factor": "2"}, qkvfuse.ArgumentTypeError, "rope_scaling.factor"),
    ("run", "rope_scaling", {"type": 3}, qkvfuse.ArgumentTypeError, "rope_scaling.type"),
    ("run", "rope_scaling", {"type": "linear", 7: 2.0}, qkvfuse.InvalidValueError, "rope_scaling"),
    ("run", "rope", 1, qkvfuse.ArgumentTypeError, "rope"),
    ("run", "rope", "bogus", qkvfuse.InvalidValueError, "rope"),
    ("run", "rope_style", None, qkvfuse.ArgumentTypeError, "rope_style"),
    ("run", "cache_layout", b"paged", qkvfuse.ArgumentTypeError, "cache_layout"),
    ("run", "rotary_dim", -1, qkvfuse.InvalidValueError, "rotary_dim"),
    ("run", "out_dtype", "bogus", qkvfuse.DtypeError, "out_dtype"),
    ("run", "out_dtype", 5, qkvfuse.DtypeError, "out_dtype"),
    ("split", "q_hidden_size", "256", qkvfuse.ArgumentTypeError, "q_hidden_size"),
    ("split", "eps", None, qkvfuse.ArgumentTypeError, "eps"),
    ("split", "rope_dim", "0", qkvfuse.ArgumentTypeError, "rope_dim"),
    ("split", "head_dim", 64.0, qkvfuse.ArgumentTypeError, "head_dim"),
    ("split", "out_dtype", "float64", qkvfuse.DtypeError, "out_dtype"),
    ("split", "eps", 1e-50, qkvfuse.InvalidValueError, "eps"),  # the library's check, after its float conversion
    ("cache", "head_nums", None, qkvfuse.ArgumentTypeError, "head_nums"),
    ("cache", "head_nums", 5, qkvfuse.ArgumentTypeError, "head_nums"),
    ("cache", "head_nums", (Nq, Nkv), qkvfuse.InvalidValueError, "head_nums"),
    ("cache", "head_nums", ("4", Nkv, Nkv), qkvfuse.ArgumentTypeError, "head_nums[0]"),
    ("cache", "qkv_size", "B,S,N,D", qkvfuse.ArgumentTypeError, "qkv_size"),
    ("cache", "epsilon", None, qkvfuse.ArgumentTypeError, "epsilon"),
    ("cache", "cache_mode", b"PA", qkvfuse.ArgumentTypeError, "cache_mode"),
    ("cache", "cache_mode", 3, qkvfuse.ArgumentTypeError, "cache_mode"),
    ("dequant", "size_splits", 5, qkvfuse.ArgumentTypeError, "size_splits"),
    ("dequant", "size_splits", (Nq * D, Nkv * D), qkvfuse.InvalidValueError, "size_splits"),
    ("dequant", "quant_mode", b"static", qkvfuse.ArgumentTypeError, "quant_mode"),
    ("dequant", "layout", 0, qkvfuse.ArgumentTypeError, "layout"),
    ("dequant", "out_dtype", object(), qkvfuse.DtypeError, "out_dtype"),
]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("op,arg,value,cls,name", WRONG, ids=["%s-%s-%d" % (p[0], p[1], i)
                                                              for i, p in enumerate(WRONG)])
def test_none_and_wrong_types(op, arg, value, cls, name, kind):
    """Never a KeyError, AttributeError or a bare TypeError: the package's
    class (ArgumentTypeError is also a TypeError), naming the argument."""
    Case(op).rejected(kind, cls, name, scalars={arg: value})


MISSING = [("run", "qkv"), ("split", "input"), ("split", "q_weight"), ("split", "positions"), ("cache", "k_gamma"),
           ("cache", "index"), ("cache", "v_cache"), ("dequant", "x"), ("dequant", "cos"), ("dequant", "scale_k")]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("op,arg", MISSING, ids=["%s-%s" % p for p in MISSING])
def test_required_tensor_none(op, arg, kind):
    Case(op).rejected(kind, qkvfuse.NullPointerError, arg, tensors={arg: None}, match="required")


NOT_ARRAYS = [("run", "q_gamma"), ("run", "positions"), ("split", "k_weight"), ("cache", "cos"),
              ("dequant", "indices")]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("op,arg", NOT_ARRAYS, ids=["%s-%s" % p for p in NOT_ARRAYS])
def test_tensor_of_the_wrong_type(op, arg, kind):
    """A list where an array belongs; on the torch path also a NumPy array
    among torch tensors (the operator schema takes torch tensors only)."""
    c = Case(op)
    c.rejected(kind, qkvfuse.DtypeError, arg, tensors={arg: c.tensors[arg].tolist()})
    if kind == "torch":  # the NumPy original among the torch tensors
        with pytest.raises(qkvfuse.DtypeError, match="^%s: expected a torch.Tensor" % arg):
            t = {k: as_kind(v, "torch") for k, v in c.tensors.items()}
            t[arg] = c.tensors[arg]
            args = [t.pop(n) for n in POSITIONAL[op]]
            FUNCTIONS[op](*args, **t, **c.scalars)
        assert c.buf.changed() == []


def test_plan_arguments():
    c = Case("run")
    for make, pattern in [(lambda: qkvfuse.Plan("config"), "^config: expected a qkvfuse.Config"),
                          (lambda: qkvfuse.Plan(num_q_heads=Nq), "^num_kv_heads, head_dim: required"),
                          (lambda: qkvfuse.Plan(num_q_heads=Nq, num_kv_heads=Nkv, head_dim=D, bogus=1),
                           "^bogus: not a Config field"),
                          (lambda: qkvfuse.Plan(num_q_heads=Nq, num_kv_heads=Nkv, head_dim=D, device="gpu"),
                           "^device: expected"),
                          (lambda: qkvfuse.Plan(num_q_heads=Nq, num_kv_heads=Nkv, head_dim=D, device=(1, -1)),
                           "^device: expected"),
                          (lambda: qkvfuse.Plan(num_q_heads=Nq, num_kv_heads=Nkv, head_dim=D).run(
                              c.tensors["qkv"], q_out=c.tensors["q_out"], gamma=c.tensors["q_gamma"]),
                           "^gamma: not a tensor argument")]:
        with pytest.raises(qkvfuse.InvalidValueError, match=pattern):
            make()
    assert c.buf.changed() == []


def test_builder_arguments():
    for kwargs, cls, pattern in [
            (dict(max_position=None, rotary_dim=D), qkvfuse.ArgumentTypeError, "^max_position: must be an integer"),
            (dict(max_position=16.0, rotary_dim=D), qkvfuse.ArgumentTypeError, "^max_position: must be an integer"),
            (dict(max_position=16, rotary_dim="64"), qkvfuse.ArgumentTypeError, "^rotary_dim: must be an integer"),
            (dict(max_position=16, rotary_dim=63), qkvfuse.InvalidValueError, "rotary_dim: must be even"),
            (dict(max_position=16, rotary_dim=D, theta="1e4"), qkvfuse.ArgumentTypeError, "^theta: must be a real"),
            (dict(max_position=16, rotary_dim=D, scaling="linear"), qkvfuse.ArgumentTypeError, "^rope_scaling: "),
            (dict(max_position=16, rotary_dim=D, dtype="bogus"), qkvfuse.DtypeError, "^dtype: ")]:
        with pytest.raises(cls, match=pattern):
            qkvfuse.build_cos_sin_cache(**kwargs)
    with pytest.raises(qkvfuse.OutOfMemoryError, match="^rotary_dim: cannot allocate"):
        qkvfuse.rope_inv_freq(1 << 62)
    if not HAVE_TORCH:
        with pytest.raises(qkvfuse.UnsupportedError, match="^device: "):
            qkvfuse.build_cos_sin_cache(16, D, device="cpu")


# ---- table sizes -----------------------------------------------------------------------------

@pytest.mark.parametrize("kind", KINDS)
def test_negative_max_position(kind):
    kw = dict(device="cpu") if kind == "torch" else {}
    with pytest.raises(qkvfuse.InvalidValueError, match="^max_position: must be >= 0"):
        qkvfuse.build_cos_sin_cache(-5, D, **kw)
    with pytest.raises(qkvfuse.InvalidValueError, match="^max_position: must be >= 0"):
        qkvfuse.build_cos_sin_cache(-(1 << 63), D, **kw)
    assert tuple(qkvfuse.build_cos_sin_cache(0, D, **kw).shape) == (0, D)


# ---- allocations from the caller's sizes -----------------------------------------------------

BIG = [("run", {"num_q_heads": 1 << 40}, qkvfuse.InvalidValueError, "num_q_heads", ("q_out", "k_out")),
       ("run", {"head_dim": 1 << 40}, qkvfuse.InvalidValueError, "head_dim", ("q_out", "k_out")),
       ("split", {"q_hidden_size": 1 << 40, "kv_hidden_size": Nkv * D}, qkvfuse.ShapeError, "q_hidden_size",
        ("q_out",)),
       ("split", {"q_hidden_size": Nq * D + 2 * (1 << 40), "kv_hidden_size": -(1 << 40)}, qkvfuse.InvalidValueError,
        "kv_hidden_size", ("k_out",)),
       ("cache", {"head_nums": (1 << 40, Nkv, Nkv)}, qkvfuse.ShapeError, "head_nums", ("q_out",)),
       ("cache", {"head_nums": (Nq, Nkv, Nkv), "qkv_size": (T, 1, Nq + 2 * Nkv, 1 << 40)}, qkvfuse.ShapeError,
        "head_nums", ("k_out_before_quant",)),
       ("dequant", {"size_splits": (1 << 40, Nkv * D, Nkv * D)}, qkvfuse.ShapeError, "size_splits", ("q_out",))]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("op,scalars,cls,name,drop", BIG, ids=["%s-%d" % (p[0], i) for i, p in enumerate(BIG)])
def test_outputs_allocated_from_sizes_larger_than_the_input(op, scalars, cls, name, drop, kind):
    """The binding allocates missing outputs only from sizes that fit the
    input: a huge size is the package's error, not a MemoryError (or a
    machine-sized allocation)."""
    Case(op).rejected(kind, cls, name, scalars=scalars, drop=drop)


# ---- meta tensors among real ones (torch) ----------------------------------------------------

META = [("run", "k_cache", ()), ("run", "q_gamma", ("q_out", "k_out")), ("run", "positions", ("q_out", "k_out")),
        ("run", "error_flags", ()), ("run", "q_out", ()), ("split", "cos_sin_cache", ()),
        ("split", "q_weight", ("q_out", "k_out", "v_out")), ("split", "error_flags", ("q_out", "k_out", "v_out")),
        ("cache", "k_cache", ()), ("cache", "sin", ("q_out", "q_out_before_quant", "k_out_before_quant",
                                                     "v_out_before_quant")),
        ("dequant", "v_cache", ()), ("dequant", "scale_k", ("q_out", "k_out", "v_out"))]


@NEEDS_TORCH
@pytest.mark.parametrize("op,arg,drop", META, ids=["%s-%s-%d" % (p[0], p[1], i) for i, p in enumerate(META)])
def test_meta_tensor_among_cpu_tensors(op, arg, drop):
    """torch sends such a call to the fake kernel, whose outputs would be
    uninitialized memory: a DeviceError naming the meta tensor instead, with
    the outputs given (the _out operator) or allocated (the functional one)."""
    c = Case(op)
    x = as_kind(c.tensors[arg], "torch")
    meta = torch.empty(x.shape, dtype=x.dtype, device="meta")
    c.rejected("torch", qkvfuse.DeviceError, arg, tensors={arg: meta}, drop=drop, match="meta")


@NEEDS_TORCH
def test_meta_tensor_through_the_operators_and_the_numpy_path():
    c = Case("run")
    t = {k: as_kind(v, "torch") for k, v in c.tensors.items()}
    meta_cache = torch.empty(t["k_cache"].shape, dtype=torch.int8, device="meta")
    opts = [Nq, Nkv, D, -1, "auto", "neox", 10000.0, "none", [1.0, 0.0, 1.0, 4.0, 32.0, 1.0, 1.0, 1.0], 1e-6, False,
            "paged", "auto", "auto", "fused", "auto", 0]
    ins = [t["qkv"], None, None, None, t["q_gamma"], t["k_gamma"], None, None, t["positions"], t["cos_sin_cache"],
           None, None, t["slot_mapping"], t["k_scale"], t["v_scale"], None, None]
    # straight through torch.ops: the compiled extension raises the status's standard class (ValueError)
    # with the text the package's error reads back from
    with pytest.raises(ValueError) as info:
        torch.ops.qkvfuse.run_out(*ins, t["q_out"], None, None, meta_cache, t["v_cache"], t["error_flags"], *opts)
    e = qkvfuse.errors.translate(info.value)
    assert isinstance(e, qkvfuse.DeviceError) and e.message.startswith("k_cache: on meta"), e
    with pytest.raises(ValueError) as info:
        torch.ops.qkvfuse.run(*ins, meta_cache, t["v_cache"], t["error_flags"], *opts, torch.float32, False, False)
    e = qkvfuse.errors.translate(info.value)
    assert isinstance(e, qkvfuse.DeviceError) and e.message.startswith("k_cache: on meta"), e
    # NumPy qkv, a meta torch cache: the NumPy path
    with pytest.raises(qkvfuse.DeviceError, match="^k_cache: on meta"):
        c.call("numpy", tensors={"k_cache": meta_cache})
    with pytest.raises(qkvfuse.DeviceError, match="^out: tensors must be on cpu or cuda"):
        qkvfuse.build_cos_sin_cache(16, D, out=torch.empty(16, D, device="meta"))
    assert c.buf.changed() == []
    # every tensor meta: shape inference through the fake kernel, as before
    m = {k: torch.empty(v.shape, dtype=v.dtype, device="meta") for k, v in t.items()}
    q = qkvfuse.run(m["qkv"], num_q_heads=Nq, num_kv_heads=Nkv, head_dim=D, q_gamma=m["q_gamma"],
                    k_gamma=m["k_gamma"], cos_sin_cache=m["cos_sin_cache"], positions=m["positions"]).q
    assert q.device.type == "meta" and tuple(q.shape) == (T, Nq * D)


@requires_cuda
@pytest.mark.parametrize("op", ["run", "split", "cache", "dequant"])
def test_error_flags_off_the_cuda_device(op):
    """CUDA tensors with a CPU flag word: the kernel would write through a host
    pointer. A DeviceError naming error_flags; on the GPU nothing changes."""
    c = Case(op)
    t = {k: as_kind(v, "torch").cuda() for k, v in c.tensors.items()}
    before = {k: v.clone() for k, v in t.items()}
    t["error_flags"] = as_kind(c.tensors["error_flags"], "torch")  # on the CPU
    args = [t.pop(n) for n in POSITIONAL[op]]
    with pytest.raises(qkvfuse.DeviceError, match="^error_flags: on cpu, but the call is on cuda"):
        FUNCTIONS[op](*args, **t, **c.scalars)
    torch.cuda.synchronize()
    t = dict(zip(POSITIONAL[op], args), **t)
    assert all(torch.equal(before[k].view(torch.uint8), t[k].view(torch.uint8)) for k in before if k != "error_flags")
    assert c.buf.changed() == []


# ---- a sweep of hostile values over every scalar argument -------------------------------------

POOL = [None, "", "x", "auto\0", b"PA", "1", 1.5, float("nan"), float("inf"), -0.0, 2, -1, 0, True, np.True_,
        WRAP, -WRAP, 1 << 63, -(1 << 63) - 1, 10 ** 400, [], (1, 2), {}, {"type": "bogus"}, object(), complex(1, 1),
        np.float32(1e-6), np.int64(3)]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("op", ["run", "split", "cache", "dequant"])
def test_hostile_value_sweep(op, kind):
    """Every scalar argument of the operator, one at a time, takes every value
    of a pool of hostile ones: the call succeeds (some are valid spellings) or
    raises a QkvfuseError and writes nothing; no other exception, ever."""
    base = Case(op)
    for arg in base.scalars:
        for value in POOL:
            if arg == "num_threads" and isinstance(value, (int, np.integer)) and 0 < value < (1 << 31):
                continue  # a valid thread count, not hostile
            c = Case(op)
            try:
                c.call(kind, scalars={arg: value})
            except qkvfuse.QkvfuseError:
                assert c.buf.changed() == [], "%s=%r: bytes changed by a rejected call: %s" % (arg, value,
                                                                                             c.buf.changed())
            except Exception as e:  # noqa: BLE001 - the point of the test
                pytest.fail("%s %s=%r raised %s: %s (not a qkvfuse error)" % (op, arg, value, type(e).__name__, e))


# ---- classes the C core must catch, seen through Python -----------------------------------------

@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("op,cache,bad", [("run", "k_cache", {"slot_mapping": [0, 99, -1]}),
                                          ("cache", "v_cache", {"index": [0, 99, -1]})], ids=["run", "cache"])
def test_error_flags_inside_a_cache(op, cache, bad, kind):
    """The flag word is 4 bytes of a cache and a slot is out of range: an
    OverlapError naming error_flags, and the cache keeps every byte (OR-ing
    the slot bit into it would write a cache byte)."""
    c = Case(op)
    flags = c.tensors[cache].reshape(-1)[:4].view(np.uint32)
    name, values = next(iter(bad.items()))
    c.tensors[name][...] = values
    c.buf.snapshot()
    c.rejected(kind, qkvfuse.OverlapError, "error_flags", tensors={"error_flags": flags})


EXTRA_ALIAS = [("q_out_before_quant", "q_gamma"), ("q_out_before_quant", "k_scale"),
               ("q_out_before_quant", "v_scale"), ("q_out_before_quant", "error_flags")]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("out,inp", EXTRA_ALIAS, ids=["%s-over-%s" % p for p in EXTRA_ALIAS])
def test_extra_output_over_an_input(out, inp, kind):
    """qkv_rmsnorm_rope_cache's q_out_before_quant (a copy of q the named
    operator makes) laid over another argument: an OverlapError, nothing
    written."""
    c = Case("cache")
    o = c.tensors[out]
    src = c.tensors[inp]
    # the input becomes the first elements of the output's memory, with its own values
    flat = o.reshape(-1).view(src.dtype)
    alias = flat[:src.size].reshape(src.shape)
    alias[...] = src
    c.buf.snapshot()
    # the message names the less expected output of the pair first: error_flags
    c.rejected(kind, qkvfuse.OverlapError, "error_flags" if inp == "error_flags" else out, tensors={inp: alias})


def inside(c, inp, out):
    """Input `inp` moved into the first bytes of output `out`'s memory (its
    values kept): the output then overlaps it."""
    src, o = c.tensors[inp], c.tensors[out]
    alias = o.reshape(-1).view(np.uint8)[:src.nbytes].view(src.dtype).reshape(src.shape)
    alias[...] = src
    return alias


# (op, change, argument the message must start with, class, data-error bit, text the message must hold)
NAMED_MESSAGES = [
    ("cache", dict(tensors=lambda c: {"k_out_before_quant": c.tensors["qkv"][:, :Nkv * D]}), "k_out_before_quant",
     qkvfuse.OverlapError, 0, None),
    ("cache", dict(scalars={"epsilon": 1e-50}), "epsilon", qkvfuse.InvalidValueError, 0, None),
    ("cache", dict(tensors=lambda c: {"index": np.array([0, 99, -1], np.int64)}), "index", qkvfuse.OutOfRangeError,
     qkvfuse.DATA_ERROR_SLOT, None),
    ("split", dict(tensors=lambda c: {"q_weight": c.tensors["q_weight"].astype(np.int32)}), "q_weight",
     qkvfuse.DtypeError, 0, None),
    ("split", dict(tensors=lambda c: {"q_weight": inside(c, "q_weight", "q_out")}), "q_out", qkvfuse.OverlapError, 0,
     "q_weight"),
    ("dequant", dict(tensors=lambda c: {"indices": np.array([0, 5, -1], np.int32)}), "indices",
     qkvfuse.OutOfRangeError, qkvfuse.DATA_ERROR_SLOT, None),
    ("dequant", dict(tensors=lambda c: {"scale_k": np.zeros(Nkv * D, np.float32)}), "scale_k",
     qkvfuse.BadScaleError, qkvfuse.DATA_ERROR_SCALE, None),
    ("dequant", dict(tensors=lambda c: {"x": c.tensors["x"].astype(np.int8)}), "x", qkvfuse.DtypeError, 0, None),
]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("case", NAMED_MESSAGES, ids=["%s-%s-%d" % (p[0], p[2], i)
                                                      for i, p in enumerate(NAMED_MESSAGES)])
def test_named_operator_messages_name_its_own_arguments(case, kind):
    """A named operator's error names the argument as the caller wrote it
    (index, not slot_mapping; q_weight, not q_gamma; epsilon, not eps); the
    rejection itself (class, nothing written) holds already."""
    op, change, name, cls, flag_bit, text = case
    c = Case(op)
    tensors = change["tensors"](c) if "tensors" in change else None
    c.buf.snapshot()
    with pytest.raises(cls) as info:
        c.call(kind, tensors=tensors, scalars=change.get("scalars"))
    assert c.buf.changed(flag_bit) == []
    message = info.value.message
    assert message.startswith(name), message
    if text is not None:
        assert text in message, message
