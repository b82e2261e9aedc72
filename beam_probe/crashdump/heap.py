"""A dead process's heap as the dump writes it: pure functions of bytes.

Each heap line is ``ADDR:term`` (crashdump_viewer's grammar): ``t<n>:``
a tuple of n (hex) elements, ``l<head>|<tail>`` a cons cell, ``Mf<n>:
<keys>:<values>`` a flat map, ``Mh<n>:<k>:...``/``Mn<k>:...`` a hash map's
head and nodes, ``Yh<size>:<base64>`` a heap binary, ``Yc<addr>:<offset>:
<size>`` (and ``Ys``) a slice of the binary written as ``=binary:<addr>``,
``F<n>:<text>`` a float, ``B<int>`` a bignum, ``E<n>:<base64>`` a pid, port,
reference or fun in the external format. Inside them: ``H<addr>`` points
at another line (which may come later), ``I<int>`` a small integer,
``A<n>:<name>`` an atom of n (hex) bytes (which may hold commas), ``N``
[], ``P<0.1.0>``/``p<0.1>`` a local pid or port.

The dumper walks each root depth first, marking what it has written, so
what one root (a stack slot, a message, a dictionary entry) holds first is
one run of lines, and within it each child's is one run too. Sizes are
read from a run's text in C (bytes.count): a line is 2 words and each
comma one more (a tuple of n: n + 1 words; a cons: 2), with what the
commas miss added (a flat map's 2 words, a binary's data, a slice's
ProcBin). That is the heap the process holds, each shared term counted
where the dump first meets it; not a flat copy (live inspect's).
"""

from __future__ import annotations

import re
from typing import NamedTuple

# A ProcBin (or a sub-binary and its ProcBin) on the heap: 6 words on
# OTP 25 (PROC_BIN_SIZE); OTP 27's BinRef and SubBits are 4 and 4.
SLICE_WORDS = 6
# Heap lines this long are read whole to name a container's children (a
# tuple of ~1M elements); a longer one is counted, never split.
MAX_CELL_LINE = 16 * 1024 * 1024
# The largest tuple a node makes (erlang:make_tuple/2's limit).
MAX_TUPLE = (1 << 24) - 1
# A heap binary holds at most 64 bytes; no binary is near 2^48 bytes.
MAX_HEAP_BINARY = 64
MAX_BINARY = 1 << 48
# Words counted a chunk at a time: the copy of a chunk is all a count
# holds in memory.
CHUNK = 16 * 1024 * 1024

# A heap binary and its size, or a slice: what the commas miss.
_BINARY = re.compile(rb":Y([hcs])([0-9A-F]{1,16})")
_SLICE = re.compile(rb"([0-9A-F]{1,16}):[0-9A-F]{1,16}:([0-9A-F]{1,16})")


class Cell(NamedTuple):
    """One heap line's term: its kind, its element count, the words of
    the cell itself, and its elements (each an immediate's text or
    ``H<addr>``) in order; a map's keys and values."""

    kind: str          # tuple, cons, map, binary, float, ...
    length: int        # elements, entries, or a binary's bytes
    elements: list[bytes]
    keys: list[bytes]
    tag: bytes | None  # a tuple's first element, when an atom
    size: int          # a binary's or slice's byte size
    binary: bytes | None  # a slice's binary address


class HeapError(ValueError):
    """A heap line that does not parse (the reader says which)."""


def _hex(text: bytes) -> int:
    """A size as the dump writes it: hex digits, never signed."""
    if not text or len(text) > 16 or text.strip(b"0123456789ABCDEF"):
        raise ValueError("not a size")
    return int(text, 16)


def split_terms(text: bytes, n: int | None = None) -> tuple[list[bytes], int]:
    """The first ``n`` (or all) comma-separated terms of ``text``, and
    where reading stopped. An atom ``A<len>:name`` is skipped by its
    length, so its commas do not split it."""
    out: list[bytes] = []
    i, size = 0, len(text)
    while i < size and (n is None or len(out) < n):
        start = i
        if text[i:i + 1] == b"A":
            colon = text.find(b":", i)
            digits = text[i + 1:colon]
            if colon < 0 or not 0 < len(digits) <= 4 or \
                    digits.strip(b"0123456789ABCDEF"):
                # An atom is at most 255 characters (1,020 bytes): its
                # length, hex, is a few digits, never signed.
                raise HeapError("an atom without its length")
            i = colon + 1 + int(digits, 16)
        else:
            while i < size and text[i:i + 1] not in (b",", b":", b"|"):
                i += 1
        out.append(text[start:i])
        if i < size and text[i:i + 1] == b",":
            i += 1
        elif n is None:
            break
        if i <= start:
            raise HeapError("a term of no length")
    return out, i


def cell(line: bytes) -> Cell:
    """The term of one heap line (the text after ``ADDR:``)."""
    if not line:
        raise HeapError("an empty heap line")
    head = line[:1]
    try:
        if head == b"t":
            colon = line.index(b":")
            arity = int(line[1:colon], 16)
            if arity > MAX_TUPLE:
                # A tuple holds at most 2^24 - 1 elements (MAX_ARITY in
                # erts): a larger arity is damage, not a term.
                raise HeapError(f"a tuple of arity {arity:,}")
            elements, _ = split_terms(line[colon + 1:])
            tag = elements[0] if elements and elements[0][:1] == b"A" \
                else None
            return Cell("tuple", arity, elements, [], tag, 0, None)
        if head == b"l":
            terms, at = split_terms(line[1:], 1)
            tail = line[1 + at + 1:] if line[1 + at:2 + at] == b"|" else b"N"
            return Cell("cons", 2, terms + [tail], [], None, 0, None)
        if line[:2] == b"Mf":
            colon = line.index(b":")
            n = int(line[2:colon], 16)
            keys, at = split_terms(line[colon + 1:], 1)
            values, _ = split_terms(line[colon + 1 + at + 1:])
            return Cell("map", n, values, keys, None, 0, None)
        if line[:2] == b"Mh":
            parts = line[2:].split(b":", 2)
            n = int(parts[0], 16)
            children, _ = split_terms(parts[2] if len(parts) > 2 else b"")
            return Cell("map", n, children, [], None, 0, None)
        if line[:2] == b"Mn":
            colon = line.index(b":")
            children, _ = split_terms(line[colon + 1:])
            return Cell("map node", len(children), children, [], None, 0,
                        None)
        if line[:2] == b"Yh":
            colon = line.index(b":", 2)
            size = _hex(line[2:colon])
            return Cell("binary", size, [], [], None, size, None)
        if line[:2] in (b"Yc", b"Ys"):
            address, offset, text = line[2:].split(b":")[:3]
            size = _hex(text)
            return Cell("binary", size, [], [], None, size, address)
        kinds = {b"F": "float", b"B": "integer", b"E": "external"}
        if head in kinds:
            return Cell(kinds[head], 0, [], [], None, 0, None)
    except (ValueError, IndexError):
        pass
    raise HeapError(f"a heap term that does not parse: "
                    f"{line[:40]!r}")


class Scan(NamedTuple):
    """What a run of heap lines holds: its words, and its slices of refc
    binaries (binary address, slice size, offset in the run)."""

    words: int
    slices: list[tuple[bytes, int, int]]


def scan(text: bytes) -> Scan:
    """The heap words the lines of ``text`` (whole lines, each ending in
    a newline) hold, and their slices: see the module's note. Two counts
    in C; maps and binaries are looked for only where an "M" or a "Y" is
    found at all (addresses are hex: a heap of tuples and numbers has
    neither), for a regex that stops at every line's ':' read 530 MB in
    0.4 s where the counts take 0.2 s."""
    total = 2 * text.count(b"\n") + text.count(b",")
    found: list[tuple[bytes, int, int]] = []
    if b"M" in text:
        total += 2 * text.count(b":Mf")
    if b"Y" in text:
        for match in _BINARY.finditer(text):
            if match.group(1) == b"h":
                # A heap binary is at most 64 bytes (ERL_ONHEAP_BIN_LIMIT).
                size = int(match.group(2), 16)
                if size > MAX_HEAP_BINARY:
                    raise HeapError(f"a heap binary of {size:,} bytes")
                total += (size + 7) // 8
                continue
            total += SLICE_WORDS - 2
            rest = _SLICE.match(text, match.end(1))
            if rest is not None:
                size = int(rest.group(2), 16)
                if size > MAX_BINARY:
                    raise HeapError(f"a slice of {size:,} bytes")
                found.append((rest.group(1), size, match.start()))
    return Scan(total, found)


def atom_text(term: bytes) -> str | None:
    """An atom term's name (``A5:state`` -> 'state'), else None."""
    if term[:1] != b"A":
        return None
    colon = term.find(b":")
    return term[colon + 1:].decode("utf-8", "replace") if colon > 0 \
        else None


def small_int(term: bytes) -> int | None:
    if term[:1] == b"I":
        try:
            return int(term[1:])
        except ValueError:
            return None
    return None


def pointer(term: bytes) -> bytes | None:
    """The address an ``H<addr>`` term points at, else None."""
    return term[1:] if term[:1] == b"H" and len(term) > 1 else None


__all__ = ["CHUNK", "Cell", "HeapError", "MAX_CELL_LINE", "SLICE_WORDS",
           "Scan", "atom_text", "cell", "pointer", "scan", "small_int",
           "split_terms"]
