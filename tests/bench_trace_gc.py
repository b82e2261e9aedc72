"""trace-gc: what following a process's collections costs the node and
beam-probe.

On a node where one process (beam_probe_workload:churn/1) collects as fast
as it can, side by side, medians of RUNS windows of SECONDS each:

1. The node's CPU (statistics(runtime), all schedulers) and the churning
   process's collections per second, untraced and while
   `beam-probe trace-gc NODE bp_churn --format json` runs. The ratio of
   collections says how much tracing slows the traced process; the extra
   CPU is the tracer's, also given per collection (its reductions too).
2. beam-probe's own CPU (user + system, from wait4) per collection, output
   to a pipe that is read and dropped.

Run: python tests/bench_trace_gc.py [--runs R] [--seconds S]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import threading
import time

from benchlib import start_node

from beam_probe.erldist.terms import Atom
from beam_probe.node.remote import attach


def window(remote, seconds: float) -> tuple[float, float]:
    """Node CPU seconds per second and collections per second."""
    runtime0 = remote.call("erlang", "statistics", [Atom("runtime")])[0]
    gcs0 = remote.call("erlang", "statistics",
                       [Atom("garbage_collection")])[0]
    time.sleep(seconds)
    runtime1 = remote.call("erlang", "statistics", [Atom("runtime")])[0]
    gcs1 = remote.call("erlang", "statistics",
                       [Atom("garbage_collection")])[0]
    return (runtime1 - runtime0) / 1000 / seconds, (gcs1 - gcs0) / seconds


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=3.0)
    opts = parser.parse_args()
    with start_node() as node, \
            attach(node.node, node.cookie.encode()) as remote:
        remote.call("beam_probe_workload", "churn", [20000])
        env = dict(os.environ, HOME=node.home)
        cmd = [sys.executable, "-m", "beam_probe", "trace-gc", node.node,
               "bp_churn", "--duration", str(opts.seconds + 1),
               "--max-events", "100000", "--format", "json"]
        plain, traced, ours, reductions = [], [], [], []
        for _ in range(opts.runs):
            plain.append(window(remote, opts.seconds))
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE)
            if not proc.stdout.readline():  # tracing has begun
                raise SystemExit(proc.communicate()[1].decode())
            lines: list[bytes] = []
            reader = threading.Thread(target=lambda: lines.extend(
                proc.stdout), daemon=True)  # read as it comes, as a user
            reader.start()
            traced.append(window(remote, opts.seconds))
            proc.wait()
            reader.join()
            tail = lines[-1]
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            summary = json.loads(tail).get("summary")
            if summary is None:
                raise SystemExit(f"no summary: {proc.returncode} {proc.stderr.read()!r}")
            cpu = (after.ru_utime - before.ru_utime
                   + after.ru_stime - before.ru_stime)
            ours.append(cpu / max(1, summary["collections"]))
            reductions.append(summary["tracer_reductions"]
                              / max(1, summary["collections"]))
    cpu_plain = statistics.median(c for c, _ in plain)
    cpu_traced = statistics.median(c for c, _ in traced)
    gc_plain = statistics.median(g for _, g in plain)
    gc_traced = statistics.median(g for _, g in traced)
    print(f"collections/s of the churning process: untraced {gc_plain:.0f},"
          f" traced {gc_traced:.0f} (ratio {gc_traced / gc_plain:.2f})")
    print(f"node CPU: untraced {cpu_plain:.2f} s/s, traced "
          f"{cpu_traced:.2f} s/s; the tracer's share "
          f"{(cpu_traced - cpu_plain) * 1e6 / gc_traced:.1f} us and "
          f"{statistics.median(reductions):.0f} reductions per collection")
    print(f"beam-probe's CPU per collection (JSON to a pipe): "
          f"{statistics.median(ours) * 1e6:.1f} us (process start-up "
          "included)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
