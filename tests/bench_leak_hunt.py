"""bin-leak and proc-count at scale, against the in-node reference.

On a node of SIZE processes running beam_probe_workload (20 leakers, 20
keepers, the rest idle), whole-process wall time of

    beam-probe bin-leak NODE 5 --format json
    beam-probe proc-count NODE binary_memory 3 --format json

against erl_call running beam_probe_reference (recon's algorithms, compiled,
inside the node). Leakers are refilled before every run of either side, so
both always find the same leak. Medians, measured side by side in one run;
also beam-probe's peak RSS.

Targets (issue 3): bin-leak <= 0.5x and proc-count binary_memory <= 1.0x at
100k, lower still at 1M; peak RSS <= 150 MB at 1M.

Run: python tests/bench_leak_hunt.py [SIZE ...] [--runs R] [--jobs J]
A node of 1M processes needs about 3 GB.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time

from benchlib import start_node
from conftest import run_measured

LEAKERS = KEEPERS = 20


def run_child(cmd: list[str], env: dict) -> tuple[float, int]:
    """Wall seconds and peak RSS (bytes, the child's own VmHWM)."""
    code, _out, err, elapsed, peak = run_measured(cmd, env)
    if code != 0:
        raise SystemExit(f"{cmd[0]} failed ({code}): {err}")
    return elapsed, peak


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("sizes", nargs="*", type=int, default=[100_000])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--jobs", default=None)
    opts = parser.parse_args()
    script = os.path.join(os.path.dirname(sys.executable), "beam-probe")
    if not os.path.exists(script):
        script = shutil.which("beam-probe")
    ok = True
    for size in opts.sizes:
        ok &= bench_size(script, size, opts.runs, opts.jobs)
    return 0 if ok else 1


def bench_size(script: str, size: int, runs: int, jobs: str | None) -> bool:
    with start_node(args=("+P", "2000000")) as node:
        env = dict(os.environ, HOME=node.home)

        def erl_call_eval(expr: str) -> None:
            # -e reads the expression from stdin; the cookie comes from HOME.
            out = subprocess.run(["erl_call", "-sname", node.name, "-e"],
                                 input=expr + "\n", text=True, env=env,
                                 check=True, capture_output=True).stdout
            if "error" in out:
                raise SystemExit(f"erl_call -e failed: {out}")

        started = time.perf_counter()
        base = int(subprocess.run(
            ["erl_call", "-sname", node.name, "-a", "erlang system_info "
             "[process_count]"], env=env, check=True, capture_output=True,
            text=True).stdout)
        idle = max(0, size - base - 2 * LEAKERS - LEAKERS)
        erl_call_eval(
            f"W = beam_probe_workload:start({LEAKERS}, {KEEPERS}, {idle}), "
            "{L, _, _} = W, persistent_term:put(bp_bench_leakers, L), ok.")
        print(f"{size} processes: workload up in "
              f"{time.perf_counter() - started:.1f} s", flush=True)
        refill = ("beam_probe_workload:refill("
                  "persistent_term:get(bp_bench_leakers)).")
        extra = ["--jobs", jobs] if jobs else []
        cases = [
            ("bin-leak 5", 0.5,
             [script, "bin-leak", node.node, "5", "--format", "json",
              "--timeout", "600"] + extra,
             ["erl_call", "-sname", node.name, "-timeout", "600", "-a",
              "beam_probe_reference bin_leak [5]"]),
            ("proc-count binary_memory 3", 1.0,
             [script, "proc-count", node.node, "binary_memory", "3",
              "--format", "json", "--timeout", "600"] + extra,
             ["erl_call", "-sname", node.name, "-timeout", "600", "-a",
              "beam_probe_reference proc_count [binary_memory, 3]"]),
        ]
        all_ok = True
        for label, target, ours_cmd, base_cmd in cases:
            ours, theirs, rss = [], [], []
            for _ in range(runs):
                # Alternate the two sides so drift on a shared machine hits
                # both alike.
                erl_call_eval(refill)
                elapsed, peak = run_child(ours_cmd, env)
                ours.append(elapsed)
                rss.append(peak)
                erl_call_eval(refill)
                theirs.append(run_child(base_cmd, env)[0])
            mo, mt = statistics.median(ours), statistics.median(theirs)
            ratio = mo / mt
            verdict = "ok" if ratio <= target else "OVER TARGET"
            print(f"{size} processes, {label}: beam-probe {mo * 1000:.0f} ms, "
                  f"reference via erl_call {mt * 1000:.0f} ms, ratio "
                  f"{ratio:.2f} (target <= {target}) {verdict}; beam-probe "
                  f"peak RSS {max(rss) / 2**20:.0f} MB (median of {runs})",
                  flush=True)
            all_ok &= ratio <= target
            if size >= 1_000_000:
                all_ok &= max(rss) <= 150 * 2**20
        return all_ok


if __name__ == "__main__":
    sys.exit(main())
