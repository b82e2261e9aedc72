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
from beam_probe.crashdump.process import DeadProcess, few
from beam_probe.crashdump.reader import Dump
from beam_probe.files import shell_path

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


def _row(process: DeadProcess) -> DumpProcess:
    p = process.fields
    return {"pid": p.pid, "name": p.name, "memory": p.memory,
            "message_queue_len": p.message_queue_len,
            "reductions": p.reductions, "state": answers.status(p.state),
            "current_function": p.current_function,
            "initial_call": process.initial_call()}


def _keep(top: list[tuple[int, int, int]], item: tuple[int, int, int]
          ) -> None:
    """Keep the TOP largest items in a heap."""
    if len(top) < TOP:
        heapq.heappush(top, item)
    else:
        heapq.heappushpop(top, item)


def overview(dump: Dump) -> CrashDumpOverview:
    head = f.preamble(dump)
    by_memory: list[tuple[int, int, int]] = []
    by_queue: list[tuple[int, int, int]] = []
    count = 0
    for number, (queue, memory) in f.every_proc(
            dump, ("Message queue length", "Memory")):
        count += 1
        # Bounded heaps: a million processes keep TOP rows each (their
        # sections' numbers: made Sections once shown).
        _keep(by_memory, (memory, count, number))
        if queue:
            _keep(by_queue, (queue, count, number))
    heaviest = [dump.section_at(n) for _, _, n in sorted(by_memory,
                                                         reverse=True)]
    longest = [dump.section_at(n) for _, _, n in sorted(by_queue,
                                                        reverse=True)]
    tables = list(f.ets_tables(dump))
    owners = answers.table_owners(dump, answers.largest_tables(
        tables, TOP, "memory"))
    # One pass over the heaps for every row's and owner's dictionary.
    found = few(dump, heaviest + longest + owners)
    top_memory = [_row(found[s.id]) for s in heaviest]
    top_queue = [_row(found[s.id]) for s in longest]
    running = []
    for r in f.running(dump):
        at = dump.find("proc", r.pid)
        name = f.proc(dump, at).name if at is not None else None
        running.append({"scheduler": r.scheduler, "pid": r.pid,
                        "name": name, "state": r.state,
                        "current_function": r.function})
    largest = answers.ets(dump, TOP, "memory", found, tables) \
        if tables else None
    allocators = answers.alloc(dump) if dump.count("allocator") else None
    atoms, atom_limit = f.index_limit(dump, "atom_tab")
    ending = dump.ending
    abort = dump.abort_reason
    why = cause(head.slogan)
    file = shell_path(dump.path)
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
        "ets": largest,
        "allocators": allocators,
        "counts": {"processes": count, "ports": dump.count("port"),
                   "atoms": atoms if atoms is not None and atoms >= 0
                   else head.atoms,
                   "atom_limit": atom_limit if atom_limit and
                   atom_limit > 0 else None,
                   "ets_tables": dump.count("ets")},
        "next": [f"beam-probe {step}" for step in steps]}


__all__ = ["ALLOCATORS", "TOP", "cause", "overview"]
