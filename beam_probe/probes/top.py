"""top: a node's processes, refreshed; one pass on the node a refresh.

A refresh is one call, beam_probe_top:refresh/14. On the node a keeper,
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
from beam_probe.node.replies import Reply, count, shown
from beam_probe.probes import cluster
from beam_probe.probes.processes import (check_jobs, labels_read, rows,
                                         unnamed)

if TYPE_CHECKING:
    from beam_probe.probes.results import (TopFrame, TopHeader, TopRow,
                                           TopView)

HELPER = "beam_probe_top"
SORTS = ("memory", "reductions", "binary_memory", "message_queue_len")
MIN_INTERVAL = 0.5
# The rows of one refresh: a screen's worth (a 4K terminal in a small
# font shows ~200 lines); each is described on the node.
MAX_ROWS = 500
# A filter is a name or part of one; a single character would match the
# bytes that frame names in the external term format the node matches
# against (tags, lengths), so nearly every process.
MAX_FILTER = 64
MIN_FILTER = 2
# A keeper nobody asks (top paused, or stopped without closing the
# connection) ends after this long; the next refresh starts a new one.
KEEPER_IDLE = 60.0
# A pass may take this share of the interval; longer (a million
# processes: seconds), and the interval stretches to this many passes.
STRETCH = 4.0
LOCALS = (Local("keep", HELPER), Local("pass", HELPER), Local("pmap", LIB),
          Local("top", LIB), Local("describe", LIB), Local("others", LIB),
          Local("settled", LIB), Local("slice", HELPER))
# What leaves the connection unusable: it is closed, and the next
# refresh dials again. A call the node refused (a keeper that died, a
# process that exited) leaves it as it is.
_BROKEN = (ConnectionLost, TimedOut, ProtocolError)
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
    if 0 < len(filter_text) < MIN_FILTER:
        raise UsageError(f"a filter is at least {MIN_FILTER} characters "
                         f"(part of a name), not {filter_text!r}")
    try:
        filter_text.encode("utf-8")
    except UnicodeEncodeError:
        raise UsageError("a filter must be text (it holds bytes that are "
                         "not UTF-8)") from None
    if not interval >= MIN_INTERVAL:
        raise UsageError(f"--interval must be at least {MIN_INTERVAL:g} s, "
                         f"not {interval:g}")
    check_jobs(jobs)


def _rate(gap: Reply, key: str, seconds: float, scale: int = 1) -> float:
    # Within 64 bits, as every figure of a reply (node/replies.py): 2^2000
    # reductions ended in OverflowError, exit 1 (issue 37).
    value = gap.int(key)
    # A keeper is new on a node that restarted, so a gap never spans
    # two lives; a little under nothing is the node's totals catching
    # up with the keeper's own count (a running process adds its
    # reductions to them when it is scheduled out).
    return round(max(0, value) * scale / seconds, 1)


def _header(raw: Reply) -> TopHeader:
    """A node's figures; its rates are per second of the gap between the
    last pass and this one, counted on the node without the keeper's
    work (so a refresh the view missed does not stretch them)."""
    memory = raw.sizes("memory", raw.pairs("memory"))
    rates: dict[str, float | None] = {"reductions_per_s": None,
                                      "gcs_per_s": None,
                                      "reclaimed_per_s": None}
    if raw["gap"] != A_NONE:
        gap = raw.map("gap")
        seconds = gap.count("us") / 1e6
        if seconds > 0:
            rates = {"reductions_per_s": _rate(gap, "reductions", seconds),
                     "gcs_per_s": _rate(gap, "gcs", seconds),
                     "reclaimed_per_s": _rate(gap, "words", seconds,
                                              raw.count("wordsize", 1))}
    release = raw["otp_release"]
    if not isinstance(release, str):
        # A string arrives as one (STRING_EXT); str() of 2^20000 is a
        # ValueError (Python writes no integer of over 4,300 digits).
        raise BadReply(f"{raw.helper}'s otp_release is {shown(release)}, "
                       "not a string")
    return {
        "otp_release": release[:20],
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


def read_frame(node: str, reply: Reply, filter_text: str = "",
               now: float | None = None) -> TopFrame:
    """One node's frame from the helper's reply."""
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
    sort = reply["sort"]
    if not isinstance(sort, Atom) or sort not in SORTS:
        # Read as an atom first: str() of a crafted 2^20000 raised
        # ValueError, exit 1 (issue 37's last review).
        raise BadReply(f"{reply.helper} sorted by {shown(sort)}")
    sort = str(sort)
    window_us = reply["window_us"]
    window_s = None if window_us == A_NONE else \
        reply.count("window_us") / 1e6
    out: list[tuple[int, TopRow]] = []
    for i, row in enumerate(described):
        reductions = done[i]
        if reductions == A_NONE:
            reductions = None
        else:
            reductions = count(f"{reply.helper}'s rows' reductions",
                               reductions)
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
    frame: TopFrame = {
        "node": node, "time": round(time.time() if now is None else now, 3),
        "sort": sort, "filter": filter_text,
        "scanned": reply.count("scanned"), "matched": reply.count("matched"),
        "window_s": window_s,
        "pass_ms": round(reply.count("pass_us") / 1000, 3),
        "header": _header(reply.map("header")),
        "processes": [row for _, row in out],
        "labels_read": labels_read(raw_rows),
        "unnamed": unnamed(raw_rows)}
    return frame


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
        # Why each node down is down, for --once's exit code.
        self.errors: dict[str, ProbeError | None] = {}
        self._keepers: dict[str, Pid] = {}
        self._secret: Any = None
        self._asked = 0.0  # when a keeper was last asked
        self.idle = KEEPER_IDLE
        self._closed = False
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
        if self._closed:
            raise ConnectionLost("top was closed")
        if self.remote is None:
            remote = self.connect()
            if self._closed:  # closed while we dialled: never kept
                remote.close()
                raise ConnectionLost("top was closed")
            self.remote = remote
            # Keepers of an earlier connection ended with it.
            self._keepers.clear()
            self._secret = remote.conn.new_ref()
        return self.remote

    def close(self) -> None:
        """The end: the connection closed, and never dialled again. Not
        under the lock: a refresh waiting on the node must not hold up
        the close (it fails at once when the connection goes)."""
        self._closed = True
        self._drop()

    def _drop(self) -> None:
        """A broken connection let go: the next refresh dials again."""
        remote, self.remote = self.remote, None
        if remote is not None:
            remote.close()

    def check(self) -> None:
        check_request(self.sort, self.n, self.filter, self.interval,
                      self.jobs)

    def _request(self, filter_text: str) -> dict[Atom, Any]:
        """The request's map: the filter as the patterns binary:match/2
        takes (UTF-8, and latin1 too where the text has one: OTP 25
        writes latin1 atoms in latin1), [] for none; the idle time the
        keeper waits for the next refresh, longer than any wait between
        two of them (a stretched interval, a pass of seconds)."""
        patterns = []
        if filter_text:
            patterns.append(filter_text.encode("utf-8"))
            try:
                latin1 = filter_text.encode("latin-1")
            except UnicodeEncodeError:
                latin1 = patterns[0]
            if latin1 != patterns[0]:
                patterns.append(latin1)
        return {Atom("sort"): Atom(self.sort), Atom("n"): self.n,
                Atom("filter"): patterns,
                Atom("idle"): int(self.idle_time() * 1000)}

    def idle_time(self) -> float:
        passes = [f["pass_ms"] / 1000 for f in self.frames.values()]
        return max(self.idle, 3 * self.next_wait() + 2 * max(passes,
                                                            default=0.0))

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
                if self.cluster and not self.chosen and not self.focus:
                    self._join(remote)
                    asked = self.asked()
                answers = self._ask(remote, asked)
            except BadReply:
                self._drop()
                raise
            except ProbeError as exc:
                if isinstance(exc, _BROKEN):
                    self._drop()
                for node in asked:
                    self._failed(node, now, f"{exc.label}: {exc}", exc)
                return self.view()
            self._asked = self.clock()
            for node, answer in zip(asked, answers):
                if isinstance(answer, tuple):
                    frame, keeper = answer
                    self.frames[node] = frame
                    self._keepers[node] = keeper
                    self.down.pop(node, None)
                    self.errors.pop(node, None)
                else:
                    self._failed(node, now, answer["error"], None)
            return self.view()

    def _join(self, remote: Remote) -> None:
        """Members that joined the cluster since: asked from now on (those
        that left stay, down, as not connected)."""
        found, self.connected = cluster.members(remote, None,
                                                self.include_hidden)
        for node in found:
            if node not in self.members:
                self.members.append(node)

    def _failed(self, node: str, now: float, error: str,
                exc: ProbeError | None) -> None:
        # Its keeper is kept: if it is alive and ours, the next refresh
        # finds it (refresh/14 checks); dropped, a slow member's keeper
        # went on beside a new one.
        since = self.down.get(node, (now, ""))[0]
        self.down[node] = (since, error)
        self.errors[node] = exc

    def _ask(self, remote: Remote, asked: list[str]) -> list[Any]:
        keepers = list(self._keepers.values())
        idle = int(self.idle_time() * 1000)
        timeout = remote.timeout
        # The filter read once: a key typed while the pass runs (another
        # thread sets self.filter) applies at the next refresh, and this
        # frame says the filter it was made with (a CI run labelled a
        # frame of every process with a filter typed during its pass).
        filter_text = self.filter
        request = self._request(filter_text)

        def read(node: str, reply: Reply) -> Any:
            keeper = reply["keeper"]
            if not isinstance(keeper, Pid):
                raise BadReply(f"{reply.helper}'s keeper is not a pid")
            return read_frame(node, reply, filter_text, self.clock()), keeper

        if not self.cluster:
            keeper = self._keepers.get(self.node)
            if keeper is not None and \
                    self.clock() - self._asked < self.idle_time() / 2:
                try:
                    return [read(self.node, self._direct(remote, keeper,
                                                              request))]
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
                               remote.watch(), keepers,
                               self._secret, request, idle,
                               self.jobs, *LOCALS, timeout=timeout)
            return [read(self.node, reply)]
        return cluster.fan(remote, asked, HELPER, "refresh",
                           (Var("BeamProbeWatch"), keepers, self._secret,
                            request, idle, self.jobs, *LOCALS),
                           read, timeout, self.connected)

    def _direct(self, remote: Remote, keeper: Pid,
                request: dict[Atom, Any]) -> Reply:
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
                               request, []))
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
        """What the frames show: their sort and filter (a key pressed
        since changes them at the next refresh)."""
        asked = self.asked()
        frames = [self.frames[n] for n in asked if n in self.frames]
        return {"entry": self.node, "interval": self.interval,
                "stretched": self.stretched(),
                "sort": frames[0]["sort"] if frames else self.sort,
                "filter": frames[0]["filter"] if frames else self.filter,
                "focus": self.focus,
                "nodes": list(self.members),
                "frames": frames,
                "down": [{"node": n, "since": round(self.down[n][0], 3),
                          "error": self.down[n][1]}
                         for n in asked if n in self.down]}

    def using(self, work: Callable[[Remote], Any],
              wanted: Callable[[], bool] = lambda: True) -> Any:
        """``work(remote)`` on the connection, between refreshes (opening
        a process, the ETS tables): connecting again if it went. Not done
        (None) when no longer ``wanted`` once the connection is free."""
        with self._lock:
            if not wanted():
                return None
            remote = self._attach()
            try:
                return work(remote)
            except _BROKEN:
                self._drop()
                raise


__all__ = ["KEEPER_IDLE", "MAX_FILTER", "MIN_FILTER", "MAX_ROWS", "SORTS", "STRETCH",
           "TopFeed", "check_request", "merged", "read_frame"]
