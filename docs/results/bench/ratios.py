#!/usr/bin/env python3
"""Decode-attention speed-ups over fp16 from bench_kivi_attention JSON files (one per run).

For each run: the median ms per step of fp16 and of each codec (BM_DecodeAttend, 2 threads),
and fp16 median / codec median. Then, per codec and rows, the median of those per-run ratios.
Usage: python3 ratios.py run1/kivi_attention.json run2/kivi_attention.json ...
"""
import json
import re
import statistics
import sys

NAMES = {0: "fp16", 1: "kivi2", 2: "kivi4", 3: "kivi2r", 4: "kivi4r", 5: "kitty", 9: "kivi42",
         12: "kivi32", 13: "kivimix"}
pat = re.compile(r"BM_DecodeAttend/codec:(\d+)/rows:(\d+)/threads:0/")
per_run = []
for path in sys.argv[1:]:
    med = {}
    for b in json.load(open(path))["benchmarks"]:
        m = pat.match(b["name"])
        if m and b.get("aggregate_name") == "median":
            med[(int(m.group(1)), int(m.group(2)))] = b["real_time"]  # ms (kMillisecond)
    per_run.append(med)
    print(path)
    for (codec, rows), t in sorted(med.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        base = med.get((0, rows))
        ratio = f"  {base / t:.2f}x vs fp16" if base and codec != 0 else ""
        print(f"  {rows:>6} {NAMES.get(codec, codec):>8} {t:8.3f} ms{ratio}")
print("median over runs of the per-run ratio fp16 / codec:")
keys = sorted({k for med in per_run for k in med if k[0] != 0}, key=lambda k: (k[1], k[0]))
for codec, rows in keys:
    r = [med[(0, rows)] / med[(codec, rows)] for med in per_run if (codec, rows) in med
         and (0, rows) in med]
    print(f"  {rows:>6} {NAMES.get(codec, codec):>8} {statistics.median(r):.2f}x  "
          f"(runs: {', '.join(f'{x:.2f}' for x in r)})")
