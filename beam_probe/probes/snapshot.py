"""snapshot: the whole node at one moment, to a file, for diff and
leak-hunt (the three-snapshot method).

One call on the node (beam_probe_snapshot:snapshot/9) returns the memory
figures, every process as compressed row chunks, every ETS table and port,
and the names of the newest atoms. The chunks go to the file as the node
made them: taking a snapshot decodes nothing but the header, and a
million processes make a file of a few MB.

File format, version 2 (a later beam-probe reads it; this one still reads
version 1, whose process columns were lists of terms):

    BEAMPROBE SNAPSHOT 2\\n
    <header: one JSON object>\\n
    then sections, each: a kind byte, a 4-byte big-endian length, and
    that many bytes of a versioned external term (as term_to_binary makes
    it, compressed):
      P  processes: a map of columns, as erl_helpers/beam_probe_snapshot.erl
         describes (fixed-width binaries; the repeated terms once per
         chunk, with an index per process)
      T  ETS tables: [{Id, Name, Owner, Size, MemoryWords, Type}]
      O  ports: [{Port, {name, Name}, {connected, Owner}, {memory, Bytes}}]
      E  the end (length 0): a file without it was cut short

The header holds the node, its OTP release, the time, the --gc mode, the
node's word size, erlang:memory(), the allocator and count figures of a
watch sample, which process_info items the node had (label,
'$initial_call'), the atom count and the newest atoms' names.
"""

from __future__ import annotations

import json
import os
import struct
import time
from typing import Any, Callable, Iterator

from ..errors import OutputFailed, UsageError
from ..helpers import Local
from ..remote import Remote
from .watch import record

HELPER = "beam_probe_snapshot"
SCAN = "beam_probe_scan"
MAGIC = b"BEAMPROBE SNAPSHOT 2\n"
FORMAT = 2
# Format 1 (its process columns were lists of terms) is still read.
READABLE = {b"BEAMPROBE SNAPSHOT 1\n": 1, MAGIC: FORMAT}
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
KINDS = {b"P": "processes", b"T": "tables", b"O": "ports", b"E": "end"}


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
    from .watch import sample_node

    epoch = time.time()
    if gc != "none":
        progress(f"collecting ({gc})")
        sample_node(remote, gc, max_gc, jobs)
    progress("reading every process, table and port")
    reply = remote.run(HELPER, "snapshot", CHUNK_ROWS, MAX_ATOMS, jobs,
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
    sections += [(b"T", bytes(reply["tables"])),
                 (b"O", bytes(reply["ports"]))]
    header["chunks"] = len(reply["processes"])
    return header, sections


def write(path: str, header: dict, sections: list[tuple[bytes, bytes]]
          ) -> int:
    """Write the file (a temporary file, then a rename: a reader never sees
    half of one). Its size in bytes."""
    from ..files import error_text, write_whole

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
    from ..files import error_text, open_regular

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
        except ValueError:
            header = None
        if not isinstance(header, dict) or header.get("format") != version \
                or not isinstance(header.get("node"), str) \
                or not isinstance(header.get("sample"), dict):
            raise SnapshotError(f"{path}: the snapshot's header is damaged")
    except BaseException:
        f.close()
        raise
    return header, _sections(path, f)


def _sections(path: str, f: Any) -> Iterator[tuple[str, Any]]:
    from ..erldist import etf

    with f:
        while True:
            head = f.read(5)
            if len(head) < 5 or head[:1] not in KINDS:
                raise SnapshotError(f"{path} is cut short or damaged")
            kind, size = KINDS[head[:1]], struct.unpack(">I", head[1:])[0]
            if kind == "end":
                return
            if size > MAX_SECTION:
                raise SnapshotError(f"{path} is damaged (a section of "
                                    f"{size} bytes)")
            payload = f.read(size)
            if len(payload) < size:
                raise SnapshotError(f"{path} is cut short")
            try:
                term = etf.decode(payload, max_items=5_000_000,
                                  max_uncompressed=MAX_SECTION)
            except (ValueError, TypeError):
                raise SnapshotError(f"{path} is damaged (a section does "
                                    "not decode)") from None
            yield kind, term


def snapshot(remote: Remote, path: str, gc: str, jobs: int,
             max_gc: int | None, progress: Callable[[str], None]) -> dict:
    """Take one snapshot and write it to ``path``; what was written."""
    header, sections = take(remote, gc, jobs, max_gc, progress)
    size = write(path, header, sections)
    return {"node": header["node"], "file": path, "bytes": size,
            "time": header["time"], "gc": gc,
            "processes": header["sample"]["process_count"],
            "ets_tables": header["sample"]["ets_count"],
            "ports": header["sample"]["port_count"]}


def leak_hunt(remote: Remote, count: int, interval: float, gc: str,
              save: str | None, jobs: int, max_gc: int | None,
              progress: Callable[[str], None],
              sleep: Callable[[float], None] = time.sleep) -> dict:
    """The three-snapshot method in one go: ``count`` snapshots
    ``interval`` seconds apart, each after the chosen collection, then the
    diff of the first, the second and the last. Ctrl-C keeps what was
    taken and diffs it when there are two or more."""
    import shutil
    import tempfile

    from .heapdiff import heap_diff, load

    folder = save or tempfile.mkdtemp(prefix="beam-probe-hunt-")
    if save:
        os.makedirs(save, exist_ok=True)
    files: list[str] = []
    interrupted = False
    stamp = time.strftime("%Y%m%dT%H%M%S")
    try:
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
        except KeyboardInterrupt:
            interrupted = True
        chosen = files if len(files) <= 3 else \
            [files[0], files[1], files[-1]]
        diff = None
        if len(chosen) >= 2:
            progress("comparing")
            diff = heap_diff([load(path) for path in chosen])
    finally:
        if not save:
            shutil.rmtree(folder, ignore_errors=True)
    return {"node": remote.node, "interval": interval, "gc": gc,
            "taken": len(files), "files": files if save else [],
            "saved": save,
            "interrupted": interrupted, "compared": len(chosen),
            "diff": diff}


__all__ = ["FORMAT", "MAGIC", "SnapshotError", "leak_hunt", "read",
           "snapshot", "take", "write"]
