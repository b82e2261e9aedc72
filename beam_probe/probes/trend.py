"""Memory over time: memwatch's leak rule, the floor, a run's summary, and a
series kept for a chart in bounded memory. Pure: values in, values out.

memwatch (Node.js) emits its 'leak' event after five consecutive garbage
collections in which the heap grew. On the BEAM there is no one heap to
read after one collection, so the value is a category of memory (or a
count) read after the collections beam-probe forced, or, without them,
the category's floor: its running minimum over the last few samples,
which a sawtooth (allocate, free) leaves flat and a leak lifts.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any, Iterable, Iterator, NamedTuple, Sequence

if TYPE_CHECKING:
    from beam_probe.probes.results import RiseJson

# What the leak rule watches: memory categories (bytes) and counts.
LEAK_CATEGORIES = ("total", "processes", "binary", "ets", "atom_count",
                   "process_count", "port_count")
BYTE_CATEGORIES = frozenset(("total", "processes", "binary", "ets",
                             "atom", "code", "system", "alloc_used",
                             "alloc_allocated", "rss"))

DEFAULT_RISES = 5
# A rise of memory smaller than this is noise, not a leak: an idle node's
# process memory creeps between its own collections (rex and the
# connection's processes answering us among them): measured +50 KB per
# 0.2 s sample on an idle OTP 25 node, and +275 KB over five 0.5 s samples
# on the 68-process demo node, five rises running each time.
NOISE_BYTES = 1024 * 1024
NOISE_SHARE = 0.01
# The floor of a series: its minimum over this many samples (one minute at
# the default 5 s interval). A sawtooth whose period is shorter stays flat;
# a longer one needs --gc or a longer --floor.
DEFAULT_FLOOR = 12
# A growth per hour from a series' first and last values is extrapolated
# only when they are at least this far apart: from 14 s of samples it read
# -1,007,757,257 B/h. (A rise, each step up, has its rate at any span.)
MIN_RATE_SECONDS = 60.0


def per_hour(change: float, seconds: float) -> float | None:
    """``change`` over ``seconds`` as a rate per hour, or None when the
    span is too short to say (MIN_RATE_SECONDS)."""
    if seconds < MIN_RATE_SECONDS:
        return None
    return change * 3600 / seconds


# A record read back from a file (a watch file, a check history) is what
# beam-probe wrote only if its time is epoch seconds from 1970 to the year
# 5138 and its figures fit 64 bits: NaN, 1e308, -1e18 or 10^400 are not
# samples of ours (they ended in an internal error in arithmetic and date
# formatting before).
MAX_EPOCH = 1e11
MAX_FIGURE = 2.0**63


def _refuse_constant(name: str) -> float:
    raise ValueError(f"{name} is not a figure")


def read_record(raw: bytes) -> dict[Any, Any] | None:
    """One JSON line of a watch file or a history, or None when it is not
    a record: an object with a node name and a time in range. A figure
    out of range (or not a number) reads as None, as a missing one does."""
    import json

    try:
        item = json.loads(raw, parse_constant=_refuse_constant)
    except (ValueError, RecursionError):
        return None
    if not isinstance(item, dict) or not isinstance(item.get("node"), str) \
            or not figure(item.get("epoch"), 0, MAX_EPOCH):
        return None
    for key, value in item.items():
        if isinstance(value, (int, float)) and not isinstance(value, bool) \
                and not figure(value):
            item[key] = None
    return item


def figure(value: object, low: float = -MAX_FIGURE,
           high: float = MAX_FIGURE) -> bool:
    """A number (not a bool) within [low, high]: NaN compares false."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        return low <= value <= high
    except OverflowError:
        return False


class Point(NamedTuple):
    epoch: float
    value: float


class Rise(NamedTuple):
    """A leak suspected: ``rises`` consecutive rises of one category."""

    category: str
    rises: int
    first: Point
    last: Point

    @property
    def growth(self) -> float:
        return self.last.value - self.first.value

    @property
    def seconds(self) -> float:
        return self.last.epoch - self.first.epoch

    @property
    def per_hour(self) -> float | None:
        # Every step of a rise went up by more than noise in all: its rate
        # means something even over a short span.
        return self.growth * 3600 / self.seconds if self.seconds > 0 else None

    def as_json(self) -> RiseJson:
        return {"category": self.category, "rises": self.rises,
                "growth": self.growth, "seconds": round(self.seconds, 3),
                "per_hour": None if self.per_hour is None
                else round(self.per_hour)}


def rising(category: str, points: Sequence[Point], rises: int,
           noise: float = 0.0) -> Rise | None:
    """The Rise if the last ``rises`` steps of ``points`` all went up (so
    ``rises`` + 1 points, each above the one before) by more than
    ``noise`` in all; else None."""
    if rises < 1 or len(points) < rises + 1:
        return None
    window = points[-(rises + 1):]
    if all(later.value > earlier.value
           for earlier, later in zip(window, window[1:])) \
            and window[-1].value - window[0].value > noise:
        return Rise(category, rises, window[0], window[-1])
    return None


def noise(category: str, value: float) -> float:
    """How much a category may rise over a window without it meaning
    anything: for memory, NOISE_BYTES or NOISE_SHARE of it, whichever is
    more; for counts, nothing (five rises of a count are five more)."""
    if category in BYTE_CATEGORIES:
        return max(NOISE_BYTES, NOISE_SHARE * value)
    return 0.0


class Floor:
    """The running minimum of a series over its last ``window`` values."""

    def __init__(self, window: int = DEFAULT_FLOOR) -> None:
        self.values: deque[float] = deque(maxlen=max(1, window))

    def add(self, value: float) -> float:
        self.values.append(value)
        return min(self.values)

    def reset(self) -> None:
        """Forget the past (the node restarted: its old floor means
        nothing now)."""
        self.values.clear()


class LeakRule:
    """memwatch's rule over a stream of samples, per category: the
    categories whose last ``rises`` steps all rose. Keeps ``rises`` + 1
    points a category, however long the stream."""

    def __init__(self, rises: int = DEFAULT_RISES,
                 categories: Iterable[str] = LEAK_CATEGORIES) -> None:
        self.rises = rises
        self.points: dict[str, deque[Point]] = {
            c: deque(maxlen=rises + 1) for c in categories}
        self.fired: dict[str, Rise] = {}

    def add(self, epoch: float, values: dict[str, float]) -> list[Rise]:
        found = []
        for category, points in self.points.items():
            value = values.get(category)
            if value is None:
                continue
            points.append(Point(epoch, value))
            rise = rising(category, list(points), self.rises,
                          noise(category, points[0].value))
            if rise is not None:
                found.append(rise)
                best = self.fired.get(category)
                if best is None or rise.growth >= best.growth:
                    self.fired[category] = rise
        return found

    def gap(self) -> None:
        """The node was away: a rise may not span the gap."""
        for points in self.points.values():
            points.clear()


class Stats:
    """First, last, least and most of one series, in constant memory."""

    __slots__ = ("first", "last", "low", "high")

    def __init__(self) -> None:
        self.first: Point | None = None
        self.last: Point | None = None
        self.low: float | None = None
        self.high: float | None = None

    def add(self, point: Point) -> None:
        if self.first is None:
            self.first = point
        self.last = point
        self.low = point.value if self.low is None \
            else min(self.low, point.value)
        self.high = point.value if self.high is None \
            else max(self.high, point.value)

    @property
    def per_hour(self) -> float | None:
        if self.first is None or self.last is None:
            return None
        return per_hour(self.last.value - self.first.value,
                        self.last.epoch - self.first.epoch)

    def as_json(self) -> dict[Any, Any]:
        return {"first": self.first.value if self.first else None,
                "last": self.last.value if self.last else None,
                "min": self.low, "max": self.high,
                "per_hour": None if self.per_hour is None
                else round(self.per_hour)}


class Series:
    """A series for a chart, over a run of any length, in at most
    ``capacity`` points: when full, neighbours are merged two by two (their
    mean, at their mean time; a gap stays a gap) and every later pair of
    samples makes one point. 10,000 samples or ten million cost the same
    memory. The samples not yet merged show as one point at the latest
    one's time, so a chart always reaches the last sample."""

    def __init__(self, capacity: int = 2048) -> None:
        self.capacity = max(4, capacity - capacity % 2)
        self.points: list[tuple[float, float | None]] = []
        self.stride = 1
        self._pending: list[tuple[float, float | None]] = []

    def add(self, epoch: float, value: float | None) -> None:
        self._pending.append((epoch, value))
        if len(self._pending) < self.stride:
            return
        self.points.append(_merge(self._pending))
        self._pending = []
        if len(self.points) >= self.capacity:
            self.points = [_merge(self.points[i:i + 2])
                           for i in range(0, len(self.points), 2)]
            self.stride *= 2

    def __iter__(self) -> Iterator[tuple[float, float | None]]:
        yield from self.points
        if self._pending:
            yield self._pending[-1][0], _merge(self._pending)[1]


def _merge(points: list[tuple[float, float | None]]
           ) -> tuple[float, float | None]:
    when = sum(epoch for epoch, _ in points) / len(points)
    values = [v for _, v in points if v is not None]
    if len(values) < len(points):
        return when, None
    return when, sum(values) / len(values)


__all__ = ["BYTE_CATEGORIES", "DEFAULT_FLOOR", "DEFAULT_RISES",
           "LEAK_CATEGORIES", "Floor", "LeakRule", "Point", "Rise",
           "Series", "Stats", "rising"]
