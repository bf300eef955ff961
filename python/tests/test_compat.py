# SPDX-License-Identifier: Apache-2.0
"""qkvfuse.compat against the peer references (peer_ref.py): the same
arguments give the peer's results within one step of the output dtype (fp8
caches: one fp8 step where the docstring says why), the peer's mutations and
nothing else; errors name the caller's argument and write nothing. Random
cases on CPU tensors, and the same cases on CUDA tensors where there is a
GPU. Skipped without torch."""
import inspect

import pytest

from conftest import HAVE_TORCH, requires_cuda, seeds

pytestmark = pytest.mark.skipif(not HAVE_TORCH, reason="torch is not installed")
# each matching test runs on the CPU and (skipped without one) on a CUDA device
DEVICES = ["cpu", pytest.param("cuda", marks=requires_cuda)]

if HAVE_TORCH:
    import numpy as np
    import torch

    import peer_ref as P
    import qkvfuse
    from qkvfuse import compat

    E4, E5 = torch.float8_e4m3fn, torch.float8_e5m2
    FP8 = (E4, E5)


def table(max_pos, R, dtype, theta=10000.0):
    i = torch.arange(R // 2, dtype=torch.float64)
    ang = torch.arange(max_pos, dtype=torch.float64)[:, None] * theta ** (-2 * i / R)
    return torch.cat([ang.cos(), ang.sin()], dim=1).to(dtype)


def picker(g):
    return lambda xs: xs[int(torch.randint(len(xs), (1,), generator=g))]


def bits(x):
    """The bytes of a tensor (any dtype, any strides) as a uint8 tensor."""
    x = x.detach().cpu()
    return x.contiguous().view(torch.uint8) if x.numel() else torch.empty(0, dtype=torch.uint8)


def snapshot(*tensors):
    return [bits(t).clone() for t in tensors]


def unchanged(before, *tensors):
    return all(torch.equal(b, bits(t)) for b, t in zip(before, tensors))


def first_case(make, wanted):
    """The first case of seeds 0, 1, ... that has what a test needs."""
    for seed in range(1000):
        c = make(seed)
        if wanted(c):
            return c
    raise AssertionError("no such case in 1000 seeds")


def on(device, d):
    return {k: (v.to(device) if isinstance(v, torch.Tensor) else v) for k, v in d.items()}


# ---- vLLM: fused_qk_norm_rope ------------------------------------------------------------------

def random_vllm_case(seed):
    g = torch.Generator().manual_seed(seed)
    pick = picker(g)
    D = pick([64, 128, 256])
    R = pick([D, D, D // 2, D // 4])
    Nkv = pick([1, 2, 4])
    Nq = Nkv * pick([1, 2, 4])
    T = pick([0, 1, 3, 17, 40])
    dtype = pick([torch.bfloat16, torch.float16, torch.float32])
    table_dtype = pick([torch.float32, dtype])
    max_pos = 512
    scale = pick([0.05, 1.0, 30.0])
    qkv = (torch.randn(T, (Nq + 2 * Nkv) * D, generator=g) * scale).to(dtype)
    qw = (1 + 0.3 * torch.randn(D, generator=g)).to(dtype)
    kw = (1 + 0.3 * torch.randn(D, generator=g)).to(dtype)
    pos = torch.randint(0, max_pos, (T,), generator=g)
    return dict(qkv=qkv, Nq=Nq, Nkv=Nkv, D=D, eps=pick([1e-6, 1e-5]), qw=qw, kw=kw,
                csc=table(max_pos, R, table_dtype, theta=pick([1e4, 1e6])), is_neox=bool(pick([0, 1])), pos=pos)


def vllm_args(c, qkv):
    return (qkv, c["Nq"], c["Nkv"], c["Nkv"], c["D"], c["eps"], c["qw"], c["kw"], c["csc"], c["is_neox"], c["pos"])


def reference_qk(c, qkv):
    """The reference chain's q/k: (qkv after fused_qk_norm_rope, the exact
    float32 values, their RoPE magnitudes); float32 qkv (qkvfuse's superset)
    takes the float32 values themselves."""
    exact, mag = P.vllm_qk_norm_rope_f32(*vllm_args(c, qkv))
    ref = qkv.clone()
    if qkv.dtype == torch.float32:
        ref[:, :exact.shape[1] * c["D"]] = exact.reshape(qkv.shape[0], exact.shape[1] * c["D"])
    else:
        P.vllm_fused_qk_norm_rope(*vllm_args(c, ref))
    return ref, exact, mag


def check_qk(c, got, qkv, seed, stats=None):
    """got (qkvfuse's qkv) against the reference: v columns untouched, every q/k
    element within one output step of the exact value, nearly all
    bit-identical to the reference chain's."""
    T, Nq, Nkv, D = qkv.shape[0], c["Nq"], c["Nkv"], c["D"]
    qk = (Nq + Nkv) * D
    assert torch.equal(bits(got[:, qk:]), bits(qkv[:, qk:])), "v columns must stay untouched"
    ref, exact, mag = reference_qk(c, qkv)
    out = got[:, :qk].reshape(T, Nq + Nkv, D)
    # float32 slack: 8 ulps of the RoPE terms; a float32 output also sees the order of the D squares' sum
    # (up to D ulps relative), which one step of bf16/fp16 covers
    ok = P.within_rounding(out, exact, mag, qkv.dtype, k=8 if qkv.dtype != torch.float32 else D)
    assert bool(ok.all()), "seed %d: %d elements beyond one output step" % (seed, int((~ok).sum()))
    same = (ref[:, :qk] == got[:, :qk])
    if stats is not None:
        stats.append(("qk", qkv.dtype, int(same.numel()), int((~same).sum())))
    if T and qkv.dtype != torch.float32:
        assert float(same.float().mean()) > 0.95, "seed %d: only %.3f of q/k bit-identical to the reference" % (
            seed, float(same.float().mean()))
    return ref, exact, mag


def check_fused_qk_norm_rope(seed, device, stats=None):
    c = random_vllm_case(seed)
    qkv = c["qkv"]
    got = qkv.clone().to(device)
    storage = got.data_ptr()
    assert compat.fused_qk_norm_rope(*vllm_args(on(device, c), got)) is None
    assert got.data_ptr() == storage
    check_qk(c, got.cpu(), qkv, seed, stats)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("seed", seeds(80, 31000))
def test_fused_qk_norm_rope_matches_vllm(seed, device):
    """Each device against one reference (CUDA: rsqrtf, its own lane order)."""
    check_fused_qk_norm_rope(seed, device)


def small_vllm_case():
    c = random_vllm_case(5)
    c.update(qkv=torch.randn(6, (4 + 2 * 2) * 64).to(torch.bfloat16), Nq=4, Nkv=2, D=64,
             qw=(1 + 0.1 * torch.randn(64)).to(torch.bfloat16), kw=(1 + 0.1 * torch.randn(64)).to(torch.bfloat16),
             csc=table(64, 64, torch.bfloat16), pos=torch.randint(0, 64, (6,)), is_neox=True, eps=1e-6)
    return c


def test_fused_qk_norm_rope_int32_positions_and_views():
    """qkvfuse's superset: int32 positions give the int64 result; a row-strided
    qkv (a view into a wider buffer) is rewritten in place, its padding kept."""
    c = small_vllm_case()
    a = c["qkv"].clone()
    compat.fused_qk_norm_rope(*vllm_args(c, a))
    b = c["qkv"].clone()
    compat.fused_qk_norm_rope(*vllm_args(dict(c, pos=c["pos"].int()), b))
    assert torch.equal(a, b)
    wide = torch.zeros(6, c["qkv"].shape[1] + 64, dtype=torch.bfloat16)
    wide[:, :c["qkv"].shape[1]] = c["qkv"]
    view = wide[:, :c["qkv"].shape[1]]
    compat.fused_qk_norm_rope(*vllm_args(c, view))
    assert torch.equal(view, a) and bool((wide[:, c["qkv"].shape[1]:] == 0).all())


def test_fused_qk_norm_rope_errors_name_the_argument():
    c = small_vllm_case()
    q = c["qkv"]
    before = snapshot(q)
    w, csc, pos = c["qw"], c["csc"], c["pos"]

    def fails(cls, name, *args):
        with pytest.raises(cls) as info:
            compat.fused_qk_norm_rope(*args)
        assert info.value.message.startswith(name), info.value
        assert unchanged(before, q)

    fails(qkvfuse.InvalidValueError, "num_heads_v", q, 4, 2, 4, 64, 1e-6, w, w, csc, True, pos)
    fails(qkvfuse.InvalidValueError, "forced_token_heads_per_warp", *vllm_args(c, q), 3)
    fails(qkvfuse.ShapeError, "qkv", q, 4, 2, 2, 32, 1e-6, w[:32], w[:32], table(64, 32, torch.bfloat16), True, pos)
    fails(qkvfuse.ShapeError, "qkv", q.reshape(2, 3, -1), 4, 2, 2, 64, 1e-6, w, w, csc, True, pos)
    fails(qkvfuse.InvalidValueError, "cos_sin_cache", q, 4, 2, 2, 64, 1e-6, w, w, table(64, 66, torch.bfloat16), True,
          pos)
    fails(qkvfuse.OutOfRangeError, "position_ids", *vllm_args(dict(c, pos=torch.full((6,), 64)), q))
    fails(qkvfuse.ShapeError, "position_ids", *vllm_args(dict(c, pos=pos[:5]), q))
    fails(qkvfuse.ShapeError, "q_weight", *vllm_args(dict(c, qw=w[:32]), q))
    fails(qkvfuse.DtypeError, "k_weight", *vllm_args(dict(c, kw=w.double()), q))
    fails(qkvfuse.ArgumentTypeError, "eps", q, 4, 2, 2, 64, "1e-6", w, w, csc, True, pos)
    fails(qkvfuse.ArgumentTypeError, "num_heads_q", q, 4.0, 2, 2, 64, 1e-6, w, w, csc, True, pos)
    fails(qkvfuse.ArgumentTypeError, "is_neox", q, 4, 2, 2, 64, 1e-6, w, w, csc, None, pos)
    fails(qkvfuse.DtypeError, "position_ids", q, 4, 2, 2, 64, 1e-6, w, w, csc, True, pos.tolist())
    fails(qkvfuse.NullPointerError, "cos_sin_cache", q, 4, 2, 2, 64, 1e-6, w, w, None, True, pos)
    compat.fused_qk_norm_rope(*vllm_args(c, q), 4)
    assert not unchanged(before, q)


# ---- vLLM: fused_qk_norm_rope + reshape_and_cache_flash -------------------------------------------

KV_CACHE_DTYPES = {"auto": None, "bfloat16": None, "float16": None, "fp8": E4, "fp8_e4m3": E4,
                   "fp8_e5m2": E5} if HAVE_TORCH else {}


def random_vllm_cache_case(seed):
    c = random_vllm_case(seed)
    g = torch.Generator().manual_seed(seed + 7)
    pick = picker(g)
    dtype, T, Nkv, D = c["qkv"].dtype, c["qkv"].shape[0], c["Nkv"], c["D"]
    names = ["auto", "fp8", "fp8_e4m3", "fp8_e5m2"]
    names += {torch.bfloat16: ["bfloat16"], torch.float16: ["float16"]}.get(dtype, [])
    kv = pick(names)
    fp8 = KV_CACHE_DTYPES[kv]
    bs = pick([1, 4, 16])
    blocks = max(1, -(-(T + 5) // bs)) + pick([0, 2])
    n = T - pick([0, 0, min(T, 1), min(T, 3)])  # len(slot_mapping) <= T: vLLM's CUDA-graph padding
    slots = torch.randperm(blocks * bs, generator=g)[:n]
    if n:
        slots[torch.rand(n, generator=g) < 0.2] = -1
    hnd = bool(pick([0, 1]))
    shape = (blocks, Nkv, bs, D) if hnd else (blocks, bs, Nkv, D)
    store = torch.uint8 if fp8 is not None and pick([0, 1]) else (fp8 or dtype)
    caches = []
    for _ in range(2):  # random bytes: untouched rows must keep them
        raw = torch.randint(0, 256, shape + (torch.empty(0, dtype=store).element_size(),), generator=g,
                            dtype=torch.uint8)
        cache = raw.view(store).reshape(shape)
        if store.is_floating_point:  # finite values only, so equality checks see bytes
            cache = torch.where(torch.isfinite(cache.float()), cache.float(), 0.0).to(store)
        caches.append(cache.permute(0, 2, 1, 3) if hnd else cache)
    per_head = bool(pick([0, 1]))
    k_scale = (0.02 + 0.2 * torch.rand(Nkv if per_head else 1, generator=g)).float()
    v_scale = (0.02 + 0.2 * torch.rand(Nkv if per_head else 1, generator=g)).float()
    c.update(kv=kv, fp8=fp8, slots=slots, key_cache=caches[0], value_cache=caches[1], k_scale=k_scale,
             v_scale=v_scale, per_head=per_head, hnd=hnd)
    return c


def cache_args(c, qkv):
    return vllm_args(c, qkv) + (c["key_cache"], c["value_cache"], c["slots"], c["kv"], c["k_scale"], c["v_scale"])


def fp8_close(a, b, dtype):
    """Elementwise: fp8 codes a and b (uint8) equal, or neighbours (one step)."""
    va, vb = P.fp8_decode(a, dtype), P.fp8_decode(b, dtype)
    step = P.ulp(torch.maximum(va.abs(), vb.abs()), dtype)
    return (a == b) | ((va - vb).abs() <= step)


def check_fused_qk_norm_rope_and_cache(seed, device, stats=None):
    c = random_vllm_cache_case(seed)
    qkv = c["qkv"]
    dc = on(device, c)
    dc["key_cache"], dc["value_cache"] = c["key_cache"].clone().to(device), c["value_cache"].clone().to(device)
    got = qkv.clone().to(device)
    assert compat.fused_qk_norm_rope_and_cache(*cache_args(dc, got)) is None
    got = got.cpu()
    kc, vc = dc["key_cache"].cpu(), dc["value_cache"].cpu()
    ref, exact, mag = check_qk(c, got, qkv, seed, stats)

    # the reference chain: reshape_and_cache_flash of the reference's stored k and v
    T, Nq, Nkv, D = qkv.shape[0], c["Nq"], c["Nkv"], c["D"]
    ref_kc, ref_vc = c["key_cache"].clone(), c["value_cache"].clone()  # clone keeps the HND view's strides
    key = ref[:, Nq * D:(Nq + Nkv) * D].view(T, Nkv, D)
    value = ref[:, (Nq + Nkv) * D:].view(T, Nkv, D)
    P.vllm_reshape_and_cache_flash(key, value, ref_kc, ref_vc, c["slots"], c["kv"], c["k_scale"], c["v_scale"])
    assert torch.equal(bits(vc), bits(ref_vc)), "seed %d: v cache differs from the chain's" % seed
    if c["fp8"] is None:
        # the cache holds the k qkvfuse stored in qkv, bit for bit (and the chain's untouched rows)
        own_kc = c["key_cache"].clone()
        P.vllm_reshape_and_cache_flash(got[:, Nq * D:(Nq + Nkv) * D].view(T, Nkv, D), value, own_kc,
                                       c["value_cache"].clone(), c["slots"], c["kv"], c["k_scale"], c["v_scale"])
        assert torch.equal(bits(kc), bits(own_kc)), "seed %d: k cache is not the stored k" % seed
        return
    # fp8: within one step of the chain's bytes, and a correct rounding of the exact k / scale
    a, b = bits(kc), bits(ref_kc)
    close = fp8_close(a, b, c["fp8"])
    assert bool(close.all()), "seed %d: %d k-cache bytes more than one fp8 step from the chain's" % (
        seed, int((~close).sum()))
    slots = c["slots"]
    keep = torch.nonzero(slots >= 0).flatten()
    bs = c["key_cache"].shape[1]
    rows = kc.view(torch.uint8) if kc.dtype != torch.uint8 else kc
    codes = rows[slots[keep] // bs, slots[keep] % bs]  # [n, Nkv, D]
    s = (c["k_scale"].reshape(-1, 1) if c["k_scale"].numel() > 1 else c["k_scale"].reshape(1, 1)).double()
    lim = P.FP8_MAX[c["fp8"]]
    ex = (exact[keep, Nq:].double() / s).clamp(-lim, lim)
    ok = P.within_rounding(P.fp8_decode(codes, c["fp8"]), ex, mag[keep, Nq:].double() / s, c["fp8"], k=8)
    assert bool(ok.all()), "seed %d: %d k-cache values beyond one fp8 step of k / scale" % (seed, int((~ok).sum()))
    if stats is not None:
        stats.append(("kcache", (qkv.dtype, c["fp8"]), int(codes.numel()),
                      int((bits(kc) != bits(ref_kc)).sum())))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("seed", seeds(120, 32000))
def test_fused_qk_norm_rope_and_cache_matches_vllm_chain(seed, device):
    check_fused_qk_norm_rope_and_cache(seed, device)


def test_fused_qk_norm_rope_and_cache_covers_the_options():
    """The random cases above cover every kv_cache_dtype, both layouts, both
    scale shapes, uint8 caches and short slot mappings (so the suite cannot
    silently lose one)."""
    seen = set()
    for seed in seeds(120, 32000):
        c = random_vllm_cache_case(seed)
        seen.add(("kv", c["kv"]))
        seen.add(("hnd", c["hnd"]))
        seen.add(("per_head", c["per_head"] and c["fp8"] is not None))
        seen.add(("uint8", c["key_cache"].dtype == torch.uint8))
        seen.add(("short", c["slots"].shape[0] < c["qkv"].shape[0]))
        seen.add(("skip", bool((c["slots"] < 0).any())))
    want = {("kv", k) for k in KV_CACHE_DTYPES} | {(f, v) for f in ("hnd", "per_head", "uint8", "short", "skip")
                                                   for v in (False, True)}
    assert want <= seen, want - seen


def cache_case_small(kv="fp8", hnd=False, store=None):
    c = small_vllm_case()
    fp8 = KV_CACHE_DTYPES[kv]
    store = store or fp8 or torch.bfloat16
    shape = (2, 2, 8, 64) if hnd else (2, 8, 2, 64)
    caches = [torch.zeros(shape, dtype=store) for _ in range(2)]
    if hnd:
        caches = [x.permute(0, 2, 1, 3) for x in caches]
    c.update(kv=kv, fp8=fp8, slots=torch.tensor([3, -1, 9, 0, 15]), key_cache=caches[0], value_cache=caches[1],
             k_scale=torch.tensor([0.05]), v_scale=torch.tensor([0.07]), per_head=False, hnd=hnd)
    return c


def test_fused_qk_norm_rope_and_cache_short_slot_mapping_and_hnd_view():
    """slot_mapping shorter than qkv: every token normalized and rotated, the
    last ones not cached; an HND cache through its permuted view lands where
    vLLM writes it; a uint8 cache receives the fp8 bytes."""
    for kv, hnd, store in (("auto", True, None), ("fp8", False, torch.uint8), ("fp8_e4m3", True, None)):
        c = cache_case_small(kv, hnd, store)
        full = c["qkv"].clone()
        compat.fused_qk_norm_rope(*vllm_args(c, full))
        got = c["qkv"].clone()
        compat.fused_qk_norm_rope_and_cache(*cache_args(c, got))
        assert torch.equal(got, full), "every token's q and k, cached or not"
        kc = c["key_cache"]
        ref_kc, ref_vc = torch.zeros_like(kc), torch.zeros_like(c["value_cache"])
        if hnd:
            ref_kc, ref_vc = (torch.zeros(2, 2, 8, 64, dtype=kc.dtype).permute(0, 2, 1, 3) for _ in range(2))
        P.vllm_reshape_and_cache_flash(got[:, 256:384].view(6, 2, 64), got[:, 384:].view(6, 2, 64), ref_kc, ref_vc,
                                       c["slots"], kv, c["k_scale"], c["v_scale"])
        assert torch.equal(bits(c["value_cache"]), bits(ref_vc))
        if c["fp8"] is None:
            assert torch.equal(bits(kc), bits(ref_kc))
        else:
            assert bool(fp8_close(bits(kc), bits(ref_kc), c["fp8"]).all())
        # token 5 (past slot_mapping) and token 1 (slot -1) are nowhere: only slots 3, 9, 0, 15 are written
        for cache in (kc, c["value_cache"]):
            for slot in range(16):
                row = bits(cache[slot // 8, slot % 8])
                assert bool((row != 0).any()) == (slot in (3, 9, 0, 15)), (kv, hnd, slot)


def test_fused_qk_norm_rope_and_cache_errors_name_the_argument():
    c = cache_case_small()
    q, kc, vc = c["qkv"], c["key_cache"], c["value_cache"]
    before = snapshot(q, kc, vc)

    def fails(cls, name, **over):
        d = dict(c, **over)
        with pytest.raises(cls) as info:
            compat.fused_qk_norm_rope_and_cache(*cache_args(d, q))
        assert info.value.message.startswith(name), info.value
        assert unchanged(before, q, kc, vc)

    fails(qkvfuse.InvalidValueError, "kv_cache_dtype", kv="fp8_e3m4")
    fails(qkvfuse.ArgumentTypeError, "kv_cache_dtype", kv=None)
    fails(qkvfuse.DtypeError, "key_cache", key_cache=kc.view(torch.int8))
    fails(qkvfuse.DtypeError, "value_cache", kv="auto", key_cache=torch.zeros(2, 8, 2, 64, dtype=torch.bfloat16),
          value_cache=torch.zeros(2, 8, 2, 64, dtype=torch.float16))
    fails(qkvfuse.DtypeError, "key_cache", kv="fp8_e5m2")
    fails(qkvfuse.ShapeError, "slot_mapping", slots=torch.arange(7))
    fails(qkvfuse.ShapeError, "slot_mapping", slots=torch.tensor(3))
    fails(qkvfuse.OutOfRangeError, "slot_mapping", slots=torch.tensor([3, -1, 9, 0, 16]))
    fails(qkvfuse.ShapeError, "key_cache", key_cache=torch.zeros(2, 8, 4, 32, dtype=E4))
    fails(qkvfuse.ShapeError, "k_scale", k_scale=torch.ones(3))
    fails(qkvfuse.BadScaleError, "v_scale", v_scale=torch.zeros(1))
    fails(qkvfuse.NullPointerError, "k_scale", k_scale=None)
    fails(qkvfuse.DtypeError, "slot_mapping", slots=[3, -1, 9, 0, 15])
    fails(qkvfuse.OverlapError, "key_cache: overlaps the output value_cache", value_cache=kc)
    with pytest.raises(qkvfuse.InvalidValueError) as info:
        compat.fused_qk_norm_rope_and_cache(q, 4, 2, 1, 64, 1e-6, c["qw"], c["kw"], c["csc"], True, c["pos"], kc, vc,
                                            c["slots"], "fp8", c["k_scale"], c["v_scale"])
    assert info.value.message.startswith("num_heads_v") and unchanged(before, q, kc, vc)
    # "auto" ignores the scales, as vLLM does
    a = cache_case_small("auto")
    compat.fused_qk_norm_rope_and_cache(*cache_args(dict(a, k_scale=None, v_scale=torch.zeros(1)), a["qkv"]))


# ---- FlashInfer: apply_rope_with_cos_sin_cache (and _inplace) ------------------------------------

def random_rope_case(seed, float32=False):
    g = torch.Generator().manual_seed(seed)
    pick = picker(g)
    D = pick([64, 128, 256])
    R = pick([D, D, D // 2, D // 4])
    Nkv = pick([1, 2, 4])
    Nq = Nkv * pick([1, 2, 4])
    if pick([0, 0, 0, 1]):  # FlashInfer's RoPE takes any head counts: no GQA ratio
        Nq = pick([1, 3, 5, 7])
    T = pick([0, 1, 3, 17, 40])
    dtype = torch.float32 if float32 else pick([torch.bfloat16, torch.float16])
    scale = pick([0.05, 1.0, 30.0])
    qkv = (torch.randn(T, (Nq + 2 * Nkv) * D, generator=g) * scale).to(dtype)
    form = pick(["views", "separate", "3d"])
    q, k, v = qkv[:, :Nq * D], qkv[:, Nq * D:(Nq + Nkv) * D], qkv[:, (Nq + Nkv) * D:]
    if form == "separate":
        q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    elif form == "3d":
        q, k, v = q.reshape(T, Nq, D), k.reshape(T, Nkv, D), v.reshape(T, Nkv, D)
    max_pos = 512
    pos = torch.randint(0, max_pos, (T,), generator=g).to(pick([torch.int32, torch.int64]))
    return dict(qkv=qkv, q=q, k=k, v=v, D=D, R=R, Nq=Nq, Nkv=Nkv, pos=pos, form=form,
                csc=table(max_pos, R, torch.float32, theta=pick([1e4, 1e6])), is_neox=bool(pick([0, 1])))


def check_rope_values(c, q_out, k_out, seed, stats=None):
    """q_out, k_out against FlashInfer's formula: within one output step of the
    float32 value (FMA contraction is the only difference), nearly all
    bit-identical to the reference."""
    for name, x, out in (("query", c["q"], q_out), ("key", c["k"], k_out)):
        exact, mag = P.flashinfer_rope_f32(c["pos"], x, c["D"], c["csc"], c["is_neox"])
        o = out.reshape(exact.shape)
        ok = P.within_rounding(o, exact, mag, x.dtype, k=4)
        assert bool(ok.all()), "seed %d: %s: %d elements beyond one step" % (seed, name, int((~ok).sum()))
        same = o == exact.to(x.dtype)
        if stats is not None:
            stats.append(("rope", x.dtype, int(same.numel()), int((~same).sum())))
        if x.numel():
            assert float(same.float().mean()) > 0.97, "seed %d: %s: %.4f identical" % (
                seed, name, float(same.float().mean()))


def check_flashinfer_rope(seed, device, stats=None):
    c = random_rope_case(seed)
    d = on(device, c)
    d["q"], d["k"] = (x.clone() if c["form"] != "views" else None for x in (c["q"], c["k"]))
    qkv = c["qkv"].clone().to(device)
    if c["form"] == "views":
        d["q"], d["k"] = qkv[:, :c["Nq"] * c["D"]], qkv[:, c["Nq"] * c["D"]:(c["Nq"] + c["Nkv"]) * c["D"]]
    else:
        d["q"], d["k"] = d["q"].to(device), d["k"].to(device)
    before = snapshot(d["q"], d["k"], qkv)
    args = (d["pos"], d["q"], d["k"], c["D"], d["csc"], c["is_neox"])
    q_out, k_out = compat.flashinfer_apply_rope_with_cos_sin_cache(*args)
    assert unchanged(before, d["q"], d["k"], qkv), "the out-of-place call changed its inputs"
    assert q_out.shape == d["q"].shape and k_out.shape == d["k"].shape
    assert q_out.dtype == d["q"].dtype and k_out.dtype == d["k"].dtype and q_out.device == d["q"].device
    check_rope_values(c, q_out.cpu(), k_out.cpu(), seed, stats)
    # in place: the same bytes, in the caller's storage; the v columns of a packed buffer untouched
    ptrs = (d["q"].data_ptr(), d["k"].data_ptr())
    assert compat.flashinfer_apply_rope_with_cos_sin_cache_inplace(*args) is None
    assert (d["q"].data_ptr(), d["k"].data_ptr()) == ptrs
    assert torch.equal(bits(d["q"]), bits(q_out)) and torch.equal(bits(d["k"]), bits(k_out))
    if c["form"] == "views":
        H = (c["Nq"] + c["Nkv"]) * c["D"]
        assert torch.equal(bits(qkv[:, H:]), bits(c["qkv"][:, H:]))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("seed", seeds(80, 33000))
def test_flashinfer_apply_rope_matches(seed, device):
    check_flashinfer_rope(seed, device)


@pytest.mark.parametrize("seed", seeds(10, 33500))
def test_flashinfer_apply_rope_float32_superset(seed):
    """float32 query/key (FlashInfer takes float16/bfloat16 only): the same
    formula, within one float32 step."""
    c = random_rope_case(seed, float32=True)
    q_out, k_out = compat.flashinfer_apply_rope_with_cos_sin_cache(c["pos"], c["q"], c["k"], c["D"], c["csc"],
                                                                   c["is_neox"])
    check_rope_values(c, q_out, k_out, seed)


def test_flashinfer_apply_rope_errors_name_the_argument():
    c = first_case(random_rope_case, lambda c: c["q"].shape[0] >= 3 and c["form"] == "views")
    q, k, pos, csc, D = c["q"], c["k"], c["pos"], c["csc"], c["D"]
    before = snapshot(q, k)
    for fn in (compat.flashinfer_apply_rope_with_cos_sin_cache,
               compat.flashinfer_apply_rope_with_cos_sin_cache_inplace):
        for cls, name, args in (
                (qkvfuse.ShapeError, "query", (pos, q[:, :-2], k, D, csc)),
                (qkvfuse.ShapeError, "key", (pos, q, k.reshape(k.shape[0], 1, 1, -1), D, csc)),
                (qkvfuse.ShapeError, "query", (pos, q, k, D + 2, csc)),
                (qkvfuse.ShapeError, "positions", (pos[:-1], q, k, D, csc)),
                (qkvfuse.OutOfRangeError, "positions", (pos + 512, q, k, D, csc)),
                (qkvfuse.InvalidValueError, "cos_sin_cache", (pos, q, k, D, table(8, D + 2, torch.float32))),
                (qkvfuse.DtypeError, "key", (pos, q, k.float(), D, csc)),
                (qkvfuse.ArgumentTypeError, "head_size", (pos, q, k, float(D), csc)),
                (qkvfuse.DtypeError, "query", (pos, q.tolist(), k, D, csc)),
                (qkvfuse.NullPointerError, "cos_sin_cache", (pos, q, k, D, None))):
            with pytest.raises(cls) as info:
                fn(*args)
            assert info.value.message.startswith(name), (fn.__name__, info.value)
            assert unchanged(before, q, k)


# ---- FlashInfer: rope_quantize_fp8_append_paged_kv_cache -------------------------------------------

def random_append_case(seed):
    g = torch.Generator().manual_seed(seed)
    pick = picker(g)
    D = pick([64, 128])
    R = pick([D, D, D // 2])
    Nkv = pick([1, 2, 4])
    Nq = Nkv * pick([1, 2, 4])
    dtype = pick([torch.bfloat16, torch.float16])
    qd = pick(FP8)
    ps = pick([1, 4, 16])
    B = pick([1, 2, 3])
    lens = [int(torch.randint(1, 40, (1,), generator=g)) for _ in range(B)]
    pages = [-(-n // ps) for n in lens]
    max_pages = sum(pages) + pick([0, 3])
    kv_indices = torch.randperm(max_pages, generator=g)[:sum(pages)]
    kv_indptr = torch.tensor([0] + list(np.cumsum(pages)), dtype=torch.int64)
    # tokens: distinct (sequence, position) pairs, a few padding tokens (b = -1)
    pairs = [(b, p) for b in range(B) for p in range(lens[b])]
    perm = torch.randperm(len(pairs), generator=g)[:pick([1, 5, 20, 60])]
    bi = [pairs[i][0] for i in perm]
    po = [pairs[i][1] for i in perm]
    for i in range(len(bi)):
        if float(torch.rand(1, generator=g)) < 0.15:
            bi[i] = -1
    nnz = len(bi)
    idt = pick([torch.int32, torch.int64])
    scale = pick([0.05, 1.0, 30.0])
    x = (torch.randn(nnz, Nq + 2 * Nkv, D, generator=g) * scale).to(dtype)
    q, k, v = x[:, :Nq], x[:, Nq:Nq + Nkv], x[:, Nq + Nkv:]
    layout = pick(["NHD", "HND"])
    shape = (max_pages, ps, Nkv, D) if layout == "NHD" else (max_pages, Nkv, ps, D)
    caches = [torch.randint(0, 0x70, shape, generator=g, dtype=torch.uint8).view(qd) for _ in range(2)]
    max_pos = 256
    return dict(q_rope=q[..., :R], q_nope=q[..., R:] if R < D else pick([None, q[..., R:]]), k_rope=k[..., :R],
                k_nope=k[..., R:] if R < D else None, v=v, csc=table(max_pos, R, torch.float32, pick([1e4, 1e6])),
                pos_ids=torch.randint(0, max_pos, (nnz,), generator=g).to(idt), caches=caches,
                kv_indices=kv_indices.to(idt), kv_indptr=kv_indptr.to(idt),
                batch_indices=torch.tensor(bi, dtype=idt), positions=torch.tensor(po, dtype=idt),
                is_neox=bool(pick([0, 1])), qd=qd, quantize_dtype=pick([None, qd]) if qd == E4 else qd,
                sq=pick([1.0, 0.5, 2.0, 0.7, 3.0, 0.0123]), skv=pick([1.0, 0.25, 0.7, 3.0, 0.0123]), ps=ps,
                layout=layout, give_out=bool(pick([0, 1])), x=x, D=D, R=R)


def append_args(c, caches, q_rope_out=None, q_nope_out=None):
    return (c["q_rope"], c["k_rope"], c["q_nope"], c["k_nope"], c["v"], c["csc"], c["pos_ids"], tuple(caches),
            c["kv_indices"], c["kv_indptr"], c["batch_indices"], c["positions"], c["is_neox"], c["quantize_dtype"],
            c["sq"], c["skv"], c["ps"], c["layout"], q_rope_out, q_nope_out)


def check_flashinfer_append(seed, device, stats=None):
    c = random_append_case(seed)
    d = on(device, c)
    x = c["x"].to(device)  # the views of one buffer, on the device
    Nq = c["q_rope"].shape[1]
    Nkv = c["v"].shape[1]
    R, D = c["R"], c["D"]
    d.update(q_rope=x[:, :Nq, :R], q_nope=None if c["q_nope"] is None else x[:, :Nq, R:], k_rope=x[:, Nq:Nq + Nkv, :R],
             k_nope=None if c["k_nope"] is None else x[:, Nq:Nq + Nkv, R:], v=x[:, Nq + Nkv:])
    caches = [t.clone().to(device) for t in c["caches"]]
    outs = (None, None)
    if c["give_out"]:
        full = torch.zeros(x.shape[0], Nq, D, dtype=c["qd"], device=device)
        outs = (full[..., :R], full[..., R:] if R < D or c["q_nope"] is not None else None)
    before_x = snapshot(x)
    q_rope_out, q_nope_out = compat.flashinfer_rope_quantize_fp8_append_paged_kv_cache(*append_args(d, caches, *outs))
    assert unchanged(before_x, x), "inputs must not change"
    if c["give_out"]:
        assert q_rope_out.data_ptr() == outs[0].data_ptr()
    assert q_rope_out.shape == c["q_rope"].shape and q_nope_out.shape[:-1] == c["q_rope"].shape[:-1]
    assert q_nope_out.shape[-1] == D - R and q_rope_out.dtype == q_nope_out.dtype == c["qd"]
    ref_caches = [t.clone() for t in c["caches"]]
    ref_rope_out, ref_nope_out = P.flashinfer_rope_quantize_fp8_append_paged_kv_cache(*append_args(c, ref_caches))
    qd = c["qd"]
    for name, a, b in (("k_cache", caches[0], ref_caches[0]), ("v_cache", caches[1], ref_caches[1])):
        ca, cb = bits(a), bits(b)
        close = fp8_close(ca, cb, qd)
        assert bool(close.all()), "seed %d: %s: %d bytes beyond one fp8 step" % (seed, name, int((~close).sum()))
        if stats is not None:
            stats.append((name, (c["x"].dtype, qd, c["skv"]), int(ca.numel()), int((ca != cb).sum())))
    keep = torch.nonzero(c["batch_indices"] >= 0).flatten()
    for name, a, b in (("q_rope_out", q_rope_out, ref_rope_out), ("q_nope_out", q_nope_out, ref_nope_out)):
        ca, cb = bits(a.cpu()[keep]), bits(b[keep])
        close = fp8_close(ca, cb, qd)
        assert bool(close.all()), "seed %d: %s: %d bytes beyond one fp8 step" % (seed, name, int((~close).sum()))
        if stats is not None:
            stats.append((name, (c["x"].dtype, qd, c["sq"]), int(ca.numel()), int((ca != cb).sum())))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("seed", seeds(80, 34000))
def test_flashinfer_rope_quantize_fp8_append_paged_kv_cache_matches(seed, device):
    check_flashinfer_append(seed, device)


def append_case_small():
    return first_case(random_append_case, lambda c: c["R"] < c["D"] and c["layout"] == "NHD" and c["qd"] == E4
                      and c["x"].shape[0] >= 5 and c["q_nope"] is not None)


def test_flashinfer_append_split_heads_must_be_views_of_one_tensor():
    """q_nope / k_nope / q_nope_out apart from their rope halves cannot be one
    qkvfuse row: UnsupportedError naming them, before anything is written
    (the library's page-table support not needed to see that)."""
    c = append_case_small()
    caches = [t.clone() for t in c["caches"]]
    touched = [c["x"]] + caches
    before = snapshot(*touched)
    for over, name in ((dict(q_nope=c["q_nope"].clone()), "q_nope"), (dict(k_nope=c["k_nope"].clone()), "k_nope")):
        with pytest.raises(qkvfuse.UnsupportedError) as info:
            compat.flashinfer_rope_quantize_fp8_append_paged_kv_cache(*append_args(dict(c, **over), caches))
        assert info.value.message.startswith(name), info.value
    full = torch.zeros(c["x"].shape[0], c["q_rope"].shape[1], c["D"], dtype=E4)
    for outs, cls, name in (((full[..., :c["R"]], torch.zeros_like(full[..., c["R"]:])), qkvfuse.UnsupportedError,
                             "q_nope_out"),
                            ((full[..., :c["R"]], None), qkvfuse.InvalidValueError, "q_nope_out"),
                            ((None, full[..., c["R"]:]), qkvfuse.InvalidValueError, "q_rope_out")):
        with pytest.raises(cls) as info:
            compat.flashinfer_rope_quantize_fp8_append_paged_kv_cache(*append_args(c, caches, *outs))
        assert info.value.message.startswith(name), info.value
    assert unchanged(before, *touched) and not bool((full.view(torch.uint8) != 0).any())


def test_flashinfer_append_errors_name_the_argument():
    c = append_case_small()
    caches = [t.clone() for t in c["caches"]]
    touched = [c["x"]] + caches
    before = snapshot(*touched)

    def fails(cls, name, *extra, **over):
        with pytest.raises(cls) as info:
            compat.flashinfer_rope_quantize_fp8_append_paged_kv_cache(
                *append_args(dict(c, **over), over.get("caches", caches)), *extra)
        assert info.value.message.startswith(name), info.value
        assert unchanged(before, *touched)

    fails(qkvfuse.UnsupportedError, "k_rope", k_rope=c["k_rope"][:, 0], k_nope=None, v=None)
    fails(qkvfuse.NullPointerError, "v", v=None)
    fails(qkvfuse.ShapeError, "k_rope", k_rope=c["k_rope"].unsqueeze(0))
    fails(qkvfuse.InvalidValueError, "quantize_dtype", quantize_dtype=torch.bfloat16)
    fails(qkvfuse.DtypeError, "paged_kv_cache", quantize_dtype=E5)
    fails(qkvfuse.InvalidValueError, "kv_layout", layout="NDH")
    fails(qkvfuse.InvalidValueError, "page_size", ps=c["ps"] + 1)
    fails(qkvfuse.BadScaleError, "quant_scale_q", sq=0.0)
    fails(qkvfuse.BadScaleError, "quant_scale_kv", skv=float("inf"))
    fails(qkvfuse.ArgumentTypeError, "quant_scale_q", sq="1")
    fails(qkvfuse.InvalidValueError, "paged_kv_cache", caches=caches[:1])
    fails(qkvfuse.ArgumentTypeError, "is_neox", is_neox=None)
    fails(qkvfuse.DtypeError, "positions", positions=c["positions"].tolist())
    fails(qkvfuse.ShapeError, "positions", positions=c["positions"][:-1])
    fails(qkvfuse.OutOfRangeError, "pos_ids", pos_ids=c["pos_ids"] + 256)
    fails(qkvfuse.ShapeError, "v", v=c["v"][:, :, :-2])


# ---- SGLang: apply_rope_with_cos_sin_cache_inplace with the fused KV-buffer write -----------------

def random_sglang_case(seed):
    c = random_rope_case(seed)
    g = torch.Generator().manual_seed(seed + 11)
    pick = picker(g)
    T, Nkv, D = c["q"].shape[0], c["Nkv"], c["D"]
    rows = T + pick([0, 5, 40])
    dt = c["q"].dtype
    three = bool(pick([0, 1]))
    shape = (rows, Nkv, D) if three else (rows, Nkv * D)
    kb, vb = (torch.randn(shape, generator=g).to(dt) for _ in range(2))
    loc = torch.randperm(rows, generator=g)[:T]
    value = c["v"] if pick([0, 1]) else c["v"].clone()
    arg = pick(["ours", "peer", "namespace"])
    c.update(k_buffer=kb, v_buffer=vb, cache_loc=loc, value=value, arg_kind=arg, fused=bool(pick([0, 1, 1])))
    return c


def fused_arg(kind, value, k_buffer, v_buffer, cache_loc):
    if kind == "ours":
        return compat.FusedSetKVBufferArg(value, k_buffer, v_buffer, None, None, cache_loc)
    if kind == "peer":
        return P.FusedSetKVBufferArg(value, k_buffer, v_buffer, None, None, cache_loc)
    import types
    return types.SimpleNamespace(value=value, k_buffer=k_buffer, v_buffer=v_buffer, cache_loc=cache_loc)


def check_sglang(seed, device, stats=None):
    c = random_sglang_case(seed)
    qkv = c["qkv"].clone().to(device)
    Nq, Nkv, D = c["Nq"], c["Nkv"], c["D"]
    if c["form"] == "views":
        q, k = qkv[:, :Nq * D], qkv[:, Nq * D:(Nq + Nkv) * D]
    else:
        q, k = c["q"].clone().to(device), c["k"].clone().to(device)
    value = qkv[:, (Nq + Nkv) * D:] if c["value"] is c["v"] and c["form"] == "views" else c["value"].to(device)
    kb, vb = c["k_buffer"].clone().to(device), c["v_buffer"].clone().to(device)
    a = fused_arg(c["arg_kind"], value, kb, vb, c["cache_loc"].to(device)) if c["fused"] else None
    assert compat.sglang_apply_rope_with_cos_sin_cache_inplace(c["pos"].to(device), q, k, D, c["csc"].to(device),
                                                               c["is_neox"], a) is None
    check_rope_values(c, q.cpu(), k.cpu(), seed, stats)
    if c["form"] == "views":
        assert torch.equal(bits(qkv[:, (Nq + Nkv) * D:]), bits(c["qkv"][:, (Nq + Nkv) * D:]))
    if not c["fused"]:
        assert torch.equal(bits(kb), bits(c["k_buffer"])) and torch.equal(bits(vb), bits(c["v_buffer"]))
        return
    # the buffers: our rotated key rows and the value bits at cache_loc, every other row as it was
    ref_kb, ref_vb = c["k_buffer"].clone(), c["v_buffer"].clone()
    loc = c["cache_loc"]
    width = Nkv * D
    ref_kb.view(ref_kb.shape[0], width)[loc] = k.cpu().reshape(k.shape[0], width)
    ref_vb.view(ref_vb.shape[0], width)[loc] = c["value"].reshape(c["value"].shape[0], width)
    assert torch.equal(bits(kb), bits(ref_kb)), "seed %d: k_buffer is not the rotated key at cache_loc" % seed
    assert torch.equal(bits(vb), bits(ref_vb)), "seed %d: v_buffer is not value at cache_loc" % seed
    # and the peer reference, on the same tensors: equal wherever its rotated key equals ours
    rq, rk = c["q"].clone(), c["k"].clone()
    pk, pv = c["k_buffer"].clone(), c["v_buffer"].clone()
    P.sglang_apply_rope_with_cos_sin_cache_inplace(c["pos"], rq, rk, D, c["csc"], c["is_neox"],
                                                   P.FusedSetKVBufferArg(c["value"], pk, pv, None, None, loc))
    assert torch.equal(bits(vb), bits(pv))
    if torch.equal(bits(k.cpu()), bits(rk)):
        assert torch.equal(bits(kb), bits(pk))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("seed", seeds(80, 35000))
def test_sglang_apply_rope_with_fused_set_kv_buffer_matches(seed, device):
    check_sglang(seed, device)


def test_sglang_errors_name_the_argument():
    c = first_case(random_sglang_case, lambda c: c["q"].shape[0] >= 3)
    q, k, D = c["q"].clone(), c["k"].clone(), c["D"]
    kb, vb, loc = c["k_buffer"].clone(), c["v_buffer"].clone(), c["cache_loc"]
    touched = [q, k, kb, vb]
    before = snapshot(*touched)

    def fails(cls, name, a, **over):
        args = dict(positions=c["pos"], query=q, key=k, head_size=D, cos_sin_cache=c["csc"], is_neox=c["is_neox"],
                    fused_set_kv_buffer_arg=a)
        args.update(over)
        with pytest.raises(cls) as info:
            compat.sglang_apply_rope_with_cos_sin_cache_inplace(**args)
        assert info.value.message.startswith(name), info.value
        assert unchanged(before, *touched)

    Arg = compat.FusedSetKVBufferArg
    fails(qkvfuse.InvalidValueError, "fused_set_kv_buffer_arg.k_scale", Arg(c["value"], kb, vb, 1.0, None, loc))
    fails(qkvfuse.InvalidValueError, "fused_set_kv_buffer_arg.v_scale", Arg(c["value"], kb, vb, None, 2.0, loc))
    fails(qkvfuse.DtypeError, "fused_set_kv_buffer_arg.k_buffer", Arg(c["value"], kb.float(), vb, None, None, loc))
    fails(qkvfuse.DtypeError, "fused_set_kv_buffer_arg.v_buffer", Arg(c["value"], kb, vb.float(), None, None, loc))
    fails(qkvfuse.ShapeError, "fused_set_kv_buffer_arg.k_buffer",
          Arg(c["value"], kb.reshape(kb.shape[0], -1)[:, :-2], vb, None, None, loc))
    fails(qkvfuse.OutOfRangeError, "fused_set_kv_buffer_arg.cache_loc",
          Arg(c["value"], kb, vb, None, None, loc + kb.shape[0]))
    fails(qkvfuse.ShapeError, "fused_set_kv_buffer_arg.value",
          Arg(c["value"][:, :-2].contiguous(), kb, vb, None, None, loc))
    fails(qkvfuse.InvalidValueError, "fused_set_kv_buffer_arg", object())
    fails(qkvfuse.DtypeError, "fused_set_kv_buffer_arg.cache_loc", Arg(c["value"], kb, vb, None, None, loc.tolist()))
    fails(qkvfuse.ShapeError, "query", None, query=q[..., :-2])
    fails(qkvfuse.ArgumentTypeError, "enable_pdl", Arg(c["value"], kb, vb, None, None, loc.tolist()), enable_pdl="x")


# ---- signatures --------------------------------------------------------------------------------

def _params(fn):
    return [(p.name, p.default) for p in inspect.signature(fn).parameters.values()]


def test_signatures_are_the_peers():
    """Argument names, order and defaults are the peers' (peer_ref.py writes
    each peer's signature), and the namespaces hold them under the peers'
    own names."""
    assert _params(compat.fused_qk_norm_rope) == _params(P.vllm_fused_qk_norm_rope)
    assert _params(compat.flashinfer_apply_rope_with_cos_sin_cache) == _params(
        P.flashinfer_apply_rope_with_cos_sin_cache)
    assert _params(compat.flashinfer_apply_rope_with_cos_sin_cache_inplace) == _params(
        P.flashinfer_apply_rope_with_cos_sin_cache_inplace)
    assert _params(compat.flashinfer_rope_quantize_fp8_append_paged_kv_cache) == _params(
        P.flashinfer_rope_quantize_fp8_append_paged_kv_cache)
    assert _params(compat.sglang_apply_rope_with_cos_sin_cache_inplace) == _params(
        P.sglang_apply_rope_with_cos_sin_cache_inplace)
    # the fused vLLM call: fused_qk_norm_rope's arguments, reshape_and_cache_flash's cache arguments, then the option
    fused = _params(compat.fused_qk_norm_rope_and_cache)
    assert fused[:11] == _params(P.vllm_fused_qk_norm_rope)[:11]
    assert fused[11:17] == _params(P.vllm_reshape_and_cache_flash)[2:]
    assert fused[17:] == [("forced_token_heads_per_warp", -1)]
    assert [f.name for f in __import__("dataclasses").fields(compat.FusedSetKVBufferArg)] == [
        f.name for f in __import__("dataclasses").fields(P.FusedSetKVBufferArg)]
    assert compat.vllm.fused_qk_norm_rope is compat.fused_qk_norm_rope
    assert compat.vllm.fused_qk_norm_rope_and_cache is compat.fused_qk_norm_rope_and_cache
    assert compat.flashinfer.apply_rope_with_cos_sin_cache is compat.flashinfer_apply_rope_with_cos_sin_cache
    assert (compat.flashinfer.apply_rope_with_cos_sin_cache_inplace
            is compat.flashinfer_apply_rope_with_cos_sin_cache_inplace)
    assert (compat.flashinfer.rope_quantize_fp8_append_paged_kv_cache
            is compat.flashinfer_rope_quantize_fp8_append_paged_kv_cache)
    assert compat.sglang.apply_rope_with_cos_sin_cache_inplace is compat.sglang_apply_rope_with_cos_sin_cache_inplace
