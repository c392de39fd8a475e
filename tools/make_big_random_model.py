#!/usr/bin/python3
"""A large random-weight Llama-3-layout GGUF (default 0.73B parameters, F16) for load-time and RSS
measurements of the engine (`snapkv run` prints both). Not a fixture: nothing is committed.

Shape (defaults): llama, 16 layers, n_embd 1536, 12 query / 4 KV heads (head_dim 128), n_ff 6144,
vocabulary 56000 (made-up SentencePiece-style pieces), separate output.weight, Llama 3.1
rope_freqs.weight, base 500000: 0.726e9 parameters, 1.45 GB as F16. Tensors are generated and
written one at a time (streamed), so the script needs well under 1 GB of memory.

Run:  PYTHONPATH=/work/llama.cpp/gguf-py /usr/bin/python3 tools/make_big_random_model.py OUT.gguf
      [--layers N] [--embd N] [--ff N] [--vocab N] [--ctx N]
(--ctx sets llama.context_length, default 8192; scripts/bench_ttft.py's 16K case needs >= 16K
plus the question.)
"""
import argparse
import math
import os
import sys

import numpy as np

try:
    import gguf
except ImportError as e:  # pragma: no cover
    raise SystemExit("needs llama.cpp's gguf-py: PYTHONPATH=/work/llama.cpp/gguf-py") from e

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_arch_fixtures import llama3_rope_factors, make_vocab  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--embd", type=int, default=1536)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--kv-heads", type=int, default=4)
    ap.add_argument("--ff", type=int, default=6144)
    ap.add_argument("--vocab", type=int, default=56000)
    ap.add_argument("--ctx", type=int, default=8192, help="llama.context_length")
    args = ap.parse_args()
    E, F, V, H, KV = args.embd, args.ff, args.vocab, args.heads, args.kv_heads
    hd = E // H
    spec = {"rope_base": 500000.0, "head_dim": hd, "n_embd": E, "n_heads": H,
            "llama3_rope": dict(factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                                original_ctx=8192)}
    rng = np.random.default_rng(7)

    # (name, shape as numpy [rows][cols] or [n], kind) in the converter's order.
    plan = [("token_embd.weight", (V, E), "embd"), ("rope_freqs.weight", (hd // 2,), "freqs")]
    for l in range(args.layers):
        p = "blk.%d." % l
        plan += [(p + "attn_norm.weight", (E,), "norm"), (p + "attn_q.weight", (H * hd, E), "mat"),
                 (p + "attn_k.weight", (KV * hd, E), "mat"), (p + "attn_v.weight", (KV * hd, E), "mat"),
                 (p + "attn_output.weight", (E, H * hd), "mat"), (p + "ffn_norm.weight", (E,), "norm"),
                 (p + "ffn_gate.weight", (F, E), "mat"), (p + "ffn_up.weight", (F, E), "mat"),
                 (p + "ffn_down.weight", (E, F), "mat")]
    plan += [("output_norm.weight", (E,), "norm"), ("output.weight", (V, E), "mat")]

    def make(shape, kind):
        if kind == "freqs":
            return llama3_rope_factors(spec)
        if kind == "norm":
            return (1.0 + 0.1 * rng.standard_normal(shape, dtype=np.float32)).astype(np.float32)
        scale = 1.0 if kind == "embd" else 1.0 / math.sqrt(shape[1])
        return (rng.standard_normal(shape, dtype=np.float32) * np.float32(scale)).astype(np.float16)

    w = gguf.GGUFWriter(args.out, "llama")
    w.add_name("snapkv-random-%.2fB" % (sum(math.prod(s) for _, s, _ in plan) / 1e9))
    w.add_block_count(args.layers)
    w.add_context_length(args.ctx)
    w.add_embedding_length(E)
    w.add_feed_forward_length(F)
    w.add_head_count(H)
    w.add_head_count_kv(KV)
    w.add_rope_freq_base(spec["rope_base"])
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    w.add_vocab_size(V)
    w.add_rope_dimension_count(hd)
    tokens, scores, types = make_vocab(V, np.random.default_rng(8))
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_add_bos_token(True)
    for name, shape, kind in plan:
        dtype = np.float32 if kind in ("norm", "freqs") else np.float16
        w.add_tensor_info(name, shape, np.dtype(dtype), math.prod(shape) * np.dtype(dtype).itemsize)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for name, shape, kind in plan:
        w.write_tensor_data(make(shape, kind))
    w.close()
    n = sum(math.prod(s) for _, s, _ in plan)
    print("%s: %.3fB parameters, %.2f GB" % (args.out, n / 1e9, os.path.getsize(args.out) / 1e9))


if __name__ == "__main__":
    main()
