"""One dead process as its dump sections give it: its =proc fields, its
stack, heap, dictionary and messages, and terms read from its heap by
address (a line found by its address, in C: mm.find)."""

from __future__ import annotations

import re
from typing import Iterator, NamedTuple

from beam_probe.crashdump import heap
from beam_probe.crashdump.fields import ProcFields, proc
from beam_probe.crashdump.reader import WINDOW, Dump, DumpError, Section

# A dictionary or message list longer than this is read in part: its
# entries are named one by one (a line each).
MAX_ROOT_LINES = 100_000


class Root(NamedTuple):
    """A term the process holds directly: a stack slot (named by its
    frame's function), a dictionary entry, a message."""

    where: str         # stack, dictionary, messages
    name: str          # 'y0' for a slot, an entry's index, or 'rest'
    frame: str | None  # a slot's frame's function
    term: bytes        # H<addr>, or an immediate's text
    # 'rest': the entries past MAX_ROOT_LINES it stands for.
    more: int = 0


class DeadProcess:
    """A process of the dump; ``sections`` may give its dictionary and heap
    (found without indexing the heaps: the overview's way); else they are
    looked up in the index."""

    def __init__(self, dump: Dump, section: Section,
                 sections: dict[str, Section] | None = None) -> None:
        self.dump = dump
        self.fields: ProcFields = proc(dump, section)
        self.pid = section.id
        self.stack: Section | None
        self.heap: Section | None
        self.dictionary: Section | None
        self.messages: Section | None
        if sections is not None:
            self.stack = sections.get("proc_stack")
            self.heap = sections.get("proc_heap")
            self.dictionary = sections.get("proc_dictionary")
            self.messages = sections.get("proc_messages")
        else:
            self.stack = dump.find("proc_stack", self.pid)
            self.heap = dump.find("proc_heap", self.pid)
            self.dictionary = dump.find("proc_dictionary", self.pid)
            self.messages = dump.find("proc_messages", self.pid)
        self._literals: Section | None | bool = False

    @property
    def stack_words(self) -> int:
        if self.stack is None:
            return 0
        return self.dump.mm[self.stack.start:self.stack.end].count(b"\n")

    def roots(self) -> Iterator[Root]:
        """The stack's y slots, each named by the function whose frame
        holds it (slots before the first return address are the current
        function's), then the dictionary's entries, then the messages."""
        frame = self.fields.current_function
        if self.stack is not None:
            for line in self.dump.lines(self.stack, heap.MAX_CELL_LINE):
                if line[:1] == b"y":
                    name, _, term = line.partition(b":")
                    yield Root("stack", name.decode("latin-1"), frame, term)
                elif b"Return addr" in line:
                    # "0x...:SReturn addr 0x... (m:f/a + 108)": the frame
                    # the next slots belong to.
                    open_at, close_at = line.rfind(b"("), line.rfind(b")")
                    text = line[open_at + 1:close_at].decode(
                        "utf-8", "replace")
                    frame = text.split(" + ")[0]
        for where, section in (("dictionary", self.dictionary),
                               ("messages", self.messages)):
            if section is None:
                continue
            for i, line in enumerate(self.dump.lines(section,
                                                     heap.MAX_CELL_LINE)):
                # A message line is "term:seq_token"; an entry a term.
                term = line.split(b":", 1)[0] if where == "messages" \
                    and line[:1] == b"H" else line
                if i >= MAX_ROOT_LINES and term[:1] == b"H":
                    # The rest, one root: its span runs from the first
                    # boxed entry's first line to the next root's (an atom
                    # or a number holds no line).
                    rest = self.dump.read(section.start, section.end)
                    yield Root(where, "rest", None, term,
                               rest.count(b"\n") - i)
                    break
                if i >= MAX_ROOT_LINES:
                    continue
                yield Root(where, str(i), None, term)

    def locate(self, address: bytes, start: int | None = None,
               end: int | None = None) -> int | None:
        """Where the heap line of ``address`` starts (between start and
        end, within the heap), or None: written under another root
        first, or a literal."""
        if self.heap is None:
            return None
        lo = self.heap.start if start is None else start
        hi = self.heap.end if end is None else end
        if self.dump.mm[lo:lo + len(address) + 1] == address + b":":
            return lo
        at = self.dump.search(b"\n" + address + b":", max(lo - 1, 0), hi)
        return at + 1 if at >= 0 else None

    def line(self, at: int) -> bytes:
        """The term of the heap line starting at ``at`` (after ADDR:)."""
        mm = self.dump.mm
        end = mm.find(b"\n", at, at + heap.MAX_CELL_LINE + 64)
        if end < 0:
            end = min(len(mm), at + heap.MAX_CELL_LINE + 64)
        text = mm[at:end]
        colon = text.find(b":")
        if colon < 0:
            raise DumpError(f"{self.dump.path}: a heap line of {self.pid} "
                            "without its address (damaged)")
        return text[colon + 1:]

    def line_end(self, at: int) -> int:
        end = self.dump.mm.find(b"\n", at, self.heap.end if self.heap
                                else len(self.dump.mm))
        return end + 1 if end >= 0 else (self.heap.end if self.heap
                                         else len(self.dump.mm))

    def literal(self, address: bytes) -> bytes | None:
        """A term in =literals (module constants), or None."""
        if self._literals is False:
            self._literals = literals(self.dump)
        section = self._literals
        if not isinstance(section, Section):
            return None
        at = self.dump.search(b"\n" + address + b":", section.start - 1,
                              section.end)
        if at < 0:
            return None
        end = self.dump.mm.find(b"\n", at + 1, section.end)
        text = self.dump.mm[at + 1:end if end >= 0 else section.end]
        return text.partition(b":")[2]

    def term(self, term: bytes, budget: int = 64) -> object:
        """A small term as Python (atoms as str, small integers, tuples,
        lists), for names and keys: ``budget`` cells at most; None past
        it or for anything else."""
        left = [budget]

        def read(t: bytes) -> object:
            left[0] -= 1
            if left[0] < 0:
                return None
            atom = heap.atom_text(t)
            if atom is not None:
                return ("atom", atom)
            number = heap.small_int(t)
            if number is not None:
                return number
            if t == b"N":
                return []
            address = heap.pointer(t)
            if address is None:
                return None
            at = self.locate(address)
            text = self.line(at) if at is not None \
                else self.literal(address)
            if text is None:
                return None
            try:
                c = heap.cell(text)
            except heap.HeapError:
                return None
            if c.kind == "tuple":
                return tuple(read(e) for e in c.elements)
            if c.kind == "cons":
                head, tail = read(c.elements[0]), read(c.elements[1])
                return [head] + tail if isinstance(tail, list) else None
            return None
        return read(term)

    def initial_call(self) -> str | None:
        """For a process proc_lib started ("Spawned as" proc_lib:init_p),
        the '$initial_call' it put in the dictionary, as
        proc_lib:translate_initial_call/1 reads it; else "Spawned as"."""
        if self.dictionary is not None and \
                _by_proc_lib(self.fields.spawned_as):
            for i, line in enumerate(self.dump.lines(self.dictionary,
                                                     heap.MAX_CELL_LINE)):
                if i >= 64:
                    break
                entry = self.term(line, 12)
                if isinstance(entry, tuple) and len(entry) == 2 and \
                        entry[0] == ("atom", "$initial_call") and \
                        isinstance(entry[1], tuple) and len(entry[1]) == 3:
                    # Anyone may put() it: only {Atom, Atom, Arity} is
                    # proc_lib's.
                    m, f, a = entry[1]
                    if _is_atom(m) and _is_atom(f) and isinstance(a, int) \
                            and 0 <= a <= 255:
                        return f"{_atom(m[1])}:{_atom(f[1])}/{a}"
        return self.fields.spawned_as


def scan_range(dump: Dump, start: int, end: int) -> heap.Scan:
    """heap.scan over the whole lines of [start, end), a chunk at a time
    (a chunk's copy is all it holds), slices' offsets in the file; the
    pages read are given back as it goes (the dump's resident memory
    stays a chunk's)."""
    total = 0
    found: list[tuple[bytes, int, int]] = []
    mm, at = dump.mm, start
    while at < end:
        stop = min(end, at + heap.CHUNK)
        if stop < end:
            nl = mm.rfind(b"\n", at, stop)
            if nl < 0:
                nl = mm.find(b"\n", stop, end)
            stop = end if nl < 0 else nl + 1
        try:
            part = heap.scan(mm[at:stop])
        except heap.HeapError as exc:
            raise DumpError(f"{dump.path}: {exc} in the heaps: no node "
                            "writes that (damaged)") from None
        total += part.words
        found.extend((a, size, at + offset) for a, size, offset in
                     part.slices)
        dump.release(at, stop)
        at = stop
    return heap.Scan(total, found)


def literals(dump: Dump) -> Section | None:
    """The =literals section (module constants: a proc_lib process's
    '$initial_call' may be one), found once: by the index when the heaps
    are indexed, else by one windowed search from the heaps on."""
    if "literals" not in dump.memo:
        if dump.indexed or dump.heaps_start is None:
            found = dump.first("literals")
        else:
            at = dump.search(b"\n=literals\n", dump.heaps_start - 1)
            found = None if at < 0 else Section(
                "literals", "", at + len(b"\n=literals\n"),
                _next_section(dump, at + 1))
        dump.memo["literals"] = found
    section: Section | None = dump.memo["literals"]
    return section


def _next_section(dump: Dump, at: int) -> int:
    end = dump.search(b"\n=", at)
    return dump.size if end < 0 else end + 1


def _by_proc_lib(spawned_as: str | None) -> bool:
    return (spawned_as or "").startswith("proc_lib:init_p/")


def _is_atom(term: object) -> bool:
    return isinstance(term, tuple) and len(term) == 2 and \
        term[0] == "atom" and isinstance(term[1], str)


def _atom(name: str) -> str:
    from beam_probe.erldist.terms import Atom, format_term

    return format_term(Atom(name))


# How far before a process's stack its dictionary may start: its
# messages come between (100,000 messages are ~2 MB of lines).
DICTIONARY_REACH = 64 * 1024 * 1024
_STACK = re.compile(rb"\n=proc_stack:([^\n]{1,64})\n")


def few(dump: Dump, sections: list[Section]) -> dict[str, DeadProcess]:
    """A few processes (a ranking's rows, tables' owners) with their
    dictionaries and heaps, found without indexing the heaps when they
    are not yet. Every process has a =proc_stack, its dictionary just
    before it and its heap just after: one regex pass finds the wanted
    stacks, a window at a time, its pages given back after (a 569 MiB
    dump read through left 585 MiB resident), and stops at the last.
    (Looking for the dictionaries instead read every heap to the end for
    a process that has none: 1.46 s on a 569 MiB dump, 0.2 s now.)"""
    if dump.indexed or dump.heaps_start is None:
        return {s.id: DeadProcess(dump, s) for s in sections}
    # Only proc_lib's processes are read for an '$initial_call': the
    # pass ends at the last of them, not behind a fun's gigabyte heap.
    wanted = {s.id: s for s in sections
              if _by_proc_lib(proc(dump, s).spawned_as)}
    stacks: dict[str, int] = {}
    window = dump.heaps_start - 1
    while len(stacks) < len(wanted) and window < dump.size:
        stop = min(dump.size, window + WINDOW)
        for match in _STACK.finditer(dump.read(window, min(dump.size,
                                                           stop + 80))):
            if window + match.start() >= stop:
                break
            pid = match.group(1).decode("latin-1")
            if pid in wanted:
                stacks[pid] = window + match.start()
                if len(stacks) == len(wanted):
                    break
        dump.release(window, stop)
        window = stop
    return {s.id: DeadProcess(dump, s, _around_stack(
        dump, s.id, stacks[s.id], s) if s.id in stacks else {})
        for s in sections}


def _around_stack(dump: Dump, pid: str, at: int, section: Section
                  ) -> dict[str, Section]:
    """A process's dictionary (just before its stack's header at ``at``)
    and its heap (just after the stack). The heap is read up to a bound
    its size gives (a term's line is under 64 bytes a word), not to its
    end, which may be a gigabyte on."""
    mm, key = dump.mm, pid.encode()
    found: dict[str, Section] = {}
    lo = max((dump.heaps_start or 1) - 1, at - DICTIONARY_REACH)
    header = mm.rfind(b"\n=proc_dictionary:" + key + b"\n", lo, at + 1)
    if header >= 0:
        body = mm.find(b"\n", header + 1) + 1
        found["proc_dictionary"] = Section("proc_dictionary", pid, body,
                                           at + 1)
    head = mm.find(b"\n=proc_heap:" + key + b"\n", at,
                   at + (1 << 20))
    if head >= 0:
        p = proc(dump, section)
        heap_start = mm.find(b"\n", head + 1) + 1
        found["proc_heap"] = Section("proc_heap", pid, heap_start, min(
            dump.size, heap_start + 64 * (p.stack_heap + p.old_heap)
            + 4096))
    return found


def dead_process(dump: Dump, pid: str) -> DeadProcess | None:
    section = dump.find("proc", pid)
    return DeadProcess(dump, section) if section is not None else None


__all__ = ["DeadProcess", "Root", "dead_process", "few", "scan_range"]
