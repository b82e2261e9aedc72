"""inspect of a dead process: the size tree of what it held, read from
its dump's heap (heap.py says how the dump lays a heap out and how sizes
are read from its text).

Roots: the stack's slots, each named by the function whose frame holds
it; the dictionary (``get()``, an entry a child); the messages. A part's
children are found by their addresses inside its run of lines (mm.find,
in C); a container with more than MAX_PLACED boxed children is shown
whole, not split. Each byte of the heap's text is scanned once per level
of the tree shown above it, at most ``--depth`` + 1 times.
"""

from __future__ import annotations

import base64
import re
from typing import TYPE_CHECKING, Any, NamedTuple

from beam_probe.crashdump import heap
from beam_probe.crashdump.answers import binary_sizes, node_name, resolve
from beam_probe.crashdump.fields import preamble
from beam_probe.crashdump.process import DeadProcess, Root, scan_range
from beam_probe.crashdump.reader import Dump
from beam_probe.erldist.terms import Atom, format_term
from beam_probe.probes.inspect import RecordNames, key_text, step_text

if TYPE_CHECKING:
    from beam_probe.probes.results import (InspectPart, InspectPin,
                                           ProcessInspection)

# Children placed one by one (a find each, over their parent's run): a
# wider container is one part. 256 finds over a 1 GB run took ~N s here.
MAX_PLACED = 256
# OTP's rule for a slice that keeps a much larger binary alive.
PIN_RATIO = 2
# Stack slots shown one by one, the largest; a deep recursion's others
# are one row (326,474 slots were a row and a pass each).
MAX_SLOTS = 64
# Stack slots placed at most (what a slot costs to place: ~0.6 KB,
# measured on 400,000; a runaway recursion of 10M slots would hold GBs).
MAX_STACK_ROOTS = 500_000
# Slots that hold what an earlier slot holds, named one by one; past
# this many, one row.
MAX_SHARED_ROWS = 32
# A list's cells counted at most (live inspect: length/1).
MAX_LENGTH = 16_000_000
# A heap line's address, and a pointer to one.
_LINE = re.compile(rb"\n([0-9A-F]{1,16}):")
_POINTER = re.compile(rb"H([0-9A-F]{1,16})")


_UNNAMED = ("", "")


class _Span(NamedTuple):
    path: tuple[str, str]
    start: int     # its first line (its own)
    end: int       # past its last
    root: Root | None
    # Where its pinned slices are counted: a map's values together
    # (State#{_}), as live inspect groups them; else its own path.
    group: tuple[str, str] | None = None


def inspect(dump: Dump, spec: str, depth: int = 3, width: int = 10
            ) -> ProcessInspection:
    """The size tree of a process the dump holds (by pid or name)."""
    process = resolve(dump, spec)
    walker = _Walker(dump, process, depth, width)
    parts, pinned = walker.run()
    roots = [row for row in parts if row["depth"] == 0]
    total_bytes = sum(row["bytes"] for row in roots)
    total_binary = sum(row["binary_bytes"] for row in roots)
    held = total_bytes + total_binary
    for row in parts:
        row["share"] = round((row["bytes"] + row["binary_bytes"]) / held, 4) \
            if held else 0.0
    p = process.fields
    no_heap = None
    if process.heap is None or process.heap.end <= process.heap.start:
        no_heap = ("the dump holds no heap lines for it (it died "
                   "collecting, or the dump was cut before them)")
    elif walker.unplaced:
        no_heap = (f"its stack's slots past the first {MAX_STACK_ROOTS:,} "
                   f"({walker.unplaced:,} more) are not placed: what they "
                   "hold is counted with the slot before them")
    elif walker.unknown:
        from beam_probe.crashdump.answers import binary_memory

        no_heap = (f"{len(walker.unknown):,} binaries its slices refer to "
                   "are not in the dump (OTP 25 leaves out the binary of a "
                   "slice it met first): their slices count their own "
                   "size, and whether they pin a larger binary cannot be "
                   "said; its heaps refer to "
                   f"{binary_memory(dump, p):,} bytes of binaries in all "
                   "(BinVHeap)")
    return {"node": node_name(dump), "pid": p.pid, "name": p.name,
            "kind": "dead", "current_function": p.current_function,
            "initial_call": process.initial_call(),
            "parts": parts, "pinned": pinned,
            "total": {"bytes": total_bytes, "binary_bytes": total_binary,
                      "memory": p.memory,
                      "message_queue_len": p.message_queue_len,
                      "binary_distinct": walker.distinct,
                      "sampled": False, "pause_ms": 0.0},
            "state": no_heap, "dictionary": None,
            "mailbox": None if process.messages is not None
            or not p.message_queue_len else
            "its messages are not in the dump"}


class _Walker:
    def __init__(self, dump: Dump, process: DeadProcess, depth: int,
                 width: int) -> None:
        self.dump, self.process = dump, process
        self.depth, self.width = depth, width
        self.word = preamble(dump).word_size
        self.sizes = binary_sizes(dump)
        # Record field names come from debug_info on a live node: a dump
        # has no code, so tuples are named by their first atom.
        self.names = RecordNames([])
        self.seen_binaries: dict[bytes, int] = {}
        self.parts: list[InspectPart] = []
        self.pins: dict[str, list[Any]] = {}
        # Slices whose binary the dump did not write (OTP 25 leaves out
        # those under a sub-binary whose ProcBin it did not visit).
        self.unknown: set[bytes] = set()
        self.shared: list[Root] = []
        # Stack slots past MAX_STACK_ROOTS: not placed, their lines
        # counted with the slot placed before them.
        self.unplaced = 0

    @property
    def distinct(self) -> int:
        return sum(self.seen_binaries.values())

    def _index(self, wanted: set[bytes]) -> tuple[dict[bytes, int],
                                                   dict[bytes, int]]:
        """One pass over the heap's text: where each wanted address's own
        line starts, and where a line first points at it (its parent,
        written before it). Each chunk's line addresses and pointers are
        listed by a regex and met with the wanted set in C; only those
        found are placed (a find each). A search per root read the heap
        once or twice a root: 326,474 stack slots of a 618 MB heap ran
        past 922 s."""
        lines: dict[bytes, int] = {}
        pointers: dict[bytes, int] = {}
        heap_section = self.process.heap
        if heap_section is None or not wanted:
            return lines, pointers
        dump, at, end = self.dump, heap_section.start, heap_section.end
        while at < end:
            stop = min(end, at + heap.CHUNK)
            if stop < end:
                nl = dump.mm.rfind(b"\n", at, stop)
                stop = end if nl < 0 else nl + 1
            text = b"\n" + dump.read(at, stop)
            _place(text, _LINE.findall(text), wanted, lines, b"\n", b":",
                   at - 1)
            _place(text, _POINTER.findall(text), wanted, pointers, b"H",
                   b"", at - 1)
            at = stop
        return lines, pointers

    def run(self) -> tuple[list[InspectPart], list[InspectPin]]:
        process = self.process
        if process.heap is None:
            return [], []
        roots: list[Root] = []
        slots = 0
        for r in process.roots():
            if not heap.pointer(r.term):
                continue
            if r.where == "stack":
                slots += 1
                if slots > MAX_STACK_ROOTS:
                    self.unplaced += 1
                    continue
            roots.append(r)
        lines, pointers = self._index({heap.pointer(r.term) or b""
                                       for r in roots})
        located: list[tuple[int, Root]] = []
        taken: set[int] = set()
        for root in roots:
            address = heap.pointer(root.term) or b""
            at = lines.get(address)
            if at is None:
                continue  # a literal, or written under another process
            parent = pointers.get(address)
            if at in taken or (parent is not None and parent < at):
                # Written inside an earlier root's lines (a frame holding
                # State and a field of it, a slot of every frame holding
                # the same term): counted there, not split off.
                self.shared.append(root)
                continue
            taken.add(at)
            located.append((at, root))
        order = {id(root): i for i, root in enumerate(roots)}
        located.sort(key=lambda item: item[0])
        spans: list[_Span] = []
        for i, (at, root) in enumerate(located):
            end = located[i + 1][0] if i + 1 < len(located) \
                else process.heap.end
            # A root's path is made when its part is shown (a deep
            # stack's others never are).
            spans.append(_Span(_UNNAMED, at, end, root))
        stack = [s for s in spans if s.root and s.root.where == "stack"]
        rest: list[_Span] = []
        if len(stack) > MAX_SLOTS:
            # A deep recursion: the slots whose lines are longest shown,
            # the others one row (their text's length ranks them: a
            # measure of each would be a pass a slot).
            stack.sort(key=lambda s: s.start - s.end)
            stack, rest = stack[:MAX_SLOTS], stack[MAX_SLOTS:]
        for span in sorted(stack, key=lambda s: (
                _slot_order(s), order.get(id(s.root), 0))):
            self._part(span, 0)
        if rest:
            scans = [scan_range(self.dump, a, b) for a, b in _merged(rest)]
            for scan in scans:
                self._note_pins(("Stack", "stack"), scan)
            self._row((f"{len(rest):,} other stack slots",
                       f"{len(rest):,} other stack slots"), 0,
                      f"{len(rest):,} others", len(rest), scans)
        shared = [r for r in self.shared if r.where == "stack"]
        for root in shared[:MAX_SHARED_ROWS]:
            path = self._root_path(root)
            self.parts.append({
                "path": path[0], "path_elixir": path[1], "depth": 0,
                "kind": "shared (counted in an earlier part)",
                "count": 0, "bytes": 0, "binary_bytes": 0,
                "share": 0.0})
        if len(shared) > MAX_SHARED_ROWS:
            more = len(shared) - MAX_SHARED_ROWS
            self.parts.append({
                "path": f"{more:,} other stack slots",
                "path_elixir": f"{more:,} other stack slots", "depth": 0,
                "kind": "shared (counted in an earlier part)",
                "count": more, "bytes": 0, "binary_bytes": 0,
                "share": 0.0})
        for where, path in (("dictionary", ("get()", "Process.get()")),
                            ("messages", ("Messages", "messages"))):
            group = [s for s in spans if s.root and s.root.where == where]
            if group:
                self._group(path, group, where)
        return self.parts, self._pins()

    def _length(self, span: _Span) -> int:
        """A list's length: its spine followed through its run of lines
        (the dumper writes a cell, its head's lines, then the next cell),
        a chunk of text at a time; at most MAX_LENGTH cells (live inspect
        counts with length/1). A tail written elsewhere (shared) or not a
        list ends the count where it is."""
        dump, pos, end = self.dump, span.start, span.end
        text, base, n = b"", pos, 0
        while n < MAX_LENGTH:
            nl = text.find(b"\n", pos - base)
            if nl < 0:
                if base + len(text) >= end:
                    return n
                more = dump.read(base + len(text), min(end, base + len(
                    text) + heap.CHUNK))
                text, base = text[pos - base:] + more, pos
                continue
            line = text[pos - base:nl]
            colon = line.find(b":")
            if line[colon + 1:colon + 2] != b"l":
                return n
            n += 1
            bar = line.rfind(b"|")
            tail = line[bar + 1:] if bar > colon else b"N"
            if tail[:1] != b"H":
                return n  # [] (N), or an improper tail
            needle = b"\n" + tail[1:] + b":"
            at = text.find(needle, nl)
            while at < 0 and base + len(text) < end:
                keep = max(nl, len(text) - len(needle))
                more = dump.read(base + len(text), min(end, base + len(
                    text) + heap.CHUNK))
                text, base, nl = text[keep:] + more, base + keep, nl - keep
                nl = max(nl, 0)
                at = text.find(needle, nl)
            if at < 0:
                return n
            pos = base + at + 1
        return n

    def _root_path(self, root: Root) -> tuple[str, str]:
        if root.name == "rest":
            return (("get(_)", "Process.get(_)") if root.where ==
                    "dictionary" else ("Messages[_]", "messages |> Enum.at(_)"))
        if root.where == "stack":
            frame = root.frame or "?"
            return f"{frame} {root.name}", f"{_elixir_mfa(frame)} {root.name}"
        if root.where == "dictionary":
            key = self.process.term(root.term, 16)
            text = _key(key[0], False) if isinstance(key, tuple) and key \
                else "_"
            return (f"get({text})",
                    f"Process.get({_key(key[0], True) if isinstance(key, tuple) and key else '_'})")
        return (f"Messages[{int(root.name) + 1}]",
                f"messages |> Enum.at({root.name})")

    def _group(self, path: tuple[str, str], spans: list[_Span],
               where: str) -> None:
        """A root made of many (the dictionary, the messages): its size
        is theirs; the largest ``width`` are its children. Entries past
        MAX_ROOT_LINES come as one span (a 'rest' root) and are counted
        among the others."""
        rest = [s for s in spans if s.root and s.root.name == "rest"]
        single = [s for s in spans if s not in rest]
        measured = [(span, scan_range(self.dump, span.start, span.end))
                    for span in single]
        rest_scans = [scan_range(self.dump, s.start, s.end) for s in rest]
        more = sum(s.root.more for s in rest if s.root)
        section = self.process.dictionary if where == "dictionary" \
            else self.process.messages
        # Every entry, immediates (an atom for a message) among them.
        total = self.dump.read(section.start, section.end).count(b"\n") \
            if section is not None else len(single) + more
        self._row(path, 0, "dictionary" if where == "dictionary"
                  else "messages", total,
                  [m for _, m in measured] + rest_scans)
        measured.sort(key=lambda item: -self._weight(item[1]))
        shown = measured[:self.width] if self.depth >= 1 else []
        for span, _ in shown:
            self._part(span, 1)
        others = [m for _, m in measured[len(shown):]] + rest_scans
        count = len(measured) - len(shown) + more
        if shown and count:
            self._others(path, 1, others, where != "dictionary", count)

    def _weight(self, scan: heap.Scan) -> int:
        return scan.words * self.word + self._binary(scan, False)

    def _binary(self, scan: heap.Scan, record: bool) -> int:
        seen: dict[bytes, int] = {}
        for address, size, _ in scan.slices:
            seen[address] = max(seen.get(address, 0),
                                self.sizes.get(address, size))
        if record:
            self.seen_binaries.update(seen)
        return sum(seen.values())

    def _row(self, path: tuple[str, str], depth: int, kind: str, count: int,
             scans: list[heap.Scan]) -> InspectPart:
        words = sum(s.words for s in scans)
        binary = self._binary(heap.Scan(0, [x for s in scans
                                            for x in s.slices]), depth == 0)
        row: InspectPart = {"path": path[0], "path_elixir": path[1],
                            "depth": depth, "kind": kind, "count": count,
                            "bytes": words * self.word,
                            "binary_bytes": binary, "share": 0.0}
        self.parts.append(row)
        return row

    def _others(self, path: tuple[str, str], depth: int,
                scans: list[heap.Scan], listed: bool,
                count: int | None = None) -> None:
        erl, ex = ("[_]", " |> Enum.at(_)") if listed else ("#{_}", "[_]")
        n = len(scans) if count is None else count
        self._row((path[0] + erl, path[1] + ex), depth,
                  f"{n:,} other{'s' if n != 1 else ''}", n, scans)

    def _part(self, span: _Span, depth: int) -> None:
        """One part: its row, then (within --depth) its largest children."""
        if span.path is _UNNAMED and span.root is not None:
            span = span._replace(path=self._root_path(span.root))
        text = self.process.line(span.start)
        try:
            c = heap.cell(text)
        except heap.HeapError:
            # A line no node writes (a tuple's arity past 2^24 - 1, ...).
            c = heap.Cell("damaged", 0, [], [], None, 0, None)
        kind = _kind(c)
        children = self._children(c, span) if depth < self.depth else None
        if not children:
            scan = scan_range(self.dump, span.start, span.end)
            self._note_pins(span.group or span.path, scan)
            self._row(span.path, depth, kind, self._length(span)
                      if c.kind == "cons" else _count(c), [scan])
            return
        own_end = self.process.line_end(span.start)
        own = scan_range(self.dump, span.start, min(own_end,
                                                    children[0].start))
        measured = [(child, scan_range(self.dump, child.start, child.end))
                    for child in children]
        self._row(span.path, depth, kind, _count(c),
                  [own] + [m for _, m in measured])
        measured.sort(key=lambda item: -self._weight(item[1]))
        for child, _ in measured[:self.width]:
            self._part(child, depth + 1)
        rest = measured[self.width:]
        if rest:
            for child, scan in rest:
                self._note_pins(child.group or child.path, scan)
            self._others(span.path, depth + 1, [m for _, m in rest],
                         c.kind != "map")

    def _children(self, c: heap.Cell, span: _Span) -> list[_Span] | None:
        """The boxed children of a tuple or map, each with its run of
        lines inside ``span``; None when it has none to place or too
        many (a list is one part: its elements are not placed)."""
        # A hash map (over 32 keys) is one part: its nodes are the map's
        # own structure, not what the program put in it.
        if c.kind not in ("tuple", "map") or not c.elements or \
                (c.kind == "map" and not c.keys):
            return None
        steps: list[tuple[Any, bytes]] = []
        keys = self._keys(c) if c.kind == "map" else []
        for i, element in enumerate(c.elements):
            address = heap.pointer(element)
            if address is None:
                continue
            if c.kind == "tuple":
                step: Any = (Atom("elem"), i + 1)
            else:
                step = (Atom("key"), keys[i] if i < len(keys)
                        else Atom("_"))
            steps.append((step, address))
        if not steps or len(steps) > MAX_PLACED:
            return None
        line_end = self.process.line_end(span.start)
        found: list[tuple[int, Any]] = []
        for step, address in steps:
            at = self.process.locate(address, line_end, span.end)
            if at is not None:
                found.append((at, step))
        if not found:
            return None
        found.sort(key=lambda item: item[0])
        group = (span.path[0] + "#{_}", span.path[1] + "[_]") \
            if c.kind == "map" else None
        out = []
        for i, (at, step) in enumerate(found):
            end = found[i + 1][0] if i + 1 < len(found) else span.end
            out.append(_Span(
                (span.path[0] + step_text(step, False, self.names, c.length),
                 span.path[1] + step_text(step, True, self.names, c.length)),
                at, end, None, group))
        return out

    def _keys(self, c: heap.Cell) -> list[Any]:
        """A flat map's keys as inspect's steps name them: atoms, small
        integers, the start of a short binary; else their kind."""
        if not c.keys:
            return []
        address = heap.pointer(c.keys[0])
        if address is None:
            return []
        at = self.process.locate(address)
        text = self.process.line(at) if at is not None \
            else self.process.literal(address)
        if text is None:
            return []
        try:
            keys = heap.cell(text)
        except heap.HeapError:
            return []
        return [self._key_term(k) for k in keys.elements]

    def _key_term(self, term: bytes) -> Any:
        atom = heap.atom_text(term)
        if atom is not None:
            return Atom(atom)
        number = heap.small_int(term)
        if number is not None:
            return number
        address = heap.pointer(term)
        if address is not None:
            at = self.process.locate(address)
            text = self.process.line(at) if at is not None else \
                self.process.literal(address)
            if text is not None and text[:2] == b"Yh":
                size, _, data = text[2:].partition(b":")
                try:
                    raw = base64.b64decode(data[:24] + b"=" * (-len(
                        data[:24]) % 4))
                    return (Atom("binary"), raw[:16], int(size, 16))
                except ValueError:
                    pass
            if text is not None:
                try:
                    return (Atom("kind"), Atom(_kind(heap.cell(text))))
                except heap.HeapError:
                    pass
        return Atom("_")

    def _note_pins(self, path: tuple[str, str], scan: heap.Scan) -> None:
        for address, size, _ in scan.slices:
            referenced = self.sizes.get(address)
            if referenced is None:
                self.unknown.add(address)
            elif referenced > PIN_RATIO * size:
                self.pins.setdefault(path[0], [path[1], 0, 0, {}])
                entry = self.pins[path[0]]
                entry[1] += 1
                entry[2] += size
                entry[3][address] = referenced

    def _pins(self) -> list[InspectPin]:
        out: list[InspectPin] = [
            {"path": path, "path_elixir": ex, "count": n, "bytes": used,
             "referenced_bytes": sum(binaries.values())}
            for path, (ex, n, used, binaries) in self.pins.items()]
        return sorted(out, key=lambda pin: -pin["referenced_bytes"])


def _place(text: bytes, listed: list[bytes], wanted: set[bytes],
           into: dict[bytes, int], before: bytes, after: bytes,
           base: int) -> None:
    """Where in ``text`` the wanted addresses among ``listed`` (a regex's
    findall, in the text's order) first occur, each as ``before`` +
    address + ``after``, put into ``into`` (the first found wins). Taken
    in the order they were listed, each find starts where the last one
    was found: one pass over the text for all of them (a regex search
    each from the start took minutes for 100,000 messages)."""
    new = wanted.intersection(listed).difference(into)
    if not new:
        return
    first: dict[bytes, int] = {}
    for i, address in enumerate(listed):
        if address in new and address not in first:
            first[address] = i
    at = 0
    for address in sorted(first, key=first.__getitem__):
        needle = before + address + after
        found = text.find(needle, at)
        # An address is a whole run of hex digits: not the start of a
        # longer one.
        while found >= 0 and not after and text[
                found + len(needle):found + len(needle) + 1] in _HEX:
            found = text.find(needle, found + 1)
        if found < 0:
            continue
        # A line's place is after its newline; a pointer's, its H.
        into[address] = base + found + (1 if before == b"\n" else 0)
        at = found


_HEX = {bytes([c]) for c in b"0123456789ABCDEF"}


def _merged(spans: list[_Span]) -> list[tuple[int, int]]:
    """The spans' ranges, adjoining ones joined (a deep stack's others
    are a few runs of lines, not a read each)."""
    out: list[tuple[int, int]] = []
    for span in sorted(spans, key=lambda s: s.start):
        if out and out[-1][1] == span.start:
            out[-1] = (out[-1][0], span.end)
        else:
            out.append((span.start, span.end))
    return out


def _slot_order(span: _Span) -> int:
    """y2 before y10: a slot's number."""
    name = span.root.name if span.root else ""
    return int(name[1:]) if name[1:].isdigit() else 1 << 30


def _kind(c: heap.Cell) -> str:
    if c.kind == "tuple":
        tag = heap.atom_text(c.tag) if c.tag else None
        # Quoted as Erlang writes it ({'$initial_call', ...}).
        return f"tuple {format_term(Atom(tag))}" if tag and c.length > 1 \
            else "tuple"
    if c.kind == "cons":
        return "list"
    return c.kind


def _count(c: heap.Cell) -> int:
    return c.length if c.kind in ("tuple", "map", "binary") else 0


def _key(term: Any, elixir: bool) -> str:
    if isinstance(term, tuple) and len(term) == 2 and term[0] == "atom":
        return key_text(Atom(term[1]), elixir)
    if isinstance(term, int):
        return key_text(term, elixir)
    return "_"


def _elixir_mfa(text: str) -> str:
    """m:f/a as Elixir writes it: :m.f/a, or Mod.f/a for Elixir modules."""
    module, sep, rest = text.partition(":")
    if not sep:
        return text
    if module.startswith("Elixir."):
        return f"{module[len('Elixir.'):]}.{rest}"
    return f":{module}.{rest}"


__all__ = ["MAX_PLACED", "inspect"]
