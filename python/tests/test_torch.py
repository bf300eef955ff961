# SPDX-License-Identifier: Apache-2.0
"""PyTorch: the same operators on torch tensors (CPU here; CUDA in
test_torch_cuda.py), the custom operators' registration (opcheck: schema,
fake implementation, mutation declarations), torch.compile(fullgraph=True),
in-place and error translation. Skipped when torch is not installed."""
import numpy as np
import pytest

from conftest import HAVE_TORCH, seeds

pytestmark = pytest.mark.skipif(not HAVE_TORCH, reason="torch is not installed")

if HAVE_TORCH:
    import torch

    import cases
    import qkvfuse


@pytest.mark.parametrize("seed", seeds(60, 20000))
def test_random_case_torch_cpu(seed):
    cases.check_random(seed, "auto", lambda c: cases.to_torch_args(c, "cpu"))


def small_problem(device="cpu", dtype=None, T=6, Nq=4, Nkv=2, D=64, seed=0):
    dtype = dtype or torch.bfloat16
    g = torch.Generator().manual_seed(seed)
    H = (Nq + 2 * Nkv) * D
    p = dict(
        qkv=torch.randn(T, H, generator=g).to(dtype),
        qw=(1 + 0.1 * torch.randn(D, generator=g)).to(dtype),
        kw=(1 + 0.1 * torch.randn(D, generator=g)).to(dtype),
        csc=qkvfuse.build_cos_sin_cache(128, D, dtype=dtype),
        pos=torch.randint(0, 128, (T,), generator=g),
        slots=torch.randperm(32, generator=g)[:T],
        Nq=Nq, Nkv=Nkv, D=D, T=T)
    return {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in p.items()}


def test_named_ops_torch_equal_numpy():
    """Torch CPU tensors and NumPy arrays reach the same library call: same bytes."""
    p = small_problem(dtype=torch.float16)
    n = {k: v.numpy() if isinstance(v, torch.Tensor) else v for k, v in p.items()}
    a = qkvfuse.split_qkv_rmsnorm_rope(p["qkv"], p["qw"], p["kw"], p["csc"], p["pos"], q_hidden_size=4 * 64)
    b = qkvfuse.split_qkv_rmsnorm_rope(n["qkv"], n["qw"], n["kw"], n["csc"], n["pos"], q_hidden_size=4 * 64)
    for x, y in zip(a, b):
        assert np.array_equal(x.numpy(), y)
    cos = torch.randn(6, 64).half()
    sin = torch.randn(6, 64).half()
    kc = torch.zeros(2, 2 * 64 // 32, 16, 32, dtype=torch.int8)
    vc = torch.zeros_like(kc)
    kn, vn = kc.numpy().copy(), vc.numpy().copy()
    sc = torch.full((2, 64), 0.05)
    qa = qkvfuse.qkv_rmsnorm_rope_cache(p["qkv"], p["qw"], p["kw"], cos, sin, p["slots"], kc, vc,
                                        head_nums=(4, 2, 2), k_scale=sc, v_scale=sc)
    qb = qkvfuse.qkv_rmsnorm_rope_cache(n["qkv"], n["qw"], n["kw"], cos.numpy(), sin.numpy(), n["slots"], kn, vn,
                                        head_nums=(4, 2, 2), k_scale=sc.numpy(), v_scale=sc.numpy())
    assert np.array_equal(qa.numpy(), qb) and np.array_equal(kc.numpy(), kn) and np.array_equal(vc.numpy(), vn)
    assert kc.abs().sum() > 0


def test_dequant_torch_and_outputs():
    B, S, Nq, Nkv, D = 2, 3, 2, 1, 32
    H = (Nq + 2 * Nkv) * D
    x = torch.randint(-3000, 3000, (B, S, H), dtype=torch.int32)
    cos, sin = torch.randn(B, S, 1, D).bfloat16(), torch.randn(B, S, 1, D).bfloat16()
    kc = torch.zeros(B, S + 1, Nkv, D, dtype=torch.int8)
    vc = torch.zeros_like(kc)
    starts = torch.tensor([0, 1], dtype=torch.int32)
    scale = torch.full((Nkv, D), 0.02)
    q, k, v = qkvfuse.dequant_rope_quant_kvcache(x, cos, sin, kc, vc, starts, scale, scale,
                                                 weight_scale=torch.full((H,), 1e-3), kv_output=True)
    assert q.shape == (B, S, Nq, D) and q.dtype == torch.bfloat16 and k.shape == (B, S, Nkv, D)
    # the cache holds the float32 k quantized (k_out is k rounded to bfloat16): within one step
    want = torch.round(k[1].float() / 0.02).clamp(-128, 127)
    assert (kc[1, 1:].float() - want).abs().max() <= 1 and kc[1, 1:].abs().sum() > 0
    q2, k2, v2 = qkvfuse.dequant_rope_quant_kvcache(x, cos, sin, kc, vc, torch.tensor([0, 1], dtype=torch.int32),
                                                    torch.full((Nkv, D), 0.02), torch.full((Nkv, D), 0.02),
                                                    weight_scale=torch.full((H,), 1e-3))
    assert k2.shape == v2.shape == (0, S, Nkv, D) and k2.dtype == q.dtype and torch.equal(q2, q)
    # float x: the dequant scales have no effect (the seed), so any given ones are ignored, shape and dtype too
    xf = (x[..., :].float() * 1e-3).bfloat16()
    kc1, vc1, kc2, vc2 = (torch.zeros_like(kc) for _ in range(4))
    ref = qkvfuse.dequant_rope_quant_kvcache(xf, cos, sin, kc1, vc1, starts, scale, scale, kv_output=True)
    got = qkvfuse.dequant_rope_quant_kvcache(xf, cos, sin, kc2, vc2, starts, scale, scale, kv_output=True,
                                             weight_scale=torch.ones(3, dtype=torch.int64),
                                             activation_scale=torch.ones(1), bias=torch.ones(2, 2))
    assert all(torch.equal(a, b) for a, b in zip(ref, got)) and torch.equal(kc1, kc2) and torch.equal(vc1, vc2)
    assert kc1.abs().sum() > 0


def test_opcheck_custom_ops():
    from torch.library import opcheck
    p = small_problem()
    kc = torch.zeros(4, 16, 2, 64, dtype=torch.bfloat16)
    vc = torch.zeros_like(kc)
    flags = torch.zeros(1, dtype=torch.int32)
    opts = [4, 2, 64, -1, "auto", "neox", 10000.0, "none", [1.0, 0.0, 1.0, 4.0, 32.0, 1.0, 1.0, 1.0], 1e-6, False,
            "paged", "auto", "auto", "unfused_parity", "auto", 0]
    args = (p["qkv"], None, None, None, p["qw"], p["kw"], None, None, p["pos"], p["csc"], None, None, p["slots"],
            None, None, None, None, kc, vc, flags, *opts, torch.bfloat16, True, False)
    opcheck(torch.ops.qkvfuse.run.default, args)
    opcheck(torch.ops.qkvfuse.split_qkv_rmsnorm_rope.default,
            (p["qkv"], p["qw"], p["kw"], p["csc"], p["pos"], 256, 128, 64, 1e-6, 0, None, None, True,
             torch.bfloat16, None))
    q_out = torch.empty(6, 256, dtype=torch.bfloat16)
    opcheck(torch.ops.qkvfuse.run_out.default,
            (p["qkv"], None, None, None, p["qw"], p["kw"], None, None, p["pos"], p["csc"], None, None, p["slots"],
             None, None, None, None, q_out, None, None, kc, vc, None, *opts))
    opcheck(torch.ops.qkvfuse.build_cos_sin_cache.default,
            (64, 32, 10000.0, "yarn", [4.0, 2048.0, 1.0, 4.0, 32.0, 1.0, 1.0, 1.0], torch.float32,
             torch.device("cpu")))


def prologue_layer(qkv, qw, kw, csc, pos, kc, vc, slots, scale):
    """A model layer's prologue: core op with an fp8 paged cache, plus torch ops around it."""
    o = qkvfuse.run(qkv * 1.0, num_q_heads=4, num_kv_heads=2, head_dim=64, q_gamma=qw, k_gamma=kw,
                    cos_sin_cache=csc, positions=pos, k_cache=kc, v_cache=vc, slot_mapping=slots, k_scale=scale,
                    v_scale=scale, return_k=True)
    q2, k2, v2 = qkvfuse.split_qkv_rmsnorm_rope(qkv, qw, kw, csc, pos, q_hidden_size=256,
                                                is_neox=False)
    return o.q.float().sum(-1), o.k, q2 + 1, v2


def layer_args(device):
    p = small_problem(device=device)
    kc = torch.zeros(4, 16, 2, 64, dtype=torch.float8_e4m3fn, device=device)
    vc = torch.zeros_like(kc)
    return [p["qkv"], p["qw"], p["kw"], p["csc"], p["pos"], kc, vc, p["slots"],
            torch.tensor([0.02], device=device)]


def check_compiled_layer(device, backend):
    args = layer_args(device)
    ref = prologue_layer(*args)
    kc_ref, vc_ref = args[5].clone(), args[6].clone()
    args[5].zero_()
    args[6].zero_()
    torch._dynamo.reset()
    f = torch.compile(prologue_layer, fullgraph=True, backend=backend)
    got = f(*args)
    # the qkvfuse outputs are bit-identical; the float32 row sum may be reduced in another order by inductor
    torch.testing.assert_close(ref[0], got[0], rtol=1e-5, atol=1e-5)
    for a, b in zip(ref[1:], got[1:]):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert torch.equal(args[5].view(torch.uint8), kc_ref.view(torch.uint8)), "k_cache not written under compile"
    assert torch.equal(args[6].view(torch.uint8), vc_ref.view(torch.uint8))
    assert kc_ref.view(torch.uint8).any()
    # new inputs, same graph: the caches follow
    args[4] = (args[4] + 1) % 128
    ref2 = prologue_layer(*[a.clone() for a in args])
    got2 = f(*args)
    torch.testing.assert_close(ref2[0], got2[0], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ref2[1], got2[1], rtol=0, atol=0)


def test_torch_compile_fullgraph_cpu():
    check_compiled_layer("cpu", "aot_eager")


def test_run_out_in_place_and_errors_through_torch():
    p = small_problem(dtype=torch.float32)
    ref = qkvfuse.run(p["qkv"], num_q_heads=4, num_kv_heads=2, head_dim=64, q_gamma=p["qw"], k_gamma=p["kw"],
                      cos_sin_cache=p["csc"], positions=p["pos"], return_k=True)
    buf = p["qkv"].clone()
    qkvfuse.run(buf, num_q_heads=4, num_kv_heads=2, head_dim=64, q_gamma=p["qw"], k_gamma=p["kw"],
                cos_sin_cache=p["csc"], positions=p["pos"], q_out=buf[:, :256], k_out=buf[:, 256:384])
    assert torch.equal(buf[:, :256], ref.q) and torch.equal(buf[:, 256:384], ref.k)
    assert torch.equal(buf[:, 384:], p["qkv"][:, 384:])
    with pytest.raises(qkvfuse.OutOfRangeError, match=r"positions\[0\] = 500"):
        qkvfuse.run(p["qkv"], num_q_heads=4, num_kv_heads=2, head_dim=64, cos_sin_cache=p["csc"],
                    positions=torch.tensor([500, 0, 0, 0, 0, 0]))
    with pytest.raises(qkvfuse.DtypeError, match="q_gamma"):
        qkvfuse.run(p["qkv"], num_q_heads=4, num_kv_heads=2, head_dim=64, q_gamma=p["qw"].double())


def test_builder_torch():
    a = qkvfuse.build_cos_sin_cache(64, 32, dtype=torch.bfloat16)
    b = qkvfuse.build_cos_sin_cache(64, 32, dtype="bfloat16")
    assert a.dtype == torch.bfloat16 and a.shape == (64, 32)
    assert np.array_equal(a.view(torch.int16).numpy().view(np.uint16), b.storage)
    c = qkvfuse.build_cos_sin_cache(64, 32, device="cpu", scaling={"type": "linear", "factor": 2.0})
    assert c.dtype == torch.float32 and not torch.equal(c, a.float())


@pytest.mark.parametrize("lead", [(6,), (2, 3)])
def test_separate_inputs_with_heads_split_allocate_that_form(lead):
    """q, k, v given as [..., N, D] (as models hold them before the
    attention transpose): the allocated outputs keep that form and hold the
    packed call's values."""
    p = small_problem()
    Nq, Nkv, D = p["Nq"], p["Nkv"], p["D"]
    qkv = p["qkv"].reshape(lead + (-1,))
    q = qkv[..., :Nq * D].unflatten(-1, (Nq, D))
    k = qkv[..., Nq * D:(Nq + Nkv) * D].unflatten(-1, (Nkv, D))
    v = qkv[..., (Nq + Nkv) * D:].unflatten(-1, (Nkv, D))
    kw = dict(num_q_heads=Nq, num_kv_heads=Nkv, head_dim=D, q_gamma=p["qw"], k_gamma=p["kw"],
              cos_sin_cache=p["csc"], positions=p["pos"].reshape(lead), return_k=True, return_v=True)
    want = qkvfuse.run(qkv, **kw)
    got = qkvfuse.run(q=q, k=k, v=v, **kw)
    assert got.q.shape == lead + (Nq, D) and got.k.shape == lead + (Nkv, D) and got.v.shape == lead + (Nkv, D)
    for a, b in zip(got, want):
        assert torch.equal(a.flatten(-2).view(torch.int16), b.view(torch.int16))
