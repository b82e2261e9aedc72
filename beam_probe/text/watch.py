"""Text for watch and plot: the live view, a run's summary, leak lines.

The live view is drawn to fit ``width`` x ``height`` character cells: the
figures first, the chart takes what height is left, the verdict last.
"""

from __future__ import annotations

import time
from typing import Any, Mapping, Sequence

from beam_probe.text.chart import clock, line_chart
from beam_probe.text.syntax import ERLANG, Syntax
from beam_probe.text.tables import human_bytes, table
from beam_probe.text.tables import human_duration as duration
from beam_probe.probes.trend import BYTE_CATEGORIES, TREND_WINDOW

LABELS = {"total": "total", "processes": "processes", "binary": "binary",
          "ets": "ets", "atom_count": "atoms", "process_count":
          "process count", "port_count": "port count"}


def amount(category: str, value: float | None, signed: bool = False) -> str:
    if value is None:
        return "-"
    if category in BYTE_CATEGORIES:
        text = human_bytes(value)
        return ("+" + text) if signed and value >= 0 else text
    return f"{value:+,.0f}" if signed else f"{value:,.0f}"


def leak_line(rise: Mapping[str, Any]) -> str:
    """What a rule suspected, and which rule: 'binary +48.2 MiB over 5
    rises (25 s), +1.4 GiB/h', or 'process count +25 over 60 samples
    (1 m 58 s) (trend: +771/h, Mann-Kendall z 10.7)'."""
    category = rise["category"]
    label = LABELS.get(category, category)
    growth = amount(category, rise["growth"], True)
    if rise.get("rule") == "trend":
        return (f"{label} {growth} over {rise['samples']} samples "
                f"({duration(rise['seconds'])}) (trend: "
                f"{amount(category, rise['per_hour'], True)}/h, "
                f"Mann-Kendall z {rise['z']:.1f})")
    text = (f"{label} {growth} over {rise['rises']} "
            f"rises ({duration(rise['seconds'])})")
    if rise["per_hour"] is not None:
        text += f", {amount(category, rise['per_hour'], True)}/h"
    return text


def _or_dash(value: Any) -> str:
    return "-" if value is None else f"{value:g}"


def _how(gc: str, floor: int) -> str:
    if gc == "none":
        return f"no forced GC: floors over {floor} samples"
    return "after GC of " + ("every process" if gc == "all"
                             else "binary holders")


def frame(watch: Any, width: int, height: int, colour: bool = False
          ) -> list[str]:
    """The live view of a Watch (or of a ClusterWatch: cluster_frame), at
    most ``height`` lines of ``width``."""
    if hasattr(watch, "tracks"):
        return cluster_frame(watch, width, height, colour)
    last = watch.last
    elapsed = (last["epoch"] - watch.started) if last and watch.started \
        else 0.0
    how = _how(watch.gc, watch.floors["total"].values.maxlen)
    head = (f"{watch.node}: every {watch.interval:g} s, {how}; "
            f"{watch.taken} samples in {duration(elapsed)}")
    lines = [head[:width]]
    if last is None:
        return lines + ["waiting for the first sample..."]
    rows = []
    for category, stats in watch.stats.items():
        if stats.last is None:
            continue
        change = stats.last.value - stats.first.value
        rows.append((LABELS[category], amount(category, stats.last.value),
                     amount(category, change, True),
                     amount(category, stats.per_hour, True) + "/h"
                     if stats.per_hour is not None else "-"))
    figures = table(("", "now", "since start", "per hour"), rows,
                    "lrrr").split("\n")
    lines += [line[:width] for line in figures]
    if last.get("down"):
        status = [f"node down at {clock(last['epoch'])}: {last['error']}; "
                  f"trying again every {watch.interval:g} s"]
    else:
        rss = last.get("rss")
        status = [
            (f"GC {_or_dash(last['gcs_per_s'])}/s, "
             f"reclaimed {human_bytes(last['reclaimed_per_s'] or 0)}/s; "
             f"allocators {100 * last['alloc_usage']:.0f}% used of "
             f"{human_bytes(last['alloc_allocated'])}"
             + (f"; RSS {human_bytes(rss)}" if rss is not None else "")
             + f"; {last['node_ms']:g} ms on the node")]
    verdict = verdict_lines(watch)
    room = height - len(lines) - len(status) - len(verdict)
    if room >= 5:
        # Without --gc the lines are the floors: the header says so.
        series = [(LABELS[c], list(points))
                  for c, points in watch.series.items()]
        lines += line_chart(series, width, room, human_bytes, colour)
    lines += status + verdict
    return [line[:width] if "\x1b" not in line else line for line in lines]


def cluster_frame(watch: Any, width: int, height: int, colour: bool = False
                  ) -> list[str]:
    """The live view of a ClusterWatch: a line a node (its figures now and
    what the rule says of it), the chart of --metric, a series a node,
    and each node's suspected leaks."""
    metric = watch.metric
    elapsed = (watch.last["epoch"] - watch.started) \
        if watch.last and watch.started else 0.0
    head = (f"cluster through {watch.node}: {len(watch.tracks)} nodes every "
            f"{watch.interval:g} s, {_how(watch.gc, watch.floor)}; "
            f"{watch.rounds} rounds in {duration(elapsed)}")
    lines = [head[:width]]
    if watch.last is None:
        return lines + ["waiting for the first samples..."]
    rows = []
    for node, track in watch.tracks.items():
        last = track.last
        if last is None:
            continue
        if last.get("down"):
            rows.append((node, "down", "", "", "", "", last["error"]))
            continue
        stats = track.stats[metric]
        rows.append((node, *(amount(c, last[c]) for c in CHARTED_HERE),
                     amount(metric, stats.per_hour, True) + "/h"
                     if stats.per_hour is not None else "-",
                     _rule_word(track)))
    lines += [line[:width] for line in table(
        ("node", *(LABELS[c] for c in CHARTED_HERE),
         f"{LABELS[metric]} per hour", "rule"), rows,
        "lrrrrrl").split("\n")]
    verdict = [f"{node}: leak suspected: {leak_line(rise.as_json())}"
               for node, track in watch.tracks.items()
               for rise in track.fired()]
    room = height - len(lines) - len(verdict)
    if room >= 5:
        series = [(node, list(track.series[metric]))
                  for node, track in watch.tracks.items()]
        lines += line_chart(series, width, room, human_bytes, colour)
    lines += verdict
    return [line[:width] if "\x1b" not in line else line for line in lines]


# The categories a cluster view shows a column each.
CHARTED_HERE = ("total", "processes", "binary", "ets")


def _rule_word(track: Any) -> str:
    fired = [leak.as_json() for leak in track.fired()]
    if fired:
        return "leak suspected: " + ", ".join(
            f"{LABELS.get(leak['category'], leak['category'])} "
            f"({leak['rule']})" for leak in fired)
    if not track.judged:
        return f"not judged yet ({track.to_judge} more)"
    return "no leak suspected"


def verdict_lines(watch: Any) -> list[str]:
    return verdict_text([leak.as_json() for leak in watch.fired()],
                        watch.judged, watch.to_judge, watch.unconfirmed(),
                        watch.gc, watch.rule.rises)


def verdict_text(leaks: Sequence[Mapping[str, Any]], judged: bool,
                 to_judge: int, unconfirmed: Sequence[Mapping[str, Any]],
                 gc: str,
                 rises: int | None = None) -> list[str]:
    """What the rule says: the leaks it suspected; else, until it could
    judge, that it has not, and what only rose meanwhile; else no leak."""
    if leaks:
        return ["leak suspected: " + leak_line(rise) for rise in leaks]
    if not judged:
        hint = ", or --gc holders" if gc == "none" else ""
        return ([f"not judged yet: {to_judge} more sample"
                 f"{'s' if to_judge != 1 else ''}{hint}"]
                + ["rising, not yet confirmed: " + rising_line(rise)
                   for rise in unconfirmed])
    return ["no leak suspected" + (
        f" (rules: {rises} consecutive rises, or a trend over the last "
        f"{TREND_WINDOW} samples)" if rises is not None else "")]


def rising_line(rise: Mapping[str, Any]) -> str:
    """'binary +18.0 MiB over 9 samples (4 s)' (the raw values)."""
    category = rise["category"]
    return (f"{LABELS.get(category, category)} "
            f"{amount(category, rise['growth'], True)} over "
            f"{rise['rises'] + 1} samples ({duration(rise['seconds'])})")


def summary_text(summary: dict[Any, Any], syntax: Syntax = ERLANG) -> str:
    """A run's summary; a cluster's (--cluster) is each node's in turn."""
    if "nodes" in summary:
        return (f"cluster through {summary['entry']}: "
                f"{len(summary['nodes'])} nodes\n\n"
                + "\n\n".join(summary_text(node, syntax)
                               for node in summary["nodes"]))
    rows = []
    for category, stats in summary["categories"].items():
        rows.append((LABELS[category], amount(category, stats["first"]),
                     amount(category, stats["last"]),
                     amount(category, stats["min"]),
                     amount(category, stats["max"]),
                     amount(category, stats["per_hour"], True) + "/h"
                     if stats["per_hour"] is not None else "-"))
    text = (f"{summary['node']}: {summary['samples']} samples in "
            f"{duration(summary['seconds'])}"
            + (f" ({summary['down_samples']} with the node down)"
               if summary["down_samples"] else "") + "\n")
    text += table(("", "first", "last", "min", "max", "per hour"), rows,
                  "lrrrrr")
    text += "\n" + "\n".join(verdict_text(
        summary["leaks"], summary["judged"], summary["to_judge"],
        summary["unconfirmed"], summary["gc"]))
    return text


def sample_line(sample: dict[Any, Any], syntax: Syntax = ERLANG) -> str:
    """One sample as a line of text (watch --format table, piped):
    '23:40:01  total 21.3 MiB  processes 3.9 MiB  binary 6.5 MiB ...'."""
    if sample.get("down"):
        return down_line(sample)
    when = time.strftime("%H:%M:%S", time.localtime(sample["epoch"]))
    figures = "  ".join(f"{LABELS[c]} {amount(c, sample[c])}"
                        for c in LABELS)
    leaks = "".join(f"; leak suspected: {leak_line(rise)}"
                    for rise in sample.get("leaks", []))
    return f"{when}  {sample['node']}  {figures}{leaks}"


def down_line(sample: dict[Any, Any]) -> str:
    return (f"{time.strftime('%H:%M:%S', time.localtime(sample['epoch']))} "
            f"{sample['node']} down: {sample['error']}")


__all__ = ["cluster_frame", "duration", "frame", "leak_line", "sample_line", "summary_text",
           "verdict_lines", "verdict_text"]
