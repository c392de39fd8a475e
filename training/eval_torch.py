"""Greedy-decodes task samples with the torch model and scores them as RULER does.

  snapkv tasks gen --task passkey --n 100 --context 1024 --seed 1 --out /tmp/passkey.jsonl
  /usr/bin/python3 training/eval_torch.py --run training/runs/tiny4 --jsonl /tmp/passkey.jsonl

A cross-check of the C++ engine (`snapkv eval`), which gives the figures of record: prompt =
context + question + answer_prefix with BOS, greedy decoding of up to --max-new tokens (stops at
EOS or a newline), score = RULER string_match_all (fraction of answers found case-insensitively in
the prediction), mean x 100. --no-needle style controls are just other jsonl files.
"""
import argparse
import json
import math
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from model import Config, Llama, apply_rope  # noqa: E402


def load(run_dir):
    ck = torch.load(os.path.join(run_dir, "ckpt.pt"))
    c = ck["config"]
    cfg = Config(c["vocab_size"], n_embd=c["n_embd"], n_layer=c["n_layer"], n_head=c["n_head"],
                 n_head_kv=c["n_head_kv"], n_ff=c["n_ff"], context_length=c["context_length"],
                 rope_base=c["rope_base"], rms_eps=c["rms_eps"],
                 rope_scale=c.get("rope_scale", 1.0))
    model = Llama(cfg)
    model.load_state_dict(ck["model"])
    model.eval()
    return model, ck["step"]


@torch.no_grad()
def step(model, ids, cache, pos0):
    """Runs ids [1][S] at positions pos0.. with a per-layer (k, v) cache; returns logits [S][V]."""
    c = model.c
    S = ids.shape[1]
    cos, sin = model.rope(pos0 + S)
    cos, sin = cos[pos0:], sin[pos0:]
    x = model.tok_embd(ids)
    for li, blk in enumerate(model.blocks):
        h = blk.attn_norm(x)
        q = blk.wq(h).view(1, S, c.n_head, c.head_dim).transpose(1, 2)
        k = blk.wk(h).view(1, S, c.n_head_kv, c.head_dim).transpose(1, 2)
        v = blk.wv(h).view(1, S, c.n_head_kv, c.head_dim).transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        if cache[li] is not None:
            k = torch.cat([cache[li][0], k], dim=2)
            v = torch.cat([cache[li][1], v], dim=2)
        cache[li] = (k, v)
        rep = c.n_head // c.n_head_kv
        kk, vv = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        L = kk.shape[2]
        att = (q @ kk.transpose(-1, -2)) / math.sqrt(c.head_dim)
        mask = torch.full((S, L), float("-inf")).triu(L - S + 1)
        att = torch.softmax(att + mask, dim=-1)
        y = (att @ vv).transpose(1, 2).reshape(1, S, -1)
        x = x + blk.wo(y)
        h = blk.ffn_norm(x)
        x = x + blk.w_down(F.silu(blk.w_gate(h)) * blk.w_up(h))
    return model.output(model.out_norm(x))[0]


def greedy(model, sp, prompt, max_new):
    ids = [1] + sp.encode(prompt)
    cache = [None] * model.c.n_layer
    logits = step(model, torch.tensor([ids]), cache, 0)
    out = []
    pos = len(ids)
    for _ in range(max_new):
        nxt = int(logits[-1].argmax())
        if nxt == 2:
            break
        out.append(nxt)
        if "\n" in sp.decode(out):
            break
        logits = step(model, torch.tensor([[nxt]]), cache, pos)
        pos += 1
    return sp.decode(out)


def string_match_all(pred, answers):
    p = pred.lower()
    return sum(a.lower() in p for a in answers) / len(answers)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--run", required=True)
    ap.add_argument("--jsonl", nargs="+", required=True)
    ap.add_argument("--tokenizer", default=None)
    ap.add_argument("--max-new", type=int, default=48)
    ap.add_argument("--limit", type=int, default=0)
    args = ap.parse_args()
    torch.set_num_threads(1)
    import sentencepiece as spm
    tok = args.tokenizer or os.path.join(os.path.dirname(args.run.rstrip("/")), "tok", "spm.model")
    sp = spm.SentencePieceProcessor(model_file=tok)
    model, ckpt_step = load(args.run)
    for path in args.jsonl:
        with open(path) as f:
            samples = [json.loads(x) for x in f if x.strip()]
        if args.limit:
            samples = samples[:args.limit]
        scores = []
        for s in samples:
            pred = greedy(model, sp, s["context"] + s["question"] + s["answer_prefix"], args.max_new)
            scores.append(string_match_all(pred, s["answers"]))
        print(json.dumps({"file": path, "step": ckpt_step, "n": len(samples),
                          "string_match_all": 100.0 * sum(scores) / len(scores)}), flush=True)


if __name__ == "__main__":
    main()
