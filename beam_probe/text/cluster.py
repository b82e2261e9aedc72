"""The cluster's answers as text (--cluster): first a line a node (its own
figures, or why it did not answer), then one table of every node's rows,
each naming its node. Pids are as their own node prints them: paste one
with its node into proc-info or trace-gc.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Sequence

from beam_probe.text.node import (BIN_LEAK_NOTE, DISTINCT_NOTE, figure,
                                  heading,
                                  labels_note, process_rows, unnamed_note,
                                  verdict_text)
from beam_probe.text.syntax import Syntax
from beam_probe.text.tables import human_bytes, table

if TYPE_CHECKING:
    from beam_probe.probes.results import (ClusterAlloc, ClusterBinLeak,
                                           ClusterEts, ClusterProcCount,
                                           ClusterProcWindow)


def _failed(node: Any) -> bool:
    return "error" in node


def _answered(nodes: Sequence[Any]) -> list[Any]:
    return [n for n in nodes if not _failed(n)]


def _head(entry: str, nodes: Sequence[Any], what: str) -> str:
    answered = len(_answered(nodes))
    told = (f"all {len(nodes)} answered" if answered == len(nodes)
            else f"{answered} of {len(nodes)} answered")
    return f"cluster through {entry}: {what}; {len(nodes)} nodes, {told}"


def _nodes(nodes: Sequence[Any], headers: tuple[str, ...], align: str,
           cells: Callable[[Any], tuple[Any, ...]], syntax: Syntax) -> str:
    """A row for each node that answered, its figures; then a line for
    each that did not, saying why."""
    answered = _answered(nodes)
    lines = [table(headers, [(n["node"], *cells(n)) for n in answered],
                   align, syntax)] if answered else []
    lines += [f"{n['node']} did not answer: {n['error']}"
              for n in nodes if _failed(n)]
    return "\n".join(lines)


def _with_node(rows: list[tuple[Any, ...]], processes: Sequence[Any]
               ) -> list[tuple[Any, ...]]:
    return [(p["node"], *row) for p, row in zip(processes, rows)]


def proc_count_text(result: ClusterProcCount, syntax: Syntax) -> str:
    attribute = result["attribute"]
    scanned = sum(n["scanned"] for n in _answered(result["nodes"]))
    lines = [_head(result["entry"], result["nodes"],
                   f"top {len(result['processes'])} of {scanned:,} "
                   f"processes by {attribute}"),
             "",
             _nodes(result["nodes"], ("node", "processes"), "lr",
                    lambda n: (f"{n['scanned']:,}",), syntax),
             ""]
    if result["processes"] and not any(p["value"]
                                       for p in result["processes"]):
        lines.append(f"{attribute} is 0 for every process that answered")
    else:
        distinct = attribute == "binary_memory"
        lines.append(table(
            ("node", "pid", heading(attribute),
             *(("distinct",) if distinct else ()),
             "name", "current function", "initial call"),
            _with_node(process_rows(result["processes"], "value", syntax,
                                    attribute),
                       result["processes"]),
            "llrrlll" if distinct else "llrlll", syntax))
        note = labels_note(result, [
            n["node"] for n in _answered(result["nodes"])
            if not n.get("labels_read", True)])
        notes = ([DISTINCT_NOTE] if distinct else []) + \
            ([note] if note else [])
        # Each node's rows left unnamed (the cap or the budget), a line each.
        notes += [f"{n['node']}: {unnamed}"
                  for n in _answered(result["nodes"])
                  for unnamed in (unnamed_note(n),) if unnamed]
        # After a blank line: a table ends at one.
        lines += [""] * bool(notes) + [f"({n})" for n in notes]
    return "\n".join(lines)


def bin_leak_text(result: ClusterBinLeak, syntax: Syntax) -> str:
    def freed(n: Any) -> tuple[Any, ...]:
        before, after = n["memory_before"], n["memory_after"]
        drop = before["binary"] - after["binary"]
        return (f"{n['scanned']:,}", f"{n['holders']:,}",
                f"{n['collected']:,}",
                f"{human_bytes(before['binary'])} -> "
                f"{human_bytes(after['binary'])}",
                human_bytes(drop) if drop >= 0
                else f"grew {human_bytes(-drop)}")
    lines = [_head(result["entry"], result["nodes"],
                   "refc binary references freed by a garbage collection "
                   "(recon:bin_leak on each node)"),
             "",
             _nodes(result["nodes"], ("node", "scanned", "holders",
                                      "collected", "binary memory",
                                      "freed"), "lrrrrr", freed, syntax),
             ""]
    if result["processes"] and not any(p["delta"]
                                       for p in result["processes"]):
        lines.append("no process dropped a refc binary reference when "
                     "collected: nothing held one idle")
    else:
        distinct = any("binary_distinct" in p for p in result["processes"])
        lines.append(table(
            ("node", "pid", "delta", *(("distinct",) if distinct else ()),
             "name", "current function", "initial call"),
            _with_node(process_rows(result["processes"], "delta", syntax),
                       result["processes"]),
            "llrrlll" if distinct else "llrlll", syntax))
        if distinct:
            lines += ["", f"({BIN_LEAK_NOTE})"]
    return "\n".join(lines)


def proc_window_text(result: ClusterProcWindow, syntax: Syntax) -> str:
    attribute = result["attribute"]
    lines = [_head(result["entry"], result["nodes"],
                   f"largest increases of {attribute} over "
                   f"{result['window_ms']} ms (recon:proc_window on each "
                   "node)"),
             "",
             _nodes(result["nodes"], ("node", "scanned first", "last",
                                      "born", "dead"), "lrrrr",
                    lambda n: (f"{n['scanned_first']:,}",
                               f"{n['scanned_last']:,}",
                               f"{n['born_count']:,}",
                               f"{n['dead_count']:,}"), syntax),
             ""]
    if any(p["delta"] for p in result["processes"]):
        lines.append(table(
            ("node", "pid", "increase", "name", "current function",
             "initial call"),
            _with_node(process_rows(result["processes"], "delta", syntax,
                                    attribute),
                       result["processes"]), "llrlll", syntax))
    else:
        lines.append(f"no process's {attribute} changed over the window on "
                     "any node that answered: nothing to rank")
    if result["born"]:
        lines += ["", "born inside the window (value at the end, largest "
                      "first):",
                  table(("node", "pid", heading(attribute), "name",
                         "current function", "initial call"),
                        _with_node(process_rows(result["born"], "value",
                                                syntax, attribute),
                                   result["born"]),
                        "llrlll", syntax)]
    if result["dead"]:
        lines += ["", "dead inside the window (value at the start, largest "
                      "first):",
                  table(("node", "pid", heading(attribute)),
                        [(p["node"], p["pid"], figure(attribute, p["value"]))
                         for p in result["dead"]], "llr", syntax)]
    return "\n".join(lines)


def ets_text(result: ClusterEts, syntax: Syntax) -> str:
    tables = sum(n["tables"] for n in _answered(result["nodes"]))
    lines = [_head(result["entry"], result["nodes"],
                   f"the {len(result['largest'])} largest of {tables:,} ETS "
                   f"tables by {result['sort']}"),
             "",
             _nodes(result["nodes"], ("node", "tables", "all tables"), "lrr",
                    lambda n: (f"{n['tables']:,}",
                               human_bytes(n["total_memory"])), syntax),
             "",
             table(("node", "table", "id", "owner", "owner is", "objects",
                    "memory", "type", "access"),
                   [(t["node"], t["name"], t["id"], t["owner"],
                     syntax.name(t["owner_name"]) or t["owner_group"],
                     f"{t['size']:,}", human_bytes(t["memory"]), t["type"],
                     t["protection"]) for t in result["largest"]],
                   "lllllrrll", syntax)]
    return "\n".join(lines)


def alloc_text(result: ClusterAlloc, syntax: Syntax) -> str:
    lines = [_head(result["entry"], result["nodes"],
                   "memory allocators, each node's verdict its own"),
             "",
             _nodes(result["nodes"], ("node", "verdict", "allocated",
                                      "used", "usage", "RSS"), "llrrrr",
                    lambda n: (n["verdict"]["case"].replace("_", " "),
                               human_bytes(n["allocated"]),
                               human_bytes(n["used"]), f"{n['usage']:.0%}",
                               human_bytes(n["rss"]) if n["rss"] is not None
                               else "unknown"), syntax),
             ""]
    lines += [f"{n['node']}: {verdict_text(n['verdict'])}"
              for n in _answered(result["nodes"])]
    return "\n".join(lines)


__all__ = ["alloc_text", "bin_leak_text", "ets_text", "proc_count_text",
           "proc_window_text"]
