"""The snapshot file: a versioned container, read and written whole and
never trusted.
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
'$initial_call'), the atom count and the newest atoms' names, (format
3) the number of processes, ours left out, and (since issue 38, absent
before) how many proc_lib processes' dictionaries were copied whole for
their '$initial_call' (OTP 25) and how many were not, their heap past
dictionary_heap_cap bytes.
"""

from __future__ import annotations

import json
import os
import struct
from typing import TYPE_CHECKING, Any, Iterator

from beam_probe.errors import OutputFailed, UsageError

if TYPE_CHECKING:
    from beam_probe.files import Folder


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


class SnapshotError(UsageError):
    """A file that is not a whole snapshot of ours."""

    label = "snapshot"


def encode(header: dict[Any, Any], sections: list[tuple[bytes, bytes]]
           ) -> list[bytes]:
    """A snapshot file's bytes, in pieces."""
    data = [MAGIC, json.dumps(header, separators=(",", ":")).encode()
            + b"\n"]
    for kind, payload in sections + [(b"E", b"")]:
        data.append(kind + struct.pack(">I", len(payload)))
        data.append(payload)
    return data


def write(path: str, header: dict[Any, Any], sections: list[tuple[bytes, bytes]]
          ) -> int:
    """Write the file the user named (a temporary file, then a rename: a
    reader never sees half of one), 0600 under the umask (files.PRIVATE_
    FILE says why). Its size in bytes."""
    from beam_probe.files import error_text, write_whole

    try:
        return write_whole(path, encode(header, sections), None)
    except OSError as exc:
        raise OutputFailed(f"cannot write {path}: {error_text(exc)}") \
            from None


def open_folder(path: str) -> Folder:
    """The folder ``path`` for files of our naming (snapshot --cluster -o,
    leak-hunt --save), made 0700 if missing; OutputFailed when it cannot
    be (under a regular file, a read-only file system)."""
    from beam_probe.files import Folder, error_text

    try:
        return Folder(path)
    except OSError as exc:
        raise OutputFailed(f"cannot make or open the folder {path}: "
                           f"{error_text(exc)}") from None


def hunt_folder(save: str | None) -> Folder:
    """Where a leak hunt keeps its snapshots: ``save``, else a new folder
    of the temporary directory (mkdtemp: 0700, ours alone)."""
    if save:
        return open_folder(save)
    import tempfile

    try:
        path = tempfile.mkdtemp(prefix="beam-probe-hunt-")
    except OSError as exc:
        from beam_probe.files import error_text

        raise OutputFailed(f"cannot make a folder in "
                           f"{tempfile.gettempdir()}: {error_text(exc)}") \
            from None
    return open_folder(path)


def write_in(folder: Folder, name: str, header: dict[Any, Any],
             sections: list[tuple[bytes, bytes]]) -> tuple[str, int]:
    """Write the snapshot to ``name`` in ``folder`` without following a
    link planted there (files.Folder); its path and size in bytes."""
    from beam_probe.files import error_text

    path = folder.join(name)
    try:
        return path, folder.write(name, encode(header, sections))
    except OSError as exc:
        raise OutputFailed(f"cannot write {path}: {error_text(exc)}") \
            from None


# A file name may hold 255 bytes (NAME_MAX), and a node's name 255
# characters of up to 4 bytes each before its host: past this many bytes
# (or with a character a file name should not hold) a node's file is
# named by its first bytes and a hash of the whole name. With a leak
# hunt's suffix (-YYYYmmddTHHMMSS-NNN.snapshot) a name is at most 109
# bytes, and the temporary it is written as is shorter still. The node's
# own name is in the file's header, which is what diff and leak-hunt
# read.
MAX_NAME_BYTES = 80
_HEAD_BYTES = 60


def file_name(node: str, suffix: str = "") -> str:
    """The file name for a snapshot of ``node`` (``suffix`` before
    ".snapshot"): the node's name itself where it is short and plain, else
    a readable start, "~" and 16 hex digits of the name's SHA-256. A plain
    name holds no "~", so two nodes never share a file."""
    if node.isprintable() and not any(c in node for c in "/~") and \
            not node.startswith(".") and \
            len(node.encode("utf-8")) <= MAX_NAME_BYTES:
        return node + suffix + ".snapshot"
    import hashlib

    clean = "".join(c if c.isprintable() and c not in "/~" else "_"
                    for c in node).lstrip(".")
    head = clean.encode("utf-8")[:_HEAD_BYTES].decode("utf-8", "ignore")
    digest = hashlib.sha256(node.encode("utf-8", "surrogatepass")
                            ).hexdigest()[:16]
    return f"{head}~{digest}{suffix}.snapshot"


def check_place(path: str, folder: bool, hint: str = "") -> None:
    """Before anything connects: whether ``path`` can take the snapshot
    file (``folder`` False) or be the folder for files of our naming, so
    that a scan of a million processes is not taken for nothing. A path
    under a regular file, in a read-only file system or a folder we may
    not write is OutputFailed (exit 11), as writing it would be; a folder
    asked for where a file is, UsageError (``hint`` says what was meant).
    What exists and is not a regular file (/dev/stdout, a FIFO) is
    written as a stream and needs nothing of its folder."""
    import stat

    from beam_probe.files import Refused, check_output

    try:
        check_output(path, folder)  # another user's link: refused
        info = os.lstat(path)
    except Refused as exc:
        raise OutputFailed(f"cannot write {path}: {exc}") from None
    except FileNotFoundError:
        info = None
    except OSError as exc:  # ENOTDIR, ENAMETOOLONG, EACCES...
        raise OutputFailed(f"cannot write {path}: {exc.strerror}") from None
    if folder:
        if info is not None:
            if not os.path.isdir(path):
                raise UsageError(f"{path} is not a folder{hint}")
            _writable(path, path)
            return
    elif info is not None:
        if stat.S_ISDIR(info.st_mode):
            raise OutputFailed(f"cannot write {path}: it is a directory")
        if not stat.S_ISREG(info.st_mode):
            return
    # What is missing is made in the nearest folder that exists (a single
    # file's folder must exist: write_whole makes none).
    here = os.path.dirname(os.path.abspath(path))
    while folder and not os.path.lexists(here):
        here = os.path.dirname(here)
    if not os.path.isdir(here):
        reason = "Not a directory" if os.path.lexists(here) \
            else "No such file or directory"
        raise OutputFailed(f"cannot write {path}: {here}: {reason}")
    _writable(path, here)


def _writable(path: str, folder: str) -> None:
    if os.access(folder, os.W_OK | os.X_OK):
        return
    try:
        read_only = bool(os.statvfs(folder).f_flag & os.ST_RDONLY)
    except OSError:
        read_only = False
    raise OutputFailed(f"cannot write {path}: {folder}: " + (
        "Read-only file system" if read_only else "Permission denied"))


def read(path: str) -> tuple[dict[str, Any], Iterator[tuple[str, Any]]]:
    """The header, and the sections decoded one at a time (kind, term).
    Anything that is not a whole snapshot of ours is a SnapshotError
    naming what is wrong."""
    header, f, size = _open(path)
    return header, _sections(path, f, size)


def _open(path: str) -> tuple[dict[str, Any], Any, int]:
    """The header, the file open just past it, and the file's size."""
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
    return header, f, info.st_size


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
    for field in ("creation", "chunks", "processes", "dictionary_heap_cap",
                  "dictionaries_read", "dictionaries_unread"):
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
    with f:
        while True:
            kind, size = _section_head(path, f, file_size)
            if kind == "end":
                return
            payload = f.read(size)
            if len(payload) < size:
                raise SnapshotError(f"{path} is cut short")
            yield kind, decode_section(path, kind, payload)


def _section_head(path: str, f: Any, file_size: int) -> tuple[str, int]:
    head = f.read(5)
    if len(head) < 5 or head[:1] not in KINDS:
        raise SnapshotError(f"{path} is cut short or damaged")
    kind, size = KINDS[head[:1]], struct.unpack(">I", head[1:])[0]
    if kind != "end" and size > min(MAX_SECTION, file_size):
        raise SnapshotError(f"{path} is damaged (a section of "
                            f"{size} bytes)")
    return kind, size


def _places(path: str, f: Any, file_size: int
            ) -> Iterator[tuple[str, Any]]:
    """A file's sections as _sections reads them, but each process
    section passed over, given as its (offset, size): open_sections."""
    while True:
        kind, size = _section_head(path, f, file_size)
        if kind == "end":
            return
        if kind == "processes":
            offset = f.tell()
            if offset + size > file_size:
                raise SnapshotError(f"{path} is cut short")
            f.seek(size, os.SEEK_CUR)
            yield kind, (offset, size)
            continue
        payload = f.read(size)
        if len(payload) < size:
            raise SnapshotError(f"{path} is cut short")
        yield kind, decode_section(path, kind, payload)


class Sections:
    """A snapshot's sections for passes over its processes that hold one
    process section at a time (diff's: issue 39 asks our side bounded;
    three snapshots of a million processes in columns took 272 MB): the
    other sections decoded once, in ``small``, and the process sections
    decoded afresh on each pass, each dropped before the next."""

    def __init__(self, path: str, small: list[tuple[str, Any]],
                 count: int) -> None:
        self.path, self.small, self.count = path, small, count

    def processes(self) -> Iterator[Any]:
        raise NotImplementedError

    def close(self) -> None:
        pass


class _InFile(Sections):
    def __init__(self, path: str, f: Any, small: list[tuple[str, Any]],
                 places: list[tuple[int, int]]) -> None:
        super().__init__(path, small, len(places))
        self._file, self._places = f, places

    def processes(self) -> Iterator[Any]:
        for offset, size in self._places:
            self._file.seek(offset)
            payload = self._file.read(size)
            if len(payload) < size:  # cut since it was opened
                raise SnapshotError(f"{self.path} is cut short")
            yield decode_section(self.path, "processes", payload)

    def close(self) -> None:
        self._file.close()


class _InHand(Sections):
    def __init__(self, path: str, small: list[tuple[str, Any]],
                 payloads: list[bytes]) -> None:
        super().__init__(path, small, len(payloads))
        self._payloads = payloads

    def processes(self) -> Iterator[Any]:
        for payload in self._payloads:
            yield decode_section(self.path, "processes", payload)


def open_sections(path: str) -> tuple[dict[str, Any], Sections]:
    """The header and the sections of a snapshot file, checked as read()
    checks them: every section's place is found (a file cut short or
    damaged refused) and the small ones decoded before any process
    section is. The file stays open until ``close``."""
    header, f, size = _open(path)
    small: list[tuple[str, Any]] = []
    places: list[tuple[int, int]] = []
    try:
        for kind, item in _places(path, f, size):
            if kind == "processes":
                places.append(item)
            else:
                small.append((kind, item))
    except BaseException:
        f.close()
        raise
    return header, _InFile(path, f, small, places)


def held_sections(path: str, sections: list[tuple[bytes, bytes]]
                  ) -> Sections:
    """Sections as take() made them, as open_sections gives a file's: a
    snapshot just taken is compared without reading its file back."""
    small: list[tuple[str, Any]] = []
    payloads: list[bytes] = []
    for code, payload in sections:
        kind = KINDS.get(code)
        if kind is None or kind == "end":
            raise SnapshotError(f"{path}: a section of unknown kind")
        if kind == "processes":
            payloads.append(payload)
        else:
            small.append((kind, decode_section(path, kind, payload)))
    return _InHand(path, small, payloads)


def decode_section(path: str, kind: str, payload: bytes) -> Any:
    """One section's term, within what its bytes can hold."""
    from beam_probe.erldist import etf

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
    if kind == "processes" and not _rows_fit(term, len(payload)):
        raise SnapshotError(f"{path} is damaged (a section holds "
                            "more rows than its bytes can)")
    return term


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
    return int(claimed)


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


__all__ = ["CHUNK_ROWS", "FORMAT", "MAGIC", "MAX_ATOMS", "Sections",
           "SnapshotError", "check_place", "encode", "file_name",
           "header_problem", "held_sections", "hunt_folder", "open_folder",
           "open_sections", "read", "section_budget", "write", "write_in"]
