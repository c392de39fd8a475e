#!/usr/bin/env python3
"""Summarises a defaults sweep (scripts/tune_defaults.sh): one Markdown table per protocol
(rows = settings, columns = method @ keep, cells = mean accuracy over the tasks), the best
setting per protocol, method and keep, and the setting with the best mean over every cell.

    python3 scripts/tune_table.py OUT_DIR
"""
import collections
import glob
import json
import os
import sys


def load(out_dir):
    runs = []
    for path in sorted(glob.glob(os.path.join(out_dir, "*.json"))):
        with open(path) as f:
            j = json.load(f)
        cfg = j["config"]
        d = cfg["method_defaults"]
        setting = (d["window"], d["pool"], d["kernel"])
        cells = collections.defaultdict(list)  # (method, keep) -> task accuracies
        for r in j["results"]:
            cells[(r["method"], r["keep"])].append(r["accuracy"])
        means = {k: sum(v) / len(v) for k, v in cells.items()}
        runs.append({"protocol": cfg["protocol"], "setting": setting, "means": means,
                     "n": cfg["n"], "seed": cfg["seed"], "tasks": cfg["tasks"],
                     "command": j["command"]})
    return runs


def fmt_setting(s):
    return "window %d, %s %d" % s


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: tune_table.py OUT_DIR")
    runs = load(sys.argv[1])
    if not runs:
        sys.exit("tune_table.py: no JSON files in " + sys.argv[1])
    first = runs[0]
    print("Dev seed %d, n %d per task, tasks %s; cells = mean accuracy over the tasks."
          % (first["seed"], first["n"], ",".join(first["tasks"])))
    overall = collections.defaultdict(list)  # setting -> every compressed cell
    for protocol in ("query_aware", "question_agnostic"):
        prs = sorted((r for r in runs if r["protocol"] == protocol), key=lambda r: r["setting"])
        if not prs:
            continue
        cols = sorted({k for r in prs for k in r["means"] if k[0] != "full"})
        full = [v for r in prs for k, v in r["means"].items() if k[0] == "full"]
        print("\n### %s (full cache: %.1f)\n" % (protocol, full[0] if full else float("nan")))
        print("| setting | " + " | ".join("%s @%g" % c for c in cols) + " | mean |")
        print("|---" * (len(cols) + 2) + "|")
        for r in prs:
            vals = [r["means"].get(c) for c in cols]
            got = [v for v in vals if v is not None]
            mean = sum(got) / len(got) if got else float("nan")
            if len(got) == len(cols):
                overall[r["setting"]].extend(got)
            print("| %s | " % fmt_setting(r["setting"]) +
                  " | ".join("-" if v is None else "%.1f" % v for v in vals) +
                  " | %.1f |" % mean)
        print("\nBest per method and keep (%s):\n" % protocol)
        for c in cols:
            best = max(prs, key=lambda r: r["means"].get(c, -1.0))
            print("- %s @ keep %g: %s (%.1f)" % (c[0], c[1], fmt_setting(best["setting"]),
                                                 best["means"][c]))
    complete = {s: v for s, v in overall.items()
                if len(v) == max(len(x) for x in overall.values())}
    if complete:
        best = max(complete, key=lambda s: sum(complete[s]) / len(complete[s]))
        print("\nBest mean over every method, keep and protocol (settings run in both "
              "protocols): %s (%.1f)" % (fmt_setting(best),
                                         sum(complete[best]) / len(complete[best])))


if __name__ == "__main__":
    main()
