"""What a pass over every process costs the node it inspects, in memory.

On an idle node of SIZE processes, the rise of the node's
erlang:memory(total) at its peak while one command runs (sampled every
millisecond inside the node by beam_probe_workload:peak_start/0), and
how much higher its RSS stays afterwards; against the same figures for
recon's proc_count(memory, 5) run inside the node (the in-node reference,
compiled, through erl_call), side by side, medians of RUNS.

Each command's rise is printed in MB and per million processes, as a
ratio to the reference's, and against the bound issue 39 set (every pass
over 300,000 processes at most 24 MB; at 1,000,000, snapshot at most 48
MB and proc-count at most 32 MB): "ok" or "OVER". The README's cost
section states these figures; tests/test_node_cost.py checks the bound
with a margin.

--otp 28 starts the node from OTP 28 (the process iterator: no list of
every pid), as the tests find it. --cluster adds an entry node of a few
processes, connected to the large one, and measures both while the
entry fans proc-count and snapshot out (the entry holds each member's
reply).

Run: python tests/bench_node_cost.py [SIZE ...] [--runs R] [--otp 25|28]
     [--cluster] [--only TEXT]
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
    "check": ["check", "{node}"],
    "top --once": ["top", "{node}", "--once"],
    "proc-window memory 5 500": ["proc-window", "{node}", "memory", "5",
                                 "500"],
    "snapshot --gc none": ["snapshot", "{node}", "--gc", "none", "-o",
                           "{file}"],
}

# Through an entry node: the member's pass, and what the entry holds.
CLUSTER_COMMANDS = {
    "proc-count --cluster memory 5": ["proc-count", "{entry}", "--cluster",
                                      "memory", "5"],
    "snapshot --cluster --gc none": ["snapshot", "{entry}", "--cluster",
                                     "--gc", "none", "-o", "{folder}"],
}

MB = 2 ** 20
# Issue 39's bounds, in MB: every pass at 300,000 processes; at 1,000,000
# the two it names.
BOUND_300K = 24
BOUND_1M = {"snapshot": 48, "proc-count": 32}


def bound(label: str, size: int) -> int | None:
    if size <= 300_000:
        return BOUND_300K
    if size >= 1_000_000:
        return BOUND_1M.get(label.split()[0])
    return None


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


def _cost(watched: list, env: dict, cmd: list[str]
          ) -> tuple[list[int], int, int, float]:
    """(peak rise of each watched node's memory, the first one's RSS kept
    after, our peak RSS, seconds) while ``cmd`` runs."""
    before = _rss(watched[0].pid)
    for node in watched:
        _erl_call(node, env, "-a", "beam_probe_workload peak_start []")
    code, _out, err, elapsed, ours = run_measured(cmd, env)
    if code not in (0, 1, 2):  # check's codes are its verdict
        raise SystemExit(f"{cmd[:3]} failed ({code}): {err}")
    rises = [int(_erl_call(node, env, "-a", "beam_probe_workload peak_stop []"))
             for node in watched]
    return rises, _rss(watched[0].pid) - before, ours, elapsed


def _fill(node, env: dict, size: int) -> None:
    base = int(_erl_call(node, env, "-a",
                         "erlang system_info [process_count]"))
    subprocess.run(["erl_call", "-sname", node.name, "-e"],
                   input=f"beam_probe_workload:start(0, 0, "
                         f"{max(0, size - base)}), ok.\n",
                   text=True, env=env, check=True, capture_output=True)


def _measure(script: str, words: list[str], fields: dict, watched: list,
             env: dict, runs: int) -> list:
    """``runs`` measures of one command (_cost's tuples)."""
    cmd = [script] + [w.format(**fields) for w in words] + ["--timeout",
                                                            "600"]
    return [_cost(watched, env, cmd) for _ in range(runs)]


def _verdict(label: str, size: int, rise: float) -> str:
    limit = bound(label, size)
    if limit is None:
        return ""
    return f" [bound {limit} MB: {'ok' if rise / MB <= limit else 'OVER'}]"


def bench(script: str, erl: str, size: int, runs: int,
          cluster: bool, only: str = "") -> bool:
    folder = tempfile.mkdtemp(prefix="bp-bench-cost-")
    ok = True
    with start_node(erl=erl, args=("+P", "2000000")) as node:
        env = dict(os.environ, HOME=node.home)
        _fill(node, env, size)
        release = _erl_call(node, env, "-a",
                            "erlang system_info [otp_release]").strip(
                                ' \n"')
        reference = ["erl_call", "-sname", node.name, "-timeout", "600",
                     "-a", "beam_probe_reference proc_count [memory, 5]"]
        theirs = [_cost([node], env, reference) for _ in range(runs)]
        ref_rise = statistics.median(r[0][0] for r in theirs)
        print(f"{size:,} processes, OTP {release}: reference "
              f"proc_count(memory, 5) in the node: +{ref_rise / MB:.0f} MB "
              f"at its peak, RSS kept "
              f"+{statistics.median(r[1] for r in theirs) / MB:.0f} MB, "
              f"{statistics.median(r[3] for r in theirs):.2f} s", flush=True)
        for label, words in COMMANDS.items():
            if only not in label:
                continue
            ours = _measure(script, words, {"node": node.node, "file":
                                            os.path.join(folder, "s")},
                            [node], env, runs)
            rise = statistics.median(r[0][0] for r in ours)
            verdict = _verdict(label, size, rise)
            ok &= "OVER" not in verdict
            print(f"{size:,} processes, OTP {release}: {label}: "
                  f"+{rise / MB:.1f} MB at its peak "
                  f"({rise / MB * 1e6 / size:.0f} MB per million, "
                  f"{rise / max(ref_rise, 1):.2f}x the reference's){verdict}, "
                  f"RSS kept "
                  f"+{statistics.median(r[1] for r in ours) / MB:.0f} MB, "
                  f"{statistics.median(r[3] for r in ours):.2f} s; "
                  f"beam-probe's own peak RSS "
                  f"{max(r[2] for r in ours) / MB:.0f} MB", flush=True)
        if cluster:
            ok &= _bench_cluster(script, erl, node, env, size, runs, folder,
                                 release)
    shutil.rmtree(folder, ignore_errors=True)
    return ok


def _bench_cluster(script: str, erl: str, member, env: dict, size: int,
                   runs: int, folder: str, release: str) -> bool:
    """The same node as a member of a two-node cluster, reached through
    an entry node of a few processes with the same cookie."""
    ok = True
    with start_node(erl=erl, cookie=member.cookie) as entry:
        entry_env = dict(env, HOME=entry.home)
        _erl_call(entry, entry_env, "-a",
                  f"net_kernel connect_node ['{member.node}']")
        for label, words in CLUSTER_COMMANDS.items():
            ours = _measure(script, words, {"entry": entry.node, "folder":
                                            os.path.join(folder, "c")},
                            [member, entry], entry_env, runs)
            rise = statistics.median(r[0][0] for r in ours)
            held = statistics.median(r[0][1] for r in ours)
            verdict = _verdict(label, size, rise)
            ok &= "OVER" not in verdict
            print(f"{size:,} processes, OTP {release}: {label}: member "
                  f"+{rise / MB:.1f} MB at its peak{verdict}, entry node "
                  f"+{held / MB:.1f} MB, "
                  f"{statistics.median(r[3] for r in ours):.2f} s",
                  flush=True)
            shutil.rmtree(os.path.join(folder, "c"), ignore_errors=True)
    return ok


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("sizes", nargs="*", type=int, default=[300_000])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--otp", choices=["25", "28"], default="25")
    parser.add_argument("--cluster", action="store_true")
    parser.add_argument("--only", default="",
                        help="the commands whose label holds this text")
    opts = parser.parse_args()
    script = os.path.join(os.path.dirname(sys.executable), "beam-probe")
    if not os.path.exists(script):
        script = shutil.which("beam-probe")
    if opts.otp == "28":
        from conftest import otp28_erl
        erl = otp28_erl()
    else:
        erl = shutil.which("erl") or "erl"
    ok = True
    for size in opts.sizes:
        ok &= bench(script, erl, size, max(1, opts.runs), opts.cluster,
                    opts.only)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
