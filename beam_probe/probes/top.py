"""top: a node's processes, refreshed; one pass on the node a refresh.

A refresh is one call, beam_probe_top:refresh/12. On the node a keeper,
a process of ours that lives between refreshes, makes the pass: every
process's reductions and the item the view sorts by, in one
process_info/2 call each (pmap's slices), ranked there; the reductions
done since the last pass are computed there too, from the last pass's,
which only the keeper holds. Only the N rows shown cross. The keeper
ends when our connection goes (a sentinel kills it, mid-pass too), or
after KEEPER_IDLE without a refresh (erl_helpers/beam_probe_top.erl).

A TopFeed keeps the connection, the keepers (one a node; --cluster asks
every member through the entry node, each with its own keeper), the last
frame of each node, and which nodes are down: a node that went away
keeps its last frame, marked, until it answers again on a new
connection.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, Sequence, TYPE_CHECKING

from beam_probe.erldist.connection import MESSAGE
from beam_probe.erldist.terms import Atom, Pid
from beam_probe.errors import (BadReply, ConnectionLost, ProbeError,
                               ProtocolError, TimedOut, UsageError)
from beam_probe.node.forms import LIB, Local, Var
from beam_probe.node.remote import Remote
from beam_probe.node.replies import Reply
from beam_probe.probes import cluster
from beam_probe.probes.processes import check_jobs, labels_read, rows

if TYPE_CHECKING:
    from beam_probe.probes.results import (TopFrame, TopHeader, TopRow,
                                           TopView)

HELPER = "beam_probe_top"
SORTS = ("memory", "reductions", "binary_memory", "message_queue_len")
MIN_INTERVAL = 0.5
# The rows of one refresh: a screen's worth (a 4K terminal in a small
# font shows ~200 lines); each is described on the node.
MAX_ROWS = 500
# A filter is a name or part of one.
MAX_FILTER = 64
# A keeper nobody asks (top paused, or stopped without closing the
# connection) ends after this long; the next refresh starts a new one.
KEEPER_IDLE = 60.0
# A pass may take this share of the interval; longer (a million
# processes: seconds), and the interval stretches to this many passes.
STRETCH = 4.0
LOCALS = (Local("keep", HELPER), Local("pass", HELPER), Local("pmap", LIB),
          Local("top", LIB), Local("describe", LIB), Local("others", LIB))
# What leaves the connection unusable: it is closed, and the next
# refresh dials again. A call the node refused (a keeper that died, a
# process that exited) leaves it as it is.
_BROKEN = (ConnectionLost, TimedOut, ProtocolError)
A_NODE = Atom("node")
A_REFRESH = Atom("refresh")
A_NONE = Atom("none")


def check_request(sort: str, n: int, filter_text: str = "",
                  interval: float = 2.0, jobs: int = 0) -> None:
    if sort not in SORTS:
        raise UsageError(f"--sort must be one of {', '.join(SORTS)}, not "
                         f"{sort!r}")
    if not 1 <= n <= MAX_ROWS:
        raise UsageError(f"-N must be 1 to {MAX_ROWS}, not {n}")
    if len(filter_text) > MAX_FILTER:
        raise UsageError(f"a filter is at most {MAX_FILTER} characters")
    if not interval >= MIN_INTERVAL:
        raise UsageError(f"--interval must be at least {MIN_INTERVAL:g} s, "
                         f"not {interval:g}")
    check_jobs(jobs)


def _header(raw: Reply, before: Reply | None, window_s: float | None,
            scanned: int = 0) -> TopHeader:
    memory = raw.sizes("memory", raw.pairs("memory"))
    rates: dict[str, float | None] = {"reductions_per_s": None,
                                      "gcs_per_s": None,
                                      "reclaimed_per_s": None}
    if before is not None and window_s:
        wordsize = raw.count("wordsize", 1)
        for key, counter, scale in (
                ("reductions_per_s", "reductions", 1),
                ("gcs_per_s", "gc_count", 1),
                ("reclaimed_per_s", "gc_words_reclaimed", wordsize)):
            change = raw.count(counter) - before.count(counter)
            if counter == "reductions":
                # Our own work is not the node's: the keeper's since its
                # last pass (its collection included), this pass's
                # workers', and the read each process answered (about a
                # reduction each). Left in, an idle node of 1,000
                # processes did 465 k/s, all but 163 of them ours.
                change = max(0, change - (
                    raw.count("keeper_reductions")
                    - before.count("keeper_reductions")
                    + raw.count("workers_reductions") + scanned))
            rates[key] = round(change * scale / window_s, 1) \
                if change >= 0 else None
    release = raw["otp_release"]
    if isinstance(release, list) and all(
            isinstance(c, int) and 0 < c < 128 for c in release):
        release = "".join(map(chr, release))
    return {
        "otp_release": str(release)[:20],
        "uptime_s": raw.count("uptime_ms") / 1000,
        "memory": memory,
        "process_count": raw.count("process_count"),
        "process_limit": raw.count("process_limit", 1),
        "port_count": raw.count("port_count"),
        "port_limit": raw.count("port_limit", 1),
        "atom_count": raw.count("atom_count"),
        "atom_limit": raw.count("atom_limit", 1),
        "ets_count": raw.count("ets_count"),
        "run_queue": raw.count("run_queue"),
        "schedulers_online": raw.count("schedulers_online", 1),
        "reductions_per_s": rates["reductions_per_s"],
        "gcs_per_s": rates["gcs_per_s"],
        "reclaimed_per_s": rates["reclaimed_per_s"]}


def read_frame(node: str, reply: Reply, before: Reply | None,
               filter_text: str = "", now: float | None = None
               ) -> tuple[TopFrame, Reply]:
    """One node's frame from the helper's reply, with the rates against
    the header of the keeper's last pass (``before``); and this header,
    for the next."""
    raw_rows = reply["rows"]
    columns = Reply(f"{reply.helper}'s rows", raw_rows)
    described = rows(raw_rows, "value")
    memory = columns.counts("memory")
    binary = columns.counts("binary_memory")
    queue = columns.counts("message_queue_len")
    done = columns["reductions"]
    if isinstance(done, str):  # small integers arrive as a string
        done = [ord(c) for c in done]
    if not isinstance(done, list):
        raise BadReply(f"{reply.helper}'s reductions are not a list")
    if not len(described) == len(memory) == len(binary) == len(queue) \
            == len(done):
        raise ProtocolError(f"{reply.helper}'s columns are of different "
                            "lengths")
    sort = str(reply["sort"])
    if sort not in SORTS:
        raise BadReply(f"{reply.helper} sorted by {sort[:40]!r}")
    window_us = reply["window_us"]
    window_s = None if window_us == A_NONE else \
        reply.count("window_us") / 1e6
    out: list[tuple[int, TopRow]] = []
    for i, row in enumerate(described):
        reductions = done[i]
        if reductions == A_NONE:
            reductions = None
        elif isinstance(reductions, bool) or not isinstance(reductions,
                                                            int) \
                or reductions < 0:
            raise BadReply(f"{reply.helper}'s reductions are not counts")
        top_row: TopRow = {
            "pid": row["pid"], "name": row["name"], "label": row["label"],
            "current_function": row["current_function"],
            "initial_call": row["initial_call"], "exited": row["exited"],
            "memory": memory[i], "binary_memory": binary[i],
            "reductions": reductions, "message_queue_len": queue[i]}
        # The sorted column as the pass ranked it (the others were read
        # again for these rows): the order on screen is the node's. By
        # reductions, the first pass ranks by their count since each
        # process began, which is not the column's.
        if sort != "reductions" or window_s is not None:
            top_row[sort] = max(0, row["value"])  # type: ignore[literal-required]
        out.append((row["value"], top_row))
    out.sort(key=lambda pair: -pair[0])
    header = Reply(f"{reply.helper}'s header", reply["header"])
    frame: TopFrame = {
        "node": node, "time": round(time.time() if now is None else now, 3),
        "sort": sort, "filter": filter_text,
        "scanned": reply.count("scanned"), "matched": reply.count("matched"),
        "window_s": window_s,
        "pass_ms": round(reply.count("pass_us") / 1000, 3),
        "header": _header(header, before, window_s, reply.count("matched")),
        "processes": [row for _, row in out],
        "labels_read": labels_read(raw_rows)}
    return frame, header


def merged(frames: Sequence[TopFrame], sort: str, n: int) -> list[TopRow]:
    """The rows of every node's frame as one ranking, each naming its
    node: the view of a cluster with all its nodes shown."""
    every: list[TopRow] = []
    for frame in frames:
        for row in frame["processes"]:
            every.append({**row, "node": frame["node"]})
    every.sort(key=lambda row: -(row[sort] or 0))  # type: ignore[literal-required]
    return every[:n]


class TopFeed:
    """The refreshes of one node, or of a cluster through its entry node.
    ``sort``, ``n``, ``filter`` and ``focus`` (one member of a cluster, or
    None for all) may change between refreshes; ``refresh`` and ``using``
    are safe from any thread (one call at a time on the connection)."""

    def __init__(self, connect: Callable[[], Remote], *, interval: float = 2.0,
                 sort: str = "memory", n: int = 40, filter_text: str = "",
                 jobs: int = 0, cluster_view: bool = False,
                 nodes: Sequence[str] | None = None,
                 include_hidden: bool = False,
                 clock: Callable[[], float] = time.time) -> None:
        check_request(sort, n, filter_text, interval, jobs)
        self.connect, self.interval = connect, interval
        self.sort, self.n, self.filter = sort, n, filter_text
        self.jobs, self.clock = jobs, clock
        self.cluster = cluster_view
        self.chosen, self.include_hidden = nodes, include_hidden
        self.focus: str | None = None
        self.remote: Remote | None = None
        self.node = ""
        self.members: list[str] = []
        self.connected: set[str] = set()
        self.frames: dict[str, TopFrame] = {}
        self.down: dict[str, tuple[float, str]] = {}
        self._keepers: dict[str, Pid] = {}
        self._headers: dict[str, Reply] = {}
        self._secret: Any = None
        self._asked = 0.0  # when a keeper was last asked
        self.idle = max(KEEPER_IDLE, 3 * interval)
        self._lock = threading.RLock()

    def open(self) -> None:
        """The first connection, and a cluster's members: errors here are
        the user's to see."""
        with self._lock:
            self._attach()
            assert self.remote is not None
            self.node = self.remote.node
            if self.cluster:
                self.members, self.connected = cluster.members(
                    self.remote, self.chosen, self.include_hidden)
            else:
                self.members = [self.node]

    def _attach(self) -> Remote:
        if self.remote is None:
            self.remote = self.connect()
            # Keepers of an earlier connection ended with it.
            self._keepers.clear()
            self._headers.clear()
            self._secret = self.remote.conn.new_ref()
        return self.remote

    def close(self) -> None:
        # Not under the lock: a refresh waiting on the node must not hold
        # up the close (it fails at once when the connection goes).
        remote, self.remote = self.remote, None
        if remote is not None:
            remote.close()

    def check(self) -> None:
        check_request(self.sort, self.n, self.filter, self.interval,
                      self.jobs)

    def _request(self) -> dict[Atom, Any]:
        return {Atom("sort"): Atom(self.sort), Atom("n"): self.n,
                Atom("filter"): self.filter.encode("utf-8")}

    def asked(self) -> list[str]:
        """The nodes a refresh asks: the focus alone, or every member."""
        return [self.focus] if self.focus else list(self.members)

    def refresh(self) -> TopView:
        """One refresh of the nodes asked: their frames, and those down."""
        with self._lock:
            self.check()
            asked = self.asked()
            now = self.clock()
            try:
                remote = self._attach()
                answers = self._ask(remote, asked)
            except BadReply:
                self.close()
                raise
            except ProbeError as exc:
                if isinstance(exc, _BROKEN):
                    self.close()
                self._keepers.clear()
                for node in asked:
                    self._failed(node, now, f"{exc.label}: {exc}")
                return self.view()
            self._asked = self.clock()
            for node, answer in zip(asked, answers):
                if isinstance(answer, tuple):
                    frame, header, keeper = answer
                    self.frames[node] = frame
                    self._headers[node] = header
                    self._keepers[node] = keeper
                    self.down.pop(node, None)
                else:
                    self._failed(node, now, answer["error"])
            return self.view()

    def _failed(self, node: str, now: float, error: str) -> None:
        self._keepers.pop(node, None)
        self._headers.pop(node, None)
        since = self.down.get(node, (now, ""))[0]
        self.down[node] = (since, error)

    def _ask(self, remote: Remote, asked: list[str]) -> list[Any]:
        keepers = list(self._keepers.values())
        idle = int(self.idle * 1000)
        timeout = remote.timeout

        def read(node: str, reply: Reply) -> Any:
            keeper = reply["keeper"]
            if not isinstance(keeper, Pid):
                raise BadReply(f"{reply.helper}'s keeper is not a pid")
            frame, header = read_frame(node, reply, self._headers.get(node),
                                       self.filter, self.clock())
            return frame, header, keeper

        if not self.cluster:
            keeper = self._keepers.get(self.node)
            if keeper is not None and \
                    self.clock() - self._asked < self.idle / 2:
                try:
                    return [read(self.node, self._direct(remote, keeper))]
                except TimedOut:
                    # No answer: a keeper that died, or far slower than
                    # its last pass, or a node that answers nothing (a
                    # SIGSTOP): a short call tells, and the node's
                    # silence is its TimedOut. Otherwise the call below
                    # finds the keeper, or starts another.
                    remote.call("erlang", "is_process_alive", [keeper],
                                timeout=min(remote.timeout, 2.0))
                    self._keepers.pop(self.node, None)
            reply = remote.ask(HELPER, "refresh",
                               (A_NODE, Atom(remote.conn.our_node)), keepers,
                               self._secret, self._request(), idle,
                               self.jobs, *LOCALS, timeout=timeout)
            return [read(self.node, reply)]
        return cluster.fan(remote, asked, HELPER, "refresh",
                           (Var("BeamProbeWatch"), keepers, self._secret,
                            self._request(), idle, self.jobs, *LOCALS),
                           read, timeout, self.connected)

    def _direct(self, remote: Remote, keeper: Pid) -> Reply:
        """A refresh asked of the keeper itself, by message: rex carries
        none of it (beam_probe_top:keep/4 says why). Waited on for a few
        of its last passes: it is known to be alive only by answering."""
        last = self.frames.get(self.node)
        wait = min(remote.timeout, max(3.0, 3 * (last["pass_ms"] / 1000
                                                  if last else 0) + 2))
        conn = remote.conn
        tag = conn.new_ref()
        box = conn.mailbox(tag, 1)
        try:
            conn.send(keeper, (self._secret, A_REFRESH, conn.pid, tag,
                               self._request(), []))
            kind, items = box.get(wait, "top's refresh")
        finally:
            conn.close_mailbox(box)
        if kind != MESSAGE or len(items) != 1:
            raise ProtocolError(f"{self.node} answered top's refresh with "
                                "something else than a frame")
        return Reply(f"{HELPER}:pass", items[0])

    def stretched(self) -> float | None:
        """The interval in force when a pass took over a quarter of the
        one asked for (STRETCH passes), else None."""
        passes = [self.frames[n]["pass_ms"] / 1000 for n in self.asked()
                  if n in self.frames and n not in self.down]
        longest = max(passes, default=0.0) * STRETCH
        return round(longest, 1) if longest > self.interval else None

    def next_wait(self) -> float:
        return self.stretched() or self.interval

    def view(self) -> TopView:
        asked = self.asked()
        return {"entry": self.node, "interval": self.interval,
                "stretched": self.stretched(), "sort": self.sort,
                "filter": self.filter, "focus": self.focus,
                "nodes": list(self.members),
                "frames": [self.frames[n] for n in asked
                           if n in self.frames],
                "down": [{"node": n, "since": round(self.down[n][0], 3),
                          "error": self.down[n][1]}
                         for n in asked if n in self.down]}

    def using(self, work: Callable[[Remote], Any]) -> Any:
        """``work(remote)`` on the connection, between refreshes (opening
        a process, the ETS tables): connecting again if it went."""
        with self._lock:
            remote = self._attach()
            try:
                return work(remote)
            except _BROKEN:
                self.close()
                raise


__all__ = ["KEEPER_IDLE", "MAX_FILTER", "MAX_ROWS", "SORTS", "STRETCH",
           "TopFeed", "check_request", "merged", "read_frame"]
