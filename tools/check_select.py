#!/usr/bin/python3
"""Independent check of `snapkv select`: recomputes SnapKV scores and the kept set with numpy
(float64) from the same .npy files and compares them with the JSON the C++ command prints.

A development tool, not part of CI (it needs numpy: Debian's python3-numpy, run with /usr/bin/python3).

Two ways to run it:

  # 1. your own files (same flags as `snapkv select`):
  /usr/bin/python3 tools/check_select.py --snapkv build/snapkv --keys K.npy [--queries Q.npy] \
      --budget 256 --window 32 --sinks 4 [--pool max --kernel 7] [--keep-window] [--no-causal]

  # 2. a sweep over random inputs and every mode (proxy/queries, pool none/max/avg, keep-window,
  #    causal or not, budget below and above S, GQA):
  /usr/bin/python3 tools/check_select.py --snapkv build/snapkv --sweep 40 --seed 1

Exit status 0 when every case agrees, 1 otherwise.

What "agrees" means:
- scores: |cpp - ref| <= tol * ref + 1e-30 per position, with tol = 2 * logit_err + (S + 16) * eps32,
  logit_err = head_dim * eps32 * max(|q|.|k|) / sqrt(head_dim) (the float32 dot-product error bound
  for the largest sum of |q_i k_i|): a probability's relative error is at most twice the largest
  logit error, plus the rounding of exp and of the S-term softmax sum.
- kept: the same positions, except that positions whose reference scores are within tolerance of
  the selection threshold may be swapped (a near-tie the float32 code may break differently).

The reference follows the semantics documented in include/snapkv/kv/core/snapkv_score.h, written
here from those notes, not from the C++ code: keys rounded to fp16 (the cache stores fp16 and
scores what it stores), logits q.k/sqrt(d), softmax over all keys with the window row at key
S - w + r seeing keys <= its own index when causal, mean over window rows and the GQA group's
query heads; proxy mode uses the last w (fp16) keys as queries; max pooling over the in-range
part of the kernel, avg pooling dividing by the full kernel; sinks (and with --keep-window the
window) forced, the rest by score with ties to the earlier position.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

EPS32 = float(np.finfo(np.float32).eps)


def window_scores(keys, queries, causal):
    """keys [S][d] float64, queries [G][w][d] float64 -> scores [S] (mean attention)."""
    s, d = keys.shape
    g, w, _ = queries.shape
    w = min(w, s)
    queries = queries[:, queries.shape[1] - w:, :]
    out = np.zeros(s)
    logits = np.einsum("gwd,sd->gws", queries, keys) / np.sqrt(d)
    for r in range(w):
        visible = s - w + r + 1 if causal else s
        row = logits[:, r, :visible]
        row = row - row.max(axis=1, keepdims=True)
        p = np.exp(row)
        p /= p.sum(axis=1, keepdims=True)
        out[:visible] += p.sum(axis=0)
    return out / (g * w)


def pool(scores, kind, kernel):
    if kind == "none" or kernel == 1:
        return scores.copy()
    half = kernel // 2
    n = len(scores)
    out = np.empty(n)
    for i in range(n):
        lo, hi = max(0, i - half), min(n, i + half + 1)
        out[i] = scores[lo:hi].max() if kind == "max" else scores[lo:hi].sum() / kernel
    return out


def select(scores, budget, n_sink, forced_tail):
    """Kept candidate indices (ascending) and the forced set."""
    n = len(scores)
    if budget >= n:
        return list(range(n)), set(range(n))
    forced = set(range(min(n_sink, n))) | set(range(n - min(forced_tail, n), n))
    rest = [i for i in range(n) if i not in forced]
    rest.sort(key=lambda i: (-scores[i], i))
    return sorted(forced | set(rest[: budget - len(forced)])), forced


def reference(k, q, args):
    """k [H][S][d] float32, q [n_heads][W][d] float32 or None -> (kept, scores, tol) per kv head."""
    n_kv, s, d = k.shape
    keys16 = k.astype(np.float16).astype(np.float64)
    window = q.shape[1] if q is not None else args.window
    kernel = args.kernel if args.kernel else (7 if args.pool != "none" else 1)
    result = []
    for h in range(n_kv):
        if q is not None:
            group = q.shape[0] // n_kv
            qh = q[h * group:(h + 1) * group].astype(np.float64)
        else:
            w = min(window, s)
            qh = keys16[h, s - w:][None, :, :]
        raw = window_scores(keys16[h], qh, not args.no_causal)
        scores = pool(raw, args.pool, kernel)
        # float32 dot of length d: |error| <= d * eps * sum_i |q_i k_i|, then scaled by 1/sqrt(d)
        abs_dot = (np.abs(qh).reshape(-1, d) @ np.abs(keys16[h]).T).max()
        logit_err = d * EPS32 * abs_dot / np.sqrt(d)
        # probabilities: twice the logit error, plus rounding of exp and of the S-term sum
        tol = 2.0 * logit_err + (s + 16) * EPS32
        tail = min(window, s) if args.keep_window else 0
        kept, forced = select(scores, args.budget, args.sinks, tail)
        result.append((kept, scores, tol, forced))
    return result


def run_cpp(args, keys_path, queries_path):
    cmd = [args.snapkv, "select", "--keys", keys_path, "--budget", str(args.budget),
           "--sinks", str(args.sinks), "--pool", args.pool, "--json"]
    if queries_path:
        cmd += ["--queries", queries_path]
    else:
        cmd += ["--window", str(args.window)]
    if args.kernel:
        cmd += ["--kernel", str(args.kernel)]
    if args.keep_window:
        cmd.append("--keep-window")
    if args.no_causal:
        cmd.append("--no-causal")
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}: {proc.stderr.strip()}")
    return json.loads(proc.stdout), cmd


def compare(args, keys_path, queries_path, label):
    k = np.load(keys_path)
    q = np.load(queries_path) if queries_path else None
    got, cmd = run_cpp(args, keys_path, queries_path)
    ref = reference(k, q, args)
    ok = True
    notes = []
    if len(got["kept"]) != len(ref) or len(got["scores"]) != len(ref):
        return False, [f"{label}: {len(got['kept'])} kv heads in JSON, expected {len(ref)}"]
    for h, (kept, scores, tol, forced) in enumerate(ref):
        cpp_scores = np.asarray(got["scores"][h], dtype=np.float64)
        if cpp_scores.shape != scores.shape:
            ok = False
            notes.append(f"{label} head {h}: {cpp_scores.size} scores, expected {scores.size}")
            continue
        err = np.abs(cpp_scores - scores)
        bound = tol * scores + 1e-30
        worst = int(np.argmax(err / bound))
        if err[worst] > bound[worst]:
            ok = False
            notes.append(f"{label} head {h}: score[{worst}] {cpp_scores[worst]:.9g} vs ref "
                         f"{scores[worst]:.9g} (|diff| {err[worst]:.3g} > bound {bound[worst]:.3g})")
        cpp_kept = got["kept"][h]
        if cpp_kept != sorted(cpp_kept) or len(set(cpp_kept)) != len(cpp_kept):
            ok = False
            notes.append(f"{label} head {h}: kept positions not strictly increasing")
        if set(cpp_kept) != set(kept):
            only_cpp = set(cpp_kept) - set(kept)
            only_ref = set(kept) - set(cpp_kept)
            free = [i for i in kept if i not in forced]
            threshold = min(scores[i] for i in free) if free else 0.0
            near = all(abs(scores[i] - threshold) <= 2 * (tol * threshold + 1e-30)
                       for i in only_cpp | only_ref)
            if near and len(cpp_kept) == len(kept):
                notes.append(f"{label} head {h}: near-tie swap {sorted(only_cpp)} <-> "
                             f"{sorted(only_ref)} (within tolerance, accepted)")
            else:
                ok = False
                notes.append(f"{label} head {h}: kept differs: only C++ {sorted(only_cpp)[:10]}, "
                             f"only reference {sorted(only_ref)[:10]}")
    return ok, notes


def sweep(args):
    rng = np.random.default_rng(args.seed)
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        for case in range(args.sweep):
            n_kv = int(rng.integers(1, 4))
            group = int(rng.choice([1, 2, 4]))
            d = int(rng.choice([8, 16, 64]))
            s = int(rng.integers(8, 400))
            w = int(rng.integers(1, min(s, 40) + 1))
            # keys with structure: a few large positions so that selections are not near-random
            k = rng.standard_normal((n_kv, s, d)) * rng.uniform(0.3, 2.0)
            k[:, rng.integers(0, s, size=3), :] *= 3
            k = k.astype(np.float32)
            use_q = bool(rng.integers(0, 2))
            q = (rng.standard_normal((n_kv * group, w, d)) * rng.uniform(0.3, 2.0)).astype(np.float32)
            case_args = argparse.Namespace(**vars(args))
            case_args.window = w
            case_args.pool = str(rng.choice(["none", "max", "avg"]))
            case_args.kernel = int(rng.choice([0, 1, 3, 5, 7])) if case_args.pool != "none" else 0
            case_args.keep_window = bool(rng.integers(0, 2))
            case_args.no_causal = bool(rng.integers(0, 2))
            case_args.sinks = int(rng.integers(0, 6))
            forced = case_args.sinks + (w if case_args.keep_window else 0)
            case_args.budget = int(rng.integers(max(forced, 1), s + 20))
            kp = os.path.join(tmp, f"K{case}.npy")
            np.save(kp, k)
            qp = None
            if use_q:
                qp = os.path.join(tmp, f"Q{case}.npy")
                np.save(qp, q)
            label = (f"case {case} (S {s}, d {d}, kv {n_kv}, group {group if use_q else '-'}, w {w}, "
                     f"budget {case_args.budget}, sinks {case_args.sinks}, pool {case_args.pool}/"
                     f"{case_args.kernel}, keep_window {case_args.keep_window}, causal "
                     f"{not case_args.no_causal}, {'queries' if use_q else 'proxy'})")
            ok, notes = compare(case_args, kp, qp, label)
            for n in notes:
                print(n)
            if not ok:
                failures += 1
    print(f"check_select: {args.sweep - failures} / {args.sweep} cases agree")
    return 0 if failures == 0 else 1


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--snapkv", default="build/snapkv", help="path of the snapkv binary")
    p.add_argument("--keys")
    p.add_argument("--queries")
    p.add_argument("--budget", type=int, default=512)
    p.add_argument("--window", type=int, default=32)
    p.add_argument("--sinks", type=int, default=4)
    p.add_argument("--pool", choices=["none", "max", "avg"], default="none")
    p.add_argument("--kernel", type=int, default=0)
    p.add_argument("--keep-window", action="store_true")
    p.add_argument("--no-causal", action="store_true")
    p.add_argument("--sweep", type=int, default=0, help="run N random cases instead of --keys")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    if args.sweep:
        return sweep(args)
    if not args.keys:
        p.error("--keys (or --sweep N) is required")
    ok, notes = compare(args, args.keys, args.queries, os.path.basename(args.keys))
    for n in notes:
        print(n)
    print("check_select: agree" if ok else "check_select: DISAGREE")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
