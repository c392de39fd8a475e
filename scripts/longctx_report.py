#!/usr/bin/env python3
"""The report of scripts/bench_longctx.sh measure: decode tokens/s after a 16K-token prompt, ours
(full cache, SnapKV budget 1024) against llama.cpp's full cache, each of ours against its
memory-traffic bound, and the peak RSS of the prefills (from prepare).

Memory-traffic bound of one decode step = (weight bytes the step reads + KV bytes of the rows it
attends to) / read bandwidth. Weight bytes: every matrix and the output head plus one embedding
row (`snapkv ask --json` weight_bytes_per_step). KV rows: the loaded cache's kept rows, the
question's tokens and half the generated ones (the mean over the generation), at the loaded
cache's bytes per row. Read bandwidth: build/bench/bench_read_bandwidth with the same threads (the
higher of its 4 KiB-page and huge-page rates),
median of its repetitions, in the same run.

Reads WORK/{full,snapkv1024,snapkv1024-short}.{json,rss}, WORK/llama-prefill.{err,rss} and
OUT/{ours-full,ours-snapkv1024,read_bandwidth}.json, OUT/llama-*.err; writes OUT/longctx.json and
prints a table. Python 3 standard library only.
"""
import argparse
import glob
import json
import os
import re
import statistics
import sys

EVAL_RE = re.compile(r"llama_perf_context_print:\s+eval time =\s+([\d.]+) ms /\s+(\d+) runs")
PROMPT_RE = re.compile(r"llama_perf_context_print:\s+prompt eval time =\s+([\d.]+) ms /\s+(\d+) tokens")


def fail(message):
    sys.exit("longctx_report: error: " + message)


def load_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        fail("cannot read %s: %s" % (path, e))


def read_int(path):
    try:
        with open(path) as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def read_bandwidth(path):
    """The higher median bytes/s of BM_ReadBandwidth (4 KiB pages) and BM_ReadBandwidthHugePages
    (2 MiB pages, as the weights are held by default) in a Google Benchmark JSON file: the bound
    uses the best read rate the machine reached, and the pair is kept in longctx.json."""
    data = load_json(path)
    rows = [b for b in data.get("benchmarks", []) if b.get("aggregate_name") == "median"]
    if not rows:  # a single repetition has no aggregates
        rows = [b for b in data.get("benchmarks", []) if b.get("run_type") == "iteration"]
    rows = [b for b in rows if "bytes_per_second" in b]
    if not rows:
        fail("no BM_ReadBandwidth result in %s" % path)
    best = max(rows, key=lambda b: float(b["bytes_per_second"]))
    return float(best["bytes_per_second"]), best["name"], {
        b["name"]: float(b["bytes_per_second"]) for b in rows}


def ours(path, bandwidth):
    a = load_json(path)
    answers = a.get("answers", [])
    if not answers:
        fail("no answers in %s" % path)
    rates = [x["decode_tokens_per_s"] for x in answers]
    steps = answers[0]["decode_steps"]
    if any(x["decode_steps"] != steps for x in answers) or steps < 1:
        fail("%s: the answers decoded different or no steps: %s (--ignore-eos missing?)"
             % (path, [x["decode_steps"] for x in answers]))
    kept, kv_bytes = a["kept_rows"]["mean"], a["kv_bytes"]
    row_bytes = kv_bytes / max(kept, 1)
    mean_rows = kept + answers[0]["question_tokens"] + (steps + 1) / 2.0
    step_bytes = a["weight_bytes_per_step"] + row_bytes * mean_rows
    bound = bandwidth / step_bytes
    median = statistics.median(rates)
    return {
        "cache": a["cache_file"], "prompt_tokens": a["prompt_tokens"], "policy": a["policy"],
        "codec": a["codec"], "kept_rows": kept, "kv_bytes_loaded": kv_bytes,
        "kv_bytes_per_row": row_bytes, "decode_steps": steps, "threads": a.get("threads"),
        "decode_tok_s": rates, "median_decode_tok_s": median,
        "weight_bytes_per_step": a["weight_bytes_per_step"],
        "bytes_per_step": step_bytes, "bound_tok_s": bound, "fraction_of_bound": median / bound,
    }


def llama(out_dir):
    rates, runs = [], None
    for path in sorted(glob.glob(os.path.join(out_dir, "llama-*.err"))):
        with open(path, errors="replace") as f:
            text = f.read()
        m = EVAL_RE.search(text)
        if not m:
            fail("no 'eval time' line in %s" % path)
        p = PROMPT_RE.search(text)
        if p and int(p.group(2)) > 8:  # the prompt cache did not match: the prompt was re-run
            fail("%s: llama-cli evaluated %s prompt tokens, expected the saved state to be used "
                 "(a stale llama.session? rerun prepare)" % (path, p.group(2)))
        ms, n = float(m.group(1)), int(m.group(2))
        rates.append(1000.0 * n / ms)
        runs = n
    if not rates:
        fail("no llama-*.err in %s" % out_dir)
    return {"decode_tok_s": rates, "median_decode_tok_s": statistics.median(rates), "runs": runs}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--work", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--reps", type=int, required=True)
    ap.add_argument("--gen", type=int, required=True)
    ap.add_argument("--threads", type=int, required=True)
    args = ap.parse_args()

    bandwidth, bw_name, bw_all = read_bandwidth(os.path.join(args.out, "read_bandwidth.json"))
    full = ours(os.path.join(args.out, "ours-full.json"), bandwidth)
    snap = ours(os.path.join(args.out, "ours-snapkv1024.json"), bandwidth)
    ref = llama(args.out)
    llama_prompt = None
    try:
        with open(os.path.join(args.work, "llama-prefill.err"), errors="replace") as f:
            m = PROMPT_RE.search(f.read())
            llama_prompt = int(m.group(2)) if m else None
    except OSError:
        pass
    prefill = {}
    for name in ("full", "snapkv1024", "snapkv1024-short"):
        c = load_json(os.path.join(args.work, name + ".json"))
        prefill[name] = {"prompt_tokens": c["prompt_tokens"], "method": c["method"],
                         "chunk_mode": c["config"]["cache"].get("chunk_mode"),
                         "prefill_chunk": c["config"]["cache"].get("prefill_chunk"),
                         "kept_rows": c["kept_rows"]["mean"], "kv_bytes": c["kv_bytes"],
                         "peak_rss_bytes": read_int(os.path.join(args.work, name + ".rss"))}
    prefill["llama.cpp"] = {"prompt_tokens": llama_prompt,
                            "peak_rss_bytes": read_int(os.path.join(args.work, "llama-prefill.rss"))}
    result = {
        "model": args.model, "threads": args.threads, "generated_tokens": args.gen,
        "reps": args.reps, "read_bandwidth_bytes_per_s": bandwidth, "read_bandwidth_bench": bw_name,
        "read_bandwidths_bytes_per_s": bw_all,
        "ours_full": full, "ours_snapkv1024": snap, "llama_cpp_full": ref, "prefill": prefill,
        "ratios": {
            "ours_full_vs_llama_full": full["median_decode_tok_s"] / ref["median_decode_tok_s"],
            "ours_snapkv1024_vs_llama_full":
                snap["median_decode_tok_s"] / ref["median_decode_tok_s"],
            "ours_snapkv1024_fraction_of_bound": snap["fraction_of_bound"],
            "ours_full_fraction_of_bound": full["fraction_of_bound"],
        },
        "goals": {"ours_full_vs_llama_full": ">= 1.0", "ours_snapkv1024_vs_llama_full": ">= 2.0",
                  "ours_snapkv1024_fraction_of_bound": ">= 0.85"},
    }
    with open(os.path.join(args.out, "longctx.json"), "w") as f:
        json.dump(result, f, indent=1)

    print("Decode after a %d-token prompt (%s), %d threads, %d generated tokens, medians of %d"
          % (full["prompt_tokens"], os.path.basename(args.model), args.threads, args.gen, args.reps))
    print("read bandwidth: %.2f GB/s (%s; measured: %s)" % (
        bandwidth / 1e9, bw_name,
        ", ".join("%s %.2f" % (n.split("/")[0], v / 1e9) for n, v in sorted(bw_all.items()))))
    print()
    print("| run | kept rows | bytes/step (MB) | bound tok/s | decode tok/s | of bound | vs llama.cpp full |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for label, r in (("ours full", full), ("ours snapkv 1024", snap)):
        print("| %s | %d | %.1f | %.2f | %.2f | %.2f | %.2f |"
              % (label, r["kept_rows"], r["bytes_per_step"] / 1e6, r["bound_tok_s"],
                 r["median_decode_tok_s"], r["fraction_of_bound"],
                 r["median_decode_tok_s"] / ref["median_decode_tok_s"]))
    print("| llama.cpp full | %s | | | %.2f | | 1.00 |"
          % (llama_prompt if llama_prompt is not None else "?", ref["median_decode_tok_s"]))
    print()
    print("| prefill | tokens | chunk mode | peak RSS (MiB) |")
    print("|---|---:|---|---:|")
    for name, p in prefill.items():
        rss = p["peak_rss_bytes"]
        print("| %s | %s | %s | %s |" % (name, p["prompt_tokens"], p.get("chunk_mode", ""),
                                         "%.0f" % (rss / 2**20) if rss else "?"))
    print()
    print("goals: ours full / llama.cpp >= 1.0 (%.2f), snapkv 1024 / llama.cpp >= 2.0 (%.2f), "
          "snapkv 1024 within 15%% of its bound (%.2f)"
          % (result["ratios"]["ours_full_vs_llama_full"],
             result["ratios"]["ours_snapkv1024_vs_llama_full"], snap["fraction_of_bound"]))


if __name__ == "__main__":
    main()
