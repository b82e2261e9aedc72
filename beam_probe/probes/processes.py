"""recon's leak hunt from outside: bin_leak, proc_count, proc_window.

The work over every process runs on the target in one erl_eval call of a
function in erl_helpers/beam_probe_scan.erl (stock compiled functions do
the per-process work); the node also picks the top N and describes those
few processes, so one round trip answers. Python orders and renders.
"""

from __future__ import annotations

from typing import Any, Callable, Generator, Literal, Sequence, TYPE_CHECKING, overload

from beam_probe.erldist.terms import Atom, integers, mfa
from beam_probe.errors import ProtocolError, UsageError
from beam_probe.node.forms import LIB, Local
from beam_probe.node.remote import Remote
from beam_probe.node.replies import Reply


if TYPE_CHECKING:
    from beam_probe.probes.results import (BinLeak, DeltaRow, ProcCount,
                                           ProcCountAllSummary, ProcWindow,
                                           ValueRow)

HELPER = "beam_probe_scan"

ATTRIBUTES = ("memory", "reductions", "message_queue_len", "total_heap_size",
              "heap_size", "stack_size", "binary_memory")

# No cap unless asked: recon collects every process; we collect only binary
# holders, which is already far fewer. lists:sublist/2 takes any integer.
NO_GC_LIMIT = 1 << 40

# The most rows a table of processes shows. A larger N is refused: a top
# 1,000,000 of a 500,000-process node once left the node's rex server
# holding 59 MB and the probe at 905 MB. proc-count --all streams every
# process instead, in chunks.
MAX_N = 10_000

# Rows per chunk of proc-count --all: ~0.5 MB on the wire.
ALL_CHUNK = 5_000

Progress = Callable[[str], None]

LOCALS = (Local("pmap", LIB), Local("values", LIB), Local("top", LIB),
          Local("describe", LIB), Local("others", LIB))


def _quiet(_message: str) -> None:
    pass


def check_n(n: int) -> None:
    if n < 1:
        raise UsageError(f"N must be at least 1, not {n}")
    if n > MAX_N:
        raise UsageError(f"N must be at most {MAX_N}, not {n} (proc-count "
                         "--all lists every process)")


def check_jobs(jobs: int) -> None:
    if jobs < 0:
        raise UsageError("--jobs must be 0 (two per scheduler) or more")


def check_attribute(attribute: str) -> None:
    if attribute not in ATTRIBUTES:
        raise UsageError(f"unknown attribute {attribute!r}; valid: "
                         f"{', '.join(ATTRIBUTES)}")


def check_request(attribute: str | None = None, n: int | None = None,
                  millis: int | None = None, jobs: int = 0) -> None:
    """A request to any probe here, checked whole (what it names): each
    probe calls this first, and the CLI calls it before connecting."""
    if attribute is not None:
        check_attribute(attribute)
    if n is not None:
        check_n(n)
    if millis is not None:
        check_window(millis)
    check_jobs(jobs)


@overload
def rows(raw: Any, key: Literal["value"], order: bool = ...
         ) -> list[ValueRow]: ...
@overload
def rows(raw: Any, key: Literal["delta"], order: bool = ...
         ) -> list[DeltaRow]: ...
def rows(raw: Any, key: str, order: bool = False) -> list[Any]:
    """Rows from a describe/1 reply, the number under ``key``. With
    ``order``, largest first; equal values list the later process first,
    the order recon's reverse(keysort(...)) gives."""
    reply = Reply("beam_probe_scan:describe", raw)
    values, pids, infos = integers(reply["values"]), reply.list("pids"), \
        reply.list("infos")
    if not len(values) == len(pids) == len(infos):
        raise ProtocolError("beam_probe_scan:describe's columns are of "
                            "different lengths")
    index: Sequence[int] = range(len(values))
    if order:
        index = sorted(index, key=lambda i: (-values[i], -i))
    out = []
    for i in index:
        info = infos[i]
        fields = dict(info) if isinstance(info, list) else {}
        name = fields.get("registered_name")
        out.append({
            "pid": str(pids[i]), key: values[i],
            "name": str(name) if isinstance(name, Atom) else None,
            "current_function": mfa(fields.get("current_function")),
            "initial_call": mfa(fields.get("initial_call")),
            # Exited between the scan and its description.
            "exited": not isinstance(info, list),
        })
    return out


def bin_leak(remote: Remote, n: int, max_gc: int | None = None,
             progress: Progress = _quiet, jobs: int = 0,
             dry_run: bool = False) -> BinLeak:
    """recon:bin_leak(N): who frees most refc binary references on a GC.

    Cost to the node: one process_info(P, binary) over every process (split
    over ``jobs`` schedulers, 0 for two per online one), then a garbage
    collection of each process that holds refc binaries (at most ``max_gc``
    of them, largest holders first), then process_info again for those.
    Processes that hold no refc binaries are never collected. ``dry_run``
    stops after the first pass and collects nothing.
    """
    check_request(n=n, jobs=jobs)
    progress("counting every process's refc binaries" if dry_run else
             "counting every process's refc binaries, then collecting "
             "the holders")
    reply = remote.ask(HELPER, "bin_leak", n,
                       NO_GC_LIMIT if max_gc is None else max_gc, dry_run,
                       jobs, Local("pmap", LIB), Local("top", LIB),
                       Local("describe", LIB), Local("others", LIB),
                       Local("settled", LIB))
    result: BinLeak = {
        "node": remote.node, "scanned": reply.int("scanned"),
        "holders": reply.int("holders"), "collected": reply.int("collected"),
        "memory_before": reply.pairs("memory_before"),
        "memory_after": reply.pairs("memory_after"),
        "processes": rows(reply["rows"], "delta")}
    if dry_run:
        result["dry_run"] = True
        result["would_collect"] = reply.int("would_collect")
    return result


def proc_count(remote: Remote, attribute: str, n: int,
               progress: Progress = _quiet, jobs: int = 0) -> ProcCount:
    """recon:proc_count(Attribute, N): the N largest processes by Attribute.

    Cost to the node: one process_info(P, Item) over every process, split
    over ``jobs`` schedulers (0: two per online one), and a sort of the
    values of each slice. No GC.
    """
    check_request(attribute, n, jobs=jobs)
    progress(f"reading {attribute} of every process")
    reply = remote.ask(HELPER, "proc_count", Atom(attribute), n, jobs,
                       *LOCALS)
    return {"node": remote.node, "attribute": attribute,
            "scanned": reply.int("scanned"),
            "processes": rows(reply["rows"], "value", order=True)}


def proc_count_all(remote: Remote, attribute: str,
                   progress: Progress = _quiet, jobs: int = 0
                   ) -> Generator[list[ValueRow], None,
                                  ProcCountAllSummary]:
    """Every process by Attribute, largest first, in chunks of rows: the
    node sends the next chunk only when the last is taken, so a dump of a
    million processes never sits whole in the node's rex server or here.
    The generator's return value is {"scanned": N, "sent": M}."""
    check_request(attribute, jobs=jobs)
    progress(f"reading {attribute} of every process")
    stream = remote.stream(HELPER, "proc_count_all", Atom(attribute),
                           ALL_CHUNK, int(remote.timeout * 1000), jobs,
                           Local("pmap", LIB), Local("values", LIB),
                           Local("describe", LIB), Local("others", LIB))
    while True:
        try:
            chunk = next(stream)
        except StopIteration as end:
            done = Reply(f"{HELPER}:proc_count_all", end.value)
            return {"scanned": done.int("scanned"), "sent": done.int("sent")}
        yield rows(chunk, "value")


# The window is spent on the node, inside the call: allow it on top of the
# call timeout. recon's proc_window has no upper bound; an hour is plenty
# and keeps a typo (ms for s) from tying up a node for days.
MAX_WINDOW_MS = 3_600_000


def check_window(millis: int) -> None:
    if millis < 1:
        raise UsageError(f"MILLISECONDS must be at least 1, not {millis}")
    if millis > MAX_WINDOW_MS:
        raise UsageError(f"MILLISECONDS must be at most {MAX_WINDOW_MS}, "
                         f"not {millis}")


def proc_window(remote: Remote, attribute: str, n: int, millis: int,
                progress: Progress = _quiet, jobs: int = 0) -> ProcWindow:
    """recon:proc_window(Attribute, N, Millis): the largest increases.

    Two passes over every process, ``millis`` apart, each like proc_count's.
    Processes born or dead inside the window are listed apart (born: value
    at the end; dead: value at the start), never mixed into the deltas.
    """
    check_request(attribute, n, millis, jobs)
    progress(f"reading {attribute} of every process, twice, "
             f"{millis} ms apart")
    reply = remote.ask(HELPER, "proc_window", Atom(attribute), n, millis,
                       jobs, *LOCALS, Local("snapshots", LIB),
                       timeout=remote.timeout + millis / 1000)
    dead = reply.map("dead")
    values, pids = integers(dead["values"]), dead.list("pids")
    if len(values) != len(pids):
        raise ProtocolError(f"{HELPER}:proc_window's dead columns are of "
                            "different lengths")
    order = sorted(range(len(values)), key=lambda i: (-values[i], -i))
    return {"node": remote.node, "attribute": attribute, "window_ms": millis,
            "scanned_first": reply.int("scanned_first"),
            "scanned_last": reply.int("scanned_last"),
            "processes": rows(reply["rows"], "delta", order=True),
            "born_count": reply.int("born_count"),
            "born": rows(reply["born"], "value", order=True),
            "dead_count": reply.int("dead_count"),
            "dead": [{"pid": str(pids[i]), "value": values[i]}
                     for i in order]}
