#!/usr/bin/python3
"""Greedy tokens of `snapkv run` vs llama.cpp's llama-simple on a llama-quantize'd random model.

Writes a random-weight F32 Llama GGUF (the SentencePiece vocabulary of models/snapkv-tiny4.gguf,
width 256, 2 layers, feed-forward 512, 4 heads / 2 KV heads), quantizes it with llama.cpp's
llama-quantize to each requested file type, and generates N tokens greedily from the same prompt
with both engines. Prints, per file type, the generated text of each and the length of the common
prefix (in characters). Nothing is committed; llama.cpp is only run beside the project.

Note: for K-quant weights ggml's CPU backend quantizes the activations to 8 bits (Q8_K) before the
dot products, while snapkv multiplies fp32 activations with the dequantized weights, so logits
differ at the ~1e-2 relative level and a near-tie can flip a greedy token on a random model.

    /usr/bin/python3 tools/kquant_e2e.py --snapkv build/snapkv [--types Q4_K_M,Q6_K] [-n 24]
"""

import argparse
import os
import subprocess
import sys
import tempfile
import types


def import_gguf(path):
    try:
        import sentencepiece  # noqa: F401
    except ImportError:
        stub = types.ModuleType("sentencepiece")
        stub.SentencePieceProcessor = object
        sys.modules["sentencepiece"] = stub
    sys.path.insert(0, path)
    import gguf  # noqa: E402

    return gguf


def field_value(f):
    from gguf import GGUFValueType

    if f.types[0] == GGUFValueType.ARRAY:
        if f.types[1] == GGUFValueType.STRING:
            return [bytes(f.parts[i]).decode("utf-8") for i in f.data]
        return [f.parts[i][0].item() for i in f.data]
    if f.types[0] == GGUFValueType.STRING:
        return bytes(f.parts[f.data[0]]).decode("utf-8")
    return f.parts[f.data[0]][0].item()


def write_model(gguf, np, vocab_src, path, seed):
    src = gguf.GGUFReader(vocab_src)
    tokens = field_value(src.fields["tokenizer.ggml.tokens"])
    scores = field_value(src.fields["tokenizer.ggml.scores"])
    ttypes = field_value(src.fields["tokenizer.ggml.token_type"])
    n_vocab, n_embd, n_ff, n_layer, n_head, n_kv = len(tokens), 256, 512, 2, 4, 2
    hd = n_embd // n_head
    rng = np.random.default_rng(seed)
    w = gguf.GGUFWriter(path, "llama")
    w.add_name("kquant-e2e")
    w.add_context_length(512)
    w.add_embedding_length(n_embd)
    w.add_block_count(n_layer)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_kv)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(hd)
    w.add_rope_freq_base(10000.0)
    w.add_vocab_size(n_vocab)
    w.add_file_type(0)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(ttypes)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)

    def mat(rows, cols, std):
        return (rng.standard_normal((rows, cols)) * std).astype(np.float32)

    w.add_tensor("token_embd.weight", mat(n_vocab, n_embd, 1.0))
    w.add_tensor("output_norm.weight", np.ones(n_embd, dtype=np.float32))
    w.add_tensor("output.weight", mat(n_vocab, n_embd, 0.5))
    for i in range(n_layer):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", np.ones(n_embd, dtype=np.float32))
        w.add_tensor(p + "attn_q.weight", mat(n_head * hd, n_embd, n_embd ** -0.5))
        w.add_tensor(p + "attn_k.weight", mat(n_kv * hd, n_embd, n_embd ** -0.5))
        w.add_tensor(p + "attn_v.weight", mat(n_kv * hd, n_embd, n_embd ** -0.5))
        w.add_tensor(p + "attn_output.weight", mat(n_embd, n_head * hd, n_embd ** -0.5))
        w.add_tensor(p + "ffn_norm.weight", np.ones(n_embd, dtype=np.float32))
        w.add_tensor(p + "ffn_gate.weight", mat(n_ff, n_embd, n_embd ** -0.5))
        w.add_tensor(p + "ffn_up.weight", mat(n_ff, n_embd, n_embd ** -0.5))
        w.add_tensor(p + "ffn_down.weight", mat(n_embd, n_ff, n_ff ** -0.5))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def write_f32_twin(gguf, np, src_path, path):
    """The same model with every tensor replaced by gguf-py's dequantization, stored as F32."""
    r = gguf.GGUFReader(src_path)
    w = gguf.GGUFWriter(path, "llama")
    for name, f in r.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue
        w.add_key_value(name, field_value(f), f.types[0])  # array element types are inferred
    for t in r.tensors:
        values = gguf.quants.dequantize(np.asarray(t.data), t.tensor_type).astype(np.float32)
        w.add_tensor(t.name, values.reshape([int(d) for d in reversed(t.shape)]))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def generate(args, env, path):
    ours = subprocess.run([args.snapkv, "run", "--model", path, "--prompt", args.prompt,
                           "--max-tokens", str(args.n), "--temperature", "0", "--quiet",
                           "--threads", "1"], check=True, capture_output=True).stdout
    theirs = subprocess.run([os.path.join(args.llama_bin, "llama-simple"), "-m", path,
                             "-n", str(args.n), args.prompt],
                            check=True, env=env, capture_output=True).stdout
    # raw bytes: a random model emits byte tokens that need not form valid UTF-8
    prompt = args.prompt.encode()
    ours = ours.split(b"\n[stats]")[0].strip()
    theirs = theirs.strip()
    for prefix in (b"<s>", b" ", prompt):
        if theirs.startswith(prefix):
            theirs = theirs[len(prefix):]
        if ours.startswith(prefix):
            ours = ours[len(prefix):]
    return ours.strip(), theirs.strip()


def verdict(a, b):
    return "IDENTICAL" if a == b else f"differ after {common_prefix(a, b)} common bytes"


def common_prefix(a, b):
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--snapkv", default="build/snapkv")
    ap.add_argument("--llama-bin", default="/work/llama.cpp/build/bin")
    ap.add_argument("--gguf-py", default="/work/llama.cpp/gguf-py")
    ap.add_argument("--vocab", default="models/snapkv-tiny4.gguf")
    ap.add_argument("--types", default="F32,Q8_0,Q4_K_M,Q6_K,Q5_K_M,Q3_K_M,Q2_K,Q4_0")
    ap.add_argument("--prompt", default="The quick brown fox jumps over the lazy dog because")
    ap.add_argument("-n", type=int, default=24)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--keep", help="directory to keep the generated files in")
    args = ap.parse_args()
    gguf = import_gguf(args.gguf_py)
    import numpy as np

    tmp = args.keep or tempfile.mkdtemp(prefix="kquant-e2e-")
    os.makedirs(tmp, exist_ok=True)
    f32 = os.path.join(tmp, "e2e-F32.gguf")
    write_model(gguf, np, args.vocab, f32, args.seed)
    env = dict(os.environ, LD_LIBRARY_PATH=args.llama_bin)
    for ftype in args.types.split(","):
        path = f32
        if ftype != "F32":
            path = os.path.join(tmp, f"e2e-{ftype}.gguf")
            subprocess.run([os.path.join(args.llama_bin, "llama-quantize"), f32, path, ftype, "1"],
                           check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        ours, theirs = generate(args, env, path)
        print(f"{ftype:8s} snapkv vs llama.cpp on the same file: {verdict(ours, theirs)}\n"
              f"  snapkv     : {ours!r}\n  llama.cpp  : {theirs!r}")
        if ftype != "F32" and ours != theirs:
            # llama.cpp on an F32 twin (gguf-py's dequantization, equal to ours bit for bit)
            # multiplies exact weights with fp32 activations, as snapkv does.
            twin = os.path.join(tmp, f"e2e-{ftype}-as-F32.gguf")
            write_f32_twin(gguf, np, path, twin)
            _, theirs_twin = generate(args, env, twin)
            print(f"  llama.cpp on its F32 twin: {theirs_twin!r}\n"
                  f"  snapkv on {ftype} vs llama.cpp on the F32 twin: "
                  f"{verdict(ours, theirs_twin)}")


if __name__ == "__main__":
    main()
