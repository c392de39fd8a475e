#!/usr/bin/env python3
"""Six-task means per method from `snapkv eval --json` files (plain or .json.gz).

For every method that has all six tasks: the accuracy per task, the mean over the six tasks and
the KV bytes as a percentage of an fp16 cache of every token (end of the run).

Options:
  --keep K    the keep of the evicting methods to report (default 0.2; methods whose policy is
              `full` report under every keep)
  --first N   only samples with index < N (puts a longer run on the samples of a shorter one)
  --merge     read all the files as one run (runs of one task per file; before --table: runs
              of different tasks, one table)
  --table     instead: one Markdown row per method, the six-task mean (share of full) at every
              keep of the file, then the cost: the full cache's prefill tokens/s over the
              method's (prefill plus scoring, eval's `prefill t/s`, all keeps pooled), a ratio
              within the one run

Usage (repository root):
  python3 docs/results/means.py docs/results/codecs-25bit/rep_codecs_1k_s3.json.gz
  python3 docs/results/means.py --merge docs/results/codecs-kivi42/n30_1k_s3_*.json.gz
  python3 docs/results/means.py --table docs/results/quality/tasks_1024.json.gz
  python3 docs/results/means.py --merge --table docs/results/quality/small8k/tasks_8191_{a,b}.json.gz
"""
import gzip
import json
import sys

TASKS = ["niah_single", "niah_multikey", "passkey", "niah_multivalue", "niah_multiquery", "vt"]
SHORT = ["single", "multikey", "passkey", "multivalue", "multiquery", "vt"]


def load(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        return json.load(f)


def table(paths):
    """Markdown rows: method | mean (share) per keep | cost, from one run's per-task results
    (several files: runs of different tasks on the same settings, read as one)."""
    path = " + ".join(paths)
    results = [r for p in paths for r in load(p)["results"] if r["task"] in TASKS]
    keeps = sorted({r["keep"] for r in results if not r["keep_independent"]})
    acc, secs, toks, order = {}, {}, {}, []
    for r in results:
        m = r["method"]
        if m not in order:
            order.append(m)
        k = None if r["keep_independent"] else r["keep"]
        acc.setdefault((m, k), {})[r["task"]] = r["accuracy"]
        secs[m] = secs.get(m, 0.0) + r["prefill_s"]
        toks[m] = toks.get(m, 0.0) + r["mean_prompt_tokens"] * r["n"]
    if "full" not in order:
        raise SystemExit(f"means.py: {path} has no `full` run, expected one to compare with")
    full = sum(acc[("full", None)].values()) / len(TASKS)
    full_rate = toks["full"] / secs["full"]
    print("| method | " + " | ".join(f"keep {k:g}" for k in keeps) + " | cost |")
    print("|---|" + "---|" * (len(keeps) + 1))
    for m in order:
        cells = []
        for k in ([None] if (m, None) in acc else keeps):
            a = acc.get((m, k), {})
            if len(a) != len(TASKS):
                cells.append("")
                continue
            mean = sum(a.values()) / len(TASKS)
            cells.append(f"{mean:.1f} ({100.0 * mean / full:.0f}%)")
        cells += [""] * (len(keeps) - len(cells))
        cost = full_rate / (toks[m] / secs[m])
        print(f"| {m} | " + " | ".join(cells) + f" | {cost:.2f}x |")


def main(argv):
    keep, first, merge, files = 0.2, None, False, []
    while argv:
        a = argv.pop(0)
        if a == "--keep":
            keep = float(argv.pop(0))
        elif a == "--first":
            first = int(argv.pop(0))
        elif a == "--merge":
            merge = True
        elif a == "--table":
            for run in ([argv] if merge else [[f] for f in argv]):
                print(f"# {' + '.join(run)}")
                table(run)
            return 0
        else:
            files.append(a)
    if not files:
        print(__doc__, file=sys.stderr)
        return 2
    runs = [files] if merge else [[f] for f in files]
    print(f"{'method':22s} {'N':>4s} " + " ".join(f"{t:>10s}" for t in SHORT) +
          f" {'mean':>7s} {'KV%':>6s}")
    for run in runs:
        label = run[0] if len(run) == 1 else f"{run[0]} + {len(run) - 1} more"
        print(f"# {label}")
        acc, kv = {}, {}
        for path in run:
            for r in load(path)["results"]:
                if r["task"] not in TASKS:
                    continue
                if not r["keep_independent"] and abs(r["keep"] - keep) > 1e-9:
                    continue
                s = [x for x in r["samples"] if first is None or x["index"] < first]
                acc.setdefault(r["method"], {})[r["task"]] = (
                    100.0 * sum(x["score"] for x in s) / len(s), len(s))
                kv.setdefault(r["method"], []).append(r["kv_fraction"])
        for method, cells in acc.items():
            if len(cells) != len(TASKS):
                continue
            mean = sum(v[0] for v in cells.values()) / len(TASKS)
            n = min(v[1] for v in cells.values())
            kvp = 100.0 * sum(kv[method]) / len(kv[method])
            print(f"{method:22s} {n:4d} " + " ".join(f"{cells[t][0]:10.1f}" for t in TASKS) +
                  f" {mean:7.2f} {kvp:6.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
