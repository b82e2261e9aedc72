"""Shared by the benchmarks: medians, ratios, and a scratch node.

Benchmarks are scripts, not tests: they print figures measured side by side
in one run, because the machine is shared and noisy and only ratios (and
medians) carry from one run to the next.
"""

from __future__ import annotations

import contextlib
import glob
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Iterator

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from conftest import TEST_ERLANG, unique_name  # noqa: E402

from beam_probe.node.local import LocalNode, compile_erl  # noqa: E402


def median_seconds(fn, runs: int) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def time_commands(ours: list[str], base: list[str], env: dict,
                  runs: int) -> tuple[float, float]:
    """Median wall times of two commands run in turn, run by run: the
    machine's noise of a moment falls on both, not on one's whole series."""
    def once(cmd: list[str]) -> float:
        started = time.perf_counter()
        subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, check=True)
        return time.perf_counter() - started
    once(ours), once(base)  # warm the page cache and EPMD
    times: tuple[list[float], list[float]] = ([], [])
    for _ in range(runs):
        times[0].append(once(ours))
        times[1].append(once(base))
    return statistics.median(times[0]), statistics.median(times[1])


def helper_beams() -> str:
    out = tempfile.mkdtemp(prefix="bp-bench-beams-")
    compile_erl(sorted(glob.glob(os.path.join(TEST_ERLANG, "*.erl"))), out)
    return out


def start_node(erl: str = "erl", args: tuple = (), **kw) -> LocalNode:
    return LocalNode(unique_name("bpbench"), erl=erl,
                     code_paths=(helper_beams(),), args=args, **kw).start(120)


@contextlib.contextmanager
def loaded_node(size: int) -> Iterator[tuple[LocalNode, Any, int]]:
    """A scratch node with ``size`` idle workload processes, attached for
    bulk replies (the workload's lists every pid it started): the node,
    the Remote and the node's process count."""
    from beam_probe.erldist.terms import Atom
    from beam_probe.node.remote import ReplyLimits, attach

    bulk = ReplyLimits(max_bytes=1 << 30, max_items=50_000_000)
    with start_node(args=("+P", "2000000")) as node, \
            attach(node.node, node.cookie.encode(), timeout=300,
                   limits=bulk) as remote:
        if size:
            remote.call("beam_probe_workload", "start", [0, 0, size],
                        timeout=300)
        yield node, remote, remote.call("erlang", "system_info",
                                        [Atom("process_count")])


def report(label: str, ours: float, base: float, target: float) -> bool:
    ratio = ours / base
    verdict = "ok" if ratio <= target else "OVER TARGET"
    print(f"{label}: beam-probe {ours * 1000:.1f} ms, baseline "
          f"{base * 1000:.1f} ms, ratio {ratio:.2f} (target <= {target}) "
          f"{verdict}")
    return ratio <= target
