# SPDX-License-Identifier: Apache-2.0
"""qkvfuse.compat against the peer references (peer_ref.py): the same
arguments give the peer's results within one step of the output dtype.
Skipped without torch."""
import pytest

from conftest import HAVE_TORCH, requires_cuda, seeds

pytestmark = pytest.mark.skipif(not HAVE_TORCH, reason="torch is not installed")

if HAVE_TORCH:
    import torch

    import peer_ref as P
    import qkvfuse
    from qkvfuse import compat


def table(max_pos, R, dtype, theta=10000.0):
    i = torch.arange(R // 2, dtype=torch.float64)
    ang = torch.arange(max_pos, dtype=torch.float64)[:, None] * theta ** (-2 * i / R)
    return torch.cat([ang.cos(), ang.sin()], dim=1).to(dtype)


def random_vllm_case(seed):
    g = torch.Generator().manual_seed(seed)
    pick = lambda xs: xs[int(torch.randint(len(xs), (1,), generator=g))]  # noqa: E731
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


def check_fused_qk_norm_rope(seed, device):
    c = random_vllm_case(seed)
    qkv = c["qkv"]
    T, Nq, Nkv, D = qkv.shape[0], c["Nq"], c["Nkv"], c["D"]
    qk = (Nq + Nkv) * D
    dev = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in c.items()}
    got = qkv.clone().to(device)
    storage = got.data_ptr()
    assert compat.fused_qk_norm_rope(*vllm_args(dev, got)) is None
    assert got.data_ptr() == storage
    got = got.cpu()
    assert torch.equal(got[:, qk:], qkv[:, qk:]), "v columns must stay untouched"

    exact, mag = P.vllm_qk_norm_rope_f32(*vllm_args(c, qkv))
    out = got[:, :qk].reshape(T, Nq + Nkv, D)
    ok = P.within_rounding(out, exact, mag, qkv.dtype, k=8)
    assert bool(ok.all()), "seed %d: %d elements beyond one output step" % (seed, int((~ok).sum()))
    if qkv.dtype != torch.float32:
        ref = qkv.clone()
        P.vllm_fused_qk_norm_rope(*vllm_args(c, ref))
        if T:
            same = float((ref[:, :qk] == got[:, :qk]).float().mean())
            assert same > 0.95, "seed %d: only %.3f of q/k bit-identical to the reference" % (seed, same)


@pytest.mark.parametrize("seed", seeds(80, 31000))
def test_fused_qk_norm_rope_matches_vllm(seed):
    check_fused_qk_norm_rope(seed, "cpu")


@requires_cuda
@pytest.mark.parametrize("seed", seeds(80, 31000))
def test_fused_qk_norm_rope_matches_vllm_cuda(seed):
    """The CUDA kernel (rsqrtf, its own lane order) against the same reference."""
    check_fused_qk_norm_rope(seed, "cuda")


def test_fused_qk_norm_rope_int32_positions_and_views():
    """qkvfuse's superset: int32 positions give the int64 result; a row-strided
    qkv (a view into a wider buffer) is rewritten in place, its padding kept."""
    c = random_vllm_case(5)
    c.update(qkv=torch.randn(6, (4 + 2 * 2) * 64).to(torch.bfloat16), Nq=4, Nkv=2, D=64,
             qw=c["qw"][:64] if c["D"] == 64 else (1 + 0.1 * torch.randn(64)).to(torch.bfloat16),
             kw=(1 + 0.1 * torch.randn(64)).to(torch.bfloat16), csc=table(64, 64, torch.bfloat16),
             pos=torch.randint(0, 64, (6,)))
    c["qw"] = c["qw"].to(torch.bfloat16)
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
    c = random_vllm_case(7)
    c.update(qkv=torch.randn(3, (2 + 2 * 1) * 64).to(torch.bfloat16), Nq=2, Nkv=1, D=64,
             qw=torch.ones(64, dtype=torch.bfloat16), kw=torch.ones(64, dtype=torch.bfloat16),
             csc=table(8, 64, torch.bfloat16), pos=torch.zeros(3, dtype=torch.int64))
    before = c["qkv"].clone()
    q = c["qkv"]
    with pytest.raises(qkvfuse.InvalidValueError, match="num_heads_v"):
        compat.fused_qk_norm_rope(q, 2, 1, 2, 64, 1e-6, c["qw"], c["kw"], c["csc"], True, c["pos"])
    with pytest.raises(qkvfuse.InvalidValueError, match="forced_token_heads_per_warp"):
        compat.fused_qk_norm_rope(*vllm_args(c, q), 3)
    with pytest.raises(qkvfuse.ShapeError, match="head_dim"):
        compat.fused_qk_norm_rope(q, 2, 1, 1, 32, 1e-6, c["qw"], c["kw"], c["csc"], True, c["pos"])
    with pytest.raises(qkvfuse.OutOfRangeError):
        compat.fused_qk_norm_rope(*vllm_args(dict(c, pos=torch.full((3,), 8)), q))
    assert torch.equal(q, before)
    compat.fused_qk_norm_rope(*vllm_args(c, q), 4)
    assert not torch.equal(q, before)
