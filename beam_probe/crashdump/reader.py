"""The crash dump file: memory-mapped, its sections indexed in one pass,
each read only when asked, in memory that does not grow with the file.

Facts of the format (erts/doc/guides/crash_dump.md, erl_crash_dump:0.5,
written by OTP 20.3 to 28): the first line is ``=erl_crash_dump:0.5``;
every section starts on a line ``=tag`` or ``=tag:id``; a dump is whole
when its last section is ``=end``, and ``=abort:reason`` ends one cut short
(ERL_CRASH_DUMP_BYTES, ERL_CRASH_DUMP_SECONDS). A node killed while it
writes leaves neither.

Memory: the index is 9 bytes a section (an offset, a tag's number), and
the file is read a window at a time with os.pread (never mapped), so
resident memory stays near WINDOW however large the file.

Never mapped: a node that crashed again to the same path truncates the
file while we read it, and a read of a mapped page past the new end is
SIGBUS (exit 135, no line: the hostile round's finding). A read that
comes back short, or a file whose size, time or inode moved since it
was opened, is instead a DumpError: one line, exit 2.
"""

from __future__ import annotations

import os
import re
from array import array
from itertools import compress
from typing import Any, Iterator, NamedTuple

from beam_probe.errors import UsageError

FORMAT = b"=erl_crash_dump:0.5\n"
# The one pass and every search read this much at a time (held while
# it is read: 32 MiB took crashdump from 17 to 48 MB of memory).
WINDOW = 8 * 1024 * 1024
# A section's header line (=proc:<0.123.0>, =binary:7F00D1E2F3A0,
# =mod:'Elixir.Long.Module'): an atom is at most 255 characters, 1,020
# bytes in UTF-8, quoted and escaped.
MAX_HEADER = 4096
# At most this many sections (9 bytes each in the index: 288 MiB). A node
# writes ~5 a process (proc, stack, heap, dictionary, messages): a node of
# a million processes and its modules and funs stays under 8 million.
MAX_SECTIONS = 32 * 1024 * 1024
# A section's lines are read this much at a time.
LINE_BLOCK = 1024 * 1024
# A tag asked for by id this many times is searched for in the file;
# more, and its ids are indexed (a ranking's rows: a few; a pass over
# every process's stack: all of them).
DIRECT_LOOKUPS = 64
# Distinct tags: OTP 28 writes about 40 kinds.
MAX_TAGS = 255
# What a file that is not a dump starts with: said in the refusal.
MAGIC = ((b"\x1f\x8b", "gzip-compressed: gunzip it first"),
         (b"\x28\xb5\x2f\xfd", "zstd-compressed: unzstd it first"),
         (b"\xfd7zXZ\x00", "xz-compressed: unxz it first"),
         (b"BZh", "bzip2-compressed: bunzip2 it first"),
         (b"PK\x03\x04", "a zip archive: unzip it first"),
         (b"-----BEGIN PGP", "encrypted (PGP): decrypt it first"),
         (b"\x85\x01", "encrypted (GnuPG): decrypt it first"),
         (b"\x8c\x0d", "encrypted (GnuPG): decrypt it first"),
         (b"Salted__", "encrypted (openssl enc): decrypt it first"))

# Where the head ends: the node writes every process's =proc, the ports,
# tables, timers, nodes, modules and funs first, then each process's
# dictionary, stack, heap and messages, then literals, binaries, atoms.
HEAP_TAGS = frozenset((b"proc_dictionary", b"proc_stack", b"proc_heap",
                       b"proc_messages"))
# The tags that occur in the head only: asking for any other reads on.
HEAD_TAGS = frozenset((
    "erl_crash_dump", "scheduler", "dirty_cpu_scheduler",
    "dirty_io_scheduler", "dirty_cpu_run_queue", "dirty_io_run_queue",
    "memory", "hash_table", "index_table", "allocated_areas", "allocator",
    "proc", "port", "ets", "timer", "node", "no_distribution",
    "not_connected", "visible_node", "hidden_node", "loaded_modules",
    "mod", "fun", "instr_data"))

_SECTION = re.compile(rb"\n=")
_TAG = re.compile(rb"=([A-Za-z0-9_.]{1,64})(?::([^\n]*))?\n")


class DumpError(UsageError):
    """A file that is not a crash dump beam-probe reads, or one damaged
    past reading: one line, exit 2 (a bad argument, as a bad snapshot)."""

    label = "crash dump"


class DumpChanged(DumpError):
    """The file changed while it was read (a node that crashed again to
    the same path rewrites it in place)."""


class _File:
    """A dump's bytes as a mapped file offered them (slices, find, rfind,
    len), each read with os.pread and checked: see the module's note."""

    # A search starts with this much and doubles up to WINDOW: most look
    # for the end of a line a few bytes on.
    FIRST = 4096

    def __init__(self, fd: int, path: str, info: os.stat_result) -> None:
        self.fd, self.path, self.size = fd, path, info.st_size
        self._stamp = (info.st_size, info.st_mtime_ns, info.st_ino)

    def __len__(self) -> int:
        return self.size

    def check(self) -> None:
        info = os.fstat(self.fd)
        if (info.st_size, info.st_mtime_ns, info.st_ino) != self._stamp:
            raise DumpChanged(
                f"{self.path} changed while it was read (rewritten: a node "
                "that crashed again to the same path?); copy the dump "
                "elsewhere and read the copy")

    def read(self, start: int, end: int) -> bytes:
        start, end = max(0, start), min(end, self.size)
        if end <= start:
            return b""
        try:
            data = os.pread(self.fd, end - start, start)
        except OSError as exc:
            raise DumpError(f"cannot read {self.path}: {exc.strerror}") \
                from None
        # Checked after the read: what was read was read unchanged.
        self.check()
        if len(data) != end - start:
            raise DumpChanged(f"{self.path} changed while it was read "
                              "(it is shorter now): copy the dump "
                              "elsewhere and read the copy")
        return data

    def __getitem__(self, where: slice) -> bytes:
        start = 0 if where.start is None else where.start
        stop = self.size if where.stop is None else where.stop
        return self.read(start, stop)

    def find(self, needle: bytes, start: int = 0,
             end: int | None = None) -> int:
        end = self.size if end is None else min(end, self.size)
        at, width = max(0, start), self.FIRST
        while at < end:
            stop = min(end, at + width)
            found = self.read(at, min(end, stop + len(needle) - 1)).find(
                needle)
            if found >= 0:
                return at + found
            at, width = stop, min(WINDOW, width * 2)
        return -1

    def rfind(self, needle: bytes, start: int = 0,
              end: int | None = None) -> int:
        end = self.size if end is None else min(end, self.size)
        start = max(0, start)
        stop, width = end, self.FIRST
        while stop > start:
            lo = max(start, stop - width)
            found = self.read(lo, min(end, stop + len(needle) - 1)).rfind(
                needle)
            if found >= 0:
                return lo + found
            stop, width = lo, min(WINDOW, width * 2)
        return -1

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class Section(NamedTuple):
    """One section: its tag, its id (the text after ``=tag:``, '' for
    none), where its body starts (after the header line) and ends (the
    next section's '=', or the end of the file)."""

    tag: str
    id: str
    start: int
    end: int  # past the last line's newline


def _hash(text: str) -> int:
    """A section id's 63-bit hash (stable within a run)."""
    return hash(text) & 0x7FFFFFFFFFFFFFFF


def looks_like_dump(word: str) -> bool:
    """Whether a NODE argument names a dump: a path with a '/', a name
    with '.dump' in it, or a file here that starts as a dump does (a
    renamed one); a node's name has none of these. A path that names
    nothing is a DumpError here, not a node looked for in EPMD; a word
    with '@' that names no file is a node."""
    if os.path.lexists(word):
        if "/" in word or ".dump" in word:
            return True  # Dump() says what it is if not a dump
        return starts_as_dump(word)
    if "/" in word or (".dump" in word and "@" not in word):
        raise DumpError(f"no file {word} (a crash dump's path, given where "
                        "a node goes)")
    return False


def starts_as_dump(path: str) -> bool:
    """Whether a regular file begins as a crash dump (its first line)."""
    from beam_probe.files import Refused, open_regular

    try:
        fd, _info = open_regular(path)
    except (Refused, OSError):
        return False
    try:
        return os.pread(fd, len(FORMAT), 0) == FORMAT
    finally:
        os.close(fd)


class Dump:
    """An open crash dump. ``with Dump(path) as dump:``; every read after
    close raises ValueError (the map is gone)."""

    def __init__(self, path: str) -> None:
        from beam_probe.files import Refused, error_text, open_regular

        self.path = path
        try:
            fd, info = open_regular(path)
        except Refused as exc:
            raise DumpError(str(exc)) from None
        except OSError as exc:
            raise DumpError(f"cannot read {path}: {error_text(exc)}") \
                from None
        self.size = info.st_size
        self.mm = _File(fd, path, info)
        try:
            if self.size < len(FORMAT):
                raise DumpError(self._not_a_dump(self.mm[:64]))
            head = self.mm[:64]
            if not head.startswith(FORMAT):
                raise DumpError(self._not_a_dump(head))
        except BaseException:
            self.mm.close()
            raise
        self._tags: list[str] = []
        self._tag_numbers: dict[bytes, int] = {}
        self._starts = array("q")
        self._kinds = array("B")
        self._by_tag: dict[str, array[int]] = {}
        # What readers of the dump work out once (its preamble, its
        # binaries' sizes), by name.
        self.memo: dict[str, Any] = {}
        self._ids: dict[str, tuple[array[int], array[int]]] = {}
        self._asked: dict[str, int] = {}
        # The pass reads the head (every section but the processes' heaps
        # and what follows them) now, and the rest when a section there
        # is first asked for: the overview never asks.
        self._scanned = 0
        self._whole = False
        self._left_out = -1  # a section cut by =abort
        self.heaps_start: int | None = None
        try:
            self._add(0)
            self._scan(head_only=True)
            self._ending()
        except BaseException:
            self.mm.close()
            raise

    def _ending(self) -> None:
        """Whether the dump ends with =end or =abort, read from its tail
        (no pass over the heaps). One that ends with neither was cut while
        written (the node killed, the disk full, a partial copy): its last
        section is not whole, so it is left out and named (cut_in)."""
        self.cut_in: str | None = None
        self.abort_reason: str | None = None
        tail_from = max(0, self.size - 4096)
        last = self.mm.rfind(b"\n=", tail_from)
        tail = self.mm[last + 1:self.size] if last >= 0 else b""
        if tail.startswith(b"=end"):
            self._end = "end"
            return
        if tail.startswith(b"=abort:"):
            self._end = "abort"
            self.abort_reason = tail[7:].split(b"\n", 1)[0][:300].decode(
                "utf-8", "replace")
            # The section the limit stopped is not whole: named, and left
            # out (from the index, now or when the scan reaches it).
            before = self._search_back(b"\n=", last)
            if before >= 0:
                line = self.mm[before + 2:min(last, before + 2 + MAX_HEADER)]
                self.cut_in = "=" + line.split(b"\n", 1)[0].decode(
                    "utf-8", "replace")
                self._left_out = before + 1
                for i in (-1, -2):
                    if len(self._starts) > -i and \
                            self._starts[i] == before + 1:
                        del self._starts[i]
                        del self._kinds[i]
                        break
            return
        self._end = "truncated"
        self._scan()
        if len(self._starts) > 1:
            cut = self._section(len(self._starts) - 1)
            self.cut_in = f"={cut.tag}" + (f":{cut.id}" if cut.id else "")
            del self._starts[-1]
            del self._kinds[-1]
            self._by_tag.clear()
            self._ids.clear()

    def _search_back(self, needle: bytes, end: int) -> int:
        """mm.rfind before ``end``, a window at a time backwards, each
        window's pages given back (the section before a cut may be a
        gigabyte of heap)."""
        stop = end
        while stop > 0:
            start = max(0, stop - WINDOW)
            at = self.mm.rfind(needle, start, min(end, stop + len(needle)))
            self.release(start, stop)
            if at >= 0:
                return at
            stop = start
        return -1

    def _not_a_dump(self, head: bytes) -> str:
        for magic, what in MAGIC:
            if head.startswith(magic):
                return f"{self.path} is {what}"
        if head.startswith(b"=erl_crash_dump:"):
            version = head[16:].split(b"\n", 1)[0][:16]
            return (f"{self.path} is a crash dump of format "
                    f"{version.decode('latin-1')!r}; beam-probe reads "
                    "format 0.5 (OTP 20.3 to 28)")
        return (f"{self.path} is not an Erlang crash dump (it does not "
                "start with =erl_crash_dump:0.5)")

    # --- the one pass ----------------------------------------------------

    def _scan(self, head_only: bool = False) -> None:
        """Index the sections from where the last scan stopped: to the end,
        or (head_only) to the first section of a process's heap."""
        if self._whole:
            return
        mm, size = self.mm, self.size
        finditer = _SECTION.finditer
        window = self._scanned
        # From 1 MiB, doubling to WINDOW: the head alone is often a few
        # hundred KiB, and a window read is a window held (crashdump
        # went from 17 to 48 MB reading 32 MiB first).
        width = 1 << 20
        while window < size:
            end = min(size, window + width)
            width = min(WINDOW, width * 2)
            # A match may straddle the window's end: look one byte on.
            for match in finditer(mm.read(window, min(size, end + 1))):
                at = window + match.start()
                if at >= end:
                    break
                if self._add(at + 1) and head_only:
                    self._scanned = at + 1
                    return
            self.release(window, end)
            window = end
        self._scanned = size
        self._whole = True

    def _add(self, at: int) -> bool:
        """Index the section at ``at``; True for the first section of the
        heaps (where the head ends)."""
        if self.heaps_start is not None and at <= self._scanned:
            return False  # indexed when the head was
        if at == self._left_out:
            return False
        if len(self._starts) >= MAX_SECTIONS:
            raise DumpError(f"{self.path} has more than {MAX_SECTIONS:,} "
                            "sections: more than any node writes")
        line = self.mm[at:at + 72]
        match = _TAG.match(line)
        if match is None:
            # An "=" that starts a line of a section's body (a heap line
            # never does; an atom's name in =atoms may): the tag must be a
            # word and its line end. A long id (an atom) is read whole
            # when asked; here the tag alone.
            tag_end = re.match(rb"=([A-Za-z0-9_.]{1,64})(:|\n)", line)
            if tag_end is None:
                return False
            tag = tag_end.group(1)
        else:
            tag = match.group(1)
        if self.heaps_start is not None and \
                tag.decode("ascii") in HEAD_TAGS:
            # A head's section among the heaps is no node's: an atom's
            # name in =atoms written raw ("...\n=proc:<0.1.0>"), or damage.
            return False
        number = self._tag_numbers.get(tag)
        if number is None:
            if len(self._tags) >= MAX_TAGS:
                raise DumpError(f"{self.path} has more than {MAX_TAGS} "
                                "kinds of section: not a node's dump")
            number = self._tag_numbers[tag] = len(self._tags)
            self._tags.append(tag.decode("ascii"))
        self._starts.append(at)
        self._kinds.append(number)
        if self.heaps_start is None and tag in HEAP_TAGS:
            self.heaps_start = at
            return True
        return False

    # --- sections ----------------------------------------------------------

    def _section(self, i: int) -> Section:
        at = self._starts[i]
        # The body ends with its last line's newline, just before the
        # next section's "=".
        end = self.end_of(i)
        line_end = self.mm.find(b"\n", at, min(end, at + MAX_HEADER) + 1)
        if line_end < 0:
            line_end = min(end, at + MAX_HEADER)
        header = self.mm[at + 1:line_end].decode("utf-8", "replace")
        tag, _, ident = header.partition(":")
        return Section(tag, ident, min(line_end + 1, end), end)

    def sections(self, tag: str) -> Iterator[Section]:
        """Every section of one tag, in the file's order. The pages read
        are given back behind the walk, a window at a time: a million
        processes' =proc sections are a gigabyte of head."""
        released = -1
        for i in self._numbers(tag):
            section = self._section(i)
            if released < 0:
                released = section.start
            elif section.start - released > WINDOW:
                self.release(released, section.start - 1)
                released = section.start
            yield section

    def _numbers(self, tag: str) -> array[int]:
        if not self._whole and tag not in HEAD_TAGS:
            self._scan()
            self._by_tag.clear()
            self._ids.clear()
        found = self._by_tag.get(tag)
        if found is None:
            number = self._tags.index(tag) if tag in self._tags else -1
            # The positions of one byte value, picked in C.
            found = array("l", compress(range(len(self._kinds)),
                                        map(number.__eq__, self._kinds)))
            self._by_tag[tag] = found
        return found

    def proc_numbers(self) -> array[int]:
        """The index numbers of the =proc sections."""
        return self._numbers("proc")

    def section_at(self, number: int) -> Section:
        return self._section(number)

    def offset(self, number: int) -> int:
        """Where section ``number`` starts (its '=')."""
        return self._starts[number]

    def end_of(self, number: int) -> int:
        return self._starts[number + 1] if number + 1 < len(self._starts) \
            else self.size

    def count(self, tag: str) -> int:
        return len(self._numbers(tag))

    def first(self, tag: str) -> Section | None:
        for section in self.sections(tag):
            return section
        return None

    def find(self, tag: str, ident: str) -> Section | None:
        """The section ``=tag:ident``, or None. The first DIRECT_LOOKUPS
        of a tag search the file for the header itself (mm.find, in C); a
        tag asked more often has its ids hashed into two arrays (16 bytes
        a section), then each found by bisection and checked."""
        from bisect import bisect_left

        self._numbers(tag)  # the file indexed as far as the tag needs
        index = self._ids.get(tag)
        if index is None:
            asked = self._asked[tag] = self._asked.get(tag, 0) + 1
            if asked <= DIRECT_LOOKUPS:
                return self._direct(tag, ident)
            pairs = sorted((_hash(self._section(i).id), i)
                           for i in self._numbers(tag))
            index = self._ids[tag] = (array("q", (h for h, _ in pairs)),
                                      array("q", (i for _, i in pairs)))
        hashes, numbers = index
        key = _hash(ident)
        at = bisect_left(hashes, key)
        while at < len(hashes) and hashes[at] == key:
            section = self._section(numbers[at])
            if section.id == ident:
                return section
            at += 1
        return None

    def _direct(self, tag: str, ident: str) -> Section | None:
        """A section found by searching for its header line; only one the
        index holds (not an atom's text that looks like one)."""
        from bisect import bisect_left

        needle = f"\n={tag}:{ident}\n".encode("utf-8", "replace")
        heaps = self.heaps_start is not None and tag not in HEAD_TAGS
        at = self.search(needle, (self.heaps_start or 1) - 1 if heaps
                         else 0)
        while at >= 0:
            i = bisect_left(self._starts, at + 1)
            if i < len(self._starts) and self._starts[i] == at + 1:
                return self._section(i)
            at = self.search(needle, at + 1)
        return None

    def search(self, needle: bytes, start: int, end: int | None = None
               ) -> int:
        """mm.find, a window at a time, each window's pages given back:
        searching a heap of a gigabyte for a line left it resident (an
        inspect peaked at 1,375 MiB on a 1.3 GiB dump; 53 MiB so)."""
        end = self.size if end is None else min(end, self.size)
        window = max(0, start)
        while window < end:
            stop = min(end, window + WINDOW)
            at = self.mm.find(needle, window, min(end, stop + len(needle)))
            self.release(window, stop)
            if at >= 0:
                return at
            window = stop
        return -1

    @property
    def indexed(self) -> bool:
        """Whether every section is indexed (else the head alone)."""
        return self._whole

    @property
    def ending(self) -> str:
        """end (whole), abort (cut short by a limit) or truncated."""
        return self._end

    def read(self, start: int, end: int) -> bytes:
        return self.mm[start:end]

    def lines(self, section: Section, max_line: int = 65536
              ) -> Iterator[bytes]:
        """The section's lines, each without its newline; a line longer
        than ``max_line`` is a DumpError (no real dump's field line is).
        Read a block at a time (a read a line cost a call and a check
        each: 326,474 stack slots)."""
        pos, end = section.start, section.end
        buf, buf_at = b"", pos
        while pos < end:
            nl = buf.find(b"\n", pos - buf_at)
            if nl < 0:
                rest = buf[pos - buf_at:]
                have = buf_at + len(buf)
                if len(rest) > max_line or have >= end:
                    if len(rest) > max_line:
                        raise DumpError(
                            f"{self.path}: a line of ={section.tag}:"
                            f"{section.id} is longer than {max_line:,} "
                            "bytes: damaged")
                    yield rest
                    return
                more = self.mm.read(have, min(end, have + max(
                    LINE_BLOCK, len(rest))))
                buf, buf_at = rest + more, pos
                continue
            if nl - (pos - buf_at) > max_line:
                raise DumpError(f"{self.path}: a line of ={section.tag}:"
                                f"{section.id} is longer than {max_line:,} "
                                "bytes: damaged")
            yield buf[pos - buf_at:nl]
            pos = buf_at + nl + 1

    def release(self, start: int, end: int) -> None:
        """A range read through once. Nothing to give back: the file is
        read into windows of bytes, never mapped (callers say where their
        pass is, as they did for a map's pages)."""

    def close(self) -> None:
        self.mm.close()

    def __enter__(self) -> "Dump":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["Dump", "DumpChanged", "DumpError", "FORMAT", "MAX_SECTIONS", "Section",
           "looks_like_dump", "starts_as_dump"]
