"""--history FILE and --trend N: one JSON line per node per run, and the
memwatch-style leak rule over them.

memwatch (Node.js) emits its 'leak' event after five consecutive garbage
collections in which the heap grew; here the sample is one check run and
the value is binary memory: N consecutive rises (N+1 samples, each above
the one before) is a WARNING, reported with the growth per hour over them.

The file is appended to by many runs, some at once, for months. So: one
write() per run (O_APPEND keeps concurrent runs' lines whole), every record
starts on a line of its own (a run that crashed mid-write, or a full disk,
leaves a torn last line that must not swallow the next record), a short
write is reported rather than ignored, lines that cannot be read are
skipped and counted, and only the tail the trend needs is read, so a file
of any size costs the same.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any, Mapping

DEFAULT_TREND = 5

# Reading backwards from the end, in blocks of this size, up to this much:
# a cluster of 50 nodes at ~400 bytes a record and a trend of 20 needs
# ~420 KB; more is never read however large the file grows.
BLOCK = 64 * 1024
MAX_TAIL = 8 * 1024 * 1024


class HistoryError(Exception):
    """The history file could not be written; str() says why."""


def record(node: str, values: Mapping[str, Any], now: float
           ) -> dict[str, Any]:
    return {"time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)),
            "epoch": round(now, 3), "node": node, **values}


def append(path: str, records: list[dict[str, Any]]) -> None:
    """Append ``records``, one line each, in one write. Raises HistoryError
    when the file cannot be opened or the write is short (a full disk)."""
    from beam_probe.files import error_text, open_append

    data = "".join(json.dumps(r, separators=(",", ":")) + "\n"
                   for r in records).encode()
    try:
        fd, info = open_append(path)
    except OSError as exc:
        raise HistoryError(error_text(exc)) from None
    try:
        if info.st_size and os.pread(fd, 1, info.st_size - 1) != b"\n":
            # A torn last line (a crash or a full disk mid-write): start on
            # a line of our own, or our record would be glued to it and lost.
            data = b"\n" + data
        written = os.write(fd, data)
        if written != len(data):
            raise HistoryError(f"only {written} of {len(data)} bytes were "
                               "written (is the disk full?)")
    except OSError as exc:
        raise HistoryError(error_text(exc)) from None
    finally:
        os.close(fd)


def load_tail(path: str, nodes: list[str], need: int
              ) -> tuple[dict[str, list[dict[str, Any]]], int]:
    """The last ``need`` readable records of each of ``nodes``, oldest
    first, and how many lines could not be read. Reads backwards from the
    end of the file, at most MAX_TAIL bytes. A missing file is empty."""
    from beam_probe.files import open_regular

    wanted = set(nodes)
    by_node: dict[str, list[dict[str, Any]]] = {node: [] for node in nodes}
    skipped = 0
    try:
        fd, info = open_regular(path)
    except FileNotFoundError:
        return by_node, 0
    try:
        end = info.st_size
        carry = b""
        while end > 0 and info.st_size - end < MAX_TAIL and any(
                len(by_node[n]) < need for n in wanted):
            start = max(0, end - BLOCK)
            block = os.pread(fd, end - start, start) + carry
            end = start
            lines = block.split(b"\n")
            # The first piece may be the end of a line that starts in an
            # earlier block: keep it for the next round.
            carry = lines.pop(0) if start > 0 else b""
            for raw in reversed(lines):
                if not raw.strip():
                    continue
                item = _parse(raw)
                if item is None:
                    skipped += 1
                elif item["node"] in wanted and len(by_node[item["node"]]) \
                        < need:
                    by_node[item["node"]].append(item)
    finally:
        os.close(fd)
    return {node: items[::-1] for node, items in by_node.items()}, skipped


def _parse(raw: bytes) -> dict[str, Any] | None:
    """One record, or None for a line that is not one of ours."""
    from beam_probe.probes.trend import figure, read_record

    item = read_record(raw)
    if item is not None and figure(item.get("binary")) \
            and isinstance(item.get("time"), str):
        return item
    return None


def trend(records: list[dict[str, Any]], rises: int) -> dict[str, Any] | None:
    """If the last ``rises`` steps of binary memory all rose, by more than
    watch's noise in all (1 MiB or 1%), the rule fires: {'rises': N,
    'growth_per_hour': bytes, 'since': time}. Without the noise, thirty
    checks at once on an idle node fired it: each probe's own connection
    left the node's binary memory a few KB above the last (+40 KB over
    five runs of 60 KB)."""
    from beam_probe.probes.trend import Point, noise, rising

    window = records[-(rises + 1):] if rises >= 1 else []
    rise = rising("binary", [Point(r["epoch"], r["binary"]) for r in window],
                  rises, noise("binary", window[0]["binary"])
                  if window else 0.0)
    if rise is None:
        return None
    return {"rises": rises, "growth_per_hour": rise.per_hour,
            "since": window[0]["time"]}
