"""What the server scripts share: a free loopback port for a server to bind, and waiting until a
server answers.

    from serve_util import free_port, wait_ready
    port = free_port()
    proc = subprocess.Popen([snapkv, "serve", "--model", model, "--port", str(port)])
    if not wait_ready(port, proc=proc):
        sys.exit("the server did not start")
"""

import http.client
import socket
import time


def free_port():
    """A TCP port free on 127.0.0.1 at the time of the call."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(port, path="/health", limit=300, host="127.0.0.1", proc=None, pause=0.2):
    """Polls GET `path` until it answers 200 (True). False when `proc` (a subprocess.Popen, or
    None for a server started elsewhere) exits first or `limit` seconds pass."""
    deadline = time.monotonic() + limit
    while True:
        try:
            conn = http.client.HTTPConnection(host, port, timeout=5)
            try:
                conn.request("GET", path)
                if conn.getresponse().status == 200:
                    return True
            finally:
                conn.close()
        except OSError:
            pass
        if (proc is not None and proc.poll() is not None) or time.monotonic() > deadline:
            return False
        time.sleep(pause)
