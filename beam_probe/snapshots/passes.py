"""diff's passes over the snapshots' rows, a chunk (a process section,
5,000 rows) at a time: what each keeps is per group, bounded per group,
and a few arrays for the rows of one snapshot, the hub.

The hub is the snapshot the others' processes are looked up in: the
middle of three (the first's rows and the last's are each found in it,
as the three-snapshot rule follows a process a -> b -> c), the first of
two. Per hub row it keeps its pid key and initial call, what the first
snapshot said of that process (its group, memory and binary bytes) and,
of three, its own memory and binary bytes: ~64 bytes a row, where three
snapshots in columns took ~150 bytes a row and a dict of one's rows ~100
(issue 39: 272 MB for three snapshots of a million processes).

Every pass over a chunk's rows runs in C (map, compress, Counter, bytes):
a Python statement per row costs ~0.1 s a million. Python loops run only
over the rows an answer shows: a group's first rows (examples), the rows
of a group not seen before, the rows large enough to have grown.
"""

from __future__ import annotations

import heapq
from array import array
from collections import Counter, deque
from itertools import compress, repeat
from operator import gt, ne, or_, sub
from typing import Any, Iterable

from beam_probe.snapshots.columns import Chunk, Snapshot
from beam_probe.snapshots.keys import KeyIndex

# Examples a group shows (proc-info, trace-gc): this many pids in JSON.
EXAMPLES = 10


# A long-lived process is a suspect when its memory (or its refc binary
# bytes) rose in both intervals by this much in all: an idle system
# process's heap moves by a few KB between collections.
MIN_GROWTH = 64 * 1024


# Growing processes shown, largest growth first.
TOP_ROWS = 50


_FOUND = (-1).__lt__  # a row number, not -1


_FLIP = bytes([1, 0]) + bytes(254)  # a 0/1 mask's complement, by translate


def _grow(values: list[int], size: int) -> None:
    if len(values) < size:
        values.extend(repeat(0, size - len(values)))


def _add_counts(out: list[int], groups: Iterable[int],
                distinct: set[int] | None = None) -> None:
    """How many rows of each group, added to ``out``: by array.count where
    an array holds few groups (most chunks hold one), else Counter."""
    if isinstance(groups, array):
        if distinct is None:
            distinct = set(groups)
        if len(distinct) <= 8:
            for g in distinct:
                out[g] += groups.count(g)
            return
    for g, n in Counter(groups).items():
        out[g] += n


def _add_sums(out: list[int], groups: array[int] | list[int],
              values: array[int] | list[int], distinct: set[int]) -> None:
    """Each row's value added to its group's: by group where a chunk holds
    few (most hold one), else row by row."""
    if len(distinct) == 1:
        for g in distinct:
            out[g] += sum(values)
    elif len(distinct) <= 8:
        for g in distinct:
            out[g] += sum(compress(values, map(g.__eq__, groups)))
    else:
        for g, v in zip(groups, values):
            out[g] += v


class Totals:
    """Per group id of one snapshot: rows, memory and refc binary bytes
    (``sums``: the middle of three needs only its rows)."""

    def __init__(self, sums: bool = True) -> None:
        self.count: list[int] = []
        self.memory: list[int] = []
        self.binary: list[int] = []
        self._sums = sums

    def add(self, snap: Snapshot, chunk: Chunk, distinct: set[int]) -> None:
        size = len(snap.group_names)
        for values in (self.count, self.memory, self.binary):
            _grow(values, size)
        _add_counts(self.count, chunk.groups, distinct)
        if not self._sums:
            return
        _add_sums(self.memory, chunk.groups, chunk.memory, distinct)
        if any(chunk.binary):
            # Most processes hold no refc binary: only those that do.
            held = bytes(map(bool, chunk.binary))
            _add_sums(self.binary, list(compress(chunk.groups, held)),
                      list(compress(chunk.binary, held)), distinct)

    def by_name(self, snap: Snapshot) -> dict[str, int]:
        """Rows per group name (names of two ids merged)."""
        counts: dict[str, int] = {}
        for g, n in enumerate(self.count):
            if n:
                name = snap.group_names[g]
                counts[name] = counts.get(name, 0) + n
        return counts


class Firsts:
    """The first rows of each group id (row number in the snapshot, pid
    key), up to ``limit``: where a group's examples are taken from."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.rows: dict[int, list[tuple[int, int]]] = {}
        self._full: set[int] = set()

    def add(self, chunk: Chunk, base: int, distinct: set[int],
            mask: bytes | None = None) -> None:
        """The rows of ``chunk`` (those of ``mask``), its first row being
        row ``base``."""
        open_groups = distinct - self._full
        if not open_groups:
            return
        rows: Iterable[int] = range(len(chunk.groups))
        if mask is not None:
            rows = compress(rows, mask)
        groups, keys = chunk.groups, chunk.keys
        if len(open_groups) < len(distinct):
            rows = compress(range(len(groups)), bytes(
                map(open_groups.__contains__, groups))) if mask is None \
                else (r for r in rows if groups[r] in open_groups)
        for row in rows:
            g = groups[row]
            if g in self._full:
                continue
            found = self.rows.setdefault(g, [])
            found.append((base + row, keys[row]))
            if len(found) >= self.limit:
                self._full.add(g)
                if open_groups <= self._full:
                    return  # the rest of the chunk: none wanted

    def of(self, gids: Iterable[int]) -> list[tuple[int, int]]:
        """The rows kept of these group ids, in row order."""
        return sorted(row for g in gids for row in self.rows.get(g, ()))


class Calls:
    """Another snapshot's initial-call ids as the hub's (-2: none of the
    hub's), filled as that snapshot's calls are met; and where the rows
    of that snapshot's next chunk are expected in the hub."""

    def __init__(self) -> None:
        self.ids: list[int] = []
        self.same = True  # every id the hub's own
        self.guess = 0


class Hub:
    """One snapshot's rows by pid key, and what the others' passes leave
    per row of it."""

    def __init__(self, snap: Snapshot, groups: bool, values: bool) -> None:
        self.snap = snap
        self.totals = Totals(sums=not values)
        keys, calls = array("q"), array("i")
        self.groups = array("i")
        self.memory, self.binary = array("q"), array("q")
        for chunk in snap.chunks():
            self.totals.add(snap, chunk, set(chunk.groups))
            keys.extend(chunk.keys)
            calls.extend(chunk.calls)
            if groups:
                self.groups.extend(chunk.groups)
            if values:
                self.memory.extend(chunk.memory)
                self.binary.extend(chunk.binary)
        self.size = len(keys)
        self.keys, self.calls = keys, calls
        self.index = KeyIndex(keys)
        self._ids = snap.calls_by_name

    def find(self, snap: Snapshot, chunk: Chunk, calls: Calls
             ) -> tuple[array[int], int | None]:
        """The hub row of each row of ``chunk`` (of ``snap``), -1 where
        none is the same process: the same pid and initial call (a pid
        reused by a process of another initial call is another process,
        and a pid's serial wraps on a long-running node). And the first
        of those rows where they are the hub's rows from there on, in
        order: a node lists its processes in its table's order, so where
        none was born or died the chunk is a slice of the hub, found by
        comparing the arrays (in C, no per-row step)."""
        ids = calls.ids
        if len(ids) < len(snap.call_names):
            ids.extend(self._ids.get(name, -2)
                       for name in snap.call_names[len(ids):])
            calls.same = ids == list(range(len(ids)))
        theirs = chunk.calls if calls.same else \
            array("i", map(ids.__getitem__, chunk.calls))
        count, start = len(chunk.keys), calls.guess
        if start + count <= self.size and \
                self.keys[start:start + count] == chunk.keys and \
                self.calls[start:start + count] == theirs:
            calls.guess = start + count
            return array("q", range(start, start + count)), start
        rows = self.index.find(chunk.keys)
        if self.size:
            other = bytes(map(ne, map(self.calls.__getitem__, rows),
                              theirs))
            deque(map(rows.__setitem__, compress(range(len(rows)), other),
                      repeat(-1)), maxlen=0)
        if rows and rows[-1] >= 0:
            calls.guess = rows[-1] + 1
        return rows, None


class First:
    """What the first of three snapshots leaves in the hub (the middle):
    per hub row, the first's group id, memory and refc binary bytes of
    that process (group -1: born since the first)."""

    def __init__(self, hub: Hub, snap: Snapshot) -> None:
        self.totals = Totals()
        size = hub.size
        self.groups = array("i", [-1]) * size
        self.memory = array("q", [0]) * size
        self.binary = array("q", [0]) * size
        calls = Calls()
        for chunk in snap.chunks():
            self.totals.add(snap, chunk, set(chunk.groups))
            rows, start = hub.find(snap, chunk, calls)
            columns = ((self.groups, chunk.groups),
                       (self.memory, chunk.memory),
                       (self.binary, chunk.binary))
            if start is not None:
                for out, column in columns:
                    out[start:start + len(column)] = column
                continue
            hit = bytes(map(_FOUND, rows))
            if not hit.count(1):
                continue
            at = array("q", compress(rows, hit))
            for out, column in columns:
                deque(map(out.__setitem__, at, compress(column, hit)),
                      maxlen=0)


class Last:
    """The last snapshot's pass: its totals, which of its rows each earlier
    snapshot had, and per group what the answer shows of them."""

    def __init__(self, hub: Hub, snap: Snapshot, first_snap: Snapshot,
                 first: First | None, owners: set[int]) -> None:
        self.totals = Totals()
        # Rows that were alive in the first snapshot, per group id of the
        # last and of the first.
        self.kept: list[int] = []
        self.kept_first: list[int] = []
        self.any = Firsts(2 * EXAMPLES)
        self.born = Firsts(EXAMPLES)  # since the first
        self.new = Firsts(EXAMPLES)   # since the middle
        # Born between the first and the middle, alive in the last: per
        # group id of the last, [count, bytes, binary bytes, growth] and
        # the first rows of the middle (row, key).
        self.born_kept: dict[int, list[int]] = {}
        self.born_kept_rows: dict[int, list[tuple[int, int]]] = {}
        self.growing: list[tuple[int, int, dict[str, Any]]] = []
        self.owners: dict[int, int] = {}
        # The first's group of each hub row (of two, the hub is the
        # first), and a -1 after the last, read for a row of -1 (none).
        groups_of = hub.groups if first is None else first.groups
        groups_of.append(-1)
        self._first = first
        self._first_groups = len(first_snap.group_names)
        calls = Calls()
        base = 0
        for chunk in snap.chunks():
            self._chunk(hub, snap, chunk, base, groups_of, calls, owners)
            base += len(chunk.keys)
        size = len(snap.group_names)
        _grow(self.kept, size)

    def _chunk(self, hub: Hub, snap: Snapshot, chunk: Chunk, base: int,
               groups_of: array[int], calls: Calls, owners: set[int]
               ) -> None:
        distinct = set(chunk.groups)
        self.totals.add(snap, chunk, distinct)
        _grow(self.kept, len(snap.group_names))
        _grow(self.kept_first, self._first_groups)
        rows, start = hub.find(snap, chunk, calls)
        count = len(rows)
        first = groups_of[start:start + count] if start is not None else \
            array("i", map(groups_of.__getitem__, rows))
        if first.count(-1):
            kept = bytes(map(_FOUND, first))
            _add_counts(self.kept, compress(chunk.groups, kept))
            _add_counts(self.kept_first, compress(first, kept))
        else:  # every row alive in the first
            kept = b"\x01" * count
            _add_counts(self.kept, chunk.groups, distinct)
            _add_counts(self.kept_first, first)
        self.any.add(chunk, base, distinct)
        self.born.add(chunk, base, distinct, kept.translate(_FLIP))
        if self._first is not None:  # three snapshots
            hit = b"\x01" * count if start is not None else \
                bytes(map(_FOUND, rows))
            self.new.add(chunk, base, distinct, hit.translate(_FLIP))
            born_kept = bytes(map(gt, hit, kept))
            if born_kept.count(1):
                self._born_kept(hub, chunk, rows, born_kept)
            self._growing(hub, self._first, chunk, rows, kept, base)
        if owners:
            for row in compress(range(len(chunk.keys)),
                                map(owners.__contains__, chunk.keys)):
                self.owners[chunk.keys[row]] = chunk.groups[row]

    def _born_kept(self, hub: Hub, chunk: Chunk, rows: array[int],
                   mask: bytes) -> None:
        groups = list(compress(chunk.groups, mask))
        at = list(compress(rows, mask))
        memory = list(compress(chunk.memory, mask))
        binary = list(compress(chunk.binary, mask))
        growth = list(map(sub, memory, map(hub.memory.__getitem__, at)))
        distinct = set(groups)
        for g in distinct:
            self.born_kept.setdefault(g, [0, 0, 0, 0])
        for i, values in ((1, memory), (2, binary), (3, growth)):
            sums = {g: 0 for g in distinct}
            if len(distinct) == 1:
                sums[groups[0]] = sum(values)
            else:
                for g, v in zip(groups, values):
                    sums[g] += v
            for g, total in sums.items():
                self.born_kept[g][i] += total
        for g, n in Counter(groups).items():
            self.born_kept[g][0] += n
        # The examples: the first rows of the middle snapshot (its row
        # order), EXAMPLES per group, whatever order the last has them in:
        # a heap of the rows negated, the latest kept on top.
        for g, row, key in zip(groups, at, compress(chunk.keys, mask)):
            found = self.born_kept_rows.setdefault(g, [])
            if len(found) < EXAMPLES:
                heapq.heappush(found, (-row, key))
            elif row < -found[0][0]:
                heapq.heapreplace(found, (-row, key))

    def _growing(self, hub: Hub, first: First, chunk: Chunk,
                 rows: array[int], kept: bytes, base: int) -> None:
        """Rows that grew by MIN_GROWTH through both intervals, in memory
        or refc binary bytes: only a row of at least MIN_GROWTH can have,
        and those few are followed back through the middle to the
        first."""
        if max(chunk.memory, default=0) < MIN_GROWTH and \
                max(chunk.binary, default=0) < MIN_GROWTH:
            return
        large = bytes(map(or_, map(MIN_GROWTH.__le__, chunk.memory),
                          map(MIN_GROWTH.__le__, chunk.binary)))
        for row in compress(range(len(rows)), map(min, large, kept)):
            j = rows[row]
            rising = []
            memory = [first.memory[j], hub.memory[j], chunk.memory[row]]
            binary = [first.binary[j], hub.binary[j], chunk.binary[row]]
            for name, (x, y, z) in (("memory", memory),
                                    ("binary_bytes", binary)):
                if x < y < z and z - x >= MIN_GROWTH:
                    rising.append(name)
            if not rising:
                continue
            growth = memory[2] - memory[0] + binary[2] - binary[0]
            key = chunk.keys[row]
            entry = (growth, -(base + row), {
                "key": key, "group": chunk.groups[row],
                "name": chunk.named.get(row), "rising": rising,
                "memory": memory, "binary_bytes": binary})
            # The TOP_ROWS largest, the earlier row first among equals.
            if len(self.growing) < TOP_ROWS:
                heapq.heappush(self.growing, entry)
            elif entry[:2] > self.growing[0][:2]:
                heapq.heapreplace(self.growing, entry)


def born_kept_rows(last: Last, gids: Iterable[int]) -> list[tuple[int, int]]:
    """The middle's first rows of these groups (of the last), in order."""
    return sorted((-row, key) for g in gids
                  for row, key in last.born_kept_rows.get(g, ()))


__all__ = ["EXAMPLES", "First", "Firsts", "Hub", "Last", "MIN_GROWTH",
           "TOP_ROWS", "Totals", "born_kept_rows"]
