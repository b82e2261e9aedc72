"""One node's answers as text: ping, memory, the process rankings,
proc-info, alloc and ets. Each renderer takes its probe's result and the
Syntax to show names, functions and pids in.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

from beam_probe.text.syntax import Syntax
from beam_probe.text.tables import human_bytes, table

if TYPE_CHECKING:
    from beam_probe.probes.results import (AllocReport, BinLeak, EtsReport,
                                           MemoryResult, Ping, ProcCount,
                                           ProcessRow, ProcInfo, ProcWindow,
                                           Verdict)


def ping_text(result: Ping, syntax: Syntax) -> str:
    return (f"{result['node']} is up: OTP {result['otp_release']}, "
            f"ERTS {result['erts_version']}, round trip "
            f"{result['rtt_ms']:.3f} ms")


def memory_text(result: MemoryResult, syntax: Syntax) -> str:
    rows = [(key, value, human_bytes(value))
            for key, value in result["memory"].items()]
    return f"{result['node']}: erlang:memory()\n" + table(
        ("type", "bytes", "size"), rows, "lrr")


def _name(p: ProcessRow, syntax: Syntax) -> str:
    """Its registered name, else what it says it is (its label or
    process_name, read from the dictionary: one key at a time on OTP
    26.2+, from a copy before)."""
    if p.get("exited"):
        return "(exited)"
    name = syntax.name(p["name"])
    if name:
        return name
    label = p.get("label")
    return syntax.code(label) if label else ""


# One rule for a process's figures in every text table (issue 38: proc-
# count printed raw bytes where top printed MiB): bytes in binary units
# with one decimal (human_bytes, as every other table), words and counts
# as counts with thousands separators. process_info's heap and stack
# sizes are words, and stay words (the header says so): the rows carry no
# word size to make bytes of them, and a count is exact. JSON keeps the
# raw integers, recon's own.
BYTE_ATTRIBUTES = frozenset(("memory", "binary_memory", "binary_distinct"))
WORD_ATTRIBUTES = frozenset(("total_heap_size", "heap_size", "stack_size"))


def figure(attribute: str, value: int | None) -> str:
    """A process's ``attribute`` as a table shows it: 1.5 MiB, 12,345."""
    if value is None:
        return ""
    if attribute in BYTE_ATTRIBUTES:
        return human_bytes(value)
    return f"{value:,}"


def heading(attribute: str) -> str:
    """The column's title: the attribute, and its unit where it is words."""
    return f"{attribute} (words)" if attribute in WORD_ATTRIBUTES \
        else attribute


def process_rows(processes: Sequence[ProcessRow], key: str,
                 syntax: Syntax, attribute: str = ""
                 ) -> list[tuple[str, ...]]:
    """Table rows: pid, the number (by binary_memory, then the distinct
    bytes), name (or label), current function, initial call; a process
    that exited before it could be described says so. The number is
    written as ``attribute`` is (figure); bin-leak's deltas, counts of
    references, with no attribute."""
    return [(p["pid"], figure(attribute, p[key]),
             *((figure("binary_distinct", p["binary_distinct"]),)
               if "binary_distinct" in p else ()),
             _name(p, syntax),
             p["current_function"] or "", p["initial_call"] or "")
            for p in processes]


# Under binary_memory's column (recon's figure): why a second one.
DISTINCT_NOTE = ("binary_memory counts a refc binary once per reference, "
                 "as recon does; distinct counts each binary once")


# Under bin-leak's table: recon's delta is a count, distinct what is left.
BIN_LEAK_NOTE = ("delta: refc binary references the collection freed, as "
                 "recon counts; distinct: the bytes each still holds, each "
                 "binary once")


def labels_note(result: Any, nodes: Sequence[str] | None = None
                ) -> str | None:
    """Once, under a table of processes from a node before OTP 26.2,
    where a row shows proc_lib's entry point: what cannot be had there.
    For a cluster, ``nodes`` are those of its nodes."""
    if nodes is None and result.get("labels_read", True) or \
            "crash_dump" in result:
        # (A dump's processes are not a node's release's to explain.)
        return None
    rows = [p for p in result.get("processes", ())
            if (p.get("initial_call") or "").startswith("proc_lib:init_p/")
            and (nodes is None or p.get("node") in nodes)]
    if not rows:
        return None
    which = "this node (before OTP 26.2)" if nodes is None else \
        f"{', '.join(nodes[:3])}{' ...' if len(nodes) > 3 else ''} " \
        "(before OTP 26.2)"
    return (f"{which} cannot read one dictionary key without the whole "
            "dictionary: a proc_lib process shows proc_lib:init_p/5, "
            "without its label, process_name or proc_lib's "
            "'$initial_call'")


def unnamed_note(result: Any) -> str | None:
    """Once, under a table of processes, the rows left without the names
    in their dictionary (each read within a cap a copy and a budget a
    command: the heap bounds the copy, of the whole dictionary before OTP
    26.2, of the three keys' values after; the cap is the budget's
    there)."""
    unnamed = result.get("unnamed")
    if not unnamed:
        return None
    rows = unnamed["rows"]
    largest, cap = unnamed["largest_heap"], unnamed["per_copy"]
    which = f"{rows:,} row{'s' if rows != 1 else ''} unnamed"
    if largest > cap:
        heaps = (f"their heaps (up to {human_bytes(largest)}) exceed"
                 if rows != 1 else
                 f"its heap ({human_bytes(largest)}) exceeds")
        return (f"{which}: {heaps} what reading a dictionary may cost "
                f"({human_bytes(cap)} a process)")
    return (f"{which}: this command's budget for reading dictionaries "
            f"({human_bytes(unnamed['budget'])}) was spent")


def _name_notes(result: Any) -> list[str]:
    return [n for n in (labels_note(result), unnamed_note(result)) if n]


def bin_leak_text(result: BinLeak, syntax: Syntax) -> str:
    before, after = result["memory_before"], result["memory_after"]
    if result.get("dry_run"):
        return (f"{result['node']}: bin-leak dry run, nothing collected\n"
                f"scanned {result['scanned']:,} processes; "
                f"{result['holders']:,} hold refc binaries.\nA real run "
                f"would ask the node to "
                f"garbage-collect {result['would_collect']:,} of them "
                f"(erlang:garbage_collect/1 on each, largest holders first), "
                f"then count their references again.\n"
                f"binary memory now: "
                f"{human_bytes(result['memory_before']['binary'])} of "
                f"{human_bytes(result['memory_before']['total'])} total")
    lines = [
        f"{result['node']}: refc binary references freed by a garbage "
        "collection (recon:bin_leak)",
        f"scanned {result['scanned']:,} processes; "
        f"{result['holders']:,} held refc binaries; collected "
        f"{result['collected']:,}",
    ]
    for kind in ("total", "binary"):
        drop = before[kind] - after[kind]
        change = (f"freed {human_bytes(drop)}" if drop >= 0
                  else f"grew {human_bytes(-drop)} meanwhile")
        lines.append(f"{kind} memory: {human_bytes(before[kind])} -> "
                     f"{human_bytes(after[kind])} ({change})")
    lines.append("")
    if result["processes"] and not any(p["delta"]
                                       for p in result["processes"]):
        lines.append("no process dropped a refc binary reference when "
                     "collected: nothing held one idle")
    else:
        distinct = any("binary_distinct" in p for p in result["processes"])
        lines.append(table(("pid", "delta",
                            *(("distinct",) if distinct else ()), "name",
                            "current function", "initial call"),
                           process_rows(result["processes"], "delta", syntax),
                           "lrrlll" if distinct else "lrlll", syntax))
        if distinct:
            lines += ["", f"({BIN_LEAK_NOTE})"]
    notes = _name_notes(result)
    return "\n".join(lines + [""] * bool(notes) + [f"({n})" for n in notes])


def proc_count_text(result: ProcCount, syntax: Syntax) -> str:
    attribute = result["attribute"]
    header = (f"{result['node']}: top {len(result['processes']):,} of "
              f"{result['scanned']:,} processes by {attribute}")
    if result["processes"] and not any(p["value"]
                                       for p in result["processes"]):
        # The order of equal values is arbitrary: rows would mislead.
        return (f"{result['node']}: {attribute} is 0 for every one of the "
                f"{result['scanned']:,} processes")
    distinct = attribute == "binary_memory"
    text = header + "\n\n" + table(
        ("pid", heading(attribute), *(("distinct",) if distinct else ()),
         "name", "current function", "initial call"),
        process_rows(result["processes"], "value", syntax, attribute),
        "lrrlll" if distinct else "lrlll", syntax)
    notes = [DISTINCT_NOTE] if distinct else []
    notes += _name_notes(result)
    hint = _inspect_hint(_source(result), result["processes"], syntax)
    if hint and attribute == "message_queue_len" and \
            not result.get("crash_dump"):
        hint += "\n" + _senders_hint(result["node"], result["processes"],
                                     syntax)
    # After a blank line: a table ends at one.
    return (text + ("\n" if notes else "")
            + "".join(f"\n({n})" for n in notes)
            + (f"\n\n{hint}" if hint else ""))


def _source(result: Any) -> str:
    """Where to look closer: the node, or the crash dump read."""
    crash = result.get("crash_dump")
    if crash:
        from beam_probe.files import shell_path

        return shell_path(crash["file"])
    return str(result["node"])


def _inspect_hint(node: str, processes: Sequence[ProcessRow],
                  syntax: Syntax) -> str | None:
    """The step after a ranking: what in its first process (one still
    alive) holds the memory."""
    pid = next((p["pid"] for p in processes if not p.get("exited")), None)
    if pid is None:
        return None
    return (f"look closer: beam-probe inspect {node} '{syntax.code(pid)}' "
            "(what its state, dictionary and mailbox hold)")


def _senders_hint(node: str, processes: Sequence[ProcessRow],
                  syntax: Syntax) -> str:
    """A ranking by mailbox: who fills the first one (senders, issue 40)."""
    pid = next(p["pid"] for p in processes if not p.get("exited"))
    return (f"who fills its mailbox: beam-probe senders {node} "
            f"'{syntax.code(pid)}' (the messages it is sent, by sender; "
            "--by shape: what they are)")


def proc_window_text(result: ProcWindow, syntax: Syntax) -> str:
    attribute = result["attribute"]
    lines = [
        f"{result['node']}: largest increases of {attribute} over "
        f"{result['window_ms']} ms (recon:proc_window)",
        f"scanned {result['scanned_first']:,} processes at the start, "
        f"{result['scanned_last']:,} at the end; "
        f"{result['born_count']:,} born "
        f"and {result['dead_count']:,} dead inside the window, listed apart",
        "",
        table(("pid", "increase", "name", "current function",
               "initial call"),
              process_rows(result["processes"], "delta", syntax, attribute),
              "lrlll", syntax)
        if any(p["delta"] for p in result["processes"]) else
        f"no process's {attribute} changed over the window (an idle node): "
        "nothing to rank",
    ]
    if result["born"]:
        lines += ["", "born inside the window (value at the end, largest "
                      "first):",
                  table(("pid", heading(attribute), "name",
                         "current function", "initial call"),
                        process_rows(result["born"], "value", syntax,
                                     attribute),
                        "lrlll", syntax)]
    if result["dead"]:
        lines += ["", "dead inside the window (value at the start, largest "
                      "first):",
                  table(("pid", heading(attribute)),
                        [(p["pid"], figure(attribute, p["value"]))
                         for p in result["dead"]],
                        "lr", syntax)]
    notes = _name_notes(result)
    return "\n".join(lines + [""] * bool(notes) + [f"({n})" for n in notes])


def _info_value(key: str, value: Any, syntax: Syntax) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int) and key in ("memory", "binary_memory",
                                          "binary_distinct"):
        return f"{value} ({human_bytes(value)})"
    if key == "registered_name" and isinstance(value, str):
        return syntax.name(value) or value
    if isinstance(value, list):
        return ", ".join(syntax.code(str(item)) for item in value) or "[]"
    if isinstance(value, dict):
        return ", ".join(f"{k}={_info_value(k, v, syntax)}"
                         if not isinstance(v, dict)
                         else f"{k}=({_info_value(k, v, syntax)})"
                         for k, v in value.items())
    return syntax.code(str(value))


def proc_info_text(result: ProcInfo, syntax: Syntax) -> str:
    """Grouped key: value lines; the stack one frame per line."""
    lines = [f"{result['node']}: {syntax.code(result['pid'])} (recon:info "
             "groups; no mailbox or dictionary read)"]
    for group, fields in result.items():
        if not isinstance(fields, dict) or group == "crash_dump":
            continue
        lines.append("")
        lines.append(f"{group}:")
        width = max(len(key) for key in fields)
        for key, value in fields.items():
            if key == "current_stacktrace":
                lines.append(f"  {key}:")
                lines.extend(f"    {syntax.code(frame)}" for frame in value)
            else:
                lines.append(f"  {key.ljust(width)}  "
                             f"{_info_value(key, value, syntax)}")
    return "\n".join(lines)


def verdict_text(verdict: Verdict) -> str:
    """alloc's verdict as a sentence, its evidence in numbers."""
    e, kind = verdict["evidence"], verdict["allocator"]
    case = verdict["case"]
    if case == "outside":
        return (f"RSS {human_bytes(e['rss'])} is {human_bytes(e['outside'])}"
                f" above the {human_bytes(e['allocated'])} the allocators "
                "hold: memory outside the emulator's allocators (NIFs, "
                "drivers, the libraries they call)")
    if case == "in_use":
        return (f"in use: {e['usage']:.0%} of the "
                f"{human_bytes(e['allocated'])} the allocators hold is in "
                "live blocks; find the holder (proc-count memory, bin-leak, "
                "ets)")
    figures = (f"{kind}: {human_bytes(e['allocated'])} allocated, "
               f"{human_bytes(e['used'])} used ({e['usage']:.0%}) in "
               f"{e['blocks']:,} blocks over {e['carriers']:,} carriers")
    if case == "fragmentation":
        return (f"fragmentation: {figures}, {e['blocks_per_carrier']:g} "
                "live blocks a carrier keeping it: finding a holder will "
                "not return them")
    return (f"after a peak: {figures}; its blocks held up to "
            f"{human_bytes(e['used_max'])}: carriers are returned as they "
            "empty. Watch whether allocated comes back down (beam-probe "
            "watch); if it stays, it is fragmentation")


def alloc_text(result: AllocReport, syntax: Syntax) -> str:
    rss = result["rss"]
    mseg = result["mseg_cache"]
    lines = [f"{result['node']}: {verdict_text(result['verdict'])}",
             f"erlang:memory() total {human_bytes(result['memory_total'])};"
             f" allocators hold {human_bytes(result['allocated'])}, "
             f"{human_bytes(result['used'])} of it in blocks "
             f"({result['usage']:.0%}); RSS "
             + (human_bytes(rss) if rss is not None else
                "not in a crash dump" if "crash_dump" in result else
                "unknown (not Linux)"),
             "mseg_alloc cache: " + (f"{mseg['hit_rate']:.0%} of "
                                     f"{mseg['calls']} segment requests hit"
                                     if mseg["hit_rate"] is not None
                                     else "no segment requests yet"),
             ""]
    rows = []
    for t in result["types"]:
        mbcs, sbcs = t["mbcs"], t["sbcs"]
        rows.append((t["type"], human_bytes(t["used"]),
                     human_bytes(t["used_max"]),
                     human_bytes(t["allocated"]), f"{t['usage']:.0%}",
                     f"{mbcs['carriers']:,}", f"{sbcs['carriers']:,}",
                     f"{mbcs['blocks'] + sbcs['blocks']:,}",
                     human_bytes(mbcs["average_block"]),
                     human_bytes(sbcs["average_block"])))
    # "peak used": the most its blocks ever held (the sum of each
    # instance's peak, so at least "used"); a block column is the average
    # block now.
    lines.append(table(("allocator", "used", "peak used", "allocated",
                        "usage", "mbcs", "sbcs", "blocks", "mbc block",
                        "sbc block"), rows, "lrrrrrrrrr", syntax))
    if result["raw"]:
        lines.append(f"\nfull allocator data written to {result['raw']}")
    return "\n".join(lines)


def ets_text(result: EtsReport, syntax: Syntax) -> str:
    head = (f"{result['node']}: the {len(result['largest'])} largest of "
            f"{result['tables']} ETS tables by {result['sort']} (all tables "
            f"{human_bytes(result['total_memory'])})")
    rows = [(t["name"], t["id"], t["owner"],
             syntax.name(t["owner_name"]) or t["owner_group"],
             f"{t['size']:,}",
             human_bytes(t["memory"]), t["type"], t["protection"])
            for t in result["largest"]]
    return head + "\n" + table(("table", "id", "owner", "owner is",
                                "objects", "memory", "type", "access"),
                               rows, "llllrrll", syntax)


class EveryProcess:
    """proc-count --all as text, drawn as its chunks arrive: a title, the
    headers, each chunk's rows, then a footer."""

    def __init__(self, head: dict[Any, Any], syntax: Syntax) -> None:
        self.head, self.syntax = head, syntax
        distinct = head["attribute"] == "binary_memory"
        self.align = "lrrlll" if distinct else "lrlll"
        self.headers = ("pid", heading(head["attribute"]),
                        *(("distinct",) if distinct else ()), "name",
                        "current function", "initial call")

    def title(self) -> str:
        return (f"{self.head['node']}: every process by "
                f"{self.head['attribute']}, largest first")

    def rows(self, chunk: list[ProcessRow]) -> list[tuple[str, ...]]:
        return process_rows(chunk, "value", self.syntax,
                            self.head["attribute"])

    def footer(self, summary: dict[Any, Any]) -> str:
        note = unnamed_note(summary)
        return f"{summary['sent']:,} of {summary['scanned']:,} processes" + \
            (f"\n({note})" if note else "")


__all__ = ["EveryProcess", "alloc_text", "bin_leak_text", "ets_text", "memory_text",
           "ping_text", "proc_count_text", "proc_info_text",
           "proc_window_text", "process_rows", "verdict_text"]
