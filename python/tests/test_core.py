# SPDX-License-Identifier: Apache-2.0
"""The core operator on NumPy arrays against the float64 oracle: random
shapes across every option (dtypes, layouts, quant modes incl. fp8 e5m2,
per-tensor / per-head / per-channel scales, a quantized q, RoPE sources,
styles and scalings, partial R, norm/beta/offset, in-place, strided rows,
shared k/v cache buffers, parity mode), on the auto and reference backends."""
import pytest

import cases
from conftest import seeds


@pytest.mark.parametrize("backend,seed", [("auto", s) for s in seeds(250, 1000)]
                         + [("reference", s) for s in seeds(100, 5000)])
def test_random_case(backend, seed):
    cases.check_random(seed, backend, cases.to_numpy_args, extended=True)
