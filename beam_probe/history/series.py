"""plot: the memory of a node over time, from watch files and check
histories (one JSON object a line; both use the same names).

Files of any length are read a line at a time into series of bounded size
(trend.Series), so a year of samples costs the memory of a few thousand
points; a line that is not a sample (torn, foreign, a watch summary) is
skipped and counted. PNG and SVG charts are drawn by matplotlib, an
optional extra imported by this command alone.
"""

from __future__ import annotations

import os
from datetime import datetime
from typing import Any, Callable, Iterator

from beam_probe.errors import UsageError
from beam_probe.probes.trend import BYTE_CATEGORIES, Series, figure, read_record

DEFAULT_METRICS = ("total", "processes", "binary", "ets")
# Every numeric field of a sample that can be drawn.
METRICS = ("total", "processes", "binary", "ets", "atom", "code", "system",
           "binary_share", "process_count", "port_count", "atom_count",
           "ets_count", "atom_use", "alloc_used", "alloc_allocated",
           "alloc_usage", "rss", "gcs_per_s", "reclaimed_per_s",
           "top_binary_memory", "max_queue")
# A sample line is a few hundred bytes; a far longer line is not one.
MAX_LINE = 64 * 1024
# Reading is linear, so a file's size is a time bound: a gigabyte is
# about three million samples, a year of 10-second samples.
MAX_FILE = 1 << 30
MAX_FILES = 64


class PlotError(UsageError):
    """A file that plot cannot use (exit 2, as bad arguments)."""

    label = "plot"


def parse_time(text: str, what: str) -> float:
    """An ISO 8601 time (local time unless it says otherwise) or epoch
    seconds, as epoch seconds."""
    try:
        return float(text)
    except ValueError:
        pass
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")
                                      ).timestamp()
    except ValueError:
        raise UsageError(f"{what} must be a time such as "
                         f"2026-11-22T10:00:00 or epoch seconds, not "
                         f"{text!r}") from None


def metrics(text: str) -> tuple[str, ...]:
    names = tuple(name.strip() for name in text.split(",") if name.strip())
    unknown = [name for name in names if name not in METRICS]
    if unknown or not names:
        raise UsageError(f"unknown metric {unknown[0] if unknown else text!r}"
                         f": choose from {', '.join(METRICS)}")
    return names


def _lines(path: str) -> Iterator[bytes]:
    from beam_probe.files import error_text, open_regular

    try:
        fd, info = open_regular(path)
    except OSError as exc:
        raise PlotError(f"cannot read {path}: {error_text(exc)}") from None
    if info.st_size > MAX_FILE:
        os.close(fd)
        raise PlotError(f"{path} is larger than 1 GiB; plot a part of it "
                        f"(tail -n 100000 {path} > part.jsonl)")
    with os.fdopen(fd, "rb") as f:
        while True:
            line = f.readline(MAX_LINE + 1)
            if not line:
                return
            if len(line) > MAX_LINE and not line.endswith(b"\n"):
                # The rest of an over-long line is skipped, not parsed.
                while line and not line.endswith(b"\n"):
                    line = f.readline(MAX_LINE)
                yield b"\0"
                continue
            yield line


def load(files: list[str], wanted: tuple[str, ...], node: str | None,
         since: float | None, until: float | None,
         progress: Callable[[str], None] = lambda text: None) -> dict:
    """The chosen metrics of one node over time, from every file."""
    if len(files) > MAX_FILES:
        raise UsageError(f"at most {MAX_FILES} files at once")
    series = {name: Series() for name in wanted}
    floors = {name: Series() for name in wanted}
    leaks: list[tuple[float, str]] = []
    nodes: dict[str, int] = {}
    skipped = used = 0
    has_floor = False
    first = last = None
    for path in files:
        progress(f"reading {path}")
        for raw in _lines(path):
            if not raw.strip():
                continue
            item = read_record(raw)
            if item is None:
                if not raw.startswith(b'{"summary"'):
                    skipped += 1
                continue
            nodes[item["node"]] = nodes.get(item["node"], 0) + 1
            if node is not None and item["node"] != node:
                continue
            if node is None and len(nodes) > 1:
                names = ", ".join(sorted(nodes)[:5])
                raise PlotError(f"the files hold samples of more than one "
                                f"node ({names}): choose one with --node")
            epoch = float(item["epoch"])
            if (since is not None and epoch < since) or \
                    (until is not None and epoch > until):
                continue
            used += 1
            first = epoch if first is None else min(first, epoch)
            last = epoch if last is None else max(last, epoch)
            floor = item.get("floor") if isinstance(item.get("floor"),
                                                    dict) else {}
            for name in wanted:
                value = None if item.get("down") else item.get(name)
                if not isinstance(value, (int, float)) or \
                        isinstance(value, bool):
                    value = None
                series[name].add(epoch, value)
                if figure(floor.get(name)):
                    has_floor = True
                    floors[name].add(epoch, floor[name])
            for rise in item.get("leaks") or []:
                if isinstance(rise, dict) and rise.get("category") in wanted:
                    leaks.append((epoch, rise["category"]))
                    del leaks[:-10000]
    if not used:
        if node is not None and node not in nodes:
            raise PlotError(f"no samples of {node} in the files"
                            + (f" (they hold {', '.join(sorted(nodes)[:5])})"
                               if nodes else ""))
        raise PlotError("no samples to plot in the files"
                        + (f" ({skipped} lines were not samples)"
                           if skipped else "")
                        + (" in that period" if nodes else ""))
    chosen = node or next(iter(nodes))
    return {"node": chosen, "samples": used, "skipped_lines": skipped,
            "first": first, "last": last, "metrics": list(wanted),
            "series": {name: list(s) for name, s in series.items()},
            "floors": {name: points for name, s in floors.items()
                       if (points := list(s))} if has_floor else {},
            "leaks": leaks}


def bytes_only(names: tuple[str, ...] | list[str]) -> bool:
    return all(name in BYTE_CATEGORIES for name in names)


def title_period(data: dict) -> str:
    """'app@db1: 2026-11-23 16:57:02 to 16:57:16': seconds under an hour's
    span (a 14 s window read '16:57 to 16:57'), the date once when the
    period is within a day."""
    first = datetime.fromtimestamp(data["first"])
    last = datetime.fromtimestamp(data["last"])
    clock = "%H:%M:%S" if data["last"] - data["first"] < 3600 else "%H:%M"
    end = last.strftime(clock if first.date() == last.date()
                        else f"%Y-%m-%d {clock}")
    return f"{data['node']}: {first.strftime(f'%Y-%m-%d {clock}')} to {end}"


def write_image(data: dict, path: str) -> None:
    """A PNG or SVG chart through matplotlib (the 'plot' extra)."""
    try:
        import matplotlib
    except ImportError:
        raise UsageError("charts as files need matplotlib: pip install "
                         "'beam-probe[plot]'") from None
    matplotlib.use("Agg")
    from matplotlib import dates, pyplot

    figure, axes = pyplot.subplots(figsize=(10, 5), dpi=100)
    try:
        scale, unit = (1 / (1024 * 1024), "MiB") if bytes_only(
            data["metrics"]) else (1, "")
        for name, points in data["series"].items():
            xs = [datetime.fromtimestamp(x) for x, _ in points]
            ys = [float("nan") if y is None else y * scale
                  for _, y in points]
            line, = axes.plot(xs, ys, linewidth=1.2, label=name)
            floor = data["floors"].get(name)
            if floor:
                axes.plot([datetime.fromtimestamp(x) for x, _ in floor],
                          [float("nan") if y is None else y * scale
                           for _, y in floor],
                          linestyle="--", linewidth=1, color=line.get_color(),
                          label=f"{name} floor")
        for epoch, _ in data["leaks"]:
            when = datetime.fromtimestamp(epoch)
            axes.axvspan(when, when, color="red", alpha=0.15, linewidth=4)
        if data["leaks"]:
            axes.plot([], [], color="red", alpha=0.3, linewidth=6,
                      label="leak suspected")
        axes.set_title(title_period(data))
        axes.set_ylabel(unit or "value")
        span = data["last"] - data["first"]
        axes.xaxis.set_major_formatter(dates.DateFormatter(
            "%H:%M:%S" if span < 7200 else "%H:%M" if span < 172800
            else "%m-%d %H:%M"))
        axes.grid(True, alpha=0.3)
        axes.legend(loc="upper left", fontsize="small")
        figure.autofmt_xdate()
        try:
            figure.savefig(path, format=os.path.splitext(path)[1][1:].lower())
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


def plot(files: list[str], wanted: tuple[str, ...], node: str | None,
         since: float | None, until: float | None, output: str | None,
         progress: Callable[[str], None]) -> dict[str, Any]:
    data = load(files, wanted, node, since, until, progress)
    if output is not None:
        progress(f"drawing {output}")
        write_image(data, output)
        data["output"] = output
    return data


__all__ = ["DEFAULT_METRICS", "METRICS", "PlotError", "check_output",
           "load", "metrics", "parse_time", "plot", "write_image"]
