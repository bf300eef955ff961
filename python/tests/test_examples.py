# SPDX-License-Identifier: Apache-2.0
"""The README's Python examples (examples/quickstart_*.py) run as written;
each asserts its own result. The PyTorch one needs torch."""
import os
import runpy

import pytest

from conftest import requires_torch

EXAMPLES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples")


def run_example(name, capsys):
    runpy.run_path(os.path.join(EXAMPLES, name), run_name="__main__")
    return capsys.readouterr().out


def test_numpy_example(capsys):
    pytest.importorskip("numpy")
    assert "every head's RMS is 1" in run_example("quickstart_numpy.py", capsys)


@requires_torch
def test_torch_example(capsys):
    assert "every head's RMS is 1" in run_example("quickstart_torch.py", capsys)
