"""alloc: leak or fragmentation? recon_alloc's question, from outside.

One call (beam_probe_alloc:alloc/3) folds every allocator type on the node;
here the figures get their names, their ratios and a verdict, with its
evidence in numbers (text/ words it):

* outside: the node's resident memory is above everything its allocators
  hold by at least OUTSIDE_MIN and OUTSIDE_SHARE of it: memory taken by
  NIFs, drivers or the C libraries they call, which no Erlang tool sees;
* fragmentation: a large allocator type (at least FRAGMENTED_MIN bytes in
  carriers) under FRAGMENTED_USAGE full, whose multiblock carriers each
  hold a few live blocks (FEW_BLOCKS or fewer on average): those blocks
  keep the carriers from being returned, and finding a holder will not;
* peak: the same low usage, but with many blocks to a carrier and the
  type's blocks once at least PEAK_RATIO times what they are now: the
  carriers were grown for a peak (a burst) and are returned as they
  empty. One read cannot tell how long that takes: watch shows whether
  allocated comes back down (if it stays, it is fragmentation);
* in use: otherwise. The memory is in live blocks: find who holds them
  (proc-count memory, bin-leak, ets).

Long-lived allocators are never called fragmented: ll_alloc sizes its
carriers up front (an idle OTP 27 node with +P 2000000, as brokers start
theirs, holds 67 MiB there at 54% use), literal_alloc and exec_alloc hold
loaded code; their low usage is a reserve, not a problem.
"""

from __future__ import annotations

from typing import Any, Sequence, TYPE_CHECKING

from beam_probe.erldist.terms import Atom
from beam_probe.errors import OutputFailed
from beam_probe.node.forms import Local
from beam_probe.node.replies import BadReply, Reply, shown
from beam_probe.node.remote import Remote
from beam_probe.probes import cluster

if TYPE_CHECKING:
    from beam_probe.probes.results import (AllocReport, AllocType, Carriers,
                                           ClusterAlloc, Verdict)

HELPER = "beam_probe_alloc"
# An allocator smaller than this is never called fragmented: a fresh node's
# allocators keep a few MB of carriers for reuse at 10-40% usage (measured
# on an idle OTP 25 node: temp_alloc 0%, sl_alloc 0.3%, std_alloc 24%).
FRAGMENTED_MIN = 64 * 1024 * 1024
FRAGMENTED_USAGE = 0.5
# Live blocks per multiblock carrier at or under which the blocks are "a
# few" keeping each carrier: measured, 3,000 64 KB binaries with one in 32
# kept leave 2-3 a carrier; a burst half freed leaves thousands.
FEW_BLOCKS = 8
PEAK_RATIO = 2.0
# Carriers sized up front, or holding code: low usage is their reserve.
LONG_LIVED = frozenset(("ll_alloc", "literal_alloc", "exec_alloc"))
# The emulator's own code, stacks and libraries make RSS ~20-30 MB above
# the allocators on an idle node (measured: 43 MB RSS, 20 MB in carriers).
OUTSIDE_MIN = 256 * 1024 * 1024
OUTSIDE_SHARE = 0.5
# What --raw may write: the full data is ~0.7 MB on 64 schedulers
# (compressed, less); far more is not an allocator report.
MAX_RAW = 64 * 1024 * 1024
_KEYS = ("blocks", "blocks_max", "block_bytes", "block_bytes_max",
         "carriers", "carriers_max", "carrier_bytes", "carrier_bytes_max")


def rss_bytes(line: Any, where: str = "rss") -> int | None:
    """rss/0's VmRSS value, "   39540 kB", in bytes (None when unknown:
    the node does not run Linux). A figure past 64 bits in bytes is no
    node's: a BadReply naming ``where``."""
    if isinstance(line, (bytes, bytearray)):
        line = bytes(line).decode("latin-1")
    if not isinstance(line, str):
        return None
    parts = line.split()
    if len(parts) == 2 and parts[0].isascii() and parts[0].isdigit() \
            and parts[1] == "kB":
        # 16 digits of kB are 10^19 bytes, within 64 bits; int() of a
        # crafted line of 5,000 digits would raise.
        if len(parts[0]) > 16:
            raise BadReply(f"{where} is {len(parts[0])} digits of kB, not "
                           "a resident size")
        return int(parts[0]) * 1024
    return None


def _carriers(numbers: list[int]) -> Carriers:
    row = dict(zip(_KEYS, numbers))
    # No "average at peak": the peaks of bytes and of blocks need not be
    # of one moment (their ratio once read 1.3 KiB beside a 2.2 KiB
    # average now).
    return {**row,  # type: ignore[typeddict-item]
            "average_block": row["block_bytes"] // row["blocks"]
            if row["blocks"] else 0}


def _numbers(figures: Reply, key: str) -> list[int]:
    # Each a count within 64 bits: the sums below stay within 66 bits
    # (a type's three kinds of carriers, over ~200 types), which JSON and
    # the text write as they are.
    return figures.counts(key, len(_KEYS))


def allocator_types(reply: list[Any]) -> list[AllocType]:
    """The helper's per-type figures, named; multiblock carriers in the
    type's pool (carriers moved between instances) count as multiblock."""
    out: list[AllocType] = []
    for entry in reply:
        figures = Reply("beam_probe_alloc:types", entry)
        mbcs = [a + b for a, b in zip(_numbers(figures, "mbcs"),
                                      _numbers(figures, "mbcs_pool"))]
        sbcs = _numbers(figures, "sbcs")
        used = mbcs[2] + sbcs[2]
        allocated = mbcs[6] + sbcs[6]
        used_max = mbcs[3] + sbcs[3]
        out.append({"type": _type_name(figures["type"]),
                    "instances": figures.count("instances"),
                    "used": used, "allocated": allocated,
                    "usage": round(used / allocated, 4) if allocated else 1.0,
                    # The sums of each instance's peak: upper bounds, never
                    # below the current figures.
                    "used_max": max(used, used_max),
                    "allocated_max": max(allocated, mbcs[7] + sbcs[7]),
                    "mbcs": _carriers(mbcs), "sbcs": _carriers(sbcs)})
    return out


def _type_name(term: Any) -> str:
    if not isinstance(term, Atom):
        raise BadReply(f"beam_probe_alloc:types's type is {shown(term)}, "
                       "not an allocator's name")
    return str(term)


def low_usage(types: list[AllocType]) -> list[AllocType]:
    """The types whose low usage may be a problem: large ones, under half
    full, not long-lived; the most space unused first."""
    return sorted((t for t in types
                   if t["type"] not in LONG_LIVED
                   and t["allocated"] >= FRAGMENTED_MIN
                   and t["usage"] < FRAGMENTED_USAGE),
                  key=lambda t: t["used"] - t["allocated"])


def verdict(types: list[AllocType], allocated: int,
            rss: int | None) -> Verdict:
    """Which of the four cases the figures show (the module says how), and
    the figures that show it."""
    outside = rss - allocated if rss is not None else 0
    if outside >= OUTSIDE_MIN and outside >= OUTSIDE_SHARE * allocated:
        return {"case": "outside", "allocator": None,
                "evidence": {"rss": rss or 0, "allocated": allocated,
                             "outside": outside}}
    low = low_usage(types)
    if low:
        worst = low[0]
        mbcs = worst["mbcs"]
        per_carrier = mbcs["blocks"] / mbcs["carriers"] \
            if mbcs["carriers"] else 0.0
        evidence = {"allocated": worst["allocated"], "used": worst["used"],
                    "usage": worst["usage"], "used_max": worst["used_max"],
                    "blocks": mbcs["blocks"] + worst["sbcs"]["blocks"],
                    "carriers": mbcs["carriers"] + worst["sbcs"]["carriers"],
                    "blocks_per_carrier": round(per_carrier, 1)}
        peak = per_carrier > FEW_BLOCKS and \
            worst["used_max"] >= PEAK_RATIO * worst["used"]
        return {"case": "peak" if peak else "fragmentation",
                "allocator": worst["type"], "evidence": evidence}
    used = sum(t["used"] for t in types)
    return {"case": "in_use", "allocator": None,
            "evidence": {"allocated": allocated, "used": used,
                         "usage": round(used / allocated, 4) if allocated
                         else 1.0}}


def alloc(remote: Remote, raw_path: str | None = None) -> AllocReport:
    """The allocator report of the attached node; with ``raw_path``, the
    full data too, written there as the node's compressed external term."""
    reply = remote.ask(HELPER, "alloc", raw_path is not None,
                       Local("types"), Local("rss"))
    report = read_alloc(remote.node, reply)
    if raw_path is not None:
        raw = reply["raw"]
        if not isinstance(raw, (bytes, bytearray)) or len(raw) > MAX_RAW:
            raise OutputFailed("the node sent no raw allocator data")
        _write(raw_path, bytes(raw))
        report["raw"] = raw_path
    return report


def read_alloc(node: str, reply: Reply) -> AllocReport:
    types = allocator_types(reply.list("types"))
    allocated = sum(t["allocated"] for t in types)
    used = sum(t["used"] for t in types)
    rss = rss_bytes(reply["rss"], f"{reply.helper}'s rss")
    hits, calls = reply.count("mseg_hits"), reply.count("mseg_calls")
    report: AllocReport = {
        "node": node,
        "used": used, "allocated": allocated,
        "usage": round(used / allocated, 4) if allocated else 1.0,
        "memory_total": reply.count("memory_total"), "rss": rss,
        "mseg_cache": {"hits": hits, "calls": calls,
                       "hit_rate": round(hits / calls, 4) if calls
                       else None},
        "verdict": verdict(types, allocated, rss),
        "types": sorted(types, key=lambda t: -t["allocated"]),
        "raw": None}
    return report


def _write(path: str, data: bytes) -> None:
    from beam_probe.files import error_text, write_whole

    try:
        write_whole(path, [data])
    except OSError as exc:
        raise OutputFailed(f"cannot write {path}: {error_text(exc)}") \
            from None


def alloc_cluster(remote: Remote, nodes: Sequence[str] | None = None,
                  include_hidden: bool = False) -> ClusterAlloc:
    """The allocator report of every node of the entry's cluster: each
    node's verdict is its own (probes/cluster.py)."""
    chosen, connected = cluster.members(remote, nodes, include_hidden)
    answers = cluster.fan(remote, chosen, HELPER, "alloc",
                          (False, Local("types"), Local("rss")), read_alloc,
                          remote.timeout, connected)
    result: ClusterAlloc = {"entry": remote.node, "nodes": list(answers)}
    return cluster.complete(result, answers)


__all__ = ["LONG_LIVED", "alloc", "alloc_cluster", "allocator_types",
           "low_usage", "read_alloc", "rss_bytes", "verdict"]
