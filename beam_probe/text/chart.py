"""A line chart drawn with Unicode braille characters, for a terminal.

Each character cell holds 2 x 4 dots (U+2800-U+28FF), so a chart of 60 x 12
cells has 120 x 48 points of resolution. Several series share one chart;
where two cross, the cell takes the colour of the one drawn last. A gap in
a series (None: the node was down) breaks its line. Pure: lists in, lines
of text out; nothing to import (plotext would cost ~130 ms at start-up).
"""

from __future__ import annotations

import time
from typing import Any, Callable, Sequence

BRAILLE = 0x2800
# The dot bit of each position in a cell: DOTS[column][row].
DOTS = ((0x01, 0x02, 0x04, 0x40), (0x08, 0x10, 0x20, 0x80))
# ANSI colours, one per series, chosen to be told apart on dark and light
# backgrounds: yellow, cyan, magenta, green, blue, red.
COLOURS = ("33", "36", "35", "32", "34", "31")
# A glyph per series too, on its line and in the legend: without colour
# (NO_COLOR, a dumb terminal, a colour-blind reader) the lines are told
# apart by these.
MARKS = ("●", "■", "▲", "◆", "○", "□")
# Marks along a line: at its last point, and about this many columns apart.
MARK_EVERY = 16

Points = Sequence[tuple[float, "float | None"]]


def _segment(x0: int, y0: int, x1: int, y1: int
             ) -> list[tuple[int, int]]:
    """The dots of a straight line from (x0, y0) to (x1, y1)."""
    dx, dy = abs(x1 - x0), -abs(y1 - y0)
    sx, sy = (1 if x0 < x1 else -1), (1 if y0 < y1 else -1)
    error, dots = dx + dy, []
    while True:
        dots.append((x0, y0))
        if x0 == x1 and y0 == y1:
            return dots
        doubled = 2 * error
        if doubled >= dy:
            error += dy
            x0 += sx
        if doubled <= dx:
            error += dx
            y0 += sy


def _bounds(series: Sequence[tuple[str, Points]]
            ) -> tuple[float, float, float, float] | None:
    xs = [x for _, points in series for x, y in points if y is not None]
    ys = [y for _, points in series for _, y in points if y is not None]
    if not xs:
        return None
    low, high = min(ys), max(ys)
    if high == low:  # a flat line sits in the middle
        pad = abs(high) * 0.05 or 1.0
        low, high = low - pad, high + pad
    return min(xs), max(xs), low, high


def _thin(points: Points, x_low: float, x_high: float, dots: int
          ) -> Points:
    """One point per dot column, the last in it: the line through them
    draws what a line through every point would at this width, at a
    fraction of the cost (a frame of 4 x 2,000 points took ~9 ms before,
    measured). A gap (None) is kept wherever it falls."""
    if len(points) <= dots or x_high <= x_low:
        return points
    scale = (dots - 1) / (x_high - x_low)
    kept: dict[Any, Any] = {}
    for point in points:
        column = int((point[0] - x_low) * scale)
        if point[1] is None:
            # Its own key, after its column's point: the line breaks here.
            kept[(column, 1)] = point
        else:
            kept.pop((column, 0), None)
            kept[(column, 0)] = point
    return list(kept.values())


def clock(epoch: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(epoch))


def line_chart(series: Sequence[tuple[str, Points]], width: int,
               height: int, label: Callable[[float], str] = "{:g}".format,
               colour: bool = False,
               x_label: Callable[[float], str] = clock) -> list[str]:
    """The chart of ``series`` (name, [(x, y or None)]) in ``width`` x
    ``height`` character cells, axis labels and legend included: y labels
    by ``label``, x labels by ``x_label``."""
    bounds = _bounds(series)
    if bounds is None or width < 20 or height < 4:
        return ["(no data yet)" if bounds is None else "(too small to draw)"]
    x_low, x_high, y_low, y_high = bounds
    labels = [label(y_high), label((y_low + y_high) / 2), label(y_low)]
    margin = max(len(text) for text in labels) + 1
    columns, rows = width - margin - 1, height - 2  # x labels, legend
    if columns < 10 or rows < 2:
        return ["(too small to draw)"]
    dots_x, dots_y = columns * 2, rows * 4
    cells = [[0] * columns for _ in range(rows)]
    owner = [[-1] * columns for _ in range(rows)]

    def place(x: float, y: float) -> tuple[int, int]:
        fx = (x - x_low) / (x_high - x_low) if x_high > x_low else 1.0
        fy = (y - y_low) / (y_high - y_low)
        return (min(dots_x - 1, int(fx * (dots_x - 1) + 0.5)),
                min(dots_y - 1, int((1 - fy) * (dots_y - 1) + 0.5)))

    def span(column: int, low: int, high: int, index: int) -> None:
        """Dots low..high of dot column ``column``, a cell at a time."""
        row_cells, bits = column // 2, DOTS[column % 2]
        for row in range(low // 4, high // 4 + 1):
            top, bottom = max(low, 4 * row), min(high, 4 * row + 3)
            mask = 0
            for dot in range(top - 4 * row, bottom - 4 * row + 1):
                mask |= bits[dot]
            cells[row][row_cells] |= mask
            owner[row][row_cells] = index

    marks: dict[tuple[int, int], int] = {}
    for index, (_, points) in enumerate(series):
        last = None
        placed: list[tuple[int, int]] = []
        for x, y in _thin(points, x_low, x_high, dots_x):
            if y is None:
                last = None
                continue
            here = place(x, y)
            if last is None or abs(here[0] - last[0]) <= 1:
                # Steep or in place: a vertical run in this column.
                low, high = sorted((here[1], (last or here)[1]))
                span(here[0], low, high, index)
            else:
                for px, py in _segment(*last, *here):
                    span(px, py, py, index)
            last = here
            placed.append((here[1] // 4, here[0] // 2))
        # Staggered per series, so that lines which run together still
        # show each of their marks.
        shift = index * MARK_EVERY // max(1, len(series))
        for cell in placed[-1:] + [c for c in placed
                                   if (c[1] + shift) % MARK_EVERY == 0]:
            marks.setdefault(cell, index)

    lines = []
    for row in range(rows):
        if row == 0:
            tag = labels[0]
        elif row == rows - 1:
            tag = labels[2]
        elif row == (rows - 1) // 2:
            tag = labels[1]
        else:
            tag = ""
        text, current = [], -1
        for column in range(columns):
            bits = cells[row][column]
            marked = marks.get((row, column))
            who = marked if marked is not None else \
                owner[row][column] if bits else -1
            if colour and who != current:
                # A colour change only where the series changes.
                text.append("\x1b[0m" if who < 0 else
                            f"\x1b[{COLOURS[who % len(COLOURS)]}m")
                current = who
            text.append(MARKS[marked % len(MARKS)] if marked is not None
                        else chr(BRAILLE + bits) if bits else " ")
        if current >= 0:
            text.append("\x1b[0m")
        lines.append(f"{tag:>{margin - 1}} ┤" + "".join(text))
    left, right = x_label(x_low), x_label(x_high)
    lines.append(" " * (margin + 1) + left
                 + right.rjust(max(1, columns - len(left))))
    # The legend, as many entries as fit the width (escapes take no room).
    legend, room = [], width - margin - 1
    for index, (name, _) in enumerate(series):
        room -= len(name) + 5
        if room < 0:
            break
        mark = "━" + MARKS[index % len(MARKS)]
        if colour:
            mark = f"\x1b[{COLOURS[index % len(COLOURS)]}m{mark}\x1b[0m"
        legend.append(f"{mark} {name}")
    lines.append(" " * (margin + 1) + "  ".join(legend))
    return lines


__all__ = ["line_chart", "clock"]
