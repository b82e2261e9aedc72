"""recon's leak hunt from outside: bin_leak, proc_count, and their rows.

The work over every process runs on the target in one erl_eval call of a
function in erl_helpers/beam_probe_scan.erl (stock compiled functions do
the per-process work); Python ranks the compact result, asks the node to
describe the few processes it will show, and joins.
"""

from __future__ import annotations

from typing import Any, Callable

from ..dist.terms import Atom, Pid, mfa
from ..errors import UsageError
from ..remote import Remote

HELPER = "beam_probe_scan"

ATTRIBUTES = ("memory", "reductions", "message_queue_len", "total_heap_size",
              "heap_size", "stack_size", "binary_memory")

# No cap unless asked: recon collects every process; we collect only binary
# holders, which is already far fewer. lists:sublist/2 takes any integer.
NO_GC_LIMIT = 1 << 40

Progress = Callable[[str], None]


def _quiet(_message: str) -> None:
    pass


def describe(remote: Remote, pids: list[Pid]) -> list[dict[str, Any]]:
    """Registered name, current function and initial call of each pid."""
    if not pids:
        return []
    infos = remote.run(HELPER, "describe", pids)
    rows = []
    for pid, info in zip(pids, infos):
        fields = dict(info) if isinstance(info, list) else {}
        name = fields.get("registered_name")
        rows.append({
            "pid": str(pid),
            "name": str(name) if isinstance(name, Atom) else None,
            "current_function": mfa(fields.get("current_function")),
            "initial_call": mfa(fields.get("initial_call")),
            "alive": isinstance(info, list),
        })
    return rows


def _described(remote: Remote, ranked: list[tuple[Pid, int]],
               key: str) -> list[dict[str, Any]]:
    """Rows for ranked (pid, number) pairs, number under ``key``."""
    rows = describe(remote, [pid for pid, _number in ranked])
    return [dict(pid=row["pid"], **{key: number}, name=row["name"],
                 current_function=row["current_function"],
                 initial_call=row["initial_call"])
            for (_pid, number), row in zip(ranked, rows)]


def _memory(pairs: list) -> dict[str, int]:
    return {str(key): value for key, value in pairs}


def bin_leak(remote: Remote, n: int, max_gc: int | None = None,
             progress: Progress = _quiet) -> dict[str, Any]:
    """recon:bin_leak(N): who frees most refc binary references on a GC.

    Cost to the node: one process_info(P, binary) over every process, then a
    garbage collection of each process that holds refc binaries (at most
    ``max_gc`` of them, largest holders first), then process_info again for
    those. Processes that hold no refc binaries are never collected.
    """
    if n < 1:
        raise UsageError("N must be at least 1")
    progress("scanning every process for refc binaries, then collecting "
             "the holders")
    scanned, holders, collected, before, after, rows = remote.run(
        HELPER, "bin_leak", NO_GC_LIMIT if max_gc is None else max_gc)
    deltas = [(pid, after_count - before_count)
              for pid, before_count, after_count in rows]
    # Most freed first, as recon orders it; a stable sort keeps node order
    # among equal deltas.
    deltas.sort(key=lambda item: item[1])
    progress(f"describing {min(n, len(deltas))} processes")
    processes = _described(remote, deltas[:n], "delta")
    return {"node": remote.node, "scanned": scanned, "holders": holders,
            "collected": collected, "memory_before": _memory(before),
            "memory_after": _memory(after), "processes": processes}


def proc_count(remote: Remote, attribute: str, n: int,
               progress: Progress = _quiet) -> dict[str, Any]:
    """recon:proc_count(Attribute, N): the N largest processes by Attribute.

    Cost to the node: one process_info(P, Item) over every process and a
    sort of the values; for binary_memory, a sum over the binary lists of
    the processes that hold any.
    """
    if attribute not in ATTRIBUTES:
        raise UsageError(f"unknown attribute {attribute!r}; valid: "
                         f"{', '.join(ATTRIBUTES)}")
    if n < 1:
        raise UsageError("N must be at least 1")
    progress(f"reading {attribute} of every process")
    scanned, pairs = remote.run(HELPER, "proc_count", Atom(attribute), n)
    ranked = sorted(pairs, key=lambda pair: -pair[1])[:n]
    progress(f"describing {len(ranked)} processes")
    processes = _described(remote, ranked, "value")
    return {"node": remote.node, "attribute": attribute, "scanned": scanned,
            "processes": processes}
