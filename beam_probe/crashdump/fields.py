"""A dump's key-value sections, read into named figures: the preamble,
=memory, =proc, =ets, =allocator, =index_table, the schedulers.

Each section's lines are ``Key: value``; a field a parser needs and does
not find, or finds not a count, is a DumpError naming the section and the
key (a damaged dump), except where older releases leave it out (said at
the field)."""

from __future__ import annotations

import re
from array import array
from bisect import bisect_left
from typing import Iterator, NamedTuple

from beam_probe.crashdump.reader import WINDOW, Dump, DumpError, Section

# A key-value section longer than this is damage: the largest real ones
# are a process's with its links and monitors on one line (16 bytes a
# pid: a supervisor of a million children writes ~16 MB).
MAX_FIELDS = 64 * 1024 * 1024
# A value longer than this is not kept (a "Link list" of thousands of
# pids): the figures beam-probe reads are short.
MAX_VALUE = 64 * 1024
# Counts in a dump are within 64 bits; 20 digits is 2^64.
MAX_DIGITS = 20

_FUNCTION = re.compile(r"\(([^()]+?:[^()]+?/\d+)(?: \+ \d+)?\)\s*$")
# A "Key: value" line (or "Key:" with no value), found in C: a process's
# twenty lines cost one call, not twenty.
_FIELD = re.compile(rb"^([A-Za-z][^:\n]{0,80}):(?: ([^\n]*))?$", re.M)


def _bounded(dump: Dump, section: Section) -> None:
    """A DumpError where the section is longer than MAX_FIELDS: checked
    before any read of it, by every reader of a whole section (a 1 GiB
    line in a =proc was read whole by the overview's figures, 1 GB
    resident, before the rule was applied there)."""
    if section.end - section.start > MAX_FIELDS:
        raise DumpError(f"{dump.path}: ={section.tag}:{section.id} is "
                        f"{section.end - section.start:,} bytes: no such "
                        "section is over 64 MiB in a real dump (damaged)")


def fields(dump: Dump, section: Section) -> dict[str, str]:
    """The section's ``Key: value`` lines (later ones win); a value over
    MAX_VALUE bytes is left out."""
    _bounded(dump, section)
    body = dump.read(section.start, section.end)
    return {key.decode("latin-1"): value.decode("utf-8", "replace")
            for key, value in _FIELD.findall(body)
            if len(value) <= MAX_VALUE}


def count(dump: Dump, section: Section, values: dict[str, str], key: str,
          default: int | None = None, negative: bool = False) -> int:
    """A field as a whole number (the first of "cur max max" lines); a
    missing one is ``default`` when given, else a DumpError. Only where
    ``negative`` may it be below zero (ETS words: -1 while a table was
    being changed)."""
    text = values.get(key)
    if text is None:
        if default is not None:
            return default
        raise DumpError(f"{dump.path}: ={section.tag}:{section.id} has no "
                        f"{key!r} (damaged, or cut inside the section)")
    word = text.split(" ", 1)[0]
    minus = negative and word.startswith("-")
    digits = word[1:] if minus else word
    if not digits.isascii() or not digits.isdigit() \
            or len(digits) > MAX_DIGITS:
        raise DumpError(f"{dump.path}: ={section.tag}:{section.id}: {key} "
                        f"is {text[:40]!r}, not a count (damaged)")
    return -int(digits) if minus else int(digits)


_FIGURES: dict[str, re.Pattern[bytes]] = {}


def figures(dump: Dump, section: Section, keys: tuple[str, ...]
            ) -> list[int]:
    """A few counts of a section, each found by a regex search in C:
    ranking a million processes by one figure reads that figure alone
    (the whole =proc, parsed, cost ~15 us a process; this ~2)."""
    _bounded(dump, section)
    body = dump.read(section.start, section.end)
    out = []
    for key in keys:
        pattern = _FIGURES.get(key)
        if pattern is None:
            pattern = _FIGURES[key] = re.compile(
                rb"^" + re.escape(key.encode()) + rb": ([^\n]*)$", re.M)
        match = pattern.search(body)
        if match is None and key != "Memory":
            # As proc() reads them: figures older releases may leave out.
            out.append(0)
            continue
        if match is None:
            raise DumpError(f"{dump.path}: ={section.tag}:{section.id} has "
                            f"no {key!r} (damaged, or cut inside the "
                            "section)")
        word = match.group(1).split(b" ", 1)[0]
        if not word.isdigit() or len(word) > MAX_DIGITS:
            text = match.group(1)[:40].decode("utf-8", "replace")
            raise DumpError(f"{dump.path}: ={section.tag}:{section.id}: "
                            f"{key} is {text!r}, not a count (damaged)")
        out.append(int(word))
    return out


def every_proc(dump: Dump, keys: tuple[str, ...]
               ) -> Iterator[tuple[int, list[int]]]:
    """Each process's =proc section (its number: dump.section_at) and the
    counts of ``keys`` (in the order the node writes them). One regex
    pass over the =proc sections finds them all in C (300,000 processes:
    0.2 s, where a search per section took 2.4 s); where it finds fewer
    (a field missing or not a count: damage), each section is read for
    the error that names it."""
    numbers = dump.proc_numbers()
    if not numbers:
        return
    skip = rb"(?:[^=\n][^\n]*\n)*?"
    pattern = re.compile(rb"=proc:[^\n]*\n" + b"".join(
        skip + re.escape(key.encode()) + rb": (\d{1,20})(?: [^\n]*)?\n"
        for key in keys))
    # A window of sections at a time (a million processes' =proc are a
    # gigabyte: read whole, resident whole), its pages given back after.
    starts = array("q", map(dump.offset, numbers))
    i = 0
    while i < len(numbers):
        j = max(i + 1, bisect_left(starts, starts[i] + WINDOW))
        lo, hi = starts[i], dump.end_of(numbers[j - 1])
        # Every section of the window but its last ends within WINDOW of
        # lo; the last may be any length: bounded as one.
        _bounded(dump, dump.section_at(numbers[j - 1]))
        found = pattern.findall(dump.read(lo, hi))
        dump.release(lo, hi)
        if len(found) != j - i:
            for number in numbers[i:j]:
                yield number, figures(dump, dump.section_at(number), keys)
        else:
            for number, values in zip(numbers[i:j], found):
                yield number, [int(v) for v in (
                    values if isinstance(values, tuple) else (values,))]
        i = j


def counts(dump: Dump, section: Section, values: dict[str, str], key: str,
           n: int) -> list[int]:
    """A field of ``n`` whole numbers ("cur max max"); fewer are padded
    with the last (OTP writes one figure where current is all it has)."""
    text = values.get(key)
    if text is None:
        return [0] * n
    words = text.split()[:n]
    numbers = []
    for word in words:
        if not word.isascii() or not word.isdigit() \
                or len(word) > MAX_DIGITS:
            raise DumpError(f"{dump.path}: ={section.tag}:{section.id}: "
                            f"{key} is {text[:40]!r}, not counts (damaged)")
        numbers.append(int(word))
    while numbers and len(numbers) < n:
        numbers.append(numbers[-1])
    return numbers or [0] * n


class Preamble(NamedTuple):
    """The dump's first section: when, why, which release."""

    written: str
    slogan: str
    system_version: str
    otp_release: str | None
    erts_version: str | None
    word_size: int
    atoms: int | None
    calling_thread: str | None


def preamble(dump: Dump) -> Preamble:
    found = dump.memo.get("preamble")
    if found is None:
        found = dump.memo["preamble"] = _preamble(dump)
    return found


def _preamble(dump: Dump) -> Preamble:
    section = dump.first("erl_crash_dump")
    assert section is not None, "the reader checked the first line"
    lines = list(_head_lines(dump, section))
    values = {}
    for line in lines[1:]:
        key, sep, value = line.partition(": ")
        if sep:
            values[key] = value
    version = values.get("System version", "")
    release = re.search(r"Erlang/OTP (\d+)", version)
    erts = re.search(r"\[erts-([0-9.]+)\]", version)
    atoms = values.get("Atoms", "")
    return Preamble(
        written=lines[0] if lines else "",
        slogan=values.get("Slogan", ""),
        system_version=version,
        otp_release=release.group(1) if release else None,
        erts_version=erts.group(1) if erts else None,
        word_size=4 if "[32-bit]" in version else 8,
        atoms=int(atoms) if atoms.isdigit() and len(atoms) < 12 else None,
        calling_thread=values.get("Calling Thread"))


def _head_lines(dump: Dump, section: Section) -> Iterator[str]:
    # The slogan is the node's own text (erlang:halt/1's string): a line
    # of a few KB at most; cut where a damaged dump runs on.
    for line in dump.lines(section, max_line=1024 * 1024):
        yield line[:4096].decode("utf-8", "replace")


# The escapes the node writes in a quoted atom (erts's atom printer;
# checked on OTP 25's dumps: 'nl\nname', 'q\'x', 'bs\\x', '\001a',
# '\033b', '\bc\v\f\r', '\000'), and those Erlang reads besides.
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "f": "\f", "b": "\b",
            "v": "\v", "e": "\x1b", "s": " ", "d": "\x7f"}
_ESCAPE = re.compile(r"\\([0-7]{1,3}|.)", re.S)


def _unescape(match: re.Match[str]) -> str:
    code = match.group(1)
    if code[0] in "01234567":
        return chr(int(code, 8))
    return _ESCAPES.get(code, code)


def unquoted(text: str) -> str:
    """An atom as the dump writes it ('Elixir.MyApp.Cache', 'my name',
    'nl\nname') as its name, as a live node's registered_name reads
    (a newline in it is a newline: the text renderers escape it)."""
    if len(text) >= 2 and text[0] == text[-1] == "'":
        return _ESCAPE.sub(_unescape, text[1:-1])
    return text


# A function's arity is at most 255 (the emulator's MAX_ARG); a larger
# one is no node's writing.
MAX_ARITY = 255
_ARITY = re.compile(r"/(\d+)(?= \+ \d+\)?$|$|\))")


def checked_mfa(text: str | None) -> str | None:
    """An M:F/A text as the dump gives it, or, where an arity is past
    what Erlang allows, the same with the arity named damaged."""
    if not text:
        return text
    match = _ARITY.search(text)
    if match is not None and (len(match.group(1)) > 3
                              or int(match.group(1)) > MAX_ARITY):
        return (text[:match.start()] + "/? (damaged: arity "
                f"{match.group(1)[:20]})" + text[match.end():])
    return text


def function_of(values: dict[str, str]) -> str | None:
    """A process's current function, as a dump gives it: "Current call"
    (a process waiting in a BIF), else the function around its program
    counter, else where it was last scheduled in."""
    call = values.get("Current call")
    if call:
        return checked_mfa(call.strip())
    for key in ("Program counter", "Last scheduled in for",
                "Current Process Program counter"):
        text = values.get(key)
        if text:
            match = _FUNCTION.search(text)
            if match:
                return checked_mfa(match.group(1))
            if key == "Last scheduled in for" and "/" in text:
                return checked_mfa(text.strip())
    return None


class ProcFields(NamedTuple):
    """One =proc section's figures (process_info's, as the dump has them;
    sizes in words where the dump writes words)."""

    pid: str
    state: str
    name: str | None
    spawned_as: str | None
    spawned_by: str | None
    current_function: str | None
    message_queue_len: int
    reductions: int
    stack_heap: int
    old_heap: int
    heap_unused: int
    old_heap_unused: int
    memory: int
    # The sizes of the refc binaries its heaps refer to, in words, a
    # binary per reference (off_heap.overhead): recon's binary_memory.
    bin_vheap: int
    old_bin_vheap: int
    links: str
    section: Section


def proc(dump: Dump, section: Section) -> ProcFields:
    values = fields(dump, section)

    def of(key: str, default: int | None = None) -> int:
        return count(dump, section, values, key, default)

    return ProcFields(
        pid=section.id, state=values.get("State", ""),
        name=unquoted(values["Name"]) if values.get("Name") else None,
        spawned_as=checked_mfa(values.get("Spawned as")) or None,
        spawned_by=values.get("Spawned by") or None,
        current_function=function_of(values),
        message_queue_len=of("Message queue length", 0),
        reductions=of("Reductions", 0),
        stack_heap=of("Stack+heap", 0), old_heap=of("OldHeap", 0),
        heap_unused=of("Heap unused", 0),
        old_heap_unused=of("OldHeap unused", 0),
        memory=of("Memory"),
        bin_vheap=of("BinVHeap", 0), old_bin_vheap=of("OldBinVHeap", 0),
        links=values.get("Link list", values.get("Links", "")),
        section=section)


class EtsFields(NamedTuple):
    owner: str
    id: str
    name: str
    objects: int
    words: int | None
    type: str
    protection: str
    compressed: bool


def ets_tables(dump: Dump) -> Iterator[EtsFields]:
    for section in dump.sections("ets"):
        values = fields(dump, section)
        words = count(dump, section, values, "Words", -1, negative=True)
        yield EtsFields(
            owner=section.id, id=values.get("Table", ""),
            name=values.get("Name", ""),
            objects=count(dump, section, values, "Objects", 0),
            # -1 when the table was being changed as the node died.
            words=words if words >= 0 else None,
            type=values.get("Type", "?"),
            protection=values.get("Protection", "?"),
            compressed=values.get("Compressed") == "true")


def memory(dump: Dump) -> dict[str, int]:
    """=memory: erlang:memory()'s kinds, in bytes (empty if absent)."""
    section = dump.first("memory")
    if section is None:
        return {}
    values = fields(dump, section)
    return {key: count(dump, section, values, key) for key in values}


def index_limit(dump: Dump, name: str) -> tuple[int | None, int | None]:
    """(entries, limit) of an =index_table (atom_tab: the atoms)."""
    section = dump.find("index_table", name)
    if section is None:
        return None, None
    values = fields(dump, section)
    return (count(dump, section, values, "entries", -1, negative=True),
            count(dump, section, values, "limit", -1, negative=True))


class Running(NamedTuple):
    """A process a scheduler was running (or collecting) as the node died."""

    scheduler: str
    pid: str
    state: str
    function: str | None


def running(dump: Dump) -> list[Running]:
    out = []
    for tag in ("scheduler", "dirty_cpu_scheduler", "dirty_io_scheduler"):
        for section in dump.sections(tag):
            values = fields(dump, section)
            pid = values.get("Current Process", "").strip()
            if pid.startswith("<"):
                out.append(Running(f"{tag}:{section.id}", pid,
                                   values.get("Current Process State", ""),
                                   function_of(values)))
    return out


__all__ = ["EtsFields", "Preamble", "ProcFields", "Running", "count",
           "counts", "ets_tables", "every_proc", "fields", "figures",
           "function_of",
           "index_limit",
           "memory", "preamble", "proc", "running", "unquoted", "checked_mfa",
           "MAX_ARITY"]
