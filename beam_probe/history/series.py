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
from beam_probe.probes.trend import Series, figure, read_record

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


# --node all overlays the nodes of a cluster's file, a line each: a chart
# stays readable with a few dozen, and each line is a bounded Series.
MAX_OVERLAY = 32


def load(files: list[str], wanted: tuple[str, ...], node: str | None,
         since: float | None, until: float | None,
         progress: Callable[[str], None] = lambda text: None) -> dict[Any, Any]:
    """The chosen metrics of one node over time, from every file; with
    ``node`` "all", the first chosen metric of every node, a series each
    (a watch --cluster file, a cluster's check history)."""
    if len(files) > MAX_FILES:
        raise UsageError(f"at most {MAX_FILES} files at once")
    if node == "all":
        return _overlay(files, wanted[0], since, until, progress)
    series = {name: Series() for name in wanted}
    floors = {name: Series() for name in wanted}
    leaks: list[tuple[float, str]] = []
    nodes: dict[str, int] = {}
    used = 0
    has_floor = False
    first = last = None
    skipped_lines: list[int] = [0]
    for item in _records(files, progress, skipped_lines):
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
        floor = item.get("floor")
        if not isinstance(floor, dict):
            floor = {}
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
    skipped = skipped_lines[0]
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


def _records(files: list[str], progress: Callable[[str], None],
             skipped: list[int]) -> Iterator[dict[Any, Any]]:
    """Every sample of every file, in order; ``skipped[0]`` counts the
    lines that were not samples (a summary line is not counted)."""
    for path in files:
        progress(f"reading {path}")
        for raw in _lines(path):
            if not raw.strip():
                continue
            item = read_record(raw)
            if item is None:
                if not raw.startswith(b'{"summary"'):
                    skipped[0] += 1
                continue
            yield item


def _overlay(files: list[str], metric: str, since: float | None,
             until: float | None, progress: Callable[[str], None]
             ) -> dict[Any, Any]:
    series: dict[str, Series] = {}
    floors: dict[str, Series] = {}
    leaks: list[tuple[float, str]] = []
    used = 0
    first = last = None
    skipped_lines: list[int] = [0]
    for item in _records(files, progress, skipped_lines):
        epoch = float(item["epoch"])
        if (since is not None and epoch < since) or \
                (until is not None and epoch > until):
            continue
        name = item["node"]
        if name not in series:
            if len(series) == MAX_OVERLAY:
                raise PlotError(f"the files hold more than {MAX_OVERLAY}"
                                " nodes: choose one with --node")
            series[name], floors[name] = Series(), Series()
        used += 1
        first = epoch if first is None else min(first, epoch)
        last = epoch if last is None else max(last, epoch)
        value = None if item.get("down") else item.get(metric)
        if not figure(value):
            value = None
        series[name].add(epoch, value)
        floor = item.get("floor")
        if isinstance(floor, dict) and figure(floor.get(metric)):
            floors[name].add(epoch, floor[metric])
        for rise in item.get("leaks") or []:
            if isinstance(rise, dict) and rise.get("category") == metric:
                leaks.append((epoch, name))
                del leaks[:-10000]
    skipped = skipped_lines[0]
    if not used:
        raise PlotError("no samples to plot in the files"
                        + (f" ({skipped} lines were not samples)"
                           if skipped else ""))
    return {"node": f"{len(series)} nodes", "samples": used,
            "skipped_lines": skipped, "first": first, "last": last,
            "metrics": [metric],
            "series": {name: list(s) for name, s in series.items()},
            "floors": {name: points for name, s in floors.items()
                       if (points := list(s))},
            "leaks": leaks}


__all__ = ["DEFAULT_METRICS", "METRICS", "PlotError", "load", "metrics",
           "parse_time"]
