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
from array import array
from typing import Any, Callable

from ..erldist.terms import Atom, Pid, format_term
from .snapshot import SnapshotError, read

MEMORY_KEYS = ("total", "processes", "binary", "ets", "atom", "code",
               "system")
TOP_GROUPS = 200
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

    def rows_of(self, keys: set[int]) -> dict[int, int]:
        """The rows of a few pid keys, in one pass: no index of every row
        (a million-entry dict is ~100 MB)."""
        if not keys:
            return {}
        return {key: i for i, key in enumerate(self.keys) if key in keys}

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
    def _calls_by_name(self) -> dict[str, int]:
        return {name: i for i, name in enumerate(self.call_names)}


def _key(pid: Pid) -> int:
    return (pid.serial << 32) | pid.id  # as _pid_key, for a decoded pid


def load(path: str) -> Loaded:
    header, sections = read(path)
    snap = Loaded(path, header)
    parents: list[tuple[int, int]] = []  # (row, parent key)
    seen = set()
    for kind, term in sections:
        seen.add(kind)
        try:
            if kind == "processes":
                _add_rows(snap, term, parents)
            elif kind == "tables":
                snap.tables = [_table(snap, t) for t in term]
            elif kind == "ports":
                snap.ports = [_port(p) for p in term]
        except (TypeError, ValueError, IndexError, AttributeError,
                KeyError):
            raise SnapshotError(f"{path} is damaged (unexpected rows)") \
                from None
    if "processes" not in seen:
        raise SnapshotError(f"{path} holds no processes")
    snap.creation = header.get("creation")
    # A proc_lib process known only by its parent: named after the parent
    # (its registered name or label, else its initial call). The few
    # parents are found in one pass, with no index of every row.
    wanted = {parent for _, parent in parents
              if parent not in snap.names and parent not in snap.labels}
    rows_of = snap.rows_of(wanted)
    for row, parent in parents:
        if parent in snap.names:
            under = snap.names[parent]
        elif parent in snap.labels:
            under = snap.labels[parent]
        elif parent in rows_of:
            under = snap.call_names[snap.calls[rows_of[parent]]]
        else:
            under = snap.pid_text(parent)
        call = snap.call_names[snap.calls[row]]
        snap.groups[row] = snap.intern(snap._groups, snap.group_names,
                                       ("parent", call, under),
                                       lambda: f"{call} under {under}")
    return snap


def _pid_key(text: str) -> int:
    """'<0.123.4>' -> its key: the serial, then the number."""
    _node, ident, serial = text[1:-1].split(".")
    return (int(serial) << 32) | int(ident)


_PIDS = re.compile(rb"<\d+\.(\d+)\.(\d+)>")


def _pid_keys(data: bytes) -> list[int]:
    """The keys of "<0.1.0><0.2.0>...", the pid column of a chunk, in one
    pass (one string and one split per pid took ~1 s a million)."""
    return [(int(serial) << 32) | int(ident)
            for ident, serial in _PIDS.findall(data)]


def _interned(snap: Loaded, column: Any, table: dict, names: list,
              text: Callable[[Any], str]) -> list[int]:
    """A column sent as {Unique, Indices}: our ids, one per row."""
    unique, indices = column
    ids = [snap.intern(table, names, value, lambda v=value: text(v))
           for value in unique]
    return [ids[i] for i in _integers(indices)]


def _group_text(group: Any) -> str:
    kind, value = group
    if kind == "label":
        return f"label {format_term(value)}"
    if kind == "name":
        return str(value)
    return _mfa(value)


def _add_rows(snap: Loaded, chunk: Any, parents: list) -> None:
    keys = _pid_keys(chunk["pids"])
    columns = [_integers(chunk[name]) for name in (
        "memory", "binary_bytes", "binary_count", "message_queue_len")]
    calls = _interned(snap, chunk["initial_call"], snap._calls,
                      snap.call_names, _mfa)
    unique, indices = chunk["groups"]
    group_ids = []
    for group in unique:
        if group[0] == "parent":
            group_ids.append(-1)
        else:
            key = (group[0], group[1])
            group_ids.append(snap.intern(snap._groups, snap.group_names,
                                         key, lambda g=group: _group_text(g)))
    indices = _integers(indices)
    names = chunk["names"]
    if not all(len(c) == len(keys) for c in
               [*columns, calls, indices, names]):
        raise ValueError("columns of different lengths")
    start = len(snap.keys)
    for offset, (key, index, name) in enumerate(zip(keys, indices, names)):
        group_id = group_ids[index]
        if group_id < 0:
            parents.append((start + offset, _pid_key(str(unique[index][1]))))
            group_id = 0
        elif unique[index][0] == "label":
            snap.labels[key] = snap.group_names[group_id]
        if isinstance(name, Atom):
            snap.names[key] = str(name)
        snap.groups.append(group_id)
    snap.keys.extend(keys)
    snap.calls.extend(calls)
    for array_, column in zip((snap.memory, snap.binary, snap.binary_count,
                               snap.queue), columns):
        array_.extend(column)


def _integers(column: Any) -> Any:
    return [ord(c) for c in column] if isinstance(column, str) else column


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


def _alive_in(a: Loaded, b: Loaded) -> array:
    """For each row of a, its row in b (same process: pid and initial
    call), or -1. An array: a list of a million row numbers would be ~40
    MB of int objects. Found through a dict of b's rows, freed at once
    (erlang:processes() lists pids in its table's order, which is not pid
    order once the table is over 32,768, measured, so no merge)."""
    index = {key: j for j, key in enumerate(b.keys)}
    # a's initial-call ids as b's, to compare numbers, not strings.
    translate = [b._calls_by_name.get(name, -2) for name in a.call_names]
    b_calls, a_calls = b.calls, a.calls
    found = [index.get(key, -1) for key in a.keys]
    del index
    return array("q", [j if j >= 0 and translate[a_calls[i]] == b_calls[j]
                       else -1 for i, j in enumerate(found)])


def _per_group(snap: Loaded, rows: Any = None
               ) -> tuple[list[int], list[int], list[int]]:
    """Count, memory and refc binary bytes per group id, of every row or
    of ``rows`` (a mask: 1 for the rows to count). Sums by id in lists,
    then by name once: a dict lookup by name per row was most of a diff."""
    size = len(snap.group_names)
    count, memory, binary = [0] * size, [0] * size, [0] * size
    for g, m, b, keep in zip(snap.groups, snap.memory, snap.binary,
                             rows if rows is not None
                             else _ones(len(snap.keys))):
        if keep:
            count[g] += 1
            memory[g] += m
            binary[g] += b
    return count, memory, binary


def _ones(n: int) -> bytes:
    return b"\x01" * n


def _groups(a: Loaded, b: Loaded, a_in_b: array) -> list[dict]:
    """Per group (b's for the living and born, a's for the dead): counts,
    born, died, and the change in bytes, largest growth first."""
    in_a = bytearray(len(b.keys))
    died = bytearray(len(a.keys))
    for i, j in enumerate(a_in_b):
        if j < 0:
            died[i] = 1
        else:
            in_a[j] = 1
    born = bytes(1 - x for x in in_a)
    stats: dict[str, dict] = {}

    def entry(name: str) -> dict:
        found = stats.get(name)
        if found is None:
            found = stats[name] = {"what": name, "size_bytes": 0,
                                   "binary_bytes": 0, "+": 0, "-": 0,
                                   "before": 0, "after": 0}
        return found

    for snap, sign, key, moved in ((a, -1, "before", died),
                                   (b, 1, "after", born)):
        count, memory, binary = _per_group(snap)
        changed = _per_group(snap, moved)[0]
        for g, name in enumerate(snap.group_names):
            if count[g]:
                e = entry(name)
                e[key] += count[g]
                e["size_bytes"] += sign * memory[g]
                e["binary_bytes"] += sign * binary[g]
                e["-" if sign < 0 else "+"] += changed[g]
    return sorted(stats.values(),
                  key=lambda e: (-(e["size_bytes"] + e["binary_bytes"]),
                                 e["what"]))


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


def _atoms(a: Loaded, b: Loaded) -> dict:
    first, last = a.header["atom_count"], b.header["atom_count"]
    start = b.header.get("atoms_from", last)
    names = b.header.get("atoms", [])
    known = [names[i - start] for i in range(max(first, start), last)
             if 0 <= i - start < len(names)]
    return {"added": last - first, "names": known[:TOP_ROWS],
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
    first_in_last = _alive_in(first, last)
    before, after = _summary(first), _summary(last)
    change = {k: (after["memory"][k] or 0) - (before["memory"][k] or 0)
              for k in MEMORY_KEYS}
    details = _groups(first, last, first_in_last)
    result: dict[str, Any] = {"before": before, "after": after}
    if len(snaps) == 3:
        result["middle"] = _summary(snaps[1])
        result["suspects"] = suspects(*snaps)
    result["change"] = {
        "size_bytes": change["total"], "memory": change,
        "details": details[:TOP_GROUPS], "groups": len(details)}
    result["ets"] = _tables(first, last)[:TOP_ROWS]
    result["atoms"] = _atoms(first, last)
    result["ports"] = _ports(first, last)
    return result


def suspects(a: Loaded, b: Loaded, c: Loaded) -> dict:
    """What was made between a and b and is still there at c, what kept
    growing through both intervals: the three-snapshot rule."""
    a_in_b, b_in_c = _alive_in(a, b), _alive_in(b, c)
    in_a = bytearray(len(b.keys))
    for j in a_in_b:
        if j >= 0:
            in_a[j] = 1
    kept: dict[str, dict] = {}
    growing = []
    for j in range(len(b.keys)):
        k = b_in_c[j]
        if k < 0:
            continue
        if not in_a[j]:
            name = c.group_names[c.groups[k]]
            e = kept.setdefault(name, {"what": name, "count": 0,
                                       "bytes": 0, "binary_bytes": 0,
                                       "growth": 0})
            e["count"] += 1
            e["bytes"] += c.memory[k]
            e["binary_bytes"] += c.binary[k]
            e["growth"] += c.memory[k] - b.memory[j]
    for i, j in enumerate(a_in_b):
        if j < 0 or b_in_c[j] < 0:
            continue
        k = b_in_c[j]
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
    rising_groups = [{"what": g, "counts": [counts[0].get(g, 0),
                                            counts[1].get(g, 0), n]}
                     for g, n in counts[2].items()
                     if counts[0].get(g, 0) < counts[1].get(g, 0) < n]
    tables = _tables_kept(a, b, c)
    ports_a = {p["id"] for p in a.ports}
    ports_c = {p["id"] for p in c.ports}
    ports = [p["name"] for p in b.ports
             if p["id"] not in ports_a and p["id"] in ports_c]
    atoms_ab = b.header["atom_count"] - a.header["atom_count"]
    atoms_bc = c.header["atom_count"] - b.header["atom_count"]
    return {
        "born_and_kept": sorted(kept.values(),
                                key=lambda e: (-e["count"], e["what"])
                                )[:TOP_GROUPS],
        "growing_processes": growing[:TOP_ROWS],
        "groups_rising": sorted(rising_groups,
                                key=lambda g: (g["counts"][0]
                                               - g["counts"][2],
                                               g["what"]))[:TOP_ROWS],
        "ets": tables[:TOP_ROWS],
        "ports_born_and_kept": ports[:TOP_ROWS],
        "atoms": {"added": [atoms_ab, atoms_bc],
                  "rising": atoms_ab > 0 and atoms_bc > 0},
    }


def _counts(snap: Loaded) -> dict[str, int]:
    counts: dict[str, int] = {}
    for g, n in enumerate(_per_group(snap)[0]):
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
