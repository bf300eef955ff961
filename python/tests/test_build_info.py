# SPDX-License-Identifier: Apache-2.0
"""qkvfuse.build_info(): the C library's qkvfuse_build_info as a dict, plus the binding."""
import os

import qkvfuse
from qkvfuse import _capi


def test_build_info_keys_and_version():
    info = qkvfuse.build_info()
    keys = {"version", "cuda", "cuda_architectures", "cpu_isa", "backends", "binding", "torch_binding",
            "torch_extension"}
    assert set(info) - {"torch_binding_reason"} == keys
    assert info["binding"] == "ctypes"
    assert info["version"] == qkvfuse.version() == qkvfuse.__version__
    assert info["backends"][0] == "reference"


def test_build_info_cuda_fields_agree():
    info = qkvfuse.build_info()
    if "cuda" in info["backends"]:
        major, minor = (int(x) for x in info["cuda"].split(".")[:2])
        assert major >= 11 and minor >= 0
        assert info["cuda_architectures"] and all(isinstance(a, str) and a for a in info["cuda_architectures"])
    else:
        assert info["cuda"] is None and info["cuda_architectures"] == []


def test_build_info_cpu_isa():
    isa = qkvfuse.build_info()["cpu_isa"]
    assert set(isa) == {"compiled", "detected"}
    known = ["scalar", "avx2", "avx512", "avx512bf16"]
    assert isa["compiled"] == [name for name in known if name in isa["compiled"]]  # known names, in order
    if "cpu" in qkvfuse.build_info()["backends"]:
        assert isa["compiled"][0] == "scalar" and isa["detected"] in isa["compiled"]
    else:
        assert isa["compiled"] == [] and isa["detected"] is None


def test_build_info_torch_binding():
    """Which binding registered torch.ops.qkvfuse: None without torch; with
    the extension, the file loaded and the torch it was built for (this one);
    QKVFUSE_TEST_TORCH_BINDING (set by CTest) says which one must be loaded."""
    info = qkvfuse.build_info()
    if not qkvfuse.HAVE_TORCH:
        assert info["torch_binding"] is None and info["torch_extension"] is None
        return
    import torch
    assert info["torch_binding"] in ("extension", "python")
    ext = info["torch_extension"]
    if info["torch_binding"] == "extension":
        assert ext["torch_version"] == torch.__version__ and os.path.isfile(ext["path"])
        assert isinstance(ext["cuda"], bool)
    else:
        assert ext is None
    want = os.environ.get("QKVFUSE_TEST_TORCH_BINDING")
    if want:
        assert info["torch_binding"] == want, info.get("torch_binding_reason")


def test_build_info_is_a_fresh_dict():
    a = qkvfuse.build_info()
    a["binding"] = "changed"
    assert qkvfuse.build_info()["binding"] == "ctypes"
    assert _capi.lib().qkvfuse_build_info() == _capi.lib().qkvfuse_build_info()
