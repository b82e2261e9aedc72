"""Turning probe results into text: tables, JSON, human units.

Tables are drawn here rather than with tabulate: tabulate 0.10 costs ~39 ms
to import on our machines (30 ms of it importlib.metadata), which alone would
break the start-up budget of a one-query run (see docs/CONTRIBUTING.md, "Why no
tabulate"). Our tables are plain aligned columns, which this does in a few
lines.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Sequence

from beam_probe.text import syntax

if TYPE_CHECKING:
    from beam_probe.probes.results import (AllocReport, BinLeak, EtsReport,
                                 MemoryResult, Ping, ProcCount, ProcessRow,
                                 ProcInfo, ProcWindow)

_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")

# Control characters (C0 but newline, DEL, C1) and the Unicode bidi
# overrides: a registered name, node name or EPMD name can hold any of
# them, and raw they would move the cursor, recolour or rewrite the
# operator's terminal, or reorder what it shows.
_CONTROL = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f"
                      "\u202a-\u202e\u2066-\u2069]")


def printable(text: str) -> str:
    """``text`` with every control character written as an escape (\\x1b,
    \\u202e); newlines are kept."""
    return _CONTROL.sub(lambda m: ascii(m.group(0))[1:-1], text)


def human_bytes(n: int | float) -> str:
    """1536 -> '1.5 KiB'; binary units, as erlang:memory() counts bytes."""
    value = float(n)
    sign = "-" if value < 0 else ""
    value = abs(value)
    for unit in _UNITS:
        if value < 1024 or unit == _UNITS[-1]:
            if unit == "B":
                return f"{sign}{int(value)} B"
            return f"{sign}{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]],
          align: str = "") -> str:
    """Columns separated by two spaces under a dashed rule.

    ``align`` holds one letter per column, ``l`` or ``r``; numbers default to
    right-aligned, everything else to left.
    """
    rows = [["" if cell is None else cell for cell in row] for row in rows]
    ncols = len(headers)
    if not align:
        align = "".join(
            "r" if rows and all(isinstance(r[i], (int, float)) for r in rows)
            else "l" for i in range(ncols))
    cells = [[str(h) for h in headers]] + [[cell_text(c) for c in r]
                                           for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(ncols)]

    def line(row: Sequence[str]) -> str:
        parts = [cell.rjust(w) if a == "r" else cell.ljust(w)
                 for cell, w, a in zip(row, widths, align)]
        return "  ".join(parts).rstrip()

    out = [line(cells[0]), "  ".join("-" * w for w in widths)]
    out.extend(line(r) for r in cells[1:])
    return "\n".join(out)


def stream_table(headers: Sequence[str], chunks: Iterable[list[Sequence[Any]]],
                 align: str) -> Iterator[str]:
    """A table whose rows arrive in chunks, one line at a time: the column
    widths are those of the header and the first chunk (later cells that
    are wider push their line out rather than hold every row back)."""
    widths: list[int] | None = None
    for chunk in chunks:
        cells = [["" if c is None else cell_text(c) for c in row]
                 for row in chunk]
        if widths is None:
            widths = [max([len(h)] + [len(r[i]) for r in cells])
                      for i, h in enumerate(headers)]
            yield _line(headers, widths, align)
            yield "  ".join("-" * w for w in widths)
        for row in cells:
            yield _line(row, widths, align)
    if widths is None:
        yield _line(headers, [len(h) for h in headers], align)


def cell_text(value: Any) -> str:
    """A cell as it will print, so that widths are those of what is seen:
    in the node's syntax (an Elixir pid is 4 characters longer than
    Erlang's), control characters escaped."""
    return printable(syntax.text(str(value)))


def _line(row: Sequence[str], widths: Sequence[int], align: str) -> str:
    return "  ".join(cell.rjust(w) if a == "r" else cell.ljust(w)
                     for cell, w, a in zip(row, widths, align)).rstrip()


def to_json(value: Any) -> str:
    import json

    return json.dumps(value, indent=2, default=str)


def ping_text(result: Ping) -> str:
    return (f"{result['node']} is up: OTP {result['otp_release']}, "
            f"ERTS {result['erts_version']}, round trip "
            f"{result['rtt_ms']:.3f} ms")


def memory_text(result: MemoryResult) -> str:
    rows = [(key, value, human_bytes(value))
            for key, value in result["memory"].items()]
    return f"{result['node']}: erlang:memory()\n" + table(
        ("type", "bytes", "size"), rows, "lrr")


def process_rows(processes: list[ProcessRow], key: str) -> list[tuple]:
    """Table rows: pid, the number, name, current function, initial call;
    a process that exited before it could be described says so."""
    return [(p["pid"], p[key],
             "(exited)" if p.get("exited") else syntax.name(p["name"]) or "",
             p["current_function"] or "", p["initial_call"] or "")
            for p in processes]


def bin_leak_text(result: BinLeak) -> str:
    before, after = result["memory_before"], result["memory_after"]
    if result.get("dry_run"):
        return (f"{result['node']}: bin-leak dry run, nothing collected\n"
                f"scanned {result['scanned']} processes; {result['holders']} "
                f"hold refc binaries.\nA real run would ask the node to "
                f"garbage-collect {result['would_collect']} of them "
                f"(erlang:garbage_collect/1 on each, largest holders first), "
                f"then count their references again.\n"
                f"binary memory now: "
                f"{human_bytes(result['memory_before']['binary'])} of "
                f"{human_bytes(result['memory_before']['total'])} total")
    lines = [
        f"{result['node']}: refc binary references freed by a garbage "
        "collection (recon:bin_leak)",
        f"scanned {result['scanned']} processes; {result['holders']} held "
        f"refc binaries; collected {result['collected']}",
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
        lines.append(table(("pid", "delta", "name", "current function",
                            "initial call"),
                           process_rows(result["processes"], "delta"),
                           "lrlll"))
    return "\n".join(lines)


def proc_count_text(result: ProcCount) -> str:
    attribute = result["attribute"]
    header = (f"{result['node']}: top {len(result['processes'])} of "
              f"{result['scanned']} processes by {attribute}")
    if result["processes"] and not any(p["value"]
                                       for p in result["processes"]):
        # The order of equal values is arbitrary: rows would mislead.
        return (f"{result['node']}: {attribute} is 0 for every one of the "
                f"{result['scanned']} processes")
    return header + "\n\n" + table(
        ("pid", attribute, "name", "current function", "initial call"),
        process_rows(result["processes"], "value"), "lrlll")


def proc_window_text(result: ProcWindow) -> str:
    attribute = result["attribute"]
    lines = [
        f"{result['node']}: largest increases of {attribute} over "
        f"{result['window_ms']} ms (recon:proc_window)",
        f"scanned {result['scanned_first']} processes at the start, "
        f"{result['scanned_last']} at the end; {result['born_count']} born "
        f"and {result['dead_count']} dead inside the window, listed apart",
        "",
        table(("pid", "increase", "name", "current function",
               "initial call"),
              process_rows(result["processes"], "delta"), "lrlll")
        if any(p["delta"] for p in result["processes"]) else
        f"no process's {attribute} changed over the window (an idle node): "
        "nothing to rank",
    ]
    if result["born"]:
        lines += ["", "born inside the window (value at the end, largest "
                      "first):",
                  table(("pid", attribute, "name", "current function",
                         "initial call"),
                        process_rows(result["born"], "value"), "lrlll")]
    if result["dead"]:
        lines += ["", "dead inside the window (value at the start, largest "
                      "first):",
                  table(("pid", attribute),
                        [(p["pid"], p["value"]) for p in result["dead"]],
                        "lr")]
    return "\n".join(lines)


def _info_value(key: str, value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int) and key in ("memory", "binary_memory"):
        return f"{value} ({human_bytes(value)})"
    if key == "registered_name" and isinstance(value, str):
        return syntax.name(value) or value
    if isinstance(value, list):
        return ", ".join(str(item) for item in value) or "[]"
    if isinstance(value, dict):
        return ", ".join(f"{k}={_info_value(k, v)}" if not isinstance(v, dict)
                         else f"{k}=({_info_value(k, v)})"
                         for k, v in value.items())
    return str(value)


def proc_info_text(result: ProcInfo) -> str:
    """Grouped key: value lines; the stack one frame per line."""
    lines = [f"{result['node']}: {result['pid']} (recon:info groups; no "
             "mailbox or dictionary read)"]
    for group, fields in result.items():
        if not isinstance(fields, dict):
            continue
        lines.append("")
        lines.append(f"{group}:")
        width = max(len(key) for key in fields)
        for key, value in fields.items():
            if key == "current_stacktrace":
                lines.append(f"  {key}:")
                lines.extend(f"    {frame}" for frame in value)
            else:
                lines.append(f"  {key.ljust(width)}  "
                             f"{_info_value(key, value)}")
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


def alloc_text(result: AllocReport) -> str:
    rss = result["rss"]
    mseg = result["mseg_cache"]
    lines = [f"{result['node']}: {verdict_text(result['verdict'])}",
             f"erlang:memory() total {human_bytes(result['memory_total'])};"
             f" allocators hold {human_bytes(result['allocated'])}, "
             f"{human_bytes(result['used'])} of it in blocks "
             f"({result['usage']:.0%}); RSS "
             + (human_bytes(rss) if rss is not None else "unknown (not "
                "Linux)"),
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
                     mbcs["carriers"], sbcs["carriers"],
                     f"{mbcs['blocks'] + sbcs['blocks']:,}",
                     human_bytes(mbcs["average_block"]),
                     human_bytes(sbcs["average_block"])))
    # "peak used": the most its blocks ever held (the sum of each
    # instance's peak, so at least "used"); a block column is the average
    # block now.
    lines.append(table(("allocator", "used", "peak used", "allocated",
                        "usage", "mbcs", "sbcs", "blocks", "mbc block",
                        "sbc block"), rows, "lrrrrrrrrr"))
    if result["raw"]:
        lines.append(f"\nfull allocator data written to {result['raw']}")
    return "\n".join(lines)


def ets_text(result: EtsReport) -> str:
    head = (f"{result['node']}: the {len(result['largest'])} largest of "
            f"{result['tables']} ETS tables by {result['sort']} (all tables "
            f"{human_bytes(result['total_memory'])})")
    rows = [(t["name"], t["id"], t["owner"],
             syntax.name(t["owner_name"]) or t["owner_group"], t["size"],
             human_bytes(t["memory"]), t["type"], t["protection"])
            for t in result["largest"]]
    return head + "\n" + table(("table", "id", "owner", "owner is",
                                "objects", "memory", "type", "access"),
                               rows, "llllrrll")
