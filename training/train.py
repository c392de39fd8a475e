"""Trains a small Llama on the project's long-context tasks with a context-length curriculum.

One command (resumes from RUN/ckpt.pt when it exists):
  OMP_NUM_THREADS=1 nohup nice -n 10 /usr/bin/python3 training/train.py --name tiny4 &

Recipe (measured on this kind of machine): word-sized SentencePiece tokens, part of every
batch a copy task (a random span repeated later, loss on the repeat), AdamW lr 1e-3 betas
(0.9, 0.95), 200-step warm-up, gradient clipping 1.0, then the context is lengthened stage by stage
with smaller batches. Task rows come from the C++ generator (`snapkv tasks gen --split train`);
answers carry more loss weight than the prompt. Natural text (fortunes, licenses) is mixed in.

Writes RUN/log.txt (loss, held-out teacher-forced answer accuracy per task), RUN/ckpt.pt
(every --ckpt-minutes and at stage ends), RUN/export/ (raw export of the latest checkpoint) and
RUN/export-<T>/ at the end of each stage. Held-out samples use the eval split (disjoint seeds).
"""
import argparse
import concurrent.futures
import contextlib
import copy
import multiprocessing
import os
import random
import re
import signal
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import corpus  # noqa: E402
from model import Config, Llama, export_raw, sdpa  # noqa: E402

BOS, EOS = 1, 2


def keep_freed_memory():
    """glibc returns every freed block above 32 MiB to the kernel (mmap/munmap), so a 4096-token
    step, whose attention tensors are 256 MiB each, page-faults its memory in again and again
    (measured: half the step's CPU time in the kernel). Serve large blocks from the heap and keep
    them there instead."""
    try:
        import ctypes
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return
    M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_MAX = -1, -2, -4
    libc.mallopt(M_MMAP_MAX, 0)
    libc.mallopt(M_TRIM_THRESHOLD, 2**31 - 1)
    libc.mallopt(M_TOP_PAD, 256 << 20)


def log(run_dir, msg):
    line = time.strftime("%H:%M:%S ") + msg
    print(line, flush=True)
    with open(os.path.join(run_dir, "log.txt"), "a") as f:
        f.write(line + "\n")


def parse_stages(spec):
    """'128:32:600,128/256/512:4:300' -> [((T, ...), batch, steps, weights), ...]. A stage with
    several lengths draws one length per step (uniformly) and scales the batch to
    batch * max(T) / T, so every step holds the same number of tokens; a length listed twice
    ('1024/4096/4096') is drawn twice as often. An optional fourth field
    weights the task draw, e.g. '512:8:400:niah_multikey=4+niah_multiquery=2' (unnamed tasks
    weigh 1; without the field every task is equally likely). The pseudo-tasks 'mkq' and 'mkqh'
    (every_key_asked, shared_prefix_values) are drawn only when named."""
    out = []
    for part in spec.split(","):
        fields = part.split(":")
        if len(fields) not in (3, 4):
            raise SystemExit(f"bad stage '{part}': expected T:batch:steps[:task=w+task=w]")
        t, b, s = fields[:3]
        weights = {}
        if len(fields) == 4:
            for item in fields[3].split("+"):
                name, _, w = item.partition("=")
                if name not in corpus.TASKS + PSEUDO_TASKS or not w:
                    raise SystemExit(f"bad task weight '{item}' in stage '{part}': expected "
                                     f"TASK=W with TASK one of {', '.join(corpus.TASKS)}, mkq "
                                     "(niah_multikey with every key asked in turn) or mkqh (the "
                                     "same, needles sharing their first digits)")
                weights[name] = float(w)
        if t.startswith("copy"):  # 'copy32:128:800': induction warm-up, random-token copy rows
            out.append((("copy", int(t[4:])), int(b), int(s), weights))
            continue
        out.append((tuple(int(x) for x in t.split("/")), int(b), int(s), weights))
    return out


def stage_lengths(lengths):
    """Context lengths of a stage (('copy', T) -> (T,))."""
    return (lengths[1],) if lengths[0] == "copy" else lengths


def task_counts(context):
    """Needles / hops that fit a context (eval uses the defaults 4 / 4 at >= 512)."""
    if context < 256:
        return 2, 1
    if context < 512:
        return 3, 2
    return 4, 4


class Tokenized:
    def __init__(self, sp, sample):
        prompt = sample["context"] + sample["question"] + sample["answer_prefix"]
        completion = " " + ", ".join(sample["answers"]) + "."
        p = sp.encode(prompt)
        # SentencePiece adds the dummy prefix to the completion too; encode the whole and split.
        full = sp.encode(prompt + completion)
        if full[:len(p)] != p:  # token boundary moved: fall back to separate pieces
            full = p + sp.encode(completion)
        self.ids = [BOS] + full
        self.n_prompt = 1 + len(p)
        self.spans = [(self.n_prompt, len(self.ids))]  # answer token ranges [start, end)
        self.task = sample.get("task", "")


NEEDLE_RE = re.compile(r"One of the special magic numbers for (\S+) is: (\d+)\.")
PSEUDO_TASKS = ["mkq", "mkqh"]  # built in train.py from niah_multikey samples (below)


def shared_prefix_values(sample, rng):
    """Hard distractors ('mkqh'): rewrites the needles' values so that all of them start with the
    same 1-4 digits (the asked needle's), each value still distinct. A model that finds the right
    needle for the first digit and then copies from whichever needle continues that digit fails
    these; it has to keep matching the key digit after digit."""
    needles = NEEDLE_RE.findall(sample["context"])
    values = [v for _, v in needles]
    if len(needles) < 2 or len(set(values)) != len(values) or \
            sample["answers"][0] not in values:
        return None
    asked = sample["answers"][0]
    n_shared = rng.randint(1, min(4, len(asked) - 2))
    new, used = {}, {asked}
    for v in values:
        if v == asked:
            new[v] = v
            continue
        w = asked[:n_shared] + v[n_shared:]
        while w in used:
            w = asked[:n_shared] + "".join(rng.choice("0123456789") for _ in v[n_shared:])
        used.add(w)
        new[v] = w
    context = sample["context"]
    for v, w in new.items():
        if context.count(v) != 1:
            return None
        context = context.replace(v, w)
    return dict(sample, context=context)


def every_key_asked(sp, sample, rng):
    """niah_multikey augmentation ('mkq'): after the sample's own question and answer, every other
    needle's key is asked in turn (the generator's question and answer-prefix templates with the
    key swapped), each answer carrying loss. Several key-matching targets per row instead of one,
    and later questions cannot be answered by position alone. None when the text does not split
    into tokens at the segment boundaries."""
    needles = NEEDLE_RE.findall(sample["context"])
    asked = [(k, v) for k, v in needles if v == sample["answers"][0]]
    if len(needles) < 2 or len(asked) != 1:
        return None
    key0 = asked[0][0]
    others = [kv for kv in needles if kv[0] != key0]
    rng.shuffle(others)
    segments = [sample["context"] + sample["question"] + sample["answer_prefix"],
                " " + sample["answers"][0] + "."]
    for key, value in others:
        segments.append(sample["question"].replace(key0, key) +
                        sample["answer_prefix"].replace(key0, key))
        segments.append(" " + value + ".")
    text, bounds = "", []
    for seg in segments:
        text += seg
        bounds.append(len(sp.encode(text)))
    full = sp.encode(text)
    for i, b in enumerate(bounds[:-1]):  # every boundary must be a token boundary
        if sp.encode(text[:sum(len(x) for x in segments[:i + 1])]) != full[:b]:
            return None
    item = Tokenized.__new__(Tokenized)
    item.ids = [BOS] + full
    item.n_prompt = 1 + bounds[0]
    item.spans = [(1 + bounds[i], 1 + bounds[i + 1]) for i in range(0, len(bounds) - 1, 2)]
    item.task = "mkq"
    return item


def make_mkq_pool(sp, context, n, seed, snapkv, hard=False):
    """Pool of 'mkq' rows (every_key_asked) fitting in `context` tokens: niah_multikey samples
    generated shorter by the room the extra questions take (about 42 tokens each). hard: 'mkqh',
    the needles' values rewritten to share their first digits (shared_prefix_values)."""
    needles, hops = task_counts(context)
    gen_context = int(context * 0.95) - 42 * (needles - 1)
    raw = corpus.generate_tasks("niah_multikey", n, gen_context, seed, "train", snapkv,
                                extra=("--needles", str(needles), "--hops", str(hops)))
    rng = random.Random(seed)
    if hard:
        raw = [x for x in (shared_prefix_values(s, rng) for s in raw) if x is not None]
    items = [every_key_asked(sp, s, rng) for s in raw]
    for x in items:
        if x is not None and hard:
            x.task = "mkqh"
    return [x for x in items if x is not None and len(x.ids) <= context + 1]


def make_pool(sp, context, n_per_task, seed, split, snapkv, tasks=corpus.TASKS):
    """{task: [Tokenized]} fitting in `context` tokens (with BOS); generator asked for 95%.
    `n_per_task` is a count or {task: count}."""
    needles, hops = task_counts(context)
    pool = {}
    for task in tasks:
        n = n_per_task[task] if isinstance(n_per_task, dict) else n_per_task
        try:
            raw = corpus.generate_tasks(task, n, int(context * 0.95), seed, split, snapkv,
                                        extra=("--needles", str(needles), "--hops", str(hops)))
        except Exception:  # context too small for this task
            continue
        items = [Tokenized(sp, s) for s in raw]
        items = [x for x in items if len(x.ids) <= context + 1]
        if items:
            pool[task] = items
    return pool


class Batcher:
    """Builds (x, y, w) rows of length T: x input ids, y next-token targets, w loss weights."""

    def __init__(self, sp, natural_ids, filler_ids, pool, T, answer_weight, mix, copy_random=0.0,
                 task_weights=None):
        self.sp = sp
        self.task_weights = task_weights or {}  # {task: weight}; empty: uniform draw
        self.copy_random = copy_random  # share of copy rows built from uniformly random tokens
        self.natural = natural_ids  # one long token stream
        self.filler = filler_ids    # haystack text token stream (from train samples)
        self.pool = pool
        self.T = T
        self.answer_weight = answer_weight
        self.mix = mix  # (copy, task, natural) fractions

    def _stream_window(self, rng, stream):
        start = int(rng.integers(0, len(stream) - self.T - 2))
        return np.array(stream[start:start + self.T + 1], dtype=np.int64)

    def natural_row(self, rng):
        row = self._stream_window(rng, self.natural)
        row[0] = BOS
        return row, np.ones(self.T, dtype=np.float32)

    def copy_row(self, rng):
        if self.copy_random > 0 and rng.random() < self.copy_random:
            # Random tokens: the repeat is predictable only by copying (the cleanest signal for
            # forming induction heads; natural text is partly predictable without the copy).
            row = rng.integers(3, self.sp.get_piece_size(), size=self.T + 1).astype(np.int64)
        else:
            src_stream = self.natural if rng.random() < 0.5 else self.filler
            row = self._stream_window(rng, src_stream)
        row[0] = BOS
        T = self.T
        if T >= 64:
            span = int(rng.integers(8, min(33, T // 4)))
        else:  # short rows (induction warm-up): 3..T/4 tokens
            span = int(rng.integers(3, T // 4 + 1))
        s = int(rng.integers(1, T // 2 - span))
        t = int(rng.integers(s + span + 1, T + 1 - span))
        row[t:t + span] = row[s:s + span]
        w = np.zeros(T, dtype=np.float32)
        w[t:t + span - 1] = 1.0  # logits at t..t+span-2 predict row[t+1..t+span-1]
        return row, w

    def task_row(self, rng, task=None):
        tasks = sorted(self.pool)
        if task is None and self.task_weights:
            p = np.array([self.task_weights.get(t, 1.0) for t in tasks])
            task = tasks[int(rng.choice(len(tasks), p=p / p.sum()))]
        task = task or tasks[int(rng.integers(0, len(tasks)))]
        item = self.pool[task][int(rng.integers(0, len(self.pool[task])))]
        return self.render(item)

    def render(self, item):
        T = self.T
        ids = item.ids[:T + 1]
        row = np.full(T + 1, EOS, dtype=np.int64)
        row[:len(ids)] = ids
        w = np.zeros(T, dtype=np.float32)
        # prompt: every 4th position at weight 0.25 (language signal, cheap); answers: full weight
        w[0:len(ids) - 1:4] = 0.25
        for a, b in item.spans:  # logits at a-1..b-2 predict the answer tokens a..b-1
            w[a - 1:min(b, len(ids)) - 1] = self.answer_weight
        return row, w

    def batch(self, rng, B):
        rows, ws = [], []
        copy_f, task_f, _ = self.mix
        for _ in range(B):
            u = rng.random()
            if u < copy_f:
                r, w = self.copy_row(rng)
            elif u < copy_f + task_f and self.pool:
                r, w = self.task_row(rng)
            else:
                r, w = self.natural_row(rng)
            rows.append(r)
            ws.append(w)
        rows = torch.from_numpy(np.stack(rows))
        return rows[:, :-1], rows[:, 1:], torch.from_numpy(np.stack(ws))


def loss_fn(model, x, y, w):
    """Weighted CE; the output layer runs only on positions that carry loss."""
    h = model.tok_embd(x)
    cos, sin = model.rope(x.shape[1])
    mask = model.causal_mask(x.shape[1])
    for blk in model.blocks:
        h = blk(h, cos, sin, mask)
    sel = w > 0
    logits = model.output(model.out_norm(h[sel]))
    ce = F.cross_entropy(logits, y[sel], reduction="none")
    return (ce * w[sel]).sum() / w[sel].sum()


BF16_ON_GPU = {"on": True}  # --precision fp32 turns it off


def autocast(device):
    """bf16 autocast on a GPU (fp32 master weights and optimizer state); nothing on the CPU."""
    if device.type == "cuda" and BF16_ON_GPU["on"]:
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def train_step(model, opt, x, y, w, device):
    """One AdamW step on the weighted loss (gradients clipped to norm 1); returns the loss."""
    with autocast(device):
        loss = loss_fn(model, x, y, w)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    return loss


@torch.no_grad()
def evaluate(model, eval_pool, T):
    """Teacher-forced answer accuracy per task: token accuracy and exact (all answer tokens right,
    which is exactly when greedy decoding reproduces the reference completion)."""
    model.eval()
    device = model.tok_embd.weight.device
    res = {}
    for task, items in sorted(eval_pool.items()):
        tok_ok = tok_n = exact = 0
        for i in range(0, len(items), 4):
            chunk = items[i:i + 4]
            L = max(len(it.ids) for it in chunk)
            x = torch.full((len(chunk), L), EOS, dtype=torch.long)
            for j, it in enumerate(chunk):
                x[j, :len(it.ids)] = torch.tensor(it.ids)
            with autocast(device):
                pred = model(x.to(device)).argmax(-1).cpu()
            for j, it in enumerate(chunk):
                a0, a1 = it.n_prompt, len(it.ids) - 1  # answer tokens, final "." excluded
                ok = (pred[j, a0 - 1:a1 - 1] == x[j, a0:a1])
                tok_ok += int(ok.sum())
                tok_n += int(ok.numel())
                exact += int(bool(ok.all()))
        res[task] = (tok_ok / max(tok_n, 1), exact / len(items))
    model.train()
    return res


@torch.no_grad()
def copy_accuracy(model, batcher, seed, n=16):
    """Copy task on natural/filler text (fixed rows): token accuracy / exact over the repeats."""
    model.eval()
    rng = np.random.default_rng([seed, 999])
    saved, batcher.copy_random = batcher.copy_random, 0.0
    rows, ws = zip(*(batcher.copy_row(rng) for _ in range(n)))
    batcher.copy_random = saved
    x = torch.from_numpy(np.stack(rows))
    w = torch.from_numpy(np.stack(ws)) > 0
    device = model.tok_embd.weight.device
    with autocast(device):
        pred = model(x[:, :-1].to(device)).argmax(-1).cpu()
    ok = (pred == x[:, 1:]) | ~w
    model.train()
    return float((ok & w).sum()) / float(w.sum()), float(ok.all(dim=1).float().mean())


_SENTENCEPIECE = {}


def sentencepiece(model_file):
    """One SentencePiece processor per model file and process (pool workers build their own)."""
    if model_file not in _SENTENCEPIECE:
        import sentencepiece as spm
        _SENTENCEPIECE[model_file] = spm.SentencePieceProcessor(model_file=model_file)
    return _SENTENCEPIECE[model_file]


def pool_plan(stages, args):
    """What each task stage's pools hold, per length: {(stage, T): (n_task, seed, weights)}.
    Sizes follow the stages as given on the command line (--fit-seconds rescales only steps)."""
    plan = {}
    for si, (lengths, B_max, n_steps, weights) in enumerate(stages):
        if lengths[0] == "copy":
            continue
        lengths = stage_lengths(lengths)
        T_max = max(lengths)
        for T in sorted(set(lengths)):
            B = B_max * T_max // T
            # a length listed twice is drawn twice as often (and gets twice the pool)
            n_pool = min(2000, max(200, (n_steps * B * lengths.count(T)) // (8 * len(lengths))))
            seed = 1000 + si if len(lengths) == 1 else 1000 + 100 * si + T
            # a task drawn w times as often gets a pool w times as large (as many repeats)
            n_task = {t: min(8000, int(n_pool * max(1.0, weights.get(t, 1.0))))
                      for t in corpus.TASKS + PSEUDO_TASKS} if weights else n_pool
            if args.pool_max:
                n_task = ({t: min(n, args.pool_max) for t, n in n_task.items()}
                          if weights else min(n_pool, args.pool_max))
            plan[(si, T)] = (n_task, seed, weights)
    return plan


def build_pools(spm_file, T, n_task, seed, weights, eval_n, snapkv):
    """(training pool, held-out pool) of one stage length; runs in a pool worker or inline."""
    sp = sentencepiece(spm_file)
    pool = make_pool(sp, T, n_task, seed=seed, split="train", snapkv=snapkv)
    if weights.get("mkq", 0) > 0:
        pool["mkq"] = make_mkq_pool(sp, T, n_task["mkq"], seed + 50, snapkv)
    if weights.get("mkqh", 0) > 0:
        pool["mkqh"] = make_mkq_pool(sp, T, n_task["mkqh"], seed + 60, snapkv, hard=True)
    return pool, make_pool(sp, T, eval_n, seed=1, split="eval", snapkv=snapkv)


def fit_stages(model, opt, stages, args, device, run_dir):
    """--fit-seconds: times a training step of every (length, batch) the stages use (random
    tokens, loss on every position, so an upper bound), then scales every stage's steps, the
    warm-up and the decay by one factor so the run takes about that many seconds. The model and
    optimizer are restored after timing."""
    shapes = set()
    for lengths, B_max, _, _ in stages:
        Ls = stage_lengths(lengths)
        shapes.update((T, B_max * max(Ls) // T) for T in Ls)
    saved = copy.deepcopy(model.state_dict()), copy.deepcopy(opt.state_dict())
    cost = {}
    for T, B in sorted(shapes):
        x = torch.randint(3, model.c.vocab_size, (B, T), device=device)
        w = torch.ones(B, T, device=device)
        for i in range(4):
            if i == 1:
                if device.type == "cuda":
                    torch.cuda.synchronize()
                t0 = time.time()
            train_step(model, opt, x, x, w, device)
        if device.type == "cuda":
            torch.cuda.synchronize()
        cost[(T, B)] = (time.time() - t0) / 3
    model.load_state_dict(saved[0])
    opt.load_state_dict(saved[1])
    opt.zero_grad(set_to_none=True)
    # seconds per step of each stage; 15% for batch assembly, evaluation and logging
    per_step = []
    for lengths, B_max, _, _ in stages:
        Ls = stage_lengths(lengths)
        per_step.append(1.15 * sum(cost[(T, B_max * max(Ls) // T)] for T in Ls) / len(Ls))
    total = sum(n * c for (_, _, n, _), c in zip(stages, per_step))
    factor = args.fit_seconds / total
    fitted = [(lengths, B, max(1, round(n * factor)), wts) for lengths, B, n, wts in stages]
    log(run_dir, "fit: seconds per step " +
        " ".join(f"T{T}xB{B}={c:.4f}" for (T, B), c in sorted(cost.items())) +
        f"; stages as given would take {total:.0f}s, steps scaled by {factor:.3f}")
    return {"stages": fitted, "per_step": per_step, "warmup": max(1, round(args.warmup * factor)),
            "decay_steps": round(args.decay_steps * factor)}


def lr_at(step, args, total_steps):
    if step < args.warmup:
        return args.lr * (step + 1) / args.warmup
    if args.decay_steps > 0 and step >= total_steps - args.decay_steps:
        frac = (total_steps - step) / args.decay_steps
        return args.lr * (0.1 + 0.9 * frac)
    return args.lr


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--name", default="tiny4")
    ap.add_argument("--runs", default=os.path.join(os.path.dirname(__file__), "runs"))
    ap.add_argument("--tokenizer", default=None, help="dir with spm.model + tokenizer.json")
    ap.add_argument("--snapkv", default=None)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--n-embd", type=int, default=128)
    ap.add_argument("--n-layer", type=int, default=4)
    ap.add_argument("--n-head", type=int, default=4)
    ap.add_argument("--n-head-kv", type=int, default=2)
    ap.add_argument("--stages", default="128:32:600,256:16:300,512:8:300,1024:4:1200")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--warmup", type=int, default=200)
    ap.add_argument("--decay-steps", type=int, default=300)
    ap.add_argument("--answer-weight", type=float, default=4.0)
    ap.add_argument("--eval-every", type=int, default=100)
    ap.add_argument("--eval-n", type=int, default=16)
    ap.add_argument("--ckpt-minutes", type=float, default=4.0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--init", default=None, metavar="CKPT",
                    help="start a new run from another run's checkpoint (weights and AdamW state; "
                         "model shape taken from it); steps, stages and the LR schedule are this "
                         "run's own")
    ap.add_argument("--stop-step", type=int, default=None,
                    help="checkpoint and exit after this step (the schedule stays that of the full "
                         "stages; rerunning without it continues)")
    ap.add_argument("--rope-base", type=float, default=None,
                    help="RoPE frequency base (default: the --init checkpoint's, else 10000)")
    ap.add_argument("--rope-scale", type=float, default=None,
                    help="linear RoPE position interpolation factor F: positions are multiplied by "
                         "1/F in the RoPE tables (exported as rope.scaling linear, factor F; "
                         "default: the --init checkpoint's, else 1)")
    ap.add_argument("--pool-max", type=int, default=None,
                    help="cap on each task's training pool per context length (default: none; "
                         "pools take minutes to build at 4096 tokens)")
    ap.add_argument("--copy-random", type=float, default=0.0,
                    help="share of copy-task rows made of uniformly random tokens (default 0)")
    ap.add_argument("--device", default="cpu",
                    help="cpu or cuda (cuda: bf16 autocast, fused causal attention)")
    ap.add_argument("--precision", choices=("bf16", "fp32"), default="bf16",
                    help="matrix products on a GPU: bf16 autocast (default) or fp32")
    ap.add_argument("--attention", choices=("fused", "explicit"), default="fused",
                    help="on a GPU: fused causal attention (default, torch >= 2.0) or the explicit "
                         "masked softmax the CPU uses")
    ap.add_argument("--fit-seconds", type=float, default=None,
                    help="scale every stage's steps (and the warm-up and decay) so that training "
                         "takes about this many seconds, from timed steps on this machine; the "
                         "scaled stages are kept in the checkpoint for a resume")
    ap.add_argument("--pool-workers", type=int, default=0,
                    help="build every stage's task pools in this many worker processes from the "
                         "start, while earlier stages train (default 0: each stage builds its "
                         "own when it starts)")
    ap.add_argument("--natural", default=None, metavar="FILE",
                    help="natural-text paragraphs as JSON (training/corpus.py --dump-natural); "
                         "default: read Debian's fortunes and license texts")
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    keep_freed_memory()
    run_dir = os.path.join(args.runs, args.name)
    os.makedirs(run_dir, exist_ok=True)
    tok_dir = args.tokenizer or os.path.join(args.runs, "tok")
    import sentencepiece as spm
    sp = spm.SentencePieceProcessor(model_file=os.path.join(tok_dir, "spm.model"))
    stages = parse_stages(args.stages)
    total_steps = sum(s for _, _, s, _ in stages)

    torch.manual_seed(args.seed)
    n_ctx = max(2048, max(max(stage_lengths(t)) for t, _, _, _ in stages))
    init = torch.load(args.init, map_location="cpu") if args.init else None
    if init:
        shape = {k: init["config"][k] for k in ("n_embd", "n_layer", "n_head", "n_head_kv", "n_ff")}
        cfg = Config(sp.get_piece_size(), context_length=max(n_ctx, init["config"]["context_length"]),
                     rope_base=args.rope_base or init["config"].get("rope_base", 10000.0),
                     rms_eps=init["config"].get("rms_eps", 1e-5),
                     rope_scale=args.rope_scale or init["config"].get("rope_scale", 1.0),
                     **shape)
        if init["config"]["vocab_size"] != cfg.vocab_size:
            raise SystemExit(f"--init {args.init}: vocabulary of {init['config']['vocab_size']} "
                             f"pieces, the tokenizer has {cfg.vocab_size}")
    else:
        cfg = Config(sp.get_piece_size(), n_embd=args.n_embd, n_layer=args.n_layer,
                     n_head=args.n_head, n_head_kv=args.n_head_kv, context_length=n_ctx,
                     rope_base=args.rope_base or 10000.0, rope_scale=args.rope_scale or 1.0)
    model = Llama(cfg)
    step = 0
    ckpt_path = os.path.join(run_dir, "ckpt.pt")
    opt_state, fit = None, None
    if init and not os.path.exists(ckpt_path):
        model.load_state_dict(init["model"])
        opt_state = init["opt"]
        log(run_dir, f"start: {' '.join(sys.argv)}")
        log(run_dir, f"initialised from {args.init} (its step {init['step']}); config "
            f"{cfg.to_dict()} stages {stages}")
    elif os.path.exists(ckpt_path):
        ck = torch.load(ckpt_path, map_location="cpu")
        model.load_state_dict(ck["model"])
        opt_state = ck["opt"]
        step = ck["step"]
        fit = ck.get("fit")
        log(run_dir, f"resumed from {ckpt_path} at step {step}: {' '.join(sys.argv)}")
    else:
        n_params = sum(p.numel() for p in model.parameters())
        log(run_dir, f"start: {' '.join(sys.argv)}")
        log(run_dir, f"config {cfg.to_dict()} params {n_params/1e6:.2f}M stages {stages}")

    # Pools of every stage still to run, built by worker processes from now on (forked before the
    # GPU is touched). Their sizes follow the stages as given, whatever --fit-seconds makes of them.
    plan = pool_plan(stages, args)
    spm_file = os.path.join(tok_dir, "spm.model")
    futures, executor = {}, None
    if args.pool_workers > 0:
        run_ends = [sum(s for _, _, s, _ in (fit["stages"] if fit else stages)[:i + 1])
                    for i in range(len(stages))]
        executor = concurrent.futures.ProcessPoolExecutor(
            args.pool_workers, mp_context=multiprocessing.get_context("fork"))
        for (si, T), (n_task, seed, weights) in sorted(plan.items()):
            if run_ends[si] > step:
                futures[(si, T)] = executor.submit(build_pools, spm_file, T, n_task, seed,
                                                   weights, args.eval_n, args.snapkv)

    device = torch.device(args.device)
    model.to(device)
    model.fused_attention = device.type == "cuda" and sdpa is not None and \
        args.attention == "fused"
    BF16_ON_GPU["on"] = args.precision == "bf16"
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.1)
    if opt_state is not None:
        opt.load_state_dict(opt_state)
    if fit is None and args.fit_seconds:
        fit = fit_stages(model, opt, stages, args, device, run_dir)
    if fit:
        stages = [(tuple(lengths), B, n, wts) for lengths, B, n, wts in fit["stages"]]
        args.warmup, args.decay_steps = fit["warmup"], fit["decay_steps"]
        total_steps = sum(s for _, _, s, _ in stages)
        log(run_dir, f"stages fitted: {stages} warm-up {args.warmup} decay {args.decay_steps}")

    def save(tag=None):
        tmp = ckpt_path + ".tmp"
        torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step,
                    "config": cfg.to_dict(), "args": vars(args), "fit": fit}, tmp)
        os.replace(tmp, ckpt_path)
        export_raw(model, os.path.join(tok_dir, "tokenizer.json"), os.path.join(run_dir, "export"),
                   f"snapkv-{args.name}")
        if tag:
            export_raw(model, os.path.join(tok_dir, "tokenizer.json"),
                       os.path.join(run_dir, f"export-{tag}"), f"snapkv-{args.name}")

    # Token streams for copy/natural rows (deterministic).
    paras = corpus.natural_paragraphs(args.natural)
    random.Random(args.seed).shuffle(paras)
    natural_ids = [t for p in paras for t in [BOS] + sp.encode(p)]
    filler_raw = corpus.generate_tasks("niah_single", 200, 1024, seed=99, split="train",
                                       snapkv=args.snapkv)
    filler_ids = [t for s in filler_raw for t in sp.encode(s["context"])]

    # SIGTERM/SIGINT: finish the current step, checkpoint, exit (resume with the same command).
    stop = {"requested": False}

    def request_stop(signum, frame):
        stop["requested"] = True

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)

    if args.stop_step is not None and step >= args.stop_step:
        log(run_dir, f"at step {step}, --stop-step {args.stop_step} reached: nothing to do")
        return
    stage_start = 0
    deadline = time.time() + args.fit_seconds if fit and args.fit_seconds else None
    for si in range(len(stages)):
        if deadline and step == stage_start and si > 0:
            # Rescale the stages still to run to the time left: the timed steps leave out batch
            # assembly, which dominates the short-row stages.
            left = deadline - time.time()
            planned = sum(n * c for (_, _, n, _), c in zip(stages[si:], fit["per_step"][si:]))
            g = max(left, 0.0) / planned
            if abs(g - 1) > 0.05:
                stages[si:] = [(ls, B, max(1, round(n * g)), w) for ls, B, n, w in stages[si:]]
                total_steps = sum(s for _, _, s, _ in stages)
                fit["stages"] = stages
                log(run_dir, f"fit: {left:.0f}s left for stages {si}.., steps scaled by {g:.3f}: "
                    f"{[s for _, _, s, _ in stages]}")
        lengths, B_max, n_steps, weights = stages[si]
        stage_end = stage_start + n_steps
        if step >= stage_end:
            stage_start = stage_end
            continue
        t0 = time.time()
        pure_copy = lengths[0] == "copy"
        lengths = stage_lengths(lengths)
        T_max = max(lengths)
        batchers, eval_pools = {}, {}
        for T in sorted(set(lengths)):
            if pure_copy:
                # Induction warm-up: every row is random tokens with a repeated span (loss on the
                # repeat only); see training/probe_induction.py for why short rows come first.
                batchers[T] = Batcher(sp, natural_ids, filler_ids, {}, T, args.answer_weight,
                                      (1.0, 0.0, 0.0), copy_random=1.0)
                eval_pools[T] = {}
                log(run_dir, f"stage {si} copy warm-up T={T} B={B_max} steps "
                    f"{stage_start}..{stage_end}")
                continue
            B = B_max * T_max // T
            if (si, T) in futures:
                pool, eval_pools[T] = futures.pop((si, T)).result()
            else:
                pool, eval_pools[T] = build_pools(spm_file, T, *plan[(si, T)], args.eval_n,
                                                  args.snapkv)
            copy_f = 0.5 if T <= 128 else 0.25
            mix = (copy_f, 0.85 * (1 - copy_f) if T > 128 else 0.35, 0.0)
            batchers[T] = Batcher(sp, natural_ids, filler_ids, pool, T, args.answer_weight, mix,
                                  args.copy_random, weights)
            log(run_dir, f"stage {si} T={T} B={B} steps {stage_start}..{stage_end} pool "
                f"{ {k: len(v) for k, v in pool.items()} }"
                + (f" task weights {weights}" if weights else ""))
        log(run_dir, f"stage {si} pools built in {time.time()-t0:.0f}s")
        last_ckpt = time.time()
        run_loss, run_n, t_step = 0.0, 0, time.time()
        while step < stage_end:
            rng = np.random.default_rng([args.seed, step])
            T = lengths[int(rng.integers(0, len(lengths)))] if len(lengths) > 1 else T_max
            x, y, w = (t.to(device, non_blocking=True)
                       for t in batchers[T].batch(rng, B_max * T_max // T))
            for g in opt.param_groups:
                g["lr"] = lr_at(step, args, total_steps)
            loss = train_step(model, opt, x, y, w, device)
            step += 1
            # on a GPU the sum stays there: no wait for the step before the next batch is built
            run_loss += loss.detach() if device.type == "cuda" else float(loss)
            run_n += 1
            if step % 20 == 0:
                dt = (time.time() - t_step) / run_n
                log(run_dir, f"step {step} T={T} loss {float(run_loss)/run_n:.4f} lr "
                    f"{lr_at(step, args, total_steps):.2e} {dt:.2f}s/step")
                run_loss, run_n, t_step = 0.0, 0, time.time()
            if step % (args.eval_every * max(1, T_max // 512)) == 0 or step == stage_end:
                for T_eval in sorted(set(lengths)):
                    res = evaluate(model, eval_pools[T_eval], T_eval)
                    res["copy"] = copy_accuracy(model, batchers[T_eval], args.seed)
                    msg = " ".join(f"{k}={a:.2f}/{e:.2f}" for k, (a, e) in res.items())
                    log(run_dir, f"eval step {step} T={T_eval} (token-acc/exact) {msg}")
            if args.stop_step is not None and step >= args.stop_step:
                stop["requested"] = True
            if time.time() - last_ckpt > args.ckpt_minutes * 60 or stop["requested"]:
                save()
                last_ckpt = time.time()
                if stop["requested"]:
                    log(run_dir, f"stopped on request at step {step} (checkpoint saved)")
                    if executor:
                        executor.shutdown(wait=False, cancel_futures=True)
                    return
        save(tag=str(T_max))
        log(run_dir, f"stage {si} done at step {step}; exported {run_dir}/export-{T_max}")
        stage_start = stage_end
    log(run_dir, "training complete")


if __name__ == "__main__":
    main()
