"""diff: memwatch's HeapDiff between two snapshots, and the three-snapshot
rule for three. Offline: snapshot files in, a result out.

The snapshots are read a chunk of rows at a time (columns.Stream), in
passes that keep per group only what the answer shows (passes.py): the
hub's rows by key, totals per group, a group's first rows for examples,
the growing processes' top rows. Issue 39: three snapshots of a million
processes, read whole into columns, took 272 MB of our memory.

Identity across snapshots is the pid and its initial call together: a
pid's serial wraps on a long-running node, and a reused pid with another
initial call is another process.
"""

from __future__ import annotations

import re
from typing import Any, Callable

from beam_probe.snapshots.columns import Snapshot, open_file
from beam_probe.snapshots.format import SnapshotError
from beam_probe.snapshots.passes import (EXAMPLES, MIN_GROWTH, TOP_ROWS,
                                         First, Hub, Last, Totals,
                                         born_kept_rows)


MEMORY_KEYS = ("total", "processes", "binary", "ets", "atom", "code",
               "system")


TOP_GROUPS = 200
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


def _owners(snap: Snapshot, last: Last) -> dict[int | None, str]:
    """The group of each table owner of the last snapshot."""
    out: dict[int | None, str] = {None: "?"}
    for t in snap.tables:
        key = t["owner"]
        if key is not None and key not in out:
            out[key] = snap.group_names[last.owners[key]] \
                if key in last.owners else snap.pid_text(key)
    return out


def _summary(snap: Snapshot) -> dict[Any, Any]:
    sample = snap.header["sample"]
    return {"node": snap.node, "time": snap.header.get("time"),
            "memory": {k: sample.get(k) for k in MEMORY_KEYS},
            "alloc_used": sample.get("alloc_used"),
            "alloc_allocated": sample.get("alloc_allocated"),
            "processes": snap.rows, "ets_tables": len(snap.tables),
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


def _groups(a: Snapshot, a_totals: Totals, b: Snapshot, last: Last
            ) -> list[dict[str, Any]]:
    """Per group (b's for the living and born, a's for the dead): counts,
    born, died, and the change in bytes, largest growth first."""
    stats: dict[str, dict[Any, Any]] = {}

    def entry(name: str) -> dict[Any, Any]:
        found = stats.get(name)
        if found is None:
            found = stats[name] = {"what": name, "size_bytes": 0,
                                   "binary_bytes": 0, "+": 0, "-": 0,
                                   "before": 0, "after": 0}
        return found

    for snap, sign, key, totals, kept in (
            (a, -1, "before", a_totals, last.kept_first),
            (b, 1, "after", last.totals, last.kept)):
        for g, name in enumerate(snap.group_names):
            count = totals.count[g] if g < len(totals.count) else 0
            if count:
                e = entry(name)
                e[key] += count
                e["size_bytes"] += sign * totals.memory[g]
                e["binary_bytes"] += sign * totals.binary[g]
                e["-" if sign < 0 else "+"] += count - kept[g]
    return sorted(stats.values(),
                  key=lambda e: (-(e["size_bytes"] + e["binary_bytes"]),
                                 e["what"]))


def _examples(snap: Snapshot, last: Last, names: set[str], new: bool
              ) -> dict[str, list[str]]:
    """Up to EXAMPLES pids per group of ``names`` in the last snapshot:
    its rows born since the first (``new``: since the middle) first, the
    ones a leak hunt is about, then any, each in the snapshot's order."""
    ids: dict[str, list[int]] = {name: [] for name in names}
    for g, name in enumerate(snap.group_names):
        if name in ids:
            ids[name].append(g)
    born = last.new if new else last.born
    out: dict[str, list[str]] = {}
    for name, gids in ids.items():
        need = min(EXAMPLES, sum(last.totals.count[g] for g in gids
                                 if g < len(last.totals.count)))
        chosen = born.of(gids)[:need]
        taken = {row for row, _key in chosen}
        chosen += [(row, key) for row, key in last.any.of(gids)
                   if row not in taken][:need - len(chosen)]
        out[name] = [snap.pid_text(key) for _row, key in chosen]
    return out


def _tables(a: Snapshot, b: Snapshot, owners: dict[int | None, str]
            ) -> list[dict[str, Any]]:
    """Tables of b that are new since a, or have more rows, or more bytes
    beyond a table's wobble (table_floor), largest growth first."""
    before = {t["id"]: t for t in a.tables}
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


def _atoms(a: Any, b: Any) -> dict[Any, Any]:
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


def _ports(a: Snapshot, b: Snapshot) -> dict[Any, Any]:
    old = {p["id"] for p in a.ports}
    new = [p["name"] for p in b.ports if p["id"] not in old]
    return {"before": len(a.ports), "after": len(b.ports),
            "new": new[:TOP_ROWS], "new_count": len(new)}


# UTC-12 to UTC+14: how far a local time read in another zone may be off.
ZONES = 26 * 3600.0


def check_pair(a: Snapshot, b: Snapshot, force: bool) -> None:
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
               reader: Callable[[str, bool], Snapshot] = lambda path, last:
               open_file(path)) -> dict[str, Any]:
    """heap_diff of snapshot files, oldest first: their count is checked
    before any is read. ``reader`` opens one (and is told whether it is
    the last): crashdump's reads a crash dump there too."""
    check_count(len(paths))
    opened: list[Snapshot] = []
    try:
        for i, path in enumerate(paths):
            progress(f"reading {path}")
            opened.append(reader(path, i == len(paths) - 1))
        progress("comparing")
        return _compare(opened, force)
    finally:
        for snap in opened:
            snap.close()


def heap_diff(snaps: list[Snapshot], force: bool = False) -> dict[str, Any]:
    """Two snapshots: memwatch's HeapDiff. Three: the same between the
    first and the last, with the three-snapshot rule's suspects first."""
    check_count(len(snaps))
    return _compare(snaps, force)


def _compare(snaps: list[Snapshot], force: bool) -> dict[str, Any]:
    for a, b in zip(snaps, snaps[1:]):
        check_pair(a, b, force)
    first, last = snaps[0], snaps[-1]
    three = len(snaps) == 3
    # The middle of three is the hub both others are found in; of two,
    # the first.
    hub = Hub(snaps[1] if three else first, groups=not three, values=three)
    older = First(hub, first) if three else None
    first_totals = older.totals if older is not None else hub.totals
    owners = {t["owner"] for t in last.tables if t["owner"] is not None}
    ended = Last(hub, last, first, older, owners)
    before, after = _summary(first), _summary(last)
    change = {k: (after["memory"][k] or 0) - (before["memory"][k] or 0)
              for k in MEMORY_KEYS}
    details = _groups(first, first_totals, last, ended)
    shown = details[:TOP_GROUPS]
    examples = _examples(last, ended, {d["what"] for d in shown}, False)
    for d in shown:
        d["examples"] = examples[d["what"]]
    result: dict[str, Any] = {"before": before, "after": after}
    last_owners = _owners(last, ended)
    if three:
        result["middle"] = _summary(snaps[1])
        result["suspects"] = suspects(first, hub, last, first_totals,
                                      ended, last_owners)
    result["change"] = {
        "size_bytes": change["total"], "memory": change,
        "details": shown, "groups": len(details),
        # JSON shows the first TOP_GROUPS: say so when it cut.
        "truncated": len(details) > len(shown)}
    result["ets"] = _tables(first, last, last_owners)[:TOP_ROWS]
    result["atoms"] = _atoms(first, last)
    result["ports"] = _ports(first, last)
    # Whether the node ran Elixir (files of format 1 do not say): text
    # shows names in its syntax, as the commands on a live node do.
    result["elixir"] = bool(last.header.get("elixir"))
    return result


def suspects(a: Snapshot, hub: Hub, c: Snapshot, a_totals: Totals,
             last: Last, owners: dict[int | None, str]) -> dict[Any, Any]:
    """What was made between a and b and is still there at c, what kept
    growing through both intervals: the three-snapshot rule, from the
    passes' findings (b is the hub)."""
    b = hub.snap
    kept: dict[str, dict[Any, Any]] = {}
    names: dict[str, list[int]] = {}
    for g, (count, size, binary, growth) in last.born_kept.items():
        name = c.group_names[g]
        names.setdefault(name, []).append(g)
        e = kept.setdefault(name, {"what": name, "count": 0,
                                   "bytes": 0, "binary_bytes": 0,
                                   "growth": 0, "examples": []})
        e["count"] += count
        e["bytes"] += size
        e["binary_bytes"] += binary
        e["growth"] += growth
    for name, gids in names.items():
        kept[name]["examples"] = [c.pid_text(key) for _row, key in
                                  born_kept_rows(last, gids)[:EXAMPLES]]
    growing = []
    for growth, row, found in sorted(last.growing, key=lambda e: (
            -e[0], -e[1])):
        growing.append({"pid": c.pid_text(found["key"]),
                        "what": c.group_names[found["group"]],
                        "name": found["name"], "rising": found["rising"],
                        "memory": found["memory"],
                        "binary_bytes": found["binary_bytes"]})
    counts = [a_totals.by_name(a), hub.totals.by_name(b),
              last.totals.by_name(c)]
    rising_groups: list[dict[str, Any]] = [
        {"what": g, "counts": [counts[0].get(g, 0), counts[1].get(g, 0), n]}
        for g, n in counts[2].items()
        if counts[0].get(g, 0) < counts[1].get(g, 0) < n]
    rising_groups.sort(key=lambda g: (g["counts"][0] - g["counts"][2],
                                      g["what"]))
    del rising_groups[TOP_ROWS:]
    # Examples of the rising groups: the processes born since the second
    # snapshot first.
    rising_examples = _examples(c, last, {g["what"] for g in rising_groups},
                                True)
    for group in rising_groups:
        group["examples"] = rising_examples[group["what"]]
    tables = _tables_kept(a, b, c, owners)
    ports_a = {p["id"] for p in a.ports}
    ports_c = {p["id"] for p in c.ports}
    ports = [p["name"] for p in b.ports
             if p["id"] not in ports_a and p["id"] in ports_c]
    atoms_ab, atoms_bc = _atoms(a, b)["added"], _atoms(b, c)["added"]
    return {
        "born_and_kept": sorted(kept.values(),
                                key=lambda e: (-e["count"], e["what"])
                                )[:TOP_GROUPS],
        "growing_processes": growing,
        "groups_rising": rising_groups,
        "ets": tables[:TOP_ROWS],
        "ports_born_and_kept": ports[:TOP_ROWS],
        "atoms": {"added": [atoms_ab, atoms_bc],
                  "rising": atoms_ab > 0 and atoms_bc > 0},
    }


def _tables_kept(a: Snapshot, b: Snapshot, c: Snapshot,
                 owners: dict[int | None, str]) -> list[dict[str, Any]]:
    """Tables born between a and b and alive at c, and tables that grew in
    both intervals: in rows, or in bytes by more than table_floor in all
    (a steady table's rows rewritten in place move its bytes)."""
    ta = {t["id"]: t for t in a.tables}
    tc = {t["id"]: t for t in c.tables}
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


__all__ = ["MIN_GROWTH", "check_count", "diff_files", "heap_diff",
           "suspects"]
