"""What counting a process's refc binaries from outside costs (issue 38,
item 2): inspect of a plain loop holding N refc binaries of 100 bytes,
against the node's own process_info(P, binary) on it, and against inspect
of a plain loop holding none.

For each N (5,000, 100,000, 300,000 by default): the median over RUNS of
process_info(P, binary) timed in the node (timer:tc/3 through rpc: the
list's copy, the target's part of the cost), inspect's wall time and the
node's figures while it runs (a ticker in the node: the longest gap of a
1 ms timer, the rise of erlang:memory(total) at its highest); the ratios
printed are inspect's wall against the empty loop's (what the binaries
add) and the node's peak rise against the list's copy (6 words a
reference). Past BINARIES_MOST words of heap the list is not read: the
largest N shows it.

Run: PYTHONPATH=. python tests/bench_inspect_binaries.py [--erl ERL]
[N ...]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from benchlib import start_node

from beam_probe.erldist.terms import Atom
from beam_probe.node.remote import ReplyLimits, attach
from conftest import run_here

FIXTURE = "beam_probe_inspect_fixture"
RUNS = 5
MB = 2 ** 20


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--erl", default="erl")
    parser.add_argument("sizes", nargs="*", type=int,
                        default=[5_000, 100_000, 300_000])
    args = parser.parse_args()
    with start_node(erl=args.erl) as node, \
            attach(node.node, node.cookie.encode(), timeout=600,
                   limits=ReplyLimits(max_bytes=1 << 30,
                                      max_items=50_000_000)) as remote:
        def call(module: str, function: str, *a):
            return remote.call(module, function, list(a), timeout=600)

        def inspect(name: str) -> tuple[float, dict, dict]:
            call(FIXTURE, "ticker_start")
            started = time.perf_counter()
            result = run_here("inspect", node.node, name, "--format",
                              "json", node=node)
            wall = time.perf_counter() - started
            figures = {str(k): v for k, v in
                       call(FIXTURE, "ticker_stop").items()}
            assert result.returncode == 0, result.stderr
            return wall, json.loads(result.stdout), figures

        call(FIXTURE, "holder", Atom("bp_empty"), 1)
        empty = statistics.median(inspect("bp_empty")[0]
                                  for _ in range(RUNS))
        print(f"inspect of a plain loop holding 1 binary: {empty * 1000:.0f}"
              f" ms (median of {RUNS})")
        for n in args.sizes:
            name = Atom(f"bp_holder_{n}")
            pid = call(FIXTURE, "holder", name, n)
            copies = []
            for _ in range(RUNS):
                micros, (_, listed) = call("timer", "tc", Atom("erlang"),
                                           Atom("process_info"),
                                           [pid, Atom("binary")])
                copies.append(micros / 1000)
            runs = [inspect(str(name)) for _ in range(RUNS)]
            wall = statistics.median(r[0] for r in runs)
            answer = runs[-1][1]
            rise = statistics.median(r[2]["peak_rise"] for r in runs)
            gap = max(r[2]["gap_us"] for r in runs) / 1000
            found = answer["binaries"]
            listed_mb = 6 * 8 * len(listed) / MB
            print(f"{n:,} binaries ({answer['total']['heap_bytes'] / MB:.1f}"
                  f" MiB of heap): process_info(P, binary) "
                  f"{statistics.median(copies):.1f} ms in the node "
                  f"({len(listed):,} references, {listed_mb:.1f} MiB "
                  f"copied); inspect {wall * 1000:.0f} ms "
                  f"({wall / empty:.2f}x the empty loop's), "
                  + (f"{found['count']:,} counted" if found else
                     f"not read: {answer['binaries_note']}")
                  + f"; node peak rise {rise / MB:.1f} MiB "
                  f"({rise / MB / listed_mb:.2f}x the list's copy), "
                  f"longest timer gap {gap:.1f} ms")
            call("erlang", "exit", pid, Atom("kill"))


if __name__ == "__main__":
    main()
