"""recon's leak hunt from outside: bin_leak, proc_count, proc_window.

The work over every process runs on the target in one erl_eval call of a
function in erl_helpers/beam_probe_scan.erl (stock compiled functions do
the per-process work); the node also picks the top N and describes those
few processes, so one round trip answers. Python orders and renders.
"""

from __future__ import annotations

from typing import Any, Callable, Generator, Literal, Sequence, TYPE_CHECKING, overload

from beam_probe.erldist.terms import Atom, Pid, format_term, mfa
from beam_probe.errors import BadReply, ProtocolError, UsageError
from beam_probe.node.forms import LIB, Local
from beam_probe.node.remote import Remote
from beam_probe.node.replies import Reply, count
from beam_probe.probes import cluster


if TYPE_CHECKING:
    from beam_probe.probes.results import (BinLeak, ClusterBinLeak,
                                           ClusterProcCount,
                                           ClusterProcWindow, DeltaRow,
                                           ProcCount, ProcCountAllSummary,
                                           ProcWindow, Unnamed, ValueRow)

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
# proc_count's and proc_count_all's: describe's rows by binary_memory carry
# each process's distinct bytes (distinct/1).
COUNT_LOCALS = (Local("pmap", LIB), Local("values", LIB), Local("top", LIB),
                Local("describe", LIB), Local("distinct", LIB),
                Local("others", LIB))

# A label is any term a process put in its dictionary: shown up to this
# many characters (a row is one line).
MAX_LABEL = 120

# The dictionary keys describe/1 reads (every release), as decoded.
_LABEL_KEYS = ((Atom("dictionary"), Atom("$process_label")),
               (Atom("dictionary"), Atom("process_name")))
_INITIAL_CALL_KEY = (Atom("dictionary"), Atom("$initial_call"))


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


def _item_key(key: Any) -> bool:
    """Whether ``key`` is what process_info names an item by: an atom, or
    a tuple of atoms ({dictionary, '$initial_call'})."""
    return isinstance(key, Atom) or isinstance(key, tuple) and all(
        isinstance(part, Atom) for part in key)


def label(fields: dict[Any, Any]) -> str | None:
    """What a process says it is, from the dictionary keys describe/1
    read: its label (proc_lib:set_label/1), else its process_name
    (RabbitMQ's {rabbit_amqqueue_process, <<"lq.104">>}), as Erlang
    writes the term; None when it has neither (or its dictionary was not
    read: before OTP 26.2, a heap past the cap or the budget spent)."""
    for key in _LABEL_KEYS:
        value = fields.get(key)
        if value is not None and value != Atom("undefined"):
            text = format_term(value)
            return text if len(text) <= MAX_LABEL else \
                text[:MAX_LABEL - 3] + "..."
    return None


def kind(fields: dict[Any, Any]) -> str | None:
    """What sort of process its process_name says it is: the name's first
    element where it is an atom ({rabbit_amqqueue_process, Resource}:
    rabbit_amqqueue_process), the name where it is an atom; else None.
    Never the rest, which names one instance (a queue, a connection):
    serve labels a series with it, and a label of unbounded cardinality
    would make a series per queue."""
    value = fields.get(_LABEL_KEYS[1])
    if isinstance(value, tuple) and value and isinstance(value[0], Atom):
        value = value[0]
    if isinstance(value, Atom) and value != Atom("undefined"):
        text = str(value)
        return text if len(text) <= MAX_LABEL else None
    return None


def labels_read(raw: Any) -> bool:
    """Whether describe/1 read the keys that name a process: one at a
    time (OTP 26.2+), or from a copy of each row's dictionary (before);
    a reply without either (an older helper) could not."""
    return isinstance(raw, dict) and (raw.get("labels") is True or
                                      raw.get("names") == Atom("copies"))


def unnamed(*raws: Any) -> Unnamed | None:
    """The rows of describe/1's replies left without their names (before
    OTP 26.2: a heap past the per-copy cap, or the command's budget
    spent), or None when every row is named."""
    found: dict[str, int] = {}
    limits = (0, 0)
    for raw in raws:
        if not isinstance(raw, dict) or "unread" not in raw:
            continue
        unread = Reply("beam_probe_lib:describe's unread", raw["unread"])
        limits = (unread.count("per_copy"), unread.count("budget"))
        for pair in unread.list("rows"):
            if not (isinstance(pair, tuple) and len(pair) == 2
                    and isinstance(pair[0], Pid)):
                raise BadReply("beam_probe_lib:describe's unread rows are "
                               "not all {Pid, Heap}")
            found[str(pair[0])] = count("beam_probe_lib:describe's unread "
                                        "heap", pair[1])
    if not found:
        return None
    return {"rows": len(found), "pids": sorted(found),
            "largest_heap": max(found.values()),
            "per_copy": limits[0], "budget": limits[1]}


@overload
def rows(raw: Any, key: Literal["value"], order: bool = ...
         ) -> list[ValueRow]: ...
@overload
def rows(raw: Any, key: Literal["delta"], order: bool = ...
         ) -> list[DeltaRow]: ...
def rows(raw: Any, key: str, order: bool = False) -> list[Any]:
    """Rows from a describe/1 reply, the number under ``key``. With
    ``order``, largest first; equal values list the later process first,
    the order recon's reverse(keysort(...)) gives. A reply that carries
    ``distinct`` (proc-count by binary_memory) gives each row its
    ``binary_distinct``: its refc binaries' bytes, each binary once."""
    reply = Reply("beam_probe_scan:describe", raw)
    # bin-leak's changes are negative: any 64-bit integer.
    values, pids, infos = reply.counts("values", signed=True), \
        reply.list("pids"), reply.list("infos")
    distinct = reply.counts("distinct") if "distinct" in reply else None
    if not len(values) == len(pids) == len(infos) or (
            distinct is not None and len(distinct) != len(values)):
        raise ProtocolError("beam_probe_scan:describe's columns are of "
                            "different lengths")
    if not all(isinstance(pid, Pid) for pid in pids):
        raise BadReply("beam_probe_scan:describe's pids are not all pids")
    # Keyed by process_info's items, atoms or {dictionary, Key}: a list or
    # a map where a key goes cannot be a dict's key (dict() raised
    # TypeError, exit 1, in every command's rows).
    if not all(isinstance(info, Atom) or isinstance(info, list) and all(
            isinstance(item, tuple) and len(item) == 2
            and _item_key(item[0]) for item in info)
            for info in infos):
        raise BadReply("beam_probe_scan:describe's infos are not all "
                       "lists of pairs")
    index: Sequence[int] = range(len(values))
    if order:
        index = sorted(index, key=lambda i: (-values[i], -i))
    out = []
    for i in index:
        info = infos[i]
        fields = dict(info) if isinstance(info, list) else {}
        name = fields.get("registered_name")
        # proc_lib's '$initial_call' where the node read it: what
        # proc_lib:translate_initial_call/1 and observer show, where
        # initial_call says proc_lib:init_p/5 for every proc_lib process.
        initial = mfa(fields.get(_INITIAL_CALL_KEY)) or \
            mfa(fields.get("initial_call"))
        row = {
            "pid": str(pids[i]), key: values[i],
            "name": str(name) if isinstance(name, Atom) else None,
            "label": label(fields),
            "kind": kind(fields),
            "current_function": mfa(fields.get("current_function")),
            "initial_call": initial,
            # Exited between the scan and its description.
            "exited": not isinstance(info, list),
        }
        if distinct is not None:
            row["binary_distinct"] = distinct[i]
        out.append(row)
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
    return read_bin_leak(remote.node, remote.ask(
        HELPER, "bin_leak", *_bin_leak_args(n, max_gc, dry_run, jobs)),
        dry_run)


def _bin_leak_args(n: int, max_gc: int | None, dry_run: bool,
                   jobs: int) -> tuple[Any, ...]:
    return (n, NO_GC_LIMIT if max_gc is None else max_gc, dry_run, jobs,
            Local("pmap", LIB), Local("top", LIB), Local("describe", LIB),
            Local("distinct", LIB), Local("others", LIB),
            Local("settled", LIB))


def read_bin_leak(node: str, reply: Reply, dry_run: bool = False
                  ) -> BinLeak:
    result: BinLeak = {
        "node": node, "scanned": reply.count("scanned"),
        "holders": reply.count("holders"),
        "collected": reply.count("collected"),
        "memory_before": _memory(reply, "memory_before"),
        "memory_after": _memory(reply, "memory_after"),
        "processes": rows(reply["rows"], "delta"),
        "labels_read": labels_read(reply["rows"]),
        "unnamed": unnamed(reply["rows"])}
    if dry_run:
        result["dry_run"] = True
        result["would_collect"] = reply.count("would_collect")
    return result


def _memory(reply: Reply, key: str) -> dict[str, int]:
    """erlang:memory()'s figures, each a count."""
    return reply.sizes(key, reply.pairs(key))


def proc_count(remote: Remote, attribute: str, n: int,
               progress: Progress = _quiet, jobs: int = 0) -> ProcCount:
    """recon:proc_count(Attribute, N): the N largest processes by Attribute.

    Cost to the node: one process_info(P, Item) over every process, split
    over ``jobs`` schedulers (0: two per online one), and a sort of the
    values of each slice. No GC.
    """
    check_request(attribute, n, jobs=jobs)
    progress(f"reading {attribute} of every process")
    return read_proc_count(remote.node, attribute, remote.ask(
        HELPER, "proc_count", Atom(attribute), n, jobs, *COUNT_LOCALS))


def read_proc_count(node: str, attribute: str, reply: Reply) -> ProcCount:
    return {"node": node, "attribute": attribute,
            "scanned": reply.count("scanned"),
            "processes": rows(reply["rows"], "value", order=True),
            "labels_read": labels_read(reply["rows"]),
            "unnamed": unnamed(reply["rows"])}


def proc_count_all(remote: Remote, attribute: str,
                   progress: Progress = _quiet, jobs: int = 0
                   ) -> Generator[list[ValueRow], None,
                                  ProcCountAllSummary]:
    """Every process by Attribute, largest first, in chunks of rows: the
    node sends the next chunk only when the last is taken, so a dump of a
    million processes never sits whole in the node's rex server or here.
    The generator's return value is {"scanned": N, "sent": M,
    "unnamed": ...}: the rows of every chunk left unnamed, said once at
    the end as proc-count says its own (the chunks share one budget)."""
    check_request(attribute, jobs=jobs)
    progress(f"reading {attribute} of every process")
    stream = remote.stream(HELPER, "proc_count_all", Atom(attribute),
                           ALL_CHUNK, int(remote.timeout * 1000), jobs,
                           Local("pmap", LIB), Local("values", LIB),
                           Local("describe", LIB), Local("distinct", LIB),
                           Local("others", LIB))
    # Only each chunk's unread rows are kept, never the chunk.
    unread: list[Any] = []
    while True:
        try:
            chunk = next(stream)
        except StopIteration as end:
            done = Reply(f"{HELPER}:proc_count_all", end.value)
            return {"scanned": done.count("scanned"),
                    "sent": done.count("sent"),
                    "unnamed": unnamed(*unread)}
        found = rows(chunk, "value")
        if isinstance(chunk, dict) and "unread" in chunk:
            unread.append({"unread": chunk["unread"]})
        yield found


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
    return read_proc_window(remote.node, attribute, millis, remote.ask(
        HELPER, "proc_window", *_window_args(attribute, n, millis, jobs),
        timeout=remote.timeout + millis / 1000))


def _window_args(attribute: str, n: int, millis: int,
                 jobs: int) -> tuple[Any, ...]:
    return (Atom(attribute), n, millis, jobs, *LOCALS,
            Local("partitioned", LIB))


def read_proc_window(node: str, attribute: str, millis: int,
                     reply: Reply) -> ProcWindow:
    dead = reply.map("dead")
    values, pids = dead.counts("values"), dead.list("pids")
    if len(values) != len(pids):
        raise ProtocolError(f"{HELPER}:proc_window's dead columns are of "
                            "different lengths")
    order = sorted(range(len(values)), key=lambda i: (-values[i], -i))
    return {"node": node, "attribute": attribute, "window_ms": millis,
            "scanned_first": reply.count("scanned_first"),
            "scanned_last": reply.count("scanned_last"),
            "processes": rows(reply["rows"], "delta", order=True),
            "labels_read": labels_read(reply["rows"]),
            "unnamed": unnamed(reply["rows"], reply["born"]),
            "born_count": reply.count("born_count"),
            "born": rows(reply["born"], "value", order=True),
            "dead_count": reply.count("dead_count"),
            "dead": [{"pid": str(pids[i]), "value": values[i]}
                     for i in order]}


# -- the same questions of every node of a cluster, through one --------------
# (probes/cluster.py: each node's reply read by the reader above, failures
# as rows, the rows merged; exit 15 after the answer when a node failed.)

def proc_count_cluster(remote: Remote, attribute: str, n: int,
                       nodes: Sequence[str] | None = None,
                       include_hidden: bool = False,
                       progress: Progress = _quiet,
                       jobs: int = 0) -> ClusterProcCount:
    """proc_count on every node of the entry's cluster at once: the N
    largest processes of them all, each with its node."""
    check_request(attribute, n, jobs=jobs)
    chosen, connected = cluster.members(remote, nodes, include_hidden)
    cluster.check_rows(n, len(chosen))
    progress(f"reading {attribute} of every process on {len(chosen)} nodes")
    answers = cluster.fan(
        remote, chosen, HELPER, "proc_count",
        (Atom(attribute), n, jobs, *COUNT_LOCALS),
        lambda node, reply: read_proc_count(node, attribute, reply),
        remote.timeout, connected)
    result: ClusterProcCount = {
        "entry": remote.node, "attribute": attribute,
        "nodes": cluster.per_node(answers, lambda a: {
            "node": a["node"], "scanned": a["scanned"],
            "labels_read": a["labels_read"], "unnamed": a["unnamed"]}),
        "processes": cluster.top(cluster.merged(
            answers, lambda a: a["processes"]), "value", n)}
    return cluster.complete(result, answers)


def bin_leak_cluster(remote: Remote, n: int, max_gc: int | None = None,
                     nodes: Sequence[str] | None = None,
                     include_hidden: bool = False,
                     progress: Progress = _quiet,
                     jobs: int = 0) -> ClusterBinLeak:
    """bin_leak on every node at once: the N processes of them all that
    dropped most refc binary references when collected."""
    check_request(n=n, jobs=jobs)
    chosen, connected = cluster.members(remote, nodes, include_hidden)
    cluster.check_rows(n, len(chosen))
    progress(f"counting every process's refc binaries on {len(chosen)} "
             "nodes, then collecting the holders")
    answers = cluster.fan(
        remote, chosen, HELPER, "bin_leak",
        _bin_leak_args(n, max_gc, False, jobs), read_bin_leak,
        remote.timeout, connected)
    result: ClusterBinLeak = {
        "entry": remote.node,
        "nodes": cluster.per_node(answers, lambda a: {
            "node": a["node"], "scanned": a["scanned"],
            "holders": a["holders"], "collected": a["collected"],
            "memory_before": a["memory_before"],
            "memory_after": a["memory_after"]}),
        "processes": cluster.top(cluster.merged(
            answers, lambda a: a["processes"]), "delta", n,
            descending=False)}
    return cluster.complete(result, answers)


def proc_window_cluster(remote: Remote, attribute: str, n: int, millis: int,
                        nodes: Sequence[str] | None = None,
                        include_hidden: bool = False,
                        progress: Progress = _quiet,
                        jobs: int = 0) -> ClusterProcWindow:
    """proc_window on every node at once, over the same window: the N
    largest increases of them all."""
    check_request(attribute, n, millis, jobs)
    chosen, connected = cluster.members(remote, nodes, include_hidden)
    cluster.check_rows(n, len(chosen))
    progress(f"reading {attribute} of every process on {len(chosen)} "
             f"nodes, twice, {millis} ms apart")
    answers = cluster.fan(
        remote, chosen, HELPER, "proc_window",
        _window_args(attribute, n, millis, jobs),
        lambda node, reply: read_proc_window(node, attribute, millis, reply),
        remote.timeout + millis / 1000, connected)
    result: ClusterProcWindow = {
        "entry": remote.node, "attribute": attribute, "window_ms": millis,
        "nodes": cluster.per_node(answers, lambda a: {
            "node": a["node"], "scanned_first": a["scanned_first"],
            "scanned_last": a["scanned_last"],
            "born_count": a["born_count"], "dead_count": a["dead_count"]}),
        "processes": cluster.top(cluster.merged(
            answers, lambda a: a["processes"]), "delta", n),
        "born": cluster.top(cluster.merged(
            answers, lambda a: a["born"]), "value", n),
        "dead": cluster.top(cluster.merged(
            answers, lambda a: a["dead"]), "value", n)}
    return cluster.complete(result, answers)
