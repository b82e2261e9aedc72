"""The live probes' questions, answered from a crash dump: the same
result types (probes/results.py), so the same renderers and JSON.

What a dump cannot say is said, not guessed: a dump has no per-process
binary_memory list (it is read from the slices on each heap, the
binaries the dump wrote), no RSS, no process or port limits."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Callable

from beam_probe.crashdump import fields as f
from beam_probe.crashdump import heap
from beam_probe.crashdump.process import (DeadProcess, dead_process, few,
                                          scan_range)
from beam_probe.crashdump.reader import Dump, DumpError, Section
from beam_probe.errors import NoSuchProcess, UsageError

if TYPE_CHECKING:
    from beam_probe.probes.results import (AllocReport, AllocType,
                                           EtsReport, EtsTable,
                                           MemoryResult, ProcCount,
                                           ProcInfo, ValueRow)

# What proc-count reads from a dump's =proc fields: the fields, and the
# figure made of them (word: the dump's word size).
ATTRIBUTES: dict[str, tuple[tuple[str, ...], Callable[[list[int], int],
                                                       int]]] = {
    "memory": (("Memory",), lambda v, word: v[0]),
    "message_queue_len": (("Message queue length",), lambda v, word: v[0]),
    "reductions": (("Reductions",), lambda v, word: v[0]),
    "total_heap_size": (("Stack+heap", "OldHeap"),
                        lambda v, word: v[0] + v[1]),
    # process_info's heap_size includes the stack: "Stack+heap".
    "heap_size": (("Stack+heap",), lambda v, word: v[0]),
    # recon's: the binaries its heaps refer to, a binary per reference.
    "binary_memory": (("BinVHeap", "OldBinVHeap"),
                      lambda v, word: (v[0] + v[1]) * word),
}
# Read from a section of the heaps: the stack's lines.
SECTION_ATTRIBUTES = ("stack_size",)


def node_name(dump: Dump) -> str:
    """The dead node's name (=node:'app@host'), or nonode@nohost."""
    section = dump.first("node")
    if section is None:
        return "nonode@nohost"
    name = section.id
    if len(name) >= 2 and name[0] == name[-1] == "'":
        name = name[1:-1]
    return name or "nonode@nohost"


def runs_elixir(dump: Dump) -> bool:
    """Whether the dead node had Elixir loaded (a module named Elixir.*)."""
    return any(section.id.startswith(("Elixir.", "'Elixir."))
               for section in dump.sections("mod"))


def source(dump: Dump) -> dict[str, Any]:
    """Which dump an answer comes from, and when it was written."""
    head = f.preamble(dump)
    return {"file": dump.path, "node": node_name(dump),
            "written": head.written, "slogan": head.slogan[:300],
            "complete": dump.ending == "end", "cut_in": dump.cut_in,
            "elixir": runs_elixir(dump)}


def memory(dump: Dump) -> MemoryResult:
    kinds = f.memory(dump)
    if not kinds:
        raise DumpError(f"{dump.path} has no =memory section (cut before "
                        "it was written)")
    return {"node": node_name(dump), "memory": kinds}


def binary_sizes(dump: Dump) -> dict[bytes, int]:
    """Each =binary section's address and byte size (the hex before the
    first ':' of its line): the refc binaries the dump wrote."""
    found = dump.memo.get("binary_sizes")
    if found is not None:
        return found  # type: ignore[no-any-return]
    out: dict[bytes, int] = {}
    for section in dump.sections("binary"):
        head = dump.read(section.start, min(section.end, section.start + 24))
        size, sep, _ = head.partition(b":")
        if sep and 0 < len(size) <= 12 and \
                not size.strip(b"0123456789ABCDEF"):
            out[section.id.encode()] = int(size, 16)
    dump.memo["binary_sizes"] = out
    return out


def heap_binaries(dump: Dump, process: DeadProcess,
                  sizes: dict[bytes, int]) -> tuple[int | None, int]:
    """(the refc binary bytes its heap refers to, each binary once; how
    many binaries) from the slices on its heap. The bytes are None when
    the dump did not write a binary a slice refers to (OTP 25 leaves out
    those under a sub-binary whose ProcBin it did not visit)."""
    if process.heap is None:
        return 0, 0
    seen: dict[bytes, int | None] = {}
    for address, _size, _ in scan_range(dump, process.heap.start,
                                        process.heap.end).slices:
        seen[address] = sizes.get(address)
    if any(size is None for size in seen.values()):
        return None, len(seen)
    return sum(size or 0 for size in seen.values()), len(seen)


# A dump's process states as process_info(P, status) names them.
STATUS = {"Garbing": "garbage_collecting", "Running": "running",
          "Runnable": "runnable", "Waiting": "waiting",
          "Exiting": "exiting", "Suspended": "suspended",
          "Free": "free", "Hibernating": "waiting"}


def status(state: str) -> str:
    return STATUS.get(state, state.lower() or "unknown")


def binary_memory(dump: Dump, p: f.ProcFields) -> int:
    """recon's binary_memory of a dead process (ATTRIBUTES' figure)."""
    figure = ATTRIBUTES["binary_memory"][1]
    return figure([p.bin_vheap, p.old_bin_vheap], f.preamble(dump).word_size)


def _row(process: DeadProcess, value: int) -> ValueRow:
    p = process.fields
    return {"pid": p.pid, "value": value, "name": p.name, "label": None,
            "current_function": p.current_function,
            "initial_call": process.initial_call(), "exited": False}


def proc_count(dump: Dump, attribute: str, n: int) -> ProcCount:
    """The N processes with the largest ATTRIBUTE when the node died."""
    if attribute not in ATTRIBUTES and attribute not in SECTION_ATTRIBUTES:
        raise UsageError(f"a crash dump has no {attribute} per process; it "
                         f"has {', '.join(list(ATTRIBUTES) + list(SECTION_ATTRIBUTES))}")
    ranked: list[tuple[int, Any]] = []
    scanned = 0
    word = f.preamble(dump).word_size
    keys, figure = ATTRIBUTES.get(attribute, (("Memory",), None))
    for number, values in f.every_proc(dump, keys):
        scanned += 1
        if figure is not None:
            value = figure(values, word)
        else:
            stack = dump.find("proc_stack", dump.section_at(number).id)
            value = dump.read(stack.start, stack.end).count(b"\n") \
                if stack is not None else 0
        ranked.append((value, number))
        if len(ranked) > 4 * n + 64:
            ranked.sort(key=lambda item: -item[0])
            del ranked[n:]
    ranked.sort(key=lambda item: -item[0])
    ranked = [(value, dump.section_at(number)) for value, number
              in ranked[:n]]
    found = few(dump, [section for _, section in ranked])
    rows = [_row(found[section.id], value) for value, section in ranked]
    if attribute == "binary_memory":
        # Each binary once, from the slices on the heap, where the dump
        # wrote every binary they refer to (else unknown: None).
        sizes = binary_sizes(dump)
        for row, (_value, section) in zip(rows, ranked):
            row["binary_distinct"] = heap_binaries(  # type: ignore[typeddict-item]
                dump, DeadProcess(dump, section), sizes)[0]
    # Labels (process_label, process_name) are not read from a dump.
    return {"node": node_name(dump), "attribute": attribute,
            "scanned": scanned, "processes": rows, "labels_read": False,
            "unnamed": None}


def largest_tables(tables: list[f.EtsFields], n: int, sort: str
                   ) -> list[f.EtsFields]:
    def key(table: f.EtsFields) -> int:
        return (table.words or 0) if sort == "memory" else table.objects

    return sorted(tables, key=lambda t: -key(t))[:n]


def table_owners(dump: Dump, tables: list[f.EtsFields]) -> list[Section]:
    """The =proc sections of the tables' owners."""
    found = (dump.find("proc", t.owner) for t in tables)
    return [s for s in found if s is not None]


def ets(dump: Dump, n: int, sort: str,
        owners: dict[str, DeadProcess] | None = None,
        tables: list[f.EtsFields] | None = None) -> EtsReport:
    """The largest tables by memory (Words x word size) or size, their
    owners named by =proc and (proc_lib's) '$initial_call'; ``owners``
    and ``tables`` when the caller read them already."""
    word = f.preamble(dump).word_size
    if tables is None:
        tables = list(f.ets_tables(dump))
    largest = largest_tables(tables, n, sort)
    if owners is None:
        owners = few(dump, table_owners(dump, largest))
    rows: list[EtsTable] = []
    for table in largest:
        owner = owners.get(table.owner)
        name = owner.fields.name if owner else None
        rows.append({"id": table.id, "name": table.name,
                     "owner": table.owner, "owner_name": name,
                     "owner_group": _group(owner) if owner else "(exited)",
                     "size": table.objects,
                     "memory": (table.words or 0) * word,
                     "type": table.type, "protection": table.protection})
    return {"node": node_name(dump), "sort": sort, "tables": len(tables),
            "total_memory": sum((t.words or 0) for t in tables) * word,
            "largest": rows}


def _group(process: DeadProcess) -> str:
    # ets.owner_group's rule: '$initial_call', the name, the initial call.
    initial = process.initial_call()
    if initial and initial != process.fields.spawned_as:
        return initial
    return process.fields.name or initial or "?"


_ALLOC = re.compile(r"([a-z_]+_alloc)(?:\[(\d+)\])?$")
_KEYS = ("blocks", "blocks_max", "block_bytes", "block_bytes_max",
         "carriers", "carriers_max", "carrier_bytes", "carrier_bytes_max")


def alloc(dump: Dump) -> AllocReport:
    """alloc's report from the =allocator sections: the same sums as the
    live helper's (blocks over every type a carrier holds, current and
    maximum; carriers and their bytes), the same verdict; no RSS."""
    from beam_probe.probes import alloc as live

    per_type: dict[str, dict[str, Any]] = {}
    hits = calls = 0
    for section in dump.sections("allocator"):
        values = f.fields(dump, section)
        match = _ALLOC.match(section.id)
        if section.id.startswith("mseg_alloc"):
            hits += f.count(dump, section, values, "cache_hits", 0)
            calls += f.count(dump, section, values, "mseg_alloc calls", 0)
            continue
        if match is None or "versions" not in values or \
                values.get("option e") == "false":
            continue
        entry = per_type.setdefault(match.group(1), {
            "instances": 0, "mbcs": [0] * 8, "sbcs": [0] * 8})
        entry["instances"] += 1
        for kind in ("mbcs", "sbcs", "mbcs_pool"):
            figures = _instance(dump, section, values, kind)
            target = "mbcs" if kind == "mbcs_pool" else kind
            entry[target] = [a + b for a, b in zip(entry[target], figures)]
    types: list[AllocType] = []
    for name, entry in per_type.items():
        mbcs, sbcs = entry["mbcs"], entry["sbcs"]
        used, allocated = mbcs[2] + sbcs[2], mbcs[6] + sbcs[6]
        types.append({"type": name, "instances": entry["instances"],
                      "used": used, "allocated": allocated,
                      "usage": round(used / allocated, 4) if allocated
                      else 1.0,
                      "used_max": max(used, mbcs[3] + sbcs[3]),
                      "allocated_max": max(allocated, mbcs[7] + sbcs[7]),
                      "mbcs": _carriers(mbcs), "sbcs": _carriers(sbcs)})
    allocated = sum(t["allocated"] for t in types)
    used = sum(t["used"] for t in types)
    total = f.memory(dump).get("total", 0)
    return {"node": node_name(dump), "used": used, "allocated": allocated,
            "usage": round(used / allocated, 4) if allocated else 1.0,
            "memory_total": total, "rss": None,
            "mseg_cache": {"hits": hits, "calls": calls,
                           "hit_rate": round(hits / calls, 4) if calls
                           else None},
            "verdict": live.verdict(types, allocated, None),
            "types": sorted(types, key=lambda t: -t["allocated"]),
            "raw": None}


def _instance(dump: Dump, section: Any, values: dict[str, str],
              kind: str) -> list[int]:
    blocks = [0, 0, 0, 0]
    prefix = f"{kind} blocks["
    for key in values:
        if key.startswith(prefix) and key.endswith("] count"):
            c = f.counts(dump, section, values, key, 3)
            blocks[0] += c[0]
            blocks[1] += c[-1]
        elif key.startswith(prefix) and key.endswith("] size"):
            c = f.counts(dump, section, values, key, 3)
            blocks[2] += c[0]
            blocks[3] += c[-1]
    carriers = f.counts(dump, section, values, f"{kind} carriers", 3)
    size = f.counts(dump, section, values, f"{kind} carriers size", 3)
    return blocks + [carriers[0], carriers[-1], size[0], size[-1]]


def _carriers(numbers: list[int]) -> Any:
    row = dict(zip(_KEYS, numbers))
    return {**row, "average_block": row["block_bytes"] // row["blocks"]
            if row["blocks"] else 0}


def resolve(dump: Dump, spec: str) -> DeadProcess:
    """The dead process a user names: a pid as Erlang or Elixir print it,
    or a registered name (Erlang or Elixir syntax)."""
    from beam_probe.erldist.terms import Atom
    from beam_probe.probes.info import target

    kind, what = target(spec)
    if kind == Atom("pid"):
        found = dead_process(dump, what)
        if found is None:
            raise NoSuchProcess(f"no process {what} in {dump.path}")
        return found
    for section in dump.sections("proc"):
        values = f.fields(dump, section)
        if f.unquoted(values.get("Name", "")) in what:
            return DeadProcess(dump, section)
    raise NoSuchProcess(f"no process registered as {spec} in {dump.path}")


def proc_info(dump: Dump, spec: str) -> ProcInfo:
    """recon:info/1's groups, as far as the dump has them."""
    process = resolve(dump, spec)
    p = process.fields
    word = f.preamble(dump).word_size
    distinct, count = heap_binaries(dump, process, binary_sizes(dump))
    # The link list whole (a supervisor's may be megabytes: fields()
    # keeps short values only).
    body = dump.read(p.section.start, p.section.end)
    line = re.search(rb"^Link list: ([^\n]*)$", body, re.M)
    links = [m.decode() for m in re.findall(
        rb"<\d+\.\d+\.\d+>|#Port<[\d.]+>", line.group(1))] if line else []
    stack = process.stack_words
    return {
        "node": node_name(dump), "pid": p.pid,
        "meta": {"registered_name": p.name, "status": status(p.state),
                 "spawned_by": p.spawned_by},
        "signals": {"links": links},
        "location": {"initial_call": process.initial_call(),
                     "current_function": p.current_function,
                     "current_stacktrace": _frames(process)},
        "memory_used": {"memory": p.memory,
                        "message_queue_len": p.message_queue_len,
                        "heap_size": p.stack_heap,
                        "total_heap_size": p.stack_heap + p.old_heap,
                        "stack_size": stack,
                        "binary_count": count,
                        "binary_memory": binary_memory(dump, p),
                        "binary_distinct": distinct,
                        "heap_unused_bytes": (p.heap_unused
                                              + p.old_heap_unused) * word},
        "work": {"reductions": p.reductions}}


def _frames(process: DeadProcess) -> list[str]:
    """The current function, then each return address's function: the
    stack as the dump has it (no file or line)."""
    out = [process.fields.current_function or "?"]
    if process.stack is not None:
        for line in process.dump.lines(process.stack, heap.MAX_CELL_LINE):
            if b"Return addr" in line:
                text = line[line.rfind(b"(") + 1:line.rfind(b")")].decode(
                    "utf-8", "replace").split(" + ")[0]
                if not text.startswith("<"):
                    out.append(text)
    return out


__all__ = ["ATTRIBUTES", "SECTION_ATTRIBUTES", "alloc", "binary_sizes",
           "binary_memory", "ets", "heap_binaries", "largest_tables",
           "table_owners", "memory", "node_name", "proc_count",
           "proc_info", "resolve", "runs_elixir", "source"]
