"""top's words: the header above the processes, their table, and one
frame as plain text (--once, or output that is not a terminal). The live
view (beam_probe/live/) draws the same cells, so a row reads the same in
both."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from beam_probe.text.node import unnamed_note
from beam_probe.text.syntax import Syntax
from beam_probe.text.tables import (human_bytes, human_duration, one_line,
                                    table)

if TYPE_CHECKING:
    from beam_probe.probes.results import TopFrame, TopRow, TopView

# Column titles by sort key. BINARY (binary_memory) is each binary
# once: the node's pass counts it so (beam_probe_top.erl), not recon.
TITLES = {"memory": "MEMORY", "binary_memory": "BINARY",
          "reductions": "REDS", "message_queue_len": "MSGQ"}
# The kinds of erlang:memory() drawn as bars, each a share of the total.
BAR_KINDS = ("processes", "binary", "ets", "code", "atom")
BAR_WIDTH = 10
# The NAME column's widest cell: a registered name may be 255 characters
# (an atom's limit), and one of 200 pushed every figure off the screen,
# in the view even after its process was gone (issue 37). Erlang's own
# names are under 30 (rabbit_amqqueue_process 24, an Elixir module's
# few dotted words); a longer one is cut, its end marked.
NAME_WIDTH = 40


def uptime(seconds: float) -> str:
    """3 d 4 h past a day; else as every duration is written."""
    days, rest = divmod(int(seconds), 86400)
    return f"{days} d {rest // 3600} h" if days else human_duration(seconds)


def count(n: int | float | None) -> str:
    """1,234,567 -> 1.2 M; 12,345 -> 12.3 k; None -> -."""
    if n is None:
        return "-"
    for size, unit in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(n) >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n:g}" if isinstance(n, float) else str(n)


def bar(part: int, whole: int, width: int = BAR_WIDTH) -> str:
    # Within the bar whatever the figures: a kind past the total (a node
    # never sends one, a crafted reply did) made 2^63 / 1 an
    # OverflowError, or a bar of 10^10 characters.
    filled = min(width, max(0, round(width * min(part, whole) / whole))) \
        if whole > 0 else 0
    return "█" * filled + "·" * (width - filled)


def node_line(frame: TopFrame) -> str:
    h = frame["header"]
    return (f"{frame['node']}  OTP {h['otp_release']}  up "
            f"{uptime(h['uptime_s'])}  schedulers {h['schedulers_online']}")


def memory_lines(frame: TopFrame) -> list[str]:
    """The total, then each kind as a bar of its share of it."""
    memory = frame["header"]["memory"]
    total = memory.get("total", 0)
    shown = [f"{kind} {bar(memory[kind], total)} "
             f"{human_bytes(memory[kind])}"
             for kind in BAR_KINDS if kind in memory]
    return [f"memory {human_bytes(total)}   " + "   ".join(shown[:2]),
            "   ".join(shown[2:])]


def counts_lines(frame: TopFrame) -> list[str]:
    h = frame["header"]

    def of(name: str, used: int, limit: int) -> str:
        return f"{name} {used:,}/{limit:,}"

    return ["   ".join((
                of("processes", h["process_count"], h["process_limit"]),
                of("ports", h["port_count"], h["port_limit"]),
                of("atoms", h["atom_count"], h["atom_limit"]),
                f"ets {h['ets_count']:,}")),
            "   ".join((
                f"run queue {h['run_queue']}",
                f"reductions/s {count(h['reductions_per_s'])}",
                f"GC/s {count(h['gcs_per_s'])}",
                "reclaimed/s " + (human_bytes(h["reclaimed_per_s"])
                                  if h["reclaimed_per_s"] is not None
                                  else "-")))]


def refresh_line(view: TopView, paused: bool = False) -> str:
    """The interval (and why it stretched), the sort, the filter."""
    parts = [f"sorted by {view['sort']}"]
    stretched = view["stretched"]
    if paused:
        parts.append("PAUSED (p resumes)")
    elif stretched:
        parts.append(f"refresh every {stretched:g} s, stretched from "
                     f"{view['interval']:g} s: a pass takes over a quarter "
                     "of it")
    else:
        parts.append(f"refresh every {view['interval']:g} s")
    if view["filter"]:
        matched = sum(f["matched"] for f in view["frames"])
        parts.append(f"filter {view['filter']!r}: {matched:,} processes")
    if view["frames"] and view["sort"] == "reductions" and all(
            f["window_s"] is None for f in view["frames"]):
        parts.append("reductions: from the next refresh")
    return "  ".join(parts)


def down_lines(view: TopView) -> list[str]:
    return [f"DOWN since {time.strftime('%H:%M:%S', time.localtime(d['since']))}"
            f": {d['node']}: {d['error']} (last data kept; reconnecting)"
            for d in view["down"]]


def header_lines(view: TopView, paused: bool = False) -> list[str]:
    """The lines above the table: a node's figures (a line a node when
    a cluster shows all), who is down, the refresh."""
    frames = view["frames"]
    lines: list[str] = []
    if len(frames) == 1:
        frame = frames[0]
        lines += [node_line(frame), *memory_lines(frame),
                  *counts_lines(frame)]
    else:
        for frame in frames:
            h = frame["header"]
            lines.append(
                f"{frame['node']}  OTP {h['otp_release']}  up "
                f"{uptime(h['uptime_s'])}  memory "
                f"{human_bytes(h['memory'].get('total', 0))}  processes "
                f"{h['process_count']:,}  run queue {h['run_queue']}  "
                f"reductions/s {count(h['reductions_per_s'])}")
    lines += down_lines(view)
    lines.append(refresh_line(view, paused))
    return [one_line(line) for line in lines]


def name_cell(row: TopRow, syntax: Syntax) -> str:
    """Its registered name, its label, else what made it: on one line,
    at most NAME_WIDTH characters. A name with a control character in
    it is written as Erlang writes the atom: quoted, escaped ('a\\nb')."""
    if row["exited"]:
        return "(exited)"
    if row["name"]:
        name = row["name"]
        shown = syntax.name(name) or name
        if not syntax.elixir and one_line(name) != name:
            shown = "'{}'".format(name.replace("\\", "\\\\")
                                  .replace("'", "\\'"))
        return cut(one_line(shown), NAME_WIDTH)
    if row["label"]:
        return cut_middle(one_line(syntax.code(row["label"])), NAME_WIDTH)
    return cut(one_line(syntax.code(row["initial_call"] or "")), NAME_WIDTH)


def cut_middle(text: str, width: int) -> str:
    """A label in ``width`` characters: its start, "…", and its end. A
    process_name says what kind first and which one last
    ({rabbit_amqqueue_process,{resource,<<"/">>,queue,<<"q1">>}}, 60
    characters and more): cut at its end, every queue read the same."""
    if len(text) <= width:
        return text
    head = width // 3
    return text[:head] + "…" + text[len(text) - (width - head - 1):]


def cut(text: str, width: int) -> str:
    """``text``, or its start and "…" in ``width`` characters."""
    return text if len(text) <= width else text[:width - 1] + "…"


def columns(view: TopView) -> list[str]:
    shown = ["PID"] + (["NODE"] if _many(view) else []) + ["NAME"]
    for key, title in TITLES.items():
        shown.append(title + ("▼" if key == view["sort"] else ""))
    return shown + ["CURRENT FUNCTION"]


def _many(view: TopView) -> bool:
    return len(view["nodes"]) > 1 and view["focus"] is None


def cells(view: TopView, row: TopRow, syntax: Syntax) -> list[str]:
    """One row's cells, as the table and the live view show them."""
    out = [syntax.code(row["pid"])]
    if _many(view):
        out.append(row.get("node", ""))
    out.append(name_cell(row, syntax))
    out += [human_bytes(row["memory"]), human_bytes(row["binary_memory"]),
            # A count, with separators, as every table writes one; the
            # header's rates are the ones shortened (count()).
            "-" if row["reductions"] is None else f"{row['reductions']:,}",
            f"{row['message_queue_len']:,}",
            syntax.code(row["current_function"] or "")]
    return [one_line(cell) for cell in out]


def rows(view: TopView) -> list[TopRow]:
    """The rows to show: one node's, or every node's ranked together."""
    from beam_probe.probes.top import merged

    frames = view["frames"]
    if len(frames) == 1:
        return list(frames[0]["processes"])
    n = max((len(f["processes"]) for f in frames), default=0)
    return merged(frames, view["sort"], n)


def frame_text(view: TopView, syntax: Syntax) -> str:
    """One frame as text (top -b -n 1): the header, then the table."""
    lines = header_lines(view)
    shown = rows(view)
    if not view["frames"]:
        return "\n".join(lines + ["no node answered"])
    body = table(columns(view), [cells(view, row, syntax) for row in shown],
                 align(view))
    return "\n".join(lines + ["", body] + unnamed_lines(view))


def unnamed_lines(view: TopView) -> list[str]:
    """Under the table, each node's rows left without the names in their
    dictionary (the cap or the budget: proc-count's note)."""
    out = []
    for frame in view["frames"]:
        note = unnamed_note(frame)
        if note:
            out.append(f"({frame['node']}: {note})" if _many(view)
                       else f"({note})")
    return [""] * bool(out) + out


def align(view: TopView) -> str:
    """l or r for each column: the figures to the right."""
    return "l" + ("l" if _many(view) else "") + "lrrrrl"


def help_text() -> str:
    return "\n".join((
        "Keys",
        "  m  sort by memory            b  sort by binary memory",
        "  r  sort by reductions in the last interval",
        "  l  sort by message queue length",
        "  ↑ ↓ and Enter  open a process (proc-info, inspect)",
        "  e  the largest ETS tables    a  allocators",
        "  /  filter by name, applied as you type from 2 characters",
        "     (Enter closes the field, Escape clears the filter)",
        "  n  choose a node (--cluster)  p  pause / resume",
        "  ?  this help                 q  quit",
        "",
        "Each refresh is one pass over the node's processes, made on the",
        "node by a process of ours that ends when top does; only the rows",
        "shown cross. BINARY is the refc binary bytes a process holds,",
        "each binary once (recon's binary_memory counts one a reference:",
        "proc-count binary_memory shows both). Reductions are those done",
        "since the last refresh; answering top's reads costs a process",
        "about one each (a row shown is read three times a refresh), so an",
        "idle one shows a few."))



__all__ = ["NAME_WIDTH", "TITLES", "align", "cells", "columns", "cut",
           "frame_text", "header_lines", "help_text", "name_cell", "rows"]
