"""ets: the largest ETS tables, with their owners.

One call (beam_probe_ets:largest/2): the node ranks every table by memory
or size with compiled calls and describes only the N it keeps; tables
that vanish mid-scan are skipped there. Memory is in bytes (ets:info
gives words).
"""

from __future__ import annotations

from typing import Any, Sequence, TYPE_CHECKING

from beam_probe.erldist.terms import Atom, Pid, format_term, mfa
from beam_probe.errors import UsageError
from beam_probe.node.remote import Remote
from beam_probe.node.replies import Reply, count
from beam_probe.probes import cluster

if TYPE_CHECKING:
    from beam_probe.probes.results import ClusterEts, EtsReport, EtsTable

HELPER = "beam_probe_ets"
MAX_N = 10_000  # as proc-count: the reply stays a few MB at most
SORTS = ("memory", "size")


def owner_group(items: dict[str, Any]) -> str:
    """The owner's "constructor", by the snapshot's rule less the parent:
    its label, proc_lib's '$initial_call', its registered name, its
    initial call."""
    label = items.get("label")
    if label not in (None, Atom("undefined")):
        return f"label {format_term(label)}"
    first = items.get("$initial_call")
    if isinstance(first, tuple):
        return mfa(first) or format_term(first)
    name = items.get("registered_name")
    if isinstance(name, Atom):
        return str(name)
    initial = items.get("initial_call")
    return mfa(initial) or format_term(initial)


def _owner_items(owner: Any) -> dict[str, Any]:
    if not isinstance(owner, list):  # the owner died meanwhile
        return {}
    out = {}
    for key, value in owner:
        if isinstance(key, tuple):  # {dictionary, '$initial_call'}
            out["$initial_call"] = value
        else:
            out[str(key)] = value
    return out


def _table(raw: Any, wordsize: int) -> EtsTable:
    entry = Reply("beam_probe_ets:largest's table", raw)
    info = entry.pairs("info")
    owner = _owner_items(entry["owner"])
    name = owner.get("registered_name")
    where = f"{entry.helper} {format_term(entry['id'])[:40]}"
    return {"id": format_term(entry["id"]),
            "name": format_term(info.get("name")),
            "owner": str(info.get("owner")) if isinstance(info.get("owner"),
                                                          Pid) else "?",
            "owner_name": str(name) if isinstance(name, Atom) else None,
            "owner_group": owner_group(owner) if owner else "(exited)",
            "size": count(f"{where}'s size", info.get("size", 0)),
            "memory": count(f"{where}'s memory", info.get("memory", 0))
            * wordsize,
            "type": format_term(info.get("type")),
            "protection": format_term(info.get("protection"))}


def check_n(n: int) -> None:
    if n < 1:
        raise UsageError(f"N must be at least 1, not {n}")
    if n > MAX_N:
        raise UsageError(f"N must be at most {MAX_N}, not {n}")


def largest(remote: Remote, n: int = 10, sort: str = "memory") -> EtsReport:
    """The ``n`` largest tables of the attached node by ``sort``."""
    check_n(n)
    check_sort(sort)
    return read_largest(remote.node, sort,
                        remote.ask(HELPER, "largest", n, Atom(sort)))


def check_sort(sort: str) -> None:
    if sort not in SORTS:
        raise UsageError(f"--sort is memory or size, not {sort!r}")


def read_largest(node: str, sort: str, reply: Reply) -> EtsReport:
    wordsize = reply.wordsize()
    return {"node": node, "sort": sort,
            "tables": reply.count("tables"),
            "total_memory": reply.count("total_words") * wordsize,
            "largest": [_table(entry, wordsize)
                        for entry in reply.list("largest")]}


def largest_cluster(remote: Remote, n: int = 10, sort: str = "memory",
                    nodes: Sequence[str] | None = None,
                    include_hidden: bool = False) -> ClusterEts:
    """The ``n`` largest tables of every node of the entry's cluster, each
    with its node (probes/cluster.py)."""
    check_n(n)
    check_sort(sort)
    chosen, connected = cluster.members(remote, nodes, include_hidden)
    cluster.check_rows(n, len(chosen))
    answers = cluster.fan(
        remote, chosen, HELPER, "largest", (n, Atom(sort)),
        lambda node, reply: read_largest(node, sort, reply),
        remote.timeout, connected)
    result: ClusterEts = {
        "entry": remote.node, "sort": sort,
        "nodes": cluster.per_node(answers, lambda a: {
            "node": a["node"], "tables": a["tables"],
            "total_memory": a["total_memory"]}),
        "largest": cluster.top(cluster.merged(
            answers, lambda a: a["largest"]),
            "memory" if sort == "memory" else "size", n)}
    return cluster.complete(result, answers)


__all__ = ["check_n", "check_sort", "largest", "largest_cluster",
           "owner_group"]
