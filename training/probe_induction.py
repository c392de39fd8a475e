"""How fast does the training model learn to copy? A pure copy-task probe for the induction plateau.

  OMP_NUM_THREADS=1 /usr/bin/python3 training/probe_induction.py --lr 1e-3 --context 128 --steps 400

Every row is uniformly random token ids (--alphabet of them, default the tokenizer's 2000) with a
span of max(3, T/16)..min(32, T/4) tokens repeated later in the row; the loss is on the repeat
(all but its first token), which can be predicted only by copying. A model that has formed
induction heads gets the repeat right; before that the loss sits at ln(alphabet). Prints loss and
repeat accuracy every --every steps. Same model class and optimizer as train.py (warm-up 100 steps
here, --warmup; train.py uses 200), from a fresh initialisation (seeded), batch = 4096 tokens / T
rows.
"""
import argparse
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from model import Config, Llama  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--context", type=int, default=128)
    ap.add_argument("--alphabet", type=int, default=2000, help="distinct token ids in the rows")
    ap.add_argument("--vocab", type=int, default=2000)
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--every", type=int, default=25)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    model = Llama(Config(args.vocab))
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95),
                            weight_decay=args.weight_decay)
    rng = np.random.default_rng(args.seed)
    T = args.context
    B = 4096 // T
    lo, hi = 3, min(3 + args.alphabet, args.vocab)  # ids 0..2 are UNK/BOS/EOS
    mask = torch.full((T, T), float("-inf")).triu(1)
    cos, sin = model.rope(T)
    t0 = time.time()
    for step in range(1, args.steps + 1):
        x = rng.integers(lo, hi, size=(B, T + 1))
        w = np.zeros((B, T), dtype=bool)
        for b in range(B):
            span = int(rng.integers(max(3, T // 16), min(33, T // 4) + 1))
            s = int(rng.integers(1, T // 2 - span))
            t = int(rng.integers(s + span + 1, T + 1 - span))
            x[b, t:t + span] = x[b, s:s + span]
            w[b, t:t + span - 1] = True
        x = torch.from_numpy(x)
        sel = torch.from_numpy(w)
        for g in opt.param_groups:
            g["lr"] = args.lr * min(1.0, step / args.warmup)
        h = model.tok_embd(x[:, :-1])
        for blk in model.blocks:
            h = blk(h, cos, sin, mask)
        logits = model.output(model.out_norm(h[sel]))
        target = x[:, 1:][sel]
        loss = F.cross_entropy(logits, target)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % args.every == 0:
            acc = float((logits.argmax(-1) == target).float().mean())
            print(f"step {step} loss {float(loss):.3f} repeat-acc {acc:.3f} "
                  f"{time.time() - t0:.0f}s", flush=True)


if __name__ == "__main__":
    main()
