"""recon's leak hunt from outside: bin_leak, proc_count, and their rows.

The work over every process runs on the target in one erl_eval call of a
function in erl_helpers/beam_probe_scan.erl (stock compiled functions do
the per-process work); Python ranks the compact result, asks the node to
describe the few processes it will show, and joins.
"""

from __future__ import annotations

from typing import Any, Callable

from ..dist.terms import Atom, ExportFun, Pid, mfa
from ..errors import UsageError
from ..remote import Local, Remote

HELPER = "beam_probe_scan"

ATTRIBUTES = ("memory", "reductions", "message_queue_len", "total_heap_size",
              "heap_size", "stack_size", "binary_memory")

# No cap unless asked: recon collects every process; we collect only binary
# holders, which is already far fewer. lists:sublist/2 takes any integer.
NO_GC_LIMIT = 1 << 40

Progress = Callable[[str], None]

# What a row shows about a process; never the dictionary or the mailbox.
DESCRIBE_ITEMS = [Atom("registered_name"), Atom("current_function"),
                  Atom("initial_call")]


def _quiet(_message: str) -> None:
    pass


def describe(remote: Remote, pids: list[Pid]) -> list[dict[str, Any]]:
    """Registered name, current function and initial call of each pid."""
    if not pids:
        return []
    # A plain rpc of stock functions: no helper, no erl_eval.
    infos = remote.call("lists", "zipwith", [
        ExportFun(Atom("erlang"), Atom("process_info"), 2), pids,
        [DESCRIBE_ITEMS] * len(pids)])
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


def _ranked(pairs: list, n: int) -> list[tuple[Pid, int]]:
    """Merge per-slice top lists of (value, pid), slices in process order.

    Largest first; among equal values the later process first, the order
    recon's reverse(keysort(...)) gives and our reference reproduces.
    """
    order = sorted(range(len(pairs)), key=lambda i: (-pairs[i][0], -i))
    return [(pairs[i][1], pairs[i][0]) for i in order[:n]]


def bin_leak(remote: Remote, n: int, max_gc: int | None = None,
             progress: Progress = _quiet, jobs: int = 0,
             dry_run: bool = False) -> dict[str, Any]:
    """recon:bin_leak(N): who frees most refc binary references on a GC.

    Cost to the node: one process_info(P, binary) over every process (split
    over ``jobs`` schedulers, 0 for all online), then a garbage collection of
    each process that holds refc binaries (at most ``max_gc`` of them,
    largest holders first), then process_info again for those. Processes
    that hold no refc binaries are never collected. ``dry_run`` stops after
    the first pass and collects nothing.
    """
    if n < 1:
        raise UsageError("N must be at least 1")
    _check_jobs(jobs)
    progress("counting every process's refc binaries" if dry_run else
             "counting every process's refc binaries, then collecting "
             "the holders")
    scanned, holders, collected, before, after, deltas = remote.run(
        HELPER, "bin_leak", n, NO_GC_LIMIT if max_gc is None else max_gc,
        dry_run, jobs, Local("pmap"), Local("top"))
    progress(f"describing {len(deltas)} processes")
    processes = _described(remote, [(pid, delta) for delta, pid in deltas],
                           "delta")
    result = {"node": remote.node, "scanned": scanned, "holders": holders,
              "collected": 0 if dry_run else collected,
              "memory_before": _memory(before),
              "memory_after": _memory(after), "processes": processes}
    if dry_run:
        result["dry_run"] = True
        result["would_collect"] = collected
    return result


def _check_jobs(jobs: int) -> None:
    if jobs < 0:
        raise UsageError("--jobs must be 0 (one per scheduler) or more")


def proc_count(remote: Remote, attribute: str, n: int,
               progress: Progress = _quiet, jobs: int = 0) -> dict[str, Any]:
    """recon:proc_count(Attribute, N): the N largest processes by Attribute.

    Cost to the node: one process_info(P, Item) over every process, split
    over ``jobs`` schedulers (0: all online), and a sort of the values of
    each slice. No GC.
    """
    check_attribute(attribute)
    if n < 1:
        raise UsageError("N must be at least 1")
    _check_jobs(jobs)
    progress(f"reading {attribute} of every process")
    scanned, pairs = remote.run(HELPER, "proc_count", Atom(attribute), n,
                                jobs, Local("pmap"), Local("values"),
                                Local("top"))
    ranked = _ranked(pairs, n)
    progress(f"describing {len(ranked)} processes")
    processes = _described(remote, ranked, "value")
    return {"node": remote.node, "attribute": attribute, "scanned": scanned,
            "processes": processes}


def check_attribute(attribute: str) -> None:
    if attribute not in ATTRIBUTES:
        raise UsageError(f"unknown attribute {attribute!r}; valid: "
                         f"{', '.join(ATTRIBUTES)}")


# The window is spent on the node, inside the call: allow it on top of the
# call timeout. recon's proc_window has no upper bound; an hour is plenty
# and keeps a typo (ms for s) from tying up a node for days.
MAX_WINDOW_MS = 3_600_000


def proc_window(remote: Remote, attribute: str, n: int, millis: int,
                progress: Progress = _quiet, jobs: int = 0) -> dict[str, Any]:
    """recon:proc_window(Attribute, N, Millis): the largest increases.

    Two passes over every process, ``millis`` apart, each like proc_count's.
    Processes born or dead inside the window are listed apart (born: value
    at the end; dead: value at the start), never mixed into the deltas.
    """
    check_attribute(attribute)
    if n < 1:
        raise UsageError("N must be at least 1")
    if not 0 < millis <= MAX_WINDOW_MS:
        raise UsageError(f"MILLISECONDS must be between 1 and "
                         f"{MAX_WINDOW_MS}, not {millis}")
    _check_jobs(jobs)
    progress(f"reading {attribute} of every process, twice, "
             f"{millis} ms apart")
    (first, last, deltas, born_count, born, dead_count,
     dead) = remote.run(HELPER, "proc_window", Atom(attribute), n, millis,
                        jobs, Local("pmap"), Local("values"), Local("top"),
                        timeout=remote.timeout + millis / 1000)
    ranked, born_ranked = _ranked(deltas, n), _ranked(born, n)
    progress(f"describing {len(ranked) + len(born_ranked)} processes")
    rows = _described(remote, ranked + born_ranked, "delta")
    processes, born_rows = rows[:len(ranked)], rows[len(ranked):]
    for row in born_rows:
        row["value"] = row.pop("delta")
    return {"node": remote.node, "attribute": attribute, "window_ms": millis,
            "scanned_first": first, "scanned_last": last,
            "processes": processes, "born_count": born_count,
            "born": born_rows, "dead_count": dead_count,
            "dead": [{"pid": str(pid), "value": value}
                     for pid, value in _ranked(dead, n)]}
