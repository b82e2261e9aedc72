"""--cluster: what a fan-out through one node costs, against one node.

1. watch --cluster on NODES small nodes (default 10, of 10,000 processes
   each), one reached through another: the node-side cost of a sample on
   each node in the fan-out (node_ms) against one node sampled alone, and
   the wall time of a round against one node's round trip.
   Bounds: node-side within 2x, wall time within 3x.
2. snapshot --cluster of 3 nodes totalling PROCESSES (default 600,000),
   as whole beam-probe runs: against the slowest of the three nodes'
   single snapshots, and beam-probe's peak RSS.
   Bounds: within 1.5x; under 300 MB.

Medians throughout, side by side in one run. Run:
python tests/bench_cluster.py [--nodes 10] [--small 10000]
[--processes 600000] [--runs 15] [--snapshot-nodes 3] [--schedulers S]

On a machine with fewer cores than nodes the nodes share the cores and
the many-node figures measure that; --nodes 2 --snapshot-nodes 2
--schedulers 1 on 2 cores gives each node a core of its own.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

from benchlib import helper_beams

from beam_probe.erldist.terms import Atom
from beam_probe.node.local import LocalNode
from beam_probe.node.remote import ReplyLimits, attach
from beam_probe.probes import cluster
from beam_probe.probes.watch import NO_GC_LIMIT, SAMPLE_LOCALS, sample_node

BULK = ReplyLimits(max_bytes=1 << 30, max_items=50_000_000)


def start_cluster(count: int, each: int, beams: str,
                  schedulers: int = 0) -> list[LocalNode]:
    """``count`` nodes of one cookie, ``each`` idle processes on each, all
    connected to the first; ``schedulers`` online on each (0: one per
    core)."""
    tag = uuid.uuid4().hex[:6]
    cookie = f"bc{tag}"
    started: list[LocalNode] = []
    try:
        for i in range(count):
            started.append(LocalNode(
                f"bpbc{tag}n{i:02d}", cookie=cookie, code_paths=(beams,),
                args=("+P", str(max(262144, 2 * each)),
                      *(("+S", f"{schedulers}:{schedulers}")
                        if schedulers else ()))).start(120))
        with attach(started[0].node, cookie.encode(), timeout=300,
                    limits=BULK) as remote:
            for node in started[1:]:
                assert remote.call("net_kernel", "connect_node",
                                   [Atom(node.node)]) is True
        for node in started:
            if each:
                with attach(node.node, cookie.encode(), timeout=300,
                            limits=BULK) as remote:
                    remote.call("beam_probe_workload", "start",
                                [0, 0, each], timeout=300)
        return started
    except BaseException:
        for node in started:
            node.stop()
        raise


def watch_round(nodes: list[LocalNode], runs: int) -> None:
    entry = nodes[0]
    with attach(entry.node, entry.cookie.encode(), timeout=60) as remote:
        members = [n.node for n in nodes]
        sample_node(remote)  # the helper parsed once
        alone_ms, alone_wall, one_ms, fan_ms, fan_wall = [], [], [], [], []

        def fan(over: list[str]) -> list[float]:
            answers = cluster.fan(
                remote, over, "beam_probe_watch", "sample",
                (Atom("none"), NO_GC_LIMIT, 0, *SAMPLE_LOCALS),
                lambda node, reply: reply.int("sample_us") / 1000, 10.0)
            assert all(isinstance(a, float) for a in answers), answers
            return answers  # type: ignore[return-value]

        for _ in range(runs):
            started = time.perf_counter()
            raw = sample_node(remote)
            alone_wall.append(time.perf_counter() - started)
            alone_ms.append(raw.int("sample_us") / 1000)
            # One member through the entry: the fan-out's own cost to a
            # node, without the others' samples sharing its cores.
            one_ms.append(fan(members[1:2])[0])
            started = time.perf_counter()
            answers = fan(members)
            fan_wall.append(time.perf_counter() - started)
            fan_ms.append(statistics.median(answers))
    alone = statistics.median(alone_ms)
    print(f"watch sample, {len(nodes)} nodes on {os.cpu_count()} cores: "
          f"node_ms alone {alone:.2f}; one node through the entry "
          f"{statistics.median(one_ms):.2f} "
          f"({statistics.median(one_ms) / alone:.2f}x, bound 2x); each of "
          f"{len(nodes)} at once {statistics.median(fan_ms):.2f} "
          f"({statistics.median(fan_ms) / alone:.2f}x: the nodes share "
          f"the cores); a round {statistics.median(fan_wall) * 1000:.1f} ms "
          f"against {statistics.median(alone_wall) * 1000:.1f} ms for one "
          f"node ({statistics.median(fan_wall) / statistics.median(alone_wall):.2f}x, "
          "bound 3x)")


def _run(args: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "beam_probe", *args], env=env,
                   check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - started


def snapshot_cluster(nodes: list[LocalNode], runs: int) -> None:
    entry = nodes[0]
    env = dict(os.environ, BEAM_PROBE_COOKIE=entry.cookie)
    scratch = tempfile.mkdtemp(prefix="bp-bench-cluster-")
    alone: dict[str, list[float]] = {n.node: [] for n in nodes}
    together: list[float] = []
    for i in range(runs):
        for node in nodes:
            alone[node.node].append(_run(
                ["snapshot", node.node, "-o",
                 os.path.join(scratch, f"{i}-{node.name}.snapshot"),
                 "--timeout", "300"], env))
        together.append(_run(
            ["snapshot", entry.node, "--cluster", "-o",
             os.path.join(scratch, f"cluster-{i}"), "--timeout", "300"],
            env))
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
    slowest = max(statistics.median(times) for times in alone.values())
    one_by_one = sum(statistics.median(times) for times in alone.values())
    ratio = statistics.median(together) / slowest
    # On a machine with fewer cores than the nodes have schedulers in all,
    # the nodes' passes share the cores: the sum of the single snapshots
    # (one after the other) is then the fair comparison as well.
    print(f"snapshot --cluster of {len(nodes)} nodes on {os.cpu_count()} "
          f"cores: {statistics.median(together):.2f} s against "
          f"{slowest:.2f} s for the slowest node alone ({ratio:.2f}x, bound "
          f"1.5x) and {one_by_one:.2f} s for the {len(nodes)} one after "
          "the other "
          f"({statistics.median(together) / one_by_one:.2f}x); peak RSS of "
          f"any beam-probe run {peak / 2**20:.0f} MiB (bound 300 MiB)")
    subprocess.run(["rm", "-rf", scratch], check=False)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, default=10)
    parser.add_argument("--small", type=int, default=10_000)
    parser.add_argument("--processes", type=int, default=600_000)
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--snapshot-runs", type=int, default=3)
    parser.add_argument("--snapshot-nodes", type=int, default=3)
    parser.add_argument(
        "--schedulers", type=int, default=0,
        help="schedulers online on each node (0: one per core). With as "
             "many nodes as cores and 1, the nodes do not share a core: "
             "the fan-out's own cost, as on a node-per-machine cluster")
    options = parser.parse_args()
    beams = helper_beams()
    nodes = start_cluster(options.nodes, options.small, beams,
                          options.schedulers)
    try:
        watch_round(nodes, options.runs)
    finally:
        for node in nodes:
            node.stop()
    nodes = start_cluster(options.snapshot_nodes,
                          options.processes // options.snapshot_nodes, beams,
                          options.schedulers)
    try:
        snapshot_cluster(nodes, options.snapshot_runs)
    finally:
        for node in nodes:
            node.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
