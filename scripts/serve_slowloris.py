#!/usr/bin/env python3
"""Slow clients against `snapkv serve` on loopback: are normal requests still served at once?

Starts `snapkv serve` on a free loopback port (or uses --url of one already running), opens
--idle connections that hold the server without finishing a request (a third silent, a third with
a request head cut off mid-way, a third trickling one header byte every --trickle seconds), then
sends --requests ordinary completions one after another and reports each one's latency, then
--pipelined requests in one write on one connection (their answers must come back in order). Exit
status 1 when any request failed or took longer than --limit seconds, or the pipelined answers
were missing or out of order. Bounded: every socket has a
timeout and the run ends after the requests. Python 3 standard library only.

  scripts/serve_slowloris.py --snapkv build/snapkv --model models/snapkv-tiny4.gguf --idle 200
"""
import argparse
import http.client
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
import urllib.parse

from serve_util import free_port, wait_ready

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def pipelined(host, port, n):
    """Sends n requests for distinct unknown cache ids in one write; True when n answers came
    back in the order sent (each 404 names its id)."""
    wire = b"".join(b"GET /v1/caches/pipe-%d HTTP/1.1\r\nHost: x\r\n\r\n" % i for i in range(n))
    with socket.create_connection((host, port), timeout=10) as s:
        s.sendall(wire)
        got, end = b"", time.time() + 10
        while got.count(b"HTTP/1.1 ") < n or not got.endswith(b"}"):
            if time.time() > end:
                break
            chunk = s.recv(65536)
            if not chunk:
                break
            got += chunk
    order = [int(m) for m in re.findall(rb"'pipe-(\d+)'", got)]
    return order == list(range(n))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--snapkv", default=os.path.join(ROOT, "build", "snapkv"))
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "snapkv-tiny4.gguf"))
    ap.add_argument("--url", help="a running server instead of starting one")
    ap.add_argument("--idle", type=int, default=200, help="slow connections held open")
    ap.add_argument("--requests", type=int, default=5)
    ap.add_argument("--trickle", type=float, default=0.5, help="seconds between trickled bytes")
    ap.add_argument("--limit", type=float, default=1.0, help="most seconds a request may take")
    ap.add_argument("--pipelined", type=int, default=20,
                    help="requests sent back to back in one write at the end")
    args = ap.parse_args()

    server = None
    if args.url:
        u = urllib.parse.urlparse(args.url)
        host, port = u.hostname, u.port
    else:
        host, port = "127.0.0.1", free_port()
        server = subprocess.Popen([args.snapkv, "serve", "--model", args.model, "--port", str(port),
                                   "--quiet-requests"], stderr=subprocess.DEVNULL)
    try:
        if not wait_ready(port, limit=30, host=host, pause=0.1):
            print("server did not start", file=sys.stderr)
            return 1
        held, stop = [], threading.Event()
        for i in range(args.idle):
            s = socket.create_connection((host, port), timeout=5)
            if i % 3 == 1:
                s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Le")
            held.append(s)
        trickled = [s for i, s in enumerate(held) if i % 3 == 2]

        def trickle():
            head = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 10000
            for byte in head:
                if stop.wait(args.trickle):
                    return
                for s in trickled:
                    try:
                        s.send(bytes([byte]))
                    except OSError:
                        pass

        t = threading.Thread(target=trickle, daemon=True)
        t.start()
        time.sleep(1.0)  # the slow connections are all in place
        failures, worst = 0, 0.0
        body = json.dumps({"prompt": "Once upon a time", "max_tokens": 4})
        for k in range(args.requests):
            t0 = time.time()
            try:
                c = http.client.HTTPConnection(host, port, timeout=30)
                c.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
                r = c.getresponse()
                r.read()
                ok = r.status == 200
            except OSError as e:
                ok = False
                print("request %d: %s" % (k, e), file=sys.stderr)
            dt = time.time() - t0
            worst = max(worst, dt)
            failures += 0 if ok and dt <= args.limit else 1
            print("request %d: %s in %.3f s" % (k, "ok" if ok else "FAILED", dt))
            time.sleep(0.5)
        # --pipelined requests in one write on one connection: every answer, in order.
        in_order = pipelined(host, port, args.pipelined)
        print("%d pipelined requests: %s" % (args.pipelined, "answered in order" if in_order
                                              else "NOT all answered in order"))
        stop.set()
        for s in held:
            s.close()
        print("%d slow connections held; %d of %d requests failed or took > %.1f s; worst %.3f s"
              % (args.idle, failures, args.requests, args.limit, worst))
        return 1 if failures or not in_order else 0
    finally:
        if server:
            server.terminate()
            server.wait(timeout=10)


if __name__ == "__main__":
    sys.exit(main())
