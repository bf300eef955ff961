# SPDX-License-Identifier: Apache-2.0
# examples/quickstart_numpy.py: the same prologue on NumPy arrays (pip install . first, or PYTHONPATH=python)
import numpy as np
import qkvfuse

T, NQ, NKV, D = 4, 4, 2, 64
qkv = np.random.default_rng(0).standard_normal((T, (NQ + 2 * NKV) * D), dtype=np.float32)
norm_w = np.ones(D, np.float32)
cos_sin_cache = qkvfuse.build_cos_sin_cache(256, D, theta=1e6)     # [max_pos, D] float32
k_cache = np.zeros((2, 8, NKV, D), np.float32)                     # paged: [blocks, block_size, Nkv, D]
v_cache = np.zeros_like(k_cache)
out = qkvfuse.run(qkv, num_q_heads=NQ, num_kv_heads=NKV, head_dim=D, q_gamma=norm_w, k_gamma=norm_w,
                  cos_sin_cache=cos_sin_cache, positions=np.arange(100, 100 + T),
                  k_cache=k_cache, v_cache=v_cache, slot_mapping=np.arange(8, 8 + T))
rms = np.sqrt((out.q.reshape(T, NQ, D) ** 2).mean(-1))           # RMSNorm (weights 1), then a rotation
assert np.allclose(rms, 1, atol=1e-5) and np.array_equal(v_cache[1, :T].reshape(T, -1), qkv[:, (NQ + NKV) * D:])
print("numpy: q", out.q.shape, out.q.dtype, "| every head's RMS is 1, v is in cache block 1")
