"""--history FILE and --trend N: one JSON line per node per run, and the
memwatch-style leak rule over them.

memwatch (Node.js) emits its 'leak' event after five consecutive garbage
collections in which the heap grew; here the sample is one check run and
the value is binary memory: N consecutive rises (N+1 samples, each above
the one before) is a WARNING, reported with the growth per hour over them.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

DEFAULT_TREND = 5


def append(path: str, node: str, values: dict[str, Any],
           now: float | None = None) -> dict[str, Any]:
    """Append one record; one write() of one line, so concurrent runs
    appending to the same file do not interleave within a line."""
    now = time.time() if now is None else now
    record = {"time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)),
              "epoch": round(now, 3), "node": node, **values}
    line = (json.dumps(record, separators=(",", ":")) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)
    return record


def load_all(path: str) -> dict[str, list[dict[str, Any]]]:
    """Every node's records, oldest first, read in one pass (a --cluster run
    needs them all); unreadable lines are skipped (a crash mid-write must
    not stop every later check)."""
    by_node: dict[str, list[dict[str, Any]]] = {}
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                try:
                    record = json.loads(line)
                except ValueError:
                    continue
                if isinstance(record, dict) \
                        and isinstance(record.get("node"), str) \
                        and isinstance(record.get("binary"), (int, float)) \
                        and isinstance(record.get("epoch"), (int, float)):
                    by_node.setdefault(record["node"], []).append(record)
    except FileNotFoundError:
        pass
    return by_node


def load(path: str, node: str) -> list[dict[str, Any]]:
    """This node's records, oldest first."""
    return load_all(path).get(node, [])


def trend(records: list[dict[str, Any]], rises: int) -> dict[str, Any] | None:
    """If the last ``rises`` steps of binary memory all rose, the rule
    fires: {'rises': N, 'growth_per_hour': bytes, 'since': time}."""
    if rises < 1 or len(records) < rises + 1:
        return None
    window = records[-(rises + 1):]
    values = [r["binary"] for r in window]
    if not all(later > earlier for earlier, later in zip(values,
                                                            values[1:])):
        return None
    hours = (window[-1]["epoch"] - window[0]["epoch"]) / 3600
    growth = (values[-1] - values[0]) / hours if hours > 0 else None
    return {"rises": rises, "growth_per_hour": growth,
            "since": window[0]["time"]}
