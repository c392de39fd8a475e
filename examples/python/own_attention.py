"""Bring your own attention: snapkv's caches fed from your own model code with numpy arrays.

A toy one-layer "model" with random projections runs a prompt in chunks, then decodes; the
caches keep 64 rows per KV head (SnapKV with the real window queries) in 2 bits (KIVI).

    python3 examples/python/own_attention.py
"""

import numpy as np

import snapkv

n_layers, n_heads, n_kv_heads, head_dim = 2, 8, 2, 64
window = 16
rng = np.random.default_rng(0)
caches = snapkv.build_caches((n_layers, n_heads, n_kv_heads, head_dim),
                             snapkv.builder(method="snapkv+kivi2", budget=64, window=window))


def qkv(s):
    """Your model's rotated q [n_heads, S, d] and k, v [n_kv_heads, S, d] (float32)."""
    q = rng.standard_normal((n_heads, s, head_dim), dtype=np.float32)
    k = rng.standard_normal((n_kv_heads, s, head_dim), dtype=np.float32)
    v = rng.standard_normal((n_kv_heads, s, head_dim), dtype=np.float32)
    return q, k, v


for chunk in [256, 256, 100]:  # the prompt, in chunks
    for layer in range(n_layers):
        q, k, v = qkv(chunk)
        out = caches[layer].attend(q, k, v)  # [n_heads, chunk, d]: your layer's attention output
        caches[layer].update(k, v, np.ascontiguousarray(q[:, -window:, :]))
caches.end_prompt()  # compress once, at the end of the prompt
print("after the prompt:", caches.stats())

for step in range(4):  # decode: one token at a time, appended, never evicted
    for layer in range(n_layers):
        q, k, v = qkv(1)
        out = caches[layer].attend(q, k, v)
        caches[layer].update(k, v)
st = caches.stats()
print("after 4 decode steps:", st)
print("layer 0, KV head 0 keeps positions", caches[0].kept_positions(0)[:12], "...")
assert st["tokens_seen"] == 616 and st["tokens_kept"] == 68
assert st["bytes_stored"] < st["bytes_full_fp16"] / 5
