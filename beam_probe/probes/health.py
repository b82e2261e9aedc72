"""What `beam-probe check` measures, on one node or on a whole cluster.

One helper call per node (beam_probe_scan:health/8): erlang:memory(), the
process and atom counts, one pass over every process for the largest
binary_memory and the longest message queue, and the processes behind
those two figures named as every table names its rows, the allocators (as alloc
folds them), the node's RSS and its largest ETS table. For --cluster, the target
itself fans the same expression out to every node it is connected to with
erpc:multicall, so beam-probe needs one connection, and one cookie, for the
whole cluster.
"""

from __future__ import annotations

from typing import Any, TYPE_CHECKING, cast

from beam_probe.node.forms import LIB, Local
from beam_probe.node.remote import Remote
from beam_probe.errors import BadReply
from beam_probe.node.replies import Reply
from beam_probe.probes import cluster
from beam_probe.probes.alloc import FRAGMENTED_MIN, LONG_LIVED, allocator_types, rss_bytes
from beam_probe.probes.processes import HELPER, rows

if TYPE_CHECKING:
    from beam_probe.probes.results import (AllocType, CheckValues, Holder,
                                           NodeHealth)

LOCALS = (Local("pmap", LIB), Local("values", LIB), Local("others", LIB),
          Local("types", "beam_probe_alloc"), Local("rss", "beam_probe_alloc"),
          Local("top_memory", "beam_probe_ets"), Local("describe", LIB))


def usage_min(types: list[AllocType]) -> float:
    """The lowest usage, in percent, of the allocator types where low usage
    means fragmentation: large enough (alloc's FRAGMENTED_MIN) and not
    long-lived (ll_alloc's carriers are a reserve sized up front: 54% on
    an idle OTP 27 node with +P 2000000); 100 when none is."""
    return min([round(100.0 * t["usage"], 2) for t in types
                if t["allocated"] >= FRAGMENTED_MIN
                and t["type"] not in LONG_LIVED] or [100.0])


def _allocators(types: list[AllocType]) -> dict[str, dict[str, int]]:
    return {t["type"]: {"used": t["used"], "allocated": t["allocated"]}
            for t in types}


def _values(reply: Reply, types: list[AllocType]) -> CheckValues:
    memory = reply.sizes("memory", ("total", "processes", "binary", "ets",
                                    "atom"))
    total = memory["total"]
    return {
        "total": total,
        "processes": memory["processes"],
        "binary": memory["binary"],
        "ets": memory["ets"],
        "atom": memory["atom"],
        "binary_share": round(100.0 * memory["binary"] / total, 2)
        if total else 0.0,
        "process_count": reply.count("process_count"),
        "top_binary_memory": reply.count("top_binary_memory"),
        "max_queue": reply.count("max_queue"),
        # A limit of 0 is no node's (it bounds the count).
        "atom_use": round(100.0 * reply.count("atom_count")
                          / reply.count("atom_limit", 1), 2),
        "rss": rss_bytes(reply["rss"], f"{reply.helper}'s rss"),
        "alloc_usage_min": usage_min(types),
        "top_ets_memory": reply.count("top_ets_memory"),
    }


def measure(remote: Remote, jobs: int = 0) -> NodeHealth:
    """Every check value of the attached node."""
    return _health(remote.node, remote.ask(HELPER, "health", jobs, *LOCALS))


def _holders(reply: Reply, values: CheckValues
             ) -> tuple[Holder | None, Holder | None]:
    """The processes behind top_binary_memory and max_queue (issue 38:
    a page for a 900 MiB holder said how much, never who): describe/1's
    rows, in the order of the two figures, a figure of 0 left out. Each
    is its pid, its name as a table's NAME column takes it (registered
    name, else label or process_name) and its initial call; None where
    the figure is 0."""
    described = rows(reply["holders"], "value")
    wanted = [values["top_binary_memory"] > 0, values["max_queue"] > 0]
    if len(described) != sum(wanted):
        raise BadReply(f"{reply.helper}'s holders are {len(described)} "
                       f"rows for {sum(wanted)} figures")
    found = iter(described)
    out: list[Holder | None] = []
    for want in wanted:
        row = next(found) if want else None
        out.append(None if row is None else {
            "pid": row["pid"], "name": row["name"] or row["label"],
            "initial_call": row["initial_call"]})
    return out[0], out[1]


def _health(node: str, reply: Reply) -> NodeHealth:
    types = allocator_types(reply.list("allocators"))
    values = _values(reply, types)
    binary, queue = _holders(reply, values)
    return {"node": node, "values": values,
            "top_binary_holder": binary, "max_queue_holder": queue,
            "allocators": _allocators(types)}


def measure_cluster(remote: Remote, timeout: float, jobs: int = 0,
                    deadline: float | None = None) -> list[NodeHealth]:
    """Every check value of the attached node and of every node it is
    connected to (erlang:nodes()), fanned out by the node itself.

    A node that does not answer within ``timeout`` seconds, or fails, gets
    an "error" instead of "values". With a ``deadline`` (time.monotonic())
    the whole answers by it: each node gets at most four fifths of what
    is left, the rest is for the replies to come back.
    """
    import time

    nodes = [remote.node, *cluster.connected_nodes(remote, [])]
    wait = None
    if deadline is not None:
        wait = max(0.1, deadline - time.monotonic())
        # In tenths of a second: said to the user ("no answer within 1.6 s").
        timeout = max(0.1, int(10 * min(timeout, 0.8 * wait)) / 10)
    # A failure row, {"node", "error"}, is a NodeHealth without values.
    return cast("list[NodeHealth]", cluster.fan(
        remote, nodes, HELPER, "health", (jobs, *LOCALS), _judgeable,
        timeout, wait=wait))


def _judgeable(node: str, reply: Reply) -> NodeHealth:
    """A node's values, or its row as one that answered with figures no
    node has (UNKNOWN in the check, where a node that does not answer is
    CRITICAL)."""
    try:
        return _health(node, reply)
    except BadReply as exc:
        return {"node": node, "error": f"{exc.label}: {exc}",
                "unjudged": True}
