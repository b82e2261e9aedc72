"""plot's drawing: a chart in the terminal (beam-probe's own line chart),
or a PNG or SVG through matplotlib, an optional extra imported by this
command alone. The series come from history/series.py.
"""

from __future__ import annotations

import os
from datetime import datetime
from typing import Any, Sequence

from beam_probe.errors import UsageError
from beam_probe.probes.trend import BYTE_CATEGORIES
from beam_probe.text.chart import line_chart
from beam_probe.text.syntax import Syntax
from beam_probe.text.tables import human_bytes
from beam_probe.text.watch import duration


def bytes_only(names: tuple[str, ...] | list[str]) -> bool:
    return all(name in BYTE_CATEGORIES for name in names)


def title_period(data: dict[Any, Any]) -> str:
    """'app@db1: 2026-11-23 16:57:02 to 16:57:16': seconds under an hour's
    span (a 14 s window read '16:57 to 16:57'), the date once when the
    period is within a day."""
    first = datetime.fromtimestamp(data["first"])
    last = datetime.fromtimestamp(data["last"])
    clock = "%H:%M:%S" if data["last"] - data["first"] < 3600 else "%H:%M"
    end = last.strftime(clock if first.date() == last.date()
                        else f"%Y-%m-%d {clock}")
    return f"{data['node']}: {first.strftime(f'%Y-%m-%d {clock}')} to {end}"


# A leak's shading where its series is not on the chart (a category not
# asked for with --metric).
LEAK_COLOUR = "red"


def draw(data: dict[Any, Any]) -> Any:
    """The chart of ``data`` as a matplotlib Figure (Agg), for
    write_image to save; the caller closes it (pyplot.close)."""
    try:
        import matplotlib
    except ImportError:
        raise UsageError("charts as files need matplotlib: pip install "
                         "'beam-probe[plot]'") from None
    matplotlib.use("Agg")
    from matplotlib import dates, pyplot

    # Constrained layout makes room for the legend outside the axes and
    # keeps the image 1000 x 500.
    figure, axes = pyplot.subplots(figsize=(10, 5), dpi=100,
                                   layout="constrained")
    try:
        scale, unit = (1 / (1024 * 1024), "MiB") if bytes_only(
            data["metrics"]) else (1, "")
        colours: dict[str, Any] = {}
        for name, points in data["series"].items():
            xs = [datetime.fromtimestamp(x) for x, _ in points]
            ys = [float("nan") if y is None else y * scale for _, y in points]
            line, = axes.plot(xs, ys, linewidth=1.2, label=name)
            colours[name] = line.get_color()
            floor = data["floors"].get(name)
            if floor:
                axes.plot([datetime.fromtimestamp(x) for x, _ in floor],
                          [float("nan") if y is None else y * scale
                           for _, y in floor],
                          linestyle="--", linewidth=1, color=line.get_color(),
                          label=f"{name} floor")
        # A leak is its series': the category that rose, or (--node all) the
        # node. Shaded in that line's colour and named in the legend, so that
        # a cluster's chart says which node leaked (one red for all did not).
        shaded: list[str] = []
        for epoch, whose in data["leaks"]:
            when = datetime.fromtimestamp(epoch)
            axes.axvspan(when, when, color=colours.get(whose, LEAK_COLOUR),
                         alpha=0.25, linewidth=4)
            if whose not in shaded:
                shaded.append(whose)
        for whose in shaded:
            axes.plot([], [], color=colours.get(whose, LEAK_COLOUR), alpha=0.4,
                      linewidth=6, label=f"leak suspected: {whose}")
        axes.set_title(title_period(data))
        axes.set_ylabel(unit or "value")
        span = data["last"] - data["first"]
        axes.xaxis.set_major_formatter(dates.DateFormatter(
            "%H:%M:%S" if span < 7200 else "%H:%M" if span < 172800
            else "%m-%d %H:%M"))
        axes.grid(True, alpha=0.3)
        # Outside the axes, right of them: inside ("upper left") it
        # covered the start of the top line.
        axes.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0),
                    borderaxespad=0.0, fontsize="small")
        # (autofmt_xdate's subplots_adjust would turn constrained layout off.)
        for label in axes.get_xticklabels():
            label.set_rotation(30)
            label.set_horizontalalignment("right")
    except BaseException:
        pyplot.close(figure)
        raise
    return figure


def write_image(data: dict[Any, Any], path: str) -> None:
    """A PNG or SVG chart through matplotlib (the 'plot' extra)."""
    figure = draw(data)
    from matplotlib import pyplot

    try:
        import io

        from beam_probe.files import write_whole

        # Drawn in memory, then written by the one writer of a file the
        # user names: savefig(path) would follow another user's link.
        image = io.BytesIO()
        figure.savefig(image, format=os.path.splitext(path)[1][1:].lower())
        try:
            write_whole(path, [image.getvalue()])
        except OSError as exc:
            from beam_probe.errors import OutputFailed
            from beam_probe.files import error_text

            raise OutputFailed(f"cannot write {path}: {error_text(exc)}") \
                from None
    finally:
        pyplot.close(figure)


def check_output(path: str | None) -> None:
    """Before any file is read: a chart file needs a known format and
    matplotlib."""
    if path is None:
        return
    if not path.lower().endswith((".png", ".svg")):
        raise UsageError(f"--output must end in .png or .svg, not {path!r}")
    from importlib.util import find_spec

    if find_spec("matplotlib") is None:
        raise UsageError("charts as files need matplotlib: pip install "
                         "'beam-probe[plot]'")


def chart_text(title: str, series: Sequence[tuple[str, list[Any]]], width: int,
               height: int, byte_values: bool, colour: bool = False) -> str:
    label = human_bytes if byte_values else "{:,.0f}".format
    return "\n".join([title] + line_chart(series, width, height - 1, label,
                                           colour))


def plot_text(data: dict[Any, Any], syntax: Syntax, width: int = 100, height: int = 24,
              colour: bool = False) -> str:
    """The chart of ``data`` (history.series.load) in ``width`` x
    ``height``; when it went to a file, one line saying so."""
    skipped = data["skipped_lines"]
    if "output" in data:
        return (f"{data['output']}: {data['samples']} samples of "
                f"{data['node']}" + (f" ({skipped} lines skipped)"
                                     if skipped else ""))
    title = (f"{data['node']}: {data['samples']} samples, "
             f"{duration(data['last'] - data['first'])}"
             + (f"; {skipped} lines skipped" if skipped else ""))
    # A series a metric, or (--node all) a series a node.
    series = list(data["series"].items())
    return chart_text(title, series, width, max(8, height - 2),
                      bytes_only(data["metrics"]), colour)


__all__ = ["bytes_only", "chart_text", "check_output", "draw", "plot_text",
           "title_period", "write_image"]
