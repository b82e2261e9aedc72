"""watch: is it really a leak? Sample the node's memory every few seconds,
after forced collections or through the floor, and apply memwatch's rule.

Each sample is one round trip (beam_probe_watch:sample/8 on the node):
counters only unless a collection is asked for, so its cost does not grow
with the node's processes. The samples come from a generator that keeps
the interval (slots at start + k * interval, a late sample skips slots
rather than drifting), survives the node going away (a ``down`` sample per
slot, then a new connection when it is back), and holds constant memory
however long it runs.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Iterable, Iterator, Sequence, TYPE_CHECKING

from beam_probe.errors import (EXIT_LEAK, EXIT_NOT_JUDGED, BadReply,
                               ProbeError, ProtocolError, UsageError)
from beam_probe.node.forms import LIB, Local
from beam_probe.node.remote import Remote
from beam_probe.node.replies import Reply
from beam_probe.probes.trend import (DEFAULT_FLOOR, DEFAULT_RISES, LEAK_CATEGORIES, Floor,
                     LeakRule, Point, Rise, Series, Stats, Trend, TrendRule)
from beam_probe.probes import cluster
from beam_probe.probes.alloc import rss_bytes

if TYPE_CHECKING:
    from beam_probe.probes.results import RiseJson, Sample

HELPER = "beam_probe_watch"
GC_MODES = ("none", "holders", "all")
MIN_INTERVAL = 0.2
NO_GC_LIMIT = 1 << 27
# What the chart draws, and the summary reports.
CHARTED = ("total", "processes", "binary", "ets")
SUMMARISED = CHARTED + ("atom_count", "process_count", "port_count")
# The memory categories of a sample, after erlang:memory()'s names.
MEMORY_KEYS = ("total", "processes", "binary", "ets", "atom", "code",
               "system")


SAMPLE_LOCALS = (Local("pmap", LIB), Local("others", LIB), Local("top", LIB),
                 Local("settled", LIB), Local("rss", "beam_probe_alloc"))


def sample_node(remote: Remote, gc: str = "none",
                max_gc: int | None = None, jobs: int = 0) -> Reply:
    """One raw sample of the attached node (the helper's map, by key)."""
    from beam_probe.erldist.terms import Atom

    return remote.ask(HELPER, "sample", Atom(gc),
                      NO_GC_LIMIT if max_gc is None else max_gc, jobs,
                      *SAMPLE_LOCALS)


def record(node: str, raw: Reply, epoch: float, gc: str,
           previous: tuple[float, Reply] | None) -> Sample:
    """The JSON line of a raw sample; rates against the previous one of
    the same node run (None for the first, or after a restart)."""
    memory = raw.sizes("memory", MEMORY_KEYS)
    total = memory["total"]
    used, allocated = raw.count("alloc_used"), raw.count("alloc_allocated")
    atom_count = raw.count("atom_count")
    # A limit of 0 is no node's (each is at least the count it bounds).
    atom_limit = raw.count("atom_limit", 1)
    out: Sample = {
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch)),
        "epoch": round(epoch, 3), "node": node}
    for key in MEMORY_KEYS:
        out[key] = memory[key]  # type: ignore[literal-required]
    out.update({
        "binary_share": round(100.0 * memory["binary"] / total, 2)
        if total else 0.0,
        "process_count": raw.count("process_count"),
        "process_limit": raw.count("process_limit"),
        "port_count": raw.count("port_count"),
        "port_limit": raw.count("port_limit"),
        "atom_count": atom_count,
        "atom_limit": atom_limit,
        "atom_use": round(100.0 * atom_count / atom_limit, 2),
        "ets_count": raw.count("ets_count"),
        "ets_limit": raw.count("ets_limit"),
        "alloc_used": used, "alloc_allocated": allocated,
        "alloc_usage": round(used / allocated, 4) if allocated else 0.0,
        "rss": rss_bytes(raw["rss"], f"{raw.helper}'s rss"),
        "gcs_per_s": None, "reclaimed_per_s": None,
        "gc": gc, "collected": raw.count("collected"),
        "gc_ms": round(raw.count("gc_us") / 1000, 3),
        "node_ms": round(raw.count("sample_us") / 1000, 3)})
    wordsize = raw.wordsize()
    gc_count = raw.count("gc_count")
    reclaimed = raw.count("gc_words_reclaimed")
    if previous is not None:
        then, before = previous
        seconds = epoch - then
        gcs = gc_count - before.count("gc_count")
        words = reclaimed - before.count("gc_words_reclaimed")
        if seconds > 0 and gcs >= 0 and words >= 0:
            out["gcs_per_s"] = round(gcs / seconds, 1)
            out["reclaimed_per_s"] = round(words * wordsize / seconds)
    return out


class Track:
    """What the rule and the view keep of one node's samples, in constant
    memory: floors, the leak rule (after collections or through the
    floors), the raw values' rule, per-category stats and chart series."""

    def __init__(self, node: str, gc: str, rises: int = DEFAULT_RISES,
                 floor: int = DEFAULT_FLOOR) -> None:
        self.node, self.gc = node, gc
        self.rule = LeakRule(rises)
        # The raw values under the same rule: with no forced GC, a series
        # that only rose is "rising, not yet confirmed" while its floor
        # cannot judge yet.
        self.raw_rule = LeakRule(rises)
        # Beside the rises, the trend over the window: a count that rises
        # every other sample never rises five times in a row. Through the
        # floors, the raw values must rise too (TrendRule says why).
        self.trend = TrendRule(confirm=gc == "none")
        self.floors = {c: Floor(floor) for c in LEAK_CATEGORIES}
        # Samples the rule needs in a row before it can judge: rises + 1
        # values after collections; without, the floor must first span
        # its window (the floor of a series that only rose starts rising
        # --floor samples in), so --floor + rises. (A 10-sample run ended
        # "no leak" while binary rose 2 MB a sample: it could not fire
        # before sample 17.)
        self.needed = rises + 1 if gc != "none" else floor + rises
        self.in_a_row = 0       # up samples since the start or a gap
        self.judged = False     # the rule could judge at some point
        self.stats = {c: Stats() for c in SUMMARISED}
        # A terminal 300 columns wide has 600 dot columns: 512 to 1,024
        # points a series draw as well as any more, and cost a fifth of
        # 2,048 to redraw at each sample.
        self.series = {c: Series(1024) for c in CHARTED}
        self.taken = self.down = 0
        self.last: Sample | None = None

    def down_sample(self, now: float, error: str) -> Sample:
        """A gap: the node did not answer at ``now``; the rule starts its
        count again."""
        self.down += 1
        self.in_a_row = 0
        self.rule.gap()
        self.raw_rule.gap()
        self.trend.gap()
        for floor in self.floors.values():
            floor.reset()
        return {"time": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                      time.gmtime(now)),
                "epoch": round(now, 3), "node": self.node, "down": True,
                "error": error}

    def keep(self, sample: Sample) -> None:
        """Floors, the leak rule, stats and chart series: one sample's
        worth, added to the state."""
        self.taken += 1
        self.last = sample
        epoch = sample["epoch"]
        if sample.get("down"):
            for series in self.series.values():
                series.add(epoch, None)
            return
        # After forced collections the values are the post-GC values;
        # without, the rule and the chart follow each category's floor.
        raw = {c: sample[c] for c in LEAK_CATEGORIES}  # type: ignore
        watched = raw
        if self.gc == "none":
            watched = {c: self.floors[c].add(v) for c, v in raw.items()}
            sample["floor"] = watched
            self.raw_rule.add(epoch, raw)
        self.in_a_row += 1
        self.judged = self.judged or self.in_a_row >= self.needed
        leaks: list[Rise | Trend] = [*self.rule.add(epoch, watched),
                                     *self.trend.add(epoch, watched, raw)]
        if leaks:
            sample["leaks"] = [rise.as_json() for rise in leaks]
        for category, stats in self.stats.items():
            stats.add(Point(epoch, sample[category]))  # type: ignore
        for category, series in self.series.items():
            series.add(epoch, watched[category])

    @property
    def leaked(self) -> bool:
        return bool(self.rule.fired or self.trend.fired)

    def fired(self) -> list[Rise | Trend]:
        """The leaks suspected at any point of the run: per category, the
        largest rise, then the largest trend."""
        return [*self.rule.fired.values(), *self.trend.fired.values()]

    @property
    def to_judge(self) -> int:
        """Samples in a row still needed before the rule can judge (0 once
        it could)."""
        return 0 if self.judged else self.needed - self.in_a_row

    def unconfirmed(self) -> list[RiseJson]:
        """Raw series that only rose (by more than noise) in categories
        the rule has not fired on, while it could not judge yet."""
        if self.judged:
            return []
        return [rise.as_json() for category, rise in
                self.raw_rule.fired.items() if category not in
                self.rule.fired and category not in self.trend.fired]

    def judgment(self, started: float | None,
                 interval: float | None = None) -> dict[Any, Any]:
        """First, last, min, max and growth per hour per category, the
        leaks suspected at any point of the run, and whether the rule
        could judge at all; the ``interval`` too when given (one node's
        watch: a cluster's says it once for all)."""
        seconds = (self.last["epoch"] - started
                   if self.last is not None and started else 0.0)
        return {"node": self.node, "samples": self.taken,
                "down_samples": self.down, "seconds": round(seconds, 3),
                "gc": self.gc,
                **({} if interval is None else {"interval": interval}),
                "categories": {c: s.as_json()
                               for c, s in self.stats.items()},
                "leaks": [leak.as_json() for leak in self.fired()],
                "judged": self.judged, "to_judge": self.to_judge,
                "unconfirmed": self.unconfirmed()}


def _check(gc: str, interval: float) -> None:
    if gc not in GC_MODES:
        raise UsageError(f"--gc must be one of {', '.join(GC_MODES)}, "
                         f"not {gc!r}")
    if not interval >= MIN_INTERVAL:
        raise UsageError(f"--interval must be at least {MIN_INTERVAL} "
                         f"s, not {interval:g}")


class Slots:
    """Samples on the clock: slots at start + k * interval; a late round
    skips slots rather than drifting, and a round that failed is a gap in
    each slot it took (one down sample per interval, as the view and the
    files say). Subclasses take a round (``_round``) and say what a
    skipped slot is after it (``_gaps``)."""

    interval: float
    count: int | None
    duration: float | None
    clock: Callable[[], float]
    sleep: Callable[[float], None]
    started: float | None
    remote: Remote | None

    def open(self) -> None:
        raise NotImplementedError

    def _round(self, now: float) -> list[Sample]:
        raise NotImplementedError

    def _gaps(self, due: float, last: list[Sample]) -> list[Sample]:
        raise NotImplementedError

    def samples(self) -> Iterator[Sample]:
        if self.remote is None:
            self.open()
        started = self.started = self.clock()
        slot = 0
        while True:
            taken = self._round(self.clock())
            yield from taken
            slot += 1
            if self.count is not None and slot >= self.count:
                return
            now = self.clock()
            due = started + slot * self.interval
            while due < now:
                slot += 1
                gaps = self._gaps(due, taken)
                yield from gaps
                if gaps and self.count is not None and slot >= self.count:
                    return
                due = started + slot * self.interval
            if self.duration is not None and due - started > self.duration:
                return
            self.sleep(max(0.0, due - self.clock()))


class Watch(Track, Slots):
    """A watch in progress: ``samples()`` yields them; the state a view or
    a summary needs is this node's Track, kept in constant memory, and
    survives an interrupted generator (Ctrl-C ends the watch, not the
    summary)."""

    def __init__(self, connect: Callable[[], Remote], *,
                 interval: float = 5.0, count: int | None = None,
                 duration: float | None = None, gc: str = "none",
                 max_gc: int | None = None, jobs: int = 0,
                 rises: int = DEFAULT_RISES, floor: int = DEFAULT_FLOOR,
                 fail_on_leak: bool = False,
                 clock: Callable[[], float] = time.time,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        _check(gc, interval)
        Track.__init__(self, "", gc, rises, floor)
        self.connect, self.interval = connect, interval
        self.count, self.duration = count, duration
        self.max_gc, self.jobs = max_gc, jobs
        self.clock, self.sleep = clock, sleep
        self.fail_on_leak = fail_on_leak
        self.started = None
        self.remote = None
        self._previous: tuple[float, Reply] | None = None

    def open(self) -> None:
        """The first connection: errors here are the user's to see."""
        self.remote = self.connect()
        self.node = self.remote.node

    def close(self) -> None:
        if self.remote is not None:
            self.remote.close()
            self.remote = None

    def _round(self, now: float) -> list[Sample]:
        sample, raw = self._take(now, self._previous)
        self._previous = (now, raw) if raw is not None else None
        self.keep(sample)
        return [sample]

    def _gaps(self, due: float, last: list[Sample]) -> list[Sample]:
        if not last[0].get("down"):
            return []
        gap = self.down_sample(due, last[0]["error"])
        self.keep(gap)
        return [gap]

    def _take(self, now: float, previous: tuple[float, Reply] | None
              ) -> tuple[Sample, Reply | None]:
        try:
            if self.remote is None:
                self.remote = self.connect()
            raw = sample_node(self.remote, self.gc, self.max_gc, self.jobs)
        except BadReply:
            # It answers, with what no node can have: no later sample of
            # it means more (exit 8, as a bad figure in record() is).
            self.close()
            raise
        except ProbeError as exc:
            # Gone (stopped, restarted, unreachable), or its connection
            # broke mid-frame: a gap, and a new connection at the next
            # slot.
            self.close()
            return self.down_sample(now, f"{exc.label}: {exc}"), None
        if previous is not None and raw.count("gc_count") < previous[1].count(
                "gc_count"):
            previous = None  # a restart: the counters began again
        return record(self.node, raw, now, self.gc, previous), raw

    def exit_code(self) -> int:
        """With --fail-on-leak: EXIT_LEAK when a leak was suspected,
        EXIT_NOT_JUDGED when the run ended before the rule could judge."""
        return _exit_code(self.fail_on_leak, [self])

    def summary(self) -> dict[Any, Any]:
        """This node's judgment of the run (Track.judgment), with how it
        was sampled."""
        return self.judgment(self.started, self.interval)


class ClusterWatch(Slots):
    """watch --cluster: each round, one fan-out of the sample helper from
    the entry node to every member (probes/cluster.py), one sample per node
    (each with its "node"), and the rule per node: a Track each. A node
    that does not answer within four fifths of the interval (or --timeout,
    if shorter) is down for that slot and the others go on; if the entry node goes, every
    node is down until it is back. The members are fixed at the start."""

    def __init__(self, connect: Callable[[], Remote], *,
                 nodes: Sequence[str] | None = None,
                 include_hidden: bool = False, metric: str = "total",
                 interval: float = 5.0, count: int | None = None,
                 duration: float | None = None, gc: str = "none",
                 max_gc: int | None = None, jobs: int = 0,
                 rises: int = DEFAULT_RISES, floor: int = DEFAULT_FLOOR,
                 fail_on_leak: bool = False,
                 clock: Callable[[], float] = time.time,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        _check(gc, interval)
        if metric not in CHARTED:
            raise UsageError(f"--metric must be one of {', '.join(CHARTED)}"
                             f", not {metric!r}")
        self.connect, self.interval = connect, interval
        self.chosen, self.include_hidden = nodes, include_hidden
        self.metric = metric
        self.count, self.duration = count, duration
        self.gc, self.max_gc, self.jobs = gc, max_gc, jobs
        self.rises, self.floor = rises, floor
        self.clock, self.sleep = clock, sleep
        self.fail_on_leak = fail_on_leak
        self.started = None
        self.remote = None
        self.node = ""                  # the entry node
        self.members: list[str] = []
        self.connected: set[str] = set()
        self.tracks: dict[str, Track] = {}
        self.rounds = 0
        self.last: Sample | None = None
        self._previous: dict[str, tuple[float, Reply]] = {}

    @property
    def taken(self) -> int:
        return sum(t.taken for t in self.tracks.values())

    def open(self) -> None:
        """The first connection and the members: errors here are the
        user's to see."""
        self.remote = self.connect()
        self.node = self.remote.node
        self.members, self.connected = cluster.members(
            self.remote, self.chosen, self.include_hidden)
        self.tracks = {n: Track(n, self.gc, self.rises, self.floor)
                       for n in self.members}

    def close(self) -> None:
        if self.remote is not None:
            self.remote.close()
            self.remote = None

    def _round(self, now: float) -> list[Sample]:
        from beam_probe.erldist.terms import Atom

        self.rounds += 1
        # A node that has not answered by four fifths of the interval is
        # down for this slot: a frozen node must not hold the others'
        # samples back, and the round must end before the next slot is due
        # (at the whole interval every round was late, and skipped one).
        timeout = max(0.2, round(min(0.8 * self.interval, self.remote.timeout
                                     if self.remote else self.interval), 1))
        try:
            if self.remote is None:
                self.remote = self.connect()
            answers = cluster.fan(
                self.remote, self.members, HELPER, "sample",
                (Atom(self.gc), NO_GC_LIMIT if self.max_gc is None
                 else self.max_gc, self.jobs, *SAMPLE_LOCALS),
                lambda node, reply: reply, timeout, self.connected)
        except ProbeError as exc:
            self.close()
            error = f"{self.node} (the entry node): {exc.label}: {exc}"
            return [self._kept(self.tracks[n].down_sample(now, error))
                    for n in self.members]
        out = []
        for node, answer in zip(self.members, answers):
            out.append(self._kept(self._sample(node, answer, now)))
        return out

    def _sample(self, node: str, answer: Any, now: float) -> Sample:
        track = self.tracks[node]
        if not isinstance(answer, Reply):
            self._previous.pop(node, None)
            return track.down_sample(now, answer["error"])
        previous = self._previous.get(node)
        try:
            if previous is not None and answer.count("gc_count") < \
                    previous[1].count("gc_count"):
                previous = None  # a restart: the counters began again
            sample = record(node, answer, now, self.gc, previous)
        except ProtocolError as exc:
            self._previous.pop(node, None)
            return track.down_sample(now, str(exc))
        self._previous[node] = (now, answer)
        return sample

    def _kept(self, sample: Sample) -> Sample:
        self.tracks[sample["node"]].keep(sample)
        self.last = sample
        return sample

    def _gaps(self, due: float, last: list[Sample]) -> list[Sample]:
        return [self._kept(self.tracks[s["node"]].down_sample(
            due, s["error"])) for s in last if s.get("down")]

    def exit_code(self) -> int:
        """With --fail-on-leak: EXIT_LEAK when a leak was suspected on any
        node, EXIT_NOT_JUDGED when the rule could not judge every node."""
        return _exit_code(self.fail_on_leak, self.tracks.values())

    def summary(self) -> dict[Any, Any]:
        """Each node's judgment of the run, the entry's first."""
        return {"entry": self.node, "interval": self.interval,
                "gc": self.gc, "metric": self.metric,
                "nodes": [t.judgment(self.started)
                          for t in self.tracks.values()]}


def _exit_code(fail_on_leak: bool, tracks: Iterable[Track]) -> int:
    if not fail_on_leak:
        return 0
    tracks = list(tracks)
    if any(t.leaked for t in tracks):
        return EXIT_LEAK
    return 0 if all(t.judged for t in tracks) else EXIT_NOT_JUDGED


__all__ = ["CHARTED", "ClusterWatch", "GC_MODES", "MIN_INTERVAL",
           "SUMMARISED", "Track", "Watch", "record", "sample_node"]
