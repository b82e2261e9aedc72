"""calls: what tracing a function called ~100,000 times a second costs.

On a node where one process calls beam_probe_calls_fixture:hot/1 100
times a millisecond (paced/1: ~100,000 calls a second), side by side,
medians of RUNS windows of SECONDS each:

1. The function's own cost: timer:tc of 1,000 non-tail calls of it, in
   the node, every 20 ms (another ~50,000 calls a second), untraced and
   while `beam-probe calls NODE beam_probe_calls_fixture:hot/1` runs
   (with --rate and --max raised past the load, so that it keeps
   tracing): the ratio is the slowdown a traced call pays (its trace
   message, built and copied by the emulator).
2. The node's CPU (statistics(runtime), all schedulers) untraced and
   traced: the extra is the tracer's and the traced calls', also given
   per call counted.
3. The tracer's memory when it ended (its summary's tracer_memory).
4. With the defaults (--rate 20000/s): how soon the trace stops itself.

Run: python tests/bench_calls.py [--runs R] [--seconds S] [--erl ERL]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time

from benchlib import start_node

from beam_probe.erldist.terms import Atom
from beam_probe.node.remote import attach

FIXTURE = "beam_probe_calls_fixture"
CALLS = 1_000


def call_cost(remote, seconds: float) -> float:
    """Median microseconds a call of hot/1, over timer:tc runs for about
    ``seconds``."""
    costs = []
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        us, _ = remote.call("timer", "tc", [Atom(FIXTURE),
                                             Atom("paced_calls"), [CALLS]])
        costs.append(us / CALLS)
        # Paced: back to back these bursts would call hot/1 millions of
        # times a second, far past what is measured (and any tracer).
        time.sleep(0.02)
    return statistics.median(costs)


def cpu(remote, seconds: float) -> float:
    """The node's CPU seconds a second over ``seconds``."""
    before = remote.call("erlang", "statistics", [Atom("runtime")])[0]
    time.sleep(seconds)
    after = remote.call("erlang", "statistics", [Atom("runtime")])[0]
    return (after - before) / 1000 / seconds


def traced(node, env, seconds: float, rate: str | None):
    """Start `calls` on hot/1; returns the process and its lines, read as
    they come (as a user reads them)."""
    cmd = [sys.executable, "-m", "beam_probe", "calls", node.node,
           f"{FIXTURE}:hot/1", "--duration", str(seconds),
           "--format", "json"] + (["--rate", rate, "--max", "100000000"]
                                  if rate else [])
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    lines: list[bytes] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout),
                              daemon=True)
    reader.start()
    return proc, lines, reader


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--erl", default="erl")
    parser.add_argument("--per-ms", type=int, default=100,
                        help="calls of hot/1 a millisecond (the load)")
    opts = parser.parse_args()
    with start_node(opts.erl) as node, \
            attach(node.node, node.cookie.encode(), timeout=60) as remote:
        env = dict(os.environ, HOME=node.home)
        load = remote.call(FIXTURE, "paced", [opts.per_ms])
        time.sleep(1)
        plain_cost, traced_cost, plain_cpu, traced_cpu = [], [], [], []
        per_call, memory, rates, ends = [], [], [], []
        for _ in range(opts.runs):
            plain_cost.append(call_cost(remote, opts.seconds / 2))
            plain_cpu.append(cpu(remote, opts.seconds / 2))
            proc, lines, reader = traced(node, env, opts.seconds + 2,
                                         "1000000")
            while not lines and proc.poll() is None:
                time.sleep(0.05)  # until tracing has begun
            traced_cost.append(call_cost(remote, opts.seconds / 2))
            traced_cpu.append(cpu(remote, opts.seconds / 2))
            proc.wait()
            reader.join()
            summary = json.loads(lines[-1])["summary"]
            # overload: the tracer fell behind (it yields after every
            # message it takes: see beam_probe_calls.erl).
            ends.append(f"{summary['ended_by']} (backlog "
                        f"{summary['tracer_backlog']}, "
                        f"{summary['tracer_memory'] // 1024} KiB) at "
                        f"{summary['elapsed']:.1f} s")
            rates.append(summary["per_s"])
            per_call.append((traced_cpu[-1] - plain_cpu[-1])
                            / max(1.0, summary["per_s"]) * 1e6)
            memory.append(summary["tracer_memory"])
        proc, lines, reader = traced(node, env, 30, None)
        proc.wait()
        reader.join()
        defaults = json.loads(lines[-1])["summary"]
        remote.call("erlang", "exit", [load, Atom("kill")])
    med = statistics.median
    print(f"calls of hot/1 counted while traced: {med(rates):,.0f}/s "
          f"(the load: {opts.per_ms} calls a millisecond, plus the "
          f"measuring loop); the traces ended by {', '.join(ends)}")
    print(f"a call of hot/1: untraced {med(plain_cost):.3f} us, traced "
          f"{med(traced_cost):.3f} us: slowdown x"
          f"{med(traced_cost) / med(plain_cost):.1f}")
    print(f"node CPU: untraced {med(plain_cpu):.2f} s/s, traced "
          f"{med(traced_cpu):.2f} s/s: +{med(per_call):.2f} us a call "
          f"counted (tracer and traced calls together)")
    print(f"tracer memory at the end: {med(memory) / 1024:.0f} KiB")
    print(f"with the defaults: ended by {defaults['ended_by']} after "
          f"{defaults['elapsed']:.2f} s, {defaults['counted']:,} counted")
    return 0


if __name__ == "__main__":
    sys.exit(main())
