# SPDX-License-Identifier: Apache-2.0
# examples/quickstart_torch.py: the same prologue on PyTorch tensors, bfloat16 (device="cuda" works the same)
import torch
import qkvfuse

T, NQ, NKV, D, device = 4, 4, 2, 64, "cpu"
qkv = torch.randn(T, (NQ + 2 * NKV) * D, dtype=torch.bfloat16, device=device)
norm_w = torch.ones(D, dtype=torch.bfloat16, device=device)
cos_sin_cache = qkvfuse.build_cos_sin_cache(256, D, theta=1e6, dtype=torch.bfloat16, device=device)
k_cache = torch.zeros(2, 8, NKV, D, dtype=torch.bfloat16, device=device)   # paged: [blocks, block_size, Nkv, D]
v_cache = torch.zeros_like(k_cache)
out = qkvfuse.run(qkv, num_q_heads=NQ, num_kv_heads=NKV, head_dim=D, q_gamma=norm_w, k_gamma=norm_w,
                  cos_sin_cache=cos_sin_cache, positions=torch.arange(100, 100 + T, device=device),
                  k_cache=k_cache, v_cache=v_cache, slot_mapping=torch.arange(8, 8 + T, device=device))
rms = out.q.float().view(T, NQ, D).pow(2).mean(-1).sqrt()          # torch.ops.qkvfuse.run underneath
assert torch.allclose(rms, torch.ones_like(rms), atol=2e-2) and torch.equal(v_cache[1, :T].flatten(1), qkv[:, (NQ + NKV) * D:])
print("torch: q", tuple(out.q.shape), out.q.dtype, "| every head's RMS is 1 (to bf16), v is in cache block 1")
