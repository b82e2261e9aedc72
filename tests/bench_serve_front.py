"""serve's front door under the hostile tester's load (issue 37, 15), and
what basic auth costs a scrape.

1. SLOW half-sent connections (default 64) that drip a byte a second,
   kept open (reopened when closed) for SECONDS (default 30), while a
   scrape of a real node is made every SECONDS/18 s: how many of the 18
   answered 200 (before the front door: 2 of 18).
2. BURST concurrent scrapes (default 1,000) of the same node: how many
   answered 200, how many 503 (busy, at once), how many failed
   (before: 29% failed), and the wall time.
3. A bcrypt check at cost 10 and 12 against a remembered password: the
   ratio a scrape saves.

Run:
    python tests/bench_serve_front.py [--slow 64] [--seconds 30]
        [--burst 1000]
"""

from __future__ import annotations

import argparse
import base64
import concurrent.futures
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

from benchlib import start_node


def _get(url: str, timeout: float = 60) -> int:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            r.read()
            return r.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return 0


def slowloris(address: str, url: str, slow: int, seconds: float) -> None:
    host, port = address.rsplit(":", 1)
    stop = threading.Event()

    def one() -> None:
        while not stop.is_set():
            try:
                sock = socket.create_connection((host, int(port)), timeout=5)
                sock.sendall(b"GET /probe?target=x HTTP/1.1\r\nHost: x\r\n")
                while not stop.wait(1.0):
                    sock.send(b"X")
            except OSError:
                pass   # closed by the exporter: open another
    threads = [threading.Thread(target=one, daemon=True)
               for _ in range(slow)]
    for t in threads:
        t.start()
    time.sleep(1)
    codes = []
    for _ in range(18):
        started = time.monotonic()
        codes.append(_get(url, timeout=10))
        time.sleep(max(0.0, seconds / 18 - (time.monotonic() - started)))
    stop.set()
    print(f"{slow} half-sent connections for {seconds:.0f} s: "
          f"{codes.count(200)} of 18 scrapes answered 200 "
          f"(others: {[c for c in codes if c != 200]})")


def burst(url: str, count: int) -> None:
    started = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(count) as pool:
        codes = list(pool.map(lambda _: _get(url), range(count)))
    took = time.monotonic() - started
    print(f"{count} concurrent scrapes: {codes.count(200)} answered 200, "
          f"{codes.count(503)} 503, {codes.count(0)} failed "
          f"({codes.count(0) / count:.1%}), in {took:.1f} s")


def bcrypt_cost() -> None:
    import bcrypt

    from beam_probe.exporter.auth import BasicAuth

    header = "Basic " + base64.b64encode(b"p:pw").decode()
    for cost in (10, 12):
        checker = BasicAuth({"p": bcrypt.hashpw(b"pw", bcrypt.gensalt(cost))})
        started = time.perf_counter()
        checker.check(header)
        first = time.perf_counter() - started
        started = time.perf_counter()
        for _ in range(1000):
            checker.check(header)
        again = (time.perf_counter() - started) / 1000
        print(f"basic auth, bcrypt cost {cost}: first check "
              f"{first * 1000:.0f} ms, remembered {again * 1e6:.1f} us "
              f"({first / again:,.0f}x less)")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--slow", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--burst", type=int, default=1000)
    args = parser.parse_args()
    bcrypt_cost()
    with start_node() as node:
        env = dict(os.environ, BEAM_PROBE_COOKIE=node.cookie)
        serve = subprocess.Popen(
            [sys.executable, "-m", "beam_probe", "serve", "--listen",
             "127.0.0.1:0", "--target", node.node], env=env,
            stderr=subprocess.PIPE, text=True)
        try:
            line = serve.stderr.readline()
            base = re.search(r"(http://\S+/)", line).group(1)
            threading.Thread(target=serve.stderr.read, daemon=True).start()
            url = base + "probe?" + urllib.parse.urlencode(
                {"target": node.node})
            assert _get(url) == 200
            slowloris(base.split("//")[1].rstrip("/"), url, args.slow,
                      args.seconds)
            burst(url, args.burst)
        finally:
            serve.send_signal(signal.SIGTERM)
            serve.wait(20)
    return 0


if __name__ == "__main__":
    sys.exit(main())
