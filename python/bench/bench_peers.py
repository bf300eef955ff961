#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Time qkvfuse.compat's calls side by side with the peer calls they stand in
for, in one run on a CUDA GPU, on the same inputs.

For each installed peer (FlashInfer; vLLM's custom ops when vllm is
importable) and each token count T it prints one row per call: microseconds
per call of the peer and of qkvfuse.compat, the peer's time over qkvfuse's
(> 1: qkvfuse is faster), the bytes the call must move (inputs read once,
outputs written once) and the time of a copy of as many bytes over
qkvfuse's (%copy; of half the bytes, the faster of torch's copy_ and an
elementwise kernel). A peer that is not importable is named and
skipped; nothing else is needed from it.

Calls cycle through enough copies of the per-call tensors to stream past the
L2 cache. --mode graph (default) replays a CUDA graph of the calls (the
kernels alone); --mode eager launches them back to back from Python (what an
eager caller pays, host cost included).

The FlashInfer wheels the GPU machine lacks: scripts/peer-wheels.sh.
"""
import argparse
import json
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
try:
    import qkvfuse
except ImportError:
    sys.path.insert(0, os.path.join(HERE, ".."))
    import qkvfuse
from qkvfuse import compat  # noqa: E402
from bench_torch import time_calls  # noqa: E402

PRESETS = {  # name: (Nq, Nkv, D)
    "qwen3-8b": (32, 8, 128),
    "qwen3-32b": (64, 8, 128),
    "llama3-8b": (32, 8, 128),
}
PAGE = 16


def _import(name):
    try:
        return __import__(name, fromlist=["_"]), None
    except Exception as e:  # noqa: BLE001 - any import failure means "not here"
        return None, "%s: %s" % (type(e).__name__, str(e).splitlines()[0][:120] if str(e) else "")


class Instances:
    """K copies of one call's tensors (rotated past L2) for T tokens; build(i)
    makes copy i. Timed by bench_torch.time_calls, as its problems are."""

    def __init__(self, T, build, per_copy_bytes, rotate_bytes):
        self.T = T
        self.K = max(1, min(64, int(rotate_bytes // max(per_copy_bytes, 1)) + 1))
        self.items = [build(i) for i in range(self.K)]


def timed(call, inst, mode, min_time):
    """bench_torch.time_calls of call(tensors of copy i), named as the call."""
    def run(p, i):
        return call(p.items[i])
    run.__name__ = getattr(call, "__name__", "call")
    return time_calls(run, inst, mode, min_time)


def copy_us(nbytes, mode, min_time, rotate):
    """The best copy of nbytes (read nbytes / 2, write nbytes / 2), timed as
    the calls are: the faster of torch's copy_ (cudaMemcpyAsync) and an
    elementwise kernel over int32 (torch.add of 0)."""
    half = (max(int(nbytes) // 2, 1) + 15) // 16 * 16
    inst = Instances(0, lambda _: (torch.empty(half // 4, dtype=torch.int32, device="cuda"),
                                   torch.empty(half // 4, dtype=torch.int32, device="cuda")), 2 * half, rotate)

    def memcpy(x):
        return x[1].copy_(x[0])

    def kernel(x):
        return torch.add(x[0], 0, out=x[1])
    return min(timed(memcpy, inst, mode, min_time), timed(kernel, inst, mode, min_time))


def cos_sin_cache(max_pos, R, dtype, device):
    inv = 1.0 / (1e6 ** (torch.arange(0, R, 2, dtype=torch.float64, device=device) / R))
    ang = torch.arange(max_pos, dtype=torch.float64, device=device)[:, None] * inv[None, :]
    return torch.cat([ang.cos(), ang.sin()], 1).to(dtype)


def paged_layout(T, gen, device):
    """FlashInfer's page-table arguments for T appended tokens: min(T, 64)
    sequences, each with some earlier tokens, pages in random order."""
    B = min(T, 64)
    lens = [T // B + (1 if b < T % B else 0) for b in range(B)]
    start = torch.randint(0, 512, (B,), generator=gen).tolist()
    pages_per = [(s + n + PAGE - 1) // PAGE for s, n in zip(start, lens)]
    order = torch.randperm(sum(pages_per), generator=gen)
    indptr = [0]
    for n in pages_per:
        indptr.append(indptr[-1] + n)
    batch, pos = [], []
    for b, (s, n) in enumerate(zip(start, lens)):
        batch += [b] * n
        pos += list(range(s, s + n))
    i32 = dict(dtype=torch.int32, device=device)
    return (order.to(**i32), torch.tensor(indptr, **i32), torch.tensor(batch, **i32), torch.tensor(pos, **i32),
            sum(pages_per))


def flashinfer_rows(fi, preset, T, dtype, mode, min_time, rotate):
    Nq, Nkv, D = PRESETS[preset]
    dev = "cuda"
    gen = torch.Generator().manual_seed(T)
    csc = cos_sin_cache(65536, D, torch.float32, dev)
    es = torch.tensor([], dtype=dtype).element_size()
    rows = []

    def rope_copy(_):
        return dict(positions=torch.randint(0, 65536, (T,), generator=gen).to(dev),
                    query=torch.randn(T, Nq * D, generator=gen).to(dev, dtype),
                    key=torch.randn(T, Nkv * D, generator=gen).to(dev, dtype))
    inst = Instances(T, rope_copy, T * (Nq + Nkv) * D * es * 2, rotate)
    rope_bytes = T * (2 * (Nq + Nkv) * D * es + D * 4 + 8)  # q, k in and out; a float32 cos/sin row, a position
    for name, peer, ours in (
            ("rope", fi.rope.apply_rope_with_cos_sin_cache, compat.flashinfer.apply_rope_with_cos_sin_cache),
            ("rope_inplace", fi.rope.apply_rope_with_cos_sin_cache_inplace,
             compat.flashinfer.apply_rope_with_cos_sin_cache_inplace)):
        def call(x, f=peer):
            return f(x["positions"], x["query"], x["key"], D, csc, True)

        def call_ours(x, f=ours):
            return f(x["positions"], x["query"], x["key"], D, csc, True)
        rows.append((name, timed(call, inst, mode, min_time), timed(call_ours, inst, mode, min_time), rope_bytes))

    for layout in ("NHD", "HND"):
        def fp8_copy(_):
            kv_indices, kv_indptr, batch, pos, pages = paged_layout(T, gen, dev)
            shape = (pages, PAGE, Nkv, D) if layout == "NHD" else (pages, Nkv, PAGE, D)
            return dict(q=torch.randn(T, Nq, D, generator=gen).to(dev, dtype),
                        k=torch.randn(T, Nkv, D, generator=gen).to(dev, dtype),
                        v=torch.randn(T, Nkv, D, generator=gen).to(dev, dtype),
                        pos_ids=pos.clone(), caches=(torch.zeros(shape, dtype=torch.float8_e4m3fn, device=dev),
                                                     torch.zeros(shape, dtype=torch.float8_e4m3fn, device=dev)),
                        kv_indices=kv_indices, kv_indptr=kv_indptr, batch=batch, pos=pos)
        inst = Instances(T, fp8_copy, T * (Nq + 2 * Nkv) * D * (es + 1), rotate)
        # q, k, v in, q and the k/v cache rows out as fp8; a float32 cos/sin row, a position, batch index and slot
        fp8_bytes = T * ((Nq + 2 * Nkv) * D * (es + 1) + D * 4 + 16)

        def fp8_call(x, f):
            return f(x["q"], x["k"], None, None, x["v"], csc, x["pos_ids"], x["caches"], x["kv_indices"],
                     x["kv_indptr"], x["batch"], x["pos"], is_neox=True, quantize_dtype=torch.float8_e4m3fn,
                     quant_scale_q=1.0, quant_scale_kv=1.0, page_size=PAGE, kv_layout=layout)
        peer_fn = fi.rope.rope_quantize_fp8_append_paged_kv_cache
        ours_fn = compat.flashinfer.rope_quantize_fp8_append_paged_kv_cache
        rows.append(("rope_fp8_paged_" + layout, timed(lambda x: fp8_call(x, peer_fn), inst, mode, min_time),
                     timed(lambda x: fp8_call(x, ours_fn), inst, mode, min_time), fp8_bytes))
    return rows


def vllm_rows(ops, preset, T, dtype, mode, min_time, rotate):
    Nq, Nkv, D = PRESETS[preset]
    dev = "cuda"
    gen = torch.Generator().manual_seed(T)
    csc = cos_sin_cache(65536, D, dtype, dev)
    w = torch.ones(D, dtype=dtype, device=dev)
    es = torch.tensor([], dtype=dtype).element_size()

    def copy(_):
        return dict(qkv=torch.randn(T, (Nq + 2 * Nkv) * D, generator=gen).to(dev, dtype),
                    pos=torch.randint(0, 65536, (T,), generator=gen).to(dev))
    inst = Instances(T, copy, T * (Nq + 2 * Nkv) * D * es, rotate)

    def peer(x):
        ops.fused_qk_norm_rope(x["qkv"], Nq, Nkv, Nkv, D, 1e-6, w, w, csc, True, x["pos"])

    def ours(x):
        compat.vllm.fused_qk_norm_rope(x["qkv"], Nq, Nkv, Nkv, D, 1e-6, w, w, csc, True, x["pos"])
    # q and k in and out (v untouched), a cos/sin row in the table's dtype, a position
    nbytes = T * (2 * (Nq + Nkv) * D * es + D * es + 8)
    return [("fused_qk_norm_rope", timed(peer, inst, mode, min_time), timed(ours, inst, mode, min_time), nbytes)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="qwen3-8b", choices=sorted(PRESETS))
    ap.add_argument("--tokens", default="1,8,64,512,4096,32768")
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16"])
    ap.add_argument("--mode", default="graph", choices=["graph", "eager"])
    ap.add_argument("--min-time", type=float, default=0.3, help="seconds of samples per measurement")
    ap.add_argument("--rotate-mb", type=float, default=200.0, help="memory the rotated copies span")
    ap.add_argument("--json", help="write the rows as JSON here")
    a = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("bench_peers: needs a CUDA GPU")
    dtype = getattr(torch, a.dtype)
    fi, why_fi = _import("flashinfer")
    vllm_ops = None
    vl, why_vl = _import("vllm._custom_ops")
    if vl is not None:
        vllm_ops = torch.ops._C
    print("bench_peers: %s, %s, %s mode, qkvfuse %s | flashinfer %s | vllm %s"
          % (torch.cuda.get_device_name(0), a.preset, a.mode, qkvfuse.version(),
             getattr(fi, "__version__", "absent (%s)" % why_fi),
             "present" if vllm_ops is not None else "absent (%s)" % why_vl))
    print("%-24s %7s %12s %12s %8s %9s %9s %6s"
          % ("call", "tokens", "peer us", "qkvfuse us", "peer/qkv", "MB", "copy us", "%copy"))
    out = []
    for T in [int(t) for t in a.tokens.split(",")]:
        rows = []
        if fi is not None:
            rows += flashinfer_rows(fi, a.preset, T, dtype, a.mode, a.min_time, a.rotate_mb * 1e6)
        if vllm_ops is not None:
            rows += vllm_rows(vllm_ops, a.preset, T, dtype, a.mode, a.min_time, a.rotate_mb * 1e6)
        copies = {}
        for name, peer_us, ours_us, nbytes in rows:
            if nbytes not in copies:
                copies[nbytes] = copy_us(nbytes, a.mode, a.min_time, a.rotate_mb * 1e6)
            c_us = copies[nbytes]
            print("%-24s %7d %12.2f %12.2f %7.2fx %9.3f %9.2f %5.0f%%"
                  % (name, T, peer_us, ours_us, peer_us / ours_us, nbytes / 1e6, c_us, 100 * c_us / ours_us))
            out.append(dict(call=name, tokens=T, peer_us=peer_us, qkvfuse_us=ours_us, bytes=nbytes, copy_us=c_us,
                            pct_of_copy=100 * c_us / ours_us, preset=a.preset, dtype=a.dtype, mode=a.mode))
        sys.stdout.flush()
    if a.json:
        with open(a.json, "w") as f:
            json.dump(dict(device=torch.cuda.get_device_name(0), rows=out), f, indent=1)


if __name__ == "__main__":
    main()
