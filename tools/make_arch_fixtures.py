#!/usr/bin/python3
"""Random-weight GGUF fixtures for every architecture the engine runs, with float64 references.

For each fixture below this writes, under tests/model/data/arch/<name>/:
  model.gguf      a random-weight model in the tensor layout and key set that llama.cpp's
                  converter (convert_hf_to_gguf.py) writes for the architecture: tensor names and
                  ggml shapes, 1-D tensors F32, matrices F32 or F16, the <arch>.* keys the converter
                  sets (llama: vocab_size, rope.dimension_count, rope.scaling.*; qwen3:
                  attention.key_length / value_length), rope_freqs.weight computed with the Llama
                  3.1 formula, tied output (no output.weight) where the real family ties it. The
                  vocabulary is a small SentencePiece-style one of our own (3 specials, 256 byte
                  tokens, made-up pieces): the architectures are what is tested here, not a
                  tokenizer.
  logits.npy      [T + N][V] float64 reference (rounded to f32) of the prompt (T tokens) followed by
                  its greedy continuation (N tokens), weights exactly as stored in model.gguf.
  reference.json  prompt, greedy continuation (float64 argmax, each step re-run from scratch), the
                  top-1/top-2 margins, max |logit|, the longest dot product of the forward pass,
                  and max_diff_kv16: the deviation of the same reference with keys and values
                  rounded to fp16 after RoPE (what the cache stores).

The reference is an independent numpy implementation written from the architecture description
(model/arch.h), not from the C++ engine:
  x = embd[tokens]; per layer: h = rmsnorm(x) * attn_norm; q, k, v = h Wq^T + bq, h Wk^T + bk,
  h Wv^T + bv (biases where the file has them); qwen3: q, k = rmsnorm(q_head) * q_norm,
  rmsnorm(k_head) * k_norm per head; RoPE: theta_i = pos * freq_scale * base^(-2i/n_rot) /
  factor_i, NORM pairs (2i, 2i+1) for llama, NEOX pairs (i, i + n_rot/2) for qwen2/qwen3;
  causal softmax attention, query head h reads KV head h // (n_heads / n_kv_heads), scale
  1/sqrt(head_dim); x += attn Wo^T (+ bo); h = rmsnorm(x) * ffn_norm;
  x += (silu(h Wg^T) * (h Wu^T)) Wd^T; logits = (rmsnorm(x) * output_norm) Wout^T.

Run:  PYTHONPATH=/work/llama.cpp/gguf-py /usr/bin/python3 tools/make_arch_fixtures.py [--out DIR]
Deterministic (fixed seeds); rerunning rewrites the same files. tools/llama_cpp_logits.py then
adds llama.cpp's own logits for the fixtures llama.cpp (Feb 2025) can run.
"""
import argparse
import json
import math
import os

import numpy as np

try:
    import gguf
except ImportError as e:  # pragma: no cover - a usage error, not a test
    raise SystemExit("needs llama.cpp's gguf-py: PYTHONPATH=/work/llama.cpp/gguf-py") from e

PROMPT_LEN, N_GREEDY = 48, 8

# One entry per fixture. head_dim None = n_embd / n_heads (no key_length key written).
FIXTURES = [
    # Llama 3.2-style: GQA, base 500000, Llama 3.1 rope_freqs, tied embeddings, F32.
    dict(name="llama3", arch="llama", n_layers=2, n_embd=128, n_heads=4, n_kv=2, head_dim=None,
         n_ff=256, n_vocab=512, n_ctx=2048, rope_base=500000.0, rms_eps=1e-5, dtype="f32",
         tied=True, qkv_bias=False, qk_norm=False, llama3_rope=dict(
             factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0, original_ctx=8192),
         linear_scaling=None, seed=31),
    # Llama 2-style: MHA, base 10000, linear RoPE scaling (factor 4), separate output, F32.
    dict(name="llama2_linear", arch="llama", n_layers=2, n_embd=64, n_heads=4, n_kv=4,
         head_dim=None, n_ff=128, n_vocab=512, n_ctx=1024, rope_base=10000.0, rms_eps=1e-6,
         dtype="f32", tied=False, qkv_bias=False, qk_norm=False, llama3_rope=None,
         linear_scaling=4.0, seed=32),
    # Qwen 2.5-style: GQA, q/k/v biases, NEOX, base 1e6, separate output, F32.
    dict(name="qwen2", arch="qwen2", n_layers=2, n_embd=128, n_heads=4, n_kv=2, head_dim=None,
         n_ff=256, n_vocab=512, n_ctx=4096, rope_base=1000000.0, rms_eps=1e-6, dtype="f32",
         tied=False, qkv_bias=True, qk_norm=False, llama3_rope=None, linear_scaling=None,
         seed=33),
    # Qwen 3-style: GQA, head_dim 64 != n_embd / n_heads (key_length), q/k RMSNorm, NEOX,
    # tied embeddings, F16 matrices.
    dict(name="qwen3", arch="qwen3", n_layers=2, n_embd=128, n_heads=4, n_kv=2, head_dim=64,
         n_ff=256, n_vocab=512, n_ctx=4096, rope_base=1000000.0, rms_eps=1e-6, dtype="f16",
         tied=True, qkv_bias=False, qk_norm=True, llama3_rope=None, linear_scaling=None,
         seed=34),
]


def head_dim(spec):
    return spec["head_dim"] or spec["n_embd"] // spec["n_heads"]


def make_vocab(n_vocab, rng):
    """SentencePiece-style: <unk> <s> </s>, 256 byte tokens, then made-up pieces."""
    tokens = ["<unk>", "<s>", "</s>"] + ["<0x%02X>" % b for b in range(256)]
    types = [2, 3, 3] + [6] * 256
    letters = "abcdefghijklmnopqrstuvwxyz"
    seen = set(tokens)
    while len(tokens) < n_vocab:
        n = int(rng.integers(1, 6))
        piece = "".join(letters[int(i)] for i in rng.integers(0, 26, size=n))
        if rng.random() < 0.5:
            piece = "\u2581" + piece
        if piece not in seen:
            seen.add(piece)
            tokens.append(piece)
            types.append(1)
    scores = [0.0] * 259 + [-float(i) for i in range(n_vocab - 259)]
    return tokens, scores, types


def llama3_rope_factors(spec):
    """The Llama 3.1 frequency factors, as llama.cpp's converter computes rope_freqs.weight."""
    p = spec["llama3_rope"]
    hd = head_dim(spec)
    freqs = 1.0 / (np.float32(spec["rope_base"]) ** (np.arange(0, hd, 2, dtype=np.float32) / hd))
    low_wavelen = p["original_ctx"] / p["low_freq_factor"]
    high_wavelen = p["original_ctx"] / p["high_freq_factor"]
    out = []
    for f in freqs:
        wavelen = 2 * math.pi / float(f)
        if wavelen < high_wavelen:
            out.append(1.0)
        elif wavelen > low_wavelen:
            out.append(p["factor"])
        else:
            smooth = (p["original_ctx"] / wavelen - p["low_freq_factor"]) / (
                p["high_freq_factor"] - p["low_freq_factor"])
            out.append(1.0 / ((1 - smooth) / p["factor"] + smooth))
    return np.array(out, dtype=np.float32)


def make_weights(spec):
    """name -> numpy array in GGUF layout (matrices [rows][cols] = ggml ne reversed), stored
    dtype (f32 vectors; f32 or f16 matrices)."""
    rng = np.random.default_rng(spec["seed"])
    E, F, V = spec["n_embd"], spec["n_ff"], spec["n_vocab"]
    hd = head_dim(spec)
    qd, kvd = spec["n_heads"] * hd, spec["n_kv"] * hd
    mdt = np.float16 if spec["dtype"] == "f16" else np.float32

    def mat(rows, cols, gain=1.0):
        return (rng.standard_normal((rows, cols)) * gain / math.sqrt(cols)).astype(mdt)

    def vec(n, center=1.0, spread=0.2):
        return (center + spread * rng.standard_normal(n)).astype(np.float32)

    # A tied embedding doubles as the output matrix: scaled like one (std 2/sqrt(E)) so that the
    # logits stay moderate and the greedy continuation is not the input token repeated.
    embd_std = 2.0 / math.sqrt(E) if spec["tied"] else 1.0
    w = {"token_embd.weight": (rng.standard_normal((V, E)) * embd_std).astype(mdt),
         "output_norm.weight": vec(E)}
    if not spec["tied"]:
        w["output.weight"] = mat(V, E, 2.0)
    if spec["llama3_rope"] is not None:
        w["rope_freqs.weight"] = llama3_rope_factors(spec)
    for l in range(spec["n_layers"]):
        p = "blk.%d." % l
        w[p + "attn_norm.weight"] = vec(E)
        w[p + "attn_q.weight"] = mat(qd, E, 2.0)
        w[p + "attn_k.weight"] = mat(kvd, E, 2.0)
        w[p + "attn_v.weight"] = mat(kvd, E)
        w[p + "attn_output.weight"] = mat(E, qd)
        if spec["qkv_bias"]:
            w[p + "attn_q.bias"] = vec(qd, 0.0, 0.5)
            w[p + "attn_k.bias"] = vec(kvd, 0.0, 0.5)
            w[p + "attn_v.bias"] = vec(kvd, 0.0, 0.2)
        if spec["qk_norm"]:
            w[p + "attn_q_norm.weight"] = vec(hd, 1.0, 0.3)
            w[p + "attn_k_norm.weight"] = vec(hd, 1.0, 0.3)
        w[p + "ffn_norm.weight"] = vec(E)
        w[p + "ffn_gate.weight"] = mat(F, E)
        w[p + "ffn_up.weight"] = mat(F, E)
        w[p + "ffn_down.weight"] = mat(E, F)
    return w


def rmsnorm(x, weight, eps):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * weight


def rope(x, positions, spec, factors):
    """x [T][H][hd] float64, rotated in place of a copy."""
    hd = x.shape[-1]
    n_rot = hd
    half = n_rot // 2
    i = np.arange(half, dtype=np.float64)
    inv_freq = spec["rope_base"] ** (-2.0 * i / n_rot)
    if spec["linear_scaling"]:
        inv_freq = inv_freq / spec["linear_scaling"]
    if factors is not None:
        inv_freq = inv_freq / factors.astype(np.float64)
    theta = positions.astype(np.float64)[:, None] * inv_freq[None, :]  # [T][half]
    cos, sin = np.cos(theta)[:, None, :], np.sin(theta)[:, None, :]
    out = x.copy()
    if spec["arch"] == "llama":  # NORM: adjacent pairs
        x0, x1 = x[..., 0:n_rot:2], x[..., 1:n_rot:2]
        out[..., 0:n_rot:2] = x0 * cos - x1 * sin
        out[..., 1:n_rot:2] = x0 * sin + x1 * cos
    else:  # NEOX: pairs (i, i + half)
        x0, x1 = x[..., :half], x[..., half:n_rot]
        out[..., :half] = x0 * cos - x1 * sin
        out[..., half:n_rot] = x0 * sin + x1 * cos
    return out


def fp16_round(a):
    return a.astype(np.float16).astype(np.float64)


def forward(spec, w64, tokens, kv16=False, act=None):
    """float64 logits [T][V] of the whole sequence. act(x, name), when given, replaces each
    weight product's input x before it meets weight `name` (tools/make_quant_arch_fixtures.py
    rounds it there as llama.cpp quantizes activations)."""
    def mm(x, name):
        return (x if act is None else act(x, name)) @ w64[name].T

    T = len(tokens)
    H, KV, hd, eps = spec["n_heads"], spec["n_kv"], head_dim(spec), spec["rms_eps"]
    pos = np.arange(T)
    factors = w64.get("rope_freqs.weight")
    x = w64["token_embd.weight"][np.array(tokens)]
    mask = np.triu(np.ones((T, T), dtype=bool), k=1)
    group = H // KV
    for l in range(spec["n_layers"]):
        p = "blk.%d." % l
        h = rmsnorm(x, w64[p + "attn_norm.weight"], eps)
        q = mm(h, p + "attn_q.weight")
        k = mm(h, p + "attn_k.weight")
        v = mm(h, p + "attn_v.weight")
        if spec["qkv_bias"]:
            q, k, v = q + w64[p + "attn_q.bias"], k + w64[p + "attn_k.bias"], v + w64[p + "attn_v.bias"]
        q, k, v = q.reshape(T, H, hd), k.reshape(T, KV, hd), v.reshape(T, KV, hd)
        if spec["qk_norm"]:
            q = rmsnorm(q, w64[p + "attn_q_norm.weight"], eps)
            k = rmsnorm(k, w64[p + "attn_k_norm.weight"], eps)
        q, k = rope(q, pos, spec, factors), rope(k, pos, spec, factors)
        if kv16:
            k, v = fp16_round(k), fp16_round(v)
        out = np.empty((T, H, hd))
        for head in range(H):
            kv = head // group
            s = (q[:, head, :] @ k[:, kv, :].T) / math.sqrt(hd)
            s = np.where(mask, -np.inf, s)
            s = np.exp(s - s.max(-1, keepdims=True))
            s /= s.sum(-1, keepdims=True)
            out[:, head, :] = s @ v[:, kv, :]
        x = x + mm(out.reshape(T, H * hd), p + "attn_output.weight")
        h = rmsnorm(x, w64[p + "ffn_norm.weight"], eps)
        gate = mm(h, p + "ffn_gate.weight")
        up = mm(h, p + "ffn_up.weight")
        x = x + mm(gate / (1.0 + np.exp(-gate)) * up, p + "ffn_down.weight")
    x = rmsnorm(x, w64["output_norm.weight"], eps)
    return mm(x, "token_embd.weight" if spec["tied"] else "output.weight")


def write_gguf(path, spec, w, vocab):
    arch = spec["arch"]
    writer = gguf.GGUFWriter(path, arch)
    # Keys in the order and with the types the converter writes them.
    writer.add_name("snapkv-fixture-" + spec["name"])
    writer.add_block_count(spec["n_layers"])
    writer.add_context_length(spec["n_ctx"])
    writer.add_embedding_length(spec["n_embd"])
    writer.add_feed_forward_length(spec["n_ff"])
    writer.add_head_count(spec["n_heads"])
    writer.add_head_count_kv(spec["n_kv"])
    writer.add_rope_freq_base(spec["rope_base"])
    writer.add_layer_norm_rms_eps(spec["rms_eps"])
    if spec["head_dim"] is not None:
        writer.add_key_length(spec["head_dim"])
        writer.add_value_length(spec["head_dim"])
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16 if spec["dtype"] == "f16"
                         else gguf.LlamaFileType.ALL_F32)
    if arch == "llama":
        writer.add_vocab_size(spec["n_vocab"])
        writer.add_rope_dimension_count(head_dim(spec))
        if spec["linear_scaling"]:
            writer.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
            writer.add_rope_scaling_factor(spec["linear_scaling"])
    tokens, scores, types = vocab
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores(scores)
    writer.add_token_types(types)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_unk_token_id(0)
    writer.add_add_bos_token(True)
    writer.add_add_eos_token(False)
    for name, t in w.items():
        writer.add_tensor(name, np.ascontiguousarray(t))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def build(spec, out_root):
    out = os.path.join(out_root, spec["name"])
    os.makedirs(out, exist_ok=True)
    w = make_weights(spec)
    vocab = make_vocab(spec["n_vocab"], np.random.default_rng(spec["seed"] + 1000))
    write_gguf(os.path.join(out, "model.gguf"), spec, w, vocab)
    w64 = {k: v.astype(np.float64) for k, v in w.items()}

    # A prompt whose greedy continuation is robust: every step's top-1/top-2 margin under fp16 K/V
    # must exceed three times the fp16-K/V deviation plus ten times the fp32 bound (the test's
    # bounds on the engine), and the continuation must not be one token repeated.
    V = spec["n_vocab"]
    n_dot = max(spec["n_ff"], spec["n_embd"], spec["n_heads"] * head_dim(spec),
                PROMPT_LEN + N_GREEDY)
    for prompt_seed in range(200):
        rng = np.random.default_rng(1000 * spec["seed"] + prompt_seed)
        prompt = [1] + [int(t) for t in rng.integers(3, V, size=PROMPT_LEN - 1)]
        seq, margins, margins16 = list(prompt), [], []
        for _ in range(N_GREEDY):
            last = forward(spec, w64, seq)[-1]
            last16 = forward(spec, w64, seq, kv16=True)[-1]
            top, top16 = np.sort(last)[-2:], np.sort(last16)[-2:]
            margins.append(float(top[1] - top[0]))
            margins16.append(float(top16[1] - top16[0]))
            if int(np.argmax(last16)) != int(np.argmax(last)):
                break
            seq.append(int(np.argmax(last)))
        if len(seq) != len(prompt) + N_GREEDY or len(set(seq[len(prompt):])) < 3:
            continue
        logits = forward(spec, w64, seq)
        logits16 = forward(spec, w64, seq, kv16=True)
        dev16 = float(np.abs(logits - logits16).max())
        tol32 = 2.0 * n_dot * np.finfo(np.float32).eps * float(np.abs(logits).max())
        if min(margins16) > 3.0 * dev16 + 10.0 * tol32:
            break
    else:
        raise SystemExit("no prompt with a robust greedy continuation for " + spec["name"])

    hd = head_dim(spec)
    np.save(os.path.join(out, "logits.npy"), np.ascontiguousarray(logits.astype(np.float32)))
    reference = {
        "name": spec["name"], "arch": spec["arch"], "dtype": spec["dtype"],
        "prompt": prompt, "greedy": seq[len(prompt):],
        "greedy_margins": margins, "greedy_margins_kv16": margins16,
        "max_abs_logit": float(np.abs(logits).max()),
        "max_diff_kv16": dev16,
        # The longest dot product of the forward pass (for the a-priori fp32 error bound).
        "n_dot_max": int(n_dot),
        "n_layers": spec["n_layers"], "n_embd": spec["n_embd"], "n_heads": spec["n_heads"],
        "n_kv_heads": spec["n_kv"], "head_dim": hd, "n_ff": spec["n_ff"], "n_vocab": V,
        "tied_output": spec["tied"], "rope_freqs": spec["llama3_rope"] is not None,
        "linear_scaling": spec["linear_scaling"] or 1.0,
        "note": "written by tools/make_arch_fixtures.py; float64 numpy reference, not our engine",
    }
    with open(os.path.join(out, "reference.json"), "w") as f:
        json.dump(reference, f, indent=1)
    return reference


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                                  "tests", "model", "data", "arch"))
    ap.add_argument("--only", default="", help="comma-separated fixture names (default: all)")
    args = ap.parse_args()
    only = set(filter(None, args.only.split(",")))
    for spec in FIXTURES:
        if only and spec["name"] not in only:
            continue
        r = build(spec, os.path.abspath(args.out))
        print("%-14s greedy %s  min margin %.3f (kv16 %.3f)  max|logit| %.2f  kv16 dev %.2e" % (
            r["name"], r["greedy"], min(r["greedy_margins"]), min(r["greedy_margins_kv16"]),
            r["max_abs_logit"], r["max_diff_kv16"]))


if __name__ == "__main__":
    main()
