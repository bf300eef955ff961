# SPDX-License-Identifier: Apache-2.0
"""The peer references (peer_ref.py) on hand-computable cases: known fp8
codes, identity and quarter-turn rotations, known cache placements, and a
float64 evaluation of each formula. Skipped without torch."""
import math

import pytest

from conftest import HAVE_TORCH

pytestmark = pytest.mark.skipif(not HAVE_TORCH, reason="torch is not installed")

if HAVE_TORCH:
    import torch

    import peer_ref as P

E4, E5 = (torch.float8_e4m3fn, torch.float8_e5m2) if HAVE_TORCH else (None, None)


def table(max_pos, R, dtype, theta=10000.0):
    """[max_pos, R] rows [cos | sin] of p * theta^(-2i/R), computed in float64."""
    i = torch.arange(R // 2, dtype=torch.float64)
    ang = torch.arange(max_pos, dtype=torch.float64)[:, None] * theta ** (-2 * i / R)
    return torch.cat([ang.cos(), ang.sin()], dim=1).to(dtype)


def quarter_turn_row(csc, p):
    """Make row p of the table cos = 0, sin = 1 (exact in every dtype)."""
    h = csc.shape[1] // 2
    csc[p, :h] = 0
    csc[p, h:] = 1


def rot90(x, R, is_neox):
    """x [..., D] rotated by a quarter turn on its first R dims, exactly."""
    o = x.clone()
    h = R // 2
    if is_neox:
        o[..., :h], o[..., h:R] = -x[..., h:R], x[..., :h]
    else:
        o[..., 0:R:2], o[..., 1:R:2] = -x[..., 1:R:2], x[..., 0:R:2]
    return o


def rope64(y, cos, sin, is_neox):
    """Independent float64 RoPE of y [T, H, D] with cos/sin [T, R/2]."""
    o = y.clone()
    T, H, D = y.shape
    h = cos.shape[1]
    for j in range(h):
        c, s = cos[:, j:j + 1], sin[:, j:j + 1]
        a, b = (j, j + h) if is_neox else (2 * j, 2 * j + 1)
        o[:, :, a] = y[:, :, a] * c - y[:, :, b] * s
        o[:, :, b] = y[:, :, b] * c + y[:, :, a] * s
    return o


# ---- number formats --------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype,cases", [
    (torch.float8_e4m3fn if HAVE_TORCH else None, [
        (1.0, 0x38), (-1.0, 0xB8), (448.0, 0x7E), (449.0, 0x7E), (464.0, 0x7E), (1e9, 0x7E),
        (math.inf, 0x7E), (-math.inf, 0xFE), (math.nan, 0x7F), (-math.nan, 0x7F),
        (1.0625, 0x38), (1.1875, 0x3A), (0.75, 0x34), (1.5, 0x3C),  # ties go to the even code
        (2.0 ** -9, 0x01), (2.0 ** -10, 0x00), (1.5 * 2.0 ** -9, 0x02), (-0.0, 0x80), (-(2.0 ** -11), 0x80)]),
    (torch.float8_e5m2 if HAVE_TORCH else None, [
        (1.0, 0x3C), (1.5, 0x3E), (57344.0, 0x7B), (61440.0, 0x7B), (1e9, 0x7B), (math.inf, 0x7B),
        (-math.inf, 0xFB), (math.nan, 0x7F), (1.125, 0x3C), (1.375, 0x3E), (2.0 ** -16, 0x01),
        (2.0 ** -17, 0x00), (-0.0, 0x80)]),
])
def test_fp8_codes(dtype, cases):
    x = torch.tensor([c[0] for c in cases], dtype=torch.float32)
    got = P.fp8_encode(x, dtype).tolist()
    assert got == [c[1] for c in cases]


@pytest.mark.parametrize("dtype", ["e4m3", "e5m2"])
def test_fp8_codec_matches_torch_cast_in_range(dtype):
    """Inside the finite range torch's own cast also rounds to nearest even:
    the table codec and it agree on every value, subnormals included."""
    dt = E4 if dtype == "e4m3" else E5
    g = torch.Generator().manual_seed(3)
    x = (torch.randn(100000, generator=g) * torch.exp(3 * torch.randn(100000, generator=g))).float()
    x = x.clamp(-P.FP8_MAX[dt], P.FP8_MAX[dt])
    assert torch.equal(P.fp8_encode(x, dt), x.to(dt).view(torch.uint8))
    codes = torch.arange(256).to(torch.uint8)
    v = P.fp8_decode(codes, dt)
    fin = torch.isfinite(v)
    assert torch.equal(P.fp8_encode(v[fin].float(), dt), codes[fin])


def test_ulp():
    one = torch.tensor([1.0, 1.5, 0.0, 448.0])
    assert P.ulp(one, torch.bfloat16).tolist() == [2 ** -7, 2 ** -7, 2 ** -133, 2.0]
    assert P.ulp(one, torch.float16).tolist() == [2 ** -10, 2 ** -10, 2 ** -24, 0.25]
    assert P.ulp(one, E4).tolist() == [0.125, 0.125, 2 ** -9, 32.0]


# ---- vLLM fused_qk_norm_rope -------------------------------------------------------------------------

def vllm_problem(T, Nq, Nkv, D, R, dtype, seed, max_pos=64):
    g = torch.Generator().manual_seed(seed)
    qkv = torch.randn(T, (Nq + 2 * Nkv) * D, generator=g).to(dtype)
    qw = (1 + 0.2 * torch.randn(D, generator=g)).to(dtype)
    kw = (1 + 0.2 * torch.randn(D, generator=g)).to(dtype)
    pos = torch.randint(0, max_pos, (T,), generator=g)
    return qkv, qw, kw, table(max_pos, R, dtype), pos


def test_vllm_identity_position_is_the_norm():
    """cos = 1, sin = 0 at position 0: x = 3 everywhere, w = 2 gives
    y = 3 / sqrt(9 + eps) * 2 -> exactly 2 after rounding; v untouched."""
    T, Nq, Nkv, D = 2, 2, 1, 64
    qkv = torch.full((T, (Nq + 2 * Nkv) * D), 3.0, dtype=torch.bfloat16)
    qkv[:, (Nq + Nkv) * D:] = torch.arange(Nkv * D).to(torch.bfloat16)
    v_before = qkv[:, (Nq + Nkv) * D:].clone()
    w = torch.full((D,), 2.0, dtype=torch.bfloat16)
    P.vllm_fused_qk_norm_rope(qkv, Nq, Nkv, Nkv, D, 1e-6, w, w, table(4, D, torch.bfloat16), True,
                              torch.zeros(T, dtype=torch.int64))
    assert torch.equal(qkv[:, :(Nq + Nkv) * D], torch.full((T, (Nq + Nkv) * D), 2.0, dtype=torch.bfloat16))
    assert torch.equal(qkv[:, (Nq + Nkv) * D:], v_before)


@pytest.mark.parametrize("is_neox", [True, False])
@pytest.mark.parametrize("R", [64, 32])
def test_vllm_quarter_turn_is_a_signed_permutation(is_neox, R):
    """At a row with cos = 0, sin = 1 the output is exactly the norm-only
    output with its pairs swapped and one side negated; dims >= R equal."""
    T, Nq, Nkv, D = 3, 2, 2, 64
    qkv, qw, kw, csc, _ = vllm_problem(T, Nq, Nkv, D, R, torch.float16, 1)
    csc[0, :R // 2], csc[0, R // 2:] = 1, 0
    quarter_turn_row(csc, 1)
    a, b = qkv.clone(), qkv.clone()
    P.vllm_fused_qk_norm_rope(a, Nq, Nkv, Nkv, D, 1e-6, qw, kw, csc, is_neox, torch.zeros(T, dtype=torch.int64))
    P.vllm_fused_qk_norm_rope(b, Nq, Nkv, Nkv, D, 1e-6, qw, kw, csc, is_neox, torch.ones(T, dtype=torch.int64))
    heads = (Nq + Nkv)
    na = a[:, :heads * D].reshape(T, heads, D)
    nb = b[:, :heads * D].reshape(T, heads, D)
    assert torch.equal(nb, rot90(na, R, is_neox))
    assert not torch.equal(na, nb)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("is_neox", [True, False])
@pytest.mark.parametrize("D,R", [(64, 64), (128, 64), (256, 256), (128, 32)])
def test_vllm_against_float64(dtype, is_neox, D, R):
    """Within one output step (plus float32 slack) of the exact formula."""
    dt = getattr(torch, dtype)
    T, Nq, Nkv = 7, 4, 2
    qkv, qw, kw, csc, pos = vllm_problem(T, Nq, Nkv, D, R, dt, D + R)
    out = qkv.clone()
    P.vllm_fused_qk_norm_rope(out, Nq, Nkv, Nkv, D, 1e-5, qw, kw, csc, is_neox, pos)
    x = qkv.reshape(T, Nq + 2 * Nkv, D)[:, :Nq + Nkv].double()
    eps = float(torch.tensor(1e-5, dtype=torch.float32))
    r = 1 / torch.sqrt((x * x).mean(-1, keepdim=True) + eps)
    w = torch.cat([qw.double().expand(Nq, D), kw.double().expand(Nkv, D)])
    y = x * r * w
    rows = csc[pos].double()
    exact = rope64(y, rows[:, :R // 2], rows[:, R // 2:], is_neox)
    mag = P._rope_terms(y, rows[:, :R // 2], rows[:, R // 2:], is_neox)
    got = out[:, :(Nq + Nkv) * D].reshape(T, Nq + Nkv, D)
    assert bool(P.within_rounding(got, exact, mag, dt, k=16).all())
    # no rounding between the norm and RoPE: where rounding y first would
    # change the result, the reference follows the single rounding
    once = exact.to(dt)
    twice = rope64(y.to(dt).double(), rows[:, :R // 2], rows[:, R // 2:], is_neox).to(dt)
    differ = once != twice
    assert int(differ.sum()) > 0
    assert float((got[differ] == once[differ]).float().mean()) > 0.9
    assert torch.equal(out[:, (Nq + Nkv) * D:], qkv[:, (Nq + Nkv) * D:])


def test_vllm_rejects_what_the_peer_rejects():
    qkv, qw, kw, csc, pos = vllm_problem(2, 2, 1, 64, 64, torch.bfloat16, 0)
    with pytest.raises(RuntimeError):
        P.vllm_fused_qk_norm_rope(qkv, 2, 1, 1, 64, 1e-6, qw, kw, csc, True, pos.int())
    with pytest.raises(RuntimeError):
        P.vllm_fused_qk_norm_rope(qkv.float(), 2, 1, 1, 64, 1e-6, qw.float(), kw.float(), csc, True, pos)
    q2, qw2, kw2, csc2, pos2 = vllm_problem(2, 2, 1, 96, 96, torch.bfloat16, 0)
    with pytest.raises(RuntimeError):
        P.vllm_fused_qk_norm_rope(q2, 2, 1, 1, 96, 1e-6, qw2, kw2, csc2, True, pos2)


# ---- vLLM reshape_and_cache_flash --------------------------------------------------------------------

def test_vllm_cache_placement_nhd_and_hnd():
    """slot s -> block s // bs, row s % bs; -1 skips; rows past
    len(slot_mapping) are ignored; an HND cache passed as its permuted view
    receives the same logical rows in head-major memory."""
    blocks, bs, Nkv, D = 3, 4, 2, 8
    key = torch.arange(5 * Nkv * D, dtype=torch.float32).reshape(5, Nkv, D).to(torch.bfloat16)
    value = -key
    slots = torch.tensor([5, -1, 0, 11])
    kc = torch.full((blocks, bs, Nkv, D), 7.0, dtype=torch.bfloat16)
    vc = kc.clone()
    one = torch.ones(1)
    P.vllm_reshape_and_cache_flash(key, value, kc, vc, slots, "auto", one, one)
    expect = torch.full_like(kc, 7.0)
    expect[1, 1], expect[0, 0], expect[2, 3] = key[0], key[2], key[3]
    assert torch.equal(kc, expect)
    expect_v = torch.full_like(kc, 7.0)
    expect_v[1, 1], expect_v[0, 0], expect_v[2, 3] = value[0], value[2], value[3]
    assert torch.equal(vc, expect_v)

    base_k = torch.zeros(blocks, Nkv, bs, D, dtype=torch.bfloat16)
    base_v = torch.zeros_like(base_k)
    P.vllm_reshape_and_cache_flash(key, value, base_k.permute(0, 2, 1, 3), base_v.permute(0, 2, 1, 3), slots,
                                   "bfloat16", one, one)
    for h in range(Nkv):
        assert torch.equal(base_k[1, h, 1], key[0, h]) and torch.equal(base_k[2, h, 3], key[3, h])
        assert torch.equal(base_v[0, h, 0], value[2, h])
    assert int((base_k != 0).sum()) == 3 * Nkv * D - 1  # key[0, 0, 0] is 0


@pytest.mark.parametrize("kv_dtype,code_15,code_075", [("fp8", 0x3C, 0x34), ("fp8_e4m3", 0x3C, 0x34),
                                                        ("fp8_e5m2", 0x3E, 0x3A)])
def test_vllm_cache_fp8_scale_divides(kv_dtype, code_15, code_075):
    """fp8(x / scale): 3 / 2 = 1.5 and, with per-head scales [2, 4], 3 / 4 = 0.75;
    1e6 saturates to the largest finite code; uint8 caches take the codes."""
    key = torch.full((1, 2, 4), 3.0, dtype=torch.bfloat16)
    key[0, 0, 3] = 1e6
    kc = torch.zeros(1, 2, 2, 4, dtype=torch.uint8)
    vc = torch.zeros_like(kc)
    P.vllm_reshape_and_cache_flash(key, key, kc, vc, torch.tensor([1]), kv_dtype, torch.tensor([2.0]),
                                   torch.tensor([2.0]))
    top = 0x7E if kv_dtype != "fp8_e5m2" else 0x7B
    assert kc[0, 1, 0].tolist() == [code_15, code_15, code_15, top] and torch.equal(kc, vc)
    assert int(kc[0, 0].sum()) == 0
    dt = E5 if kv_dtype == "fp8_e5m2" else E4
    kc8 = torch.zeros(1, 2, 2, 4, dtype=dt)
    P.vllm_reshape_and_cache_flash(key, key, kc8, torch.zeros_like(kc8), torch.tensor([0]), kv_dtype,
                                   torch.tensor([2.0, 4.0]), torch.tensor([2.0, 4.0]))
    got = kc8.view(torch.uint8)[0, 0]
    assert got[0].tolist() == [code_15, code_15, code_15, top]
    assert got[1].tolist() == [code_075] * 4


def test_vllm_cache_rejects_what_the_peer_rejects():
    key = torch.zeros(1, 2, 4, dtype=torch.float16)
    kc = torch.zeros(1, 2, 2, 4, dtype=torch.bfloat16)
    with pytest.raises(RuntimeError):
        P.vllm_reshape_and_cache_flash(key, key, kc, kc.clone(), torch.tensor([0]), "auto", torch.ones(1),
                                       torch.ones(1))
    with pytest.raises(RuntimeError):
        P.vllm_reshape_and_cache_flash(key, key, kc, kc.clone(), torch.tensor([0]), "int8", torch.ones(1),
                                       torch.ones(1))
    with pytest.raises(RuntimeError):
        P.vllm_reshape_and_cache_flash(key, key, kc, kc.clone(), torch.tensor([0]), "fp8", torch.ones(3),
                                       torch.ones(3))


def test_vllm_chain_rounds_k_twice_before_fp8():
    """The two-call chain quantizes the bf16-rounded k: its cache equals
    fp8(float(bf16(k_f32)) / s) exactly and differs from the single-rounding
    fp8(k_f32 / s) in a few percent of the bytes (one fp8 step each)."""
    T, Nq, Nkv, D, bs = 64, 2, 2, 128, 16
    qkv, qw, kw, csc, pos = vllm_problem(T, Nq, Nkv, D, D, torch.bfloat16, 11)
    kc = torch.zeros(T // bs, bs, Nkv, D, dtype=E4)
    vc = torch.zeros_like(kc)
    s = torch.tensor([0.05])
    slots = torch.arange(T)
    out = qkv.clone()
    P.vllm_qk_norm_rope_and_cache(out, Nq, Nkv, Nkv, D, 1e-6, qw, kw, csc, True, pos, kc, vc, slots, "fp8", s, s)
    k_f32, _ = P.vllm_qk_norm_rope_f32(qkv, Nq, Nkv, Nkv, D, 1e-6, qw, kw, csc, True, pos)
    k_f32 = k_f32[:, Nq:]
    twice = P.fp8_encode(k_f32.to(torch.bfloat16).float() / s, E4)
    once = P.fp8_encode(k_f32 / s, E4)
    got = kc.view(torch.uint8).reshape(T, Nkv, D)
    assert torch.equal(got, twice)
    diff = (once != twice)
    rate = float(diff.float().mean())
    assert 0.005 < rate < 0.1, rate
    step = (P.fp8_decode(once, E4) - P.fp8_decode(twice, E4)).abs()
    assert bool((step[diff] <= P.ulp(P.fp8_decode(twice, E4), E4)[diff] * 1.0).all())
    v = qkv[:, (Nq + Nkv) * D:].reshape(T, Nkv, D)
    assert torch.equal(vc.view(torch.uint8).reshape(T, Nkv, D), P.fp8_encode(v.float() / s, E4))


# ---- FlashInfer --------------------------------------------------------------------------------------

def fi_problem(T, Nq, Nkv, hs, R, dtype, seed, max_pos=32):
    g = torch.Generator().manual_seed(seed)
    qkv = torch.randn(T, (Nq + 2 * Nkv) * hs, generator=g).to(dtype)
    return qkv, table(max_pos, R, torch.float32), torch.randint(0, max_pos, (T,), generator=g)


@pytest.mark.parametrize("is_neox", [True, False])
def test_flashinfer_identity_and_quarter_turn(is_neox):
    T, Nq, Nkv, hs, R = 3, 2, 1, 64, 32
    qkv, csc, _ = fi_problem(T, Nq, Nkv, hs, R, torch.bfloat16, 2)
    quarter_turn_row(csc, 3)
    q, k = qkv[:, :Nq * hs], qkv[:, Nq * hs:(Nq + Nkv) * hs]
    before = qkv.clone()
    qo, ko = P.flashinfer_apply_rope_with_cos_sin_cache(torch.zeros(T, dtype=torch.int32), q, k, hs, csc, is_neox)
    assert torch.equal(qo, q) and torch.equal(ko, k) and torch.equal(qkv, before)
    qo, ko = P.flashinfer_apply_rope_with_cos_sin_cache(torch.full((T,), 3), q, k, hs, csc, is_neox)
    assert torch.equal(qo.view(T, Nq, hs), rot90(q.reshape(T, Nq, hs), R, is_neox))
    assert torch.equal(ko.view(T, Nkv, hs), rot90(k.reshape(T, Nkv, hs), R, is_neox))
    P.flashinfer_apply_rope_with_cos_sin_cache_inplace(torch.full((T,), 3), q, k, hs, csc, is_neox)
    assert torch.equal(q, qo) and torch.equal(k, ko)
    assert torch.equal(qkv[:, (Nq + Nkv) * hs:], before[:, (Nq + Nkv) * hs:])


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("is_neox", [True, False])
def test_flashinfer_against_float64(dtype, is_neox):
    dt = getattr(torch, dtype)
    T, Nq, Nkv, hs, R = 9, 4, 2, 128, 64
    qkv, csc, pos = fi_problem(T, Nq, Nkv, hs, R, dt, 5)
    q = qkv[:, :Nq * hs]
    qo, _ = P.flashinfer_apply_rope_with_cos_sin_cache(pos, q, qkv[:, Nq * hs:(Nq + Nkv) * hs], hs, csc, is_neox)
    y = q.reshape(T, Nq, hs).double()
    rows = csc[pos].double()
    exact = rope64(y, rows[:, :R // 2], rows[:, R // 2:], is_neox)
    mag = P._rope_terms(y, rows[:, :R // 2], rows[:, R // 2:], is_neox)
    assert bool(P.within_rounding(qo.view(T, Nq, hs), exact, mag, dt, k=4).all())
    with pytest.raises(ValueError):
        P.flashinfer_apply_rope_with_cos_sin_cache(pos, q, q, hs, csc.half(), is_neox)


def paged_meta():
    """Two requests: request 0 owns pages kv_indices[0:2] = [5, 2], request 1
    owns [7]. Tokens: (b 0, p 1) -> page 5 entry 1; (b 0, p 5) -> page 2
    entry 1; (b 1, p 2) -> page 7 entry 2; a padded token (b -1)."""
    return dict(kv_indices=torch.tensor([5, 2, 7]), kv_indptr=torch.tensor([0, 2, 3]),
                batch_indices=torch.tensor([0, 0, 1, -1]), positions=torch.tensor([1, 5, 2, 0]),
                where=[(5, 1), (2, 1), (7, 2)])


@pytest.mark.parametrize("layout", ["NHD", "HND"])
@pytest.mark.parametrize("qd", ["e4m3", "e5m2"])
def test_flashinfer_append_placement_and_values(layout, qd):
    """Identity rotation (position 0) and power-of-two scales: every byte is
    the code of a hand-known value; unaddressed cache bytes and the padded
    token's q rows stay as they were."""
    dt = E4 if qd == "e4m3" else E5
    T, Nq, Nkv, R, NR, ps = 4, 2, 2, 16, 16, 4
    D = R + NR
    m = paged_meta()
    q = torch.full((T, Nq, D), 0.75, dtype=torch.bfloat16)
    k = torch.full((T, Nkv, D), 1.5, dtype=torch.bfloat16)
    v = torch.arange(T, dtype=torch.float32).reshape(T, 1, 1).expand(T, Nkv, D).to(torch.bfloat16) + 1
    shape = (8, ps, Nkv, D) if layout == "NHD" else (8, Nkv, ps, D)
    kc, vc = torch.zeros(shape, dtype=dt), torch.zeros(shape, dtype=dt)
    q_out = torch.full((T, Nq, D), 0.5, dtype=torch.float32).to(dt)
    sentinel = q_out.view(torch.uint8)[3].clone()
    qr, qn = P.flashinfer_rope_quantize_fp8_append_paged_kv_cache(
        q[..., :R], k[..., :R], q[..., R:], k[..., R:], v, table(4, R, torch.float32),
        torch.zeros(T, dtype=torch.int32), (kc, vc), m["kv_indices"], m["kv_indptr"], m["batch_indices"],
        m["positions"], quant_scale_q=2.0, quant_scale_kv=0.5, page_size=ps, kv_layout=layout,
        q_rope_out=q_out[..., :R], q_nope_out=q_out[..., R:])
    code = lambda x: int(P.fp8_encode(torch.tensor([x]), dt)[0])  # noqa: E731
    qb = q_out.view(torch.uint8)
    assert bool((qb[:3] == code(1.5)).all()) and torch.equal(qb[3], sentinel)
    kb, vb = kc.view(torch.uint8), vc.view(torch.uint8)
    written = torch.zeros(shape, dtype=torch.bool)
    for t, (page, entry) in enumerate(m["where"]):
        row_k = kb[page, entry] if layout == "NHD" else kb[page, :, entry]
        row_v = vb[page, entry] if layout == "NHD" else vb[page, :, entry]
        assert bool((row_k == code(0.75)).all())
        assert bool((row_v == code((t + 1) * 0.5)).all())
        if layout == "NHD":
            written[page, entry] = True
        else:
            written[page, :, entry] = True
    assert int(kb[~written].sum()) == 0 and int(vb[~written].sum()) == 0


@pytest.mark.parametrize("is_neox", [True, False])
def test_flashinfer_append_against_float64_and_rope_quantize(is_neox):
    """Random data, non-power-of-two scales: every fp8 byte within one fp8
    step (plus float32 slack) of the exact value; rope_quantize_fp8 gives the
    same q bytes and the same k bytes as the cache received."""
    T, Nq, Nkv, R, NR, ps = 6, 4, 2, 32, 32, 4
    D = R + NR
    g = torch.Generator().manual_seed(9)
    q = torch.randn(T, Nq, D, generator=g).to(torch.float16)
    k = torch.randn(T, Nkv, D, generator=g).to(torch.float16)
    v = torch.randn(T, Nkv, D, generator=g).to(torch.float16)
    csc, pos = table(64, R, torch.float32), torch.randint(0, 64, (T,), generator=g)
    kc, vc = torch.zeros(4, ps, Nkv, D, dtype=E4), torch.zeros(4, ps, Nkv, D, dtype=E4)
    sq, skv = 3.0, 0.7
    qr, qn = P.flashinfer_rope_quantize_fp8_append_paged_kv_cache(
        q[..., :R], k[..., :R], q[..., R:], k[..., R:], v, csc, pos, (kc, vc), torch.arange(4),
        torch.tensor([0, 4]), torch.zeros(T, dtype=torch.int64), torch.arange(T), is_neox=is_neox,
        quant_scale_q=sq, quant_scale_kv=skv, page_size=ps)
    rows = csc[pos].double()
    cos, sin = rows[:, :R // 2], rows[:, R // 2:]

    def check(got_codes, x64, mag):
        assert bool(P.within_rounding(P.fp8_decode(got_codes, E4), x64, mag, E4, k=8).all())

    qe = rope64(q[..., :R].double(), cos, sin, is_neox) * sq
    check(qr.view(torch.uint8), qe, P._rope_terms(q[..., :R].double(), cos, sin, is_neox) * sq)
    check(qn.view(torch.uint8), q[..., R:].double() * sq, q[..., R:].double().abs() * sq)
    ke = rope64(k[..., :R].double(), cos, sin, is_neox) * skv
    kcache = kc.view(torch.uint8).reshape(-1, Nkv, D)[:T]
    check(kcache[..., :R], ke, P._rope_terms(k[..., :R].double(), cos, sin, is_neox) * skv)
    check(kcache[..., R:], k[..., R:].double() * skv, k[..., R:].double().abs() * skv)
    check(vc.view(torch.uint8).reshape(-1, Nkv, D)[:T], v.double() * skv, v.double().abs() * skv)

    outs = P.flashinfer_rope_quantize_fp8(q[..., :R], k[..., :R], q[..., R:], k[..., R:], csc, pos, is_neox,
                                          quant_scale_q=sq, quant_scale_kv=skv)
    assert torch.equal(outs[0].view(torch.uint8), qr.view(torch.uint8))
    assert torch.equal(outs[2].view(torch.uint8), qn.view(torch.uint8))
    assert torch.equal(outs[1].view(torch.uint8), kcache[..., :R])
    assert torch.equal(outs[3].view(torch.uint8), kcache[..., R:])


def test_flashinfer_append_mla_placement():
    T, Nq, R, C, ps = 4, 2, 16, 32, 4
    m = paged_meta()
    q = torch.ones(T, Nq, R + C, dtype=torch.bfloat16)
    k_rope = torch.full((T, R), 2.0, dtype=torch.bfloat16)
    k_nope = torch.full((T, C), 4.0, dtype=torch.bfloat16)
    ckv, kpe = torch.zeros(8, ps, C, dtype=E4), torch.zeros(8, ps, R, dtype=E4)
    P.flashinfer_rope_quantize_fp8_append_paged_kv_cache(
        q[..., :R], k_rope, q[..., R:], k_nope, None, table(4, R, torch.float32), torch.zeros(T, dtype=torch.int32),
        (ckv, kpe), m["kv_indices"], m["kv_indptr"], m["batch_indices"], m["positions"], page_size=ps)
    for page, entry in m["where"]:
        assert bool((kpe[page, entry].float() == 2.0).all()) and bool((ckv[page, entry].float() == 4.0).all())
    assert int((kpe.float() != 0).sum()) == 3 * R and int((ckv.float() != 0).sum()) == 3 * C


# ---- SGLang ------------------------------------------------------------------------------------------

def test_sglang_fused_set_kv_buffer():
    """k rotated in place and the same bytes at k_buffer[cache_loc]; v copied;
    other buffer rows untouched; scales and negative locations refused."""
    T, Nq, Nkv, hs = 3, 2, 2, 64
    qkv, csc, pos = fi_problem(T, Nq, Nkv, hs, hs, torch.bfloat16, 4)
    q, k, v = qkv.split([Nq * hs, Nkv * hs, Nkv * hs], dim=-1)
    kb = torch.full((10, Nkv * hs), 9.0, dtype=torch.bfloat16)
    vb = kb.clone()
    loc = torch.tensor([7, 0, 3])
    expect_q, expect_k = P.flashinfer_apply_rope_with_cos_sin_cache(pos, q, k, hs, csc)
    P.sglang_apply_rope_with_cos_sin_cache_inplace(pos, q, k, hs, csc, True,
                                                   P.FusedSetKVBufferArg(v, kb, vb, None, None, loc))
    assert torch.equal(q, expect_q) and torch.equal(k, expect_k)
    assert torch.equal(kb[loc], k) and torch.equal(vb[loc], v)
    others = torch.tensor([i for i in range(10) if i not in (7, 0, 3)])
    assert bool((kb[others] == 9).all()) and bool((vb[others] == 9).all())
    with pytest.raises(AssertionError):
        P.sglang_apply_rope_with_cos_sin_cache_inplace(pos, q, k, hs, csc, True,
                                                       P.FusedSetKVBufferArg(v, kb, vb, 1.0, None, loc))
    with pytest.raises(ValueError):
        P.sglang_apply_rope_with_cos_sin_cache_inplace(pos, q, k, hs, csc, True,
                                                       P.FusedSetKVBufferArg(v, kb, vb, None, None, -loc))


@pytest.mark.parametrize("is_neox", [True, False])
def test_sglang_jit_fused_leaves_k(is_neox):
    """The JIT kernel's fused path rotates q in place and writes the rotated
    k only to the cache; without the fused argument k is rotated in place."""
    T, Nq, Nkv, hs = 3, 2, 1, 64
    qkv, csc, pos = fi_problem(T, Nq, Nkv, hs, hs, torch.float16, 6)
    q, k, v = (x.view(T, -1, hs) for x in qkv.split([Nq * hs, Nkv * hs, Nkv * hs], dim=-1))
    eq, ek = P.flashinfer_apply_rope_with_cos_sin_cache(pos, q.reshape(T, -1), k.reshape(T, -1), hs, csc, is_neox)
    k_before = k.clone()
    kc, vc = torch.zeros(5, Nkv * hs, dtype=torch.float16), torch.zeros(5, Nkv * hs, dtype=torch.float16)
    loc = torch.tensor([4, 1, 2])
    P.sglang_jit_apply_rope_with_cos_sin_cache_inplace(q, k, csc, pos, is_neox=is_neox,
                                                       fused_args=P.SglangJitFusedSetKVBufferArg(v, kc, vc, loc))
    assert torch.equal(q.reshape(T, -1), eq) and torch.equal(k, k_before)
    assert torch.equal(kc[loc], ek) and torch.equal(vc[loc], v.reshape(T, -1))
    assert int((kc[0] != 0).sum()) == 0
    P.sglang_jit_apply_rope_with_cos_sin_cache_inplace(q, k, csc, pos, is_neox=is_neox)
    assert torch.equal(k.reshape(T, -1), ek)
