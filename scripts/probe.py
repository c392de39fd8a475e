#!/usr/bin/env python3
"""Randomized robustness probe of the `snapkv` command (docs/RELIABILITY.md).

    scripts/probe.py [--bin build/snapkv] [--cases 2000] [--seed 1] [--jobs 4]

Runs seeded random cases through the real binary, each in its own temporary directory under a
timeout, and prints a table of outcomes per class:
  clean:     exit 0 where the input is valid, or exit 1/2 with a "snapkv: error: [...]" line;
  crash:     killed by a signal (SIGSEGV, SIGABRT, SIGBUS, ...) or any other exit status;
  hang:      still running at the timeout;
  silent:    exit 0 where the input is invalid (an overflowing or empty number, a corrupted
             .kvc, standard output on /dev/full);
  data loss: an input file changed, or a device node / FIFO at an output path replaced.
Classes: option values (every numeric option of the writing commands with hostile values),
.kvc corruptions (bit flips, truncations, byte runs), GGUF corruptions (header and metadata
flips, truncations), output targets (regular, symlink, directory, FIFO without reader, device
nodes, an input's path), stdout on /dev/full, and HTTP mutations: requests to one running
`snapkv serve` with flipped, inserted, deleted or truncated bytes, hostile Content-Length and
header values, the Host field removed, the method swapped, and pipelined copies, sent on a fresh connection that is then half-closed. There
an outcome is clean when the server answers with HTTP responses or closes the connection, and
still answers /health; crash when the server process died; hang when the connection stays open
past the server's deadlines or /health gets no answer; silent when a request that is invalid by
construction (a bad Content-Length, an unknown HTTP version) gets a 2xx, or when a request
without its Host field or with a method its path does not take gets another status than 400 or
405.
Exit status 1 when any crash, hang, silent or data-loss case is found.
"""
import argparse
import collections
import concurrent.futures
import hashlib
import os
import random
import re
import shutil
import socket
import stat
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL = os.path.join(ROOT, "models", "snapkv-tiny4.gguf")
DOC = "The pass key is 71432. Remember it. The grass is green. " * 4 + "\n"
TIMEOUT = 30

# Hostile values, and whether each must be refused (True) or may be accepted (False).
VALUES = [
    ("", True), (" ", True), ("-1", True), ("18446744073709551616", True),
    ("99999999999999999999999999", True), ("0x10", True), ("010", True), ("abc", True),
    ("1e3", True), ("1.5", True), ("nan", True), ("--", True),
    ("0", False), ("1", False), ("2", False), ("3", False), ("7", False), ("16", False),
    ("18446744073709551615", False), ("9223372036854775808", False), ("4294967296", False),
    ("2147483648", False), ("1048577", False),
]
REAL_VALUES = [("", True), ("nan", True), ("inf", True), ("-1", True), ("abc", True),
               ("1e999", True), ("0", False), ("0.5", False), ("1", False), ("2", False)]

# command template -> integer options and real options (small valid work otherwise)
COMMANDS = {
    "run -m m.gguf --prompt hi --max-tokens 2 --quiet":
        (["--max-tokens", "--threads", "--budget", "--window", "--sinks", "--seed",
          "--prefill-chunk", "--kernel", "--chunkkv-size"], ["--temp", "--top-p", "--keep"]),
    "compress -m m.gguf -f doc.txt --out o.kvc --quiet":
        (["--threads", "--budget", "--window", "--sinks", "--prefill-chunk"], ["--keep"]),
    "ask -m m.gguf --cache doc.kvc --question hi --max-tokens 2":
        (["--max-tokens", "--threads", "--prefill-chunk"], []),
    "eval -m m.gguf --tasks passkey --context 128 --n 1 --methods full --quiet":
        (["--context", "--n", "--seed", "--threads", "--prefill-chunk"], ["--keep"]),
    "tasks gen --task passkey --n 1 --context 128":
        (["--n", "--context", "--seed", "--needles", "--hops"], []),
    "bench --layers 1 --embd 64 --heads 2 --kv-heads 1 --ff 128 --vocab 256 --types f32 "
    "--lengths 16 -r 1 --methods full --quiet":
        (["--layers", "--repeats", "--decode-tokens", "--seed"], []),
    "demo -m m.gguf --context 128": (["--context", "--seed"], ["--keep"]),
    "coverage --lengths 64 --budgets 16 --kv-heads 1 --group 2 --head-dim 32 --window 16":
        (["--window", "--sinks", "--kv-heads", "--group", "--head-dim", "--seed"], []),
    "tokenize -m m.gguf --text hello": ([], []),
    "serve -m absent.gguf": (["--port"], []),  # a valid port: the missing model is the error
}
# Valid values that start work too large for a probe (checked by the tests, not here).
TOO_BIG = {"--max-tokens", "--context", "--n", "--layers", "--repeats", "--decode-tokens",
           "--needles", "--hops", "--kv-heads", "--group", "--head-dim", "--window",
           "--prefill-chunk", "--budget", "--sinks", "--kernel", "--chunkkv-size"}

WRITERS = [
    "compress -m m.gguf -f doc.txt --out d2.kvc --quiet --json OUT",
    "run -m m.gguf --prompt hi --max-tokens 2 --quiet --json OUT",
    "ask -m m.gguf --cache doc.kvc --question hi --max-tokens 2 --json OUT",
    "eval -m m.gguf --tasks passkey --context 128 --n 1 --methods full --quiet --json OUT",
    "tasks gen --task passkey --n 1 --context 128 --out OUT",
    "compress -m m.gguf -f doc.txt --out OUT --quiet",
    "bench -m m.gguf -p 16 -n 2 -r 1 --quiet --json OUT",
    "coverage --lengths 64 --budgets 16 --kv-heads 1 --group 2 --head-dim 32 --window 16 "
    "--json OUT",
]


def sha(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


class Base:
    """A directory with the model, a document and a compressed cache, copied for every case."""

    def __init__(self, binary):
        self.dir = tempfile.mkdtemp(prefix="snapkv_probe_base_")
        shutil.copy(MODEL, os.path.join(self.dir, "m.gguf"))
        with open(os.path.join(self.dir, "doc.txt"), "w") as f:
            f.write(DOC)
        subprocess.run([binary, "compress", "-m", "m.gguf", "-f", "doc.txt", "--out", "doc.kvc",
                        "--quiet"], cwd=self.dir, check=True, stdout=subprocess.DEVNULL)
        self.kvc = open(os.path.join(self.dir, "doc.kvc"), "rb").read()
        self.gguf = open(MODEL, "rb").read()


def run_case(binary, base, case, stdout_path=None):
    work = tempfile.mkdtemp(prefix="snapkv_probe_")
    try:
        for name in ("m.gguf", "doc.txt", "doc.kvc"):
            shutil.copy(os.path.join(base.dir, name), os.path.join(work, name))
        for name, data in case.get("files", {}).items():
            with open(os.path.join(work, name), "wb") as f:
                f.write(data)
        setup = case.get("setup")
        if setup:
            setup(work)
        before = {n: sha(os.path.join(work, n)) for n in ("m.gguf", "doc.txt", "doc.kvc")
                  if n not in case.get("files", {})}
        out = open(case["stdout"], "wb") if case.get("stdout") else subprocess.DEVNULL
        try:
            p = subprocess.run(["sh", "-c", binary + " " + case["args"]], cwd=work,
                               stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.PIPE,
                               timeout=TIMEOUT)
            rc, err = p.returncode, p.stderr.decode("utf-8", "replace")
        except subprocess.TimeoutExpired:
            return "hang", case["args"]
        finally:
            if out is not subprocess.DEVNULL:
                out.close()
        for n, h in before.items():
            if sha(os.path.join(work, n)) != h:
                return "data loss", case["args"] + f" (changed {n})"
        check = case.get("check")
        if check:
            problem = check(work)
            if problem:
                return "data loss", case["args"] + f" ({problem})"
        if rc < 0 or rc >= 128 or rc not in (0, 1, 2):
            return "crash", case["args"] + f" (status {rc}): {err[-200:]}"
        if rc != 0 and "snapkv: error: " not in err and "Usage" not in err and \
                "run 'snapkv --help'" not in err:
            return "crash", case["args"] + f" (exit {rc} without a message): {err[-200:]}"
        if rc == 0 and case.get("invalid"):
            return "silent", case["args"]
        return "clean", None
    finally:
        shutil.rmtree(work, ignore_errors=True)


def quote(v):
    return "'" + v.replace("'", "'\\''") + "'"


def option_cases(rng, n):
    out = []
    items = [(c, o, False) for c, (ints, _) in COMMANDS.items() for o in ints] + \
            [(c, o, True) for c, (_, reals) in COMMANDS.items() for o in reals]
    for _ in range(n):
        cmd, opt, real = rng.choice(items)
        value, invalid = rng.choice(REAL_VALUES if real else VALUES)
        if not invalid and opt in TOO_BIG and value not in ("0", "1", "2", "3", "7", "16"):
            value, invalid = "-1", True
        if opt == "--threads" and not invalid and int(value) > 64:
            invalid = True  # beyond min(256, 4 x cores): refused
        if opt == "--seed" and not invalid and int(value) >= 2**63:
            continue  # seeds take the full range
        if opt == "--port" and not invalid and int(value) > 65535:
            invalid = True
        out.append({"class": "option values", "args": f"{cmd} {opt} {quote(value)}",
                    "invalid": invalid})
    return out


def kvc_cases(rng, base, n):
    out = []
    for _ in range(n):
        b = bytearray(base.kvc)
        kind = rng.choice(["flip", "truncate", "run", "flip"])
        if kind == "flip":
            for _ in range(rng.randint(1, 4)):
                i = rng.randrange(len(b))
                b[i] ^= 1 << rng.randrange(8)
        elif kind == "truncate":
            b = b[:rng.randrange(len(b))]
        else:
            i = rng.randrange(len(b))
            b[i:i + 8] = bytes([0xFF] * 8)
        if bytes(b) == base.kvc:
            continue
        out.append({"class": ".kvc corruptions", "files": {"bad.kvc": bytes(b)},
                    "args": "ask -m m.gguf --cache bad.kvc --question hi --max-tokens 2",
                    "invalid": True})
    return out


def gguf_cases(rng, base, n):
    out = []
    header = 4096  # magic, metadata and tensor table of the shipped model lie in its first pages
    for _ in range(n):
        b = bytearray(base.gguf)
        kind = rng.choice(["flip", "truncate", "flip"])
        if kind == "flip":
            i = rng.randrange(min(header, len(b)))
            b[i] ^= 1 << rng.randrange(8)
        else:
            b = b[:rng.randrange(len(b))]
        # A flip may land on a metadata byte that changes nothing checkable (documented).
        out.append({"class": "GGUF corruptions", "files": {"bad.gguf": bytes(b)},
                    "args": "tokenize -m bad.gguf --text hello", "invalid": kind == "truncate"})
    return out


def output_cases(rng, n, can_mknod):
    out = []
    targets = ["absent", "regular", "symlink", "directory", "fifo", "model", "doc"]
    if can_mknod:
        targets += ["null", "full"]
    for _ in range(n):
        writer = rng.choice(WRITERS)
        target = rng.choice(targets)
        path = {"model": "m.gguf", "doc": "doc.txt"}.get(target, "out.x")
        if path != "out.x" and path not in writer:
            target, path = "regular", "out.x"  # not an input of this writer: a plain file

        def setup(work, target=target):
            p = os.path.join(work, "out.x")
            if target == "regular":
                open(p, "w").write("old")
            elif target == "symlink":
                os.symlink("real.x", p)
            elif target == "directory":
                os.mkdir(p)
            elif target == "fifo":
                os.mkfifo(p)
            elif target in ("null", "full"):
                os.mknod(p, 0o666 | stat.S_IFCHR, os.makedev(1, 3 if target == "null" else 7))

        def check(work, target=target):
            p = os.path.join(work, "out.x")
            want = {"symlink": stat.S_IFLNK, "directory": stat.S_IFDIR, "fifo": stat.S_IFIFO,
                    "null": stat.S_IFCHR, "full": stat.S_IFCHR}.get(target)
            if want is not None and stat.S_IFMT(os.lstat(p).st_mode) != want:
                return f"{target} at the output path replaced"
            if any(".tmp." in f for f in os.listdir(work)):
                return "temporary file left"
            return None

        out.append({"class": "output targets", "args": writer.replace("OUT", path),
                    "setup": setup, "check": check, "invalid": target in ("full",)})
    return out


# Valid requests the HTTP mutations start from.
HTTP_SEEDS = [
    b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n",
    b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    b"Content-Length: 43\r\n\r\n{\"prompt\": \"The pass key\", \"max_tokens\": 2}",
    b"POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Length: 20\r\n\r\n{\"content\": \"hello\"}",
    b"GET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: keep-alive\r\n\r\n",
]
BAD_LENGTHS = [b"-1", b"abc", b"18446744073709551616", b"99999999999999999999", b"1e3", b" ",
               b"0x10", b"4294967296000"]


def http_cases(rng, n):
    cases = []
    for i in range(n):
        seed = rng.choice(HTTP_SEEDS)
        data = bytearray(seed)
        kind = rng.choice(["flip", "insert", "delete", "truncate", "length", "version",
                           "pipeline", "junk header", "long header", "no host", "wrong method"])
        invalid = False
        expect = None  # the status a case must get, when its mutation fixes one
        if kind == "flip":
            for _ in range(rng.randint(1, 4)):
                j = rng.randrange(len(data))
                data[j] ^= 1 << rng.randrange(8)
        elif kind == "insert":
            j = rng.randrange(len(data) + 1)
            data[j:j] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 16)))
        elif kind == "delete":
            j = rng.randrange(len(data))
            del data[j:j + rng.randint(1, 12)]
        elif kind == "truncate":
            del data[rng.randrange(len(data)):]
        elif kind == "length":
            value = rng.choice(BAD_LENGTHS)
            if b"Content-Length: " in data:
                data = bytearray(re.sub(rb"Content-Length: \d+", b"Content-Length: " + value,
                                        bytes(data)))
            else:
                data = bytearray(bytes(data).replace(b"\r\n\r\n",
                                                     b"\r\nContent-Length: " + value + b"\r\n\r\n"))
            invalid = True
        elif kind == "version":
            data = bytearray(bytes(data).replace(b"HTTP/1.1", rng.choice(
                [b"HTTP/2.0", b"HTTP/1.9", b"HTTP/x", b"HTTP/1.1.1", b"HTTP/"]), 1))
            invalid = True
        elif kind == "pipeline":
            data = bytearray(seed * rng.randint(2, 8))
        elif kind == "no host":  # HTTP/1.1 needs one Host field
            data = bytearray(bytes(data).replace(b"Host: x\r\n", b"", 1))
            invalid, expect = True, b"400"
        elif kind == "wrong method":  # a known path asked with a method it does not take
            data = bytearray(re.sub(rb"^(GET|POST) ",
                                    lambda m: b"POST " if m.group(1) == b"GET" else b"GET ",
                                    bytes(data), count=1))
            invalid, expect = True, b"405"
        elif kind == "junk header":
            junk = bytes(rng.randrange(1, 256) for _ in range(rng.randint(1, 40)))
            data = bytearray(bytes(data).replace(b"\r\n", b"\r\n" + junk + b"\r\n", 1))
        else:
            data = bytearray(bytes(data).replace(
                b"\r\n", b"\r\nX-Long: " + b"a" * rng.choice([100, 9000, 70000]) + b"\r\n", 1))
        cases.append({"class": "HTTP mutations", "args": f"{kind} #{i}", "http": bytes(data),
                      "invalid": invalid, "expect": expect})
    return cases


class Server:
    """One `snapkv serve` on a free loopback port for the HTTP cases."""

    def __init__(self, binary):
        self.proc = subprocess.Popen(
            [binary, "serve", "-m", MODEL, "--host", "127.0.0.1", "--port", "0", "--max-tokens",
             "4", "--threads", "1", "--head-timeout", "3", "--read-timeout", "2"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self.port = None
        for line in self.proc.stderr:
            m = re.search(rb"listening on http://[^:]+:(\d+)", line)
            if m:
                self.port = int(m.group(1))
                break
        if self.port is None:
            raise RuntimeError("snapkv serve did not start")
        # Keep draining the log so the server never blocks on a full pipe.
        import threading
        threading.Thread(target=lambda: [None for _ in self.proc.stderr], daemon=True).start()

    def healthy(self):
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=5) as c:
                c.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                return recv_all(c, 5).startswith(b"HTTP/1.1 200")
        except OSError:
            return False

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def recv_all(conn, timeout):
    conn.settimeout(timeout)
    out = b""
    while True:
        chunk = conn.recv(65536)
        if not chunk:
            return out
        out += chunk


def run_http_case(server, case):
    if server.proc.poll() is not None:
        return "crash", case["args"] + f" (server exited with {server.proc.returncode})"
    try:
        with socket.create_connection(("127.0.0.1", server.port), timeout=5) as c:
            try:
                c.sendall(case["http"])
                c.shutdown(socket.SHUT_WR)
            except OSError:
                pass  # the server may refuse and close before all bytes are sent
            try:
                reply = recv_all(c, 15)
            except socket.timeout:
                return "hang", case["args"] + " (connection open after 15 s)"
            except ConnectionResetError:
                reply = b""
    except OSError as e:
        return "hang", case["args"] + f" (cannot connect: {e})"
    if server.proc.poll() is not None:
        return "crash", case["args"] + f" (server exited with {server.proc.returncode})"
    if not server.healthy():
        return "hang", case["args"] + " (/health unanswered afterwards)"
    if reply and not reply.startswith(b"HTTP/1."):
        return "crash", case["args"] + f" (not an HTTP response: {reply[:60]!r})"
    if case["invalid"] and re.match(rb"HTTP/1\.[01] 2\d\d", reply):
        return "silent", case["args"] + f" ({reply[:40]!r})"
    if case.get("expect") and not reply.startswith(b"HTTP/1.1 " + case["expect"] + b" "):
        return "silent", case["args"] + f" (expected {case['expect'].decode()}: {reply[:40]!r})"
    return "clean", None


def stdout_cases():
    cmds = ["--help", "run --help", "run -m m.gguf --prompt hi --max-tokens 2 --quiet",
            "tokenize -m m.gguf --text hello", "tasks gen --n 1 --context 128",
            "ask -m m.gguf --cache doc.kvc --question hi --max-tokens 2",
            "demo -m m.gguf --context 128",
            "coverage --lengths 64 --budgets 16 --kv-heads 1 --group 2 --head-dim 32 --window 16"]
    return [{"class": "stdout on /dev/full", "args": c, "stdout": "/dev/full", "invalid": True}
            for c in cmds]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "snapkv"))
    ap.add_argument("--cases", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--jobs", type=int, default=4)
    args = ap.parse_args()
    binary = os.path.abspath(args.bin)
    rng = random.Random(args.seed)
    base = Base(binary)
    probe = os.path.join(base.dir, "probe_node")
    try:
        os.mknod(probe, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        can_mknod = True
    except OSError:
        can_mknod = False
    n = args.cases
    cases = (option_cases(rng, n * 55 // 100) + kvc_cases(rng, base, n * 20 // 100) +
             gguf_cases(rng, base, n * 12 // 100) + output_cases(rng, n * 13 // 100, can_mknod) +
             stdout_cases() + http_cases(rng, n * 10 // 100))
    table = collections.OrderedDict()
    bad = []
    server = Server(binary)
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        futures = {pool.submit(run_http_case, server, c) if "http" in c else
                   pool.submit(run_case, binary, base, c): c for c in cases}
        for f in concurrent.futures.as_completed(futures):
            c = futures[f]
            outcome, detail = f.result()
            row = table.setdefault(c["class"], collections.Counter())
            row[outcome] += 1
            if detail:
                bad.append((c["class"], outcome, detail))
    server.stop()
    shutil.rmtree(base.dir, ignore_errors=True)
    cols = ["clean", "crash", "hang", "silent", "data loss"]
    print("| class | cases | " + " | ".join(cols) + " |")
    print("|---|---:|" + "---:|" * len(cols))
    total = collections.Counter()
    for cls, row in table.items():
        total.update(row)
        print(f"| {cls} | {sum(row.values())} | " + " | ".join(str(row[c]) for c in cols) + " |")
    print(f"| all | {sum(total.values())} | " + " | ".join(str(total[c]) for c in cols) + " |")
    if not can_mknod:
        print("(device nodes skipped: mknod not permitted)")
    for cls, outcome, detail in sorted(bad)[:50]:
        print(f"{outcome}: [{cls}] {detail}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
