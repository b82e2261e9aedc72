"""A check's outcome as a monitoring system reads it: the Nagios plugin
line with perfdata, one JSON object, or a node_exporter textfile."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from beam_probe.checks.thresholds import (BYTES, CRITICAL, KEYS, OK, PERCENT, STATUS_NAMES,
                         UNKNOWN, WARNING, evaluate, show)

_STATUS_CODES = {name: code for code, name in STATUS_NAMES.items()}


def judge(measured: Sequence[Mapping[str, Any]], warn: dict[str, float],
          crit: dict[str, float],
          trends: dict[str, dict[str, Any] | None]) -> dict[str, Any]:
    """Status per node and overall: the worst decides. A node that did not
    answer is CRITICAL, one that answered with figures no node has
    ("unjudged") UNKNOWN; a firing trend rule is at least WARNING."""
    rows = []
    for item in measured:
        row = dict(item)
        if "error" in item:
            row["status"] = UNKNOWN if item.get("unjudged") else CRITICAL
            row["problems"] = [item["error"]]
        else:
            row["status"], row["problems"] = evaluate(item["values"], warn,
                                                      crit)
            fired = trends.get(item["node"])
            if fired:
                row["trend"] = fired
                row["status"] = max(row["status"], WARNING)
                row["problems"].append(_trend_text(fired))
        rows.append(row)
    worst = max((row["status"] for row in rows), default=OK)
    return {"status": STATUS_NAMES[worst], "exit_code": worst,
            "nodes": [dict(row, status=STATUS_NAMES[row["status"]])
                      for row in rows]}


def with_problems(report: dict[str, Any], problems: list[str],
                  status: int) -> dict[str, Any]:
    """The report with problems of our own (a history file or textfile
    that could not be written) added to every node's, each node at least
    ``status``: the thresholds' verdict stays, nothing hides it."""
    nodes = []
    for row in report["nodes"]:
        code = max(_STATUS_CODES[row["status"]], status)
        nodes.append(dict(row, status=STATUS_NAMES[code],
                          problems=row["problems"] + problems))
    worst = max(_STATUS_CODES[row["status"]] for row in nodes)
    return dict(report, status=STATUS_NAMES[worst], exit_code=worst,
                nodes=nodes)


def _trend_text(fired: dict[str, Any]) -> str:
    growth = fired["growth_per_hour"]
    rate = (f", +{show('binary', growth)}/hour" if growth is not None
            else "")
    return (f"binary memory rose {fired['rises']} times in a row since "
            f"{fired['since']}{rate} (trend)")


# A holder's name in the summary: at most a top NAME cell's worth more
# (Nagios keeps the first line; a process_name is any term).
HOLDER_WIDTH = 60


def _holder(row: Mapping[str, Any], key: str) -> str:
    """` in <0.705.0> NAME` for the process behind a figure, NAME as
    top's NAME column writes it (registered name, label or process_name
    cut in the middle, else its initial call); "" where none is."""
    from beam_probe.text.tables import one_line
    from beam_probe.text.top import cut_middle

    holder = row.get(key)
    if not holder:
        return ""
    name = holder["name"] or holder["initial_call"]
    if name:
        # Nagios reads what follows the first "|" as perfdata; a label
        # is any term.
        name = one_line(name).replace("|", "¦")
    return f" in {holder['pid']}" + (
        f" {cut_middle(name, HOLDER_WIDTH)}" if name else "")


def _summary(row: Mapping[str, Any]) -> str:
    values = row["values"]
    return (f"binary {show('binary', values['binary'])} "
            f"({values['binary_share']:g}%), total "
            f"{show('total', values['total'])}, process_count "
            f"{values['process_count']:,}, top binary_memory "
            f"{show('top_binary_memory', values['top_binary_memory'])} "
            # Which figure (issue 38): the bytes one process holds, never
            # recon's per-reference sum, which a threshold on a process
            # would meet at 800 times the node's memory.
            "(each binary once)" + _holder(row, "top_binary_holder") +
            f", max_queue {values['max_queue']:,}"
            + _holder(row, "max_queue_holder") + ", atom_use "
            f"{values['atom_use']:g}%, top ets "
            f"{show('top_ets_memory', values['top_ets_memory'])}, "
            f"alloc_usage_min {values['alloc_usage_min']:g}%"
            + (f", rss {show('rss', values['rss'])}"
               if values.get("rss") is not None else ""))


def _perfdata(values: dict[str, Any], warn: dict[str, float],
              crit: dict[str, float], prefix: str = "") -> list[str]:
    out = []
    for key, unit in KEYS.items():
        value = values.get(key)
        if value is None:  # rss off Linux
            continue
        w = _number(warn.get(key))
        c = _number(crit.get(key))
        low, high = ("0", "100") if unit == PERCENT else ("0", "")
        uom = unit if unit in (BYTES, PERCENT) else ""
        out.append(f"'{prefix}{key}'={_number(value)}{uom};{w};{c};{low};"
                   f"{high}")
    return out


def _number(value: float | None) -> str:
    if value is None:
        return ""
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def nagios(report: dict[str, Any], warn: dict[str, float],
           crit: dict[str, float]) -> str:
    """First line: status, summary, perfdata. With several nodes, one more
    line per node (Nagios 'long output')."""
    nodes = report["nodes"]
    head = f"BEAM {report['status']} - "
    if len(nodes) == 1:
        row = nodes[0]
        text = f"{row['node']}: " + "; ".join(row["problems"])
        if "values" in row:
            text += ("; " if row["problems"] else "") + _summary(row)
            perf = _perfdata(row["values"], warn, crit)
            return head + text + " | " + " ".join(perf)
        return head + text
    bad = [row for row in nodes if row["status"] != "OK"]
    text = (f"{len(nodes) - len(bad)} of {len(nodes)} nodes OK"
            + "".join(f"; {row['node']} {row['status']}: "
                      f"{'; '.join(row['problems'])}" for row in bad))
    perf = [item for row in nodes if "values" in row
            for item in _perfdata(row["values"], warn, crit,
                                  f"{row['node']} ")]
    lines = [head + text + (" | " + " ".join(perf) if perf else "")]
    for row in nodes:
        detail = "; ".join(row["problems"] + ([_summary(row)]
                                              if "values" in row else []))
        lines.append(f"{row['node']} {row['status']}: {detail}")
    return "\n".join(lines)

# (metric name, help, value key or None for memory by type)
_METRICS = (
    ("beam_probe_binary_share_percent",
     "Binary memory as a percentage of total memory.", "binary_share"),
    ("beam_probe_process_count", "Number of processes.", "process_count"),
    ("beam_probe_top_binary_memory_bytes",
     "Most refc binary bytes one process references, each binary once.",
     "top_binary_memory"),
    ("beam_probe_max_message_queue_len",
     "Longest message queue of one process.", "max_queue"),
    ("beam_probe_atom_use_percent",
     "Atom count as a percentage of the atom limit.", "atom_use"),
    ("beam_probe_rss_bytes", "The node's resident memory (VmRSS).", "rss"),
    ("beam_probe_alloc_usage_min_percent",
     "Lowest used/allocated of the allocator types of 64 MiB or more "
     "(100 when none is that large).", "alloc_usage_min"),
    ("beam_probe_top_ets_memory_bytes",
     "Memory of the largest ETS table.", "top_ets_memory"),
)


def _label(value: str) -> str:
    # Prometheus text format: backslash, double quote and newline escaped.
    return (value.replace("\\", "\\\\").replace('"', '\\"')
            .replace("\n", "\\n"))


def prometheus(report: dict[str, Any]) -> str:
    """node_exporter textfile format: no timestamps, a node label on every
    sample, every family with HELP and TYPE once."""
    nodes = report["nodes"]
    lines = ["# HELP beam_probe_up Whether the node answered the check.",
             "# TYPE beam_probe_up gauge"]
    lines += [f'beam_probe_up{{node="{_label(r["node"])}"}} '
              f'{1 if "values" in r else 0}' for r in nodes]
    lines += ["# HELP beam_probe_status Check status: 0 OK, 1 WARNING, "
              "2 CRITICAL, 3 UNKNOWN.", "# TYPE beam_probe_status gauge"]
    lines += [f'beam_probe_status{{node="{_label(r["node"])}"}} '
              f'{_STATUS_CODES[r["status"]]}' for r in nodes]
    answered = [r for r in nodes if "values" in r]
    lines += ["# HELP beam_probe_memory_bytes erlang:memory() by type.",
              "# TYPE beam_probe_memory_bytes gauge"]
    for row in answered:
        for kind in ("total", "processes", "binary", "ets", "atom"):
            lines.append(f'beam_probe_memory_bytes{{node="'
                         f'{_label(row["node"])}",type="{kind}"}} '
                         f'{row["values"][kind]}')
    for name, text, key in _METRICS:
        lines += [f"# HELP {name} {text}", f"# TYPE {name} gauge"]
        lines += [f'{name}{{node="{_label(r["node"])}"}} {r["values"][key]}'
                  for r in answered if r["values"].get(key) is not None]
    # One series per allocator type and measure (about ten types), never
    # one per instance: the instances grow with the schedulers.
    lines += ["# HELP beam_probe_allocator_bytes Bytes in blocks (used) and "
              "in carriers (allocated) per allocator type.",
              "# TYPE beam_probe_allocator_bytes gauge"]
    for row in answered:
        for kind, figures in sorted(row.get("allocators", {}).items()):
            for measure in ("used", "allocated"):
                lines.append(f'beam_probe_allocator_bytes{{node="'
                             f'{_label(row["node"])}",allocator="'
                             f'{_label(kind)}",measure="{measure}"}} '
                             f'{figures[measure]}')
    return "\n".join(lines) + "\n"


def write_atomically(path: str, text: str) -> None:
    """The textfile, whole or not at all (files.write_whole): the collector
    never reads half a file."""
    from beam_probe.files import write_whole

    write_whole(path, [text.encode("utf-8")])
