#!/usr/bin/python3
"""Regenerates the llama.cpp-quantized fixtures under tests/gguf/data/kquant/.

Writes a small random-weight F32 Llama GGUF with llama.cpp's gguf-py (one layer, width 256,
feed-forward 256, 256-row tied embedding, no tokenizer: llama-quantize does not read one), has
llama.cpp's own `llama-quantize` convert it to each file type people download, and records what
llama.cpp's gguf-py dequantizes from the result:

  tiny-<FTYPE>.gguf        the quantized file exactly as llama-quantize wrote it
  tiny-<FTYPE>.rows.npy    float32 [n_matrices][3][256]: rows 0, 1 and the last row of every
                           2-D tensor, in file order, dequantized by gguf.quants.dequantize
  tiny-<FTYPE>.types.npy   float32 [n_matrices]: the ggml type id of each of those tensors

  random-blocks.gguf       one [4][512] tensor per type (Q4_0, Q8_0, Q2_K .. Q6_K, BF16) of
                           random bytes (every bit pattern of scales and quants; only the fp16
                           super-scales are drawn finite), written by gguf-py
  random-blocks.rows.npy   float32 [n_types][4][512]: gguf-py's dequantization of each tensor

tests/gguf/gguf_llama_fixtures_test.cpp reads each file with our reader and compares our
dequantization (reference and fast path) to those rows bit for bit: both evaluate the same fp32
expression per weight.

Needs llama.cpp built beside the project (never committed) and Debian's python3-numpy:
    /usr/bin/python3 tools/make_kquant_fixtures.py [--llama-bin /work/llama.cpp/build/bin]
        [--gguf-py /work/llama.cpp/gguf-py]
With --random-only, only random-blocks.* are written (no llama.cpp binaries needed).
Deterministic for a given llama.cpp (numpy seed fixed; llama-quantize is deterministic).
"""

import argparse
import os
import subprocess
import sys
import tempfile
import types

OUT_DIR = os.path.join("tests", "gguf", "data", "kquant")
FTYPES = ["Q4_K_M", "Q5_K_M", "Q6_K", "Q2_K", "Q3_K_M", "Q8_0", "Q4_0", "BF16"]
N_EMBD, N_FF, N_VOCAB, N_HEAD, N_HEAD_KV = 256, 256, 256, 4, 2


def import_gguf(path):
    # gguf-py imports sentencepiece for its vocab helpers, which this script does not use.
    try:
        import sentencepiece  # noqa: F401
    except ImportError:
        stub = types.ModuleType("sentencepiece")
        stub.SentencePieceProcessor = object
        sys.modules["sentencepiece"] = stub
    sys.path.insert(0, path)
    import gguf  # noqa: E402

    return gguf


def write_f32_model(gguf, np, path):
    rng = np.random.default_rng(20250201)
    w = gguf.GGUFWriter(path, "llama")
    w.add_name("kquant-fixture")
    w.add_context_length(256)
    w.add_embedding_length(N_EMBD)
    w.add_block_count(1)
    w.add_feed_forward_length(N_FF)
    w.add_head_count(N_HEAD)
    w.add_head_count_kv(N_HEAD_KV)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(N_EMBD // N_HEAD)
    w.add_vocab_size(N_VOCAB)
    w.add_file_type(0)
    head_dim = N_EMBD // N_HEAD

    def mat(rows, cols, scale):
        # heavier tails than a Gaussian in a few rows, so scales and mins vary between sub-blocks
        m = rng.standard_normal((rows, cols)).astype(np.float32) * scale
        m[::7] *= 4.0
        m[1::5] += np.float32(0.5 * scale)
        return m

    # numpy shape (rows, cols) = ggml ne {cols, rows}
    w.add_tensor("token_embd.weight", mat(N_VOCAB, N_EMBD, 0.05))
    w.add_tensor("output_norm.weight", np.ones(N_EMBD, dtype=np.float32))
    w.add_tensor("blk.0.attn_norm.weight", np.ones(N_EMBD, dtype=np.float32))
    w.add_tensor("blk.0.attn_q.weight", mat(N_HEAD * head_dim, N_EMBD, 0.06))
    w.add_tensor("blk.0.attn_k.weight", mat(N_HEAD_KV * head_dim, N_EMBD, 0.06))
    w.add_tensor("blk.0.attn_v.weight", mat(N_HEAD_KV * head_dim, N_EMBD, 0.06))
    w.add_tensor("blk.0.attn_output.weight", mat(N_EMBD, N_HEAD * head_dim, 0.06))
    w.add_tensor("blk.0.ffn_norm.weight", np.ones(N_EMBD, dtype=np.float32))
    w.add_tensor("blk.0.ffn_gate.weight", mat(N_FF, N_EMBD, 0.06))
    w.add_tensor("blk.0.ffn_up.weight", mat(N_FF, N_EMBD, 0.06))
    w.add_tensor("blk.0.ffn_down.weight", mat(N_EMBD, N_FF, 0.06))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def record(gguf, np, path, stem):
    reader = gguf.GGUFReader(path)
    rows, type_ids = [], []
    for t in reader.tensors:
        if len(t.shape) != 2:
            continue
        n_rows = int(t.shape[1])
        data = np.asarray(t.data)
        picked = data[[0, 1, n_rows - 1]]
        values = gguf.quants.dequantize(picked, t.tensor_type).astype(np.float32)
        assert values.shape == (3, N_EMBD), (t.name, values.shape)
        rows.append(values)
        type_ids.append(float(int(t.tensor_type)))
    np.save(stem + ".rows.npy", np.stack(rows).astype(np.float32))
    np.save(stem + ".types.npy", np.array(type_ids, dtype=np.float32))
    names = sorted({gguf.GGMLQuantizationType(int(i)).name for i in type_ids})
    print(f"{os.path.basename(path)}: {len(rows)} matrices, types {', '.join(names)}")


# byte offsets of the fp16 super-scales inside one block, per type
SCALE_OFFSETS = {"Q4_0": [0], "Q8_0": [0], "Q2_K": [80, 82], "Q3_K": [108], "Q4_K": [0, 2],
                 "Q5_K": [0, 2], "Q6_K": [208]}


def write_random_blocks(gguf, np):
    rng = np.random.default_rng(7)
    rows, cols = 4, 512
    path = os.path.join(OUT_DIR, "random-blocks.gguf")
    w = gguf.GGUFWriter(path, "none")
    values = []
    for name in ["Q4_0", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "BF16"]:
        qtype = gguf.GGMLQuantizationType[name]
        block_elems, block_bytes = gguf.GGML_QUANT_SIZES[qtype]
        n_blocks = rows * cols // block_elems
        if name == "BF16":
            f = (rng.standard_normal(rows * cols) * 0.1).astype(np.float32)
            raw = (f.view(np.uint32) >> 16).astype(np.uint16).view(np.uint8)
        else:
            raw = rng.integers(0, 256, size=(n_blocks, block_bytes), dtype=np.uint8)
            for off in SCALE_OFFSETS[name]:
                mag = np.exp2(rng.uniform(-12, -4, n_blocks)) * rng.choice([-1, 1], n_blocks)
                raw[:, off:off + 2] = mag.astype(np.float16).view(np.uint8).reshape(n_blocks, 2)
        raw = raw.reshape(rows, -1)
        w.add_tensor("w." + name.lower(), raw, raw_dtype=qtype)
        values.append(gguf.quants.dequantize(raw, qtype).astype(np.float32).reshape(rows, cols))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    np.save(os.path.join(OUT_DIR, "random-blocks.rows.npy"), np.stack(values))
    print(f"random-blocks.gguf: {len(values)} tensors")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--llama-bin", default="/work/llama.cpp/build/bin")
    ap.add_argument("--gguf-py", default="/work/llama.cpp/gguf-py")
    ap.add_argument("--random-only", action="store_true")
    args = ap.parse_args()
    gguf = import_gguf(args.gguf_py)
    import numpy as np

    os.makedirs(OUT_DIR, exist_ok=True)
    write_random_blocks(gguf, np)
    if args.random_only:
        return

    quantize = os.path.join(args.llama_bin, "llama-quantize")
    if not os.access(quantize, os.X_OK):
        sys.exit(f"llama-quantize not found at {quantize} (build llama.cpp first)")
    with tempfile.TemporaryDirectory() as tmp:
        f32 = os.path.join(tmp, "tiny-F32.gguf")
        write_f32_model(gguf, np, f32)
        for ftype in FTYPES:
            stem = os.path.join(OUT_DIR, "tiny-" + ftype)
            out = stem + ".gguf"
            subprocess.run([quantize, f32, out, ftype, "1"], check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            record(gguf, np, out, stem)


if __name__ == "__main__":
    main()
