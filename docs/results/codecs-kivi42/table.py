#!/usr/bin/env python3
"""The seed-3 tables of README.md. usage (repository root): python3 docs/results/codecs-kivi42/table.py
1K: n30_1k_s3_<task>.json (one task per file). 2K: n30_2k_s3_<task>.json (kivi42, snapkv+kivi42)
beside full / snapkv / kivi2 of docs/results/defaults/tasks_2047.json (N = 30, the same samples);
where the 2K N = 30 files are missing, the N = 10 files k2_s3_<task>.json and the first 10 samples
of the defaults run."""
import json
import os

D = "docs/results/codecs-kivi42/"
TASKS = ["niah_single", "niah_multikey", "passkey", "niah_multivalue", "niah_multiquery", "vt"]


def collect(results, first=None, keep=0.2):
    acc, kvf, n = {}, {}, {}
    for r in results:
        if r["task"] not in TASKS:
            continue
        if not r["keep_independent"] and abs(r["keep"] - keep) > 1e-9:
            continue
        s = [x for x in r["samples"] if first is None or x["index"] < first]
        acc.setdefault(r["method"], {})[r["task"]] = 100.0 * sum(x["score"] for x in s) / len(s)
        kvf.setdefault(r["method"], []).append(r["kv_fraction"])
        n[r["method"]] = min(n.get(r["method"], 10**9), len(s))
    out = {}
    for m, t in acc.items():
        if len(t) == len(TASKS):
            out[m] = (t, sum(t.values()) / len(TASKS), 100.0 * sum(kvf[m]) / len(kvf[m]), n[m])
    return out


def load(pattern):
    res = []
    for t in TASKS:
        p = D + pattern.format(t)
        if not os.path.exists(p):
            return None
        res += json.load(open(p))["results"]
    return res


def table(title, rows, full, snap):
    print(f"\n{title}\n")
    print("| method | " + " | ".join(TASKS) + " | mean | share of full / vs snapkv | KV % of fp16 | N |")
    print("|---" * (len(TASKS) + 5) + "|")
    for m, (t, mean, kv, n) in rows:
        rel = (f"{100 * mean / full:.1f}%" if "+" not in m and m != "snapkv"
               else f"{mean - snap:+.2f} points")
        cells = " | ".join(f"{t[k]:.1f}" for k in TASKS)
        print(f"| {m} | {cells} | {mean:.2f} | {rel} | {kv:.1f} | {n} |")


order = ["full", "kivi42", "kivi2", "kivi4", "kitty", "snapkv", "snapkv+kivi42"]
r1 = load("n30_1k_s3_{}.json")
if r1:
    m1 = collect(r1)
    table("1K (1024 tokens), seed 3", [(m, m1[m]) for m in order if m in m1],
          m1["full"][1], m1["snapkv"][1])
r2 = load("n30_2k_s3_{}.json")
first = None
if r2 is None:
    r2, first = load("k2_s3_{}.json"), 10
base = collect(json.load(open("docs/results/defaults/tasks_2047.json"))["results"], first=first)
m2 = collect(r2)
rows = [(m, base[m]) for m in ["full", "kivi2", "snapkv"]] + [(m, m2[m]) for m in m2]
table(f"2K (2047 tokens), seed 3 (full, kivi2, snapkv from ../defaults/tasks_2047.json)", rows,
      base["full"][1], base["snapkv"][1])
