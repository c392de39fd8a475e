#!/usr/bin/env python3
"""Time to first token of `snapkv serve` for a repeated long prompt and across two replicas.

Two measurements, each on a server (or two) started by the script on free loopback ports with
the server's defaults plus --threads:

  repeat  One server. The same prompt of about --doc-tokens tokens is sent twice as a streaming
          completion (greedy, max_tokens 1). TTFT = time from sending the request to the first
          streamed token. The second request is answered from the server's prompt store
          ("reuse": "exact"), so its TTFT is the lookup, not a prefill. Reported: both TTFTs
          and second / first. With --llama-server PATH the same two requests go to llama-server
          (-np 1, its prompt cache on) started on the same file, for comparison.
  redis   redis-server on a free port (nothing saved to disk) and two replicas A and B with
          --cache-store redis://...: the document is compressed once on A (POST /v1/caches,
          --doc-method, keep 0.2), then a question about it is asked with its cache_id, greedy,
          --answer-tokens tokens, streamed: --reps times on A, then on B (whose first request
          reads the document from Redis), then --reps times more on B. Reported: TTFT on A
          (median), on B's first request and on B afterwards (median), B first / A, and whether
          B's answers equal A's.

Prints a Markdown table and, with --json FILE, writes every timing. Timings depend on the
machine and its load (the load average is printed before and after). Python 3 standard library
only; `redis` needs redis-server and a snapkv built with hiredis.

  scripts/serve_goals.py --model big.gguf --threads 2
  scripts/serve_goals.py --model big.gguf --parts repeat --llama-server /path/llama-server
"""
import argparse
import http.client
import json
import os
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORDS = ("the river stone garden quiet morning paper window silver market yellow bridge small "
         "north winter letter orange table music forest bright engine harbor lantern valley "
         "candle meadow copper island narrow pocket thunder velvet whisper").split()
QUESTION = " Question: what is the pass key? Answer: the pass key is"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def request(port, method, path, body=None, timeout=1200):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    data = json.dumps(body) if body is not None else None
    conn.request(method, path, data, {"Content-Type": "application/json"} if data else {})
    res = conn.getresponse()
    raw = res.read()
    conn.close()
    if res.status != 200:
        raise RuntimeError("%s %s: status %d: %s" % (method, path, res.status, raw[:300]))
    return json.loads(raw)


def stream_ttft(port, body, timeout=1200):
    """A streaming completion: (seconds to the first token, the whole text, the snapkv object)."""
    body = dict(body, stream=True)
    t0 = time.monotonic()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    conn.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    res = conn.getresponse()
    if res.status != 200:
        raise RuntimeError("completion: status %d: %s" % (res.status, res.read()[:300]))
    first = first_event = None
    text = []
    extra = {}
    for raw in res:
        line = raw.decode("utf-8", "replace").strip()
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        j = json.loads(line[6:])
        if j.get("choices") and first_event is None:
            first_event = time.monotonic() - t0
        for c in j.get("choices", []):
            if c.get("text"):
                first = first if first is not None else time.monotonic() - t0
                text.append(c["text"])
        if j.get("snapkv"):
            extra = j["snapkv"]
        for c in j.get("choices", []):
            if c.get("snapkv"):
                extra = c["snapkv"]
    conn.close()
    # A first token that is part of a UTF-8 character streams as an empty text.
    first = first if first is not None else first_event
    if first is None:
        raise RuntimeError("the stream carried no token")
    return first, "".join(text), extra


class Proc:
    """A child process whose output goes to a log file; stopped on exit."""

    def __init__(self, cmd, log):
        self.log = log
        self.p = subprocess.Popen(cmd, stdout=open(log, "wb"), stderr=subprocess.STDOUT)

    def stop(self):
        if self.p.poll() is None:
            self.p.terminate()
            try:
                self.p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.p.kill()


def wait_ready(proc, port, path="/health", limit=300):
    deadline = time.monotonic() + limit
    while True:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            conn.request("GET", path)
            if conn.getresponse().status == 200:
                return
        except OSError:
            pass
        if proc.p.poll() is not None or time.monotonic() > deadline:
            sys.exit("%s did not start: %s" % (proc.p.args[0], open(proc.log).read()[-2000:]))
        time.sleep(0.3)


def snapkv_server(a, tmp, name, extra=()):
    port = free_port()
    cmd = [a.snapkv, "serve", "--model", a.model, "--port", str(port), "--threads",
           str(a.threads), "--quiet-requests", *extra]
    proc = Proc(cmd, os.path.join(tmp, name + ".log"))
    wait_ready(proc, port)
    return proc, port


def document(port, tokens, seed):
    """Filler text with a pass key, cut to about `tokens` tokens of the served model."""
    rng = random.Random(seed)
    key = "".join(rng.choice("0123456789") for _ in range(6))
    words = []
    while len(words) < tokens * 2:
        words += rng.sample(WORDS, 12) + ["."]
    at = len(words) // 2
    words[at:at] = ("The pass key is %s . Remember it ." % key).split()
    ids = request(port, "POST", "/tokenize", {"content": " ".join(words)})["tokens"]
    text = request(port, "POST", "/detokenize", {"tokens": ids[:tokens]})["content"]
    return text


def part_repeat(a, tmp, out):
    proc, port = snapkv_server(a, tmp, "repeat")
    try:
        doc = document(port, a.doc_tokens, a.seed) + QUESTION
        body = {"prompt": doc, "max_tokens": 1, "temperature": 0, "ignore_eos": True}
        first, _, _ = stream_ttft(port, body)
        second, _, x2 = stream_ttft(port, body)
    finally:
        proc.stop()
    row = {"server": "snapkv", "ttft_first_s": first, "ttft_second_s": second,
           "ratio": second / first, "reuse": x2.get("reuse"), "prompt_tokens": a.doc_tokens}
    out["repeat"] = [row]
    print("repeat, snapkv: first %.3f s, second %.3f s (%.1f%%), reuse %s" %
          (first, second, 100 * second / first, x2.get("reuse")), file=sys.stderr)
    if a.llama_server:
        port2 = free_port()
        ctx = a.doc_tokens + 256
        lproc = Proc([a.llama_server, "-m", a.model, "--port", str(port2), "-t", str(a.threads),
                      "-np", "1", "-c", str(ctx), "--host", "127.0.0.1"],
                     os.path.join(tmp, "llama-server.log"))
        try:
            wait_ready(lproc, port2)
            body = dict(body, cache_prompt=True)
            lf, _, _ = stream_ttft(port2, body)
            ls, _, _ = stream_ttft(port2, body)
        finally:
            lproc.stop()
        out["repeat"].append({"server": "llama-server", "ttft_first_s": lf, "ttft_second_s": ls,
                              "ratio": ls / lf})
        print("repeat, llama-server: first %.3f s, second %.3f s (%.1f%%)" %
              (lf, ls, 100 * ls / lf), file=sys.stderr)


def part_redis(a, tmp, out):
    redis = shutil.which("redis-server")
    if not redis:
        sys.exit("redis: redis-server is not installed (apt-get install redis-server)")
    rport = free_port()
    rproc = Proc([redis, "--port", str(rport), "--bind", "127.0.0.1", "--save", "",
                  "--appendonly", "no"], os.path.join(tmp, "redis.log"))
    procs = [rproc]
    try:
        time.sleep(0.5)
        store = ["--cache-store", "redis://127.0.0.1:%d" % rport]
        pa, port_a = snapkv_server(a, tmp, "replica-a", store)
        procs.append(pa)
        pb, port_b = snapkv_server(a, tmp, "replica-b", store)
        procs.append(pb)
        doc = document(port_a, a.doc_tokens, a.seed)
        t0 = time.monotonic()
        made = request(port_a, "POST", "/v1/caches",
                       {"document": doc, "method": a.doc_method, "keep": 0.2})
        create_s = time.monotonic() - t0
        ask = {"cache_id": made["id"], "prompt": QUESTION, "max_tokens": a.answer_tokens,
               "temperature": 0}
        on_a = [stream_ttft(port_a, ask) for _ in range(a.reps)]
        b_first = stream_ttft(port_b, ask)
        on_b = [stream_ttft(port_b, ask) for _ in range(a.reps)]
    finally:
        for p in reversed(procs):
            p.stop()
    ttft_a = statistics.median(r[0] for r in on_a)
    ttft_b = statistics.median(r[0] for r in on_b)
    same = all(r[1] == on_a[0][1] for r in on_a + [b_first] + on_b)
    out["redis"] = {"create_s": create_s, "doc_method": a.doc_method,
                    "kv_bytes": made.get("kv_bytes"), "ttft_a_s": [r[0] for r in on_a],
                    "ttft_b_first_s": b_first[0], "ttft_b_s": [r[0] for r in on_b],
                    "ratio_b_first_to_a": b_first[0] / ttft_a, "same_answer": same,
                    "answer": on_a[0][1]}
    print("redis: created in %.2f s; TTFT A %.3f s, B first %.3f s (%.2fx), B after %.3f s; "
          "same answer: %s" % (create_s, ttft_a, b_first[0], b_first[0] / ttft_a, ttft_b, same),
          file=sys.stderr)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--snapkv", default=os.path.join(ROOT, "build", "snapkv"))
    ap.add_argument("--model", required=True, help="GGUF file whose context holds --doc-tokens")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--parts", default="repeat,redis", help="comma-separated: repeat, redis")
    ap.add_argument("--doc-tokens", type=int, default=4096)
    ap.add_argument("--doc-method", default="snapkv-proxy", help="method of the redis document")
    ap.add_argument("--answer-tokens", type=int, default=8)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--llama-server", default=None, help="llama-server binary (repeat only)")
    ap.add_argument("--json", default=None, help="write the timings here")
    a = ap.parse_args()
    parts = [p for p in a.parts.split(",") if p]
    for p in parts:
        if p not in ("repeat", "redis"):
            sys.exit("--parts: unknown part '%s', expected repeat and/or redis" % p)
    print("load average before: %s" % open("/proc/loadavg").read().strip(), file=sys.stderr)
    out = {"model": a.model, "threads": a.threads, "doc_tokens": a.doc_tokens}
    with tempfile.TemporaryDirectory(prefix="serve_goals.") as tmp:
        if "repeat" in parts:
            part_repeat(a, tmp, out)
        if "redis" in parts:
            part_redis(a, tmp, out)
    print("load average after: %s" % open("/proc/loadavg").read().strip(), file=sys.stderr)
    print("| measurement | first | second / B | ratio |")
    print("|---|---|---|---|")
    for r in out.get("repeat", []):
        print("| repeated %d-token prompt, %s | %.3f s | %.3f s | %.1f%% |" %
              (a.doc_tokens, r["server"], r["ttft_first_s"], r["ttft_second_s"],
               100 * r["ratio"]))
    if "redis" in out:
        r = out["redis"]
        print("| cache made on A, asked on A / B (TTFT) | %.3f s | %.3f s | %.2fx (same answer: "
              "%s) |" % (statistics.median(r["ttft_a_s"]), r["ttft_b_first_s"],
                         r["ratio_b_first_to_a"], "yes" if r["same_answer"] else "no"))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
