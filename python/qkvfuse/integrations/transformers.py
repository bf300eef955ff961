# SPDX-License-Identifier: Apache-2.0
"""Hugging Face transformers models with their attention prologue in one
qkvfuse call.

    from qkvfuse.integrations import transformers as qkvfuse_tf
    qkvfuse_tf.patch(model)      # every attention layer it can serve
    model.generate(...)          # transformers' own code, prologue fused
    qkvfuse_tf.unpatch(model)

What changes in a patched layer: the per-head q/k RMSNorm (where the model
has one) and RoPE become one ``torch.ops.qkvfuse.run`` call on the
projections' outputs. The RoPE uses the cos and sin the model's rotary
embedding computed for this forward, so the model's own rope type
(default, linear, dynamic, yarn, longrope, llama3, proportional), its
scaling and attention factor, partial rotary factor, per-layer-type tables
(Gemma-3's local and global layers) and position ids hold as they are; a
table that changes with the sequence length (dynamic, longrope) is the one
the rotary embedding computed for this very forward. Everything else
(projections, caches, masks, attention implementations, ``generate()``)
stays transformers' code.

How: in the modeling module of a patched family, ``apply_rotary_pos_emb``
is wrapped; a patched layer's ``q_norm``/``k_norm`` pass their input
through, and while the layer's forward runs, the wrapped function does the
norm and RoPE of that layer in one call. Outside a patched layer (the
running layer is tracked per thread, so other threads' forwards are
outside it) the wrapper calls the original. A call qkvfuse cannot take
(autograd needs the graph, rows that are not evenly strided) runs the
original norm and RoPE, so results never depend on that choice beyond
rounding.

A layer the operator cannot serve is left unpatched, with a warning that
names the reason: a head_dim that is odd or outside [16, 1024], q/k norms
whose eps (``rms_norm_eps``) is not a positive float32 or differs between
q and k, a norm on only one of q and k, an attention class with no patch
here. A forward whose rotary dim is 0 (a partial rotary factor below
2 / head_dim: nothing to rotate) runs the original code.

``patch(model, fuse_projections=True)`` also makes each patched layer's
separate q, k and v projections one matrix product, as engines do: the
three weights (and biases) are moved into one [Nq*D + 2*Nkv*D, hidden]
tensor, each projection's parameter becoming a view of its rows (no memory
added; state_dict keys and values unchanged), and ``q_proj`` computes all
three at once, ``k_proj`` and ``v_proj`` handing out their column ranges of
that product for the same input. q and k then reach the qkvfuse call as
views into the packed product. If the parameters are replaced or moved
(``model.to(...)``), the next forward fuses them again; a forward that
records autograd runs the three projections as before.
"""
from __future__ import annotations

import importlib
import math
import threading
import warnings
import weakref

import torch

from .. import _binding

__all__ = ["FAMILIES", "patch", "unpatch", "patched_layers"]

# attention class -> (modeling module, rope style, norm weights with a (1 + w) offset)
FAMILIES = {
    "LlamaAttention": ("llama", "neox", False),
    "MistralAttention": ("mistral", "neox", False),
    "Qwen2Attention": ("qwen2", "neox", False),
    "Qwen3Attention": ("qwen3", "neox", False),
    "Gemma2Attention": ("gemma2", "neox", True),
    "Gemma3Attention": ("gemma3", "neox", True),
    "Phi3Attention": ("phi3", "neox", False),
    "Glm4Attention": ("glm4", "interleaved", False),
}
_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
_MIN_HEAD_DIM, _MAX_HEAD_DIM = 16, 1024  # the operator's head_dim range
_NO_SCALING = [1.0, 0.0, 1.0, 4.0, 32.0, 1.0, 1.0, 1.0]

_PROJECTIONS = ("q_proj", "k_proj", "v_proj")

# the patched attention layer whose forward is running in this thread (None:
# none): per thread, since another thread's forward (of any model) calls the
# same wrapper. Set to None here and by patch() in the thread that calls it,
# so that a first forward does not add the attribute: torch.compile guards
# on its presence, and the change would recompile a compiled model.
_active = threading.local()
_active.layer = None
_originals = {}    # family -> its modeling module's own apply_rotary_pos_emb
_layers = weakref.WeakSet()  # every patched layer


def _modeling(family):
    return importlib.import_module("transformers.models.%s.modeling_%s" % (family, family))


def _norm_eps(norm):
    for name in ("variance_epsilon", "eps"):
        if hasattr(norm, name):
            return float(getattr(norm, name))
    return None


def _unservable(layer, family_entry):
    """Why this layer cannot be patched (a sentence), or None."""
    family, _, _ = family_entry
    head_dim = getattr(layer, "head_dim", None)
    if not isinstance(head_dim, int) or head_dim <= 0:
        return "its head_dim is not a positive int"
    if head_dim % 2 or not _MIN_HEAD_DIM <= head_dim <= _MAX_HEAD_DIM:
        return "head_dim %d is odd or outside [%d, %d]" % (head_dim, _MIN_HEAD_DIM, _MAX_HEAD_DIM)
    norms = [getattr(layer, n, None) for n in ("q_norm", "k_norm")]
    if (norms[0] is None) != (norms[1] is None):
        return "it normalizes only one of q and k"
    for n in norms:
        if n is not None and (getattr(n, "weight", None) is None or n.weight.shape != (head_dim,)
                              or _norm_eps(n) is None):
            return "its q/k norm is not a per-head RMSNorm with a [head_dim] weight and an eps"
    if norms[0] is not None:
        eps = [_norm_eps(n) for n in norms]
        if eps[0] != eps[1]:
            return "its q_norm and k_norm have different eps (%g, %g)" % tuple(eps)
        # the operator adds eps as a float32 that must be finite and > 0
        if not math.isfinite(eps[0]) or torch.tensor(eps[0], dtype=torch.float32).item() <= 0:
            return "its q/k norm eps (rms_norm_eps) %g is not a positive finite float32" % eps[0]
    try:
        mod = _modeling(family)
    except ImportError as e:
        return "transformers.models.%s cannot be imported (%s)" % (family, e)
    if not callable(getattr(mod, "apply_rotary_pos_emb", None)):
        return "transformers.models.%s has no apply_rotary_pos_emb" % family
    if _binding.OPS is None:
        return "the torch.ops.qkvfuse operators are not registered"
    return None


def _pass_through(self, x):
    return x


def _unfusable(layer):
    """Why the layer's q/k/v projections cannot be one product (a sentence), or None."""
    projs = [getattr(layer, n, None) for n in _PROJECTIONS]
    if any(type(p) is not torch.nn.Linear for p in projs):
        return "its q, k and v projections are not three torch.nn.Linear"
    w = [p.weight for p in projs]
    if any(x.shape[1] != w[0].shape[1] or x.dtype != w[0].dtype or x.device != w[0].device for x in w):
        return "its q, k and v projections differ in input size, dtype or device"
    if len({p.bias is None for p in projs}) != 1:
        return "only some of its q, k and v projections have a bias"
    return None


def _fuse_weights(layer):
    """Move q/k/v_proj's weights (and biases) into one tensor each, the three
    parameters becoming views of its rows; returns (weight, bias or None)."""
    projs = [getattr(layer, n) for n in _PROJECTIONS]
    with torch.no_grad():
        packed, views = [], []
        for name in ("weight", "bias"):
            own = [getattr(p, name) for p in projs]
            if own[0] is None:
                packed.append(None)
                continue
            whole = torch.cat([x.detach() for x in own])
            row = 0
            for p, x in zip(projs, own):
                setattr(p, name, torch.nn.Parameter(whole[row: row + x.shape[0]], requires_grad=x.requires_grad))
                views.append((p, name, getattr(p, name), whole, row))
                row += x.shape[0]
            packed.append(whole)
    layer.__dict__["_qkvfuse_packed"] = (packed[0], packed[1], tuple(views))
    return packed[0], packed[1]


def _packed_weights(layer):
    """The fused weight and bias, fused again when the projections' parameters
    are no longer views of them (replaced, or moved by ``model.to``)."""
    packed = layer.__dict__.get("_qkvfuse_packed")
    if packed is None or _stale(packed):
        return _fuse_weights(layer)
    return packed[0], packed[1]


def _stale(packed):
    """Are the parameters no longer the views _fuse_weights made? Under
    torch.compile: another parameter object, device or dtype (what Dynamo can
    trace and guard on; ``model.to`` changes one of them); in eager mode also
    another storage or offset (a parameter's ``.data`` replaced in place)."""
    for module, name, view, whole, row in packed[2]:
        x = getattr(module, name)
        if x is not view or x.device != whole.device or x.dtype != whole.dtype:
            return True
        if not torch.compiler.is_compiling() and (
                x.untyped_storage().data_ptr() != whole.untyped_storage().data_ptr()
                or x.data_ptr() != whole[row:].data_ptr()):
            return True
    return False


def _projection_of(layer, index, box):
    """q_proj (index 0), k_proj, v_proj as column ranges of one product,
    which box[0] (shared by the three) holds with its input from q_proj's
    call to v_proj's: a plain list, so that torch.compile traces it where a
    module's __dict__ would break its graph."""
    own = getattr(layer, _PROJECTIONS[index])

    def forward(x):
        if torch.is_grad_enabled() and own.weight.requires_grad:
            return torch.nn.functional.linear(x, own.weight, own.bias)
        stash = box[0]
        if stash is None or stash[0] is not x or index == 0:
            weight, bias = _packed_weights(layer)
            widths = [getattr(layer, n).out_features for n in _PROJECTIONS]
            stash = (x, torch.nn.functional.linear(x, weight, bias).split(widths, dim=-1))
            box[0] = stash
        if index == len(_PROJECTIONS) - 1:
            box[0] = None  # the last of the three: nothing kept past this forward
        return stash[1][index]
    return forward


def _forward_of(layer):
    own = type(layer).forward

    def forward(*args, **kwargs):
        outer = getattr(_active, "layer", None)
        _active.layer = layer
        try:
            return own(layer, *args, **kwargs)
        finally:
            _active.layer = outer
    return forward


def _token_rows(x):
    """x [B, S, N, D] as qkvfuse reads it: tokens as rows of one stride with
    contiguous heads ([B, N, D] or [S, N, D] when S or B is 1), or None."""
    b, s, n, d = x.shape
    if s == 1 or b == 1:
        x = x[:, 0] if s == 1 else x[0]
    elif x.stride(0) != s * x.stride(1):
        return None
    return x if x.stride(-1) == 1 and (n == 1 or x.stride(-2) == d) else None


def _original_norm_rope(layer, original, q, k, cos, sin, args, kwargs):
    if getattr(layer, "q_norm", None) is not None:
        q = type(layer.q_norm).forward(layer.q_norm, q)
        k = type(layer.k_norm).forward(layer.k_norm, k)
    return original(q, k, cos, sin, *args, **kwargs)


def _fused(layer, style, offset, q, k, cos, sin):
    """Norm + RoPE of q, k [B, N, S, D] with cos, sin [B, S, R] (the
    family's own full-length tables) in one qkvfuse call; None when qkvfuse
    cannot take the call."""
    if (q.dim() != 4 or k.dim() != 4 or cos.dim() != 3 or q.dtype not in _DTYPES or k.dtype != q.dtype
            or cos.dtype not in _DTYPES or sin.dtype != cos.dtype or q.device != cos.device
            or (torch.is_grad_enabled() and (q.requires_grad or k.requires_grad))):
        return None
    qs, ks = q.transpose(1, 2), k.transpose(1, 2)  # [B, S, N, D], the projections' own rows
    b, s, nq, d = qs.shape
    nkv = ks.shape[2]
    r = cos.shape[-1]
    if (ks.shape[0] != b or ks.shape[1] != s or ks.shape[3] != d or cos.shape[0] not in (1, b)
            or cos.shape[1] != s or r % 2 or r > d or r == 0):  # r == 0: nothing to rotate
        return None
    qs, ks = _token_rows(qs), _token_rows(ks)
    if qs is None or ks is None:
        return None
    if style == "interleaved":  # the family's table is (cos_0 .. cos_{R/2-1}) twice; pairs (2i, 2i+1)
        cos = cos[..., : r // 2].repeat_interleave(2, dim=-1)
        sin = sin[..., : r // 2].repeat_interleave(2, dim=-1)
    if cos.shape[0] != b:  # one table row per token, so a batch shares it by a copy
        cos, sin = cos.expand(b, s, r).contiguous(), sin.expand(b, s, r).contiguous()
    cos, sin = cos.reshape(b * s, r), sin.reshape(b * s, r)
    norm = getattr(layer, "q_norm", None) is not None
    qg = layer.q_norm.weight if norm else None
    kg = layer.k_norm.weight if norm else None
    eps = _norm_eps(layer.q_norm) if norm else 1e-6
    if norm and (_norm_eps(layer.k_norm) != eps or qg.device != q.device):
        return None
    out = _binding.OPS.run(
        None, None, None, None, qg, kg, None, None, None, None, cos, sin, None, None, None, None, None, None, None,
        None, nq, nkv, d, r, "cos_sin", style, 10000.0, "none", _NO_SCALING, eps, bool(offset), "auto", "auto",
        "auto", "fused", "auto", 0, q.dtype, True, False, qs, ks, None, None, "none", None, None, None, None)
    return out[0].view(b, s, nq, d).transpose(1, 2), out[1].view(b, s, nkv, d).transpose(1, 2)


def _wrap_rope(family):
    if family in _originals:
        return
    mod = _modeling(family)
    original = mod.apply_rotary_pos_emb

    def apply_rotary_pos_emb(q, k, cos, sin, *args, **kwargs):
        layer = getattr(_active, "layer", None)
        if layer is None or layer not in _layers:
            return original(q, k, cos, sin, *args, **kwargs)
        entry = FAMILIES[type(layer).__name__]
        res = None
        if not args and not kwargs:  # the models call it with the default unsqueeze_dim
            res = _fused(layer, entry[1], entry[2], q, k, cos, sin)
        if res is None:
            res = _original_norm_rope(layer, original, q, k, cos, sin, args, kwargs)
        return res

    apply_rotary_pos_emb.__wrapped__ = original
    _originals[family] = original
    mod.apply_rotary_pos_emb = apply_rotary_pos_emb


def _unwrap_unused():
    live = {FAMILIES[type(l).__name__][0] for l in _layers}
    for family in list(_originals):
        if family not in live:
            _modeling(family).apply_rotary_pos_emb = _originals.pop(family)


def patch(model, *, warn: bool = True, fuse_projections: bool = False) -> list:
    """Route the attention prologue of every layer of ``model`` that
    qkvfuse can serve through one qkvfuse call. Returns the patched
    layers' names; a layer it cannot serve stays as it was, with a
    warning naming the reason (``warn=False``: silent). Idempotent.
    ``fuse_projections``: also compute each patched layer's q, k and v
    projections as one product (module docstring); a layer whose
    projections cannot be fused keeps them, with a warning."""
    if not hasattr(_active, "layer"):
        _active.layer = None
    done = []
    for name, layer in model.named_modules():
        entry = FAMILIES.get(type(layer).__name__)
        if entry is None:
            if type(layer).__name__.endswith("Attention") and warn:
                warnings.warn("qkvfuse: %s (%s) left unpatched: no qkvfuse patch for this attention class"
                              % (name, type(layer).__name__), stacklevel=2)
            continue
        if layer not in _layers:
            why = _unservable(layer, entry)
            if why is not None:
                if warn:
                    warnings.warn("qkvfuse: %s (%s) left unpatched: %s" % (name, type(layer).__name__, why),
                                  stacklevel=2)
                continue
            _wrap_rope(entry[0])
            layer.forward = _forward_of(layer)
            for n in ("q_norm", "k_norm"):
                norm = getattr(layer, n, None)
                if norm is not None:
                    norm.forward = _pass_through.__get__(norm)
            _layers.add(layer)
        if fuse_projections:
            _patch_projections(name, layer, warn)
        done.append(name)
    return done


def _patch_projections(name, layer, warn):
    if "forward" in getattr(layer, "q_proj", layer).__dict__:
        return
    if getattr(layer, "qkv_proj", None) is not None and getattr(layer, "q_proj", None) is None:
        return  # one projection already (Phi-3)
    why = _unfusable(layer)
    if why is not None:
        if warn:
            warnings.warn("qkvfuse: %s (%s) keeps separate projections: %s" % (name, type(layer).__name__, why),
                          stacklevel=3)
        return
    _fuse_weights(layer)
    box = [None]
    for i, n in enumerate(_PROJECTIONS):
        getattr(layer, n).forward = _projection_of(layer, i, box)


def unpatch(model) -> list:
    """Undo :func:`patch` on every patched layer of ``model``; returns their names."""
    undone = []
    for name, layer in model.named_modules():
        if layer not in _layers:
            continue
        _layers.discard(layer)
        del layer.forward
        for n in ("q_norm", "k_norm") + _PROJECTIONS:
            sub = getattr(layer, n, None)
            if sub is not None and "forward" in sub.__dict__:
                del sub.forward
        layer.__dict__.pop("_qkvfuse_packed", None)  # the parameters stay views of it, their values unchanged
        undone.append(name)
    _unwrap_unused()
    return undone


def patched_layers(model) -> list:
    """The names of the layers of ``model`` that :func:`patch` patched."""
    return [name for name, layer in model.named_modules() if layer in _layers]
