"""A crash dump as the last snapshot of a diff: `diff a.snapshot
b.snapshot erl_crash.dump` names what was born between the first two and
was still alive when the node died.

The dump's processes are put in a snapshot's columns (snapshots/
columns.py) with the groups the snapshot helper gives: the registered
name, else what a proc_lib or fun-spawned process runs under its parent
(walked up to a named ancestor through the dump's "Spawned by"), else the
initial call. Binary bytes are read from each heap's slices (each binary
once), as a snapshot's are.
"""

from __future__ import annotations

import re
import time
from typing import Any, Iterator

from beam_probe.crashdump import answers
from beam_probe.crashdump import fields as f
from beam_probe.crashdump.process import DeadProcess
from beam_probe.crashdump.reader import FORMAT, Dump
from beam_probe.erldist.terms import Atom, Pid

_PID = re.compile(r"<0\.(\d+)\.(\d+)>")
_MFA = re.compile(r"(.+):([^:/]+)/(\d+)$")
VAGUE = ("proc_lib:init_p/3", "proc_lib:init_p/5", "erlang:apply/2")
PROC_LIB = VAGUE[:2]
# The heap (bytes: Stack+heap and OldHeap, in words) past which a live
# node before OTP 26.2 does not copy a process's dictionary for its
# '$initial_call': beam_probe_snapshot.erl's DictionaryHeapCap.
DICTIONARY_HEAP_CAP = 64 * 1024 * 1024
# The newest atoms' names kept for the diff (the dump lists the newest
# first): as many as a snapshot keeps.
ATOM_NAMES = 2000


def is_dump(path: str) -> bool:
    """Whether a file diff was given is a crash dump (its first line)."""
    try:
        with open(path, "rb") as file:
            return file.read(len(FORMAT)) == FORMAT
    except OSError:
        return False


def snapshot_or_dump(path: str, last: bool) -> Any:
    """diff's reader: a snapshot file, or a crash dump, which is the
    node's last state and so comes last."""
    from beam_probe.snapshots.columns import open_file
    from beam_probe.snapshots.format import SnapshotError

    if not is_dump(path):
        return open_file(path)
    if not last:
        raise SnapshotError(f"{path} is a crash dump: give it last (the "
                            "node died after the snapshots)")
    return load_dump(path)


def _pid(node: str, text: str) -> Pid | None:
    match = _PID.fullmatch(text.strip())
    if match is None:
        return None
    return Pid(node, int(match.group(1)), int(match.group(2)), 0)


def _mfa(text: str | None) -> tuple[Any, ...]:
    match = _MFA.match(text or "")
    if match is None:
        return (Atom("?"), Atom("?"), 0)
    return (Atom(match.group(1)), Atom(match.group(2)), int(match.group(3)))


def load_dump(path: str) -> Any:
    """The dump at ``path`` as a snapshot (columns.Loaded) for diff."""
    from beam_probe.snapshots.columns import _build

    with Dump(path) as dump:
        node = answers.node_name(dump)
        head = f.preamble(dump)
        sizes = answers.binary_sizes(dump)
        # '$initial_call' as a live snapshot of that release reads it
        # (beam_probe_snapshot.erl): on every release, but before OTP
        # 26.2 (ERTS 14.2) only from a process whose heap is within the
        # cap on copying a whole dictionary; one past it stays
        # proc_lib:init_p/N there, and so here, counted.
        erts = tuple(int(x) for x in (head.erts_version or "0").split(".")
                     if x.isdigit())
        dictionary_read = erts >= (14, 2)
        unread = 0
        rows: dict[str, list[Any]] = {k: [] for k in (
            "pids", "memory", "binary_bytes", "binary_count",
            "message_queue_len", "names", "groups", "initial_call")}
        ancestors: list[tuple[Pid, Any]] = []
        for section in dump.sections("proc"):
            process = DeadProcess(dump, section)
            p = process.fields
            pid = _pid(node, p.pid)
            if pid is None:
                continue
            distinct, count = answers.heap_binaries(dump, process, sizes)
            binary = distinct if distinct is not None else \
                answers.binary_memory(dump, p)
            call = _mfa(p.spawned_as)
            parent = _pid(node, p.spawned_by or "")
            within = dictionary_read or (p.stack_heap + p.old_heap) \
                * head.word_size <= DICTIONARY_HEAP_CAP
            what = process.initial_call() if within else p.spawned_as
            if not within and not p.name and parent is not None and \
                    p.spawned_as in PROC_LIB:
                unread += 1
            if p.name:
                group: tuple[Any, ...] = ("name", Atom(p.name))
                ancestors.append((pid, ("name", Atom(p.name))))
            elif p.spawned_as in VAGUE and parent is not None:
                group = ("parent", _mfa(what), parent)
                ancestors.append((pid, ("up", parent, _mfa(what))))
            else:
                group = ("initial_call", call)
                ancestors.append((pid, ("call", call)))
            rows["pids"].append(p.pid)
            rows["memory"].append(p.memory)
            rows["binary_bytes"].append(binary)
            rows["binary_count"].append(count)
            rows["message_queue_len"].append(p.message_queue_len)
            rows["names"].append(Atom(p.name) if p.name else [])
            rows["groups"].append(group)
            rows["initial_call"].append(call)
            dump.release(section.start, section.end)
        memory = f.memory(dump)
        report = answers.alloc(dump) if dump.count("allocator") else None
        atoms, _limit = f.index_limit(dump, "atom_tab")
        atom_count = atoms if atoms is not None and atoms >= 0 else (
            head.atoms or 0)
        newest = _newest_atoms(dump, min(ATOM_NAMES, atom_count))
        header = {
            "format": 3, "node": node, "epoch": _epoch(head.written),
            "time": _iso(head.written), "creation": None,
            "wordsize": head.word_size, "elixir": answers.runs_elixir(dump),
            "atom_count": atom_count,
            "atoms_from": atom_count - len(newest), "atoms": newest,
            "sample": {**{k: memory.get(k) for k in (
                "total", "processes", "binary", "ets", "atom", "code",
                "system")},
                "alloc_used": report["used"] if report else None,
                "alloc_allocated": report["allocated"] if report
                else None},
            "dictionary_heap_cap": DICTIONARY_HEAP_CAP,
            "dictionaries_unread": unread,
            "crash_dump": True}
        tables = [{"id": t.id, "name": t.name,
                   "owner": _key(t.owner),
                   "rows": t.objects,
                   "bytes": (t.words or 0) * head.word_size,
                   "type": t.type} for t in f.ets_tables(dump)]
        ports = [{"id": s.id, "name": _port_name(dump, s), "bytes": 0}
                 for s in dump.sections("port")]
    snap = _build(path, header, _sections(rows, ancestors))
    snap.tables = tables
    snap.ports = ports
    return snap


def _key(text: str) -> int | None:
    match = _PID.fullmatch(text.strip())
    if match is None:
        return None
    return (int(match.group(2)) << 32) | int(match.group(1))


def _port_name(dump: Dump, section: Any) -> str:
    values = f.fields(dump, section)
    for key in ("Port controls linked-in driver",
                "Port controls external process", "Port controls forker "
                "process"):
        if key in values:
            return values[key][:60]
    return "?"


def _sections(rows: dict[str, list[Any]], ancestors: list[Any]
              ) -> Iterator[tuple[str, Any]]:
    def interned(values: list[Any]) -> tuple[list[Any], list[int]]:
        index: dict[Any, int] = {}
        unique: list[Any] = []
        out = []
        for value in values:
            key = repr(value)
            if key not in index:
                index[key] = len(unique)
                unique.append(value)
            out.append(index[key])
        return unique, out

    chunk = {"pids": "".join(rows["pids"]).encode(),
             "memory": rows["memory"], "binary_bytes": rows["binary_bytes"],
             "binary_count": rows["binary_count"],
             "message_queue_len": rows["message_queue_len"],
             "names": rows["names"],
             "groups": interned(rows["groups"]),
             "initial_call": interned(rows["initial_call"])}
    yield "processes", chunk
    yield "ancestors", ancestors


def _newest_atoms(dump: Dump, n: int) -> list[str]:
    """The names of the newest ``n`` atoms, oldest first (=atoms lists
    the newest first, one a line, quoted as Erlang quotes them)."""
    section = dump.first("atoms")
    if section is None or n <= 0:
        return []
    names: list[str] = []
    for line in dump.lines(section, 4096):
        if len(names) >= n:
            break
        text = line.decode("utf-8", "replace")
        if len(text) >= 2 and text[0] == text[-1] == "'":
            text = text[1:-1].replace("\\'", "'").replace("\\\\", "\\")
        names.append(text)
    return names[::-1]


def _iso(written: str) -> str:
    """The dump's time as the snapshots write theirs, less the zone (the
    dead node's local time): 2026-11-24T21:04:24."""
    try:
        return time.strftime("%Y-%m-%dT%H:%M:%S", time.strptime(
            written.strip(), "%a %b %d %H:%M:%S %Y"))
    except (ValueError, OverflowError):
        return written.strip()[:64]


def _epoch(written: str) -> float:
    """The dump's time ("Tue Nov 24 21:04:24 2026", the node's local
    time, read as this machine's) as seconds since the epoch: the end of
    that second, for a snapshot taken in the same second came before."""
    try:
        return time.mktime(time.strptime(written.strip(),
                                         "%a %b %d %H:%M:%S %Y")) + 0.999
    except (ValueError, OverflowError):
        return 0.0


__all__ = ["is_dump", "load_dump", "snapshot_or_dump"]
