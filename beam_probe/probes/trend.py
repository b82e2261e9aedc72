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

import math
from bisect import bisect_left, bisect_right, insort
from collections import deque
from itertools import combinations
from typing import (TYPE_CHECKING, Any, Iterable, Iterator, NamedTuple,
                    Sequence, TypeVar)

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
        return {"category": self.category, "rule": "rises",
                "rises": self.rises, "samples": self.rises + 1,
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


# The trend rule, beside the rises: a count that rises every other sample
# (ejabberd, a MUC room every ~4.5 s watched every 2 s) never rises five
# times in a row, and passed as "no leak" while leak-hunt named it. Over
# the last TREND_WINDOW samples of a category (its floor, or its post-GC
# values, as the rises read), a trend is suspected when:
#   * Mann-Kendall's test says it rises: S, the rising pairs less the
#     falling ones, is above what a series in no order gives with one-sided
#     p < 0.001 (z >= TREND_Z, ties corrected): a churning steady count and
#     a sawtooth are in no order;
#   * the Theil-Sen slope (the median of the pairs' slopes, which a few
#     outliers do not move) over the window's span is growth that matters:
#     more than the rises' noise for memory (1 MiB or 1%), at least
#     TREND_COUNT for a count (five rises of a count are five more);
#   * the trend stands out of the series' own spread: that growth is over
#     TREND_SPREAD times the median distance of the points from the line:
#     at 3 times, 4 of 120 runs of churn and noise (2,000 samples each)
#     fired on their raw values, at 4 none, and the stepwise and noisy
#     growths of tests/test_trend.py fired as early;
#   * it rose in both halves of the window: the medians of its quarters
#     go q1 < q2 <= q3 < q4, as the three-snapshot rule wants growth in
#     both intervals. One step up (a pool opened, a cache filled once) is
#     significant to Mann-Kendall, and is not a leak; in simulation a
#     step of +20 read as a trend with thirds (its middle third's median
#     between the others), never with halves.
# At least TREND_MIN samples (two minutes at --interval 5): a count that
# wanders (each change lasting a few samples) climbs for a dozen samples
# now and then, and a window of 12 named it at once in simulation.
# The window is bounded: S is kept as points come and go (O(log n) a
# sample); Theil-Sen's pairs are counted only while S says "rising", over
# at most SLOPE_POINTS points. Measured (tests/bench_watch.py): 0.04 ms
# a sample for the seven categories while nothing rises, 0.8 ms while all
# seven do with the raw values confirming (the worst case; 5.6 ms with
# Theil-Sen over all 120 points).
TREND_WINDOW = 120
TREND_MIN = 24
TREND_Z = 3.09
TREND_COUNT = DEFAULT_RISES
TREND_SPREAD = 4.0
SLOPE_POINTS = 40


def _ties(t: int) -> int:
    """A group of t equal values' share of Mann-Kendall's variance (x18)."""
    return t * (t - 1) * (2 * t + 5)


class Trend(NamedTuple):
    """A leak suspected: a category rising over its window (the trend
    rule): Mann-Kendall's z, and the Theil-Sen slope, per second."""

    category: str
    samples: int
    rises: int
    first: Point
    last: Point
    slope: float
    z: float

    @property
    def seconds(self) -> float:
        return self.last.epoch - self.first.epoch

    @property
    def growth(self) -> float:
        """What the trend explains over the window."""
        return self.slope * self.seconds

    @property
    def per_hour(self) -> float:
        return self.slope * 3600

    def as_json(self) -> RiseJson:
        return {"category": self.category, "rule": "trend",
                "rises": self.rises, "samples": self.samples,
                "growth": round(self.growth, 3),
                "seconds": round(self.seconds, 3),
                "per_hour": round(self.per_hour), "z": round(self.z, 2)}


class TrendWindow:
    """One category's last ``window`` points and Mann-Kendall's S over
    them, kept as points come and go: a point entering adds the sign of
    its difference with every point before it, a point leaving takes away
    its own with every later one; both are counts of values below and
    above it in a sorted copy (bisect), so a sample costs O(log n) in
    Python and an O(n) move in C. Theil-Sen's O(n^2) pairs (7,140 at 120)
    are counted only when S says the window rises."""

    def __init__(self, window: int = TREND_WINDOW) -> None:
        self.points: deque[Point] = deque()
        self.window = max(TREND_MIN, window)
        self.ranked: list[float] = []
        self.s = 0
        self.counts: dict[float, int] = {}
        self.tied = 0       # sum of _ties over groups of equal values

    def add(self, point: Point) -> None:
        if len(self.points) >= self.window:
            old = self.points.popleft().value
            del self.ranked[bisect_left(self.ranked, old)]
            # Every point left is later than the one leaving.
            self.s -= (len(self.ranked) - bisect_right(self.ranked, old)) \
                - bisect_left(self.ranked, old)
            self._count(old, -1)
        value = point.value
        self.s += bisect_left(self.ranked, value) \
            - (len(self.ranked) - bisect_right(self.ranked, value))
        insort(self.ranked, value)
        self._count(value, 1)
        self.points.append(point)

    def _count(self, value: float, change: int) -> None:
        t = self.counts.get(value, 0)
        self.tied += _ties(t + change) - _ties(t)
        if t + change:
            self.counts[value] = t + change
        else:
            del self.counts[value]

    def clear(self) -> None:
        self.points.clear()
        self.ranked.clear()
        self.counts.clear()
        self.s = self.tied = 0

    def z(self) -> float:
        """Mann-Kendall's z (continuity corrected; 0 with no variance)."""
        n = len(self.points)
        variance = (n * (n - 1) * (2 * n + 5) - self.tied) / 18
        if variance <= 0 or self.s == 0:
            return 0.0
        return (self.s - (1 if self.s > 0 else -1)) / math.sqrt(variance)

    def rising(self) -> float | None:
        """Mann-Kendall's z when it says the window rises, in both its
        halves; else None. O(n): the cheap part of the rule."""
        n = len(self.points)
        if n < TREND_MIN:
            return None
        z = self.z()
        if z < TREND_Z:
            return None
        values = [p.value for p in self.points]
        q = [_median(values[n * i // 4:n * (i + 1) // 4]) for i in range(4)]
        return z if q[0] < q[1] <= q[2] < q[3] else None

    def trend(self, category: str, effect: float) -> Trend | None:
        """The Trend if the window rises (Mann-Kendall, both halves, the
        effect, the spread: see TREND_Z); else None. The cheap tests
        first: most samples end at z."""
        z = self.rising()
        if z is None:
            return None
        n = len(self.points)
        values = [p.value for p in self.points]
        epochs = [p.epoch for p in self.points]
        # Theil-Sen over at most SLOPE_POINTS of them, evenly spaced: the
        # pairs grow as n^2, and 7,140 (n = 120) cost ~0.8 ms a category
        # each sample while a leak lasts; 780 (40 points) ~0.06 ms.
        step = -(-n // SLOPE_POINTS)
        slope = theil_sen(epochs[::step], values[::step])
        first, last = self.points[0], self.points[-1]
        if slope is None:
            return None
        growth = slope * (last.epoch - first.epoch)
        if growth <= effect:
            return None
        residuals = [v - slope * t for t, v in zip(epochs, values)]
        centre = _median(residuals)
        spread = _median([abs(r - centre) for r in residuals])
        if growth <= TREND_SPREAD * spread:
            return None
        rises = sum(1 for a, b in zip(values, values[1:]) if b > a)
        return Trend(category, n, rises, first, last, slope, z)


def _median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    if len(ordered) % 2:
        return ordered[middle]
    return (ordered[middle - 1] + ordered[middle]) / 2


def theil_sen(epochs: Sequence[float], values: Sequence[float]
              ) -> float | None:
    """The median of the slopes between every two points, per second
    (pairs whose clock did not move forward left out: a clock set back),
    or None with none."""
    slopes = [(v2 - v1) / (t2 - t1) for (t1, v1), (t2, v2)
              in combinations(zip(epochs, values), 2) if t2 > t1]
    return _median(slopes) if slopes else None


def trend_effect(category: str, level: float) -> float:
    """The growth over a window a trend must explain to matter: the rises'
    noise for memory, TREND_COUNT less one for a count (a growth of at
    least TREND_COUNT)."""
    if category in BYTE_CATEGORIES:
        return noise(category, level)
    return TREND_COUNT - 0.5


class TrendRule:
    """The trend rule over a stream of samples, per category: the
    categories whose window rises. Keeps TREND_WINDOW points a category
    (twice with ``confirm``), however long the stream.

    With ``confirm`` (floors watched, no forced GC) the raw values must
    show a trend too, at the same sample. A floor is the minimum of its
    last dozen samples, so each shares most of its samples with the next,
    and Mann-Kendall takes the points as independent; a floor is smooth,
    too, and only the raw values show how far the series churns. In
    simulation (tests/test_trend.py's series, 100 seeds each of a count
    churning 700 +- 5 and 100,000 +- 2,000, memory noise of sigma 5 MiB,
    a GC sawtooth, 2,000 samples a run) the floors alone fired in 193 of
    400 runs, floors and raw values together in none, and the raw values
    alone (--gc) in none.
    """

    def __init__(self, window: int = TREND_WINDOW,
                 categories: Iterable[str] = LEAK_CATEGORIES,
                 confirm: bool = False) -> None:
        self.windows = {c: TrendWindow(window) for c in categories}
        self.raw = {c: TrendWindow(window) for c in categories} \
            if confirm else None
        self.fired: dict[str, Trend] = {}

    def add(self, epoch: float, values: dict[str, float],
            raw: dict[str, float] | None = None) -> list[Trend]:
        found: list[Trend] = []
        for category, window in self.windows.items():
            value = values.get(category)
            if value is None:
                continue
            window.add(Point(epoch, value))
            trend = window.trend(category, trend_effect(
                category, window.points[0].value))
            if self.raw is not None:
                confirming = self.raw[category]
                seen = (raw or {}).get(category)
                if seen is None:
                    continue
                confirming.add(Point(epoch, seen))
                if trend is not None and confirming.trend(
                        category, trend_effect(
                            category, confirming.points[0].value)) is None:
                    trend = None
            if trend is not None:
                _keep(self.fired, found, category, trend)
        return found

    def gap(self) -> None:
        """The node was away: a trend may not span the gap."""
        for window in self.windows.values():
            window.clear()
        for window in (self.raw or {}).values():
            window.clear()


L = TypeVar("L", Rise, Trend)


def _keep(fired: dict[str, L], found: list[L], category: str, leak: L
          ) -> None:
    """A rule's finding at this sample: said now, and kept as the
    category's verdict when it grew most so far."""
    found.append(leak)
    best = fired.get(category)
    if best is None or leak.growth >= best.growth:
        fired[category] = leak


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
        found: list[Rise] = []
        for category, points in self.points.items():
            value = values.get(category)
            if value is None:
                continue
            points.append(Point(epoch, value))
            rise = rising(category, list(points), self.rises,
                          noise(category, points[0].value))
            if rise is not None:
                _keep(self.fired, found, category, rise)
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
           "LEAK_CATEGORIES", "TREND_MIN", "TREND_WINDOW", "Floor", "LeakRule",
           "Point", "Rise", "Series", "Stats", "Trend", "TrendRule",
           "TrendWindow", "rising", "theil_sen"]
