#!/usr/bin/python3
"""Golden reference for the snapkv.cpp Llama engine (tests/model/golden_test.cpp).

Builds a tiny random-weight Llama (2 layers, 4 query heads / 2 KV heads, head_dim 16, a byte-style
vocabulary of 300 tokens), writes it in the project's raw export format (what `snapkv convert`
reads), and computes logits for a fixed token sequence with an independent float64 implementation
in torch (written from the architecture description, not from the C++ code):

  x = embd[tokens]; per layer: h = rmsnorm(x) * attn_norm; q, k, v = h Wq^T, h Wk^T, h Wv^T;
  RoPE NORM (adjacent pairs (x[2i], x[2i+1]) rotated by pos * base^(-2i/hd)); causal softmax
  attention, query head h reads KV head h // (n_heads / n_kv_heads), scale 1/sqrt(hd);
  x += attn Wo^T; h = rmsnorm(x) * ffn_norm; x += (silu(h Wg^T) * (h Wu^T)) Wd^T;
  logits = (rmsnorm(x) * output_norm) Wout^T.

Outputs in tests/model/data/golden/ (float32 .npy, < 1 MB in all):
  config.json, tokenizer.json, tensors/*.npy   the raw export of the model (separate output.weight)
  logits.npy        [T][V] float64 reference rounded to f32, weights as exported (f32)
  logits_tied.npy   [T][V] same model with output.weight := token_embd.weight
  logits_kv16.npy   [T][V] keys and values rounded to fp16 before attention (the cache's storage)
  logits_w16.npy    [T][V] every matrix rounded to fp16 (what an F16 GGUF holds)
  logits_q8.npy     [T][V] every matrix through ggml's Q8_0 (d = amax/127 in f32, q = round(x/d)
                    half away from zero, d stored as fp16)
  logits_stream.npy [8][V] decode steps 40..47 (fed the greedy tokens) after the prompt's cache
                    was cut to positions {0..3} U {24..39} (4 sinks + 16 recent), true positions
  reference.json    prompt tokens, greedy continuation (float64 argmax, every step re-run from
                    scratch), its top-1/top-2 margins, and summary deviations between the variants.

Run:  /usr/bin/python3 tools/golden_llama.py [--out tests/model/data/golden]
Deterministic (fixed seeds); rerunning rewrites the same files.
"""
import argparse
import json
import math
import os

import numpy as np
import torch

N_LAYERS, N_EMBD, N_HEADS, N_KV, N_FF, N_VOCAB, N_CTX = 2, 64, 4, 2, 128, 300, 256
HEAD_DIM = N_EMBD // N_HEADS
ROPE_BASE, RMS_EPS = 10000.0, 1e-5
PROMPT_LEN, N_GREEDY = 40, 8
STREAM_SINKS, STREAM_BUDGET = 4, 20


def make_vocab():
    tokens = ["<unk>", "<s>", "</s>"] + ["<0x%02X>" % b for b in range(256)]
    types = [2, 3, 3] + [6] * 256
    extra = ["\u2581the", "\u2581a", "\u2581is", "\u2581of", "\u2581and", "\u2581to", "\u2581in",
             "er", "in", "th", "an", "re", "on", "at", "en", "es", "\u2581pass", "\u2581key",
             "\u2581magic", "\u2581number", "ing", "ed", "\u2581The", "\u2581what", "\u2581num",
             "\u2581sky", "\u2581blue", "\u2581green", "\u2581grass", "\u2581remember", "\u2581it",
             "\u2581be", "\u2581for", "\u2581on", "\u2581at", "\u2581as", "\u2581by", "\u2581or",
             "\u2581if", "\u2581so", "\u2581do"]
    tokens += extra[:N_VOCAB - len(tokens)]
    types += [1] * (N_VOCAB - len(types))
    scores = [0.0] * 259 + [-float(i) for i in range(N_VOCAB - 259)]
    assert len(tokens) == N_VOCAB
    return tokens, scores, types


def make_weights(seed):
    g = torch.Generator().manual_seed(seed)

    def mat(out_dim, in_dim, gain=1.0):
        return torch.randn(out_dim, in_dim, generator=g, dtype=torch.float64) * gain / math.sqrt(in_dim)

    def norm():
        return 1.0 + 0.2 * torch.randn(N_EMBD, generator=g, dtype=torch.float64)

    w = {"token_embd.weight": torch.randn(N_VOCAB, N_EMBD, generator=g, dtype=torch.float64),
         "output_norm.weight": norm(),
         "output.weight": mat(N_VOCAB, N_EMBD, 2.0)}
    for l in range(N_LAYERS):
        p = "blk.%d." % l
        w[p + "attn_norm.weight"] = norm()
        w[p + "attn_q.weight"] = mat(N_HEADS * HEAD_DIM, N_EMBD, 2.0)
        w[p + "attn_k.weight"] = mat(N_KV * HEAD_DIM, N_EMBD, 2.0)
        w[p + "attn_v.weight"] = mat(N_KV * HEAD_DIM, N_EMBD)
        w[p + "attn_output.weight"] = mat(N_EMBD, N_HEADS * HEAD_DIM)
        w[p + "ffn_norm.weight"] = norm()
        w[p + "ffn_gate.weight"] = mat(N_FF, N_EMBD)
        w[p + "ffn_up.weight"] = mat(N_FF, N_EMBD)
        w[p + "ffn_down.weight"] = mat(N_EMBD, N_FF)
    # The export is float32: the reference uses exactly the exported values.
    return {k: v.float().double() for k, v in w.items()}


def rmsnorm(x, weight):
    return x / torch.sqrt((x * x).mean(-1, keepdim=True) + RMS_EPS) * weight


def rope_adjacent(x, positions):
    """x [T][H][hd]; rotate pairs (2i, 2i+1) by pos * base^(-2i/hd)."""
    i = torch.arange(HEAD_DIM // 2, dtype=torch.float64)
    inv_freq = ROPE_BASE ** (-2.0 * i / HEAD_DIM)
    theta = positions.double()[:, None] * inv_freq[None, :]  # [T][hd/2]
    cos, sin = torch.cos(theta)[:, None, :], torch.sin(theta)[:, None, :]
    x0, x1 = x[..., 0::2], x[..., 1::2]
    out = torch.empty_like(x)
    out[..., 0::2] = x0 * cos - x1 * sin
    out[..., 1::2] = x0 * sin + x1 * cos
    return out


def fp16_round(t):
    return t.to(torch.float16).to(torch.float64)


def forward(w, tokens, kv16=False, kept=None):
    """float64 logits [T][V] of the whole sequence. kept (a set of prompt positions, with
    PROMPT_LEN) hides every other prompt position from the queries past the prompt: what a decode
    step sees after the prompt's cache was cut to `kept`, rows staying at their true positions."""
    T = len(tokens)
    pos = torch.arange(T)
    x = w["token_embd.weight"][torch.tensor(tokens)]
    mask = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
    if kept is not None:
        for j in range(PROMPT_LEN):
            if j not in kept:
                mask[PROMPT_LEN:, j] = True
    group = N_HEADS // N_KV
    for l in range(N_LAYERS):
        p = "blk.%d." % l
        h = rmsnorm(x, w[p + "attn_norm.weight"])
        q = (h @ w[p + "attn_q.weight"].T).view(T, N_HEADS, HEAD_DIM)
        k = (h @ w[p + "attn_k.weight"].T).view(T, N_KV, HEAD_DIM)
        v = (h @ w[p + "attn_v.weight"].T).view(T, N_KV, HEAD_DIM)
        q, k = rope_adjacent(q, pos), rope_adjacent(k, pos)
        if kv16:
            k, v = fp16_round(k), fp16_round(v)
        out = torch.empty(T, N_HEADS, HEAD_DIM, dtype=torch.float64)
        for head in range(N_HEADS):
            kv = head // group
            s = (q[:, head, :] @ k[:, kv, :].T) / math.sqrt(HEAD_DIM)
            s = s.masked_fill(mask, float("-inf"))
            out[:, head, :] = torch.softmax(s, dim=-1) @ v[:, kv, :]
        x = x + out.reshape(T, N_HEADS * HEAD_DIM) @ w[p + "attn_output.weight"].T
        h = rmsnorm(x, w[p + "ffn_norm.weight"])
        gate = h @ w[p + "ffn_gate.weight"].T
        up = h @ w[p + "ffn_up.weight"].T
        x = x + (gate * torch.sigmoid(gate) * up) @ w[p + "ffn_down.weight"].T
    x = rmsnorm(x, w["output_norm.weight"])
    return x @ w["output.weight"].T


def q8_0_round(t):
    """ggml Q8_0 round trip of a 2-D tensor, emulating its float32 arithmetic exactly."""
    a = t.numpy().astype(np.float32)
    rows, cols = a.shape
    blocks = a.reshape(rows, cols // 32, 32)
    amax = np.abs(blocks).max(axis=-1, keepdims=True).astype(np.float32)
    d = (amax / np.float32(127.0)).astype(np.float32)
    with np.errstate(divide="ignore"):
        inv_d = np.where(d != 0, np.float32(1.0) / d, np.float32(0.0)).astype(np.float32)
    v = (blocks * inv_d).astype(np.float32).astype(np.float64)
    q = np.clip(np.sign(v) * np.floor(np.abs(v) + 0.5), -127, 127)
    d16 = d.astype(np.float16).astype(np.float64)
    return torch.from_numpy((q * d16).reshape(rows, cols))


def quantized(w, fn):
    return {k: (fn(v) if v.dim() == 2 else v) for k, v in w.items()}


def save_npy(path, t):
    np.save(path, np.ascontiguousarray(t.numpy().astype(np.float32)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests", "model",
                                                  "data", "golden"))
    args = ap.parse_args()
    out = os.path.abspath(args.out)
    os.makedirs(os.path.join(out, "tensors"), exist_ok=True)

    w = make_weights(1234)
    rng = np.random.default_rng(99)
    prompt = [1] + [int(t) for t in rng.integers(3, N_VOCAB, size=PROMPT_LEN - 1)]

    logits = forward(w, prompt)
    tied = dict(w, **{"output.weight": w["token_embd.weight"]})
    logits_tied = forward(tied, prompt)
    logits_kv16 = forward(w, prompt, kv16=True)
    logits_w16 = forward(quantized(w, fp16_round), prompt)
    logits_q8 = forward(quantized(w, q8_0_round), prompt)

    # Greedy continuation, each step recomputed from scratch in float64, plus its margins under
    # the exact reference and under fp16 K/V (what a cache stores).
    seq, margins, margins_kv16 = list(prompt), [], []
    for _ in range(N_GREEDY):
        last = forward(w, seq)[-1]
        top2 = torch.topk(last, 2).values
        margins.append(float(top2[0] - top2[1]))
        last16 = forward(w, seq, kv16=True)[-1]
        assert int(torch.argmax(last16)) == int(torch.argmax(last)), "fp16 K/V changes greedy"
        top2 = torch.topk(last16, 2).values
        margins_kv16.append(float(top2[0] - top2[1]))
        seq.append(int(torch.argmax(last)))
    greedy = seq[len(prompt):]

    # StreamingLLM-style cut after the prompt: 4 sinks + the last 16 prompt positions; decode
    # steps fed the greedy tokens (teacher forcing) at their true positions 40..47.
    stream_kept = set(range(STREAM_SINKS)) | set(
        range(PROMPT_LEN - (STREAM_BUDGET - STREAM_SINKS), PROMPT_LEN))
    logits_stream = forward(w, seq, kept=stream_kept)[PROMPT_LEN:]
    logits_stream_kv16 = forward(w, seq, kv16=True, kept=stream_kept)[PROMPT_LEN:]

    config = {"architecture": "llama", "name": "snapkv-golden-tiny", "context_length": N_CTX,
              "embedding_length": N_EMBD, "block_count": N_LAYERS, "feed_forward_length": N_FF,
              "head_count": N_HEADS, "head_count_kv": N_KV, "rope_freq_base": ROPE_BASE,
              "rms_norm_eps": RMS_EPS, "vocab_size": N_VOCAB}
    tokens, scores, types = make_vocab()
    tokenizer = {"model": "llama", "tokens": tokens, "scores": scores, "token_types": types,
                 "bos_id": 1, "eos_id": 2, "unk_id": 0, "add_bos": True, "add_space_prefix": True}
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(config, f, indent=1)
    with open(os.path.join(out, "tokenizer.json"), "w") as f:
        json.dump(tokenizer, f, ensure_ascii=False)
    for name, t in w.items():
        save_npy(os.path.join(out, "tensors", name + ".npy"), t)
    for name, t in [("logits", logits), ("logits_tied", logits_tied), ("logits_kv16", logits_kv16),
                    ("logits_w16", logits_w16), ("logits_q8", logits_q8),
                    ("logits_stream", logits_stream)]:
        save_npy(os.path.join(out, name + ".npy"), t)

    def maxdiff(a, b):
        return float((a - b).abs().max())

    reference = {
        "prompt": prompt, "greedy": greedy, "greedy_margins": margins,
        "greedy_margins_kv16": margins_kv16,
        "max_abs_logit": float(logits.abs().max()),
        "max_diff_kv16": maxdiff(logits, logits_kv16),
        "max_diff_w16": maxdiff(logits, logits_w16),
        "max_diff_q8": maxdiff(logits, logits_q8),
        "stream_sinks": STREAM_SINKS, "stream_budget": STREAM_BUDGET,
        "max_diff_stream_kv16": maxdiff(logits_stream, logits_stream_kv16),
        "max_diff_stream_vs_full": maxdiff(logits_stream, forward(w, seq)[PROMPT_LEN:]),
        "note": "written by tools/golden_llama.py; float64 torch reference, not our engine",
    }
    with open(os.path.join(out, "reference.json"), "w") as f:
        json.dump(reference, f, indent=1)
    print(json.dumps({k: v for k, v in reference.items() if k != "prompt"}, indent=1))


if __name__ == "__main__":
    main()
