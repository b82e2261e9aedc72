"""snapshot: the whole node at one moment, to a file, for diff and
leak-hunt (the three-snapshot method).

One call on the node (beam_probe_snapshot:snapshot/11) returns the memory
figures, every process as compressed row chunks, the ancestors of the
processes grouped by their place in the tree, every ETS table and port,
and the names of the newest atoms. The chunks go to the file as the node
made them: taking a snapshot decodes nothing but the header, and a
million processes make a file of a few MB.

File format, version 3 (this one still reads version 1, whose process
columns were lists of terms, and 2, which had no ancestors):

    BEAMPROBE SNAPSHOT 3\\n
    <header: one JSON object>\\n
    then sections, each: a kind byte, a 4-byte big-endian length, and
    that many bytes of a versioned external term (as term_to_binary makes
    it, compressed):
      P  processes: a map of columns, as erl_helpers/beam_probe_snapshot.erl
         describes (fixed-width binaries; the repeated terms once per
         chunk, with an index per process)
      A  ancestors: [{Pid, Class}], as beam_probe_snapshot.erl describes
         (format 3)
      T  ETS tables: [{Id, Name, Owner, Size, MemoryWords, Type}]
      O  ports: [{Port, {name, Name}, {connected, Owner}, {memory, Bytes}}]
      E  the end (length 0): a file without it was cut short

The header holds the node, its OTP release, the time, the --gc mode, the
node's word size, erlang:memory(), the allocator and count figures of a
watch sample, which process_info items the node had (label,
'$initial_call'), the atom count and the newest atoms' names, and (format
3) the number of processes, ours left out.
"""

from __future__ import annotations

import json
import os
import struct
import time
from typing import Any, Callable, Iterator

from beam_probe.errors import OutputFailed, UsageError
from beam_probe.node.forms import Local
from beam_probe.node.remote import Remote
from beam_probe.probes.watch import record

HELPER = "beam_probe_snapshot"
SCAN = "beam_probe_scan"
MAGIC = b"BEAMPROBE SNAPSHOT 3\n"
FORMAT = 3
# Formats 1 (process columns as lists of terms) and 2 (groups named after
# the direct parent only, no ancestors) are still read.
READABLE = {b"BEAMPROBE SNAPSHOT 1\n": 1, b"BEAMPROBE SNAPSHOT 2\n": 2,
            MAGIC: FORMAT}
CHUNK_ROWS = 5000
# The names of at most this many of the newest atoms are kept: enough to
# name the atoms a leak adds between two snapshots, bounded however many
# the node has.
MAX_ATOMS = 2000
# What a file may hold: a header far larger than any node's, or a section
# larger than 64 MiB, is not a snapshot of ours.
MAX_HEADER = 4 * 1024 * 1024
MAX_SECTION = 64 * 1024 * 1024
MAX_FILE = 2 * 1024 * 1024 * 1024
KINDS = {b"P": "processes", b"A": "ancestors", b"T": "tables",
         b"O": "ports", b"E": "end"}
# How far up the tree a group's nearest named ancestor is looked for, and
# for how many ancestors in all: a real application's workers sit two or
# three levels under a registered supervisor; the bounds hold the walk to
# a fraction of the process pass whatever the tree.
MAX_DEPTH = 8
MAX_ANCESTORS = 200_000


class SnapshotError(UsageError):
    """A file that is not a whole snapshot of ours."""

    label = "snapshot"


def take(remote: Remote, gc: str = "holders", jobs: int = 0,
         max_gc: int | None = None,
         progress: Callable[[str], None] = lambda text: None
         ) -> tuple[dict, list[tuple[bytes, bytes]]]:
    """The header and the sections of one snapshot of the attached node.
    ``gc`` collects first as watch does (holders by default: the method
    wants each snapshot after a collection)."""
    from beam_probe.probes.watch import sample_node

    epoch = time.time()
    if gc != "none":
        progress(f"collecting ({gc})")
        sample_node(remote, gc, max_gc, jobs)
    progress("reading every process, table and port")
    reply = remote.run(HELPER, "snapshot", CHUNK_ROWS, MAX_ATOMS, MAX_DEPTH,
                       MAX_ANCESTORS, jobs,
                       Local("pmap", SCAN), Local("others", SCAN),
                       Local("top", SCAN), Local("settled", SCAN),
                       Local("sample", "beam_probe_watch"),
                       Local("rss", "beam_probe_alloc"))
    # From the helper, whose text holds the atom: a call of our own would
    # create 'otp_release' on a node that never asked for it, and the
    # first snapshot's diff would show it as an atom added.
    release = reply["otp_release"]
    sample = record(remote.node, reply["sample"], epoch, gc, None)
    header = {
        "format": FORMAT, "node": remote.node,
        "otp_release": release if isinstance(release, str)
        else bytes(release).decode(),
        "time": sample["time"], "epoch": sample["epoch"], "gc": gc,
        "wordsize": reply["sample"]["wordsize"],
        "items": [str(item) for item in reply["items"]],
        "sample": sample,
        "atom_count": reply["atom_count"],
        "creation": reply["creation"],
        "elixir": reply["elixir"] is True,
        "atoms_from": reply["atoms_from"],
        "atoms": [str(atom) for atom in reply["atoms"]],
    }
    sections = [(b"P", bytes(chunk)) for chunk in reply["processes"]]
    sections += [(b"A", bytes(reply["ancestors"])),
                 (b"T", bytes(reply["tables"])),
                 (b"O", bytes(reply["ports"]))]
    header["chunks"] = len(reply["processes"])
    # Every process but ours, as the file holds them: one count everywhere.
    header["processes"] = reply["process_count"]
    return header, sections


def write(path: str, header: dict, sections: list[tuple[bytes, bytes]]
          ) -> int:
    """Write the file (a temporary file, then a rename: a reader never sees
    half of one). Its size in bytes."""
    from beam_probe.files import error_text, write_whole

    data = [MAGIC, json.dumps(header, separators=(",", ":")).encode()
            + b"\n"]
    for kind, payload in sections + [(b"E", b"")]:
        data.append(kind + struct.pack(">I", len(payload)))
        data.append(payload)
    try:
        return write_whole(path, data)
    except OSError as exc:
        raise OutputFailed(f"cannot write {path}: {error_text(exc)}") \
            from None


def read(path: str) -> tuple[dict, Iterator[tuple[str, Any]]]:
    """The header, and the sections decoded one at a time (kind, term).
    Anything that is not a whole snapshot of ours is a SnapshotError
    naming what is wrong."""
    from beam_probe.files import error_text, open_regular

    try:
        fd, info = open_regular(path)
    except OSError as exc:
        raise SnapshotError(f"cannot read {path}: {error_text(exc)}") \
            from None
    f = os.fdopen(fd, "rb")
    try:
        if info.st_size > MAX_FILE:
            raise SnapshotError(f"{path} is larger than any snapshot")
        version = READABLE.get(f.read(len(MAGIC)))
        if version is None:
            raise SnapshotError(f"{path} is not a beam-probe snapshot "
                                "(or one of a later format)")
        line = f.readline(MAX_HEADER + 1)
        try:
            header = json.loads(line)
        except (ValueError, RecursionError):
            header = None
        problem = header_problem(header, version)
        if problem:
            raise SnapshotError(f"{path}: the snapshot's header is damaged "
                                f"({problem})")
    except BaseException:
        f.close()
        raise
    return header, _sections(path, f, info.st_size)


# What a header's fields must be, checked once when a file is read, so that
# nothing after (diff's arithmetic, its loops over atom indices, the text)
# meets a string where it counts, or a count no node can have.
_TEXT_FIELDS = ("node", "otp_release", "time", "gc")
# Atom indices: an atom table holds at most 2^31 - 1 (erl +t).
_MAX_ATOM_INDEX = 2**31
# Epoch seconds: 0 to the year 5138, far past any clock of ours.
_MAX_EPOCH = 1e11
# A sample's figures are byte and item counts: 64-bit at most on any node.
_MAX_FIGURE = 2**63
_SAMPLE_TEXT = ("time", "node", "gc")


def header_problem(header: Any, version: int) -> str | None:
    """What is wrong with a snapshot's header, in a few words; None when
    it is one beam-probe wrote."""
    if not isinstance(header, dict):
        return "not a JSON object"
    if header.get("format") != version:
        return "format does not match the file's"
    for field in _TEXT_FIELDS:
        if field in header and not (isinstance(header[field], str)
                                    and len(header[field]) <= 1024):
            return f"{field} is not a name"
    if "node" not in header:
        return "no node"
    if not _number(header.get("epoch"), 0, _MAX_EPOCH):
        return "epoch is not a time"
    if header.get("wordsize", 8) not in (4, 8):
        return "wordsize is neither 4 nor 8"
    for field in ("atom_count", "atoms_from"):
        if not _count(header.get(field), _MAX_ATOM_INDEX):
            return f"{field} is not a count of atoms"
    if header["atoms_from"] > header["atom_count"]:
        return "atoms_from is past atom_count"
    atoms = header.get("atoms", [])
    if not (isinstance(atoms, list) and len(atoms) <= 10 * MAX_ATOMS
            and all(isinstance(a, str) for a in atoms)):
        return "atoms is not a list of names"
    items = header.get("items", [])
    if not (isinstance(items, list) and len(items) <= 64
            and all(isinstance(i, str) for i in items)):
        return "items is not a list of names"
    for field in ("creation", "chunks", "processes"):
        if header.get(field) is not None and not _count(header[field],
                                                        2**64):
            return f"{field} is not a count"
    if not isinstance(header.get("elixir", False), bool):
        return "elixir is not true or false"
    sample = header.get("sample")
    if not isinstance(sample, dict) or len(sample) > 256:
        return "sample is not an object"
    for key, value in sample.items():
        if key in _SAMPLE_TEXT:
            if not isinstance(value, str) or len(value) > 1024:
                return f"sample.{key} is not text"
        elif value is not None and not _number(value, -_MAX_FIGURE,
                                               _MAX_FIGURE):
            return f"sample.{key} is not a number"
    limit = sample.get("atom_limit")
    if isinstance(limit, int) and header["atom_count"] > limit:
        return "atom_count is over the node's atom limit"
    return None


def _number(value: Any, low: float, high: float) -> bool:
    """A finite int or float (not a bool) within [low, high]."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return low <= value <= high  # NaN compares false: refused


def _count(value: Any, limit: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and \
        0 <= value < limit


def _sections(path: str, f: Any, file_size: int
              ) -> Iterator[tuple[str, Any]]:
    from beam_probe.erldist import etf

    with f:
        while True:
            head = f.read(5)
            if len(head) < 5 or head[:1] not in KINDS:
                raise SnapshotError(f"{path} is cut short or damaged")
            kind, size = KINDS[head[:1]], struct.unpack(">I", head[1:])[0]
            if kind == "end":
                return
            if size > min(MAX_SECTION, file_size):
                raise SnapshotError(f"{path} is damaged (a section of "
                                    f"{size} bytes)")
            payload = f.read(size)
            if len(payload) < size:
                raise SnapshotError(f"{path} is cut short")
            inflated = section_budget(kind, payload)
            if inflated is None:
                raise SnapshotError(f"{path} is damaged (a section claims "
                                    "more than its bytes can hold)")
            try:
                term = etf.decode(payload, max_items=MAX_SECTION_ITEMS,
                                  max_uncompressed=inflated)
            except (ValueError, TypeError):
                raise SnapshotError(f"{path} is damaged (a section does "
                                    "not decode)") from None
            if kind == "processes" and not _rows_fit(term, size):
                raise SnapshotError(f"{path} is damaged (a section holds "
                                    "more rows than its bytes can)")
            yield kind, term


# What a section's bytes can hold, so that a crafted file is refused before
# its claims are allocated (a 4.3 MB file claiming 26 million rows took 1.4
# GB and 25 s to refuse otherwise). Measured on real snapshots of 100,000
# processes spawned alike (the most uniform a node gets): sections inflate
# at most 38 times, 2.9 compressed bytes a process. A node name of 255
# characters makes the pid column ~3 times longer inflated, not longer
# compressed; so: at most 256 times, at least one byte a process, and a
# process section of CHUNK_ROWS rows at most 8 MiB inflated (a row is under
# 400 bytes even then).
MAX_INFLATION = 256
MAX_CHUNK_BYTES = 8 * 1024 * 1024
MIN_BYTES_PER_ROW = 1
# Items one section may decode into (a table tuple is 7; format 1's
# process columns were lists): 2M is 280,000 ETS tables, ~120 MB at most.
MAX_SECTION_ITEMS = 2_000_000


def section_budget(kind: str, payload: bytes) -> int | None:
    """The most a section may inflate to: what its compressed header
    claims, if its bytes can hold that; None if they cannot."""
    if len(payload) < 6 or payload[:2] != b"\x83\x50":
        return len(payload)  # not compressed: no more than itself
    (claimed,) = struct.unpack_from(">I", payload, 2)
    limit = MAX_CHUNK_BYTES if kind == "processes" else MAX_SECTION
    if claimed > min(limit, MAX_INFLATION * len(payload) + 65536):
        return None
    return claimed


def _rows_fit(term: Any, size: int) -> bool:
    """Whether a process section's row count fits its compressed bytes and
    the writer's chunk size."""
    column = term.get("memory") if isinstance(term, dict) else None
    if isinstance(column, bytes):
        rows = len(column) // 8
    elif isinstance(column, (list, str)):  # format 1: a list of integers
        rows = len(column)
    else:
        return True  # another shape: load() refuses it by name
    return rows <= CHUNK_ROWS and rows * MIN_BYTES_PER_ROW <= size + 64


def snapshot(remote: Remote, path: str, gc: str, jobs: int,
             max_gc: int | None, progress: Callable[[str], None]) -> dict:
    """Take one snapshot and write it to ``path``; what was written."""
    header, sections = take(remote, gc, jobs, max_gc, progress)
    size = write(path, header, sections)
    return {"node": header["node"], "file": path, "bytes": size,
            "time": header["time"], "gc": gc,
            "processes": header["processes"],
            "ets_tables": header["sample"]["ets_count"],
            "ports": header["sample"]["port_count"]}


def leak_hunt(remote: Remote, count: int, interval: float, gc: str,
              save: str | None, jobs: int, max_gc: int | None,
              progress: Callable[[str], None],
              sleep: Callable[[float], None] = time.sleep) -> dict:
    """The three-snapshot method in one go: ``count`` snapshots
    ``interval`` seconds apart, each after the chosen collection, then the
    diff of the first, the second and the last.

    What was taken is always kept, in ``save`` or else a new folder of the
    temporary directory (the result's "saved"): a node dying of memory is
    when the evidence matters most. Ctrl-C keeps what was taken and diffs
    it when there are two or more; so does a node that fails mid-way, and
    then EndedEarly carries that diff and the node's error."""
    import tempfile

    from beam_probe.errors import EndedEarly, ProbeError
    from beam_probe.snapshots.compare import heap_diff, load

    folder = save or tempfile.mkdtemp(prefix="beam-probe-hunt-")
    if save:
        os.makedirs(save, exist_ok=True)
    files: list[str] = []
    interrupted = False
    failure: ProbeError | None = None
    elixir = False
    stamp = time.strftime("%Y%m%dT%H%M%S")
    try:
        for i in range(count):
            if i:
                progress(f"snapshot {i + 1} of {count} in "
                         f"{interval:g} s")
                sleep(interval)
            progress(f"snapshot {i + 1} of {count}")
            header, sections = take(remote, gc, jobs, max_gc, progress)
            path = os.path.join(folder, f"{remote.node}-{stamp}-"
                                f"{i + 1}.snapshot")
            write(path, header, sections)
            files.append(path)
            elixir = header["elixir"]
    except KeyboardInterrupt:
        interrupted = True
    except ProbeError as exc:
        failure = exc
    if not files and not save:
        os.rmdir(folder)  # nothing taken: no folder to name
    chosen = files if len(files) <= 3 else [files[0], files[1], files[-1]]
    diff = None
    if len(chosen) >= 2:
        progress("comparing")
        diff = heap_diff([load(path) for path in chosen])
    result = {"node": remote.node, "interval": interval, "gc": gc,
              "taken": len(files), "files": files,
              "saved": folder if files or save else None,
              "interrupted": interrupted, "compared": len(chosen),
              "diff": diff}
    if failure is not None:
        result["error"] = f"{failure.label}: {failure}"
        raise EndedEarly(result, failure, elixir)
    return result


__all__ = ["FORMAT", "MAGIC", "SnapshotError", "leak_hunt", "read",
           "snapshot", "take", "write"]
