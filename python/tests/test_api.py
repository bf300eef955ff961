# SPDX-License-Identifier: Apache-2.0
"""Package surface: loading, version, ABI layout, Config/Plan, TypedArray,
threads, and that the numbers in the binding match the header."""
import ctypes
import os
import re
import threading

import numpy as np
import pytest

import qkvfuse
from qkvfuse import _capi

HEADER = os.path.join(os.path.dirname(__file__), "..", "..", "include", "qkvfuse.h")


def test_version_and_library():
    assert qkvfuse.version().startswith("%d.%d." % _capi.ABI_VERSION)
    assert os.path.isfile(qkvfuse.library_path())


@pytest.mark.skipif(not os.path.isfile(HEADER), reason="no source tree")
def test_enum_numbers_match_the_header():
    text = open(HEADER).read()
    for prefix, table in (("QKVFUSE_ROPE_SCALING_", _capi.ROPE_SCALING), ("QKVFUSE_QUANT_", _capi.QUANT),
                          ("QKVFUSE_CACHE_", _capi.CACHE_LAYOUT), ("QKVFUSE_ROUNDING_", _capi.ROUNDING),
                          ("QKVFUSE_BACKEND_", _capi.BACKEND), ("QKVFUSE_ADDRESS_", _capi.CACHE_ADDRESSING)):
        for name, number in table.items():
            m = re.search(r"\b%s%s\s*=\s*(\d+)" % (prefix, name.upper()), text)
            assert m and int(m.group(1)) == number, prefix + name
    for name, number in _capi.ROPE_SOURCE.items():
        c = {"none": "NONE", "cos_sin_cache": "COS_SIN_CACHE", "cos_sin": "COS_SIN", "computed": "COMPUTED"}[name]
        assert int(re.search(r"\bQKVFUSE_ROPE_%s\s*=\s*(\d+)" % c, text).group(1)) == number
    for name, code in _capi.DTYPE.items():
        m = re.search(r"\bQKVFUSE_DTYPE_%s\s*=\s*QKVFUSE_DTYPE_CODE\((\d+),\s*(\d+)\)" % name.upper(), text)
        assert m and (int(m.group(1)) << 8 | int(m.group(2))) == code, name
    # every value of an enum numbered from 0 has its name: the tables cover [0, _COUNT)
    for count, table in (("ROPE_SCALING_COUNT", _capi.ROPE_SCALING), ("QUANT_COUNT", _capi.QUANT),
                         ("CACHE_LAYOUT_COUNT", _capi.CACHE_LAYOUT), ("ROUNDING_COUNT", _capi.ROUNDING),
                         ("BACKEND_COUNT", _capi.BACKEND), ("ADDRESS_COUNT", _capi.CACHE_ADDRESSING),
                         ("ROPE_SOURCE_COUNT", _capi.ROPE_SOURCE), ("ROPE_STYLE_COUNT", _capi.ROPE_STYLE)):
        m = re.search(r"\bQKVFUSE_%s\b" % count, text)
        assert m, count
        assert sorted(table.values()) == list(range(len(table))), count
        assert _enum_count(text, "QKVFUSE_" + count) == len(table), count
    lib = _capi.lib()
    for name, code in _capi.DTYPE.items():
        assert lib.qkvfuse_dtype_name(code).decode() == name
        assert lib.qkvfuse_dtype_size(code) == (code & 0xFF) // 8
    # the library's dtypes are exactly the table's (every DLPack code and bit width asked)
    named = {(c << 8) | b for c in range(256) for b in (8, 16, 32, 64) if lib.qkvfuse_dtype_from_dlpack(c, b, 1)}
    assert named == set(_capi.DTYPE.values())
    nstatus = _enum_count(text, "QKVFUSE_STATUS_COUNT")
    assert sorted(qkvfuse.errors._NAMES) == list(range(1, nstatus))
    for status in range(1, nstatus):
        assert qkvfuse.errors._NAMES[status] == lib.qkvfuse_status_string(status).decode()


def _enum_count(text, count_name):
    """The value of an enum's _COUNT enumerator: the number of enumerators before it."""
    body = text[:text.index(count_name)]
    body = body[body.rindex("typedef enum"):]
    body = re.sub(r"/\*.*?\*/", "", body, flags=re.S)
    return len(re.findall(r"\bQKVFUSE_\w+\s*=", body))


def test_struct_layout_matches_the_c_abi():
    """The library checks struct_size; a C probe (built by CMake) reports offsets."""
    probe = os.environ.get("QKVFUSE_ABI_PROBE")
    if not probe:
        pytest.skip("QKVFUSE_ABI_PROBE not set (CTest sets it)")
    import subprocess
    out = subprocess.run([probe], capture_output=True, text=True, check=True).stdout.split()
    c = dict(kv.split("=") for kv in out)
    for struct, cls in (("tensor", _capi.Tensor), ("desc", _capi.Desc), ("args", _capi.Args),
                        ("rope_scaling", _capi.RopeScaling), ("named_options", _capi.NamedOptions)):
        assert int(c["sizeof_" + struct]) == ctypes.sizeof(cls), struct
        for f, _ in cls._fields_:
            key = "%s.%s" % (struct, f)
            if key in c:
                assert int(c[key]) == getattr(cls, f).offset, key
    assert sum(1 for k in c if "." in k) >= 40


def test_config_and_plan():
    cfg = qkvfuse.Config(num_q_heads=8, num_kv_heads=2, head_dim=128, rotary_dim=64, q_norm=True,
                         rope_source="computed", rope_scaling={"type": "linear", "factor": 2.0},
                         rounding="unfused_parity")
    assert cfg.rope_scaling == qkvfuse.RopeScaling("linear", 2.0)
    assert "rope_scaling.factor=2.0" in cfg.to_string() and "rotary_dim=64" in cfg.to_string()
    plan = qkvfuse.Plan(cfg)
    assert plan.backend_name in ("reference",) or plan.backend_name.startswith("cpu")
    assert "Plan(" in repr(plan)
    assert qkvfuse.Plan(num_q_heads=3, num_kv_heads=2, head_dim=64).config.num_kv_heads == 2  # not a GQA ratio
    with pytest.raises(qkvfuse.InvalidValueError, match="rounding: expected one of"):
        qkvfuse.Config(num_q_heads=1, num_kv_heads=1, head_dim=64, rounding="exact")
    with pytest.raises(TypeError, match="gamma: not a tensor argument"):
        plan.run(np.zeros((1, 12 * 128), np.float32), q_out=np.zeros((1, 1024), np.float32), gamma=None)


def test_plan_run_and_threads():
    """One plan, many threads: identical results (plans are immutable)."""
    rng = np.random.default_rng(1)
    Nq, Nkv, D, T = 4, 2, 64, 16
    x = rng.standard_normal((T, (Nq + 2 * Nkv) * D)).astype(np.float32)
    g = rng.uniform(0.5, 1.5, D).astype(np.float32)
    plan = qkvfuse.Plan(num_q_heads=Nq, num_kv_heads=Nkv, head_dim=D, rotary_dim=D, q_norm=True, k_norm=True,
                        rope_source="computed")
    pos = np.arange(T, dtype=np.int32)
    ref = np.empty((T, Nq * D), np.float32)
    plan.run(x, q_out=ref, q_gamma=g, k_gamma=g, positions=pos)
    outs = [np.empty_like(ref) for _ in range(8)]

    def work(o):
        for _ in range(20):
            plan.run(x, q_out=o, q_gamma=g, k_gamma=g, positions=pos)

    ts = [threading.Thread(target=work, args=(o,)) for o in outs]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    for o in outs:
        assert np.array_equal(o, ref)


def test_typed_array_and_allocation():
    x = qkvfuse.TypedArray(np.zeros((2, 3 * 16), np.uint16), "bfloat16")
    assert x.shape == (2, 48) and x[:, :16].shape == (2, 16) and "bfloat16" in repr(x)
    with pytest.raises(qkvfuse.DtypeError):
        qkvfuse.TypedArray(np.zeros(3, np.float32), "bfloat16")
    out = qkvfuse.run(x, num_q_heads=1, num_kv_heads=1, head_dim=16)
    assert isinstance(out.q, qkvfuse.TypedArray) and out.q.dtype == "bfloat16" and out.k is None
    np.testing.assert_array_equal(out.q.storage, 0)


def test_zero_tokens():
    x = np.zeros((0, 3 * 16), np.float32)
    out = qkvfuse.run(x, num_q_heads=1, num_kv_heads=1, head_dim=16, positions=np.zeros(0, np.int64),
                      return_k=True)
    assert out.q.shape == (0, 16) and out.k.shape == (0, 16)
