#!/usr/bin/env python3
"""Aggregate decode throughput of `snapkv serve` with 1, 4, 8 ... concurrent streams.

Starts `snapkv serve --max-concurrent <most streams>` on a free loopback port with the given
--threads, then for each stream count S runs S streaming completions at once (different short
prompts, greedy, max_tokens --tokens each, stream_options.include_usage) and measures, per round:
  - aggregate decode tokens/s: the completion tokens of all streams after their first one,
    divided by the time from the earliest first token to the latest last token (so prefill and
    connection set-up are left out);
  - the mean batch size of the server's decode steps over the round (from /metrics:
    snapkv_decode_batch_rows_total / snapkv_decode_steps_total).
Each round runs --repeat times and the best (highest) aggregate rate is kept, which filters out
other processes taking the cores for a moment. Prints a Markdown table with the ratio to one
stream. With --llama-server PATH the same rounds then run against llama-server on the same file
(`-np <most streams>`, the same --threads, continuous batching), and the table gains its rate and
snapkv / llama-server. Every request sets ignore_eos, so each stream decodes --tokens tokens. Timings depend on the machine and its load: the script prints the load average before
and after. Python 3 standard library only.

  scripts/serve_batch_throughput.py --snapkv build/snapkv --model models/snapkv-tiny4.gguf
  scripts/serve_batch_throughput.py --model big.gguf --threads 2 --streams 1,4,8 --tokens 32
  scripts/serve_batch_throughput.py --model big.gguf --llama-server /path/to/llama-server
"""
import argparse
import http.client
import json
import os
import socket
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROMPTS = ["Once upon a time", "The capital of France is", "List three colors:",
           "The quick brown fox", "In a small village there lived", "The weather today is",
           "My favourite food is", "Long ago, in a far land"]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def metric(port, name):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("GET", "/metrics")
    body = conn.getresponse().read().decode()
    conn.close()
    for line in body.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise RuntimeError("no metric " + name)


def stream(port, prompt, tokens, timeout, out):
    """One streaming completion: out gets (first token time, last token time, tokens) or error."""
    body = json.dumps({"prompt": prompt, "max_tokens": tokens, "temperature": 0, "stream": True,
                       "ignore_eos": True, "stream_options": {"include_usage": True}})
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
        conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
        res = conn.getresponse()
        if res.status != 200:
            out["error"] = "status %d: %s" % (res.status, res.read()[:200])
            return
        first = last = None
        n = None
        chunks = 0
        for raw in res:
            line = raw.decode("utf-8", "replace").strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            j = json.loads(line[6:])
            if j.get("usage"):
                n = j["usage"]["completion_tokens"]
            if any(c.get("text") for c in j.get("choices", [])):
                now = time.monotonic()
                first = first if first is not None else now
                last = now
                chunks += 1
        conn.close()
        # A server that sends no usage chunk streams one token per chunk (llama-server).
        out.update(first=first, last=last, tokens=n if n is not None else chunks)
    except (OSError, ValueError) as e:
        out["error"] = str(e)


def round_rate(port, streams, tokens, timeout, snapkv=True):
    outs = [{} for _ in range(streams)]
    threads = [threading.Thread(target=stream,
                                args=(port, PROMPTS[i % len(PROMPTS)], tokens, timeout, outs[i]))
               for i in range(streams)]
    if snapkv:
        steps0 = metric(port, "snapkv_decode_steps_total")
        rows0 = metric(port, "snapkv_decode_batch_rows_total")
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    steps = rows = 0
    if snapkv:
        steps = metric(port, "snapkv_decode_steps_total") - steps0
        rows = metric(port, "snapkv_decode_batch_rows_total") - rows0
    for o in outs:
        if "error" in o or o.get("first") is None or not o.get("tokens"):
            raise RuntimeError("a stream failed: %s" % o)
    decoded = sum(o["tokens"] - 1 for o in outs)
    span = max(o["last"] for o in outs) - min(o["first"] for o in outs)
    return decoded / span if span > 0 else 0.0, (rows / steps if steps else 0.0)


def wait_ready(server, port, path):
    deadline = time.monotonic() + 300
    while True:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            conn.request("GET", path)
            if conn.getresponse().status == 200:
                return
        except OSError:
            pass
        if server.poll() is not None or time.monotonic() > deadline:
            sys.exit("the server did not start: " + server.stderr.read().decode()[-2000:])
        time.sleep(0.2)


def measure(cmd, port, counts, a, snapkv):
    """Starts one server, runs every round on it; returns [(streams, rate, mean batch)]."""
    server = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    rows = []
    try:
        wait_ready(server, port, "/metrics" if snapkv else "/health")
        stream(port, PROMPTS[0], 4, a.timeout, {})  # warm-up: pages of the model mapped in
        for s in counts:
            best = max((round_rate(port, s, a.tokens, a.timeout, snapkv)
                        for _ in range(a.repeat)), key=lambda r: r[0])
            rows.append((s, best[0], best[1]))
            print("%s, %d streams: %.1f tok/s%s" %
                  (os.path.basename(cmd[0]), s, best[0],
                   ", mean batch %.2f" % best[1] if snapkv else ""), file=sys.stderr)
    finally:
        server.terminate()
        server.wait(timeout=30)
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--snapkv", default=os.path.join(ROOT, "build", "snapkv"))
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "snapkv-tiny4.gguf"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--streams", default="1,4,8", help="comma-separated stream counts")
    ap.add_argument("--tokens", type=int, default=64, help="max_tokens of each stream")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=600.0)
    ap.add_argument("--llama-server", default=None, help="llama-server binary to compare with")
    a = ap.parse_args()
    counts = [int(s) for s in a.streams.split(",")]
    print("load average before: %s" % open("/proc/loadavg").read().strip(), file=sys.stderr)
    port = free_port()
    rows = measure([a.snapkv, "serve", "--model", a.model, "--port", str(port), "--threads",
                    str(a.threads), "--max-concurrent", str(max(counts)), "--quiet-requests"],
                   port, counts, a, True)
    theirs = None
    if a.llama_server:
        port = free_port()
        # Each of the -np slots gets -c / np positions: a short prompt and --tokens fit 512.
        theirs = measure([a.llama_server, "-m", a.model, "--port", str(port), "--host",
                          "127.0.0.1", "-t", str(a.threads), "-np", str(max(counts)), "-c",
                          str(512 * max(counts))], port, counts, a, False)
    print("load average after: %s" % open("/proc/loadavg").read().strip(), file=sys.stderr)
    base = rows[0][1]
    head = "| streams | aggregate decode tok/s | vs %d stream%s | mean batch |" % (
        rows[0][0], "" if rows[0][0] == 1 else "s")
    if theirs:
        head += " llama-server tok/s | llama-server vs %d | snapkv / llama-server |" % rows[0][0]
    print(head)
    print("|---" * (4 + (3 if theirs else 0)) + "|")
    for i, (s, rate, batch) in enumerate(rows):
        line = "| %d | %.1f | %.2fx | %.2f |" % (s, rate, rate / base if base else 0.0, batch)
        if theirs:
            t = theirs[i][1]
            line += " %.1f | %.2fx | %.2fx |" % (t, t / theirs[0][1] if theirs[0][1] else 0.0,
                                                rate / t if t else 0.0)
        print(line)


if __name__ == "__main__":
    main()
