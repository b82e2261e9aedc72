"""--warn/--crit KEY=VALUE: which keys exist, what units they take, and the
status a set of values earns.

A threshold is an upper bound: a value at or above it raises the status
(the usual reading for memory, counts and shares; Nagios range syntax is
not supported), except for the keys ending in _min, lower bounds: a value
at or below it raises the status (alloc_usage_min: fragmentation). One rule for units, bytes and counts alike: a bare k, M,
G, T or KB, MB, GB, TB is a power of 1000; KiB, MiB, GiB, TiB a power of
1024 (case does not matter). A percentage is at most 100, and a warning
threshold may not be above its critical one.
"""

from __future__ import annotations

import re
from typing import Any

from beam_probe.text.tables import human_bytes

OK, WARNING, CRITICAL, UNKNOWN = 0, 1, 2, 3
STATUS_NAMES = {OK: "OK", WARNING: "WARNING", CRITICAL: "CRITICAL",
                UNKNOWN: "UNKNOWN"}

BYTES, PERCENT, COUNT = "B", "%", ""

# Key -> unit, in report order.
KEYS: dict[str, str] = {
    "total": BYTES, "processes": BYTES, "binary": BYTES, "ets": BYTES,
    "atom": BYTES, "binary_share": PERCENT, "process_count": COUNT,
    "top_binary_memory": BYTES, "max_queue": COUNT, "atom_use": PERCENT,
    "rss": BYTES, "alloc_usage_min": PERCENT, "top_ets_memory": BYTES,
}
# Lower bounds: the status rises as the value falls.
LOWER = frozenset(key for key in KEYS if key.endswith("_min"))

_COUNT_UNITS = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_BYTE_UNITS = {**_COUNT_UNITS, "b": 1, "kb": 10**3, "mb": 10**6,
               "gb": 10**9, "tb": 10**12, "kib": 2**10, "mib": 2**20,
               "gib": 2**30, "tib": 2**40}
_VALUE = re.compile(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z%]*)\s*")


class ThresholdError(ValueError):
    """A threshold that cannot be understood: the check is UNKNOWN."""


class Limit(float):
    """A parsed threshold that remembers how the user wrote it: the number
    is what values are compared with, the text what we echo (issue 38: a
    user who wrote binary=100MB was shown 95.4MiB, a figure they never
    gave)."""

    text: str

    def __new__(cls, value: float, text: str) -> "Limit":
        limit = super().__new__(cls, value)
        limit.text = text
        return limit


def parse(spec: str) -> tuple[str, float]:
    """'binary=500MB' -> ('binary', 500000000.0)."""
    key, sep, text = spec.partition("=")
    key = key.strip()
    if not sep:
        raise ThresholdError(f"threshold {spec!r} is not KEY=VALUE")
    if key not in KEYS:
        raise ThresholdError(f"unknown key {key!r}; keys: {', '.join(KEYS)}")
    match = _VALUE.fullmatch(text)
    if not match:
        raise ThresholdError(f"{key}: {text!r} is not a number with an "
                             f"optional unit")
    number, unit = float(match.group(1)), match.group(2).lower()
    kind = KEYS[key]
    if kind == PERCENT:
        if unit not in ("", "%"):
            raise ThresholdError(f"{key} is a percentage (e.g. 80%), "
                                 f"not {text!r}")
        if number > 100:
            raise ThresholdError(f"{key} is a percentage: {text.strip()} "
                                 "can never be reached")
        return key, Limit(number, text.strip())
    table = _BYTE_UNITS if kind == BYTES else _COUNT_UNITS
    if unit not in table:
        expected = ("bytes (e.g. 500MB, 1GiB)" if kind == BYTES
                    else "a count (e.g. 1000, 50k)")
        raise ThresholdError(f"{key} takes {expected}, not {text!r}")
    return key, Limit(number * table[unit], text.strip())


def parse_all(specs: tuple[str, ...] | list[str]) -> dict[str, float]:
    return dict(parse(spec) for spec in specs)


def parse_both(warn_specs: tuple[str, ...] | list[str],
               crit_specs: tuple[str, ...] | list[str]
               ) -> tuple[dict[str, float], dict[str, float]]:
    """Warning and critical thresholds; a warning above its critical
    threshold could never be seen, so it is refused."""
    warn, crit = parse_all(warn_specs), parse_all(crit_specs)
    for key in warn.keys() & crit.keys():
        lower = key in LOWER
        if (warn[key] < crit[key]) if lower else (warn[key] > crit[key]):
            raise ThresholdError(
                f"{key}: the warning threshold {show(key, warn[key])} is "
                f"{'below' if lower else 'above'} the critical one "
                f"{show(key, crit[key])}")
    return warn, crit


def evaluate(values: dict[str, Any], warn: dict[str, float],
             crit: dict[str, float]) -> tuple[int, list[str]]:
    """The worst status the values earn, and one phrase per breach."""
    status, problems = OK, []
    for key in KEYS:
        value = values.get(key)
        if value is None:
            continue
        for limits, level, name in ((crit, CRITICAL, "critical"),
                                    (warn, WARNING, "warning")):
            if key not in limits:
                continue
            lower = key in LOWER
            if (value <= limits[key]) if lower else (value >= limits[key]):
                status = max(status, level)
                problems.append(f"{key} {show(key, value)} "
                                f"{'<=' if lower else '>='} "
                                f"{show(key, limits[key])} ({name})")
                break
    return status, problems


def show(key: str, value: float) -> str:
    """A value as a person reads it: 12.0 MiB, 3.5%, 1,234; a threshold
    as the user wrote it."""
    if isinstance(value, Limit):
        return value.text
    kind = KEYS.get(key, COUNT)
    if kind == PERCENT:
        return f"{value:g}%"
    if kind == BYTES:
        # beam-probe's one rule for showing bytes, in every command (issue
        # 38): binary units with one decimal, as erlang:memory() counts,
        # by the function every table uses. Thresholds may be written in
        # either (see parse).
        return human_bytes(value)
    return f"{int(value):,}"
