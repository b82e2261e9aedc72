"""diff: memwatch's HeapDiff between two snapshots, and the three-snapshot
rule for three. Offline: snapshot files in, a result out.

The snapshots arrive in columns (columns.py); every pass over their rows
below runs in C.

Identity across snapshots is the pid and its initial call together: a
pid's serial wraps on a long-running node, and a reused pid with another
initial call is another process.
"""

from __future__ import annotations

import re
from array import array
from collections import Counter, deque
from itertools import compress, repeat
from operator import eq, not_
from typing import Any, Callable, Iterable

from beam_probe.snapshots.columns import Loaded, load
from beam_probe.snapshots.format import SnapshotError


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

# A table is a suspect for its bytes only when they rose in both intervals
# by more than a table's own wobble in all: rows rewritten in place with
# terms of another size move ets:info(T, memory) with no leak at all.
# Measured on OTP 25, 40 rounds of every row rewritten: counters, small
# timestamps and refc binaries (their ProcBins) 0 B; 1,000 rows of small
# lists of 1-20 items wandered over 11 KB (4.5%) and rose in both of two
# intervals by up to 10 KB, 100,000 such rows over 97 KB (0.43%, the
# wobble grows with the square root of the rows), up to 74 KB in both;
# a steady RabbitMQ named 16 tables this way at +0.7 to 43 KiB. So
# MIN_GROWTH as for a process, or 1% of the table, whichever is more.
# Rows are counted exactly: rows that rose in both intervals are named at
# any size, as a group whose count rose is.
TABLE_SHARE = 0.01


def table_floor(before: int) -> float:
    """How much a table of ``before`` bytes may grow with no row added
    and no leak: MIN_GROWTH or TABLE_SHARE of it, whichever is more."""
    return max(MIN_GROWTH, TABLE_SHARE * before)


def _owners(snap: Loaded) -> dict[int | None, str]:
    """The group of each table owner of a snapshot."""
    keys = {t["owner"] for t in snap.tables if t["owner"] is not None}
    rows = snap.rows_of(keys)
    out: dict[int | None, str] = {None: "?"}
    for key in keys:
        out[key] = snap.group_names[snap.groups[rows[key]]] \
            if key in rows else snap.pid_text(key)
    return out


def _summary(snap: Loaded) -> dict[Any, Any]:
    sample = snap.header["sample"]
    return {"node": snap.node, "time": snap.header.get("time"),
            "memory": {k: sample.get(k) for k in MEMORY_KEYS},
            "alloc_used": sample.get("alloc_used"),
            "alloc_allocated": sample.get("alloc_allocated"),
            "processes": len(snap.keys), "ets_tables": len(snap.tables),
            "ports": len(snap.ports),
            "atoms": snap.header.get("atom_count"),
            # proc_lib processes left as proc_lib:init_p/N, their heap
            # past the cap for copying a dictionary (OTP 25); None where
            # the file does not say (files before issue 38).
            "dictionaries_unread": snap.header.get("dictionaries_unread"),
            "dictionary_heap_cap": snap.header.get("dictionary_heap_cap"),
            # A crash dump read as the last snapshot: its path (where to
            # look closer: the node is dead).
            **({"crash_dump": snap.path} if snap.header.get("crash_dump")
               else {})}


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
              ) -> array[int]:
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


def _through(a_in_b: array[int], b_in_c: array[int]) -> array[int]:
    """a's rows in c, through b: a process alive in a and c was alive in
    b (one that died and whose pid was taken again is another)."""
    ext = b_in_c + array("q", [-1])  # a_in_b's -1 reads this last -1
    return array("q", map(ext.__getitem__, a_in_b))


def _inverse(forward: array[int], size: int) -> array[int]:
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


def _groups(a: Loaded, b: Loaded, a_in_b: array[int]) -> list[dict[str, Any]]:
    """Per group (b's for the living and born, a's for the dead): counts,
    born, died, and the change in bytes, largest growth first."""
    found = bytes(map(_FOUND, a_in_b))
    kept_a = _per_group(a, compress(range(len(a_in_b)), found))
    kept_b = _per_group(b, compress(a_in_b, found))
    stats: dict[str, dict[Any, Any]] = {}

    def entry(name: str) -> dict[Any, Any]:
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


def _tables(a: Loaded, b: Loaded) -> list[dict[str, Any]]:
    """Tables of b that are new since a, or have more rows, or more bytes
    beyond a table's wobble (table_floor), largest growth first."""
    before = {t["id"]: t for t in a.tables}
    owners = _owners(b)
    out = []
    for t in b.tables:
        old = before.get(t["id"])
        if old is None or t["rows"] > old["rows"] or \
                t["bytes"] - old["bytes"] >= table_floor(old["bytes"]):
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


def _atoms(a: Loaded, b: Loaded) -> dict[Any, Any]:
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
    return {"added": last - first - ours, "ours": ours,
            "names": theirs[:TOP_ROWS],
            "all_named": first >= start and len(known) == last - first}


def _ports(a: Loaded, b: Loaded) -> dict[Any, Any]:
    old = {p["id"] for p in a.ports}
    new = [p["name"] for p in b.ports if p["id"] not in old]
    return {"before": len(a.ports), "after": len(b.ports),
            "new": new[:TOP_ROWS], "new_count": len(new)}


# UTC-12 to UTC+14: how far a local time read in another zone may be off.
ZONES = 26 * 3600.0


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
    # A crash dump's time is the dead node's local time, zone unknown:
    # read as ours, it may be off by the widest zones' difference (26 h).
    margin = ZONES if b.header.get("crash_dump") else 0.0
    if b.epoch + margin < a.epoch:
        raise SnapshotError(f"{b.path} was taken before {a.path}: give "
                            "the snapshots oldest first")


def check_count(count: int) -> None:
    if not 2 <= count <= 3:
        raise SnapshotError("diff compares two or three snapshot files "
                            f"(given {count})")


def diff_files(paths: list[str], force: bool = False,
               progress: Callable[[str], None] = lambda text: None,
               reader: Callable[[str, bool], Loaded] = lambda path, last:
               load(path)) -> dict[str, Any]:
    """heap_diff of snapshot files, oldest first: their count is checked
    before any is read. ``reader`` reads one (and is told whether it is
    the last): crashdump's reads a crash dump there too."""
    check_count(len(paths))
    loaded = []
    for i, path in enumerate(paths):
        progress(f"reading {path}")
        loaded.append(reader(path, i == len(paths) - 1))
    progress("comparing")
    return _compare(loaded, force)


def heap_diff(snaps: list[Loaded], force: bool = False) -> dict[str, Any]:
    """Two snapshots: memwatch's HeapDiff. Three: the same between the
    first and the last, with the three-snapshot rule's suspects first."""
    check_count(len(snaps))
    return _compare(snaps, force)


def _compare(snaps: list[Loaded], force: bool) -> dict[str, Any]:
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
        result["suspects"] = suspects(snaps[0], snaps[1], snaps[2], a_in_b,
                                       b_in_c, c_in_b)
    result["change"] = {
        "size_bytes": change["total"], "memory": change,
        "details": shown, "groups": len(details),
        # JSON shows the first TOP_GROUPS: say so when it cut.
        "truncated": len(details) > len(shown)}
    result["ets"] = _tables(first, last)[:TOP_ROWS]
    result["atoms"] = _atoms(first, last)
    result["ports"] = _ports(first, last)
    # Whether the node ran Elixir (files of format 1 do not say): text
    # shows names in its syntax, as the commands on a live node do.
    result["elixir"] = bool(last.header.get("elixir"))
    return result


def suspects(a: Loaded, b: Loaded, c: Loaded, a_in_b: array[int],
             b_in_c: array[int], c_from_b: array[int]) -> dict[Any, Any]:
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
    kept: dict[str, dict[Any, Any]] = {}
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
    growing: list[dict[str, Any]] = []
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
    rising_groups: list[dict[str, Any]] = [
        {"what": g, "counts": [counts[0].get(g, 0), counts[1].get(g, 0), n]}
        for g, n in counts[2].items()
        if counts[0].get(g, 0) < counts[1].get(g, 0) < n]
    rising_groups.sort(key=lambda g: (g["counts"][0] - g["counts"][2],
                                      g["what"]))
    del rising_groups[TOP_ROWS:]
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


def _tables_kept(a: Loaded, b: Loaded, c: Loaded) -> list[dict[str, Any]]:
    """Tables born between a and b and alive at c, and tables that grew in
    both intervals: in rows, or in bytes by more than table_floor in all
    (a steady table's rows rewritten in place move its bytes)."""
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
        grew = old is not None and (
            old["rows"] < t["rows"] < now["rows"]
            or (old["bytes"] < t["bytes"] < now["bytes"]
                and now["bytes"] - old["bytes"]
                >= table_floor(old["bytes"])))
        if born or grew:
            out.append({"name": now["name"], "id": now["id"],
                        "owner": owners[now["owner"]],
                        "born": born,
                        "rows": [old["rows"] if old else None, t["rows"],
                                 now["rows"]],
                        "bytes": [old["bytes"] if old else None,
                                  t["bytes"], now["bytes"]]})
    return sorted(out, key=lambda t: (-t["bytes"][2], t["name"]))


__all__ = ["check_count", "diff_files", "heap_diff", "load", "suspects"]
