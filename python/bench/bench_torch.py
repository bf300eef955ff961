#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Time the attention prologue on a CUDA GPU, in one run: qkvfuse (through
torch.ops.qkvfuse.run) against the same chain as PyTorch eager ops and as
torch.compile of those ops (the composition of examples/), and against the
copy bandwidth of the device.

For each token count T it prints a table row: microseconds per call and
GB/s for each implementation, the copy's GB/s, qkvfuse's share of the copy
bandwidth and its speed-up over eager and compiled PyTorch. Optionally it
writes the rows as JSON and a plot of GB/s against tokens (SVG always
possible; PNG when matplotlib is installed).

bytes = every input read once (qkv, the q/k norm weights, the T cos/sin rows
used, positions, slots, scales) + every output written once (q, the T k and
v rows of the cache). GB/s = bytes / time. copy: a device-to-device copy of
bytes/2 (so its read + write traffic equals the operator's). Calls cycle
through enough copies of the per-call tensors to stream past the L2 cache.

--mode eager times Python launches back to back (what an eager engine pays,
launch overhead included); --mode graph replays a CUDA graph of the calls
(the kernels alone, as a CUDA-graph engine runs them at decode).

--mode host measures what a call costs the host, at T=1 on --device (cuda,
or cpu where there is no GPU): the time per call of back-to-back calls with
no synchronization in the loop, for qkvfuse.run with a paged fp8 cache, each
named operator, each qkvfuse.compat call (vLLM, FlashInfer, SGLang
signatures; one the library does not serve is listed as such), F.rms_norm of
one tensor and torch.add in one run, and the same core call on NumPy arrays
(the ctypes path); and the ratios to F.rms_norm that the targets are stated
in (core operator and compat calls <= 2.5x, named operators <= 2x; the NumPy
path <= 40 us on a CPU machine).
"""
import argparse
import json
import math
import os
import statistics
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "examples"))
try:
    import qkvfuse
except ImportError:
    sys.path.insert(0, os.path.join(HERE, ".."))
    import qkvfuse
import qwen3_attention_prologue as example  # noqa: E402

PRESETS = {  # name: (Nq, Nkv, D, theta)
    "qwen3-8b": (32, 8, 128, 1e6),
    "qwen3-32b": (64, 8, 128, 1e6),
    "qwen3-0.6b": (16, 8, 128, 1e6),
    "llama3-8b-qknorm": (32, 8, 128, 5e5),
}


class Problem:
    """Per-call tensors (K copies, rotated) and the layer's constants for one T."""

    def __init__(self, T, preset, dtype, cache_dtype, rotate_bytes, device="cuda"):
        Nq, Nkv, D, theta = PRESETS[preset]
        self.T, self.Nq, self.Nkv, self.D = T, Nq, Nkv, D
        H = (Nq + 2 * Nkv) * D
        es = torch.tensor([], dtype=dtype).element_size()
        ces = torch.tensor([], dtype=cache_dtype).element_size()
        quant = cache_dtype in (torch.float8_e4m3fn, torch.int8)
        self.bytes = (T * H * es + 2 * D * es + T * D * es + 2 * T * 8 + (8 if quant else 0)
                      + T * Nq * D * es + 2 * T * Nkv * D * ces)
        per_call = T * H * es + T * Nq * D * es + 2 * T * Nkv * D * ces
        self.K = max(1, min(64, math.ceil(rotate_bytes / max(per_call, 1))))
        self.rotate_bytes = self.K * per_call  # the span the calls cycle through: whole copies, 1 to 64
        g = torch.Generator(device=device).manual_seed(T)
        bs = 16
        self.blocks = math.ceil(T * self.K / bs) + 1
        self.qkv = [torch.randn(T, H, generator=g, device=device).to(dtype) for _ in range(self.K)]
        self.pos = [torch.randint(0, 32768, (T,), generator=g, device=device) for _ in range(self.K)]
        perm = torch.randperm(self.blocks * bs, generator=g, device=device)
        self.slots = [perm[i * T:(i + 1) * T].contiguous() for i in range(self.K)]
        self.qw = (1 + 0.1 * torch.randn(D, generator=g, device=device)).to(dtype)
        self.kw = (1 + 0.1 * torch.randn(D, generator=g, device=device)).to(dtype)
        self.csc = qkvfuse.build_cos_sin_cache(32768, D, theta=theta, dtype=dtype, device=device)
        self.kc = torch.zeros(self.blocks, bs, Nkv, D, dtype=cache_dtype, device=device)
        self.vc = torch.zeros_like(self.kc)
        self.scale = torch.tensor([0.05], device=device) if quant else None
        half = max(self.bytes // 2, 1)
        self.copy_src = [torch.empty(half, dtype=torch.uint8, device=device) for _ in range(self.K)]
        self.copy_dst = [torch.empty(half, dtype=torch.uint8, device=device) for _ in range(self.K)]

    def args(self, i):
        return (self.qkv[i], self.Nq, self.Nkv, self.D, self.qw, self.kw, 1e-6, self.csc, self.pos[i], self.kc,
                self.vc, self.slots[i], self.scale, self.scale)


def fused(p, i):
    return example.qkvfuse_prologue(*p.args(i), rounding="fused")


def eager(p, i):
    return example.torch_prologue(*p.args(i))


_compiled = None


def compiled(p, i):
    global _compiled
    if _compiled is None:
        _compiled = torch.compile(example.torch_prologue, dynamic=True)
    return _compiled(*p.args(i))


def copy(p, i):
    return p.copy_dst[i].copy_(p.copy_src[i])


def median_us(one_round, calls, min_time, device="cuda"):
    """Microseconds per call of ``one_round()`` (``calls`` calls): the median
    of five samples of about min_time / 5 each (CUDA events on the GPU, the
    wall clock on the CPU)."""
    cuda = device == "cuda"
    t0 = time.perf_counter()
    one_round()
    if cuda:
        torch.cuda.synchronize()
    rounds = max(1, int(min_time / 5 / max(time.perf_counter() - t0, 1e-6)))
    samples = []
    for _ in range(5):
        if cuda:
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
        else:
            t0 = time.perf_counter()
        for _ in range(rounds):
            one_round()
        if cuda:
            b.record()
            b.synchronize()
            samples.append(a.elapsed_time(b) * 1e3 / (rounds * calls))
        else:
            samples.append((time.perf_counter() - t0) * 1e6 / (rounds * calls))
    return statistics.median(samples)


def time_calls(fn, p, mode, min_time):
    """Median microseconds per call; NaN when the variant fails (reported)."""
    K = p.K
    try:
        for _ in range(3):  # warm-up (compilation, plans, allocator)
            for i in range(K):
                fn(p, i)
        torch.cuda.synchronize()
        if mode == "graph":
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                for i in range(K):
                    fn(p, i)
            torch.cuda.current_stream().wait_stream(s)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                for i in range(K):
                    fn(p, i)

            def one_round():
                graph.replay()
        else:
            def one_round():
                for i in range(K):
                    fn(p, i)
        return median_us(one_round, K, min_time)
    except Exception as e:  # keep the other columns
        print("  %s failed at T=%d: %s: %s" % (fn.__name__, p.T, type(e).__name__, str(e).splitlines()[0][:200]),
              file=sys.stderr)
        return float("nan")


def check(p):
    """qkvfuse (fused rounding) and eager agree to bf16/fp16 accuracy."""
    kc0 = p.kc.clone()
    a = fused(p, 0)
    ka = p.kc.clone()
    p.kc.copy_(kc0)
    b = eager(p, 0)
    kb = p.kc.clone()
    err = (a.float() - b.float()).abs().max().item()
    kerr = (ka.float() - kb.float()).abs().max().item()
    return err, kerr


def gbps(nbytes, us):
    return nbytes / (us * 1e3) if us == us and us > 0 else float("nan")


def svg_plot(rows, path, title):
    """GB/s against tokens (log2 axis), one line per implementation; no dependencies."""
    series = [("qkvfuse", "#d62728"), ("eager", "#1f77b4"), ("compile", "#2ca02c"), ("copy", "#7f7f7f")]
    W, Hh, L, R, Tm, B = 720, 440, 70, 150, 40, 50
    xs = [math.log2(r["tokens"]) for r in rows]
    ys = [r[k + "_gbps"] for r in rows for k, _ in series if r[k + "_gbps"] == r[k + "_gbps"]]
    xmin, xmax = min(xs), max(xs) if max(xs) > min(xs) else min(xs) + 1
    ymax = max(ys) * 1.1 if ys else 1
    X = lambda x: L + (x - xmin) / (xmax - xmin) * (W - L - R)  # noqa: E731
    Y = lambda y: Tm + (1 - y / ymax) * (Hh - Tm - B)  # noqa: E731
    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" '
           'font-size="12">' % (W, Hh), '<rect width="100%" height="100%" fill="white"/>',
           '<text x="%d" y="22" font-size="14">%s</text>' % (L, title)]
    for k in range(6):
        y = ymax * k / 5
        out.append('<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#ddd"/>' % (L, W - R, Y(y), Y(y)))
        out.append('<text x="%d" y="%.1f" text-anchor="end">%.0f</text>' % (L - 6, Y(y) + 4, y))
    for r, x in zip(rows, xs):
        out.append('<text x="%.1f" y="%d" text-anchor="middle">%d</text>' % (X(x), Hh - B + 18, r["tokens"]))
    out.append('<text x="%d" y="%d" text-anchor="middle">tokens</text>' % ((L + W - R) // 2, Hh - 12))
    out.append('<text x="16" y="%d" transform="rotate(-90 16 %d)" text-anchor="middle">GB/s</text>'
               % ((Tm + Hh - B) // 2, (Tm + Hh - B) // 2))
    for n, (k, color) in enumerate(series):
        pts = [(X(x), Y(r[k + "_gbps"])) for r, x in zip(rows, xs) if r[k + "_gbps"] == r[k + "_gbps"]]
        if pts:
            out.append('<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>'
                       % (color, " ".join("%.1f,%.1f" % q for q in pts)))
            out += ['<circle cx="%.1f" cy="%.1f" r="3" fill="%s"/>' % (a, b, color) for a, b in pts]
        ly = Tm + 10 + 20 * n
        out.append('<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="%s" stroke-width="3"/>'
                   % (W - R + 15, W - R + 40, ly, ly, color))
        out.append('<text x="%d" y="%d">%s</text>' % (W - R + 46, ly + 4, k))
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out))


def png_plot(rows, path, title):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("(no matplotlib: PNG not written; use --svg)", file=sys.stderr)
        return False
    fig, ax = plt.subplots(figsize=(7.2, 4.4))
    for k, c in (("qkvfuse", "C3"), ("eager", "C0"), ("compile", "C2"), ("copy", "C7")):
        ax.plot([r["tokens"] for r in rows], [r[k + "_gbps"] for r in rows], "o-", color=c, label=k)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("tokens")
    ax.set_ylabel("GB/s")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return True


def host_costs(device, min_time, repeats=7):
    """{name: median microseconds per call} of the host-cost mode (see the module docstring)."""
    import numpy as np
    import torch.nn.functional as F
    from qkvfuse import compat
    Nq, Nkv, D, theta = PRESETS["qwen3-8b"]
    H = (Nq + 2 * Nkv) * D
    g = torch.Generator().manual_seed(0)
    dev = torch.device(device)

    def t(x):
        return x.to(dev)
    qkv = t(torch.randn(1, H, generator=g).bfloat16())
    qw, kw = t(torch.ones(D).bfloat16()), t(torch.ones(D).bfloat16())
    csc = qkvfuse.build_cos_sin_cache(4096, D, theta=theta, dtype=torch.bfloat16, device=dev)
    pos, slots = t(torch.tensor([17])), t(torch.tensor([5]))
    kc = t(torch.zeros(8, 16, Nkv, D, dtype=torch.float8_e4m3fn))
    vc = torch.zeros_like(kc)
    scale = t(torch.tensor([0.05]))
    cos, sin = t(torch.randn(1, D, generator=g).bfloat16()), t(torch.randn(1, D, generator=g).bfloat16())
    nz_k = t(torch.zeros(8, Nkv * D // 32, 16, 32, dtype=torch.int8))
    nz_v = torch.zeros_like(nz_k)
    chan = t(torch.full((Nkv, D), 0.05))
    x32 = t(torch.randint(-3000, 3000, (1, 1, H), generator=g, dtype=torch.int32))
    cos4, sin4 = cos.reshape(1, 1, 1, D), sin.reshape(1, 1, 1, D)
    ck, cv = t(torch.zeros(1, 16, Nkv, D, dtype=torch.int8)), t(torch.zeros(1, 16, Nkv, D, dtype=torch.int8))
    wscale, start = t(torch.full((H,), 1e-3)), t(torch.tensor([3], dtype=torch.int32))
    xn, a, b = t(torch.randn(1, Nq, D, generator=g).bfloat16()), t(torch.randn(1, Nq * D)), t(torch.randn(1, Nq * D))
    # the NumPy path: float32 qkv, float8 caches as raw bits
    nqkv = qkv.float().cpu().numpy()
    ng = np.ones(D, np.float32)
    ncsc = qkvfuse.build_cos_sin_cache(4096, D, theta=theta)
    npos, nslots, nscale = np.array([17]), np.array([5]), np.array([0.05], np.float32)
    nkc = qkvfuse.TypedArray.zeros((8, 16, Nkv, D), "float8_e4m3fn")
    nvc = qkvfuse.TypedArray.zeros((8, 16, Nkv, D), "float8_e4m3fn")
    # compat: the peers' arguments (vLLM on qkv in place, FlashInfer/SGLang on its q/k column views)
    cqkv = qkv.clone()
    q_cols, k_cols, v_cols = cqkv[:, :Nq * D], cqkv[:, Nq * D:(Nq + Nkv) * D], cqkv[:, (Nq + Nkv) * D:]
    csc32 = qkvfuse.build_cos_sin_cache(4096, D, theta=theta, dtype=torch.float32, device=dev)
    kc8 = kc.view(torch.uint8)  # vLLM's fp8 caches are uint8
    vc8 = vc.view(torch.uint8)
    kb, vb = t(torch.zeros(64, Nkv * D).bfloat16()), t(torch.zeros(64, Nkv * D).bfloat16())
    sgl_arg = compat.FusedSetKVBufferArg(v_cols, kb, vb, None, None, slots)
    x3 = cqkv.view(1, Nq + 2 * Nkv, D)
    q3, k3, v3 = x3[:, :Nq], x3[:, Nq:Nq + Nkv], x3[:, Nq + Nkv:]
    pages = t(torch.zeros(8, 16, Nkv, D, dtype=torch.float8_e4m3fn))
    vpages = torch.zeros_like(pages)
    kv_indptr, kv_indices = t(torch.tensor([0, 2], dtype=torch.int32)), t(torch.tensor([3, 5], dtype=torch.int32))
    batch_indices, kv_pos = t(torch.tensor([0], dtype=torch.int32)), t(torch.tensor([17], dtype=torch.int32))
    calls = {
        "qkvfuse.run (paged fp8 cache)": lambda: qkvfuse.run(
            qkv, num_q_heads=Nq, num_kv_heads=Nkv, head_dim=D, q_gamma=qw, k_gamma=kw, cos_sin_cache=csc,
            positions=pos, k_cache=kc, v_cache=vc, slot_mapping=slots, k_scale=scale, v_scale=scale),
        "split_qkv_rmsnorm_rope": lambda: qkvfuse.split_qkv_rmsnorm_rope(qkv, qw, kw, csc, pos, q_hidden_size=Nq * D),
        "qkv_rmsnorm_rope_cache": lambda: qkvfuse.qkv_rmsnorm_rope_cache(
            qkv, qw, kw, cos, sin, slots, nz_k, nz_v, head_nums=(Nq, Nkv, Nkv), k_scale=chan, v_scale=chan),
        "dequant_rope_quant_kvcache": lambda: qkvfuse.dequant_rope_quant_kvcache(
            x32, cos4, sin4, ck, cv, start, chan, chan, weight_scale=wscale),
        "compat.fused_qk_norm_rope": lambda: compat.fused_qk_norm_rope(
            cqkv, Nq, Nkv, Nkv, D, 1e-6, qw, kw, csc, True, pos),
        "compat.fused_qk_norm_rope_and_cache": lambda: compat.fused_qk_norm_rope_and_cache(
            cqkv, Nq, Nkv, Nkv, D, 1e-6, qw, kw, csc, True, pos, kc8, vc8, slots, "fp8", scale, scale),
        "compat.flashinfer rope": lambda: compat.flashinfer_apply_rope_with_cos_sin_cache(
            pos, q_cols, k_cols, D, csc32, True),
        "compat.flashinfer rope_inplace": lambda: compat.flashinfer_apply_rope_with_cos_sin_cache_inplace(
            pos, q_cols, k_cols, D, csc32, True),
        "compat.flashinfer rope_quantize_append": lambda: compat.flashinfer_rope_quantize_fp8_append_paged_kv_cache(
            q3, k3, None, None, v3, csc32, pos, (pages, vpages), kv_indices,
            kv_indptr, batch_indices, kv_pos, quant_scale_q=0.5, quant_scale_kv=0.25),
        "compat.sglang rope + set_kv_buffer": lambda: compat.sglang_apply_rope_with_cos_sin_cache_inplace(
            pos, q_cols, k_cols, D, csc32, True, sgl_arg),
        "F.rms_norm": lambda: F.rms_norm(xn, (D,), qw, 1e-6),
        "torch.add": lambda: torch.add(a, b),
        "qkvfuse.run on NumPy (ctypes)": lambda: qkvfuse.run(
            nqkv, num_q_heads=Nq, num_kv_heads=Nkv, head_dim=D, q_gamma=ng, k_gamma=ng, cos_sin_cache=ncsc,
            positions=npos, k_cache=nkc, v_cache=nvc, slot_mapping=nslots, k_scale=nscale, v_scale=nscale),
    }
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    out = {}
    for name, fn in calls.items():
        try:
            fn()
        except qkvfuse.UnsupportedError as e:  # a compat call whose feature this library lacks
            out[name] = e
            continue
        for _ in range(50):  # plans, allocator, first-call paths
            fn()
        sync()
        t0 = time.perf_counter()
        n = 0
        while time.perf_counter() - t0 < min_time / 10:
            fn()
            n += 1
        per = max(n, 1)
        samples = []
        for _ in range(repeats):
            sync()
            t0 = time.perf_counter()
            for _ in range(per):
                fn()
            samples.append((time.perf_counter() - t0) / per * 1e6)
        sync()
        out[name] = statistics.median(samples)
    return out


def host_main(a):
    if a.device == "cuda" and not torch.cuda.is_available():
        print("bench_torch: --device cuda but no CUDA device")
        return 1
    info = qkvfuse.build_info()
    print("host cost per call, T=1, qwen3-8b shapes, bfloat16, device %s" % a.device)
    print("torch %s, qkvfuse %s, torch binding: %s%s" % (
        torch.__version__, qkvfuse.version(), info["torch_binding"],
        " (%s)" % info["torch_extension"]["path"] if info.get("torch_extension") else
        (" (%s)" % info["torch_binding_reason"] if info.get("torch_binding_reason") else "")))
    us = host_costs(a.device, a.min_time)
    base = us["F.rms_norm"]
    targets = {"qkvfuse.run (paged fp8 cache)": 2.5, "split_qkv_rmsnorm_rope": 2.0, "qkv_rmsnorm_rope_cache": 2.0,
               "dequant_rope_quant_kvcache": 2.0}
    targets.update((k, 2.5) for k in us if k.startswith("compat."))
    print("%-40s %9s %10s %8s" % ("call", "us/call", "x rms_norm", "target"))
    for name, v in list(us.items()):
        if isinstance(v, Exception):
            print("%-40s %s" % (name, "not served by this library: %s" % v.message))
            del us[name]
            continue
        if name in targets:
            tgt = "<= %.1fx" % targets[name]
        elif name.startswith("qkvfuse.run on NumPy"):
            tgt = "<= 40 us"
        else:
            tgt = ""
        print("%-40s %9.2f %10.2f %8s" % (name, v, v / base, tgt))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(dict(mode="host", device=a.device, torch=torch.__version__, binding=info["torch_binding"],
                           us_per_call=us, ratio_to_rms_norm={k: v / base for k, v in us.items()}), f, indent=1)
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="qwen3-8b", choices=sorted(PRESETS))
    ap.add_argument("--tokens", default="1,16,128,1024,4096,16384")
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16"])
    ap.add_argument("--cache", default=None, choices=["bfloat16", "float16", "float8_e4m3fn", "int8"],
                    help="KV-cache dtype (default: the model dtype)")
    ap.add_argument("--mode", default="eager", choices=["eager", "graph", "host"])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", choices=["cuda", "cpu"],
                    help="host mode: where the tensors live (default: cuda when there is a GPU)")
    ap.add_argument("--min-time", type=float, default=0.3, help="seconds of samples per measurement")
    ap.add_argument("--rotate-mb", type=float, default=None,
                    help="MB the rotated copies should span, > 0 (default: twice the L2 cache); whole copies, 1 to "
                         "64, so each JSON row gives the span used (rotate_bytes)")
    ap.add_argument("--no-compile", action="store_true", help="skip the torch.compile column")
    ap.add_argument("--json", help="write the rows as JSON here")
    ap.add_argument("--svg", help="write a GB/s-vs-tokens plot (SVG) here")
    ap.add_argument("--png", help="write the plot as PNG here (needs matplotlib)")
    a = ap.parse_args()
    if a.rotate_mb is not None and not a.rotate_mb > 0:
        ap.error("--rotate-mb: must be > 0 MB; got %r" % a.rotate_mb)
    if a.mode == "host":
        return host_main(a)
    if not torch.cuda.is_available():
        print("bench_torch: no CUDA device; nothing to time")
        return 0
    dtype = getattr(torch, a.dtype)
    cache = getattr(torch, a.cache or a.dtype)
    props = torch.cuda.get_device_properties(0)
    l2 = getattr(props, "L2_cache_size", 50 << 20)
    rotate = a.rotate_mb * 1e6 if a.rotate_mb is not None else 2 * l2
    Nq, Nkv, D, _ = PRESETS[a.preset]
    title = "%s prologue (Nq=%d, Nkv=%d, D=%d, %s, %s cache), %s, %s mode" % (
        a.preset, Nq, Nkv, D, a.dtype, a.cache or a.dtype, props.name, a.mode)
    print(title)
    print("torch %s, qkvfuse %s (%s)" % (torch.__version__, qkvfuse.version(), qkvfuse.library_path()))
    hdr = ("%7s %8s | %9s %7s | %9s %7s | %9s %7s | %7s | %6s %7s %7s"
           % ("tokens", "MB", "qkvfuse", "GB/s", "eager", "GB/s", "compile", "GB/s", "copy", "%copy", "x eager",
              "x comp"))
    print(hdr)
    print("-" * len(hdr))
    rows = []
    for T in [int(t) for t in a.tokens.split(",")]:
        p = Problem(T, a.preset, dtype, cache, rotate)
        err, kerr = check(p)
        r = dict(tokens=T, bytes=p.bytes, instances=p.K, rotate_target_bytes=int(rotate), rotate_bytes=p.rotate_bytes,
                 max_abs_diff_q=err, max_abs_diff_kcache=kerr)
        for name, fn in (("qkvfuse", fused), ("eager", eager), ("compile", compiled), ("copy", copy)):
            us = float("nan") if (name == "compile" and a.no_compile) else time_calls(fn, p, a.mode, a.min_time)
            r[name + "_us"], r[name + "_gbps"] = us, gbps(p.bytes, us)
        r["pct_of_copy"] = 100 * r["copy_us"] / r["qkvfuse_us"]
        rows.append(r)
        print("%7d %8.3f | %9.2f %7.1f | %9.2f %7.1f | %9.2f %7.1f | %7.1f | %5.1f%% %7.2f %7.2f"
              % (T, p.bytes / 1e6, r["qkvfuse_us"], r["qkvfuse_gbps"], r["eager_us"], r["eager_gbps"],
                 r["compile_us"], r["compile_gbps"], r["copy_gbps"], r["pct_of_copy"],
                 r["eager_us"] / r["qkvfuse_us"], r["compile_us"] / r["qkvfuse_us"]), flush=True)
        del p
        torch.cuda.empty_cache()
    print("\nus: median time per call. GB/s = MB / time. copy: GB/s of torch's copy_ of MB/2 (the D2D memcpy path,\n"
          "slower than qkvfuse bench's copy kernel on the H200). %%copy: copy time / qkvfuse time.\n"
          "x eager, x comp: time of PyTorch eager / torch.compile over qkvfuse. (max |q diff| qkvfuse vs "
          "eager: %s)" % ", ".join("%.3g" % r["max_abs_diff_q"] for r in rows))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(dict(title=title, device=props.name, mode=a.mode, rows=rows), f, indent=1)
    if a.svg:
        svg_plot(rows, a.svg, title)
    if a.png:
        png_plot(rows, a.png, title)
    return 0


if __name__ == "__main__":
    sys.exit(main())
