"""The crash dump file: memory-mapped, its sections indexed in one pass,
each read only when asked, in memory that does not grow with the file.

Facts of the format (erts/doc/guides/crash_dump.md, erl_crash_dump:0.5,
written by OTP 20.3 to 28): the first line is ``=erl_crash_dump:0.5``;
every section starts on a line ``=tag`` or ``=tag:id``; a dump is whole
when its last section is ``=end``, and ``=abort:reason`` ends one cut short
(ERL_CRASH_DUMP_BYTES, ERL_CRASH_DUMP_SECONDS). A node killed while it
writes leaves neither.

Memory: the index is 9 bytes a section (an offset, a tag's number), and
the pages the one pass reads are given back as it goes (MADV_DONTNEED on
each window), so resident memory stays near WINDOW however large the
file: measured, a 114 MB dump left 157 MB resident when read through
without it.
"""

from __future__ import annotations

import mmap
import os
import re
from array import array
from typing import Iterator, NamedTuple

from beam_probe.errors import UsageError

FORMAT = b"=erl_crash_dump:0.5\n"
# The one pass reads this much at a time, then gives the pages back.
WINDOW = 32 * 1024 * 1024
# A section's header line (=proc:<0.123.0>, =binary:7F00D1E2F3A0,
# =mod:'Elixir.Long.Module'): an atom is at most 255 characters, 1,020
# bytes in UTF-8, quoted and escaped.
MAX_HEADER = 4096
# At most this many sections (9 bytes each in the index: 288 MiB). A node
# writes ~5 a process (proc, stack, heap, dictionary, messages): a node of
# a million processes and its modules and funs stays under 8 million.
MAX_SECTIONS = 32 * 1024 * 1024
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

_SECTION = re.compile(rb"\n=")
_TAG = re.compile(rb"=([A-Za-z0-9_.]{1,64})(?::([^\n]*))?\n")


class DumpError(UsageError):
    """A file that is not a crash dump beam-probe reads, or one damaged
    past reading: one line, exit 2 (a bad argument, as a bad snapshot)."""

    label = "crash dump"


class Section(NamedTuple):
    """One section: its tag, its id (the text after ``=tag:``, '' for
    none), where its body starts (after the header line) and ends (the
    next section's '=', or the end of the file)."""

    tag: str
    id: str
    start: int
    end: int  # past the last line's newline


def looks_like_dump(word: str) -> bool:
    """Whether a NODE argument names a dump: an existing file whose name
    has a '/' or ends in '.dump' (a node's name has neither)."""
    return ("/" in word or word.endswith(".dump")) and os.path.isfile(word)


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
        try:
            self.size = info.st_size
            if self.size < len(FORMAT):
                raise DumpError(self._not_a_dump(os.pread(fd, 64, 0)))
            self.mm = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
        except OSError as exc:
            raise DumpError(f"cannot map {path}: {error_text(exc)}") \
                from None
        finally:
            os.close(fd)
        head = self.mm[:64]
        if not head.startswith(FORMAT):
            self.mm.close()
            raise DumpError(self._not_a_dump(head))
        self._tags: list[str] = []
        self._tag_numbers: dict[bytes, int] = {}
        self._starts = array("q")
        self._kinds = array("B")
        self._by_tag: dict[str, array[int]] = {}
        self._index()
        # A dump that ends with neither =end nor =abort was cut while it
        # was written (the node killed, the disk full, a partial copy):
        # its last section is not whole, so it is left out and named.
        self.cut_in: str | None = None
        if self.last_tag not in ("end", "abort") and len(self._starts) > 1:
            last = self._section(len(self._starts) - 1)
            self.cut_in = f"={last.tag}" + (f":{last.id}" if last.id else "")
            del self._starts[-1]
            del self._kinds[-1]

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

    def _index(self) -> None:
        mm, size = self.mm, self.size
        finditer = _SECTION.finditer
        starts, kinds = self._starts, self._kinds
        self._add(0)
        window = 0
        while window < size:
            end = min(size, window + WINDOW)
            # A match may straddle the window's end: look one byte on.
            for match in finditer(mm, window, min(size, end + 1)):
                at = match.start()
                if at >= end:
                    break
                self._add(at + 1)
            if hasattr(mm, "madvise"):
                mm.madvise(mmap.MADV_DONTNEED, window, end - window)
            window = end
        del starts, kinds

    def _add(self, at: int) -> None:
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
                return
            tag = tag_end.group(1)
        else:
            tag = match.group(1)
        number = self._tag_numbers.get(tag)
        if number is None:
            if len(self._tags) >= MAX_TAGS:
                raise DumpError(f"{self.path} has more than {MAX_TAGS} "
                                "kinds of section: not a node's dump")
            number = self._tag_numbers[tag] = len(self._tags)
            self._tags.append(tag.decode("ascii"))
        self._starts.append(at)
        self._kinds.append(number)

    # --- sections ----------------------------------------------------------

    def _section(self, i: int) -> Section:
        at = self._starts[i]
        # The body ends with its last line's newline, just before the
        # next section's "=".
        end = self._starts[i + 1] if i + 1 < len(self._starts) \
            else self.size
        line_end = self.mm.find(b"\n", at, min(end, at + MAX_HEADER) + 1)
        if line_end < 0:
            line_end = min(end, at + MAX_HEADER)
        header = self.mm[at + 1:line_end].decode("utf-8", "replace")
        tag, _, ident = header.partition(":")
        return Section(tag, ident, min(line_end + 1, end), end)

    def sections(self, tag: str) -> Iterator[Section]:
        """Every section of one tag, in the file's order."""
        for i in self._numbers(tag):
            yield self._section(i)

    def _numbers(self, tag: str) -> array[int]:
        found = self._by_tag.get(tag)
        if found is None:
            number = self._tags.index(tag) if tag in self._tags else -1
            found = array("l", (i for i, k in enumerate(self._kinds)
                                if k == number))
            self._by_tag[tag] = found
        return found

    def count(self, tag: str) -> int:
        return len(self._numbers(tag))

    def first(self, tag: str) -> Section | None:
        for section in self.sections(tag):
            return section
        return None

    def find(self, tag: str, ident: str) -> Section | None:
        """The section ``=tag:ident``, or None."""
        for section in self.sections(tag):
            if section.id == ident:
                return section
        return None

    def following(self, section: Section, tag: str) -> Section | None:
        """The section of ``tag`` with the same id among those right after
        ``section`` (a process's =proc_stack, =proc_heap... follow its
        =proc in the order the node writes them), else anywhere."""
        i = self._index_of(section)
        for j in range(i + 1, min(i + 8, len(self._starts))):
            if self._tags[self._kinds[j]] == tag:
                found = self._section(j)
                if found.id == section.id:
                    return found
        return self.find(tag, section.id)

    def _index_of(self, section: Section) -> int:
        from bisect import bisect_right

        return bisect_right(self._starts, section.start - 1) - 1

    @property
    def section_count(self) -> int:
        return len(self._starts)

    @property
    def last_tag(self) -> str:
        return self._tags[self._kinds[-1]]

    @property
    def ending(self) -> str:
        """end (whole), abort (cut short by a limit) or truncated."""
        if self.cut_in is not None:
            return "truncated"
        return self.last_tag if self.last_tag in ("end", "abort") \
            else "truncated"

    def read(self, start: int, end: int) -> bytes:
        return self.mm[start:end]

    def lines(self, section: Section, max_line: int = 65536
              ) -> Iterator[bytes]:
        """The section's lines, each without its newline; a line longer
        than ``max_line`` is a DumpError (no real dump's field line is)."""
        mm, at, end = self.mm, section.start, section.end
        while at < end:
            nl = mm.find(b"\n", at, min(end, at + max_line + 1))
            if nl < 0:
                if end - at > max_line:
                    raise DumpError(f"{self.path}: a line of "
                                    f"={section.tag}:{section.id} is longer "
                                    f"than {max_line:,} bytes: damaged")
                nl = end
            yield mm[at:nl]
            at = nl + 1

    def release(self, start: int, end: int) -> None:
        """Give back the pages of a range read through once."""
        if hasattr(self.mm, "madvise") and end > start:
            page = mmap.PAGESIZE
            first = start - start % page
            self.mm.madvise(mmap.MADV_DONTNEED, first, end - first)

    def close(self) -> None:
        self.mm.close()

    def __enter__(self) -> "Dump":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["Dump", "DumpError", "FORMAT", "MAX_SECTIONS", "Section",
           "looks_like_dump"]
