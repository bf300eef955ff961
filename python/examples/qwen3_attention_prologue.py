#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The attention prologue of a Qwen3-style layer, twice: written with PyTorch
ops (the separate-kernel path an engine has today), and calling qkvfuse. The
outputs are compared.

Qwen3 (and Llama with q/k norm added) computes, per layer and token:

    qkv = hidden @ W_qkv                      [T, (Nq + 2 Nkv) D]
    q, k, v = split(qkv)
    q, k = RMSNorm_q(q), RMSNorm_k(k)         per head, over D, weights [D]
    q, k = RoPE(q, positions), RoPE(k, ...)   neox pairs, cos/sin from a cache
    kv_cache[slot] = k, v                     paged [blocks, block_size, Nkv, D]

The PyTorch composition below stores every intermediate in the model dtype,
doing float32 math inside each stage, which is the rounding sequence of
qkvfuse's ``rounding="unfused_parity"`` mode:

    y = round(x * (1 / sqrt(sum(x^2) / D + eps)) * w)       float32 inside
    o = round(y * cos - y_partner * sin)                    (+ for the second half), float32, no FMA
    cache = o (bf16/fp16), or round(o / scale) to fp8 e4m3 (saturating) / int8

Two choices are free. The inverse square root: in unfused-parity mode
every qkvfuse backend computes 1 / sqrtf (IEEE), while torch's rms_norm on
CUDA uses rsqrt; ``inv_sqrt`` picks "div" (default: what qkvfuse does) or
"rsqrt" (to measure the difference). And the order of the sum of squares. ``sum_order``:
"torch" (``x.square().sum(-1)``, what an engine writes), "sequential"
(d = 0..D-1: the CPU reference backend's order) or "qkvfuse_cuda" (the CUDA
kernel's: per-lane sequential over 16-byte vectors, then a butterfly across
lanes). With the order the backend uses the two paths are bit-identical;
with torch's own reduction the sum differs in its last bit now and then,
which flips a rounding of the normalized value once in a while (the example
prints how often).

Run: python examples/qwen3_attention_prologue.py [--device cuda] [--tokens 64]
(with the package importable and libqkvfuse found, e.g. QKVFUSE_LIBRARY=...).
"""
import argparse
import os
import sys

import torch

try:
    import qkvfuse
except ImportError:  # running from the source tree
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    import qkvfuse


# ---- the PyTorch composition ------------------------------------------------------------------

def _pow2_ceil(n):
    p = 1
    while p < n:
        p *= 2
    return p


def sum_of_squares(x, order="torch", in_bytes=2):
    """sum(x^2) over the last dim of a float32 tensor, in a chosen order."""
    sq = x * x
    if order == "torch":
        return sq.sum(-1)
    D = x.shape[-1]
    if order == "sequential":
        acc = torch.zeros_like(sq[..., 0])
        for d in range(D):
            acc = acc + sq[..., d]
        return acc
    if order != "qkvfuse_cuda":
        raise ValueError("sum_order: torch, sequential or qkvfuse_cuda; got %r" % (order,))
    # The CUDA kernel: lane l of a group of G lanes owns vectors v*G + l of VEC
    # elements (16 bytes of the input type; 1 when D or the alignment does not
    # allow), adds its elements in order, then the lanes combine by a
    # butterfly (lane l adds lane l ^ off, off = G/2 .. 1).
    vec = 16 // in_bytes if D % (16 // in_bytes) == 0 else 1
    nvec = D // vec
    G = _pow2_ceil(min(nvec, 32))
    NV = _pow2_ceil(-(-nvec // G))
    sq = sq.reshape(*sq.shape[:-1], nvec, vec)
    if NV * G > nvec:
        pad = torch.zeros(*sq.shape[:-2], NV * G - nvec, vec, dtype=sq.dtype, device=sq.device)
        sq = torch.cat([sq, pad], -2)
    sq = sq.reshape(*sq.shape[:-2], NV, G, vec)
    acc = torch.zeros_like(sq[..., 0, :, 0])
    for v in range(NV):
        for k in range(vec):
            acc = acc + sq[..., v, :, k]
    lanes = torch.arange(G, device=x.device)
    off = G // 2
    while off:
        acc = acc + acc[..., lanes ^ off]
        off //= 2
    return acc[..., 0]


def default_inv_sqrt(device):
    """The inverse square root of qkvfuse's unfused-parity mode: 1 / sqrtf
    (IEEE) on every backend (the CUDA fused path uses rsqrtf only outside
    parity mode)."""
    return "div"


def rms_norm_heads(x, weight, eps, sum_order="torch", inv_sqrt="div"):
    """Per-head RMSNorm of x [T, N, D] (model dtype): float32 inside, result in
    the model dtype (one rounding, as a separate kernel stores it).
    inv_sqrt: "rsqrt" (torch.rsqrt) or "div" (1 / torch.sqrt, IEEE)."""
    xf = x.float()
    ss = sum_of_squares(xf, sum_order, x.element_size())
    # a true division by D (torch turns division by a Python scalar into a
    # multiplication by its reciprocal, which differs for D not a power of 2)
    ms = ss / torch.full_like(ss, x.shape[-1]) + eps
    inv = torch.rsqrt(ms) if inv_sqrt == "rsqrt" else torch.reciprocal(torch.sqrt(ms))
    return (xf * inv.unsqueeze(-1) * weight.float()).to(x.dtype)


def rope(x, cos, sin, rotary_dim, is_neox=True):
    """RoPE on the first rotary_dim dims of x [T, N, D] (model dtype); cos, sin
    [T, R/2]. float32 inside, no fused multiply-add, result in the model dtype."""
    xf = x.float()
    c, s = cos.float().unsqueeze(1), sin.float().unsqueeze(1)
    rot, rest = xf[..., :rotary_dim], xf[..., rotary_dim:]
    if is_neox:
        x1, x2 = rot.chunk(2, dim=-1)
        out = torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], -1)
    else:
        x1, x2 = rot[..., 0::2], rot[..., 1::2]
        out = torch.stack([x1 * c - x2 * s, x2 * c + x1 * s], -1).flatten(-2)
    return torch.cat([out, rest], -1).to(x.dtype)


def quantize(x, cache_dtype, scale):
    """What a reshape-and-cache kernel stores: the value itself, or x / scale
    rounded to fp8 e4m3 (saturating) or int8 (half to even, saturating)."""
    if cache_dtype == torch.float8_e4m3fn:
        return (x.float() / scale).clamp(-448.0, 448.0).to(cache_dtype)
    if cache_dtype == torch.int8:
        return torch.round(x.float() / scale).clamp(-128, 127).to(cache_dtype)
    return x.to(cache_dtype)


def torch_prologue(qkv, num_q_heads, num_kv_heads, head_dim, q_norm_weight, k_norm_weight, eps, cos_sin_cache,
                   positions, k_cache, v_cache, slot_mapping, k_scale=None, v_scale=None, is_neox=True,
                   sum_order="torch", inv_sqrt=None):
    """The separate ops: split, q/k RMSNorm, RoPE, (quantize,) write the paged
    cache [blocks, block_size, Nkv, D] at slot_mapping (every slot valid).
    Returns q [T, Nq*D]; writes the caches in place."""
    T = qkv.shape[0]
    D, nq, nkv = head_dim, num_q_heads, num_kv_heads
    q, k, v = qkv.split([nq * D, nkv * D, nkv * D], dim=-1)
    inv_sqrt = inv_sqrt or default_inv_sqrt(qkv.device)
    q = rms_norm_heads(q.reshape(T, nq, D), q_norm_weight, eps, sum_order, inv_sqrt)
    k = rms_norm_heads(k.reshape(T, nkv, D), k_norm_weight, eps, sum_order, inv_sqrt)
    R = cos_sin_cache.shape[-1]
    cos, sin = cos_sin_cache[positions].chunk(2, dim=-1)
    q = rope(q, cos, sin, R, is_neox)
    k = rope(k, cos, sin, R, is_neox)
    write_paged(k_cache, slot_mapping, quantize(k, k_cache.dtype, k_scale))
    write_paged(v_cache, slot_mapping, quantize(v.reshape(T, nkv, D), v_cache.dtype, v_scale))
    return q.reshape(T, nq * D)


def write_paged(cache, slot_mapping, rows):
    """cache [blocks, block_size, Nkv, D] viewed as [slots, Nkv, D]; rows [T, Nkv, D].
    (Copied as raw bits: index_copy_ has no fp8 kernel on every device.)"""
    bits = {1: torch.uint8, 2: torch.int16, 4: torch.int32}[cache.element_size()]
    flat = cache.view(bits).view(-1, *cache.shape[2:])
    flat.index_copy_(0, slot_mapping, rows.contiguous().view(bits))


def qkvfuse_prologue(qkv, num_q_heads, num_kv_heads, head_dim, q_norm_weight, k_norm_weight, eps, cos_sin_cache,
                     positions, k_cache, v_cache, slot_mapping, k_scale=None, v_scale=None, is_neox=True,
                     rounding="unfused_parity"):
    """The same prologue as one qkvfuse call (torch.ops.qkvfuse.run)."""
    return qkvfuse.run(qkv, num_q_heads=num_q_heads, num_kv_heads=num_kv_heads, head_dim=head_dim,
                       q_gamma=q_norm_weight, k_gamma=k_norm_weight, eps=eps, cos_sin_cache=cos_sin_cache,
                       positions=positions, rope_style="neox" if is_neox else "interleaved", k_cache=k_cache,
                       v_cache=v_cache, slot_mapping=slot_mapping, cache_layout="paged", k_scale=k_scale,
                       v_scale=v_scale, rounding=rounding).q


class Qwen3AttentionPrologue(torch.nn.Module):
    """qkv projection + the prologue, with either implementation."""

    def __init__(self, hidden=1024, num_q_heads=16, num_kv_heads=8, head_dim=128, max_pos=4096,
                 theta=1000000.0, eps=1e-6, dtype=torch.bfloat16, device="cpu"):
        super().__init__()
        self.nq, self.nkv, self.d, self.eps = num_q_heads, num_kv_heads, head_dim, eps
        H = (num_q_heads + 2 * num_kv_heads) * head_dim
        self.qkv_proj = torch.nn.Linear(hidden, H, bias=False, dtype=dtype, device=device)
        self.q_norm = torch.nn.Parameter(1 + 0.1 * torch.randn(head_dim, dtype=dtype, device=device))
        self.k_norm = torch.nn.Parameter(1 + 0.1 * torch.randn(head_dim, dtype=dtype, device=device))
        self.register_buffer("cos_sin_cache", qkvfuse.build_cos_sin_cache(max_pos, head_dim, theta=theta,
                                                                          dtype=dtype, device=device))

    def forward(self, hidden, positions, k_cache, v_cache, slot_mapping, k_scale=None, v_scale=None,
                impl="qkvfuse", sum_order="torch", inv_sqrt=None):
        qkv = self.qkv_proj(hidden)
        args = (qkv, self.nq, self.nkv, self.d, self.q_norm, self.k_norm, self.eps, self.cos_sin_cache, positions,
                k_cache, v_cache, slot_mapping, k_scale, v_scale)
        if impl == "qkvfuse":
            return qkvfuse_prologue(*args)
        return torch_prologue(*args, sum_order=sum_order, inv_sqrt=inv_sqrt)


# ---- comparison -------------------------------------------------------------------------------

def ulp_distance(a, b):
    """Per-element distance in units in the last place (int8: in steps)."""
    if a.dtype == torch.int8:
        return (a.long() - b.long()).abs()
    n = a.element_size()
    it = {1: torch.int8, 2: torch.int16, 4: torch.int32}[n]
    mask = (1 << (8 * n - 1)) - 1

    def line(i):  # sign-magnitude bit patterns onto a monotone integer line
        i = i.long()
        return torch.where(i < 0, -(i & mask), i)

    return (line(a.view(it)) - line(b.view(it))).abs()


def compare(name, a, b):
    same = (a.view(torch.uint8) == b.view(torch.uint8)).reshape(a.numel(), -1).all(-1) if a.numel() else \
        torch.ones(0, dtype=torch.bool)
    d = ulp_distance(a.reshape(-1), b.reshape(-1))
    frac = same.float().mean().item() if a.numel() else 1.0
    return dict(name=name, identical=frac, max_ulp=int(d.max().item()) if a.numel() else 0, n=a.numel())


def run_example(device="cpu", tokens=64, cache="bfloat16", seed=0, sum_orders=None, verbose=True,
                dtype="bfloat16", num_q_heads=16, num_kv_heads=8, head_dim=128, inv_sqrt=None):
    """Run both implementations on random weights and inputs; returns one
    row per (sum order, output): fraction of bit-identical elements, max ulp."""
    inv_sqrt = inv_sqrt or default_inv_sqrt(device)
    torch.manual_seed(seed)
    dt = getattr(torch, dtype)
    layer = Qwen3AttentionPrologue(num_q_heads=num_q_heads, num_kv_heads=num_kv_heads, head_dim=head_dim,
                                   device=device, dtype=dt)
    T = tokens
    hidden = torch.randn(T, 1024, dtype=dt, device=device)
    positions = torch.randint(0, 4096, (T,), device=device)
    blocks, bs = (T + 15) // 16 + 1, 16
    slots = torch.randperm(blocks * bs, device=device)[:T]
    cdt = getattr(torch, cache)
    scale = torch.tensor([0.02], device=device) if cdt in (torch.float8_e4m3fn, torch.int8) else None

    def caches():
        return (torch.zeros(blocks, bs, layer.nkv, layer.d, dtype=cdt, device=device),
                torch.zeros(blocks, bs, layer.nkv, layer.d, dtype=cdt, device=device))

    kc_f, vc_f = caches()
    with torch.no_grad():
        q_f = layer(hidden, positions, kc_f, vc_f, slots, scale, scale, impl="qkvfuse")
    backend = "qkvfuse_cuda" if hidden.is_cuda else "sequential"
    orders = sum_orders or ["torch", backend]
    results = []
    for order in orders:
        kc_t, vc_t = caches()
        with torch.no_grad():
            q_t = layer(hidden, positions, kc_t, vc_t, slots, scale, scale, impl="torch", sum_order=order,
                        inv_sqrt=inv_sqrt)
        rows = [compare("q", q_f, q_t),
                compare("k_cache", kc_f[slots // bs, slots % bs], kc_t[slots // bs, slots % bs]),
                compare("v_cache", vc_f, vc_t)]
        for r in rows:
            r["sum_order"], r["inv_sqrt"] = order, inv_sqrt
        results += rows
    if verbose:
        print("Qwen3-style prologue, T=%d, Nq=%d, Nkv=%d, D=%d, %s, %s cache, device %s"
              % (T, layer.nq, layer.nkv, layer.d, dtype, cache, device))
        print("qkvfuse (rounding=unfused_parity) vs the PyTorch composition (inverse sqrt: %s):" % inv_sqrt)
        print("  %-13s %-8s %10s %8s" % ("sum order", "output", "identical", "max ulp"))
        for r in results:
            print("  %-13s %-8s %9.4f%% %8d" % (r["sum_order"], r["name"], 100 * r["identical"], r["max_ulp"]))
    return results


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--cache", default=None, choices=["bfloat16", "float16", "float8_e4m3fn", "int8"],
                    help="KV-cache dtype (default: the model dtype)")
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16"])
    ap.add_argument("--head-dim", type=int, default=128)
    args = ap.parse_args()
    res = run_example(args.device, args.tokens, args.cache or args.dtype, dtype=args.dtype, head_dim=args.head_dim)
    order = "qkvfuse_cuda" if args.device.startswith("cuda") else "sequential"
    exact = all(r["identical"] == 1.0 for r in res if r["sum_order"] == order)
    print("bit-identical with the backend's sum order (%s): %s" % (order, "yes" if exact else "NO"))
    return 0 if exact else 1


if __name__ == "__main__":
    sys.exit(main())
