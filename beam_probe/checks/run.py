"""One check run, from thresholds to output text and exit code.

Plugin rules: every outcome is printed on stdout in the chosen format with
its status, and the exit code is the status: 0 OK, 1 WARNING, 2 CRITICAL,
3 UNKNOWN. Bad thresholds and problems on our side (no usable cookie) are
UNKNOWN; a node that cannot be reached is CRITICAL (and, with --textfile,
beam_probe_up 0 is still written, so an alert can fire on it); one that
answers with figures no node has (a BadReply) is UNKNOWN. A history
file or textfile that cannot be written never hides the thresholds'
verdict: it is one more problem, and the status at least WARNING.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from beam_probe.errors import BadReply, NoCookie, ProbeError, UsageError
from beam_probe.text.tables import to_json
from beam_probe.history import records as hist
from beam_probe.checks import report as rep
from beam_probe.checks.thresholds import UNKNOWN, WARNING, ThresholdError, parse_both

if TYPE_CHECKING:
    from beam_probe.probes.results import NodeHealth


@dataclass(frozen=True)
class CheckRequest:
    """Everything a check run was asked, as the command line gave it."""

    node: str | None = None
    warn: tuple[str, ...] = ()
    crit: tuple[str, ...] = ()
    fmt: str = "nagios"
    textfile: str | None = None
    history: str | None = None
    trend: int | None = None
    cluster: bool = False
    jobs: int = 0
    timeout: float = 15.0


@dataclass
class _Notes:
    """What went wrong on our side of a run that still has a verdict."""

    problems: list[str] = field(default_factory=list)
    history_skipped: int = 0


def run_check(attach: Callable[[], Any], request: CheckRequest
              ) -> tuple[int, str]:
    """The exit code and the text to print for one check run."""
    try:
        warn, crit = parse_both(request.warn, request.crit)
    except ThresholdError as exc:
        return UNKNOWN, _unknown(request.fmt, str(exc))
    measured: list[NodeHealth]
    try:
        measured = _measure(attach, request.cluster, request.jobs,
                            request.timeout)
    except (UsageError, NoCookie) as exc:
        return UNKNOWN, _unknown(request.fmt, f"{exc.label}: {exc}")
    except BadReply as exc:
        # The node answered, with figures no node can have: nothing to
        # judge (UNKNOWN), and not a node that is down (CRITICAL).
        measured = [{"node": request.node or "(node)", "unjudged": True,
                     "error": f"{exc.label}: {exc}"}]
    except ProbeError as exc:
        # Unreachable, refused, cookie rejected, timed out: CRITICAL.
        measured = [{"node": request.node or "(node)",
                     "error": f"{exc.label}: {exc}"}]
    notes = _Notes()
    trends = _history(request, request.history, measured, notes) \
        if request.history else {}
    result = rep.judge(measured, warn, crit, trends)
    if request.textfile:
        try:
            rep.write_atomically(request.textfile, rep.prometheus(result))
        except OSError as exc:
            notes.problems.append(f"textfile {request.textfile} not written: "
                                  f"{exc.strerror or exc}")
    if notes.problems:
        result = rep.with_problems(result, notes.problems, WARNING)
    if request.history:
        result["history_skipped_lines"] = notes.history_skipped
    if request.fmt == "json":
        text = to_json(result)
    elif request.fmt == "prometheus":
        text = rep.prometheus(result).rstrip("\n")
    else:
        text = rep.nagios(result, warn, crit)
    return result["exit_code"], text


def _history(request: CheckRequest, path: str, measured: list[NodeHealth],
             notes: _Notes) -> dict[str, Any]:
    """Append this run's records and apply the trend rule; problems go to
    ``notes``, never out as an exception."""
    answered = [item for item in measured if "values" in item]
    now = time.time()
    try:
        hist.append(path, [hist.record(item["node"],
                                                  item["values"], now)
                                      for item in answered])
    except hist.HistoryError as exc:
        notes.problems.append(f"history {path} not written: {exc}")
    rises = request.trend or hist.DEFAULT_TREND
    try:
        records, notes.history_skipped = hist.load_tail(
            path, [item["node"] for item in answered], rises + 1)
    except OSError as exc:
        notes.problems.append(f"history {path} not read: "
                              f"{exc.strerror or exc}")
        return {}
    return {node: hist.trend(items, rises) for node, items in records.items()}


def _measure(attach: Callable[[], Any], cluster: bool, jobs: int,
             timeout: float) -> list[NodeHealth]:
    """The figures, within ``timeout`` for the whole: connecting (at most
    all of it), then each call within what is left."""
    from beam_probe.probes import health

    deadline = time.monotonic() + timeout
    with attach() as remote:
        remote.timeout = max(0.1, deadline - time.monotonic())
        if cluster:
            return health.measure_cluster(remote, timeout, jobs, deadline)
        return [health.measure(remote, jobs)]


def _unknown(fmt: str, why: str) -> str:
    if fmt == "json":
        return to_json({"status": "UNKNOWN", "exit_code": UNKNOWN,
                        "error": why, "nodes": []})
    return f"BEAM UNKNOWN - {why}"


__all__ = ["CheckRequest", "run_check"]
