"""serve: what a scrape costs the node, and how the exporter holds up.

1. Node-side cost of the default scrape (beam_probe_metrics:vm/2's own
   time on the node, scrape_us) against one `watch` sample without GC
   (sample_us), taken alternately on the same idle node of SIZE
   processes (default 0 and 100,000). Target: the scrape within 2x.
2. TARGETS nodes (default 20) each scraped every second over HTTP for
   SECONDS (default 600), as Prometheus would, through one `serve`:
   p50 and p99 of the scrape latency, failed scrapes, and the exporter's
   RSS each minute (flat: nothing grows with the number of scrapes).
   Beside it, the same with one target alone for 30 s: the latency
   without 20 nodes contending for the machine's cores.

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

from benchlib import loaded_node, start_node

from beam_probe.probes.vm import HELPER, VM_LOCALS
from beam_probe.probes.watch import sample_node


def node_cost(size: int, runs: int) -> float:
    with loaded_node(size) as (_node, remote, count):
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


def rss_of(pid: int, key: str = "VmRSS:") -> int:
    """The process's resident bytes (or, with key "Threads:", threads)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key):
                value = int(line.split()[1])
                return value * 1024 if key == "VmRSS:" else value
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
             "127.0.0.1:0", "--target", "bpbench*@*",
             # The bench's own nodes, on a machine of its own.
             "--allow-target-patterns"], env=env,
            stderr=subprocess.PIPE, text=True)
        line = serve.stderr.readline()
        url = re.search(r"(http://\S+/)", line).group(1)
        threading.Thread(target=serve.stderr.read, daemon=True).start()
        for chosen, seconds_now in ((nodes[:1], min(30.0, seconds)),
                                    (nodes, seconds)):
            _scrape_all(url, [n.node for n in chosen], seconds_now,
                        serve.pid)
        serve.send_signal(signal.SIGTERM)
        serve.wait(20)
    finally:
        for node in nodes:
            node.__exit__(None, None, None)


def _scrape_all(url: str, targets: list[str], seconds: float,
                pid: int) -> None:
    """Each target every second for ``seconds``, one thread each."""
    latencies: list[float] = []
    failures = [0]
    start = time.monotonic() + 1
    end = start + seconds

    def scraper(node: str) -> None:
        k = 0
        while start + k < end:
            time.sleep(max(0.0, start + k - time.monotonic()))
            began = time.monotonic()
            try:
                with urllib.request.urlopen(f"{url}probe?target={node}",
                                            timeout=10) as r:
                    if b"beam_probe_up 1" not in r.read():
                        failures[0] += 1
            except OSError:
                failures[0] += 1
            latencies.append(time.monotonic() - began)
            k += 1

    threads = [threading.Thread(target=scraper, args=(n,)) for n in targets]
    for t in threads:
        t.start()
    rss_mib, cpu_at = [], (_cpu(pid), time.monotonic())
    threads_seen = []
    while any(t.is_alive() for t in threads):
        time.sleep(min(60.0, max(1.0, seconds / 10)))
        rss_mib.append(round(rss_of(pid) / 2**20, 1))
        threads_seen.append(rss_of(pid, "Threads:"))
    for t in threads:
        t.join()
    cpu = (_cpu(pid) - cpu_at[0]) / (time.monotonic() - cpu_at[1])
    ordered = sorted(latencies)
    p50 = ordered[len(ordered) // 2]
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    print(f"{len(targets)} targets every second for {seconds:g} s: "
          f"{len(latencies)} scrapes, {failures[0]} failed; latency p50 "
          f"{p50 * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms; the exporter's CPU "
          f"{cpu * 100:.1f}% of one core; its RSS (MiB) along the run: "
          f"{rss_mib}; its threads: {threads_seen}")


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
