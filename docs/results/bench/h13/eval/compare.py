#!/usr/bin/env python3
"""Sample-by-sample comparison of two `snapkv eval` JSON files of the same command.

Usage: python3 compare.py A.json B.json  -> per method: accuracy of each, samples whose
prediction or score differ.
"""
import json
import sys

a, b = (json.load(open(p)) for p in sys.argv[1:3])
total = differ = 0
for ra, rb in zip(a["results"], b["results"]):
    assert (ra["method"], ra["task"]) == (rb["method"], rb["task"]), "different runs"
    d = sum(x.get("prediction") != y.get("prediction") or x.get("score") != y.get("score")
            for x, y in zip(ra["samples"], rb["samples"]))
    total += len(ra["samples"])
    differ += d
    print(f"{ra['method']:8s} {ra['task']:16s} {ra['accuracy']:6.1f} {rb['accuracy']:6.1f}  "
          f"{d} of {len(ra['samples'])} samples differ")
print(f"all: {differ} of {total} samples differ")
