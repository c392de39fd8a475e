#!/usr/bin/env python3
"""Compares two scripts/eval_suite.sh outputs result for result, timings left out.

Usage: scripts/eval_diff.py DIR_A DIR_B   (exit 0 when every cell is identical)
"""
import json
import sys


def strip(x):
    """The results without their timings (seconds, tokens per second)."""
    if isinstance(x, dict):
        # A sample's mean kept rows per head was once named kept_rows.
        return {("mean_kept_rows" if k == "kept_rows" and isinstance(v, (int, float)) else k):
                strip(v) for k, v in x.items()
                if not (k.endswith("_s") or "seconds" in k or "tok_s" in k)}
    if isinstance(x, list):
        return [strip(v) for v in x]
    return x


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    differ = 0
    for name in ("qa", "ag", "ppl"):
        a = strip(json.load(open(f"{sys.argv[1]}/{name}.json"))["results"])
        b = strip(json.load(open(f"{sys.argv[2]}/{name}.json"))["results"])
        same = a == b
        print(f"{name}: {len(a)} cells {'identical' if same else 'DIFFER'}")
        if not same:
            differ += 1
            for x, y in zip(a, b):
                if x != y:
                    keys = sorted(k for k in set(x) | set(y) if x.get(k) != y.get(k))
                    print("  first difference:", {k: (x.get(k), y.get(k)) for k in keys})
                    break
    sys.exit(1 if differ else 0)


if __name__ == "__main__":
    main()
