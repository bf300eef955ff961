# SPDX-License-Identifier: Apache-2.0
"""The static configuration of the core operator (qkvfuse_desc), as Python values.

:class:`Config` is a frozen, hashable dataclass with the descriptor's fields
under their C names and Python values (strings for enums, bools for flags);
:class:`RopeScaling` is ``qkvfuse_rope_scaling``. ``Config.to_string`` is a
short text form for messages and reprs.
"""
from __future__ import annotations

import dataclasses
from typing import Mapping, NamedTuple

from . import _capi, _check, errors


def _bad(msg):
    return errors.InvalidValueError(errors.QKVFUSE_ERROR_INVALID_VALUE, msg)


def _choice(name, value, table):
    """An enum given by its name (None: "none")."""
    return _check.string("none" if value is None else value, name, tuple(table))


_SCALING_KEYS = {
    "factor": "factor", "original_max_position_embeddings": "original_max_position",
    "original_max_position": "original_max_position", "low_freq_factor": "low_freq_factor",
    "high_freq_factor": "high_freq_factor", "beta_fast": "beta_fast", "beta_slow": "beta_slow",
    "extrapolation_factor": "extrapolation_factor", "attn_factor": "attn_factor",
}


class RopeScaling(NamedTuple):
    """A RoPE frequency scaling rule (``qkvfuse_rope_scaling``).

    type: ``"none"``, ``"linear"`` (inv_freq / factor), ``"ntk"`` (static
    NTK-aware: theta * factor^(R/(R-2))), ``"llama3"`` (Llama 3.1 wavelength
    bands: factor, low_freq_factor, high_freq_factor, original_max_position)
    or ``"yarn"`` (factor, beta_fast, beta_slow, original_max_position,
    extrapolation_factor; cos and sin multiplied by (0.1 ln(factor) + 1) *
    attn_factor). Defaults are the header's. (A NamedTuple, so that
    torch.compile sees it as a constant.)
    """

    type: str = "none"
    factor: float = 1.0
    original_max_position: int = 0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    beta_fast: float = 32.0
    beta_slow: float = 1.0
    extrapolation_factor: float = 1.0
    attn_factor: float = 1.0

    @classmethod
    def from_config(cls, cfg) -> "RopeScaling":
        """From a model config's ``rope_scaling`` dict (Hugging Face / vLLM keys:
        ``rope_type`` or ``type``, ``factor``, ``original_max_position_embeddings``,
        ``low_freq_factor``, ``high_freq_factor``, ``beta_fast``, ``beta_slow``,
        ``extrapolation_factor``, ``attn_factor``), a RopeScaling, or None (no
        scaling; so is type ``"default"``). Keys a rule does not know raise,
        so nothing is silently ignored (``mrope_section`` and the like are not
        supported; HF's ``attention_factor`` replaces YaRN's whole mscale, so
        pass ``attn_factor`` = attention_factor / (0.1 ln(factor) + 1) instead)."""
        if cfg is None:
            return cls()
        if isinstance(cfg, RopeScaling):
            return cfg.checked()
        if not isinstance(cfg, Mapping):
            raise errors.ArgumentTypeError(
                errors.QKVFUSE_ERROR_INVALID_VALUE,
                "rope_scaling: expected a qkvfuse.RopeScaling, a dict (a model config's rope_scaling) or None; got %r "
                "(%s)" % (cfg, type(cfg).__name__))
        cfg = dict(cfg)
        kind = cfg.pop("rope_type", None) or cfg.pop("type", None) or "none"
        cfg.pop("type", None)
        if kind == "default":
            kind = "none"
        if kind == "dynamic":
            raise _bad("rope_scaling: 'dynamic' NTK depends on the sequence length; qkvfuse has static 'ntk'")
        fields = {}
        for k, v in cfg.items():
            if not isinstance(k, str) or k not in _SCALING_KEYS:
                raise _bad("rope_scaling: key %r is not supported (known: %s)"
                           % (k, ", ".join(sorted(_SCALING_KEYS))))
            fields[_SCALING_KEYS[k]] = v
        return cls(type=kind, **fields).checked()

    def checked(self) -> "RopeScaling":
        """This rule with each field checked against its C type (the values
        themselves are judged by the library)."""
        fields = {"type": _choice("rope_scaling.type", self.type, _capi.ROPE_SCALING)}
        for name in self._fields[1:]:
            v = getattr(self, name)
            fields[name] = (_check.integer(v, "rope_scaling." + name) if name == "original_max_position"
                            else _check.real(v, "rope_scaling." + name))
        return self._replace(**fields)

    def to_c(self) -> _capi.RopeScaling:
        r = self.checked()
        return _capi.RopeScaling(_capi.ROPE_SCALING[r.type], r.factor, r.original_max_position, r.low_freq_factor,
                                 r.high_freq_factor, r.beta_fast, r.beta_slow, r.extrapolation_factor, r.attn_factor)


@dataclasses.dataclass(frozen=True)
class Config:
    """qkvfuse_desc without the device (a plan is a Config on a device).

    Enum fields take the header's names in lower case: rope_source
    ``"none" | "cos_sin_cache" | "cos_sin" | "computed"``; rope_style
    ``"neox" | "interleaved"``; cache_layout ``"none" | "paged" | "paged_hnd" |
    "nz" | "contiguous"``; k_quant/v_quant ``"none" | "int8_sym" | "int8_asym" |
    "fp8_e4m3" | "fp8_e5m2"``; q_quant ``"none" | "fp8_e4m3" | "fp8_e5m2"`` (q_out
    of that float8 dtype, fp8(q / q_scale)); cache_addressing ``"slots"``
    (slot_mapping) ``| "page_table"`` (kv_indptr, kv_indices, batch_indices,
    kv_positions); rounding ``"fused" | "unfused_parity" | "ascend_triton" |
    "cann"`` (python/README.md, "Rounding modes"); backend ``"auto" |
    "reference" | "cpu" | "cuda"``. Defaults are SPEC.md's (eps 1e-6, theta
    10000, neox, fused rounding).
    """

    num_q_heads: int
    num_kv_heads: int
    head_dim: int
    rotary_dim: int = 0
    q_norm: bool = False
    k_norm: bool = False
    eps: float = 1e-6
    gamma_offset: bool = False
    rope_source: str = "none"
    rope_style: str = "neox"
    rope_theta: float = 10000.0
    rope_scaling: RopeScaling = RopeScaling()
    cache_layout: str = "none"
    k_quant: str = "none"
    v_quant: str = "none"
    rounding: str = "fused"
    backend: str = "auto"
    num_threads: int = 0
    q_quant: str = "none"
    cache_addressing: str = "slots"

    def __post_init__(self):
        # each field checked against the C type of its qkvfuse_desc field
        for name, ctype in _INT_FIELDS:
            object.__setattr__(self, name, _check.integer(getattr(self, name), name, ctype))
        for name in ("q_norm", "k_norm", "gamma_offset"):
            object.__setattr__(self, name, _check.flag(getattr(self, name), name))
        object.__setattr__(self, "eps", _check.real(self.eps, "eps", "float"))
        object.__setattr__(self, "rope_theta", _check.real(self.rope_theta, "rope_theta"))
        object.__setattr__(self, "rope_scaling", RopeScaling.from_config(self.rope_scaling))
        _choice("rope_source", self.rope_source, _capi.ROPE_SOURCE)
        _choice("rope_style", self.rope_style, _capi.ROPE_STYLE)
        _choice("cache_layout", self.cache_layout, _capi.CACHE_LAYOUT)
        _choice("k_quant", self.k_quant, _capi.QUANT)
        _choice("v_quant", self.v_quant, _capi.QUANT)
        _choice("rounding", self.rounding, _capi.ROUNDING)
        _choice("backend", self.backend, _capi.BACKEND)
        _choice("q_quant", self.q_quant, _capi.Q_QUANT)
        _check.string(self.cache_addressing, "cache_addressing", tuple(_capi.CACHE_ADDRESSING))

    def to_c(self, device_type=_capi.DEVICE_CPU, device_id=0) -> _capi.Desc:
        d = _capi.desc_init()
        d.num_q_heads, d.num_kv_heads = self.num_q_heads, self.num_kv_heads
        d.head_dim, d.rotary_dim = self.head_dim, self.rotary_dim
        d.device_type, d.device_id = device_type, device_id
        d.backend = _capi.BACKEND[self.backend]
        d.num_threads = self.num_threads
        d.q_norm, d.k_norm, d.gamma_offset = int(self.q_norm), int(self.k_norm), int(self.gamma_offset)
        d.eps = self.eps
        d.rope_source = _capi.ROPE_SOURCE[self.rope_source]
        d.rope_style = _capi.ROPE_STYLE[self.rope_style]
        d.rope_theta = self.rope_theta
        d.rope_scaling = self.rope_scaling.to_c()
        d.cache_layout = _capi.CACHE_LAYOUT[self.cache_layout]
        d.k_quant, d.v_quant = _capi.QUANT[self.k_quant], _capi.QUANT[self.v_quant]
        d.rounding = _capi.ROUNDING[self.rounding]
        d.q_quant = _capi.Q_QUANT[self.q_quant]
        d.cache_addressing = _capi.CACHE_ADDRESSING[self.cache_addressing]
        return d

    def to_string(self) -> str:
        """A compact, exact text form (floats in repr, which round-trips)."""
        parts = []
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if isinstance(v, RopeScaling):
                for g, gv in zip(v._fields, v):
                    if gv != RopeScaling._field_defaults[g]:
                        parts.append("rope_scaling.%s=%s" % (g, _fmt(gv)))
            elif v != f.default:
                parts.append("%s=%s" % (f.name, _fmt(v)))
        return ";".join(parts)


_INT_FIELDS = (("num_q_heads", "int64_t"), ("num_kv_heads", "int64_t"), ("head_dim", "int64_t"),
               ("rotary_dim", "int64_t"), ("num_threads", "int32_t"))


def _fmt(v):
    if isinstance(v, bool):
        return "1" if v else "0"
    if isinstance(v, float):
        return repr(v)
    return str(v)
