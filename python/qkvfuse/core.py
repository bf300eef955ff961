# SPDX-License-Identifier: Apache-2.0
"""The core operator: Config -> Plan -> run, and the one-call ``run``.

``Plan`` is ``qkvfuse_plan``: a validated Config on one device, reusable from
any thread. ``Plan.run`` writes into the outputs it is given (nothing is
allocated; on CUDA it is one kernel launch on the current stream).
:func:`run` is the convenient form: it infers the configuration from the
tensors it is given, allocates the outputs, caches plans, and with PyTorch
tensors goes through the ``torch.ops.qkvfuse`` custom operators (so that
``torch.compile`` and CUDA graphs see it).
"""
from __future__ import annotations

import collections
import ctypes
import functools
import threading
from typing import NamedTuple, Optional

from . import _arrays, _binding, _capi, _check, _npfast, errors
from .config import Config, RopeScaling

TENSOR_ARGS = _capi.ARG_TENSORS + _capi.ARG_TENSORS_V2
OUTPUTS = ("q_out", "k_out", "v_out", "k_cache", "v_cache")


class Outputs(NamedTuple):
    """What :func:`run` returns: q always; k and v (after RoPE, before
    quantization) when asked for, else None."""

    q: object
    k: Optional[object]
    v: Optional[object]


def _device_tuple(device):
    """(qkvfuse_device_type, device_id) of "cpu", "cuda", "cuda:N", a
    torch.device, None (cpu) or such a tuple; device_id within int32_t."""
    if device is None:
        return _capi.DEVICE_CPU, 0
    if isinstance(device, tuple):
        if len(device) != 2 or device[0] not in (_capi.DEVICE_CPU, _capi.DEVICE_CUDA) \
                or isinstance(device[0], bool):
            raise _bad_device(device)
        dev_id = _check.integer(device[1], "device id", "int32_t")
        if dev_id < 0 or (device[0] == _capi.DEVICE_CPU and dev_id != 0):
            raise _bad_device(device)
        return int(device[0]), dev_id
    s = str(device) if _arrays.is_torch_device(device) else device
    if isinstance(s, str):
        if s == "cpu":
            return _capi.DEVICE_CPU, 0
        if s == "cuda":
            return _capi.DEVICE_CUDA, 0
        if s.startswith("cuda:") and s[5:].isdigit() and s[5:].isascii():
            return _capi.DEVICE_CUDA, _check.integer(int(s[5:]), "device id", "int32_t")
    raise _bad_device(device)


def _bad_device(device):
    return errors.InvalidValueError(errors.QKVFUSE_ERROR_INVALID_VALUE,
                                    "device: expected 'cpu', 'cuda' or 'cuda:N'; got %r" % (device,))


def _device_key(device_tuple):
    """_check.device_key's form of a (device_type, device_id) pair."""
    return ("cpu", 0) if device_tuple[0] == _capi.DEVICE_CPU else ("cuda", device_tuple[1])


class Plan:
    """A validated configuration on one device (``qkvfuse_plan_create``).

    ``Plan(config, device="cpu")`` or ``Plan(device="cuda", num_q_heads=..., ...)``
    with the fields of :class:`Config` as keywords. Raises the library's error
    for a bad field. ``backend_name`` says which implementation runs.
    """

    def __init__(self, config: Optional[Config] = None, *, device="cpu", **fields):
        self._handle = ctypes.c_void_p()
        if config is None:
            unknown = sorted(set(fields) - set(Config.__dataclass_fields__))
            if unknown:
                raise errors.ArgumentTypeError(errors.QKVFUSE_ERROR_INVALID_VALUE,
                                               "%s: not a Config field" % ", ".join(unknown))
            missing = [f for f in ("num_q_heads", "num_kv_heads", "head_dim") if f not in fields]
            if missing:
                raise errors.ArgumentTypeError(errors.QKVFUSE_ERROR_INVALID_VALUE,
                                               "%s: required, got nothing" % ", ".join(missing))
            config = Config(**fields)
        elif not isinstance(config, Config):
            raise errors.ArgumentTypeError(errors.QKVFUSE_ERROR_INVALID_VALUE,
                                           "config: expected a qkvfuse.Config; got %s" % type(config).__name__)
        elif fields:
            raise errors.ArgumentTypeError(errors.QKVFUSE_ERROR_INVALID_VALUE,
                                           "%s: give a Config or keyword fields, not both" % ", ".join(sorted(fields)))
        self.config = config
        self.device = _device_tuple(device)
        desc = config.to_c(*self.device)
        L = _capi.lib()
        self._lib = L
        _capi.check(L.qkvfuse_plan_create(ctypes.byref(desc), ctypes.byref(self._handle)), "qkvfuse_plan_create")

    @property
    def backend_name(self) -> str:
        return self._lib.qkvfuse_plan_backend_name(self._handle).decode()

    def close(self):
        if self._handle:
            self._lib.qkvfuse_plan_destroy(self._handle)
            self._handle = ctypes.c_void_p()

    def __del__(self):
        try:
            self.close()
        except Exception:  # interpreter shutdown
            pass

    def __repr__(self):
        return "Plan(%s, device=%s, backend=%s)" % (self.config.to_string(), self.device, self.backend_name)

    def run(self, qkv, *, q_out, stream=None, error_flags=None, **tensors):
        """Run once, writing into the given outputs (``qkvfuse_run``).

        Tensors (NumPy arrays, TypedArrays or torch tensors, all on the plan's
        device) by their qkvfuse_args names: qkv [T, H] or [B, S, H];
        weight_scale [H], act_scale [T], bias [H] (int32 qkv); q_gamma,
        k_gamma, q_beta, k_beta [D]; positions [T]; cos_sin_cache [max_pos, R];
        cos, sin [T, R]; slot_mapping [T] ([B] for the contiguous layout);
        k_scale, v_scale (and k_offset, v_offset) [1], [Nkv] or [Nkv, D]; q, k, v
        (separate inputs, with qkv None), q_scale [1] with a quantized q (config
        q_quant); kv_indptr, kv_indices, batch_indices, kv_positions (page-table
        addressing); outputs q_out [T, Nq*D], k_out / v_out [T, Nkv*D], k_cache / v_cache in the
        layout's shape. ``error_flags``: optional uint32 word on the device
        (data errors are OR-ed into it). ``stream``: a CUDA stream handle (int)
        or torch.cuda.Stream; default: torch's current stream for CUDA tensors.
        """
        unknown = set(tensors) - set(TENSOR_ARGS) - set(_capi.ARG_TENSORS_V2)
        if unknown:
            raise errors.ArgumentTypeError(errors.QKVFUSE_ERROR_INVALID_VALUE,
                                           "%s: not a tensor argument of qkvfuse_run" % ", ".join(sorted(unknown)))
        tensors["qkv"], tensors["q_out"] = qkv, q_out
        run_raw(self, tensors, error_flags, stream)


def _stream_handle(stream, tensors):
    if stream is not None:
        return _check.integer(getattr(stream, "cuda_stream", stream), "stream", "uintptr_t") or None
    for x in tensors.values():
        if _arrays.is_torch(x) and x.is_cuda:
            import torch
            return torch.cuda.current_stream(x.device).cuda_stream or None
    return None


def run_raw(plan: Plan, tensors: dict, error_flags=None, stream=None, device_name="the plan's device"):
    """qkvfuse_run on a dict {arg name: tensor or None}: every tensor and
    error_flags on the plan's device (``device_name`` in the message),
    described (dtype, byte order, strides) in qkvfuse_args' order, then one
    library call."""
    get = tensors.get
    tlist = [get(n) for n in TENSOR_ARGS]
    s = None if stream is None and plan.device[0] == _capi.DEVICE_CPU else _stream_handle(stream, tensors)
    status = _npfast.run(plan, tlist, error_flags, s)
    if status is not None:
        _capi.check(status, "qkvfuse_run")
        return
    _check.same_device(dict({n: get(n) for n in TENSOR_ARGS}, error_flags=error_flags), _device_key(plan.device),
                       device_name)
    keep = []
    ptrs = []
    for name in TENSOR_ARGS:
        x = get(name)
        if x is None:
            ptrs.append(None)
        else:
            ptrs.append(ctypes.pointer(_arrays.describe(x, name, writable=name in OUTPUTS, keep=keep)))
    n1 = len(_capi.ARG_TENSORS)
    args = _capi.Args(_ARGS_SIZE, _capi.ARGS_VERSION, *ptrs[:n1], _arrays.flags_pointer(error_flags), *ptrs[n1:])
    _capi.check(plan._lib.qkvfuse_run(plan._handle, ctypes.byref(args), s), "qkvfuse_run")


_ARGS_SIZE = ctypes.sizeof(_capi.Args)

# ---- plan cache -------------------------------------------------------------------------

_PLAN_CACHE_SIZE = 64
_plans: "collections.OrderedDict" = collections.OrderedDict()
_plans_lock = threading.Lock()


def get_plan(config: Config, device) -> Plan:
    """A cached Plan for (config, device); plans are immutable and thread-safe."""
    key = (config, _device_tuple(device))
    with _plans_lock:
        plan = _plans.get(key)
        if plan is not None:
            _plans.move_to_end(key)
            return plan
    plan = Plan(config, device=key[1])
    with _plans_lock:
        _plans[key] = plan
        while len(_plans) > _PLAN_CACHE_SIZE:
            _plans.popitem(last=False)
    return plan


# ---- the one-call form ------------------------------------------------------------------

# run()'s configuration arguments, in the order the torch operator takes them.
OPTION_NAMES = ("num_q_heads", "num_kv_heads", "head_dim", "rotary_dim", "rope", "rope_style", "rope_theta",
                "rope_scaling_type", "rope_scaling_params", "eps", "gamma_offset", "cache_layout", "k_quant",
                "v_quant", "rounding", "backend", "num_threads", "q_quant")
# rope_scaling=None as the operator's plain values
NO_SCALING = ("none", [1.0, 0.0, 1.0, 4.0, 32.0, 1.0, 1.0, 1.0])


def scaling_args(rope_scaling):
    """(type, [8 floats]) of a RopeScaling, a config dict or None: plain values
    for the torch operator's schema (original_max_position must survive the
    float exactly)."""
    rs = RopeScaling.from_config(rope_scaling)
    if float(rs.original_max_position) != rs.original_max_position:
        raise errors.InvalidValueError(
            errors.QKVFUSE_ERROR_INVALID_VALUE,
            "rope_scaling.original_max_position: %d is not exactly representable as a double (|value| > 2^53)"
            % rs.original_max_position)
    return rs.type, [float(v) for v in rs[1:]]


def scaling_from_args(sc_type, params) -> RopeScaling:
    """The RopeScaling of scaling_args' (type, [8 floats]) form."""
    if len(params) != 8:
        raise errors.InvalidValueError(errors.QKVFUSE_ERROR_INVALID_VALUE,
                                       "rope_scaling_params: expected the 8 numbers after a RopeScaling's type; got %d"
                                       % len(params))
    omp = _check.real(params[1], "rope_scaling.original_max_position")
    if not omp.is_integer():
        raise errors.InvalidValueError(errors.QKVFUSE_ERROR_INVALID_VALUE,
                                       "rope_scaling.original_max_position: must be an integer; got %r" % omp)
    return RopeScaling(sc_type, params[0], int(omp), *params[2:]).checked()


def run_options(num_q_heads, num_kv_heads, head_dim, rotary_dim, rope, rope_style, rope_theta, rope_scaling, eps,
                gamma_offset, cache_layout, k_quant, v_quant, rounding, backend, num_threads, q_quant="none"):
    """run()'s configuration arguments checked (each against the C type it
    becomes), in OPTION_NAMES order, as plain values for the operator schema
    (rotary_dim None: -1, inferred)."""
    sc_type, sc_params = scaling_args(rope_scaling)
    if rotary_dim is None:
        rd = -1
    else:
        rd = _check.integer(rotary_dim, "rotary_dim")
        if rd < 0:
            raise errors.InvalidValueError(errors.QKVFUSE_ERROR_INVALID_VALUE,
                                           "rotary_dim: must be >= 0 (None: the table's width, else head_dim); got %d"
                                           % rd)
    return (_check.integer(num_q_heads, "num_q_heads"), _check.integer(num_kv_heads, "num_kv_heads"),
            _check.integer(head_dim, "head_dim"), rd, _check.string(rope, "rope", _ROPE_CHOICES),
            _check.string(rope_style, "rope_style", _STYLE_CHOICES), _check.real(rope_theta, "rope_theta"), sc_type,
            sc_params, _check.real(eps, "eps", "float"), _check.flag(gamma_offset, "gamma_offset"),
            _check.string(cache_layout, "cache_layout", _LAYOUT_CHOICES),
            _check.string(k_quant, "k_quant", _QUANT_CHOICES), _check.string(v_quant, "v_quant", _QUANT_CHOICES),
            _check.string(rounding, "rounding", _ROUNDING_CHOICES), _check.string(backend, "backend", _BACKEND_CHOICES),
            _check.integer(num_threads, "num_threads", "int32_t"), _check.string(q_quant, "q_quant", Q_QUANT_CHOICES))


def check_kernel_options(options):
    """The operator kernels' own checks of run()'s options (OPTION_NAMES
    order; the schema already made each value its type), in the order the
    compiled extension makes them, so that both bindings name the same
    argument first."""
    (nq, nkv, hd, rd, rope, style, theta, sc_type, sc_params, eps, goff, layout, kq, vq, rounding, backend,
     threads, q_quant) = options
    scaling_from_args(sc_type, sc_params)
    _check.string(rope, "rope", _ROPE_CHOICES)
    _check.string(style, "rope_style", _STYLE_CHOICES)
    _check.real(eps, "eps", "float")
    _check.string(layout, "cache_layout", _LAYOUT_CHOICES)
    _check.string(kq, "k_quant", _QUANT_CHOICES)
    _check.string(vq, "v_quant", _QUANT_CHOICES)
    _check.string(rounding, "rounding", _ROUNDING_CHOICES)
    _check.string(backend, "backend", _BACKEND_CHOICES)
    _check.integer(threads, "num_threads", "int32_t")
    _check.string(q_quant, "q_quant", Q_QUANT_CHOICES)


_ROPE_CHOICES = ("auto",) + tuple(_capi.ROPE_SOURCE)
_STYLE_CHOICES = tuple(_capi.ROPE_STYLE)
_LAYOUT_CHOICES = ("auto",) + tuple(_capi.CACHE_LAYOUT)
_QUANT_CHOICES = ("auto",) + tuple(_capi.QUANT)
_ROUNDING_CHOICES = tuple(_capi.ROUNDING)
_BACKEND_CHOICES = tuple(_capi.BACKEND)
Q_QUANT_CHOICES = tuple(_capi.Q_QUANT)


def heads_split(shape, num_q_heads, head_dim):
    """Whether a separate q of this shape is [..., Nq, D] (its last dim
    split), by the library's rule: [T, Nq*D] / [B, S, Nq*D] first."""
    nd = len(shape)
    if 2 <= nd <= 3 and shape[-1] == num_q_heads * head_dim:
        return False
    return 3 <= nd <= 4 and shape[-1] == head_dim and shape[-2] == num_q_heads


def out_shapes(x, name, num_q_heads, num_kv_heads, head_dim):
    """The shapes of the q and k/v outputs the binding allocates: the input's
    token dims, then Nq*D (Nkv*D), or Nq, D (Nkv, D) after a q of that form."""
    shape = tuple(x.shape)  # torch's symbolic sizes stay symbolic under torch.compile
    if name != "qkv" and heads_split(shape, num_q_heads, head_dim):
        return shape[:-2] + (num_q_heads, head_dim), shape[:-2] + (num_kv_heads, head_dim)
    return shape[:-1] + (num_q_heads * head_dim,), shape[:-1] + (num_kv_heads * head_dim,)


def check_out_widths(x, num_q_heads, num_kv_heads, head_dim, name="qkv"):
    """Before the binding allocates q/k/v outputs from the head counts: they
    must give the input's row width, as the library will require, so that no
    allocation is larger than the input (x: qkv, or the separate q)."""
    if name != "qkv" and heads_split(tuple(x.shape), num_q_heads, head_dim):
        return
    if name == "qkv":
        _check.output_sizes((("num_q_heads", num_q_heads), ("num_kv_heads", num_kv_heads), ("head_dim", head_dim)),
                            "(num_q_heads + 2 * num_kv_heads) * head_dim",
                            (num_q_heads + 2 * num_kv_heads) * head_dim, x, "qkv")
    else:
        _check.output_sizes((("num_q_heads", num_q_heads), ("head_dim", head_dim)), "num_q_heads * head_dim",
                            num_q_heads * head_dim, x, name)


def _quant_for(cache_dtype, has_offset, given):
    if given != "auto":
        return given
    if cache_dtype == "int8":
        return "int8_asym" if has_offset else "int8_sym"
    if cache_dtype == "float8_e4m3fn":
        return "fp8_e4m3"
    if cache_dtype == "float8_e5m2":
        return "fp8_e5m2"
    return "none"


def tensor_facts(ins: dict, k_cache, v_cache):
    """What the configuration inference needs to know about the tensors (hashable)."""
    def width(name):
        x = ins.get(name)
        return -1 if x is None else int(_check.last_dim(x, name))

    def dt(x, name):
        return "" if x is None else _arrays.dtype_of(x, name)

    return (ins.get("q_gamma") is not None, ins.get("k_gamma") is not None, width("cos_sin_cache"), width("cos"),
            ins.get("positions") is not None, dt(k_cache, "k_cache"), ins.get("k_offset") is not None,
            dt(v_cache, "v_cache"), ins.get("v_offset") is not None, page_table_given(ins))


def page_table_given(ins: dict) -> bool:
    """Page-table addressing: any of its tensors given (the library names a missing one)."""
    return any(ins.get(n) is not None for n in PAGE_TABLE)


PAGE_TABLE = ("kv_indptr", "kv_indices", "batch_indices", "kv_positions")


@functools.lru_cache(maxsize=1024)
def resolve_config(options: tuple, facts: tuple) -> Config:
    """The Config for run()'s options (OPTION_NAMES order; rotary_dim -1, rope
    / cache_layout / k_quant / v_quant "auto" mean: infer) and tensor facts."""
    (nq, nkv, hd, rd, rope, style, theta, sc_type, sc_params, eps, goff, layout, kq, vq, rounding, backend,
     threads, q_quant) = options
    q_norm, k_norm, csc_w, cos_w, has_pos, kc_dt, k_off, vc_dt, v_off, page_table = facts
    if rope == "auto":
        rope = ("cos_sin_cache" if csc_w >= 0 else "cos_sin" if cos_w >= 0 else "computed" if has_pos else "none")
    if rd < 0:
        rd = {"none": 0, "cos_sin_cache": csc_w, "cos_sin": cos_w}.get(rope, hd)
        if rd < 0:
            rd = hd
    if layout == "auto":
        layout = "paged" if kc_dt else "none"
    scaling = scaling_from_args(sc_type, sc_params)
    return Config(num_q_heads=nq, num_kv_heads=nkv, head_dim=hd, rotary_dim=rd, q_norm=q_norm, k_norm=k_norm,
                  eps=eps, gamma_offset=goff, rope_source=rope, rope_style=style, rope_theta=theta,
                  rope_scaling=scaling, cache_layout=layout, k_quant=_quant_for(kc_dt, k_off, kq),
                  v_quant=_quant_for(vc_dt, v_off, vq), rounding=rounding, backend=backend, num_threads=threads,
                  q_quant=q_quant, cache_addressing="page_table" if page_table else "slots")


def default_out_dtype(qkv, cos_sin_cache=None, cos=None):
    """SPEC's output dtype: the input's for float input; for int32 input the
    RoPE table's dtype, or float32 without a table."""
    dt = _arrays.dtype_of(qkv, "qkv")
    if dt != "int32":
        return dt
    if cos is not None:
        return _arrays.dtype_of(cos, "cos")
    return _arrays.dtype_of(cos_sin_cache, "cos_sin_cache") if cos_sin_cache is not None else "float32"


def run(qkv=None, *, num_q_heads: int, num_kv_heads: int, head_dim: int,
        weight_scale=None, act_scale=None, bias=None,
        q_gamma=None, k_gamma=None, q_beta=None, k_beta=None, eps: float = 1e-6, gamma_offset: bool = False,
        positions=None, cos_sin_cache=None, cos=None, sin=None, rope: str = "auto",
        rotary_dim: Optional[int] = None, rope_style: str = "neox", rope_theta: float = 10000.0,
        rope_scaling=None,
        k_cache=None, v_cache=None, slot_mapping=None, cache_layout: str = "auto",
        k_scale=None, v_scale=None, k_offset=None, v_offset=None, k_quant: str = "auto", v_quant: str = "auto",
        q_out=None, k_out=None, v_out=None, out_dtype=None, return_k: bool = False, return_v: bool = False,
        rounding: str = "fused", backend: str = "auto", num_threads: int = 0, error_flags=None,
        q=None, k=None, v=None, q_scale=None, q_quant: str = "none", kv_indptr=None, kv_indices=None,
        batch_indices=None, kv_positions=None) -> Outputs:
    """The fused attention prologue in one call (the core operator, SPEC.md).

    Shapes (T tokens, Nq/Nkv heads, D = head_dim, R rotary dims, H = (Nq+2Nkv)*D):

    - ``qkv`` [T, H] or [B, S, H]: float32/float16/bfloat16, or int32 with
      ``weight_scale`` [H] (and optional ``act_scale`` [T], ``bias`` [H]).
      Or, instead of one packed qkv, separate ``q`` [T, Nq*D], ``k`` and
      ``v`` [T, Nkv*D] (one dtype, each with its own row stride; views into
      a packed buffer are fine; ``v`` may be omitted when nothing reads it);
      each may also be [..., N, D] (as models hold them), and the outputs
      this function allocates then take that form too.
    - RMSNorm per head, on when its gamma is given: ``q_gamma`` / ``k_gamma``
      [D], optional ``q_beta`` / ``k_beta`` [D]; ``eps`` (1e-6);
      ``gamma_offset`` uses (1 + gamma).
    - RoPE, its source inferred unless ``rope`` says (``"none"``,
      ``"cos_sin_cache"``, ``"cos_sin"``, ``"computed"``): ``cos_sin_cache``
      [max_pos, R] + ``positions`` [T] (vLLM); ``cos``, ``sin`` [T, R] (CANN);
      or ``positions`` alone: computed from ``rope_theta`` (10000) and
      ``rope_scaling`` (a :class:`RopeScaling` or a model config's dict).
      ``rotary_dim`` defaults to the table's width, else D; ``rope_style``
      ``"neox"`` (default) or ``"interleaved"``.
    - KV cache: ``k_cache``, ``v_cache`` in ``cache_layout`` (default
      ``"paged"`` [blocks, block_size, Nkv, D]; ``"paged_hnd"``, ``"nz"``,
      ``"contiguous"``) written in place at ``slot_mapping`` [T] (-1 skips a
      token), or, when the page table is given instead (paged, paged_hnd,
      nz: FlashInfer's paged append), token t of sequence ``batch_indices[t]``
      (-1 skips) at position p = ``kv_positions[t]`` goes to block
      ``kv_indices[kv_indptr[b] + p // block_size]``, row p % block_size
      (``kv_indptr`` [batch + 1], ``kv_indices`` the blocks of every sequence,
      ``batch_indices`` and ``kv_positions`` [T]; int32/int64). Quantization
      follows the cache dtype unless ``k_quant`` / ``v_quant`` say (int8:
      ``"int8_sym"``, or ``"int8_asym"`` when ``k_offset``/``v_offset`` are
      given; float8_e4m3fn: ``"fp8_e4m3"``; float8_e5m2: ``"fp8_e5m2"``), with
      ``k_scale``/``v_scale`` float32 [1] (per tensor), [Nkv] (per kv head) or
      [Nkv, D] (per channel).
    - Outputs: ``q`` [.., Nq*D] always; k / v [.., Nkv*D] (after RoPE, before
      quantization) when ``return_k`` / ``return_v`` or when ``k_out`` /
      ``v_out`` are given. ``q_out``/``k_out`` may be the q/k columns of qkv
      (in place). ``out_dtype``: default the input's dtype (int32 input: the
      RoPE table's, or float32).
    - ``q_quant``: ``"none"`` (default), ``"fp8_e4m3"`` or ``"fp8_e5m2"``:
      q_out in that fp8 dtype holding q / ``q_scale`` ([1] float32); k and v
      outputs keep ``out_dtype``.
    - ``rounding="unfused_parity"`` rounds to the output dtype after dequant,
      norm (and before + beta) and RoPE, like a chain of separate ops;
      ``"ascend_triton"`` and ``"cann"`` reproduce the rounding order of the
      Ascend kernels (CPU only; see python/README.md, "Rounding modes").
    - ``error_flags``: optional uint32 word on the tensors' device; on CUDA,
      data errors (bad position/slot/scale) are only reported there.
    - ``backend``: ``"auto"``, ``"reference"``, ``"cpu"`` or ``"cuda"``;
      ``num_threads``: CPU threads (0: the library's default).

    With torch tensors (CPU or CUDA) this goes through ``torch.ops.qkvfuse.run``
    (or ``run_out`` when outputs are given), on the current CUDA stream.
    Returns ``Outputs(q, k, v)``; ``k``/``v`` are None unless asked for.
    """
    ops = _binding.OPS
    fast_key = None
    # The torch path without outputs given: straight to the operator, whose
    # kernel checks everything; any failure (a value the schema refuses
    # included) goes the checked way below, which names the argument.
    # every option a plain value of its type: what the fast paths take as given
    plain = (rope_scaling is None and type(num_q_heads) is int
            and type(num_kv_heads) is int and type(head_dim) is int
            and (rotary_dim is None or type(rotary_dim) is int and rotary_dim >= 0) and type(rope) is str
            and type(rope_style) is str and type(rope_theta) is float and type(eps) is float
            and type(gamma_offset) is bool and type(cache_layout) is str and type(k_quant) is str
            and type(v_quant) is str and type(rounding) is str and type(backend) is str and type(num_threads) is int
            and type(return_k) is bool and type(return_v) is bool and type(q_quant) is str)
    if (plain and ops is not None and isinstance(qkv if qkv is not None else q, _TorchTensor) and q_out is None
            and k_out is None and v_out is None and (out_dtype is None or isinstance(out_dtype, _TorchDtype))):
        try:
            o = ops.run(qkv, weight_scale, act_scale, bias, q_gamma, k_gamma, q_beta, k_beta, positions,
                        cos_sin_cache, cos, sin, slot_mapping, k_scale, v_scale, k_offset, v_offset, k_cache, v_cache,
                        error_flags, num_q_heads, num_kv_heads, head_dim, -1 if rotary_dim is None else rotary_dim,
                        rope, rope_style, rope_theta, "none", _NO_SCALING_PARAMS, eps, gamma_offset, cache_layout,
                        k_quant, v_quant, rounding, backend, num_threads, out_dtype, return_k, return_v, q, k, v,
                        q_scale, q_quant, kv_indptr, kv_indices, batch_indices, kv_positions)
            return Outputs(o[0], o[1] if return_k else None, o[2] if return_v else None)
        except Exception:  # noqa: BLE001 - reported by the checked path
            pass
    elif (plain and type(qkv if qkv is not None else q) in _NP_TYPES
            and (out_dtype is None or type(out_dtype) is str and out_dtype in _capi.DTYPE)):
        key = (num_q_heads, num_kv_heads, head_dim, -1 if rotary_dim is None else rotary_dim, rope, rope_style,
               rope_theta, eps, gamma_offset, cache_layout, k_quant, v_quant, rounding, backend, num_threads, q_quant,
               q_gamma is not None, k_gamma is not None, _np_width(cos_sin_cache), _np_width(cos),
               positions is not None, _npfast.dtype_name(k_cache) if k_cache is not None else "",
               k_offset is not None, _npfast.dtype_name(v_cache) if v_cache is not None else "",
               v_offset is not None, kv_indptr is not None or kv_indices is not None or batch_indices is not None
               or kv_positions is not None)
        plan = _np_plans.get(key)
        main = qkv if qkv is not None else q
        dt = out_dtype if out_dtype is not None else _np_default_dtype(main, cos_sin_cache, cos)
        width = main.shape[-1] if main.ndim else -1
        if (plan is not None and dt is not None and num_q_heads >= 0 and num_kv_heads >= 0 and head_dim >= 0
                and width == (num_q_heads * head_dim if qkv is None else (num_q_heads + 2 * num_kv_heads) * head_dim)
                and (q_out is None or type(q_out) in _NP_TYPES) and (k_out is None or type(k_out) in _NP_TYPES)
                and (v_out is None or type(v_out) in _NP_TYPES)):
            q_shape, kv_shape = out_shapes(main, "qkv" if qkv is not None else "q", num_q_heads, num_kv_heads,
                                           head_dim)
            if q_out is None:
                q_out = _arrays.empty_like_kind(main, q_shape, _Q_DTYPES.get(q_quant, dt), "q_out")
            if k_out is None and return_k:
                k_out = _arrays.empty_like_kind(main, kv_shape, dt, "k_out")
            if v_out is None and return_v:
                v_out = _arrays.empty_like_kind(main, kv_shape, dt, "v_out")
            status = _npfast.run(plan, (qkv, weight_scale, act_scale, bias, q_gamma, k_gamma, q_beta, k_beta,
                                        positions, cos_sin_cache, cos, sin, slot_mapping, k_scale, v_scale, k_offset,
                                        v_offset, q_out, k_out, v_out, k_cache, v_cache, q, k, v, q_scale, kv_indptr,
                                        kv_indices, batch_indices, kv_positions),
                                 error_flags)
            if status == 0:
                return Outputs(q_out, k_out, v_out)
        elif plan is None and None not in key:
            fast_key = key  # the plan below is remembered under it
    options = run_options(num_q_heads, num_kv_heads, head_dim, rotary_dim, rope, rope_style, rope_theta,
                          rope_scaling, eps, gamma_offset, cache_layout, k_quant, v_quant, rounding, backend,
                          num_threads, q_quant)
    return_k, return_v = _check.flag(return_k, "return_k"), _check.flag(return_v, "return_v")
    ins = dict(qkv=qkv, weight_scale=weight_scale, act_scale=act_scale, bias=bias, q_gamma=q_gamma,
               k_gamma=k_gamma, q_beta=q_beta, k_beta=k_beta, positions=positions, cos_sin_cache=cos_sin_cache,
               cos=cos, sin=sin, slot_mapping=slot_mapping, k_scale=k_scale, v_scale=v_scale, k_offset=k_offset,
               v_offset=v_offset, q=q, k=k, v=v, q_scale=q_scale, kv_indptr=kv_indptr, kv_indices=kv_indices,
               batch_indices=batch_indices, kv_positions=kv_positions)
    outs = dict(q_out=q_out, k_out=k_out, v_out=v_out, k_cache=k_cache, v_cache=v_cache)
    if qkv is None and q is None:
        raise errors.NullPointerError(errors.QKVFUSE_ERROR_NULL_POINTER, "qkv: required (or q and k); got None")
    main_name = "qkv" if qkv is not None else "q"
    main = ins[main_name]
    for name, x in list(ins.items()) + list(outs.items()):
        _arrays.check_tensor(x, name)
    if _arrays.is_torch(main):
        _check.torch_tensors(main_name, ins, outs, {"error_flags": error_flags})
        from . import torch_ops
        return torch_ops.run(options, ins, k_cache, v_cache, q_out, k_out, v_out, out_dtype, return_k, return_v,
                             error_flags)

    dt = (_arrays.dtype_name(out_dtype, "out_dtype") if out_dtype is not None
          else default_out_dtype(main, cos_sin_cache, cos))
    q_dt = _Q_DTYPES.get(options[-1], dt)
    # the plan first: a bad configuration is the library's error, before anything is allocated
    plan = get_plan(config_for(options, ins, k_cache, v_cache), _arrays.device_of(main))
    if fast_key is not None:
        if len(_np_plans) >= _PLAN_CACHE_SIZE:
            _np_plans.clear()
        _np_plans[fast_key] = plan
    nq, nkv, hd = options[0], options[1], options[2]
    if q_out is None or (k_out is None and return_k) or (v_out is None and return_v):
        check_out_widths(main, nq, nkv, hd, main_name)
    q_shape, kv_shape = out_shapes(main, main_name, nq, nkv, hd)
    if q_out is None:
        q_out = _arrays.empty_like_kind(main, q_shape, q_dt, "q_out")
    if k_out is None and return_k:
        k_out = _arrays.empty_like_kind(main, kv_shape, dt, "k_out")
    if v_out is None and return_v:
        v_out = _arrays.empty_like_kind(main, kv_shape, dt, "v_out")
    run_raw(plan, dict(ins, q_out=q_out, k_out=k_out, v_out=v_out, k_cache=k_cache, v_cache=v_cache), error_flags)
    return Outputs(q_out, k_out, v_out)


_Q_DTYPES = {"fp8_e4m3": "float8_e4m3fn", "fp8_e5m2": "float8_e5m2"}  # q_out's dtype under q_quant
_NP_TYPES = (_arrays.np.ndarray, _arrays.TypedArray)
# run()'s NumPy path: plans by its options and the tensor facts they are resolved with (rope_scaling None)
_np_plans: dict = {}


def _np_width(x):
    """The last dim of an array (-1: absent; None: a 0-d array, for the general path to name)."""
    if x is None:
        return -1
    return x.shape[-1] if len(x.shape) else None


def _np_default_dtype(main, cos_sin_cache, cos):
    dt = _npfast.dtype_name(main)
    if dt != "int32":
        return dt
    if cos is not None:
        return _npfast.dtype_name(cos)
    return _npfast.dtype_name(cos_sin_cache) if cos_sin_cache is not None else "float32"
_NO_SCALING_PARAMS = NO_SCALING[1]
if _arrays._torch is not None:
    _TorchTensor, _TorchDtype = _arrays._torch.Tensor, _arrays._torch.dtype
else:  # pragma: no cover - without torch nothing is a torch tensor
    _TorchTensor = _TorchDtype = type("_NoTorch", (), {})


def config_for(options, ins, k_cache, v_cache) -> Config:
    """resolve_config with hashable options (rope_scaling_params as a tuple)."""
    options = tuple(tuple(o) if isinstance(o, list) else o for o in options)
    return resolve_config(options, tensor_facts(ins, k_cache, v_cache))
