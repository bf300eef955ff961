#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""A transformers model's forward, patched (qkvfuse.integrations.transformers)
against unpatched, in one run.

The model is the family's own class at real dimensions (default Qwen3-8B's:
hidden 4096, 32 q / 8 kv heads of 128, 2 layers, random weights, bf16),
timed as one forward of a prefill of T tokens (default 2048) and one decode
step of a batch of B sequences (default 64) after a prompt of P tokens
(default 256), each eager and under torch.compile. Also timed, eager: the
attention prologue alone as the model's own code does it (q/k norm and
apply_rotary_pos_emb on the projections' outputs) and as the qkvfuse call,
so the prologue's share of a forward is shown. Variants: unpatched,
patched, and fused (patched with fuse_projections=True: the q/k/v
projections as one product).

    python/bench/bench_transformers.py [--family qwen3] [--device cuda] [--tokens 2048] [--batch 64]
           [--layers 2] [--no-compile] [--json-out FILE]

Times are medians of per-forward samples (CUDA events on the GPU), after a
warm-up; one line of JSON per row with --json-out.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import torch
import transformers

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_torch import median_us  # noqa: E402
from qkvfuse.integrations import transformers as qt  # noqa: E402

FAMILIES = {  # family -> (config class, model class, config arguments at a real model's dimensions)
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM",
              dict(hidden_size=4096, intermediate_size=12288, num_attention_heads=32, num_key_value_heads=8,
                   head_dim=128, rope_theta=1e6, vocab_size=151936)),
    "llama": ("LlamaConfig", "LlamaForCausalLM",
              dict(hidden_size=4096, intermediate_size=14336, num_attention_heads=32, num_key_value_heads=8,
                   head_dim=128, rope_theta=500000.0, vocab_size=128256,
                   rope_scaling=dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                                     original_max_position_embeddings=8192))),
    "gemma3": ("Gemma3TextConfig", "Gemma3ForCausalLM",
               dict(hidden_size=3840, intermediate_size=15360, num_attention_heads=16, num_key_value_heads=8,
                    head_dim=256, query_pre_attn_scalar=256, vocab_size=262144)),
}


def timed_us(fn, device, min_time):
    """Microseconds per call of fn after a warm-up (bench_torch.median_us)."""
    for _ in range(3):
        fn()
    return median_us(fn, 1, min_time, device)


def build(family, layers, dtype, device):
    cfg_name, model_name, kw = FAMILIES[family]
    cfg = getattr(transformers, cfg_name)(num_hidden_layers=layers, max_position_embeddings=8192, **kw)
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    with torch.device(device):
        model = getattr(transformers, model_name)(cfg)
    return model.to(dtype).eval()


def prologue_calls(model, tokens, device, dtype):
    """The first attention layer's prologue, unpatched and fused, as callables on its own inputs."""
    attn = next(m for m in model.modules() if type(m).__name__ in qt.FAMILIES)
    mod = qt._modeling(qt.FAMILIES[type(attn).__name__][0])
    h = torch.randn(1, tokens, model.config.hidden_size, device=device, dtype=dtype)
    q = attn.q_proj(h).view(1, tokens, -1, attn.head_dim).transpose(1, 2)
    k = attn.k_proj(h).view(1, tokens, -1, attn.head_dim).transpose(1, 2)
    pos = torch.arange(tokens, device=device)[None]
    rotary = next(m for m in model.modules() if type(m).__name__.endswith("RotaryEmbedding"))
    cos, sin = rotary(h, pos)
    rope = getattr(mod.apply_rotary_pos_emb, "__wrapped__", mod.apply_rotary_pos_emb)
    norm = getattr(attn, "q_norm", None) is not None
    entry = qt.FAMILIES[type(attn).__name__]

    def unfused():
        qq, kk = (type(attn.q_norm).forward(attn.q_norm, q), type(attn.k_norm).forward(attn.k_norm, k)) if norm \
            else (q, k)
        return rope(qq, kk, cos, sin)

    def fused():
        return qt._fused(attn, entry[1], entry[2], q, k, cos, sin)
    return unfused, fused


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--family", default="qwen3", choices=sorted(FAMILIES))
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--tokens", type=int, default=2048, help="prefill tokens (default 2048)")
    ap.add_argument("--batch", type=int, default=64, help="decode batch (default 64)")
    ap.add_argument("--prompt", type=int, default=256, help="decode: prompt tokens per sequence (default 256)")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--min-time", type=float, default=1.0)
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--json-out")
    a = ap.parse_args()
    dtype = torch.bfloat16
    model = build(a.family, a.layers, dtype, a.device)
    rows = []

    def report(**row):
        row.update(family=a.family, device=a.device, layers=a.layers, transformers=transformers.__version__,
                   torch=torch.__version__)
        rows.append(row)
        print("%-8s %-8s %-9s %7s  %10.1f us" % (row["case"], row["mode"], row["variant"], row["tokens"], row["us"]),
              flush=True)

    unfused, fused = prologue_calls(model, a.tokens, a.device, dtype)
    with torch.no_grad():
        if fused() is None:
            sys.exit("bench_transformers: the fused prologue refused this model's tensors")
        for variant, fn in (("unpatched", unfused), ("patched", fused)):
            report(case="prologue", mode="eager", variant=variant, tokens=a.tokens,
                   us=timed_us(fn, a.device, a.min_time))
        ids = torch.randint(0, model.config.vocab_size, (1, a.tokens), device=a.device)
        prompt = torch.randint(0, model.config.vocab_size, (a.batch, a.prompt), device=a.device)
        step = torch.randint(0, model.config.vocab_size, (a.batch, 1), device=a.device)
        modes = ["eager"] + ([] if a.no_compile else ["compile"])
        for mode in modes:
            for variant in ("unpatched", "patched", "fused"):
                if variant != "unpatched":
                    qt.patch(model, fuse_projections=variant == "fused")
                torch._dynamo.reset()
                fwd = torch.compile(model) if mode == "compile" else model
                report(case="prefill", mode=mode, variant=variant, tokens=a.tokens,
                       us=timed_us(lambda: fwd(ids, use_cache=False), a.device, a.min_time))
                cache = model(prompt, use_cache=True).past_key_values

                def decode():  # one step, its keys cropped back out of the cache after it
                    fwd(step, past_key_values=cache, use_cache=True)
                    cache.crop(-1)
                report(case="decode", mode=mode, variant=variant, tokens=a.batch,
                       us=timed_us(decode, a.device, a.min_time))
                if variant != "unpatched":
                    qt.unpatch(model)
    if a.json_out:
        with open(a.json_out, "a") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    main()
