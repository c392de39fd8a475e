#!/usr/bin/python3
"""A random-weight raw model export (config.json, tokenizer.json, tensors/*.npy) of a chosen Llama
shape, for `snapkv convert --type q8_0` to turn into a GGUF for speed measurements (e.g.
scripts/serve_batch_throughput.py). Not a fixture: nothing is committed.

The tokenizer is the golden test export's 300-piece SentencePiece vocabulary
(tests/model/data/golden/tokenizer.json), so the vocabulary and the output matrix are small: the
defaults are the layers of tools/make_big_random_model.py's 0.73B shape (16 layers, n_embd 1536,
12 query / 4 KV heads, n_ff 6144: 0.55e9 parameters) without its 56000-piece embedding and
output. Weights are normal with standard deviation 1/sqrt(fan_in), norms 1, seeded; tensors are
written one at a time. Needs numpy (Debian's python3-numpy) and disk for the fp32 export (2.2 GB
at the defaults).

Run:  /usr/bin/python3 tools/make_random_export.py OUT_DIR [--layers N] [--embd N] [--ff N]
      build/snapkv convert --in OUT_DIR --out big.gguf --type q8_0
"""
import argparse
import json
import os
import shutil

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GOLDEN = os.path.join(ROOT, "tests", "model", "data", "golden")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--embd", type=int, default=1536)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--kv-heads", type=int, default=4)
    ap.add_argument("--ff", type=int, default=6144)
    ap.add_argument("--ctx", type=int, default=4096)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    hd = a.embd // a.heads
    with open(os.path.join(GOLDEN, "config.json")) as f:
        vocab = json.load(f)["vocab_size"]
    os.makedirs(os.path.join(a.out, "tensors"), exist_ok=True)
    shutil.copy(os.path.join(GOLDEN, "tokenizer.json"), os.path.join(a.out, "tokenizer.json"))
    config = {"architecture": "llama", "name": "snapkv-random-%dL-%d" % (a.layers, a.embd),
              "context_length": a.ctx, "embedding_length": a.embd, "block_count": a.layers,
              "feed_forward_length": a.ff, "head_count": a.heads, "head_count_kv": a.kv_heads,
              "rope_freq_base": 10000.0, "rms_norm_eps": 1e-5, "vocab_size": vocab}
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(config, f, indent=1)
    rng = np.random.default_rng(a.seed)

    def save(name, shape, std):
        x = np.ones(shape, np.float32) if std is None else (
            rng.standard_normal(shape, dtype=np.float32) * np.float32(std))
        np.save(os.path.join(a.out, "tensors", name + ".npy"), x)

    save("token_embd.weight", (vocab, a.embd), 1.0)
    save("output.weight", (vocab, a.embd), 1.0 / np.sqrt(a.embd))
    save("output_norm.weight", (a.embd,), None)
    for i in range(a.layers):
        p = "blk.%d." % i
        save(p + "attn_norm.weight", (a.embd,), None)
        save(p + "ffn_norm.weight", (a.embd,), None)
        save(p + "attn_q.weight", (a.heads * hd, a.embd), 1.0 / np.sqrt(a.embd))
        save(p + "attn_k.weight", (a.kv_heads * hd, a.embd), 1.0 / np.sqrt(a.embd))
        save(p + "attn_v.weight", (a.kv_heads * hd, a.embd), 1.0 / np.sqrt(a.embd))
        save(p + "attn_output.weight", (a.embd, a.heads * hd), 1.0 / np.sqrt(a.heads * hd))
        save(p + "ffn_gate.weight", (a.ff, a.embd), 1.0 / np.sqrt(a.embd))
        save(p + "ffn_up.weight", (a.ff, a.embd), 1.0 / np.sqrt(a.embd))
        save(p + "ffn_down.weight", (a.embd, a.ff), 1.0 / np.sqrt(a.ff))


if __name__ == "__main__":
    main()
