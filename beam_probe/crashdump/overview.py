"""`crashdump FILE`: the overview a person reads first. Why the node
died (its slogan, in words), when, which release; whether the dump is
whole; memory by kind; the processes that held most memory and the
longest mailboxes; the process running or collecting as it died; the
largest tables; allocators; counts against limits; what to run next.

Only =proc, =ets, =memory, =allocator and a few small sections are read:
never a heap (inspect reads one)."""

from __future__ import annotations

import heapq
import re
import shlex
from typing import TYPE_CHECKING, Any

from beam_probe.crashdump import answers
from beam_probe.crashdump import fields as f
from beam_probe.crashdump.process import DeadProcess
from beam_probe.crashdump.reader import WINDOW, Dump

if TYPE_CHECKING:
    from beam_probe.probes.results import CrashDumpOverview, DumpProcess

# Rows of each top list.
TOP = 5

_OOM = re.compile(r"^(\w+): Cannot (?:re)?allocate (\d+) bytes of memory"
                  r"(?: \(of type \"([^\"]+)\"\))?")
# What running out in each allocator usually means, and where to look.
ALLOCATORS = {
    "eheap_alloc": ("process heaps: a process (or many) grew until the "
                    "node's memory ran out; the processes below held it",
                    "proc-count {file} memory 10"),
    "binary_alloc": ("refc binaries: binaries kept alive by the processes "
                     "or tables that refer to them",
                     "proc-count {file} binary_memory 10"),
    "ets_alloc": ("ETS tables: a table grew until the node's memory ran "
                  "out", "ets {file}"),
    "driver_alloc": ("port and driver buffers: a port's queue or a "
                     "driver's data (a slow socket peer, a busy file)",
                     "alloc {file}"),
    "fix_alloc": ("fixed-size runtime structures (process control "
                  "blocks, links, monitors): often many processes",
                  "proc-count {file} memory 10"),
    "ll_alloc": ("long-lived runtime data (code, tables sized at start)",
                 "alloc {file}"),
    "sl_alloc": ("short-lived runtime data (messages in transit, "
                 "timers)", "alloc {file}"),
    "std_alloc": ("the runtime's general data (tables' metadata, "
                  "monitors)", "alloc {file}"),
    "temp_alloc": ("temporary buffers of the runtime", "alloc {file}"),
    "literal_alloc": ("loaded code's literals", "alloc {file}"),
}
_CAUSES = (
    (re.compile(r"^Received SIGUSR1"), "signal",
     "someone sent SIGUSR1 (kill -USR1) to write this dump; the node was "
     "not necessarily in trouble"),
    (re.compile(r"^Kernel pid terminated"), "kernel",
     "a process of the kernel application died (often an application "
     "that failed to start, named in the reason)"),
    (re.compile(r"^Init terminating in do_boot"), "boot",
     "the node failed to boot (the reason says what init could not do)"),
    (re.compile(r"no more index entries in atom_tab"), "system_limit",
     "the atom table is full: something makes atoms from data "
     "(list_to_atom, binary_to_atom)"),
    (re.compile(r"no more index entries in proc_tab|Too many processes"),
     "system_limit", "the process table is full (+P): processes leak"),
    (re.compile(r"^Could not"), "runtime", "the runtime could not go on"),
)


def cause(slogan: str) -> dict[str, Any]:
    """The slogan in words: what kind of death, and, for memory, which
    allocator failed and how large the request was."""
    match = _OOM.match(slogan)
    if match:
        allocator, size, of_type = match.group(1), int(match.group(2)), \
            match.group(3)
        meaning = ALLOCATORS.get(allocator, (
            "the runtime's own memory", "alloc {file}"))[0]
        return {"kind": "out_of_memory", "allocator": allocator,
                "request_bytes": size, "type": of_type,
                "explanation": f"the node ran out of memory: {allocator} "
                               f"could not get {size:,} bytes more "
                               f"({meaning})"}
    for pattern, kind, text in _CAUSES:
        if pattern.search(slogan):
            return {"kind": kind, "allocator": None, "request_bytes": None,
                    "type": None, "explanation": text}
    return {"kind": "halt", "allocator": None, "request_bytes": None,
            "type": None,
            "explanation": "the node stopped with this reason: "
                           "erlang:halt/1 with a string, or a fatal error "
                           "of the runtime"}


def _heaps_of(dump: Dump, pids: dict[str, int]) -> dict[str, dict[str, Any]]:
    """The dictionary and heap sections of a few processes (pid: its
    heap's words), found in one
    pass of mm.find over the heaps for the dictionaries' headers (a long
    needle: ~5 GB/s here, where indexing every section reads ~3 GB/s),
    without indexing the heaps."""
    from beam_probe.crashdump.reader import Section

    out: dict[str, dict[str, Any]] = {}
    mm, start = dump.mm, dump.heaps_start
    if start is None or not pids:
        return out
    needle = b"\n=proc_dictionary:"
    window = start - 1
    while len(out) < len(pids) and window < dump.size:
        # A window at a time, its pages given back after: the pass must
        # not leave the file resident (a 569 MiB dump read through left
        # 585 MiB).
        stop = min(dump.size, window + WINDOW)
        at = mm.find(needle, window, stop + len(needle))
        while 0 <= at < stop and len(out) < len(pids):
            line_end = mm.find(b"\n", at + 1, at + 4096)
            if line_end < 0:
                break
            pid = mm[at + len(needle):line_end].decode("latin-1")
            if pid in pids:
                out[pid] = _sections_after(dump, pid, line_end, pids[pid])
            at = mm.find(needle, line_end, stop + len(needle))
        dump.release(window, stop)
        window = stop
    return out


def _sections_after(dump: Dump, pid: str, line_end: int, words: int
                    ) -> dict[str, Any]:
    """A process's dictionary (its header ends at line_end) and its heap,
    which follows its stack. The heap is read up to a bound its size
    gives (a term's line is under 64 bytes a word), not to its end, which
    may be a gigabyte on."""
    from beam_probe.crashdump.reader import Section

    mm = dump.mm
    body_end = mm.find(b"\n=", line_end)
    body_end = dump.size if body_end < 0 else body_end + 1
    found = {"proc_dictionary": Section("proc_dictionary", pid,
                                        line_end + 1, body_end)}
    head = mm.find(b"\n=proc_heap:" + pid.encode() + b"\n", body_end - 1,
                   body_end + (1 << 20))
    if head >= 0:
        heap_start = mm.find(b"\n", head + 1) + 1
        found["proc_heap"] = Section("proc_heap", pid, heap_start, min(
            dump.size, heap_start + 64 * words + 4096))
    return found


def _words(dump: Dump, section: Any) -> int:
    p = f.proc(dump, section)
    return p.stack_heap + p.old_heap


def _row(process: DeadProcess) -> DumpProcess:
    p = process.fields
    return {"pid": p.pid, "name": p.name, "memory": p.memory,
            "message_queue_len": p.message_queue_len,
            "reductions": p.reductions, "state": p.state,
            "current_function": p.current_function,
            "initial_call": process.initial_call()}


def overview(dump: Dump) -> CrashDumpOverview:
    head = f.preamble(dump)
    by_memory: list[tuple[int, int, Any]] = []
    by_queue: list[tuple[int, int, Any]] = []
    count = 0
    for section in dump.sections("proc"):
        p = f.proc(dump, section)
        count += 1
        # Bounded heaps: a million processes keep TOP rows each.
        item = (p.memory, count, section)
        if len(by_memory) < TOP:
            heapq.heappush(by_memory, item)
        else:
            heapq.heappushpop(by_memory, item)
        if p.message_queue_len:
            item = (p.message_queue_len, count, section)
            if len(by_queue) < TOP:
                heapq.heappush(by_queue, item)
            else:
                heapq.heappushpop(by_queue, item)
    shown = sorted(by_memory, reverse=True) + sorted(by_queue, reverse=True)
    # Only proc_lib's processes keep an '$initial_call' in their
    # dictionary: the others' initial call is their =proc's.
    heaps = _heaps_of(dump, {s.id: _words(dump, s) for _, _, s in shown
                             if (f.proc(dump, s).spawned_as or "")
                             .startswith("proc_lib:")})
    top_memory = [_row(DeadProcess(dump, s, heaps.get(s.id, {})))
                  for _, _, s in sorted(by_memory, reverse=True)]
    top_queue = [_row(DeadProcess(dump, s, heaps.get(s.id, {})))
                 for _, _, s in sorted(by_queue, reverse=True)]
    running = []
    for r in f.running(dump):
        found = dump.find("proc", r.pid)
        name = f.proc(dump, found).name if found is not None else None
        running.append({"scheduler": r.scheduler, "pid": r.pid,
                        "name": name, "state": r.state,
                        "current_function": r.function})
    tables = answers.ets(dump, TOP, "memory", heaps=False) \
        if dump.count("ets") else None
    allocators = answers.alloc(dump) if dump.count("allocator") else None
    atoms, atom_limit = f.index_limit(dump, "atom_tab")
    ending = dump.ending
    abort = dump.abort_reason
    why = cause(head.slogan)
    file = shlex.quote(dump.path)
    first = ALLOCATORS.get(why["allocator"] or "", (None, None))[1]
    steps = []
    if first:
        steps.append(first.format(file=file))
    if top_memory:
        steps.append(f"inspect {file} {shlex.quote(top_memory[0]['pid'])}")
    for step in (f"proc-count {file} memory 10", f"ets {file}",
                 f"alloc {file}",
                 f"diff before.snapshot after.snapshot {file}"):
        if step not in steps:
            steps.append(step)
    return {
        "file": dump.path, "size": dump.size,
        "node": answers.node_name(dump), "written": head.written,
        "slogan": head.slogan, "cause": why,
        "otp_release": head.otp_release, "erts_version": head.erts_version,
        "word_size": head.word_size,
        "elixir": answers.runs_elixir(dump),
        "complete": ending == "end",
        "ending": ending,
        "abort_reason": abort,
        "cut_in": dump.cut_in,
        "memory": f.memory(dump),
        "processes": {"count": count, "by_memory": top_memory,
                      "by_message_queue_len": top_queue},
        "running": running,
        "ets": tables,
        "allocators": allocators,
        "counts": {"processes": count, "ports": dump.count("port"),
                   "atoms": atoms if atoms is not None and atoms >= 0
                   else head.atoms,
                   "atom_limit": atom_limit if atom_limit and
                   atom_limit > 0 else None,
                   "ets_tables": dump.count("ets")},
        "next": [f"beam-probe {step}" for step in steps]}


__all__ = ["ALLOCATORS", "TOP", "cause", "overview"]
