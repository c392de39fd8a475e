#!/usr/bin/env python3
"""Load test of `snapkv serve` on loopback: N requests from C concurrent clients.

Starts `snapkv serve` on a free loopback port (or uses --url of one already running), creates one
compressed document (POST /v1/caches), then sends --requests requests from --clients threads: a
mix of plain completions (/v1/completions with a prompt) and questions about the cached document
(the same with cache_id), in a fixed seeded order. Bounded in count and in time: every request
has a timeout, and the run stops sending after --max-seconds. Reports the failures (transport
errors, non-200 answers, bodies that are not a completion), latency percentiles (p50/p90/p99,
nearest-rank) per kind and overall, and the server's resident memory (VmRSS of its process):
after the document was compressed ("cold"), after --warmup requests of the same mix sent first
and not counted ("start"; the allocator's arenas and the threads' stacks are then in place), and
at the end. Exit status 1 when anything failed.

The server runs with its default workers and queue (--workers sets --max-concurrent): requests
beyond the workers wait in its queue, and a 503 counts as a failure.
Timings depend on the machine: take figures of record on a quiet one. Python 3 standard library
only.

  scripts/serve_load.py --snapkv build/snapkv --model models/snapkv-tiny4.gguf
  scripts/serve_load.py --url http://127.0.0.1:8080 --requests 50 --clients 4
"""
import argparse
import http.client
import json
import os
import random
import socket
import subprocess
import sys
import threading
import time
import urllib.parse

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCUMENT = ("The grass is green. The sky is blue. The pass key is 48213. Remember it. The sun is "
            "yellow. Here we go. There and back again. ") * 6
PROMPTS = ["Once upon a time", "The capital of France is", "List three colors:",
           "The quick brown fox", "In a small village there lived"]
QUESTIONS = [" What is the pass key?", " What color is the sky?", " What color is the sun?"]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_bytes(pid):
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def request(host, port, method, path, body, timeout):
    """Returns (status, parsed JSON or None, error text or None)."""
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        data = json.dumps(body) if body is not None else None
        headers = {"Content-Type": "application/json"} if data is not None else {}
        conn.request(method, path, body=data, headers=headers)
        res = conn.getresponse()
        raw = res.read()
        try:
            parsed = json.loads(raw)
        except ValueError:
            parsed = None
        return res.status, parsed, None
    except (OSError, http.client.HTTPException) as e:
        return None, None, "%s: %s" % (type(e).__name__, e)
    finally:
        conn.close()


def wait_healthy(host, port, proc, seconds):
    deadline = time.time() + seconds
    while time.time() < deadline:
        if proc is not None and proc.poll() is not None:
            sys.exit("serve_load: error: the server exited (%d) before it was healthy"
                     % proc.returncode)
        status, _, _ = request(host, port, "GET", "/health", None, 2)
        if status == 200:
            return
        time.sleep(0.2)
    sys.exit("serve_load: error: no healthy server at %s:%d after %ds" % (host, port, seconds))


def percentile(sorted_values, p):
    """Nearest-rank percentile of an ascending list (None when empty)."""
    if not sorted_values:
        return None
    rank = max(1, -(-p * len(sorted_values) // 100))  # ceil(p/100 * n)
    return sorted_values[int(rank) - 1]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--snapkv", default=os.path.join(ROOT, "build", "snapkv"))
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "snapkv-tiny4.gguf"))
    ap.add_argument("--url", help="use this running server instead of starting one (no RSS)")
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--cached-share", type=float, default=0.5,
                    help="fraction of requests that ask the cached document")
    ap.add_argument("--max-tokens", type=int, default=8)
    ap.add_argument("--workers", type=int, default=0,
                    help="server --max-concurrent (0 = the server's default)")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds per request")
    ap.add_argument("--max-seconds", type=float, default=600.0, help="stop sending after this")
    ap.add_argument("--threads", type=int, default=0, help="server --threads (0 = all cores)")
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=50,
                    help="requests sent (and not counted) before the start RSS is read")
    ap.add_argument("--json", help="write the summary as JSON to this file")
    args = ap.parse_args()
    if args.requests < 1 or args.clients < 1:
        sys.exit("serve_load: error: --requests and --clients must be >= 1")

    proc = None
    if args.url:
        u = urllib.parse.urlparse(args.url)
        host, port = u.hostname, u.port or 80
    else:
        host, port = "127.0.0.1", free_port()
        cmd = [args.snapkv, "serve", "--model", args.model, "--host", host, "--port", str(port),
               "--threads", str(args.threads), "--quiet-requests"]
        if args.workers > 0:
            cmd += ["--max-concurrent", str(args.workers)]
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_healthy(host, port, proc, 60)
        status, created, err = request(host, port, "POST", "/v1/caches",
                                       {"document": DOCUMENT, "keep": 0.5}, args.timeout)
        if status != 200 or not created or "id" not in created:
            sys.exit("serve_load: error: cache creation failed: %s %s" % (status, err or created))
        cache_id = created["id"]
        rss_cold = rss_bytes(proc.pid) if proc else None

        rng = random.Random(args.seed)

        def make_jobs(n):
            jobs = []
            for i in range(n):
                if rng.random() < args.cached_share:
                    jobs.append(("cached", {"prompt": rng.choice(QUESTIONS),
                                            "cache_id": cache_id,
                                            "max_tokens": args.max_tokens}))
                else:
                    jobs.append(("plain", {"prompt": rng.choice(PROMPTS),
                                           "max_tokens": args.max_tokens}))
            return jobs

        warm_results = []
        run_clients(host, port, args, make_jobs(args.warmup), warm_results)
        warm_failures = [r for r in warm_results if r[2] is not None]
        rss_start = rss_bytes(proc.pid) if proc else None
        jobs = make_jobs(args.requests)
        results = []  # (kind, seconds, failure text or None)
        wall = run_clients(host, port, args, jobs, results)
        rss_end = rss_bytes(proc.pid) if proc else None
        request(host, port, "DELETE", "/v1/caches/" + cache_id, None, args.timeout)
    finally:
        server_log = ""
        if proc is not None:
            proc.terminate()
            try:
                _, server_log = proc.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                _, server_log = proc.communicate()
    failures = warm_failures + [r for r in results if r[2] is not None]
    summary = {"requests_planned": len(jobs), "requests_sent": len(results),
               "failures": len(failures), "clients": args.clients, "wall_s": wall,
               "warmup_requests": args.warmup, "rss_cold_bytes": rss_cold,
               "rss_start_bytes": rss_start, "rss_end_bytes": rss_end, "latency_s": {}}
    return report(summary, results, failures, server_log, args)


def run_clients(host, port, args, jobs, results):
    """Sends `jobs` from args.clients threads; appends (kind, seconds, failure) to results."""
    lock = threading.Lock()
    next_job = [0]
    t0 = time.time()

    def client():
        while True:
            with lock:
                if next_job[0] >= len(jobs) or time.time() - t0 > args.max_seconds:
                    return
                kind, body = jobs[next_job[0]]
                next_job[0] += 1
            start = time.time()
            status, parsed, err = request(host, port, "POST", "/v1/completions", body,
                                          args.timeout)
            seconds = time.time() - start
            failure = err
            if failure is None and status != 200:
                failure = "HTTP %s: %s" % (status, (parsed or {}).get("error", parsed))
            if failure is None and not (parsed and parsed.get("choices")):
                failure = "no choices in the answer"
            with lock:
                results.append((kind, seconds, failure))

    threads = [threading.Thread(target=client) for _ in range(args.clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.time() - t0


def report(summary, results, failures, server_log, args):
    for kind in ("plain", "cached", "all"):
        lat = sorted(r[1] for r in results if kind == "all" or r[0] == kind)
        summary["latency_s"][kind] = {"n": len(lat), "p50": percentile(lat, 50),
                                      "p90": percentile(lat, 90), "p99": percentile(lat, 99)}
    for kind, _, failure in failures[:10]:
        print("[serve_load] failed (%s): %s" % (kind, failure), file=sys.stderr)
    if failures and server_log:
        print("[serve_load] server stderr (tail):\n" + server_log[-2000:], file=sys.stderr)
    print("requests sent %d of %d, failures %d, %d clients, wall %.1f s" % (
        summary["requests_sent"], summary["requests_planned"], summary["failures"],
        args.clients, summary["wall_s"]))
    for kind, lat in summary["latency_s"].items():
        if lat["n"]:
            print("  %-6s n=%-4d p50 %.3f s  p90 %.3f s  p99 %.3f s" % (
                kind, lat["n"], lat["p50"], lat["p90"], lat["p99"]))
    if summary["rss_start_bytes"] is not None:
        mib = [(summary[k] or 0) / 2**20 for k in ("rss_cold_bytes", "rss_start_bytes",
                                                     "rss_end_bytes")]
        print("  server RSS: cold %.1f MiB, start (after %d warm-up requests) %.1f MiB, end %.1f "
              "MiB (end / start %.3f)" % (mib[0], summary["warmup_requests"], mib[1], mib[2],
                                          mib[2] / mib[1] if mib[1] else 0.0))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=1)
    incomplete = summary["requests_sent"] < summary["requests_planned"]
    return 1 if failures or incomplete else 0


if __name__ == "__main__":
    sys.exit(main())
