"""vm and top: what the exporter reads of a node, one call per scrape.

vm is the default scrape (beam_probe_metrics:vm/2): erlang:memory(),
counts and limits, erlang:statistics/1's counters and the allocators, per
instance. Its cost does not grow with the node's processes (none is
walked); it grows with the schedulers, through the allocator read that
`watch` makes too.

top (beam_probe_metrics:top/8) is opt-in: one pass over every process
ranking it three ways, the cost of a proc-count run reading three items.
"""

from __future__ import annotations

import time
from typing import Any, Sequence, TYPE_CHECKING

from beam_probe.erldist.terms import Atom, Pid
from beam_probe.node.forms import LIB, Local
from beam_probe.node.replies import BadReply, Reply, count, shown
from beam_probe.node.remote import Remote
from beam_probe.probes import cluster
from beam_probe.probes.alloc import allocator_types, rss_bytes, verdict
from beam_probe.probes.processes import check_jobs, rows

if TYPE_CHECKING:
    from beam_probe.probes.results import (AllocInstance, NodeFailure,
                                           TopProcesses, VmFigures)

HELPER = "beam_probe_metrics"
VM_LOCALS = (Local("rss", "beam_probe_alloc"),)
TOP_LOCALS = (Local("pmap", LIB), Local("values", LIB), Local("top", LIB),
              Local("describe", LIB), Local("others", LIB))
# The most rows per ranking: each row is a labelled series in Prometheus,
# and its label set changes as processes come and go (the bound).
MAX_TOP = 20
# The binary holders whose reductions are read, for the idle-holder
# estimate: the largest ones hold the bytes that matter, and the exporter
# keeps this many pids per target between scrapes (a few hundred KB).
HOLDERS = 1000
MIN_HOLDERS = 50
# The share of what is left of a cluster scrape's time that the entry
# keeps for itself: each member gets the rest.
FAN_MARGIN = 0.2

MEMORY_KEYS = ("total", "processes", "processes_used", "system", "atom",
               "atom_used", "binary", "code", "ets")
COUNT_KEYS = ("process_count", "process_limit", "port_count", "port_limit",
              "atom_count", "atom_limit", "ets_count", "ets_limit",
              "schedulers", "schedulers_online", "dirty_cpu_schedulers",
              "dirty_cpu_schedulers_online", "dirty_io_schedulers",
              "logical_processors", "logical_processors_available",
              "logical_processors_online", "thread_pool_size", "wordsize")
STATISTICS_KEYS = ("bytes_received", "bytes_output", "context_switches",
                   "gcs", "words_reclaimed", "reductions", "runtime_ms",
                   "wall_clock_ms", "run_queue")
CARRIER_KINDS = ("mbcs", "mbcs_pool", "sbcs")
RANKINGS = ("memory", "binary_memory", "message_queue_len")


def check_top(n: int) -> None:
    from beam_probe.errors import UsageError

    if not 1 <= n <= MAX_TOP:
        raise UsageError(f"the number of processes per ranking must be 1 "
                         f"to {MAX_TOP} (each is a series), not {n}")


def vm(remote: Remote) -> VmFigures:
    """The default scrape of the attached node."""
    return read_vm(remote.node, remote.ask(HELPER, "vm", *VM_LOCALS))


def _fan_limits(remote: Remote, deadline: float | None
                ) -> tuple[float, float | None]:
    """Each node's limit and the whole fan-out's wait, by ``deadline``
    (time.monotonic()) once the members are known: a slow member is its
    failure row, in time, rather than the whole answer late."""
    if deadline is None:
        return remote.timeout, None
    left = max(0.05, deadline - time.monotonic())
    return max(0.05, left - FAN_MARGIN * left), left


def vm_cluster(remote: Remote, nodes: Sequence[str] | None = None,
               include_hidden: bool = False,
               deadline: float | None = None
               ) -> list[VmFigures | NodeFailure]:
    """The default scrape of every node of the entry's cluster, in one
    fan-out through it; a node that did not answer is its failure."""
    chosen, connected = cluster.members(remote, nodes, include_hidden)
    timeout, wait = _fan_limits(remote, deadline)
    return cluster.fan(remote, chosen, HELPER, "vm", VM_LOCALS, read_vm,
                       timeout, connected, wait)


def _known(system: dict[str, Any], key: str) -> int | None:
    # 'unknown' (logical_processors off Linux) or badarg: left out.
    value = system.get(key)
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return count(f"beam_probe_metrics:vm's {key}", value)


def _pair(item: Any, where: str) -> tuple[int, int]:
    """A counter {Name, Current, Max} (the helper's trim) or {Name,
    Current, LastMax, Max} (a block count): current and max."""
    if not isinstance(item, tuple) or len(item) not in (2, 3, 4):
        raise BadReply(f"{where}: {shown(item)} is not a counter")
    return count(where, item[1]), count(where, item[-1])


def _counters(trimmed: Any, where: str) -> list[int]:
    """One instance's kind of carrier as beam_probe_alloc's eight numbers:
    blocks, their max, block bytes, their max, carriers, their max,
    carrier bytes, their max; the blocks summed over the types they are
    of (a pooled carrier may hold another type's)."""
    if not isinstance(trimmed, list):
        raise BadReply(f"{where} is {shown(trimmed)}, not a list")
    out = [0] * 8
    for item in trimmed:
        if not isinstance(item, tuple) or not item:
            raise BadReply(f"{where}: {shown(item)} is not a counter")
        name = str(item[0])
        if name == "carriers":
            out[4], out[5] = _pair(item, where)
        elif name == "carriers_size":
            out[6], out[7] = _pair(item, where)
        elif name == "blocks" and len(item) == 2 \
                and isinstance(item[1], list):
            for per_type in item[1]:
                if not (isinstance(per_type, tuple) and len(per_type) == 2
                        and isinstance(per_type[1], list)):
                    raise BadReply(f"{where}: blocks {shown(per_type)}")
                for counter in per_type[1]:
                    kind = str(counter[0]) if isinstance(counter, tuple) \
                        and counter else ""
                    if kind in ("count", "size"):
                        now, most = _pair(counter, where)
                        at = 0 if kind == "count" else 2
                        out[at] += now
                        out[at + 1] += most
    return out


def _instances(raw: Reply) -> list[AllocInstance]:
    """The helper's allocators (every type's instances in one list, with
    how many are of each type) as one AllocInstance per instance."""
    where = "beam_probe_metrics:vm's allocators"
    types = raw.list("types")
    counts = raw.counts("counts")
    numbers = raw.counts("instances")
    kinds = {key: raw.list(key) for key in CARRIER_KINDS}
    if len(types) != len(counts) or sum(counts) != len(numbers) or any(
            len(lists) != len(numbers) for lists in kinds.values()):
        raise BadReply(f"{where}: its types, instances and carriers differ "
                       "in number")
    if not all(isinstance(kind, Atom) for kind in types):
        raise BadReply(f"{where}: a type is not an allocator's name")
    out: list[AllocInstance] = []
    i = 0
    for kind, count in zip(types, counts):
        for _ in range(count):
            out.append({"type": str(kind), "instance": numbers[i],
                        "mbcs": _counters(kinds["mbcs"][i], where),
                        "mbcs_pool": _counters(kinds["mbcs_pool"][i], where),
                        "sbcs": _counters(kinds["sbcs"][i], where)})
            i += 1
    return out


def _types(instances: list[AllocInstance]) -> list[Any]:
    """The per-type sums that beam_probe_alloc:types/0 gives, from the
    instances: the verdict is alloc's, on the same figures."""
    sums: dict[str, dict[str, Any]] = {}
    for item in instances:
        into = sums.setdefault(item["type"], {
            "type": Atom(item["type"]), "instances": 0,
            **{kind: [0] * 8 for kind in CARRIER_KINDS}})
        into["instances"] += 1
        for kind in CARRIER_KINDS:
            into[kind] = [a + b for a, b in zip(into[kind],
                                                item[kind])]  # type: ignore[literal-required]
    return list(sums.values())


def read_vm(node: str, reply: Reply) -> VmFigures:
    memory = reply.sizes("memory", MEMORY_KEYS)
    system = reply.pairs("system")
    counts = {key: _known(system, key) for key in COUNT_KEYS}
    # Our processes and our connection's port are not the node's.
    for key, ours in (("process_count", "our_processes"),
                      ("port_count", "our_ports")):
        value = counts[key]
        if value is not None:
            counts[key] = max(0, value - reply.count(ours))
    stats = Reply("beam_probe_metrics:vm's statistics",
                  reply.pairs("statistics"))
    statistics = {key: stats.count(key) for key in STATISTICS_KEYS}
    queues = stats.counts("run_queue_lengths")
    normal = counts["schedulers"] or 0
    instances = _instances(reply.map("allocators"))
    types = allocator_types(_types(instances))
    allocated = sum(t["allocated"] for t in types)
    rss = rss_bytes(reply["rss"], "beam_probe_metrics:vm's rss")
    release = system.get("otp_release")
    version = system.get("version")
    return {
        "node": node,
        "otp_release": _text(release),
        "erts_version": _text(version),
        "memory": memory,
        "counts": counts,
        "time_correction": system.get("time_correction") is True,
        "statistics": statistics,
        # run_queue_lengths_all: the normal queues, then the dirty CPU
        # queue and the dirty I/O queue (OTP 20+).
        "dirty_cpu_run_queue": queues[-2] if len(queues) >= normal + 2
        else None,
        "dirty_io_run_queue": queues[-1] if len(queues) >= normal + 2
        else None,
        "dets_tables": reply.count("dets_tables"),
        "allocators": instances,
        "allocator_types": types,
        "verdict": verdict(types, allocated, rss),
        "rss": rss,
        "node_ms": round(reply.count("scrape_us") / 1000, 3),
    }


def _text(value: Any) -> str:
    if isinstance(value, list) and all(isinstance(c, int) for c in value):
        return "".join(chr(c) for c in value if 0 < c < 0x110000)[:64]
    if isinstance(value, (bytes, str)):
        text = value.decode("latin-1") if isinstance(value, bytes) else value
        return text[:64]
    return ""


def top(remote: Remote, n: int, jobs: int = 0) -> TopProcesses:
    """The N largest processes three ways and the largest binary
    holders' reductions, in one pass over every process."""
    check_top(n)
    check_jobs(jobs)
    return read_top(remote.node, remote.ask(HELPER, "top", n, HOLDERS, jobs,
                                            *TOP_LOCALS))


def top_cluster(remote: Remote, n: int, jobs: int = 0,
                nodes: Sequence[str] | None = None,
                include_hidden: bool = False,
                deadline: float | None = None
                ) -> list[TopProcesses | NodeFailure]:
    """top on every node of the entry's cluster; the holders each node
    reports shrink with their number, so what is kept of them between
    scrapes stays about HOLDERS pids whatever the cluster's size."""
    check_top(n)
    check_jobs(jobs)
    chosen, connected = cluster.members(remote, nodes, include_hidden)
    cluster.check_rows(n, len(chosen))
    holders = max(MIN_HOLDERS, HOLDERS // max(1, len(chosen)))
    timeout, wait = _fan_limits(remote, deadline)
    return cluster.fan(remote, chosen, HELPER, "top",
                       (n, holders, jobs, *TOP_LOCALS), read_top, timeout,
                       connected, wait)


def read_top(node: str, reply: Reply) -> TopProcesses:
    holders: list[tuple[str, int, int]] = []
    for entry in reply.list("holders")[:HOLDERS]:
        if not (isinstance(entry, tuple) and len(entry) == 3
                and isinstance(entry[1], Pid)):
            raise BadReply("beam_probe_metrics:top's holders are not "
                           "{Bytes, Pid, Reductions}")
        held, pid, reductions = entry
        # A holder that exited since the scan: not idle, not counted.
        if isinstance(reductions, tuple) and len(reductions) == 2:
            where = "beam_probe_metrics:top's holders"
            holders.append((str(pid), count(where, held),
                            count(where, reductions[1])))
    return {"node": node, "scanned": reply.count("scanned"),
            "memory": rows(reply["memory"], "value", order=True),
            "binary_memory": rows(reply["binary_memory"], "value",
                                  order=True),
            "message_queue_len": rows(reply["message_queue_len"], "value",
                                      order=True),
            "holders": holders,
            "node_ms": round(reply.count("scan_us") / 1000, 3)}


__all__ = ["HOLDERS", "MAX_TOP", "RANKINGS", "check_top", "read_top",
           "read_vm", "top", "top_cluster", "vm", "vm_cluster"]
