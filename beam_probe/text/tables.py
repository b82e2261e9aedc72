"""Tables, JSON and human units: what every text is made of.

Tables are drawn here rather than with tabulate: tabulate 0.10 costs ~39 ms
to import on our machines (30 ms of it importlib.metadata), which alone would
break the start-up budget of a one-query run (see docs/CONTRIBUTING.md, "Why no
tabulate"). Our tables are plain aligned columns, which this does in a few
lines.
"""

from __future__ import annotations

import re
from typing import Any, Iterable, Iterator, Sequence

from beam_probe.text.syntax import ERLANG, Syntax

_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")

# Control characters (C0 but newline, DEL, C1) and every Unicode bidi
# control (the marks LRM, RLM and ALM, the embeddings and overrides, the
# isolates): a registered name, node name or EPMD name can hold any of
# them, and raw they would move the cursor, recolour or rewrite the
# operator's terminal, or reorder what it shows (a mark alone can reorder
# a row's cells, Trojan Source style: issue 37). A wide character still
# counts as one column in a table: left alone, it misaligns, never hides.
_BIDI = "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
_CONTROL = re.compile(f"[\x00-\x09\x0b-\x1f\x7f-\x9f{_BIDI}]")


# In a cell, line breaks too: raw, a newline in a registered name started
# a row of its own in a table, a forged one (issue 37).
_CONTROL_IN_CELL = re.compile(f"[\x00-\x1f\x7f-\x9f\u2028\u2029{_BIDI}]")


def _escape(match: re.Match[str]) -> str:
    return ascii(match.group(0))[1:-1]


def printable(text: str) -> str:
    """``text`` with every control character written as an escape (\\x1b,
    \\u202e); newlines are kept."""
    return _CONTROL.sub(_escape, text)


def one_line(text: str) -> str:
    """``text`` with every control character escaped, line breaks too
    (\\n, as Erlang writes the atom 'a\\nb'): a cell of a table, a name."""
    return _CONTROL_IN_CELL.sub(_escape, text)


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


def human_duration(seconds: float) -> str:
    """125 -> '2 m 5 s'; 7500 -> '2 h 5 m'."""
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours} h {minutes} m"
    if minutes:
        return f"{minutes} m {secs} s"
    return f"{secs} s"


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]],
          align: str = "", syntax: Syntax = ERLANG) -> str:
    """Columns separated by two spaces under a dashed rule, each cell in
    ``syntax`` before the widths are measured.

    ``align`` holds one letter per column, ``l`` or ``r``; numbers default to
    right-aligned, everything else to left.
    """
    rows = [["" if cell is None else cell for cell in row] for row in rows]
    ncols = len(headers)
    if not align:
        align = "".join(
            "r" if rows and all(isinstance(r[i], (int, float)) for r in rows)
            else "l" for i in range(ncols))
    cells = [[str(h) for h in headers]] + [[cell_text(c, syntax) for c in r]
                                           for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(ncols)]

    def line(row: Sequence[str]) -> str:
        parts = [cell.rjust(w) if a == "r" else cell.ljust(w)
                 for cell, w, a in zip(row, widths, align)]
        return "  ".join(parts).rstrip()

    out = [line(cells[0]), "  ".join("-" * w for w in widths)]
    out.extend(line(r) for r in cells[1:])
    return "\n".join(out)


def stream_table(headers: Sequence[str],
                 chunks: Iterable[list[Sequence[Any]]], align: str,
                 syntax: Syntax = ERLANG) -> Iterator[str]:
    """A table whose rows arrive in chunks, one line at a time: the column
    widths are those of the header and the first chunk (later cells that
    are wider push their line out rather than hold every row back)."""
    widths: list[int] | None = None
    for chunk in chunks:
        cells = [["" if c is None else cell_text(c, syntax) for c in row]
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


def cell_text(value: Any, syntax: Syntax = ERLANG) -> str:
    """A cell as it will print, so that widths are those of what is seen:
    in the node's syntax (an Elixir pid is 4 characters longer than
    Erlang's), control characters escaped, newlines too (one_line)."""
    return one_line(syntax.code(str(value)))


def _line(row: Sequence[str], widths: Sequence[int], align: str) -> str:
    return "  ".join(cell.rjust(w) if a == "r" else cell.ljust(w)
                     for cell, w, a in zip(row, widths, align)).rstrip()


def to_json(value: Any) -> str:
    import json

    return json.dumps(value, indent=2, default=str)


__all__ = ["cell_text", "human_bytes", "human_duration", "one_line",
           "printable", "stream_table", "table", "to_json"]
