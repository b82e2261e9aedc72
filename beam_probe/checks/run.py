"""One check run, from thresholds to output text and exit code.

Plugin rules: every outcome is printed on stdout in the chosen format with
its status, and the exit code is the status: 0 OK, 1 WARNING, 2 CRITICAL,
3 UNKNOWN. Bad thresholds are UNKNOWN; a node that cannot be reached is
CRITICAL (and, with --textfile, beam_probe_up 0 is still written, so an
alert can fire on it).
"""

from __future__ import annotations

from typing import Any, Callable

from ..errors import ProbeError, UsageError
from ..render import to_json
from . import history as hist
from . import report as rep
from .thresholds import UNKNOWN, ThresholdError, parse_all


def run_check(attach: Callable[[], Any], node_arg: str | None,
              warn_specs: tuple[str, ...], crit_specs: tuple[str, ...],
              fmt: str, textfile: str | None, history: str | None,
              trend: int | None, cluster: bool, jobs: int,
              timeout: float) -> tuple[int, str]:
    try:
        warn, crit = parse_all(warn_specs), parse_all(crit_specs)
    except ThresholdError as exc:
        return UNKNOWN, _unknown(fmt, str(exc))
    try:
        measured = _measure(attach, cluster, jobs, timeout)
    except UsageError as exc:
        return UNKNOWN, _unknown(fmt, str(exc))
    except ProbeError as exc:
        # Unreachable, refused, cookie rejected, timed out: CRITICAL.
        measured = [{"node": node_arg or "(node)",
                     "error": f"{exc.label}: {exc}"}]
    trends: dict[str, Any] = {}
    if history:
        try:
            answered = [item for item in measured if "values" in item]
            for item in answered:
                hist.append(history, item["node"], item["values"])
            records = hist.load_all(history)
            for item in answered:
                trends[item["node"]] = hist.trend(
                    records.get(item["node"], []),
                    trend or hist.DEFAULT_TREND)
        except OSError as exc:
            return UNKNOWN, _unknown(fmt, f"history file {history}: "
                                          f"{exc.strerror or exc}")
    result = rep.judge(measured, warn, crit, trends)
    if textfile:
        try:
            rep.write_atomically(textfile, rep.prometheus(result))
        except OSError as exc:
            return UNKNOWN, _unknown(fmt, f"textfile {textfile}: "
                                          f"{exc.strerror or exc}")
    if fmt == "json":
        text = to_json(result)
    elif fmt == "prometheus":
        text = rep.prometheus(result).rstrip("\n")
    else:
        text = rep.nagios(result, warn, crit)
    return result["exit_code"], text


def _measure(attach: Callable[[], Any], cluster: bool, jobs: int,
             timeout: float) -> list[dict[str, Any]]:
    from ..probes import health

    with attach() as remote:
        if cluster:
            return health.measure_cluster(remote, timeout, jobs)
        return [health.measure(remote, jobs)]


def _unknown(fmt: str, why: str) -> str:
    if fmt == "json":
        return to_json({"status": "UNKNOWN", "exit_code": UNKNOWN,
                        "error": why, "nodes": []})
    return f"BEAM UNKNOWN - {why}"


__all__ = ["run_check"]
