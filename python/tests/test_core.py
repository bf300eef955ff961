# SPDX-License-Identifier: Apache-2.0
"""The core operator on NumPy arrays against the float64 oracle: random
shapes across every option (dtypes, layouts, quant modes incl. fp8 e5m2,
per-tensor / per-head / per-channel scales, a quantized q, RoPE sources,
styles and scalings, partial R, norm/beta/offset, in-place, strided rows,
shared k/v cache buffers, parity mode), on the auto and reference backends."""
import numpy as np
import pytest

import cases
from conftest import seeds


@pytest.mark.parametrize("backend,seed", [("auto", s) for s in seeds(250, 1000)]
                         + [("reference", s) for s in seeds(100, 5000)])
def test_random_case(backend, seed):
    cases.check_random(seed, backend, cases.to_numpy_args, extended=True)


def test_separate_inputs_with_heads_split_allocate_that_form():
    """q, k, v as [T, N, D] NumPy views: outputs of that form, the packed call's values."""
    import qkvfuse
    rng = np.random.default_rng(5)
    T, Nq, Nkv, D = 5, 4, 2, 32
    qkv = rng.standard_normal((T, (Nq + 2 * Nkv) * D)).astype(np.float32)
    q = qkv[:, :Nq * D].reshape(T, Nq, D)
    k = qkv[:, Nq * D:(Nq + Nkv) * D].reshape(T, Nkv, D)
    kw = dict(num_q_heads=Nq, num_kv_heads=Nkv, head_dim=D, q_gamma=np.ones(D, np.float32),
              k_gamma=np.ones(D, np.float32), positions=np.arange(T, dtype=np.int64), return_k=True)
    want = qkvfuse.run(qkv, **kw)
    got = qkvfuse.run(q=q, k=k, **kw)
    assert got.q.shape == (T, Nq, D) and got.k.shape == (T, Nkv, D) and got.v is None
    assert np.array_equal(got.q.reshape(T, -1), want.q) and np.array_equal(got.k.reshape(T, -1), want.k)
