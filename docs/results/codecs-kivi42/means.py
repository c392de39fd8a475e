#!/usr/bin/env python3
"""Six-task means (and KV % of fp16) per method from snapkv eval JSON files; --first N keeps only
samples with index < N (to put a longer run on the samples of a shorter one), --keep K the
evicting methods' keep (default 0.2), --merge reads the files as one run (one task per file).
usage (repository root): python3 docs/results/codecs-kivi42/means.py [--first N] [--merge] F.json ..."""
import json
import sys

TASKS = ["niah_single", "niah_multikey", "passkey", "niah_multivalue", "niah_multiquery", "vt"]
args, first, keep, files, merge = sys.argv[1:], None, 0.2, [], False
while args:
    a = args.pop(0)
    if a == "--first":
        first = int(args.pop(0))
    elif a == "--merge":
        merge = True
    elif a == "--keep":
        keep = float(args.pop(0))
    else:
        files.append(a)
groups = [files] if merge else [[f] for f in files]
for group in groups:
    f = group[0] if len(group) == 1 else group[0] + " + " + str(len(group) - 1) + " more"
    results = [r for g in group for r in json.load(open(g))["results"]]
    acc, kvf = {}, {}
    for r in results:
        if r["task"] not in TASKS:
            continue
        if not r["keep_independent"] and abs(r["keep"] - keep) > 1e-9:
            continue
        s = [x for x in r["samples"] if first is None or x["index"] < first]
        acc.setdefault(r["method"], {})[r["task"]] = (100.0 * sum(x["score"] for x in s) / len(s),
                                                      len(s))
        kvf.setdefault(r["method"], []).append(r["kv_fraction"])
    for m, t in acc.items():
        if len(t) != len(TASKS):
            continue
        cells = " ".join(f"{t[k][0]:6.1f}" for k in TASKS)
        mean = sum(v[0] for v in t.values()) / len(TASKS)
        n = min(v[1] for v in t.values())
        kv = 100.0 * sum(kvf[m]) / len(kvf[m])
        print(f"{m:22s} N={n:<3d} {cells}  mean {mean:6.2f}  KV% {kv:5.1f}  [{f.split('/')[-1]}]")
