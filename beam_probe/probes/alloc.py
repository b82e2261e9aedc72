"""alloc: leak or fragmentation? recon_alloc's question, from outside.

One call (beam_probe_alloc:alloc/3) folds every allocator type on the node;
here the figures get their names, their ratios and a verdict:

* fragmentation: a large allocator type (at least FRAGMENTED_MIN bytes in
  carriers) whose blocks fill less than FRAGMENTED_USAGE of them: the
  memory is held by carriers that a few live blocks keep from being
  returned, not by anything that will be freed by finding a holder;
* outside: the node's resident memory is above everything its allocators
  hold by at least OUTSIDE_MIN and OUTSIDE_SHARE of it: memory taken by
  NIFs, drivers or the C libraries they call, which no Erlang tool sees;
* in use: otherwise. The memory is in live blocks: find who holds them
  (proc-count memory, bin-leak, ets).
"""

from __future__ import annotations

from typing import Any

from ..erldist.terms import Atom, integers
from ..errors import OutputFailed
from ..helpers import Local
from ..remote import Remote
from .results import AllocReport, AllocType, Carriers, Verdict

HELPER = "beam_probe_alloc"
# An allocator smaller than this is never called fragmented: a fresh node's
# allocators keep a few MB of carriers for reuse at 10-40% usage (measured
# on an idle OTP 25 node: temp_alloc 0%, sl_alloc 0.3%, std_alloc 24%).
FRAGMENTED_MIN = 64 * 1024 * 1024
FRAGMENTED_USAGE = 0.5
# The emulator's own code, stacks and libraries make RSS ~20-30 MB above
# the allocators on an idle node (measured: 43 MB RSS, 20 MB in carriers).
OUTSIDE_MIN = 256 * 1024 * 1024
OUTSIDE_SHARE = 0.5
# What --raw may write: the full data is ~0.7 MB on 64 schedulers
# (compressed, less); far more is not an allocator report.
MAX_RAW = 64 * 1024 * 1024
_KEYS = ("blocks", "blocks_max", "block_bytes", "block_bytes_max",
         "carriers", "carriers_max", "carrier_bytes", "carrier_bytes_max")


def rss_bytes(line: Any) -> int | None:
    """rss/0's VmRSS value, "   39540 kB", in bytes (None when unknown:
    the node does not run Linux)."""
    if isinstance(line, (bytes, bytearray)):
        line = bytes(line).decode("latin-1")
    if not isinstance(line, str):
        return None
    parts = line.split()
    if len(parts) == 2 and parts[0].isdigit() and parts[1] == "kB":
        return int(parts[0]) * 1024
    return None


def _carriers(numbers: list[int]) -> Carriers:
    row = dict(zip(_KEYS, numbers))
    return {**row,  # type: ignore[typeddict-item]
            "average_block": row["block_bytes"] // row["blocks"]
            if row["blocks"] else 0,
            "average_block_max": row["block_bytes_max"]
            // row["blocks_max"] if row["blocks_max"] else 0}


def _numbers(term: Any) -> list[int]:
    numbers = integers(term)
    if len(numbers) != len(_KEYS) or \
            not all(isinstance(n, int) for n in numbers):
        raise ValueError("allocator figures of another shape")
    return numbers


def allocator_types(reply: list[dict]) -> list[AllocType]:
    """The helper's per-type figures, named; multiblock carriers in the
    type's pool (carriers moved between instances) count as multiblock."""
    out: list[AllocType] = []
    for entry in reply:
        figures = {str(key): value for key, value in entry.items()}
        mbcs = [a + b for a, b in zip(_numbers(figures["mbcs"]),
                                      _numbers(figures["mbcs_pool"]))]
        sbcs = _numbers(figures["sbcs"])
        used = mbcs[2] + sbcs[2]
        allocated = mbcs[6] + sbcs[6]
        out.append({"type": str(figures["type"]),
                    "instances": figures["instances"],
                    "used": used, "allocated": allocated,
                    "usage": round(used / allocated, 4) if allocated else 1.0,
                    "mbcs": _carriers(mbcs), "sbcs": _carriers(sbcs)})
    return out


def verdict(types: list[AllocType], allocated: int,
            rss: int | None) -> Verdict:
    """Which of the three cases the figures show (the module says how)."""
    from ..render import human_bytes

    outside = rss - allocated if rss is not None else 0
    if outside >= OUTSIDE_MIN and outside >= OUTSIDE_SHARE * allocated:
        return {"case": "outside", "allocator": None,
                "text": f"RSS {human_bytes(rss or 0)} is "
                        f"{human_bytes(outside)} above the "
                        f"{human_bytes(allocated)} the allocators hold: "
                        "memory outside the emulator's allocators (NIFs, "
                        "drivers, the libraries they call)"}
    fragmented = sorted((t for t in types
                         if t["allocated"] >= FRAGMENTED_MIN
                         and t["usage"] < FRAGMENTED_USAGE),
                        key=lambda t: t["used"] - t["allocated"])
    if fragmented:
        worst = fragmented[0]
        return {"case": "fragmentation", "allocator": worst["type"],
                "text": f"fragmentation: {worst['type']}: "
                        f"{human_bytes(worst['allocated'])} allocated, "
                        f"{human_bytes(worst['used'])} used "
                        f"({worst['usage']:.0%}): carriers kept by a few "
                        "live blocks; finding a holder will not return "
                        "them"}
    used = sum(t["used"] for t in types)
    share = used / allocated if allocated else 1.0
    return {"case": "in_use", "allocator": None,
            "text": f"in use: {share:.0%} of the {human_bytes(allocated)} "
                    "the allocators hold is in live blocks; find the "
                    "holder (proc-count memory, bin-leak, ets)"}


def alloc(remote: Remote, raw_path: str | None = None) -> AllocReport:
    """The allocator report of the attached node; with ``raw_path``, the
    full data too, written there as the node's compressed external term."""
    reply = remote.run(HELPER, "alloc", raw_path is not None,
                       Local("types"), Local("rss"))
    reply = {str(key): value for key, value in reply.items()}
    types = allocator_types(reply["types"])
    allocated = sum(t["allocated"] for t in types)
    used = sum(t["used"] for t in types)
    rss = rss_bytes(reply["rss"])
    hits, calls = reply["mseg_hits"], reply["mseg_calls"]
    report: AllocReport = {
        "node": remote.node,
        "used": used, "allocated": allocated,
        "usage": round(used / allocated, 4) if allocated else 1.0,
        "memory_total": reply["memory_total"], "rss": rss,
        "mseg_cache": {"hits": hits, "calls": calls,
                       "hit_rate": round(hits / calls, 4) if calls
                       else None},
        "verdict": verdict(types, allocated, rss),
        "types": sorted(types, key=lambda t: -t["allocated"]),
        "raw": None}
    if raw_path is not None:
        raw = reply["raw"]
        if isinstance(raw, Atom) or len(raw) > MAX_RAW:
            raise OutputFailed("the node sent no raw allocator data")
        _write(raw_path, bytes(raw))
        report["raw"] = raw_path
    return report


def _write(path: str, data: bytes) -> None:
    from ..files import error_text, write_whole

    try:
        write_whole(path, [data])
    except OSError as exc:
        raise OutputFailed(f"cannot write {path}: {error_text(exc)}") \
            from None


__all__ = ["alloc", "allocator_types", "rss_bytes", "verdict"]
