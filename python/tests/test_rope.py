# SPDX-License-Identifier: Apache-2.0
"""The cos/sin cache builder and the scaling rules, against the oracle's own
frequency rules in float64."""
import numpy as np
import pytest

import oracle as orc
import qkvfuse

RULES = [None,
         {"type": "linear", "factor": 4.0},
         {"type": "ntk", "factor": 2.5},
         {"type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position": 8192},
         {"type": "yarn", "factor": 4.0, "original_max_position": 4096, "beta_fast": 32.0, "beta_slow": 1.0,
          "extrapolation_factor": 1.0, "attn_factor": 1.2}]


@pytest.mark.parametrize("rule", RULES, ids=lambda r: (r or {"type": "none"})["type"])
@pytest.mark.parametrize("R", [2, 64, 96, 128])
def test_inv_freq(rule, R):
    if rule and rule["type"] == "ntk" and R == 2:
        with pytest.raises(qkvfuse.InvalidValueError, match="NTK"):
            qkvfuse.rope_inv_freq(R, theta=500000.0, scaling=qkvfuse.RopeScaling(**rule))
        return
    f, ms = qkvfuse.rope_inv_freq(R, theta=500000.0, scaling=None if rule is None else qkvfuse.RopeScaling(**rule))
    want, wms = orc.inv_freq(500000.0, R, rule)
    assert f.shape == (R // 2,)
    np.testing.assert_allclose(f, want, rtol=1e-13, atol=0)
    assert ms == pytest.approx(wms, rel=1e-14)


@pytest.mark.parametrize("rule", RULES, ids=lambda r: (r or {"type": "none"})["type"])
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_build_cos_sin_cache(rule, dtype):
    R, max_pos = 64, 300
    cache = qkvfuse.build_cos_sin_cache(max_pos, R, theta=10000.0, scaling=rule and qkvfuse.RopeScaling(**rule),
                                        dtype=dtype)
    assert tuple(cache.shape) == (max_pos, R)
    got = orc.decode(cache.storage, dtype) if isinstance(cache, qkvfuse.TypedArray) else cache.astype(np.float64)
    f, ms = orc.inv_freq(10000.0, R, rule)
    ang = np.arange(max_pos)[:, None] * f[None, :]
    want = np.concatenate([np.cos(ang), np.sin(ang)], 1) * ms
    slack = np.concatenate([np.abs(ang)] * 2, 1) * 4e-16 + 1e-16  # the double evaluation's own error
    lo, hi = orc.round_to(want - slack, dtype), orc.round_to(want + slack, dtype)
    orc.check_within("cos_sin_cache", got, lo, hi)


def test_build_far_positions():
    """Rows at positions near 2^24 and beyond keep their accuracy (double-precision angles)."""
    R = 2  # [2^24 + 8, 2] float32: 128 MiB
    big = qkvfuse.build_cos_sin_cache(2 ** 24 + 8, R, dtype="float32")[2 ** 24:]
    f, _ = orc.inv_freq(10000.0, R)
    ang = (2 ** 24 + np.arange(8))[:, None] * f[None, :]
    want = np.concatenate([np.cos(ang), np.sin(ang)], 1)
    assert np.max(np.abs(big - want)) < 2e-7


def test_hf_style_config_dict():
    hf = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 8192}
    a = qkvfuse.build_cos_sin_cache(64, 32, theta=500000.0, scaling=hf)
    b = qkvfuse.build_cos_sin_cache(64, 32, theta=500000.0, scaling=qkvfuse.RopeScaling(
        "llama3", 8.0, 8192, 1.0, 4.0))
    assert np.array_equal(a, b)
    with pytest.raises(qkvfuse.InvalidValueError, match="mrope_section"):
        qkvfuse.RopeScaling.from_config({"rope_type": "default", "mrope_section": [1, 2]})
    with pytest.raises(qkvfuse.InvalidValueError, match="dynamic"):
        qkvfuse.RopeScaling.from_config({"type": "dynamic", "factor": 2.0})
    assert qkvfuse.RopeScaling.from_config({"type": "default"}) == qkvfuse.RopeScaling()


def test_builder_errors_carry_the_library_message():
    with pytest.raises(qkvfuse.InvalidValueError, match=r"theta: must be finite and > 1; got 0.5"):
        qkvfuse.build_cos_sin_cache(8, 16, theta=0.5)
    with pytest.raises(qkvfuse.InvalidValueError, match="even"):
        qkvfuse.build_cos_sin_cache(8, 15)
    with pytest.raises(qkvfuse.InvalidValueError, match="rope_scaling.factor"):
        qkvfuse.build_cos_sin_cache(8, 16, scaling={"type": "linear", "factor": 0.0})
    with pytest.raises(qkvfuse.DtypeError):
        qkvfuse.build_cos_sin_cache(8, 16, dtype="int32")


def test_builder_fills_given_array_and_computed_rope_matches_cache():
    """A cache built here and the operator's computed RoPE give the same q
    (float32 tables: both round cos/sin once from double precision)."""
    rng = np.random.default_rng(5)
    Nq, Nkv, D, T = 2, 1, 64, 6
    x = rng.standard_normal((T, (Nq + 2 * Nkv) * D)).astype(np.float32)
    pos = rng.integers(0, 5000, T)
    rule = {"type": "yarn", "factor": 2.0, "original_max_position": 2048}
    out = np.empty((5000, D), np.float32)
    assert qkvfuse.build_cos_sin_cache(5000, D, scaling=rule, out=out) is out
    a = qkvfuse.run(x, num_q_heads=Nq, num_kv_heads=Nkv, head_dim=D, cos_sin_cache=out, positions=pos).q
    b = qkvfuse.run(x, num_q_heads=Nq, num_kv_heads=Nkv, head_dim=D, positions=pos, rope_scaling=rule).q
    assert np.array_equal(a, b)
