"""What a scan costs the node it inspects, in memory.

On an idle node of SIZE processes, the rise of the node's
erlang:memory(total) at its peak while one command runs (sampled every
millisecond inside the node by beam_probe_workload:peak_start/0), and
how much higher its RSS stays afterwards; against the same figures for
recon's proc_count(memory, 5) run inside the node (the in-node reference,
compiled, through erl_call), side by side, medians of RUNS.

Each command's rise is printed in MB and per million processes, and as a
ratio to the reference's. The README states these figures.

Run: python tests/bench_node_cost.py [SIZE ...] [--runs R]
A node of 1M processes needs about 3 GB.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

from benchlib import start_node
from conftest import run_measured

COMMANDS = {
    "proc-count memory 5": ["proc-count", "{node}", "memory", "5"],
    "proc-count binary_memory 5": ["proc-count", "{node}", "binary_memory",
                                   "5"],
    "bin-leak 5": ["bin-leak", "{node}", "5"],
    "proc-window memory 5 500": ["proc-window", "{node}", "memory", "5",
                                 "500"],
    "snapshot --gc none": ["snapshot", "{node}", "--gc", "none", "-o",
                           "{file}"],
    "check": ["check", "{node}"],
}


def _erl_call(node, env: dict, *args: str) -> str:
    return subprocess.run(["erl_call", "-sname", node.name, "-timeout",
                           "600", *args], env=env, check=True,
                          capture_output=True, text=True).stdout


def _rss(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def _cost(node, env: dict, cmd: list[str]) -> tuple[int, int, int, float]:
    """(peak rise of the node's memory, its RSS kept after, our peak RSS,
    seconds) while ``cmd`` runs."""
    before = _rss(node.pid)
    _erl_call(node, env, "-a", "beam_probe_workload peak_start []")
    code, _out, err, elapsed, ours = run_measured(cmd, env)
    if code not in (0, 1, 2):  # check's codes are its verdict
        raise SystemExit(f"{cmd[:3]} failed ({code}): {err}")
    rise = int(_erl_call(node, env, "-a", "beam_probe_workload peak_stop []"))
    return rise, _rss(node.pid) - before, ours, elapsed


def bench(script: str, size: int, runs: int) -> None:
    folder = tempfile.mkdtemp(prefix="bp-bench-cost-")
    mb = 2 ** 20
    with start_node(args=("+P", "2000000")) as node:
        env = dict(os.environ, HOME=node.home)
        base = int(_erl_call(node, env, "-a",
                             "erlang system_info [process_count]"))
        subprocess.run(["erl_call", "-sname", node.name, "-e"],
                       input=f"beam_probe_workload:start(0, 0, "
                             f"{max(0, size - base)}), ok.\n",
                       text=True, env=env, check=True, capture_output=True)
        reference = ["erl_call", "-sname", node.name, "-timeout", "600",
                     "-a", "beam_probe_reference proc_count [memory, 5]"]
        theirs = [_cost(node, env, reference) for _ in range(runs)]
        ref_rise = statistics.median(r[0] for r in theirs)
        print(f"{size:,} processes: reference proc_count(memory, 5) in the "
              f"node: +{ref_rise / mb:.0f} MB at its peak, RSS kept "
              f"+{statistics.median(r[1] for r in theirs) / mb:.0f} MB, "
              f"{statistics.median(r[3] for r in theirs):.2f} s", flush=True)
        for label, words in COMMANDS.items():
            cmd = [script] + [w.format(node=node.node,
                                       file=os.path.join(folder, "s"))
                              for w in words] + ["--timeout", "600"]
            ours = [_cost(node, env, cmd) for _ in range(runs)]
            rise = statistics.median(r[0] for r in ours)
            print(f"{size:,} processes: {label}: +{rise / mb:.0f} MB at its "
                  f"peak ({rise / mb * 1e6 / size:.0f} MB per million, "
                  f"{rise / max(ref_rise, 1):.2f}x the reference's), RSS "
                  f"kept +{statistics.median(r[1] for r in ours) / mb:.0f} "
                  f"MB, {statistics.median(r[3] for r in ours):.2f} s; "
                  f"beam-probe's own peak RSS "
                  f"{max(r[2] for r in ours) / mb:.0f} MB", flush=True)
    shutil.rmtree(folder, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("sizes", nargs="*", type=int, default=[300_000])
    parser.add_argument("--runs", type=int, default=3)
    opts = parser.parse_args()
    script = os.path.join(os.path.dirname(sys.executable), "beam-probe")
    if not os.path.exists(script):
        script = shutil.which("beam-probe")
    for size in opts.sizes:
        bench(script, size, max(1, opts.runs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
