"""diff: memwatch's HeapDiff between two snapshots, and the three-snapshot
rule for three. Offline: snapshot files in, a result out.

A snapshot's processes are held in columns (arrays of machine integers,
groups and initial calls interned), about 50 bytes a process, so three
snapshots of a million processes fit in a few hundred MB.

Identity across snapshots is the pid and its initial call together: a
pid's serial wraps on a long-running node, and a reused pid with another
initial call is another process.
"""

from __future__ import annotations

import re
import sys
from array import array
from collections import Counter, deque
from itertools import compress, repeat
from operator import eq, not_
from typing import Any, Callable, Iterable, Iterator

from beam_probe.erldist.terms import Atom, Pid, format_term, integers
from beam_probe.snapshots.take import SnapshotError, read

MEMORY_KEYS = ("total", "processes", "binary", "ets", "atom", "code",
               "system")
TOP_GROUPS = 200
# Pids of a group's processes to look at next (proc-info, trace-gc): this
# many in JSON, the text shows the first few.
EXAMPLES = 10
TOP_ROWS = 50
# A long-lived process is a suspect when its memory (or its refc binary
# bytes) rose in both intervals by this much in all: an idle system
# process's heap moves by a few KB between collections.
MIN_GROWTH = 64 * 1024


def _mfa(term: Any) -> str:
    if isinstance(term, tuple) and len(term) == 3:
        return f"{term[0]}:{term[1]}/{term[2]}"
    return format_term(term)


class Loaded:
    """One snapshot, in columns."""

    def __init__(self, path: str, header: dict) -> None:
        self.path, self.header = path, header
        self.node: str = header["node"]
        self.epoch = float(header.get("epoch", 0))
        self.creation: int | None = None
        self.keys = array("q")
        self.groups = array("i")
        self.calls = array("i")
        self.memory = array("q")
        self.binary = array("q")
        self.binary_count = array("q")
        self.queue = array("q")
        self.group_names: list[str] = []
        self.call_names: list[str] = []
        self._groups: dict[Any, int] = {}
        self._calls: dict[Any, int] = {}
        self.names: dict[int, str] = {}
        self.labels: dict[int, str] = {}
        self.tables: list[dict] = []
        self.ports: list[dict] = []
        self.counts: list[int] | None = None  # rows per group id
        # Groups named by their place in the tree, named once every section
        # is read: (group id, what the process runs, its parent's key).
        self.placed: list[tuple[int, str, int]] = []
        # Format 3: each ancestor's class, by pid key (see name_placed).
        self.ancestors: dict[int, tuple] | None = None

    def rows_of(self, keys: set[int]) -> dict[int, int]:
        """The rows of a few pid keys, in one pass: no index of every row
        (a million-entry dict is ~100 MB)."""
        if not keys:
            return {}
        rows = compress(range(len(self.keys)),
                        map(keys.__contains__, self.keys))
        return {self.keys[i]: i for i in rows}

    def intern(self, table: dict, names: list, key: Any,
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


def _key(pid: Pid) -> int:
    return (pid.serial << 32) | pid.id  # as _pid_keys makes them


def load(path: str) -> Loaded:
    header, sections = read(path)
    snap = Loaded(path, header)
    seen = set()
    for kind, term in sections:
        seen.add(kind)
        try:
            if kind == "processes":
                _add_rows(snap, term)
            elif kind == "ancestors":
                snap.ancestors = {_key(pid): _class(c) for pid, c in term}
            elif kind == "tables":
                snap.tables = [_table(snap, t) for t in term]
            elif kind == "ports":
                snap.ports = [_port(p) for p in term]
        except (TypeError, ValueError, IndexError, AttributeError,
                KeyError, OverflowError):
            raise SnapshotError(f"{path} is damaged (unexpected rows)") \
                from None
    if "processes" not in seen:
        raise SnapshotError(f"{path} holds no processes")
    snap.creation = header.get("creation")
    name_placed(snap)
    return snap


# Code that says little of what a process is for: proc_lib's (a fun's, an
# M:F/A's) and a fun's. A walk that ends at an ancestor running it names
# the ancestor by its pid instead.
VAGUE = frozenset(("proc_lib:init_p/3", "proc_lib:init_p/5",
                   "erlang:apply/2"))


def _class(term: Any) -> tuple:
    """An ancestor's class, in plain values: ("name", text), ("label",
    text), ("up", parent key, what it runs) or ("call", what it runs)."""
    kind = str(term[0])
    if kind == "up":
        return ("up", _key(term[1]), _mfa(term[2]))
    if kind == "call":
        return ("call", _mfa(term[1]))
    return (kind, _group_text(term))


def name_placed(snap: Loaded) -> None:
    """Name each group known by its place in the tree: "what under whom",
    whom being the nearest named (registered or labelled) ancestor, with
    how many levels up when it is not the parent: "proc_lib:init_p/5
    under bp_item_sup_sup (2 up)". An ancestor tree that ends unnamed ends
    at the code of its last ancestor, or its pid when that code says
    little, never "X under X". Files of formats 1 and 2 hold no
    ancestors: there the parent's own name, label or code is used."""
    rows_of: dict[int, int] = {}
    if snap.ancestors is None:
        # The few parents that are neither named nor labelled are found
        # in one pass, with no index of every row.
        rows_of = snap.rows_of({parent for _g, _w, parent in snap.placed
                                if parent not in snap.names
                                and parent not in snap.labels})
    for group, what, parent in snap.placed:
        under, depth = (_walk(snap.ancestors, parent) if snap.ancestors
                        is not None else _parent_only(snap, parent, rows_of))
        if under == what:
            under = snap.pid_text(parent)  # never "X under X"
        snap.group_names[group] = f"{what} under {under}" + (
            f" ({depth} up)" if depth > 1 else "")


def _walk(ancestors: dict[int, tuple], parent: int) -> tuple[str, int]:
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


def _parent_only(snap: Loaded, parent: int, rows_of: dict[int, int]
                 ) -> tuple[str, int]:
    if parent in snap.names:
        return snap.names[parent], 1
    if parent in snap.labels:
        return snap.labels[parent], 1
    if parent in rows_of:
        return snap.call_names[snap.calls[rows_of[parent]]], 1
    return snap.pid_text(parent), 1


def _pid_text(key: int) -> str:
    return f"<0.{key & 0xFFFFFFFF}.{key >> 32}>"


_PIDS = re.compile(rb"<\d+\.(\d+)\.(\d+)>")


def _pid_keys(data: bytes, count: int) -> array:
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


def _numbers(column: Any) -> array:
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


def _big_endian(raw: bytes | bytearray, code: str = "q") -> array:
    out = array(code)
    out.frombytes(raw)
    if sys.byteorder == "little":
        out.byteswap()
    return out


def _interned(snap: Loaded, column: Any, table: dict, names: list,
              text: Callable[[Any], str]) -> array:
    """A column sent as {Unique, Indices}: our ids, one per row."""
    unique, indices = column
    ids = [snap.intern(table, names, value, lambda v=value: text(v))
           for value in unique]
    return array("i", map(ids.__getitem__, _numbers(indices)))


def _rows_of(indices: array, wanted: set[int]) -> Iterator[tuple[int, int]]:
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


def _add_rows(snap: Loaded, chunk: Any) -> None:
    memory = _numbers(chunk["memory"])
    count = len(memory)
    keys = _pid_keys(chunk["pids"], count)
    columns = [memory] + [_numbers(chunk[name]) for name in (
        "binary_bytes", "binary_count", "message_queue_len")]
    calls = _interned(snap, chunk["initial_call"], snap._calls,
                      snap.call_names, _mfa)
    unique, group_indices = chunk["groups"]
    indices = _numbers(group_indices)
    group_ids = [_placed(snap, group) if group[0] == "parent" else
                 snap.intern(snap._groups, snap.group_names,
                             (group[0], group[1]),
                             lambda g=group: _group_text(g))
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
               [*columns, keys, calls, indices, name_indices]):
        raise ValueError("columns of different lengths")
    start = len(snap.keys)
    for row, value in _rows_of(indices, {
            i for i, group in enumerate(unique) if group[0] == "label"}):
        snap.labels[keys[row]] = snap.group_names[group_ids[value]]
    for row, value in named:
        snap.names[keys[row]] = str(name_values[value])
    snap.groups.extend(map(group_ids.__getitem__, indices))
    snap.keys.extend(keys)
    snap.calls.extend(calls)
    for array_, column in zip((snap.memory, snap.binary, snap.binary_count,
                               snap.queue), columns):
        array_.extend(column)


def _placed(snap: Loaded, group: tuple) -> int:
    """The id of a group known by its place: {parent, What, Pid} (format
    3); named once the ancestors are read. Formats 1-2's {parent, Pid}
    are given their ids per row (_place_by_row)."""
    if len(group) == 2:
        return -1
    return _placed_id(snap, _mfa(group[1]), _key(group[2]))


def _placed_id(snap: Loaded, what: str, parent: int) -> int:
    key = ("parent", what, parent)
    found = snap._groups.get(key)
    if found is None:
        found = snap._groups[key] = len(snap.group_names)
        snap.group_names.append("")
        snap.placed.append((found, what, parent))
    return found


def _place_by_row(snap: Loaded, unique: list, indices: array,
                  group_ids: list, calls: array) -> None:
    """Formats 1 and 2: a {parent, Pid} group is what each of its rows
    runs, under that parent."""
    for row, value in _rows_of(indices, {
            i for i, group in enumerate(unique) if group[0] == "parent"}):
        group_ids.append(_placed_id(snap, snap.call_names[calls[row]],
                                    _key(unique[value][1])))
        indices[row] = len(group_ids) - 1


def _table(snap: Loaded, t: tuple) -> dict:
    ident, name, owner, size, words, kind = t
    owner_key = _key(owner) if isinstance(owner, Pid) else None
    return {"id": format_term(ident), "name": format_term(name),
            "owner": owner_key,
            "rows": size if isinstance(size, int) else 0,
            "bytes": words * snap.header.get("wordsize", 8)
            if isinstance(words, int) else 0,
            "type": format_term(kind)}


def _port(p: tuple) -> dict:
    port, name, _connected, memory = p
    return {"id": str(port),
            "name": format_term(name[1]) if isinstance(name, tuple)
            else "?",
            "bytes": memory[1] if isinstance(memory, tuple) else 0}


# -- comparing ---------------------------------------------------------------

def _owners(snap: Loaded) -> dict[int | None, str]:
    """The group of each table owner of a snapshot."""
    keys = {t["owner"] for t in snap.tables if t["owner"] is not None}
    rows = snap.rows_of(keys)
    out: dict[int | None, str] = {None: "?"}
    for key in keys:
        out[key] = snap.group_names[snap.groups[rows[key]]] \
            if key in rows else snap.pid_text(key)
    return out


def _summary(snap: Loaded) -> dict:
    sample = snap.header["sample"]
    return {"node": snap.node, "time": snap.header.get("time"),
            "memory": {k: sample.get(k) for k in MEMORY_KEYS},
            "alloc_used": sample.get("alloc_used"),
            "alloc_allocated": sample.get("alloc_allocated"),
            "processes": len(snap.keys), "ets_tables": len(snap.tables),
            "ports": len(snap.ports),
            "atoms": snap.header.get("atom_count")}


# The passes over every row below run in C (map, zip, compress, Counter,
# bytes): a Python statement per row costs ~0.1 s a million, and a diff of
# three 1M-process snapshots took 8.4 s that way.
_FOUND = (-1).__lt__  # a row number, not -1
_FLIP = bytes([1, 0]) + bytes(254)  # a 0/1 mask's complement, by translate


def _rows_by_key(snap: Loaded) -> dict[int, int]:
    """Each pid key's row: ~100 MB at a million, so built once per diff,
    for the middle snapshot, and freed after."""
    return dict(zip(snap.keys, range(len(snap.keys))))


def _alive_in(a: Loaded, b: Loaded, index: dict[int, int] | None = None
              ) -> array:
    """For each row of a, its row in b (same process: pid and initial
    call), or -1. An array: a list of a million row numbers would be ~40
    MB of int objects. Found through ``index``, b's rows by key
    (erlang:processes() lists pids in its table's order, which is not pid
    order once the table is over 32,768, measured, so no merge)."""
    if index is None:
        index = _rows_by_key(b)
    found = array("q", map(index.get, a.keys, repeat(-1)))
    # A pid reused by a process of another initial call is another
    # process: a's initial-call ids as b's, compared as numbers.
    translate = [b.calls_by_name.get(name, -2) for name in a.call_names]
    same = map(eq, map(translate.__getitem__, a.calls),
               map(b.calls.__getitem__, found))
    for i in compress(range(len(found)), map(not_, same)):
        found[i] = -1
    return found


def _through(a_in_b: array, b_in_c: array) -> array:
    """a's rows in c, through b: a process alive in a and c was alive in
    b (one that died and whose pid was taken again is another)."""
    ext = b_in_c + array("q", [-1])  # a_in_b's -1 reads this last -1
    return array("q", map(ext.__getitem__, a_in_b))


def _inverse(forward: array, size: int) -> array:
    """The rows of b to a's rows, from a's rows to b's (-1: none)."""
    back = array("q", [-1]) * size
    found = bytes(map(_FOUND, forward))
    deque(map(back.__setitem__, compress(forward, found),
              compress(range(len(forward)), found)), maxlen=0)
    return back


def _per_group(snap: Loaded, rows: Iterable[int] | None = None
               ) -> list[int]:
    """How many rows of each group id: of every row, or of ``rows``."""
    if rows is None and snap.counts is not None:
        return snap.counts
    counted = Counter(snap.groups if rows is None
                      else map(snap.groups.__getitem__, rows))
    counts = [counted.get(g, 0) for g in range(len(snap.group_names))]
    if rows is None:
        snap.counts = counts
    return counts


def _totals(snap: Loaded) -> tuple[list[int], list[int], list[int]]:
    """Count, memory and refc binary bytes per group id."""
    size = len(snap.group_names)
    memory, binary = [0] * size, [0] * size
    for g, m in zip(snap.groups, snap.memory):
        memory[g] += m
    # Most processes hold no refc binary: only those that do are visited.
    for g, b in compress(zip(snap.groups, snap.binary), snap.binary):
        binary[g] += b
    return _per_group(snap), memory, binary


def _groups(a: Loaded, b: Loaded, a_in_b: array) -> list[dict]:
    """Per group (b's for the living and born, a's for the dead): counts,
    born, died, and the change in bytes, largest growth first."""
    found = bytes(map(_FOUND, a_in_b))
    kept_a = _per_group(a, compress(range(len(a_in_b)), found))
    kept_b = _per_group(b, compress(a_in_b, found))
    stats: dict[str, dict] = {}

    def entry(name: str) -> dict:
        found = stats.get(name)
        if found is None:
            found = stats[name] = {"what": name, "size_bytes": 0,
                                   "binary_bytes": 0, "+": 0, "-": 0,
                                   "before": 0, "after": 0}
        return found

    for snap, sign, key, kept in ((a, -1, "before", kept_a),
                                  (b, 1, "after", kept_b)):
        count, memory, binary = _totals(snap)
        for g, name in enumerate(snap.group_names):
            if count[g]:
                e = entry(name)
                e[key] += count[g]
                e["size_bytes"] += sign * memory[g]
                e["binary_bytes"] += sign * binary[g]
                e["-" if sign < 0 else "+"] += count[g] - kept[g]
    return sorted(stats.values(),
                  key=lambda e: (-(e["size_bytes"] + e["binary_bytes"]),
                                 e["what"]))


def _examples(snap: Loaded, names: set[str], born: Iterable[int]
              ) -> dict[str, list[str]]:
    """Up to EXAMPLES pids per group of ``names`` in ``snap``: its rows in
    ``born`` first (the ones a leak hunt is about), then any. One pass at
    most over the rows, which stops once every group has its examples
    (a group with fewer processes has them all)."""
    ids = {g for g, name in enumerate(snap.group_names) if name in names}
    counts = _per_group(snap)
    want = {name: 0 for name in names}
    for g in ids:
        want[snap.group_names[g]] += counts[g]
    need = {name: min(EXAMPLES, n) for name, n in want.items()}
    out: dict[str, list[str]] = {name: [] for name in names}
    taken: set[int] = set()
    missing = sum(need.values())

    def take(rows: Iterable[int]) -> int:
        nonlocal missing
        for row in rows:
            g = snap.groups[row]
            if g not in ids or row in taken:
                continue
            name = snap.group_names[g]
            if len(out[name]) < need[name]:
                out[name].append(snap.pid_text(snap.keys[row]))
                taken.add(row)
                missing -= 1
                if not missing:
                    break
        return missing

    if take(born):
        take(range(len(snap.keys)))
    return out


def _tables(a: Loaded, b: Loaded) -> list[dict]:
    """Tables of b that are new since a or grew, largest growth first."""
    before = {t["id"]: t for t in a.tables}
    owners = _owners(b)
    out = []
    for t in b.tables:
        old = before.get(t["id"])
        if old is None or t["bytes"] > old["bytes"]:
            out.append({"name": t["name"], "id": t["id"],
                        "owner": owners[t["owner"]],
                        "new": old is None,
                        "rows_before": old["rows"] if old else 0,
                        "rows_after": t["rows"],
                        "bytes_before": old["bytes"] if old else 0,
                        "bytes_after": t["bytes"]})
    return sorted(out, key=lambda t: (t["bytes_before"] - t["bytes_after"],
                                      t["name"]))


# Our own node names (the pool's, name@host): atoms our connections add
# to a node the first time each name meets it. Ours, not the node's.
_OUR_ATOM = re.compile(r"beam_probe_[1-8]@")


def _atoms(a: Loaded, b: Loaded) -> dict:
    """Atoms made between a and b, ours left out: how many, and the names
    of those b's file holds."""
    first, last = a.header["atom_count"], b.header["atom_count"]
    start = b.header.get("atoms_from", last)
    names = b.header.get("atoms", [])
    # Only the indices whose names the file holds: the counts alone could
    # claim 10^12 atoms (checked when read, but never looped over).
    known = names[max(first, start) - start:max(0, last - start)]
    ours = sum(1 for name in known if _OUR_ATOM.match(name))
    theirs = [name for name in known if not _OUR_ATOM.match(name)]
    return {"added": last - first - ours, "names": theirs[:TOP_ROWS],
            "all_named": first >= start and len(known) == last - first}


def _ports(a: Loaded, b: Loaded) -> dict:
    old = {p["id"] for p in a.ports}
    new = [p["name"] for p in b.ports if p["id"] not in old]
    return {"before": len(a.ports), "after": len(b.ports),
            "new": new[:TOP_ROWS], "new_count": len(new)}


def check_pair(a: Loaded, b: Loaded, force: bool) -> None:
    if force:
        return
    if a.node != b.node:
        raise SnapshotError(f"{a.path} is of {a.node} and {b.path} of "
                            f"{b.node}: they cannot be compared (--force "
                            "to compare anyway)")
    if a.creation is not None and b.creation is not None and \
            a.creation != b.creation:
        raise SnapshotError(f"{a.path} and {b.path} are of two runs of "
                            f"{a.node} (it restarted between them): "
                            "--force to compare anyway")
    if b.epoch < a.epoch:
        raise SnapshotError(f"{b.path} was taken before {a.path}: give "
                            "the snapshots oldest first")


def heap_diff(snaps: list[Loaded], force: bool = False) -> dict:
    """Two snapshots: memwatch's HeapDiff. Three: the same between the
    first and the last, with the three-snapshot rule's suspects first."""
    if not 2 <= len(snaps) <= 3:
        raise SnapshotError("diff compares two or three snapshots "
                            f"(given {len(snaps)})")
    for a, b in zip(snaps, snaps[1:]):
        check_pair(a, b, force)
    first, last = snaps[0], snaps[-1]
    if len(snaps) == 2:
        first_in_last = _alive_in(first, last)
    else:
        # One index, of the middle snapshot's rows, serves both intervals:
        # the first's rows in it, and the last's (turned around).
        middle = snaps[1]
        index = _rows_by_key(middle)
        a_in_b = _alive_in(first, middle, index)
        c_in_b = _alive_in(last, middle, index)
        del index
        b_in_c = _inverse(c_in_b, len(middle.keys))
        first_in_last = _through(a_in_b, b_in_c)
    before, after = _summary(first), _summary(last)
    change = {k: (after["memory"][k] or 0) - (before["memory"][k] or 0)
              for k in MEMORY_KEYS}
    details = _groups(first, last, first_in_last)
    shown = details[:TOP_GROUPS]
    born = compress(range(len(last.keys)), bytes(map(
        _FOUND, _inverse(first_in_last, len(last.keys)))).translate(_FLIP))
    examples = _examples(last, {d["what"] for d in shown}, born)
    for d in shown:
        d["examples"] = examples[d["what"]]
    result: dict[str, Any] = {"before": before, "after": after}
    if len(snaps) == 3:
        result["middle"] = _summary(snaps[1])
        result["suspects"] = suspects(*snaps, a_in_b, b_in_c, c_in_b)
    result["change"] = {
        "size_bytes": change["total"], "memory": change,
        "details": shown, "groups": len(details)}
    result["ets"] = _tables(first, last)[:TOP_ROWS]
    result["atoms"] = _atoms(first, last)
    result["ports"] = _ports(first, last)
    # Whether the node ran Elixir (files of format 1 do not say): text
    # shows names in its syntax, as the commands on a live node do.
    result["elixir"] = bool(last.header.get("elixir"))
    return result


def suspects(a: Loaded, b: Loaded, c: Loaded, a_in_b: array,
             b_in_c: array, c_from_b: array) -> dict:
    """What was made between a and b and is still there at c, what kept
    growing through both intervals: the three-snapshot rule. The row maps
    between them as heap_diff finds them."""
    b_from_a = _inverse(a_in_b, len(b.keys))
    # Born between a and b (no row of a) and alive in c: two masks of b's
    # rows, ANDed as integers.
    born = bytes(map(_FOUND, b_from_a)).translate(_FLIP)
    alive = bytes(map(_FOUND, b_in_c))
    both = (int.from_bytes(born, "little")
            & int.from_bytes(alive, "little")).to_bytes(len(born), "little")
    kept: dict[str, dict] = {}
    for j in compress(range(len(both)), both):
        k = b_in_c[j]
        name = c.group_names[c.groups[k]]
        e = kept.setdefault(name, {"what": name, "count": 0,
                                   "bytes": 0, "binary_bytes": 0,
                                   "growth": 0, "examples": []})
        e["count"] += 1
        if len(e["examples"]) < EXAMPLES:
            e["examples"].append(c.pid_text(c.keys[k]))
        e["bytes"] += c.memory[k]
        e["binary_bytes"] += c.binary[k]
        e["growth"] += c.memory[k] - b.memory[j]
    # Growing: only a row of c of at least MIN_GROWTH bytes can have grown
    # by MIN_GROWTH; those few are followed back through b to a.
    candidates = set(compress(range(len(c.keys)),
                              map(MIN_GROWTH.__le__, c.memory)))
    candidates.update(compress(range(len(c.keys)),
                               map(MIN_GROWTH.__le__, c.binary)))
    growing = []
    for k in sorted(candidates):
        j = c_from_b[k]
        i = b_from_a[j] if j >= 0 else -1
        if i < 0:
            continue
        rows = []
        for name, col_a, col_b, col_c in (("memory", a.memory, b.memory,
                                           c.memory),
                                          ("binary_bytes", a.binary,
                                           b.binary, c.binary)):
            x, y, z = col_a[i], col_b[j], col_c[k]
            if x < y < z and z - x >= MIN_GROWTH:
                rows.append(name)
        if rows:
            key = c.keys[k]
            growing.append({
                "pid": c.pid_text(key),
                "what": c.group_names[c.groups[k]],
                "name": c.names.get(key),
                "rising": rows,
                "memory": [a.memory[i], b.memory[j], c.memory[k]],
                "binary_bytes": [a.binary[i], b.binary[j], c.binary[k]]})
    growing.sort(key=lambda r: -(r["memory"][2] - r["memory"][0]
                                 + r["binary_bytes"][2]
                                 - r["binary_bytes"][0]))
    counts = [_counts(s) for s in (a, b, c)]
    rising_groups = sorted(
        ({"what": g, "counts": [counts[0].get(g, 0), counts[1].get(g, 0), n]}
         for g, n in counts[2].items()
         if counts[0].get(g, 0) < counts[1].get(g, 0) < n),
        key=lambda g: (g["counts"][0] - g["counts"][2], g["what"]))[:TOP_ROWS]
    # Examples of the rising groups: the processes born since the second
    # snapshot first.
    born_c = compress(range(len(c.keys)), bytes(map(_FOUND, c_from_b))
                      .translate(_FLIP))
    rising_examples = _examples(c, {g["what"] for g in rising_groups},
                                born_c)
    for group in rising_groups:
        group["examples"] = rising_examples[group["what"]]
    tables = _tables_kept(a, b, c)
    ports_a = {p["id"] for p in a.ports}
    ports_c = {p["id"] for p in c.ports}
    ports = [p["name"] for p in b.ports
             if p["id"] not in ports_a and p["id"] in ports_c]
    atoms_ab, atoms_bc = _atoms(a, b)["added"], _atoms(b, c)["added"]
    return {
        "born_and_kept": sorted(kept.values(),
                                key=lambda e: (-e["count"], e["what"])
                                )[:TOP_GROUPS],
        "growing_processes": growing[:TOP_ROWS],
        "groups_rising": rising_groups,
        "ets": tables[:TOP_ROWS],
        "ports_born_and_kept": ports[:TOP_ROWS],
        "atoms": {"added": [atoms_ab, atoms_bc],
                  "rising": atoms_ab > 0 and atoms_bc > 0},
    }


def _counts(snap: Loaded) -> dict[str, int]:
    counts: dict[str, int] = {}
    for g, n in enumerate(_per_group(snap)):
        if n:
            name = snap.group_names[g]
            counts[name] = counts.get(name, 0) + n
    return counts


def _tables_kept(a: Loaded, b: Loaded, c: Loaded) -> list[dict]:
    """Tables born between a and b and alive at c, and tables that grew in
    both intervals."""
    ta = {t["id"]: t for t in a.tables}
    tc = {t["id"]: t for t in c.tables}
    owners = _owners(c)
    out = []
    for t in b.tables:
        now = tc.get(t["id"])
        if now is None:
            continue
        old = ta.get(t["id"])
        born = old is None
        grew = old is not None and old["bytes"] < t["bytes"] < now["bytes"]
        if born or grew:
            out.append({"name": now["name"], "id": now["id"],
                        "owner": owners[now["owner"]],
                        "born": born,
                        "rows": [old["rows"] if old else None, t["rows"],
                                 now["rows"]],
                        "bytes": [old["bytes"] if old else None,
                                  t["bytes"], now["bytes"]]})
    return sorted(out, key=lambda t: (-t["bytes"][2], t["name"]))


__all__ = ["Loaded", "heap_diff", "load", "suspects"]
