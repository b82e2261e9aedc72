"""serve: what a scrape costs the node, and how the exporter holds up.

1. Node-side cost of the default scrape (beam_probe_metrics:vm/2's own
   time on the node, scrape_us) against one `watch` sample without GC
   (sample_us), taken alternately on the same idle node of SIZE
   processes (default 0 and 100,000). Target: the scrape within 2x.
2. TARGETS nodes (default 20) each scraped every second over HTTP for
   SECONDS (default 600), as Prometheus would, through one `serve`:
   p50 and p99 of the scrape latency, failed scrapes, and the exporter's
   RSS after the first 10 s against at the end (flat: nothing grows with
   the number of scrapes).

Medians throughout. Run:
    python tests/bench_serve.py [--sizes 0,100000] [--targets 20]
        [--seconds 600]
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import statistics
import subprocess
import sys
import threading
import time
import urllib.request

from benchlib import start_node

from beam_probe.erldist.terms import Atom
from beam_probe.node.remote import ReplyLimits, attach
from beam_probe.probes.vm import HELPER, VM_LOCALS
from beam_probe.probes.watch import sample_node


def node_cost(size: int, runs: int) -> float:
    bulk = ReplyLimits(max_bytes=1 << 30, max_items=50_000_000)
    with start_node(args=("+P", "2000000")) as node, \
            attach(node.node, node.cookie.encode(), timeout=300,
                   limits=bulk) as remote:
        if size:
            remote.call("beam_probe_workload", "start", [0, 0, size],
                        timeout=300)
        count = remote.call("erlang", "system_info",
                            [Atom("process_count")])
        sample_node(remote)
        remote.ask(HELPER, "vm", *VM_LOCALS)
        watch_ms, serve_ms, watch_rt, serve_rt = [], [], [], []
        for _ in range(runs):
            started = time.perf_counter()
            raw = sample_node(remote)
            watch_rt.append(time.perf_counter() - started)
            watch_ms.append(raw["sample_us"] / 1000)
            started = time.perf_counter()
            reply = remote.ask(HELPER, "vm", *VM_LOCALS)
            serve_rt.append(time.perf_counter() - started)
            serve_ms.append(reply["scrape_us"] / 1000)
        w, s = statistics.median(watch_ms), statistics.median(serve_ms)
        ratio = s / w if w else float("inf")
        print(f"{count:>9} processes: scrape on the node {s:.2f} ms, watch "
              f"sample {w:.2f} ms: {ratio:.2f}x (target 2x); round trips "
              f"{statistics.median(serve_rt) * 1000:.2f} and "
              f"{statistics.median(watch_rt) * 1000:.2f} ms")
        return ratio


def rss_of(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def many_targets(targets: int, seconds: float) -> None:
    cookie = f"bench{os.getpid()}"
    nodes = []
    try:
        for _ in range(targets):
            nodes.append(start_node(args=("+S", "1", "+SDio", "1",
                                          "+SDcpu", "1"),
                                    cookie=cookie).__enter__())
        env = dict(os.environ, BEAM_PROBE_COOKIE=cookie)
        serve = subprocess.Popen(
            [sys.executable, "-m", "beam_probe", "serve", "--listen",
             "127.0.0.1:0", "--target", "bpbench*@*"], env=env,
            stderr=subprocess.PIPE, text=True)
        line = serve.stderr.readline()
        url = re.search(r"(http://\S+/)", line).group(1)
        threading.Thread(target=serve.stderr.read, daemon=True).start()
        latencies: list[float] = []
        failures = [0]
        start = time.monotonic() + 1
        end = start + seconds
        rss_early: list[int] = []

        def scraper(node: str) -> None:
            k = 0
            while True:
                slot = start + k
                if slot >= end:
                    return
                time.sleep(max(0.0, slot - time.monotonic()))
                began = time.monotonic()
                try:
                    with urllib.request.urlopen(
                            f"{url}probe?target={node}", timeout=10) as r:
                        body = r.read()
                    if b"beam_probe_up 1" not in body:
                        failures[0] += 1
                except OSError:
                    failures[0] += 1
                latencies.append(time.monotonic() - began)
                k += 1

        threads = [threading.Thread(target=scraper, args=(n.node,))
                   for n in nodes]
        for t in threads:
            t.start()
        time.sleep(min(10.0, seconds / 2) + 1)
        rss_early.append(rss_of(serve.pid))
        cpu_early = _cpu(serve.pid)
        early_at = time.monotonic()
        for t in threads:
            t.join()
        rss_end = rss_of(serve.pid)
        cpu = (_cpu(serve.pid) - cpu_early) / (time.monotonic() - early_at)
        serve.send_signal(signal.SIGTERM)
        serve.wait(20)
        ordered = sorted(latencies)
        p50 = ordered[len(ordered) // 2]
        p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
        print(f"{targets} targets every second for {seconds:g} s: "
              f"{len(latencies)} scrapes, {failures[0]} failed; latency "
              f"p50 {p50 * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms; exporter "
              f"RSS {rss_early[0] / 2**20:.1f} MiB after 10 s, "
              f"{rss_end / 2**20:.1f} MiB at the end; its CPU "
              f"{cpu * 100:.1f}% of one core")
    finally:
        for node in nodes:
            node.__exit__(None, None, None)


def _cpu(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="0,100000")
    parser.add_argument("--runs", type=int, default=31)
    parser.add_argument("--targets", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=600)
    args = parser.parse_args()
    ok = True
    for size in (int(s) for s in args.sizes.split(",") if s):
        ok &= node_cost(size, args.runs) <= 2.0
    if args.targets:
        many_targets(args.targets, args.seconds)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
