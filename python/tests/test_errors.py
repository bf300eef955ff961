# SPDX-License-Identifier: Apache-2.0
"""Errors: each library status becomes its exception class, with the
library's message (naming the argument), and nothing is written."""
import numpy as np
import pytest

import qkvfuse
from qkvfuse import errors

Nq, Nkv, D, T = 4, 2, 64, 3
H = (Nq + 2 * Nkv) * D


def base(**over):
    rng = np.random.default_rng(0)
    kw = dict(num_q_heads=Nq, num_kv_heads=Nkv, head_dim=D,
              q_gamma=np.ones(D, np.float32), k_gamma=np.ones(D, np.float32),
              cos_sin_cache=qkvfuse.build_cos_sin_cache(16, D), positions=np.arange(T, dtype=np.int64),
              k_cache=np.zeros((2, 4, Nkv, D), np.int8), v_cache=np.zeros((2, 4, Nkv, D), np.int8),
              slot_mapping=np.array([0, 5, -1], np.int64), k_scale=np.array([0.05], np.float32),
              v_scale=np.array([0.05], np.float32), q_out=np.full((T, Nq * D), 7.0, np.float32))
    kw.update(over)
    return rng.standard_normal((T, H)).astype(np.float32), kw


@pytest.mark.parametrize("over,cls,status,pattern", [
    (dict(k_cache=np.zeros((2, 4, 3, D), np.int8)), qkvfuse.ShapeError, 4, r"k_cache: .*shape\[2\] = 2"),
    (dict(q_gamma=np.ones(D, np.int32)), qkvfuse.DtypeError, 3, r"q_gamma"),
    (dict(eps=-1.0), qkvfuse.InvalidValueError, 2, r"eps: must be finite and > 0"),
    (dict(head_dim=15), qkvfuse.InvalidValueError, 2, r"head_dim"),
    (dict(positions=np.array([0, 1, 99], np.int64)), qkvfuse.OutOfRangeError, 8,
     r"positions: positions\[2\] = 99 is outside \[0, 16\)"),
    (dict(slot_mapping=np.array([0, 8, 1], np.int64)), qkvfuse.OutOfRangeError, 8, r"slot_mapping\[1\] = 8"),
    (dict(k_scale=np.array([0.0], np.float32)), qkvfuse.BadScaleError, 9, r"k_scale\[0\] = 0"),
    (dict(slot_mapping=None), qkvfuse.NullPointerError, 1, r"slot_mapping: required"),
    (dict(k_quant="int8_asym"), qkvfuse.NullPointerError, 1, r"k_offset: required"),
    (dict(rope="bogus"), qkvfuse.InvalidValueError, 2, r"rope: expected one of"),
    (dict(q_quant="fp8_e5m2", q_out=qkvfuse.TypedArray.zeros((T, Nq * D), "float8_e5m2")), qkvfuse.NullPointerError, 1,
     r"q_scale: required with q_quant set"),
    (dict(q_quant="fp8_e4m3", q_scale=np.array([0.0], np.float32), q_out=None), qkvfuse.BadScaleError, 9,
     r"q_scale\[0\] = 0"),
    (dict(q_quant="fp8_e5m2", q_scale=np.array([0.1], np.float32),
          q_out=qkvfuse.TypedArray.zeros((T, Nq * D), "float8_e4m3fn")), qkvfuse.DtypeError, 3,
     r"q_out: dtype must be float8_e5m2 with desc.q_quant = fp8_e5m2"),
    (dict(q_quant="fp8_e5m2", q_scale=np.array([0.1, 0.2], np.float32), q_out=None), qkvfuse.ShapeError, 4,
     r"q_scale: expected 1 element"),
    (dict(q_scale=np.array([0.1], np.float32)), qkvfuse.InvalidValueError, 2, r"q_scale: not used with q_quant none"),
    (dict(q_quant="int8_sym"), qkvfuse.InvalidValueError, 2, r"q_quant: expected one of"),
    (dict(k_scale=np.array([0.1, 0.2, 0.3], np.float32)), qkvfuse.ShapeError, 4,
     r"k_scale: expected 1 \(per tensor.*Nkv = 2 \(per kv head.*Nkv\*D = 128 \(per channel"),
    (dict(k_cache=qkvfuse.TypedArray.zeros((2, 4, Nkv, D), "float8_e5m2"), k_quant="int8_sym"), qkvfuse.DtypeError,
     3, r"k_cache: dtype must be int8; got float8_e5m2"),
], ids=["shape", "dtype", "eps", "head_dim", "position", "slot", "scale", "missing", "asym-offset", "enum",
        "q_scale-missing", "q_scale-zero", "q_out-dtype", "q_scale-shape", "q_scale-extra", "q_quant-int8",
        "per-head-shape", "e5m2-cache-quant"])
def test_status_to_exception(over, cls, status, pattern):
    x, kw = base(**over)
    before = {k: v.copy() for k, v in kw.items() if isinstance(v, np.ndarray)}
    with pytest.raises(cls, match=pattern) as info:
        qkvfuse.run(x, **kw)
    e = info.value
    assert isinstance(e, qkvfuse.QkvfuseError) and e.status == status
    assert e.message in str(e) and e.status_name in str(e)
    for k, v in before.items():  # nothing written: outputs and caches keep every byte
        assert np.array_equal(np.asarray(kw[k]).view(np.uint8), v.view(np.uint8)), k


def test_quantized_q_on_torch_tensors_equals_numpy():
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(7).standard_normal((T, H)).astype(np.float32)
    kw = dict(num_q_heads=Nq, num_kv_heads=Nkv, head_dim=D, q_quant="fp8_e5m2")
    want = qkvfuse.run(x, q_scale=np.array([0.05], np.float32), **kw).q
    got = qkvfuse.run(torch.from_numpy(x), q_scale=torch.tensor([0.05]), **kw).q
    assert got.dtype == torch.float8_e5m2
    bits = want.storage if isinstance(want, qkvfuse.TypedArray) else np.asarray(want).view(np.uint8)
    assert np.array_equal(got.view(torch.uint8).numpy(), bits.reshape(got.shape))


def test_python_exception_families():
    assert issubclass(qkvfuse.ShapeError, ValueError)
    assert issubclass(qkvfuse.DtypeError, TypeError)
    assert issubclass(qkvfuse.OutOfRangeError, IndexError)
    assert issubclass(qkvfuse.UnsupportedError, NotImplementedError)
    e = errors.from_status(11, "QKVFUSE_ERROR_UNSUPPORTED", "device_type: cuda requested", "qkvfuse_plan_create")
    assert isinstance(e, qkvfuse.UnsupportedError) and str(e).startswith("qkvfuse_plan_create: device_type")


def test_overlap_and_in_place_rules():
    x, kw = base()
    with pytest.raises(qkvfuse.OverlapError, match="q_out: overlaps the input"):
        qkvfuse.run(x, **dict(kw, q_out=x[:, D:D + Nq * D]))
    buf = x.copy()
    qkvfuse.run(buf, **dict(kw, q_out=buf[:, :Nq * D]))  # exactly the q columns: allowed


def test_binding_side_checks():
    x, kw = base()
    with pytest.raises(qkvfuse.DtypeError, match="positions: NumPy dtype uint16"):
        qkvfuse.run(x, **dict(kw, positions=np.arange(T, dtype=np.uint16)))
    with pytest.raises(qkvfuse.StrideError, match="qkv: stride"):
        qkvfuse.run(x[::-1], **kw)
    with pytest.raises(qkvfuse.DtypeError, match="expected a NumPy array"):
        qkvfuse.run(x, **dict(kw, q_gamma=[1.0] * D))
    ro = np.zeros((T, Nq * D), np.float32)
    ro.flags.writeable = False
    with pytest.raises(qkvfuse.InvalidValueError, match="q_out: the output array is read-only"):
        qkvfuse.run(x, **dict(kw, q_out=ro))
    with pytest.raises(qkvfuse.StrideError, match="last dims"):  # innermost stride 2: the library refuses
        qkvfuse.run(np.repeat(x, 2, axis=1)[:, ::2], **kw)


def test_named_operator_messages():
    x = np.zeros((T, H), np.float32)
    g = np.ones(D, np.float32)
    csc = qkvfuse.build_cos_sin_cache(8, D)
    with pytest.raises(qkvfuse.InvalidValueError, match="rope_dim: must be 0"):
        qkvfuse.split_qkv_rmsnorm_rope(x, g, g, csc, np.zeros(T, np.int32), q_hidden_size=Nq * D, rope_dim=3)
    with pytest.raises(qkvfuse.InvalidValueError, match=r'cache_mode: expected "PA_NZ"'):
        qkvfuse.qkv_rmsnorm_rope_cache(x, g, g, np.zeros((T, D), np.float32), np.zeros((T, D), np.float32),
                                       np.zeros(T, np.int64), np.zeros((2, 8, 4, Nkv * D // 8), np.float32),
                                       np.zeros((2, 8, 4, Nkv * D // 8), np.float32), head_nums=(Nq, Nkv, Nkv),
                                       cache_mode="BOGUS")
    with pytest.raises(qkvfuse.InvalidValueError, match='quant_mode: expected "static"'):
        qkvfuse.dequant_rope_quant_kvcache(x.reshape(T, 1, H), np.zeros((T, 1, 1, D), np.float32),
                                           np.zeros((T, 1, 1, D), np.float32), np.zeros((T, 2, Nkv, D), np.int8),
                                           np.zeros((T, 2, Nkv, D), np.int8), np.zeros(T, np.int32),
                                           np.ones(Nkv * D, np.float32), np.ones(Nkv * D, np.float32),
                                           quant_mode="dynamic")


def test_error_flags_on_cpu():
    x, kw = base(positions=np.array([0, 1, 99], np.int64))
    flags = np.zeros(1, np.uint32)
    with pytest.raises(qkvfuse.OutOfRangeError):
        qkvfuse.run(x, error_flags=flags, **kw)
    assert flags[0] == qkvfuse.DATA_ERROR_POSITION


def test_cuda_plan_without_cuda_is_a_clear_error():
    try:
        plan = qkvfuse.Plan(num_q_heads=1, num_kv_heads=1, head_dim=16, device="cuda")
    except (qkvfuse.UnsupportedError, qkvfuse.DeviceError) as e:
        assert "cuda" in e.message
    else:
        assert plan.backend_name == "cuda"


def test_strided_vectors_on_the_cpu():
    """Vectors with any strides (docs/API.md, "Strides"): a CPU call copies
    them and gives the contiguous call's bytes; the strided vectors of one call
    past the call's 64 KiB buffer are a StrideError naming the one that does
    not fit, with nothing written."""
    rng = np.random.default_rng(1)
    g = rng.uniform(0.5, 1.5, 2 * D).astype(np.float32)
    ks = rng.uniform(0.02, 0.08, (Nkv, 2 * D + 3)).astype(np.float32)
    strided = dict(q_gamma=g[::2], k_gamma=g[1::2], k_scale=ks[:, : 2 * D : 2],
                   slot_mapping=np.array([0, 9, 5, 9, -1, 9], np.int64)[::2])
    runs = []
    for over in (strided, {k: np.ascontiguousarray(v) for k, v in strided.items()}):
        x, kw = base(**over)
        qkvfuse.run(x, **kw)
        runs.append([kw[k].copy() for k in ("q_out", "k_cache", "v_cache")])
    for a, b in zip(*runs):
        assert np.array_equal(a, b)
    assert np.any(runs[0][1] != 0)  # the per-channel k scale was used
    n = 17000  # int64 positions of n tokens: 136000 bytes, past the buffer
    q_out = np.full((n, Nq * D), 7.0, np.float32)
    _, kw = base(positions=np.zeros(2 * n, np.int64)[::2], slot_mapping=np.full(n, -1, np.int64), q_out=q_out)
    caches = [kw["k_cache"].copy(), kw["v_cache"].copy()]
    with pytest.raises(qkvfuse.StrideError, match=r"positions: strided .* give positions contiguous"):
        qkvfuse.run(np.zeros((n, H), np.float32), **kw)
    assert np.all(q_out == 7.0)
    assert np.array_equal(kw["k_cache"], caches[0]) and np.array_equal(kw["v_cache"], caches[1])
