"""`crashdump FILE` as text: the overview a person reads first."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

from beam_probe.text.node import verdict_text
from beam_probe.text.syntax import Syntax
from beam_probe.text.tables import human_bytes, printable, table

if TYPE_CHECKING:
    from beam_probe.probes.results import CrashDumpOverview, DumpProcess


def _name(name: str | None, syntax: Syntax) -> str:
    """A registered name as read from the dump ('nl\nname' holds a
    newline): one line, its control characters escaped, so that no name
    forges a row."""
    return printable(syntax.name(name) or "").replace("\n", "\\n")


def _processes(rows: Sequence[DumpProcess], syntax: Syntax) -> str:
    return table(("pid", "name", "memory", "messages", "state",
                  "current function", "initial call"),
                 [(p["pid"], _name(p["name"], syntax),
                   human_bytes(p["memory"]), f"{p['message_queue_len']:,}",
                   p["state"], p["current_function"] or "",
                   p["initial_call"] or "") for p in rows],
                 "llrrlll", syntax)


def source_line(crash: dict[str, Any]) -> str:
    """The line that says which dump an answer comes from, and when."""
    cut = "" if crash["complete"] else (
        "; cut short" + (f" inside {crash['cut_in']}" if crash["cut_in"]
                         else "") + ": what is past the cut is not counted")
    return (f"from crash dump {crash['file']} (node {crash['node']}, "
            f"written {crash['written']}{cut})")


def overview_text(result: CrashDumpOverview, syntax: Syntax) -> str:
    why = result["cause"]
    release = (f"OTP {result['otp_release']}" if result["otp_release"]
               else "an unknown release")
    lines = [f"{result['file']}: crash dump of {result['node']}, written "
             f"{result['written']} ({release}, "
             f"{result['word_size'] * 8}-bit; "
             f"{human_bytes(result['size'])})",
             f"slogan: {result['slogan'][:300]}",
             f"why: {why['explanation']}"]
    if result["ending"] == "abort":
        lines.append(f"the dump is cut short: {result['abort_reason']} "
                     "(ERL_CRASH_DUMP_BYTES or ERL_CRASH_DUMP_SECONDS "
                     "stopped the writing); what follows is what it has")
    elif result["ending"] == "truncated":
        lines.append("the dump is cut short (no =end: the node was killed "
                     "while writing, or the file was copied in part)"
                     + (f", inside {result['cut_in']}" if result["cut_in"]
                        else "") + "; what follows is what it has")
    memory = result["memory"]
    if memory:
        lines += ["", "memory when it died: " + ", ".join(
            f"{kind} {human_bytes(memory[kind])}" for kind in
            ("total", "processes", "binary", "ets", "atom", "code",
             "system") if kind in memory)]
    else:
        lines += ["", "memory: not in the dump (cut before =memory)"]
    counts = result["counts"]
    atoms = counts["atoms"]
    limit = counts["atom_limit"]
    lines.append(
        f"{counts['processes']:,} processes, {counts['ports']:,} ports, "
        f"{counts['ets_tables']:,} ETS tables, "
        + (f"{atoms:,} atoms" if atoms is not None else "atoms unknown")
        + (f" of {limit:,} ({atoms / limit:.0%})" if atoms is not None
           and limit else "")
        + " (a dump does not record the process and port limits)")
    for r in result["running"]:
        lines.append(f"as it died, {r['scheduler']} was "
                     f"{'collecting' if r['state'] == 'Garbing' else 'running'}"
                     f" {syntax.code(r['pid'])} "
                     f"{_name(r['name'], syntax)} in "
                     f"{syntax.code(r['current_function'] or '?')}"
                     .replace("  ", " "))
    procs = result["processes"]
    if procs["by_memory"]:
        lines += ["", "processes that held most memory:",
                  _processes(procs["by_memory"], syntax)]
    if procs["by_message_queue_len"]:
        lines += ["", "longest mailboxes:",
                  _processes(procs["by_message_queue_len"], syntax)]
    tables = result["ets"]
    if tables and tables["largest"]:
        lines += ["", f"largest ETS tables (all {tables['tables']:,}: "
                  f"{human_bytes(tables['total_memory'])}):",
                  table(("table", "owner", "owner is", "objects", "memory",
                         "type"),
                        [(t["name"], t["owner"],
                          _name(t["owner_name"], syntax)
                          or t["owner_group"],
                          f"{t['size']:,}", human_bytes(t["memory"]),
                          t["type"]) for t in tables["largest"]],
                        "lllrrl", syntax)]
    alloc = result["allocators"]
    if alloc:
        lines += ["", f"allocators: {human_bytes(alloc['used'])} used in "
                  f"{human_bytes(alloc['allocated'])} of carriers "
                  f"({alloc['usage']:.0%}); "
                  + verdict_text(alloc["verdict"])]
    lines += ["", "look closer:"] + [f"  {syntax.code(step)}"
                                     for step in result["next"]]
    return "\n".join(lines)


__all__ = ["overview_text", "source_line"]
