"""snapshot and diff at scale.

On an idle node of SIZE processes, whole-process wall time of

    beam-probe snapshot NODE -o FILE --gc none
    beam-probe snapshot NODE -o FILE            (the default, --gc holders)

against erl_call running beam_probe_reference:proc_count(memory, 10)
(recon's algorithm, compiled, inside the node: one process_info pass),
side by side, medians; beam-probe's peak RSS and the file's size; then
`beam-probe diff` of three such snapshots: time and peak RSS.

Targets (the snapshot issue): snapshot <= 1.5x the reference on 2 cores
at 1M processes (none is set at 100k); peak RSS <= 300 MB; the file <= 30 MB; diff of three
1M-process snapshots under 5 s and at most 150 MB peak RSS (issue 39: read
whole into columns it took 279 MB and 3.6-4.0 s; streamed a chunk at a
time, 74 MB and 2.0 s, medians of 5 on 2 cores).

With --proc-lib the processes are gen_servers started by proc_lib (a
broker's shape: on OTP 25 the snapshot copies each one's dictionary for
its '$initial_call'), not plain spawns. beam-probe runs as `python -m
beam_probe` from this checkout, or from --source DIR (another commit's
tree, e.g. `git archive COMMIT | tar -x -C DIR`: a before and after on
the same node's shape).

Run: python tests/bench_snapshot.py [SIZE ...] [--runs R] [--keep DIR]
     [--proc-lib] [--source DIR]
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


def child(cmd: list[str], env: dict) -> tuple[float, int]:
    code, _out, err, elapsed, peak = run_measured(cmd, env)
    if code != 0:
        raise SystemExit(f"{cmd[:3]} failed ({code}): {err}")
    return elapsed, peak


def bench(script: list[str], source: str, size: int, runs: int,
          keep: str | None, proc_lib: bool) -> bool:
    folder = tempfile.mkdtemp(prefix="bp-bench-snap-")
    with start_node(args=("+P", "2000000")) as node:
        env = dict(os.environ, HOME=node.home, PYTHONPATH=source)
        base = int(subprocess.run(
            ["erl_call", "-sname", node.name, "-a",
             "erlang system_info [process_count]"], env=env, check=True,
            capture_output=True, text=True).stdout)
        count = max(0, size - base)
        make = (f"[{{ok, _}} = gen_server:start(beam_probe_groups_fixture, "
                f"server, []) || _ <- lists:seq(1, {count})], ok.\n"
                if proc_lib else
                f"beam_probe_workload:start(0, 0, {count}), ok.\n")
        subprocess.run(["erl_call", "-sname", node.name, "-timeout", "600",
                        "-e"], input=make, text=True, env=env, check=True,
                       capture_output=True)
        ours_cmd = [*script, "snapshot", node.node, "--gc", "none",
                    "--timeout", "600", "-o"]
        # The default, --gc holders: its extra pass finds and collects the
        # processes holding refc binaries first.
        default_cmd = [*script, "snapshot", node.node, "--timeout", "600",
                       "-o"]
        base_cmd = ["erl_call", "-sname", node.name, "-timeout", "600",
                    "-a", "beam_probe_reference proc_count [memory, 10]"]
        ours, defaults, theirs, rss, files = [], [], [], [], []
        for i in range(runs):
            path = os.path.join(folder, f"{i}.snapshot")
            elapsed, peak = child(ours_cmd + [path], env)
            ours.append(elapsed)
            rss.append(peak)
            files.append(path)
            theirs.append(child(base_cmd, env)[0])
            defaults.append(child(default_cmd + [path + ".gc"], env)[0])
        size_bytes = max(os.path.getsize(p) for p in files)
        mo, mt = statistics.median(ours), statistics.median(theirs)
        md = statistics.median(defaults)
        # The issue sets the ratio at 1M; below, Python's start-up (~0.3 s
        # against erl_call's few ms) is most of the difference.
        aim = "target <= 1.5" if size >= 1_000_000 else "no target below 1M"
        print(f"{size} {'proc_lib gen_servers' if proc_lib else 'processes'}"
              f" ({source}): snapshot {mo * 1000:.0f} ms, reference "
              f"proc_count(memory, 10) via erl_call {mt * 1000:.0f} ms, "
              f"ratio {mo / mt:.2f} ({aim}); peak RSS "
              f"{max(rss) / 2**20:.0f} MB (<= 300); file "
              f"{size_bytes / 2**20:.1f} MB (<= 30); the default (--gc "
              f"holders) {md * 1000:.0f} ms, ratio {md / mt:.2f} (no "
              f"target)", flush=True)
    diff_cmd = [*script, "diff", *files[:3], "--format", "json"]
    elapsed, peak = child(diff_cmd, dict(os.environ, PYTHONPATH=source))
    print(f"{size} processes: diff of three snapshots {elapsed:.2f} s "
          f"(< 5), peak RSS {peak / 2**20:.0f} MB (<= 150)", flush=True)
    if keep:
        for i, path in enumerate(files[:3]):
            shutil.copy(path, os.path.join(keep, f"{size}-{i + 1}.snapshot"))
    shutil.rmtree(folder, ignore_errors=True)
    return ((mo / mt <= 1.5 or size < 1_000_000) and max(rss) <= 300 * 2**20
            and size_bytes <= 30 * 2**20 and elapsed < 5
            and peak <= 150 * 2**20)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("sizes", nargs="*", type=int,
                        default=[100_000, 1_000_000])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--keep", metavar="DIR",
                        help="copy three snapshots of each size into DIR")
    parser.add_argument("--proc-lib", action="store_true",
                        help="gen_servers started by proc_lib, not plain "
                        "spawns")
    parser.add_argument("--source", default=os.path.dirname(
        os.path.dirname(os.path.abspath(__file__))),
                        help="the tree whose beam_probe runs (default: "
                        "this checkout)")
    opts = parser.parse_args()
    # The source tree itself, never an installed script that may be stale.
    script = [sys.executable, "-m", "beam_probe"]
    ok = all([bench(script, os.path.abspath(opts.source), size,
                    max(3, opts.runs), opts.keep, opts.proc_lib)
              for size in opts.sizes])
    print("all within targets" if ok else "SOME OVER TARGET")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
