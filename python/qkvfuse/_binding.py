# SPDX-License-Identifier: Apache-2.0
"""Who registers the torch.ops.qkvfuse operators: the compiled extension
(python/ext: libqkvfuse_torch.so, TORCH_LIBRARY kernels in C++) or, without
it, the Python registration (torch_ops.py). Both define the same schemas and
raise the same errors; the public functions call the operators the same way
through :data:`OPS`.

``QKVFUSE_TORCH_BINDING``: ``auto`` (default: the extension when one built for
this torch is found, else Python), ``extension`` (the extension or an import
error), ``python`` (the Python registration). ``QKVFUSE_TORCH_EXTENSION``: the
path of the extension to load, instead of the search (next to this file, then
``build/python/`` and ``build-gpu/python/`` of the source tree this file sits
in). The extension is built against one torch version (the regular libtorch
ABI), written next to it in ``libqkvfuse_torch.json``; under another torch
version it is left alone.
"""
from __future__ import annotations

import json
import os

from . import _capi, errors

NAME = "libqkvfuse_torch.so"
MODES = ("auto", "extension", "python")

KIND = None          # "extension" | "python" | None (torch not importable)
EXTENSION = None     # {"path", "torch_version", "cuda"} of the loaded extension
REASON = None        # why an extension that was found is not the one loaded


class _Ops:
    """The torch.ops.qkvfuse OpOverloads the public functions call."""

    def __init__(self, torch):
        ns = torch.ops.qkvfuse
        self.run = ns.run.default
        self.run_out = ns.run_out.default
        self.split = ns.split_qkv_rmsnorm_rope.default
        self.split_out = ns.split_qkv_rmsnorm_rope_out.default
        self.cache = ns.qkv_rmsnorm_rope_cache.default
        self.cache_out = ns.qkv_rmsnorm_rope_cache_out.default
        self.dequant = ns.dequant_rope_quant_kvcache.default
        self.dequant_out = ns.dequant_rope_quant_kvcache_out.default
        self.build = ns.build_cos_sin_cache.default


OPS = None  # an _Ops once a binding is registered


def _candidates():
    env = os.environ.get("QKVFUSE_TORCH_EXTENSION")
    if env:
        yield env
        return
    here = os.path.dirname(os.path.abspath(__file__))
    yield os.path.join(here, NAME)
    repo = os.path.dirname(os.path.dirname(here))
    if os.path.isfile(os.path.join(repo, "include", "qkvfuse.h")):
        for build in ("build", "build-gpu"):
            yield os.path.join(repo, build, "python", NAME)


def _usable(path, torch):
    """(facts of the extension at path, None) or (None, why it cannot be used)."""
    meta = os.path.splitext(path)[0] + ".json"
    try:
        with open(meta) as f:
            facts = json.load(f)
    except (OSError, ValueError) as e:
        return None, "%s: cannot read %s (%s)" % (path, meta, e)
    if facts.get("torch_version") != torch.__version__:
        return None, "%s was built against torch %s; this is torch %s" % (path, facts.get("torch_version"),
                                                                        torch.__version__)
    if not facts.get("cuda") and torch.version.cuda and "cuda" in _capi.build_info_raw().get("backends", ()):
        return None, "%s has no CUDA kernels (built without the CUDA toolkit) and the library has CUDA" % path
    return dict(facts, path=os.path.abspath(path)), None


def register(torch):
    """Register torch.ops.qkvfuse once, with the binding the environment asks for."""
    global KIND, EXTENSION, REASON, OPS
    if KIND is not None:
        return
    mode = os.environ.get("QKVFUSE_TORCH_BINDING", "auto") or "auto"
    if mode not in MODES:
        raise errors.InvalidValueError(errors.QKVFUSE_ERROR_INVALID_VALUE,
                                       "QKVFUSE_TORCH_BINDING: expected one of %s; got %r"
                                       % (", ".join(repr(m) for m in MODES), mode))
    if mode != "python":
        tried = []
        for path in _candidates():
            if not os.path.isfile(path):
                if os.environ.get("QKVFUSE_TORCH_EXTENSION"):
                    tried.append("%s: no such file" % path)
                continue
            facts, why = _usable(path, torch)
            if facts is None:
                tried.append(why)
                continue
            _capi.lib()  # first: the extension links libqkvfuse by soname, so it shares this one
            torch.ops.load_library(facts["path"])
            KIND, EXTENSION, OPS = "extension", facts, _Ops(torch)
            return
        REASON = "; ".join(tried) or "no compiled extension found"
        if mode == "extension":
            raise ImportError("qkvfuse: QKVFUSE_TORCH_BINDING=extension but the torch extension cannot be loaded: "
                              + REASON)
    from . import torch_ops
    torch_ops.register_python_ops()
    KIND, OPS = "python", _Ops(torch)


def info() -> dict:
    """build_info()'s keys about the torch binding."""
    out = {"torch_binding": KIND, "torch_extension": dict(EXTENSION) if EXTENSION else None}
    if REASON and KIND == "python":
        out["torch_binding_reason"] = REASON
    return out
