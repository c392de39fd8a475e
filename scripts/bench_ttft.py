#!/usr/bin/env python3
"""Time to first token with a loaded .kvc file vs prefilling the document from scratch.

For each case MODEL:TOKENS the script writes a document of about TOKENS tokens (seeded filler
sentences around a pass key), then:
  1. `snapkv compress` it once (--method, --keep) -> doc.kvc; records the file size and the size
     of an fp16 cache of every document token (kv_bytes_full_fp16);
  2. `snapkv ask --max-tokens 1` one question, --reps times, each a fresh process:
     TTFT (.kvc) = load_s (map + validate + rebuild the caches) + ttft_s (append the question,
     first logits, arg-max); the model's own load is not counted;
  3. `snapkv run --max-tokens 1` on document + question, --reps times, with --scratch-method
     (default full: what a server without prompt caches does): TTFT (scratch) = prefill_s.
Medians over the repetitions; speedup = median scratch / median .kvc.

Default cases: the shipped model at 2K, and a random-weight 0.73B Llama at 4K and 16K. That file
is built by tools/make_big_random_model.py (llama.cpp's gguf-py needed) with --ctx >= 16K + the
question, outside the repository (default /work/models-big/random-0.73b-ctx20k.gguf); pass
--build-big to build it when it is missing.

Timings depend on the machine: run on a quiet one (the figures of record are not from a shared
build machine). Python 3 standard library only.

  scripts/bench_ttft.py --snapkv build/snapkv --reps 3
  scripts/bench_ttft.py --cases models/snapkv-tiny4.gguf:256 --reps 3 --json out.jsonl
"""
import argparse
import json
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIG_MODEL = "/work/models-big/random-0.73b-ctx20k.gguf"
BIG_CTX = 20480
QUESTION = " Question: what is the pass key? Answer: the pass key is"
WORDS = ("the river stone garden quiet morning paper window silver market yellow bridge small "
         "winter letter orange mountain careful music early forest simple number green travel "
         "table evening shadow bright corner distant story harbor lantern").split()


def fail(message):
    sys.exit("bench_ttft: error: " + message)


def run_json(cmd):
    """Runs a snapkv command with --json and returns the parsed object (stdout)."""
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        fail("%s exited %d: %s" % (" ".join(cmd[:2]), proc.returncode, proc.stderr.strip()[-2000:]))
    return json.loads(proc.stdout)


def count_tokens(snapkv, model, path):
    proc = subprocess.run([snapkv, "tokenize", "--model", model, "--file", path],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        fail("tokenize: " + proc.stderr.strip())
    return len(re.findall(r"-?\d+", proc.stdout))


def make_document(snapkv, model, tokens, path, seed):
    """A document of about `tokens` tokens (within 2%), the pass key in its first third."""
    rng = random.Random(seed)
    n_words = max(8, tokens // 2)
    for _ in range(6):
        words = [rng.choice(WORDS) for _ in range(n_words)]
        sentences = [" ".join(words[i:i + 12]).capitalize() + "." for i in range(0, len(words), 12)]
        sentences.insert(len(sentences) // 3, "The pass key is 48213. Remember it.")
        with open(path, "w") as f:
            f.write(" ".join(sentences))
        got = count_tokens(snapkv, model, path)
        if abs(got - tokens) <= max(4, tokens // 50):
            return got
        n_words = max(8, int(n_words * tokens / max(got, 1)))
        rng = random.Random(seed)
    return got


def build_big(path, ctx):
    gguf_py = "/work/llama.cpp/gguf-py"
    os.makedirs(os.path.dirname(path), exist_ok=True)
    env = dict(os.environ, PYTHONPATH=gguf_py + os.pathsep + os.environ.get("PYTHONPATH", ""))
    python = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
    cmd = [python, os.path.join(ROOT, "tools", "make_big_random_model.py"), path,
           "--ctx", str(ctx)]
    print("[bench_ttft] building %s (%s)" % (path, " ".join(cmd)), file=sys.stderr)
    subprocess.run(cmd, check=True, env=env)


def bench_case(args, model, tokens, work):
    doc = os.path.join(work, "doc-%d.txt" % tokens)
    n_doc = make_document(args.snapkv, model, tokens, doc, args.seed)
    with open(doc) as f:
        text = f.read()
    full_prompt = os.path.join(work, "doc-%d-question.txt" % tokens)
    with open(full_prompt, "w") as f:
        f.write(text + QUESTION)
    kvc = os.path.join(work, "doc-%d.kvc" % tokens)
    common = ["--threads", str(args.threads)]
    c = run_json([args.snapkv, "compress", "--model", model, "--prompt-file", doc, "--method",
                  args.method, "--keep", str(args.keep), "--out", kvc, "--json"] + common)
    kvc_ttft, kvc_load, kvc_ask, bytes_read = [], [], [], 0
    for _ in range(args.reps):
        a = run_json([args.snapkv, "ask", "--model", model, "--cache", kvc, "--question", QUESTION,
                      "--max-tokens", "1", "--json"] + common)
        ans = a["answers"][0]
        kvc_load.append(a["load_s"])
        kvc_ask.append(ans["ttft_s"])
        kvc_ttft.append(a["load_s"] + ans["ttft_s"])
        bytes_read = a["bytes_read"]
    scratch = []
    for _ in range(args.reps):
        r = run_json([args.snapkv, "run", "--model", model, "--prompt-file", full_prompt,
                      "--method", args.scratch_method, "--max-tokens", "1", "--json"] + common)
        scratch.append(r["prefill_s"])
    med_kvc, med_scratch = statistics.median(kvc_ttft), statistics.median(scratch)
    return {
        "model": model, "target_tokens": tokens, "document_tokens": n_doc,
        "method": args.method, "keep": args.keep, "scratch_method": args.scratch_method,
        "reps": args.reps, "threads": args.threads,
        "kvc_file_bytes": c["file_bytes"], "kvc_bytes_read": bytes_read,
        "fp16_full_cache_bytes": c["kv_bytes_full_fp16"],
        "file_vs_fp16_full": c["file_bytes"] / max(c["kv_bytes_full_fp16"], 1),
        "compress_prefill_s": c["prefill_s"],
        "ttft_kvc_s": kvc_ttft, "kvc_load_s": kvc_load, "kvc_question_s": kvc_ask,
        "ttft_scratch_s": scratch,
        "median_ttft_kvc_s": med_kvc, "median_ttft_scratch_s": med_scratch,
        "speedup": med_scratch / max(med_kvc, 1e-12),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--snapkv", default=os.path.join(ROOT, "build", "snapkv"))
    ap.add_argument("--cases", nargs="+",
                    default=[os.path.join(ROOT, "models", "snapkv-tiny4.gguf") + ":1900",
                             BIG_MODEL + ":4096", BIG_MODEL + ":16384"],
                    help="MODEL:TOKENS pairs")
    ap.add_argument("--reps", type=int, default=3, help="repetitions per measurement (>= 3)")
    ap.add_argument("--method", default="snapkv", help="compress method (as `snapkv compress`)")
    ap.add_argument("--keep", type=float, default=0.2)
    ap.add_argument("--scratch-method", default="full", help="method of the from-scratch prefill")
    ap.add_argument("--threads", type=int, default=0, help="0 = all cores")
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--build-big", action="store_true",
                    help="build %s when it is missing" % BIG_MODEL)
    ap.add_argument("--json", help="append one JSON object per case to this file")
    args = ap.parse_args()
    if args.reps < 1:
        fail("--reps must be >= 1 (>= 3 for medians of record)")
    if not os.access(args.snapkv, os.X_OK):
        fail("no snapkv binary at %s (build it, or pass --snapkv)" % args.snapkv)
    results = []
    with tempfile.TemporaryDirectory(prefix="bench_ttft_") as work:
        for case in args.cases:
            model, _, tokens = case.rpartition(":")
            if not model or not tokens.isdigit():
                fail("case %r is not MODEL:TOKENS" % case)
            if not os.path.exists(model):
                if model == BIG_MODEL and args.build_big:
                    build_big(model, BIG_CTX)
                else:
                    fail("no model %s (for the big one: --build-big, or "
                         "tools/make_big_random_model.py OUT --ctx %d)" % (model, BIG_CTX))
            print("[bench_ttft] %s at %s tokens" % (os.path.basename(model), tokens),
                  file=sys.stderr)
            r = bench_case(args, model, int(tokens), work)
            results.append(r)
            if args.json:
                with open(args.json, "a") as f:
                    f.write(json.dumps(r) + "\n")
    print("| model | doc tokens | TTFT .kvc (median s) | TTFT scratch (median s) | speedup | "
          ".kvc bytes | fp16 full cache bytes | file / fp16 |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in results:
        print("| %s | %d | %.4f | %.4f | %.1fx | %d | %d | %.3f |" % (
            os.path.basename(r["model"]), r["document_tokens"], r["median_ttft_kvc_s"],
            r["median_ttft_scratch_s"], r["speedup"], r["kvc_file_bytes"],
            r["fp16_full_cache_bytes"], r["file_vs_fp16_full"]))
    print("(method %s keep %g vs scratch %s, %d reps, threads %d)" % (
        args.method, args.keep, args.scratch_method, args.reps, args.threads))


if __name__ == "__main__":
    main()
