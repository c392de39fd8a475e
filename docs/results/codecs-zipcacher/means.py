#!/usr/bin/env python3
"""Six-task means from snapkv eval JSON files; with --first N, only samples with index < N
(to put a full-cache run with more samples per task on the same samples as a shorter run).
usage: means.py [--first N] [--method M ...] file.json ..."""
import json
import sys

args = sys.argv[1:]
first = None
only = set()
files = []
while args:
    a = args.pop(0)
    if a == "--first":
        first = int(args.pop(0))
    elif a == "--method":
        only.add(args.pop(0))
    else:
        files.append(a)
TASKS = ["niah_single", "niah_multikey", "passkey", "niah_multivalue", "niah_multiquery", "vt"]
for f in files:
    d = json.load(open(f))
    rows = {}
    for r in d["results"]:
        if r["task"] == "all" or r["task"] not in TASKS or (only and r["method"] not in only):
            continue
        s = [x for x in r["samples"] if first is None or x["index"] < first]
        key = (r["method"], r["keep"] if not r["keep_independent"] else None)
        rows.setdefault(key, {})[r["task"]] = (100.0 * sum(x["score"] for x in s) / len(s), len(s),
                                               r["kv_fraction"])
    for (m, keep), t in rows.items():
        if len(t) != len(TASKS):
            continue
        mean = sum(t[k][0] for k in TASKS) / len(TASKS)
        kv = sum(t[k][2] for k in TASKS) / len(TASKS)
        cells = " ".join(f"{t[k][0]:5.1f}" for k in TASKS)
        print(f"{m:22s} keep={keep} n/task={t[TASKS[0]][1]} {cells} mean {mean:6.2f} "
              f"KV% (mean of tasks) {100 * kv:5.1f}  [{f.split('/')[-1]}]")
