# SPDX-License-Identifier: Apache-2.0
"""The two bindings of torch.ops.qkvfuse (the compiled extension and the
Python registration) on CPU tensors: the same schemas; the same bytes and the
same errors for the calls of binding_cases.py, compared with the other
binding in a child process; torch.library.opcheck and
torch.compile(fullgraph=True) of every operator; meta tensors among real ones
and the version-2 arguments (q, k, v, q_scale, q_quant) through both. CTest
runs this file under each binding (python, python_torch_fallback). Skipped
without torch."""
import json
import os
import subprocess
import sys

import pytest

from conftest import HAVE_TORCH

pytestmark = pytest.mark.skipif(not HAVE_TORCH, reason="torch is not installed")

if HAVE_TORCH:
    import torch
    from torch.library import opcheck

    import binding_cases as bc
    import qkvfuse
    from qkvfuse import _binding, torch_ops

HERE = os.path.dirname(os.path.abspath(__file__))


def test_schemas_are_the_shared_strings():
    """Whichever binding registered them, the operators carry torch_ops.SCHEMAS
    (the extension compiles the same strings in)."""
    assert _binding.KIND in ("extension", "python")
    for name, schema in torch_ops.SCHEMAS.items():
        op = getattr(torch.ops.qkvfuse, name).default
        assert str(op._schema) == "qkvfuse::" + name + schema, name
    # the core operator's mutations, as torch reads them
    run = torch.ops.qkvfuse.run.default._schema
    mutated = {a.name for a in run.arguments if a.alias_info is not None and a.alias_info.is_write}
    assert mutated == {"k_cache", "v_cache", "error_flags"}
    run_out = torch.ops.qkvfuse.run_out.default._schema
    mutated = {a.name for a in run_out.arguments if a.alias_info is not None and a.alias_info.is_write}
    assert mutated == {"q_out", "k_out", "v_out", "k_cache", "v_cache", "error_flags"}


def _other_binding():
    """(environment, name) for a child process on the binding this one is not;
    None when the other one cannot be had (no extension built for this torch)."""
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    if _binding.KIND == "extension":
        env["QKVFUSE_TORCH_BINDING"] = "python"
        env["QKVFUSE_TORCH_EXTENSION"] = _binding.EXTENSION["path"]
        return env, "python"
    for path in _binding._candidates():
        if os.path.isfile(path) and _binding._usable(path, torch)[0] is not None:
            env["QKVFUSE_TORCH_BINDING"] = "extension"
            env["QKVFUSE_TORCH_EXTENSION"] = path
            return env, "extension"
    return None


@pytest.fixture(scope="module")
def both():
    """{binding: results of binding_cases.py}: this process's and the other's."""
    other = _other_binding()
    if other is None:
        pytest.skip("no compiled extension for this torch: the other binding is not available (%s)"
                    % _binding.REASON)
    env, name = other
    out = subprocess.run([sys.executable, os.path.join(HERE, "binding_cases.py")], env=env, capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-4000:]
    child = json.loads(out.stdout)
    assert child["binding"] == name
    return {_binding.KIND: bc.results(), name: child["results"]}


@pytest.mark.parametrize("call", sorted(bc.CALLS) if HAVE_TORCH else [])
def test_same_result_through_both_bindings(both, call):
    ext, py = both["extension"][call], both["python"][call]
    assert ext == py, "extension: %s\npython:    %s" % (ext, py)
    if ext[0] == "error":
        _, cls, status, where, message, changed, flags = ext
        assert status is not None, "not a qkvfuse error: %s: %s" % (cls, message)
        assert not changed, "bytes changed by a rejected call"
        assert flags in (0, qkvfuse.DATA_ERROR_POSITION, qkvfuse.DATA_ERROR_SLOT, qkvfuse.DATA_ERROR_SCALE)


def test_results_in_this_process():
    """The calls, on the binding loaded here: the valid ones succeed, the
    rejected ones raise the package's error naming the argument."""
    r = bc.results()
    must_pass = ("run", "run-unfused-interleaved", "run-computed-yarn", "run-float32-out", "run-3d", "run-in-place-q",
                 "split", "split-interleaved-f32", "cache", "dequant", "op-run", "op-run-out", "op-cache-paged",
                 "op-dequant", "op-build-yarn", "op-build-meta")
    for n in must_pass:
        assert r[n][0] == "ok", (n, r[n])
    assert r["run"][1] == r["op-run"][1]  # public and torch.ops: the same bytes
    for n, res in r.items():
        if res[0] == "error":
            assert res[2] is not None, (n, res)  # a QkvfuseError after translate()
    expect = {"run-rope-bogus": ("InvalidValueError", "rope"), "run-eps-underflow": ("InvalidValueError", "eps"),
              "run-gamma-float64": ("DtypeError", "q_gamma"), "run-sparse-gamma": ("StrideError", "q_gamma"),
              "run-seven-dims": ("ShapeError", "qkv"), "run-meta-cache": ("DeviceError", "k_cache"),
              "run-flags-float": ("DtypeError", "error_flags"), "run-no-input": ("NullPointerError", "qkv"),
              "op-run-threads": ("InvalidValueError", "num_threads"), "op-run-meta-q": ("DeviceError", "q"),
              "op-cache-head-nums": ("InvalidValueError", "head_nums"),
              "op-dequant-splits": ("InvalidValueError", "size_splits"),
              "op-build-negative": ("InvalidValueError", "max_position"),
              "run-position-range": ("OutOfRangeError", "positions"), "split-meta-weight": ("DeviceError", "q_weight"),
              "run-page-table-meta": ("DeviceError", "kv_positions")}
    for n, (cls, arg) in expect.items():
        assert r[n][0] == "error" and r[n][1] == cls and r[n][4].startswith(arg), (n, r[n])


# ---- the version-2 arguments ----------------------------------------------------------------

def test_q_quant_reaches_the_library():
    """q_quant and q_scale go to desc.q_quant / args.q_scale: the library either
    serves them (q_out in fp8 holding q / q_scale) or refuses with its own
    error naming q_quant; never ignored."""
    p = bc.problem(dtype=torch.float32, cache=torch.bfloat16)
    ref = qkvfuse.run(p["qkv"], num_q_heads=bc.Nq, num_kv_heads=bc.Nkv, head_dim=bc.D, q_gamma=p["qw"],
                      k_gamma=p["kw"], cos_sin_cache=p["csc"], positions=p["pos"]).q
    for mode, dt in (("fp8_e4m3", torch.float8_e4m3fn), ("fp8_e5m2", torch.float8_e5m2)):
        try:
            q = qkvfuse.run(p["qkv"], num_q_heads=bc.Nq, num_kv_heads=bc.Nkv, head_dim=bc.D, q_gamma=p["qw"],
                            k_gamma=p["kw"], cos_sin_cache=p["csc"], positions=p["pos"], q_quant=mode,
                            q_scale=torch.tensor([0.25])).q
        except qkvfuse.QkvfuseError as e:
            assert isinstance(e, (qkvfuse.UnsupportedError, qkvfuse.InvalidValueError)), e
            assert e.message.startswith("q_quant"), e
            continue
        assert q.dtype == dt and q.shape == ref.shape
        rel = 2.0 ** -3 if dt == torch.float8_e4m3fn else 2.0 ** -2  # half an ulp of the fp8 mantissa, and then some
        want = (ref / 0.25).clamp(-torch.finfo(dt).max, torch.finfo(dt).max)
        assert ((q.float() - want).abs() <= rel * want.abs() + 2.0 ** -9).all()


def test_separate_q_k_v_reach_the_library():
    """q, k, v views of a packed qkv: the library either serves them (the same
    bytes as the packed call) or refuses naming its input; never ignored."""
    p = bc.problem()
    kw = dict(num_q_heads=bc.Nq, num_kv_heads=bc.Nkv, head_dim=bc.D, q_gamma=p["qw"], k_gamma=p["kw"],
              cos_sin_cache=p["csc"], positions=p["pos"], return_k=True, return_v=True)
    ref = qkvfuse.run(p["qkv"], **kw)
    nq, nkv = bc.Nq * bc.D, bc.Nkv * bc.D
    try:
        got = qkvfuse.run(q=p["qkv"][:, :nq], k=p["qkv"][:, nq:nq + nkv], v=p["qkv"][:, nq + nkv:], **kw)
    except qkvfuse.QkvfuseError as e:
        assert e.message.startswith(("qkv", "q:", "k:", "v:")), e
        return
    for a, b in zip(ref, got):
        assert torch.equal(a.view(torch.uint8), b.view(torch.uint8))


def _slots_of_page_table(p, block_size):
    """The slot_mapping that addresses what p's page table does (-1: skipped)."""
    b = p["batch_indices"].long()
    pos = p["kv_positions"].long()
    block = p["kv_indices"].long()[p["kv_indptr"].long()[b.clamp(min=0)] + pos // block_size]
    return torch.where(b >= 0, block * block_size + pos % block_size, torch.full_like(b, -1))


@pytest.mark.parametrize("kind", ["torch", "numpy"])
@pytest.mark.parametrize("layout", ["paged", "paged_hnd"])
def test_page_table_reaches_the_library(kind, layout):
    """kv_indptr, kv_indices, batch_indices and kv_positions select
    desc.cache_addressing = PAGE_TABLE and go to args: the library either
    serves them (every byte as with the equivalent slot_mapping) or refuses
    with its own error naming cache_addressing, nothing written."""
    p = bc.problem()
    if layout == "paged_hnd":
        p["kc"], p["vc"] = p["kc"].transpose(1, 2).contiguous(), p["vc"].transpose(1, 2).contiguous()
    slots = _slots_of_page_table(p, 16)
    assert slots.tolist() == [16, 3, -1, 31, 9]

    def call(**addressing):
        args = dict(num_q_heads=bc.Nq, num_kv_heads=bc.Nkv, head_dim=bc.D, q_gamma=p["qw"], k_gamma=p["kw"],
                    cos_sin_cache=p["csc"], positions=p["pos"], k_scale=p["scale"], v_scale=p["scale"],
                    cache_layout=layout)
        kc, vc = p["kc"].clone(), p["vc"].clone()
        if kind == "numpy":
            to_np = lambda x: x.numpy() if x.dtype not in (torch.bfloat16, torch.float8_e4m3fn) else \
                qkvfuse.TypedArray(x.view(torch.uint16 if x.dtype == torch.bfloat16 else torch.uint8).numpy(),
                                   str(x.dtype)[6:])  # noqa: E731
            ncache = [to_np(kc), to_np(vc)]
            o = qkvfuse.run(to_np(p["qkv"]), k_cache=ncache[0], v_cache=ncache[1],
                            **{k: to_np(v) for k, v in dict(args, **addressing).items() if isinstance(v, torch.Tensor)},
                            **{k: v for k, v in args.items() if not isinstance(v, torch.Tensor)})
            return [torch.from_numpy(_np_bits(o.q)), torch.from_numpy(_np_bits(ncache[0])),
                    torch.from_numpy(_np_bits(ncache[1]))]
        o = qkvfuse.run(p["qkv"], k_cache=kc, v_cache=vc, **args, **addressing)
        return [o.q.view(torch.uint16), kc.view(torch.uint8), vc.view(torch.uint8)]

    ref = call(slot_mapping=slots)
    table = dict(kv_indptr=p["kv_indptr"], kv_indices=p["kv_indices"], batch_indices=p["batch_indices"],
                 kv_positions=p["kv_positions"])
    try:
        got = call(**table)
    except qkvfuse.QkvfuseError as e:
        assert isinstance(e, qkvfuse.UnsupportedError) and e.message.startswith("cache_addressing"), e
        pytest.xfail("the library does not serve page-table addressing: %s" % e.message)
    for a, b in zip(ref, got):
        assert torch.equal(a, b)


def _np_bits(x):
    return x.storage if isinstance(x, qkvfuse.TypedArray) else x


# ---- opcheck ---------------------------------------------------------------------------------

OPCHECK_NO_SCHEMA = ("test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic")


def _opcheck(op, args, fp8=False):
    """torch.library.opcheck; with float8 tensors without test_schema, whose
    mutation check multiplies the inputs and torch's CPU kernels have no
    float8 multiplication ("mul_cpu_reduced_float" not implemented for
    'Float8_e4m3fn'); each fp8 case has a bfloat16 twin checked in full."""
    if fp8:
        opcheck(op, args, test_utils=OPCHECK_NO_SCHEMA)
    else:
        opcheck(op, args)


@pytest.mark.parametrize("cache", ["bfloat16", "int8", "float8_e4m3fn"])
def test_opcheck_core(cache):
    dt = getattr(torch, cache)
    p = bc.problem(cache=dt)
    kc, vc = p["kc"], p["vc"]
    quant = "none" if cache == "bfloat16" else "auto"
    opts = bc.core_opts(k_quant=quant, v_quant=quant)
    ins = bc.core_inputs(p) if quant == "auto" else bc.core_inputs(p, k_scale=None, v_scale=None)
    fp8 = cache == "float8_e4m3fn"
    _opcheck(torch.ops.qkvfuse.run.default, (*ins, kc, vc, p["flags"], *opts, None, True, True), fp8)
    _opcheck(torch.ops.qkvfuse.run.default, (*ins, kc, vc, None, *opts, torch.float32, False, True), fp8)
    q_out = torch.empty(bc.T, bc.Nq * bc.D, dtype=torch.bfloat16)
    k_out = torch.empty(bc.T, bc.Nkv * bc.D, dtype=torch.bfloat16)
    _opcheck(torch.ops.qkvfuse.run_out.default, (*ins, q_out, k_out, None, kc, vc, p["flags"], *opts), fp8)


def test_opcheck_named_and_builder():
    p = bc.problem()
    D, Nq, Nkv, T = bc.D, bc.Nq, bc.Nkv, bc.T
    split = (p["qkv"], p["qw"], p["kw"], p["csc"], p["pos"], Nq * D, Nkv * D, D, 1e-6, 0, None, None, True)
    opcheck(torch.ops.qkvfuse.split_qkv_rmsnorm_rope.default, (*split, None, p["flags"]))
    opcheck(torch.ops.qkvfuse.split_qkv_rmsnorm_rope.default, (*split, torch.float32, None))
    outs = [torch.empty(T, n, dtype=torch.bfloat16) for n in (Nq * D, Nkv * D, Nkv * D)]
    opcheck(torch.ops.qkvfuse.split_qkv_rmsnorm_rope_out.default, (*split, *outs, None))
    sc = torch.full((Nkv, D), 0.05)
    cache = (p["qkv"], p["qw"], p["kw"], p["cos"], p["sin"], p["slots"], p["kc_nz"], p["vc_nz"], sc, sc, None, None,
             [Nq, Nkv, Nkv], [T, 1, Nq + 2 * Nkv, D], 1e-6, "PA_NZ")
    opcheck(torch.ops.qkvfuse.qkv_rmsnorm_rope_cache.default, (*cache, True, p["flags"]))
    opcheck(torch.ops.qkvfuse.qkv_rmsnorm_rope_cache.default, (*cache, False, None))
    outs = [torch.empty(T, n, dtype=torch.bfloat16) for n in (Nq * D, Nq * D, Nkv * D, Nkv * D)]
    opcheck(torch.ops.qkvfuse.qkv_rmsnorm_rope_cache_out.default, (*cache[:6], outs[0], *cache[6:12], *outs[1:],
                                                                  *cache[12:], True, None))
    x = torch.randint(-3000, 3000, (T, 1, (Nq + 2 * Nkv) * D), dtype=torch.int32)
    cos, sin = p["cos"].reshape(T, 1, 1, D), p["sin"].reshape(T, 1, 1, D)
    dq = (x, cos, sin, p["kc_dq"], p["vc_dq"], torch.tensor([0, 1, -1, 0, 1]), sc, sc, None, None,
          torch.full(((Nq + 2 * Nkv) * D,), 1e-3), None, None, [Nq * D, Nkv * D, Nkv * D], "static", "BSND", True,
          "contiguous")
    opcheck(torch.ops.qkvfuse.dequant_rope_quant_kvcache.default, (*dq, None, p["flags"]))
    outs = [torch.empty(T, 1, n, D, dtype=torch.bfloat16) for n in (Nq, Nkv, Nkv)]
    opcheck(torch.ops.qkvfuse.dequant_rope_quant_kvcache_out.default, (*dq, *outs, None))
    opcheck(torch.ops.qkvfuse.build_cos_sin_cache.default,
            (64, 32, 10000.0, "yarn", [4.0, 2048.0, 1.0, 4.0, 32.0, 1.0, 1.0, 1.0], torch.bfloat16,
             torch.device("cpu")))


# ---- torch.compile ---------------------------------------------------------------------------

def compiled_equal(fn, make_args, backend="aot_eager", dynamic=None):
    """fn compiled with fullgraph=True gives the bytes eager gives, outputs and
    every tensor argument (the caches it writes) alike."""
    eager_args = make_args()
    ref = fn(*eager_args)
    torch._dynamo.reset()
    f = torch.compile(fn, fullgraph=True, backend=backend, dynamic=dynamic)
    args = make_args()
    got = f(*args)
    ref, got = (ref if isinstance(ref, (tuple, list)) else [ref]), (got if isinstance(got, (tuple, list)) else [got])
    for a, b in zip(list(ref) + eager_args, list(got) + args):
        if isinstance(a, torch.Tensor):
            assert torch.equal(a.view(torch.uint8), b.view(torch.uint8))


def layer_args(T=None, device="cpu"):
    p = bc.problem()
    if T is not None and T != bc.T:
        g = torch.Generator().manual_seed(T)
        p["qkv"] = torch.randn(T, bc.H, generator=g).bfloat16()
        p["pos"] = torch.randint(0, 64, (T,), generator=g)
        p["slots"] = torch.randperm(32, generator=g)[:T]
        p["cos"] = torch.randn(T, bc.D, generator=g).bfloat16()
        p["sin"] = torch.randn(T, bc.D, generator=g).bfloat16()
    return [p[k].to(device) for k in ("qkv", "qw", "kw", "csc", "pos", "kc", "vc", "slots", "scale", "cos", "sin",
                                      "kc_nz", "vc_nz")]


def core_layer(qkv, qw, kw, csc, pos, kc, vc, slots, scale, cos, sin, kc_nz, vc_nz):
    o = qkvfuse.run(qkv * 1.0, num_q_heads=bc.Nq, num_kv_heads=bc.Nkv, head_dim=bc.D, q_gamma=qw, k_gamma=kw,
                    cos_sin_cache=csc, positions=pos, k_cache=kc, v_cache=vc, slot_mapping=slots, k_scale=scale,
                    v_scale=scale, return_k=True)
    q_out = torch.empty(qkv.shape[0], bc.Nq * bc.D, dtype=qkv.dtype, device=qkv.device)
    qkvfuse.run(qkv, num_q_heads=bc.Nq, num_kv_heads=bc.Nkv, head_dim=bc.D, q_gamma=qw, k_gamma=kw,
                cos_sin_cache=csc, positions=pos, q_out=q_out)
    return o.q + 1, o.k, q_out


def named_ops(qkv, qw, kw, csc, pos, kc, vc, slots, scale, cos, sin, kc_nz, vc_nz):
    q, k, v = qkvfuse.split_qkv_rmsnorm_rope(qkv, qw, kw, csc, pos, q_hidden_size=bc.Nq * bc.D, is_neox=False)
    k2 = torch.empty_like(k)
    qkvfuse.split_qkv_rmsnorm_rope(qkv, qw, kw, csc, pos, q_hidden_size=bc.Nq * bc.D, k_out=k2)
    sc = torch.full((bc.Nkv, bc.D), 0.05, device=qkv.device)
    qc = qkvfuse.qkv_rmsnorm_rope_cache(qkv, qw, kw, cos, sin, slots, kc_nz, vc_nz, head_nums=(bc.Nq, bc.Nkv, bc.Nkv),
                                        k_scale=sc, v_scale=sc)
    x = qkv.float().reshape(qkv.shape[0], 1, bc.H)
    dk = torch.zeros(qkv.shape[0], 2, bc.Nkv, bc.D, dtype=torch.int8, device=qkv.device)
    dv = torch.zeros_like(dk)
    qd, kd, vd = qkvfuse.dequant_rope_quant_kvcache(x, cos.reshape(-1, 1, 1, bc.D), sin.reshape(-1, 1, 1, bc.D), dk,
                                                    dv, torch.zeros(qkv.shape[0], dtype=torch.int64, device=qkv.device),
                                                    sc, sc, kv_output=True, cache_mode="page")
    return q * 2, k2, v, qc, qd, kd, dk


def named_layer(*args):
    """named_ops and the cos/sin cache builder."""
    return named_ops(*args) + (qkvfuse.build_cos_sin_cache(16, bc.D, dtype=torch.bfloat16, device=args[0].device),)


@pytest.mark.parametrize("layer", ["core", "named"])
def test_torch_compile_fullgraph_every_operator(layer):
    fn = core_layer if layer == "core" else named_layer
    compiled_equal(fn, layer_args)


def test_torch_compile_dynamic_token_count():
    """The token count symbolic (as vLLM compiles): one graph serves two T,
    the Meta kernels computing the outputs' shapes from the symbolic sizes."""
    torch._dynamo.reset()
    f = torch.compile(core_layer, fullgraph=True, backend="aot_eager", dynamic=True)
    for T in (3, 7):
        args = layer_args(T)
        ref_args = layer_args(T)
        got = f(*args)
        ref = core_layer(*ref_args)
        for a, b in zip(list(ref) + ref_args, list(got) + args):
            assert torch.equal(a.view(torch.uint8), b.view(torch.uint8))
        assert got[0].shape == (T, bc.Nq * bc.D)


# ---- meta tensors -------------------------------------------------------------------------

def test_meta_only_gives_shapes_and_mixed_devices_are_errors():
    p = bc.problem()
    m = {k: torch.empty(v.shape, dtype=v.dtype, device="meta") for k, v in p.items()}
    q, k, v = torch.ops.qkvfuse.run(*bc.core_inputs(m), m["kc"], m["vc"], None, *bc.core_opts(), None, True, False)
    assert q.device.type == "meta" and q.shape == (bc.T, bc.Nq * bc.D) and k.shape == (bc.T, bc.Nkv * bc.D)
    assert v.shape == (0,) and q.dtype == torch.bfloat16
    # every operator: one meta tensor among CPU ones is a DeviceError naming it, nothing written
    for name in ("run", "op-run-out", "split", "cache", "dequant"):
        p = bc.problem()
        before = {k: v.clone() for k, v in p.items()}
        with pytest.raises(Exception) as info:
            if name == "run":
                torch.ops.qkvfuse.run(*bc.core_inputs(p, k_gamma=m["kw"]), p["kc"], p["vc"], p["flags"],
                                      *bc.core_opts(), None, True, False)
            elif name == "op-run-out":
                bc.op_run_out(p, q_out=torch.empty(bc.T, bc.Nq * bc.D, dtype=torch.bfloat16, device="meta"))
            elif name == "split":
                torch.ops.qkvfuse.split_qkv_rmsnorm_rope(p["qkv"], p["qw"], p["kw"], m["csc"], p["pos"],
                                                        bc.Nq * bc.D, bc.Nkv * bc.D, bc.D, 1e-6, 0, None, None,
                                                        True, None, None)
            elif name == "cache":
                torch.ops.qkvfuse.qkv_rmsnorm_rope_cache(p["qkv"], p["qw"], p["kw"], p["cos"], p["sin"], p["slots"],
                                                         p["kc_pa"], m["vc_pa"], None, None, None, None,
                                                         [bc.Nq, bc.Nkv, bc.Nkv], [bc.T, 1, 8, bc.D], 1e-6, "PA",
                                                         False, None)
            else:
                bc.op_dequant(p, k_cache=m["kc_dq"])
        e = qkvfuse.errors.translate(info.value)
        assert isinstance(e, qkvfuse.DeviceError) and "meta" in e.message, e
        assert all(torch.equal(before[k].view(torch.uint8), p[k].view(torch.uint8)) for k in p), name
