"""trace-gc as text: a header, one line per collection as it happens (as
Node's --trace-gc prints one), and a summary per process."""

from __future__ import annotations

from typing import Any

from beam_probe.probes.trace_gc import (VERDICT_MIN, VERDICT_WINDOW,
                                        skipped_why)
from beam_probe.text.syntax import Syntax
from beam_probe.text.tables import cell_text, human_bytes, table

# "bin vheap": the binary virtual heap, the collector's count of the refc
# binaries a process references (it decides when to collect), not
# proc-info's binary_memory (what those binaries weigh).
_COLUMNS = ("time s", "pid", "process", "kind", "heap before -> after",
            "old heap", "bin vheap", "freed", "took")
# The pid column holds an Elixir pid too (#PID<0.123.0>).
_WIDTHS = (10, 16, 28, 5, 24, 22, 11, 11, 9)


def _row(cells: tuple[Any, ...], syntax: Syntax) -> str:
    # Each cell as printed (an Elixir pid is longer) before it is padded.
    return "  ".join(cell_text(cell, syntax).rjust(width) if i in (0, 6, 7, 8)
                     else cell_text(cell, syntax).ljust(width)
                     for i, (cell, width) in enumerate(zip(cells, _WIDTHS))
                     ).rstrip()


def _who(item: dict[Any, Any], syntax: Syntax) -> str:
    """Its registered name, else its label or process_name, else the
    group of what made it."""
    return syntax.name(item["name"]) or (
        syntax.code(item["label"]) if item.get("label") else "") or \
        syntax.code(item["group"])


def line(sample: dict[Any, Any], syntax: Syntax) -> str:
    """The header sample, or one collection."""
    if "tracing" in sample:
        traced = ", ".join(f"{syntax.code(w['pid'])} {_who(w, syntax)}"
                           for w in sample["tracing"])
        how = ("a trace session of its own" if sample["mode"] == "session"
               else "erlang:trace/3")
        lines = [f"{sample['node']}: tracing the garbage collections of "
                 f"{len(sample['tracing'])} process"
                 f"{'es' if len(sample['tracing']) != 1 else ''} ({how}) "
                 f"for {sample['duration']:g} s or "
                 f"{sample['max_events']} collections: {traced}"]
        lines += [f"skipped {syntax.code(s['pid'])}: "
                  f"{skipped_why(s, sample['mode'])}"
                  for s in sample["skipped"]]
        lines += [_row(_COLUMNS, syntax),
                  _row(tuple("-" * w for w in _WIDTHS), syntax)]
        return "\n".join(lines)
    return _row((
        f"{sample['time']:.6f}", sample["pid"], _who(sample, syntax),
        sample["type"],
        f"{human_bytes(sample['heap_before'])} -> "
        f"{human_bytes(sample['heap_after'])}",
        f"{human_bytes(sample['old_heap_before'])} -> "
        f"{human_bytes(sample['old_heap_after'])}",
        human_bytes(sample["binary_after"]), human_bytes(sample["reclaimed"]),
        f"{sample['duration_us']:g} us"), syntax)


def summary_text(summary: dict[Any, Any], syntax: Syntax) -> str:
    # A blank line first: the summary follows the lines of the trace.
    head = (f"\n{summary['collections']} collections traced on "
            f"{summary['node']} (ended by {summary['ended_by']})")
    if summary.get("dropped_messages"):
        head += (f"; {summary['dropped_messages']} trace messages dropped "
                 "on the node: they came faster than beam-probe took them")
    if summary["ended_by"] == "overload":
        head += ("; the trace ended early: the processes collected faster "
                 "than the node's tracer could forward (exit 14)")
    if not summary["processes"]:
        return head + "; none of the traced processes collected"
    rows = [(p["pid"], _who(p, syntax), f"{p['minor']:,}",
             f"{p['major']:,}",
             human_bytes(p["reclaimed"]), f"{p['time_us'] / 1000:.2f} ms",
             human_bytes(p["heap_after_last"]), f"{p['longest_rise']:,}",
             _verdict(p))
            for p in summary["processes"]]
    return head + "\n" + table(
        ("pid", "process", "minor", "major", "freed", "gc time",
         "heap after last", "rises", "verdict"), rows, "llrrrrrrl",
        syntax) + (
        f"\nverdict: the heap left by the last {VERDICT_WINDOW} major "
        f"collections (at least {VERDICT_MIN}) rising beyond its own "
        "spread (watch's trend rule, counted in collections); rises: the "
        "longest run of major collections each leaving a larger heap, "
        "shown, not judged on")


def _verdict(process: dict[Any, Any]) -> str:
    trend = process.get("trend")
    if trend:
        return (f"LEAK SUSPECTED: +{human_bytes(trend['growth'])} over "
                f"{trend['majors']} majors")
    if not process.get("judged"):
        return (f"too few majors to judge ({process['major']} of "
                f"{VERDICT_MIN})")
    return "steady"


__all__ = ["line", "summary_text"]
