#!/usr/bin/env python3
"""How many of a multi-needle sample's reference values each cache method's answer contains.

    python3 scripts/needles_found.py RUN.json [RUN.json ...]

Reads `snapkv eval --json` task runs and prints, per file, method, keep and multi-needle task
(niah_multivalue, niah_multiquery, vt), the accuracy and the mean number of distinct reference
values found in the prediction, against the number of values asked for. It tells whether a cache
lost whole needles (fewer found) or garbled the ones it kept (docs/TUNING.md uses it).
"""
import json
import sys

MULTI = ("niah_multivalue", "niah_multiquery", "vt")


def main(paths):
    if not paths:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    print("file\tmethod\tkeep\ttask\taccuracy\tfound\tasked")
    for path in paths:
        with open(path, encoding="utf-8") as f:
            run = json.load(f)
        for r in run["results"]:
            if r["task"] not in MULTI or not r["samples"]:
                continue
            found = [sum(a in s["prediction"] for a in set(s["answers"])) for s in r["samples"]]
            asked = sum(len(set(s["answers"])) for s in r["samples"]) / len(r["samples"])
            keep = "-" if r.get("keep_independent") else f"{r['keep']:.2f}"
            print(f"{path}\t{r['method']}\t{keep}\t{r['task']}\t{r['accuracy']:.1f}\t"
                  f"{sum(found) / len(found):.2f}\t{asked:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
