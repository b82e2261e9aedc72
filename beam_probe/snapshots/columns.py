"""A snapshot's processes, a process section (a chunk of rows) at a time:
each chunk's columns as arrays of machine integers, groups and initial
calls interned per snapshot. Groups known by their place in the tree are
named here, from the ancestors the file holds.

Two ways to hold a snapshot: Stream, which decodes a chunk at a time on
each pass and keeps no row (what diff and leak-hunt compare: issue 39,
three snapshots of a million processes in columns took 272 MB), and
Loaded, every chunk's columns appended, about 50 bytes a process (a
crash dump's rows, and tests that look at rows).
"""

from __future__ import annotations

import json
import re
import sys
from array import array
from functools import partial
from itertools import compress
from typing import Any, Callable, Iterator

from beam_probe.erldist.terms import Atom, Pid, format_term, integers
from beam_probe.snapshots.format import (Sections, SnapshotError,
                                         held_sections, open_sections, read)


def _mfa(term: Any) -> str:
    if isinstance(term, tuple) and len(term) == 3:
        return f"{term[0]}:{term[1]}/{term[2]}"
    return format_term(term)


class Chunk:
    """One process section's rows: pid keys, group and initial-call ids
    (the snapshot's), memory and refc binary bytes, and the registered
    names of the few rows that have one (row -> name)."""

    __slots__ = ("keys", "groups", "calls", "memory", "binary", "named")

    def __init__(self, keys: array[int], groups: array[int],
                 calls: array[int], memory: array[int], binary: array[int],
                 named: dict[int, str]) -> None:
        self.keys, self.groups, self.calls = keys, groups, calls
        self.memory, self.binary, self.named = memory, binary, named


class Snapshot:
    """One snapshot's header, names and small sections; its rows are
    passed over a chunk at a time with chunks()."""

    def __init__(self, path: str, header: dict[Any, Any]) -> None:
        self.path, self.header = path, header
        self.node: str = header["node"]
        self.epoch = float(header.get("epoch", 0))
        self.creation: int | None = None
        self.rows = 0  # how many, once a pass has read them all
        self.group_names: list[str] = []
        self.call_names: list[str] = []
        self._groups: dict[Any, int] = {}
        self._calls: dict[Any, int] = {}
        self.names: dict[int, str] = {}
        self.labels: dict[int, str] = {}
        self.tables: list[dict[str, Any]] = []
        self.ports: list[dict[str, Any]] = []
        # Groups named by their place in the tree, named once every section
        # is read: (group id, what the process runs, its parent's key).
        self.placed: list[tuple[int, str, int]] = []
        # Format 3: each ancestor's class, by pid key (see name_placed).
        self.ancestors: dict[int, tuple[Any, ...]] | None = None
        # Each named or labelled process's name, by pid key: what formats
        # 1 and 2 name a group's parent by. A Stream of format 3 keeps
        # none (its ancestors name the groups), so that a node of a
        # million labelled processes is no million-entry dict.
        self.keep_names = True

    def chunks(self) -> Iterator[Chunk]:
        """Every row, a chunk at a time; once they are all read, every
        group is named and ``rows`` counts them."""
        raise NotImplementedError

    def calls_of(self, keys: set[int]) -> dict[int, str]:
        """What the rows of a few pid keys run (the last row of a key)."""
        raise NotImplementedError

    def close(self) -> None:
        pass

    def intern(self, table: dict[Any, Any], names: list[Any], key: Any,
               text: Callable[[], str]) -> int:
        found = table.get(key)
        if found is None:
            found = table[key] = len(names)
            names.append(text())
        return found

    def pid_text(self, key: int) -> str:
        return f"<0.{key & 0xFFFFFFFF}.{key >> 32}>"

    @property
    def calls_by_name(self) -> dict[str, int]:
        return {name: i for i, name in enumerate(self.call_names)}


class Loaded(Snapshot):
    """One snapshot, in columns: every chunk's rows appended."""

    def __init__(self, path: str, header: dict[Any, Any]) -> None:
        super().__init__(path, header)
        self.keys = array("q")
        self.groups = array("i")
        self.calls = array("i")
        self.memory = array("q")
        self.binary = array("q")
        self.binary_count = array("q")
        self.queue = array("q")

    def rows_of(self, keys: set[int]) -> dict[int, int]:
        """The rows of a few pid keys, in one pass: no index of every row
        (a million-entry dict is ~100 MB)."""
        if not keys:
            return {}
        rows = compress(range(len(self.keys)),
                        map(keys.__contains__, self.keys))
        return {self.keys[i]: i for i in rows}

    def chunks(self) -> Iterator[Chunk]:
        """The columns as one chunk."""
        rows = self.rows_of(set(self.names))
        self.rows = len(self.keys)
        yield Chunk(self.keys, self.groups, self.calls, self.memory,
                    self.binary, {row: self.names[key]
                                  for key, row in rows.items()})

    def calls_of(self, keys: set[int]) -> dict[int, str]:
        return {key: self.call_names[self.calls[row]]
                for key, row in self.rows_of(keys).items()}


class Stream(Snapshot):
    """One snapshot, its rows read from its sections on each pass, a
    chunk at a time: what it holds is its names and small sections,
    whatever the number of processes."""

    def __init__(self, path: str, header: dict[Any, Any],
                 sections: Sections) -> None:
        super().__init__(path, header)
        self._sections = sections
        self.creation = header.get("creation")
        try:
            if not sections.count:
                raise SnapshotError(f"{path} holds no processes")
            for kind, term in sections.small:
                _add_section(self, kind, term)
        except BaseException:
            sections.close()
            raise
        # Read before any row: with the ancestors (format 3) the groups
        # are named by them, and no name or label need be kept.
        self.keep_names = self.ancestors is None

    def chunks(self) -> Iterator[Chunk]:
        rows = 0
        for term in self._sections.processes():
            chunk = _checked(self, term)
            rows += len(chunk.keys)
            yield chunk
        self.rows = rows
        name_placed(self)

    def calls_of(self, keys: set[int]) -> dict[int, str]:
        found: dict[int, str] = {}
        if not keys:
            return found
        for term in self._sections.processes():
            chunk = _checked(self, term)
            for row in compress(range(len(chunk.keys)),
                                map(keys.__contains__, chunk.keys)):
                found[chunk.keys[row]] = self.call_names[chunk.calls[row]]
        return found

    def close(self) -> None:
        self._sections.close()


def _checked(snap: Snapshot, term: Any) -> Chunk:
    try:
        return _chunk(snap, term)
    except _DAMAGE:
        raise SnapshotError(f"{snap.path} is damaged (unexpected rows in "
                            "its processes)") from None


def open_file(path: str) -> Stream:
    """A snapshot file, for passes over its rows (the file stays open
    until close())."""
    header, sections = open_sections(path)
    return Stream(path, header, sections)


def held(path: str, header: dict[str, Any],
         sections: list[tuple[bytes, bytes]]) -> Stream:
    """A snapshot just taken (and written to ``path``), for passes over its
    rows from the bytes in hand, its header as the file holds it (JSON)."""
    return Stream(path, json.loads(json.dumps(header)),
                  held_sections(path, sections))


def check_taken(path: str, header: dict[str, Any],
                sections: list[tuple[bytes, bytes]]) -> Stream:
    """held(), each section decoded and checked once as a file's are: what
    a file may not hold, the node may not have sent (a BadReply, not a
    damaged file)."""
    from beam_probe.errors import BadReply

    try:
        snap = held(path, header, sections)
        for _chunk_ in snap.chunks():
            pass
        return snap
    except SnapshotError as exc:
        raise BadReply(f"beam_probe_snapshot's reply from "
                       f"{header['node']} makes no snapshot: {exc}") \
            from None


_DAMAGE = (TypeError, ValueError, IndexError, AttributeError, KeyError,
           OverflowError)


def _key(pid: Pid) -> int:
    return (pid.serial << 32) | pid.id  # as _pid_keys makes them


def load(path: str) -> Loaded:
    """A snapshot file, read into columns."""
    header, sections = read(path)
    return _build(path, header, sections)


def _build(path: str, header: dict[str, Any],
           sections: Iterator[tuple[str, Any]]) -> Loaded:
    snap = Loaded(path, header)
    seen = set()
    for kind, term in sections:
        seen.add(kind)
        if kind == "processes":
            try:
                _add_rows(snap, term)
            except _DAMAGE:
                raise SnapshotError(f"{path} is damaged (unexpected rows "
                                    f"in its {kind})") from None
        else:
            _add_section(snap, kind, term)
    if "processes" not in seen:
        raise SnapshotError(f"{path} holds no processes")
    snap.creation = header.get("creation")
    name_placed(snap)
    return snap


def _add_section(snap: Snapshot, kind: str, term: Any) -> None:
    """A section other than a chunk of processes."""
    try:
        if kind == "ancestors":
            snap.ancestors = {_key(pid): _class(c) for pid, c in term}
        elif kind == "tables":
            snap.tables = [_table(snap, t) for t in term]
        elif kind == "ports":
            snap.ports = [_port(p) for p in term]
    except _DAMAGE:
        raise SnapshotError(f"{snap.path} is damaged (unexpected rows in "
                            f"its {kind})") from None


# Code that says little of what a process is for: proc_lib's (a fun's, an
# M:F/A's) and a fun's. A walk that ends at an ancestor running it names
# the ancestor by its pid instead.
VAGUE = frozenset(("proc_lib:init_p/3", "proc_lib:init_p/5",
                   "erlang:apply/2"))


def _class(term: Any) -> tuple[Any, ...]:
    """An ancestor's class, in plain values: ("name", text), ("label",
    text), ("up", parent key, what it runs) or ("call", what it runs)."""
    kind = str(term[0])
    if kind == "up":
        return ("up", _key(term[1]), _mfa(term[2]))
    if kind == "call":
        return ("call", _mfa(term[1]))
    return (kind, _group_text(term))


def name_placed(snap: Snapshot) -> None:
    """Name each group known by its place in the tree: "what under whom",
    whom being the nearest named (registered or labelled) ancestor, with
    how many levels up when it is not the parent: "proc_lib:init_p/5
    under bp_item_sup_sup (2 up)". An ancestor tree that ends unnamed ends
    at the code of its last ancestor, or its pid when that code says
    little, never "X under X". Files of formats 1 and 2 hold no
    ancestors: there the parent's own name, label or code is used."""
    calls_of: dict[int, str] = {}
    if snap.ancestors is None:
        # The few parents that are neither named nor labelled are found
        # in one pass, with no index of every row.
        calls_of = snap.calls_of({parent for _g, _w, parent in snap.placed
                                  if parent not in snap.names
                                  and parent not in snap.labels})
    for group, what, parent in snap.placed:
        under, depth = (_walk(snap.ancestors, parent) if snap.ancestors
                        is not None else _parent_only(snap, parent,
                                                      calls_of))
        if under == what:
            under = snap.pid_text(parent)  # never "X under X"
        snap.group_names[group] = f"{what} under {under}" + (
            f" ({depth} up)" if depth > 1 else "")


def _walk(ancestors: dict[int, tuple[Any, ...]], parent: int) -> tuple[str, int]:
    """Up from ``parent`` to the first named ancestor: its name and how
    many levels up it is (1: the parent)."""
    key, depth, last = parent, 1, None
    while True:
        found = ancestors.get(key)
        if found is None or found[0] == "up" and depth > MAX_WALK:
            # Gone, or past the walk: the last one reached.
            if last is None:
                return _pid_text(key), depth
            last_key, last_what, last_depth = last
            return (_pid_text(last_key) if last_what in VAGUE
                    else last_what), last_depth
        if found[0] != "up":
            return found[1], depth
        last = (key, found[2], depth)
        key, depth = found[1], depth + 1


# The node walks at most snapshot.MAX_DEPTH levels; a longer chain in a
# crafted file is not followed further (nor round a cycle).
MAX_WALK = 16


def _parent_only(snap: Snapshot, parent: int, calls_of: dict[int, str]
                 ) -> tuple[str, int]:
    if parent in snap.names:
        return snap.names[parent], 1
    if parent in snap.labels:
        return snap.labels[parent], 1
    if parent in calls_of:
        return calls_of[parent], 1
    return snap.pid_text(parent), 1


def _pid_text(key: int) -> str:
    return f"<0.{key & 0xFFFFFFFF}.{key >> 32}>"


_PIDS = re.compile(rb"<\d+\.(\d+)\.(\d+)>")


def _pid_keys(data: bytes, count: int) -> array[int]:
    """The keys of a chunk's pid column. Format 2: term_to_binary of each
    pid, all of one width (NEW_PID_EXT: 131, 88, the node atom, then the
    number, the serial and the creation, four bytes each); the serial's
    and the number's bytes are gathered by stride into eight-byte keys,
    with no Python step per pid. Format 1: "<0.1.0><0.2.0>...", read in
    one regex pass."""
    if data[:1] == b"<":
        return array("q", [(int(serial) << 32) | int(ident)
                           for ident, serial in _PIDS.findall(data)])
    if not count:
        return array("q")
    width, rest = divmod(len(data), count)
    if rest or width < 14 or data[0::width] != b"\x83" * count \
            or data[1::width] != b"X" * count:
        raise ValueError("a pid column of another shape")
    raw = bytearray(8 * count)
    for k in range(4):
        raw[k::8] = data[width - 8 + k::width]
        raw[4 + k::8] = data[width - 12 + k::width]
    return _big_endian(raw)


_LEAD = 1 << 56


def _numbers(column: Any) -> array[int]:
    """An integer column. Format 2: eight bytes each, big-endian, 2^56
    added (beam_probe_snapshot.erl says why): the lead byte cleared, the
    bytes taken whole. Format 1: a list of integers (a str when every one
    is below 256, as STRING_EXT decodes)."""
    if isinstance(column, bytes):
        count, rest = divmod(len(column), 8)
        if rest:
            raise ValueError("a column of another width")
        if column[0::8].count(1) == count:
            raw = bytearray(column)
            raw[0::8] = bytes(count)
            return _big_endian(raw)
        # A number of 2^56 or more: no lead byte of 1 to clear.
        wide = _big_endian(column, "Q")
        return array("q", [n - _LEAD for n in wide])
    return array("q", integers(column))


def _big_endian(raw: bytes | bytearray, code: str = "q") -> array[int]:
    out = array(code)
    out.frombytes(raw)
    if sys.byteorder == "little":
        out.byteswap()
    return out


def _interned(snap: Snapshot, column: Any, table: dict[Any, Any],
              names: list[Any],
              text: Callable[[Any], str]) -> array[int]:
    """A column sent as {Unique, Indices}: our ids, one per row."""
    unique, indices = column
    ids = [snap.intern(table, names, value, partial(text, value))
           for value in unique]
    return array("i", map(ids.__getitem__, _numbers(indices)))


def _rows_of(indices: array[int], wanted: set[int]) -> Iterator[tuple[int, int]]:
    """(row, index) of the rows whose index is in ``wanted`` (a few
    unique values): found by array.index, in C, not row by row."""
    for value in wanted:
        row = -1
        try:
            while True:
                row = indices.index(value, row + 1)
                yield row, value
        except ValueError:
            pass


def _group_text(group: Any) -> str:
    kind, value = group[0], group[1]
    if kind == "label":
        return f"label {format_term(value)}"
    if kind == "name":
        return str(value)
    return _mfa(value)


def _add_rows(snap: Loaded, term: Any) -> None:
    chunk = _chunk(snap, term)
    snap.keys.extend(chunk.keys)
    snap.groups.extend(chunk.groups)
    snap.calls.extend(chunk.calls)
    snap.memory.extend(chunk.memory)
    snap.binary.extend(chunk.binary)
    snap.binary_count.extend(_numbers(term["binary_count"]))
    snap.queue.extend(_numbers(term["message_queue_len"]))
    if not len(snap.binary_count) == len(snap.queue) == len(snap.keys):
        raise ValueError("columns of different lengths")


def _chunk(snap: Snapshot, chunk: Any) -> Chunk:
    """One process section's rows, its groups and calls interned in
    ``snap``, the names and labels kept there (keep_names)."""
    memory = _numbers(chunk["memory"])
    count = len(memory)
    keys = _pid_keys(chunk["pids"], count)
    binary = _numbers(chunk["binary_bytes"])
    calls = _interned(snap, chunk["initial_call"], snap._calls,
                      snap.call_names, _mfa)
    unique, group_indices = chunk["groups"]
    indices = _numbers(group_indices)
    group_ids = [_placed(snap, group) if group[0] == "parent" else
                 snap.intern(snap._groups, snap.group_names,
                             (group[0], group[1]),
                             partial(_group_text, group))
                 for group in unique]
    if any(group[0] == "parent" and len(group) == 2 for group in unique):
        # Formats 1 and 2: {parent, Pid}, what the process runs from its
        # own initial call, one group per row's call.
        _place_by_row(snap, unique, indices, group_ids, calls)
    names = chunk["names"]
    if isinstance(names, tuple):
        name_values, name_indices = names[0], _numbers(names[1])
        named = list(_rows_of(name_indices, {
            i for i, name in enumerate(name_values)
            if isinstance(name, Atom)}))
    else:  # format 1: a list, [] for a process without a name
        name_values, name_indices = names, names
        named = [(row, row) for row, name in enumerate(names)
                 if isinstance(name, Atom)]
    if not all(len(c) == count for c in
               [binary, keys, calls, indices, name_indices]):
        raise ValueError("columns of different lengths")
    if snap.keep_names:
        for row, value in _rows_of(indices, {
                i for i, group in enumerate(unique) if group[0] == "label"}):
            snap.labels[keys[row]] = snap.group_names[group_ids[value]]
    rows_named = {row: str(name_values[value]) for row, value in named}
    if snap.keep_names:
        for row, name in rows_named.items():
            snap.names[keys[row]] = name
    return Chunk(keys, array("i", map(group_ids.__getitem__, indices)),
                 calls, memory, binary, rows_named)


def _placed(snap: Snapshot, group: tuple[Any, ...]) -> int:
    """The id of a group known by its place: {parent, What, Pid} (format
    3); named once the ancestors are read. Formats 1-2's {parent, Pid}
    are given their ids per row (_place_by_row)."""
    if len(group) == 2:
        return -1
    return _placed_id(snap, _mfa(group[1]), _key(group[2]))


def _placed_id(snap: Snapshot, what: str, parent: int) -> int:
    key = ("parent", what, parent)
    found = snap._groups.get(key)
    if found is None:
        found = snap._groups[key] = len(snap.group_names)
        snap.group_names.append("")
        snap.placed.append((found, what, parent))
    return found


def _place_by_row(snap: Snapshot, unique: list[Any], indices: array[int],
                  group_ids: list[Any], calls: array[int]) -> None:
    """Formats 1 and 2: a {parent, Pid} group is what each of its rows
    runs, under that parent."""
    for row, value in _rows_of(indices, {
            i for i, group in enumerate(unique) if group[0] == "parent"}):
        group_ids.append(_placed_id(snap, snap.call_names[calls[row]],
                                    _key(unique[value][1])))
        indices[row] = len(group_ids) - 1


# A table's rows and words, a port's bytes: counts of a 64-bit node, and
# in a file anything else is damage (a ValueError, as _build reads it).
# Within 2^62 so that sums and the text's float never overflow.
_MAX_COUNT = 2**62


def _count(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) \
            or not 0 <= value < _MAX_COUNT:
        raise ValueError("a count out of range")
    return value


def _gone_or_count(value: Any) -> int:
    # ets:info answers 'undefined' for a table gone mid-snapshot.
    return 0 if isinstance(value, Atom) else _count(value)


def _table(snap: Snapshot, t: tuple[Any, ...]) -> dict[Any, Any]:
    ident, name, owner, size, words, kind = t
    owner_key = _key(owner) if isinstance(owner, Pid) else None
    return {"id": format_term(ident), "name": format_term(name),
            "owner": owner_key, "rows": _gone_or_count(size),
            "bytes": _gone_or_count(words) * snap.header.get("wordsize", 8),
            "type": format_term(kind)}


def _port(p: tuple[Any, ...]) -> dict[Any, Any]:
    port, name, _connected, memory = p
    return {"id": str(port),
            "name": format_term(name[1]) if isinstance(name, tuple)
            else "?",
            "bytes": _count(memory[1]) if isinstance(memory, tuple) else 0}


# -- comparing ---------------------------------------------------------------


__all__ = ["Chunk", "Loaded", "Snapshot", "Stream", "check_taken", "held",
           "load", "open_file"]
