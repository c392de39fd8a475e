#!/usr/bin/env python3
"""Inter-token gaps of running streams while `snapkv serve` prefills a long prompt.

Starts `snapkv serve --threads T --max-concurrent S+1 --no-prompt-reuse` on a free loopback
port, starts S streaming completions (greedy, --tokens each), waits until every stream has
produced a few tokens, then sends one long prompt (about --prompt-tokens tokens, checked with
/tokenize; max_tokens 1) and measures:
  - the gaps between consecutive tokens of the S streams whose interval overlaps the long
    prompt's request (from its send to its answer): p50, p99 and max, in ms;
  - the long prompt's prefill time (the response's snapkv.prefill_ms) and its wall time.
Each run is repeated --repeat times (a new server each time); the table gives every run and the
median. The machine may be shared: the load average is printed before and after. Python 3
standard library only.

  scripts/serve_prefill_gap.py --snapkv build/snapkv --model models/snapkv-tiny4.gguf --threads 2
"""
import argparse
import http.client
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROMPTS = ["Once upon a time", "The capital of France is", "List three colors:",
           "The quick brown fox", "In a small village there lived", "The weather today is"]
WORDS = ("river stone lamp orange window quiet garden paper silver market winter candle "
         "harbor violet engine ladder meadow copper thunder basket").split()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(port, path, body, timeout=600):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    res = conn.getresponse()
    data = res.read()
    conn.close()
    if res.status != 200:
        raise RuntimeError(f"{path}: {res.status} {data[:200]!r}")
    return json.loads(data)


def stream(port, prompt, tokens, times, started):
    """A streaming completion; appends the arrival time of each token event to `times`."""
    body = json.dumps({"prompt": prompt, "max_tokens": tokens, "temperature": 0, "stream": True})
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    res = conn.getresponse()
    while True:
        line = res.fp.readline()
        if not line:
            break
        line = line.strip()
        if not line.startswith(b"data: ") or line == b"data: [DONE]":
            continue
        event = json.loads(line[6:])
        if event.get("choices") and event["choices"][0].get("text") is not None:
            times.append(time.perf_counter())
            if len(times) == 4:
                started.release()
    conn.close()


def long_prompt(port, n_tokens, seed):
    rng = random.Random(seed)
    words = []
    got = 0
    while True:
        words += [rng.choice(WORDS) for _ in range(64 if got < n_tokens - 200 else 4)]
        text = " ".join(words)
        got = len(post(port, "/tokenize", {"content": text})["tokens"])
        if got >= n_tokens:
            return text, got


def percentile(values, p):
    if not values:
        return float("nan")
    v = sorted(values)
    return v[min(len(v) - 1, int(round(p / 100.0 * (len(v) - 1))))]


def one_run(args, seed):
    port = free_port()
    cmd = [args.snapkv, "serve", "-m", args.model, "--port", str(port), "--threads",
           str(args.threads), "--max-concurrent", str(args.streams + 1), "--no-prompt-reuse",
           "--quiet-requests", "--method", "full"] + args.extra
    server = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        for line in server.stderr:
            if b"listening on" in line:
                break
        threading.Thread(target=lambda: [None for _ in server.stderr], daemon=True).start()
        text, n_tokens = long_prompt(port, args.prompt_tokens, seed)
        times = [[] for _ in range(args.streams)]
        started = threading.Semaphore(0)
        threads = [threading.Thread(target=stream, args=(port, PROMPTS[i % len(PROMPTS)],
                                                         args.tokens, times[i], started))
                   for i in range(args.streams)]
        for t in threads:
            t.start()
        for _ in threads:
            started.acquire()
        t0 = time.perf_counter()
        answer = post(port, "/v1/completions", {"prompt": text, "max_tokens": 1, "temperature": 0})
        t1 = time.perf_counter()
        for t in threads:
            t.join()
        gaps = []
        for ts in times:
            for a, b in zip(ts, ts[1:]):
                if b > t0 and a < t1:
                    gaps.append((b - a) * 1e3)
        return {"prompt_tokens": n_tokens, "prefill_ms": answer["snapkv"]["prefill_ms"],
                "wall_ms": (t1 - t0) * 1e3, "p50": percentile(gaps, 50),
                "p99": percentile(gaps, 99), "max": max(gaps) if gaps else float("nan"),
                "gaps": len(gaps)}
    finally:
        server.terminate()
        server.wait(timeout=10)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--snapkv", default=os.path.join(ROOT, "build", "snapkv"))
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "snapkv-tiny4.gguf"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--streams", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=400, help="tokens per running stream")
    ap.add_argument("--prompt-tokens", type=int, default=2000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("extra", nargs="*", help="more `snapkv serve` options (after --)")
    args = ap.parse_args()
    print(f"load average before: {os.getloadavg()}", file=sys.stderr)
    rows = [one_run(args, args.seed + r) for r in range(args.repeat)]
    print(f"load average after: {os.getloadavg()}", file=sys.stderr)
    print("| run | prompt tokens | prefill ms | wall ms | gaps | gap p50 ms | gap p99 ms | "
          "gap max ms |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for i, r in enumerate(rows):
        print(f"| {i + 1} | {r['prompt_tokens']} | {r['prefill_ms']:.1f} | {r['wall_ms']:.1f} | "
              f"{r['gaps']} | {r['p50']:.2f} | {r['p99']:.2f} | {r['max']:.2f} |")
    med = {k: statistics.median(r[k] for r in rows) for k in ("prefill_ms", "wall_ms", "p50",
                                                               "p99", "max")}
    print(f"| median | | {med['prefill_ms']:.1f} | {med['wall_ms']:.1f} | | {med['p50']:.2f} | "
          f"{med['p99']:.2f} | {med['max']:.2f} |")


if __name__ == "__main__":
    main()
