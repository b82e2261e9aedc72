"""Text for snapshot, diff and leak-hunt: memwatch's HeapDiff as tables,
the three-snapshot suspects first."""

from __future__ import annotations

import os
import re
import shlex
from typing import Any

from beam_probe.files import shell_path
from beam_probe.text.syntax import Syntax
from beam_probe.text.tables import human_bytes, table

SHOWN = 20
# A table's id as snapshots write it: a named table's name, else its ref.
_BARE_ATOM = re.compile(r"[a-z][A-Za-z0-9_@]*")
_TABLE_REF = re.compile(r"#Ref<\d+\.\d+\.\d+\.\d+>")
# Example pids a table shows per group (JSON has up to 10).
EXAMPLES_SHOWN = 3


def _examples(entry: dict[Any, Any]) -> str:
    return " ".join(entry.get("examples", [])[:EXAMPLES_SHOWN])


def _signed_bytes(n: int) -> str:
    return ("+" if n >= 0 else "") + human_bytes(n)


def _count(n: Any) -> str:
    """A count as every table and line writes one: 1,972 (None: "-")."""
    return "-" if n is None else f"{n:,}"


def _signed(n: int) -> str:
    return f"{n:+,}"


def _atoms_change(before: Any, after: Any, atoms: dict[Any, Any]) -> str:
    """after - before, as the row shows both; the atoms our own node names
    made (one per pool name the node meets) said apart, since the
    suspects leave them out: '46549 -> 46550' read '+0' before."""
    change = _signed(after - before) if isinstance(before, int) and \
        isinstance(after, int) else _signed(atoms["added"])
    ours = atoms.get("ours", 0)
    return change + (f" ({ours:,} beam-probe's)" if ours else "")


def snapshot_text(result: dict[Any, Any], syntax: Syntax) -> str:
    unread = _unread(result.get("dictionaries_unread"),
                     result.get("dictionary_heap_cap"))
    return (f"{result['node']}: {_count(result['processes'])} processes, "
            f"{_count(result['ets_tables'])} ETS tables, "
            f"{_count(result['ports'])} ports "
            f"(after --gc {result['gc']}) written to {result['file']} "
            f"({human_bytes(result['bytes'])})"
            + (f"\n{unread}" if unread else ""))


def _unread(counts: Any, cap: Any) -> str:
    """One line saying how many proc_lib processes a snapshot left
    grouped as proc_lib:init_p/N, their heap past the cap on copying a
    dictionary (OTP 25); "" when none. ``counts``: one count, or one a
    snapshot (None where a file does not say)."""
    if not isinstance(counts, list):
        counts = [counts]
    if not any(isinstance(n, int) and n > 0 for n in counts):
        return ""
    shown = ", ".join("?" if n is None else _count(n) for n in counts)
    limit = human_bytes(cap) if isinstance(cap, int) else "the cap"
    return (f"unnamed: {shown} proc_lib processes"
            + (" in the snapshots" if len(counts) > 1 else "")
            + f" stay proc_lib:init_p/N (a heap over {limit}: their "
            "dictionaries, where '$initial_call' names them, were not "
            "copied)")


def diff_text(result: dict[Any, Any], syntax: Syntax, look: bool = True) -> str:
    """A diff of snapshot files; of snapshot folders (--cluster), the view
    across the nodes and then each node's (cluster_diff_text)."""
    if "across" in result:
        return cluster_diff_text(result, syntax)
    before, after = result["before"], result["after"]
    parts = [f"{after['node']}: {before['time']} -> "
             + (f"{result['middle']['time']} -> " if "middle" in result
                else "") + f"{after['time']}"]
    shown = [before] + ([result["middle"]] if "middle" in result
                        else []) + [after]
    unread = _unread([s.get("dictionaries_unread") for s in shown],
                     next((s["dictionary_heap_cap"] for s in shown
                           if s.get("dictionary_heap_cap")), None))
    if unread:
        parts.append(unread)
    if "suspects" in result:
        dump = after.get("crash_dump")
        parts.append(_suspects(result["suspects"], shell_path(dump)
                               if dump else after["node"], look, syntax,
                               dead=bool(dump)))
    rows = [(kind, human_bytes(before["memory"][kind] or 0),
             human_bytes(after["memory"][kind] or 0),
             _signed_bytes(result["change"]["memory"][kind]))
            for kind in result["change"]["memory"]]
    for label, key in (("processes", "processes"),
                       ("ETS tables", "ets_tables"), ("ports", "ports")):
        rows.append((label, _count(before[key]), _count(after[key]),
                     _signed(after[key] - before[key])))
    rows.append(("atoms", _count(before["atoms"]), _count(after["atoms"]),
                 _atoms_change(before["atoms"], after["atoms"],
                               result["atoms"])))
    parts.append("memory\n" + table(("", "before", "after", "change"), rows,
                                   "lrrr", syntax))
    details = [d for d in result["change"]["details"]
               if d["+"] or d["-"] or d["size_bytes"] or d["binary_bytes"]]
    if details:
        parts.append(
            "by group (HeapDiff: + born, - died, change in bytes)\n"
            + table(("what", "before", "after", "+", "-", "memory",
                     "binary", "examples"),
                    [(d["what"], _count(d["before"]), _count(d["after"]),
                      _count(d["+"]), _count(d["-"]),
                      _signed_bytes(d["size_bytes"]),
                      _signed_bytes(d["binary_bytes"]), _examples(d))
                     for d in details[:SHOWN]], "lrrrrrrl", syntax)
            + (f"\n... and {len(details) - SHOWN:,} more groups"
               if len(details) > SHOWN else ""))
    if result["ets"]:
        parts.append("ETS tables new or grown\n" + table(
            ("table", "owner", "rows", "bytes", ""),
            [(t["name"], t["owner"],
              f"{_count(t['rows_before'])} -> {_count(t['rows_after'])}",
              f"{human_bytes(t['bytes_before'])} -> "
              f"{human_bytes(t['bytes_after'])}",
              "new" if t["new"] else "")
             for t in result["ets"][:SHOWN]], "llrrl", syntax))
    atoms = result["atoms"]
    if atoms["added"]:
        names = syntax.code(", ".join(atoms["names"][:10]))
        parts.append(f"atoms: {_signed(atoms['added'])}"
                     + (f" ({names}{', ...' if len(atoms['names']) > 10 else ''})"
                        if names else ""))
    ports = result["ports"]
    if ports["new_count"]:
        parts.append(f"ports: {ports['new_count']:,} new "
                     f"({', '.join(ports['new'][:10])})")
    return "\n\n".join(parts)


def _inside(node: str, pid: str) -> str:
    """The step after proc-info for a suspect process: what in its state,
    dictionary or mailbox holds the memory."""
    return (f"  what it holds: beam-probe inspect {node} '{pid}' (its "
            "state's parts by size, pinned binaries named)")


def _table_arg(t: dict[Any, Any]) -> str | None:
    """A suspect table as inspect --table takes it, for a shell: its id,
    which for a named table is its name (an atom, bare or quoted as
    Erlang writes it) and for another its #Ref<...>; None if unknown."""
    ident = t.get("id")
    if not isinstance(ident, str) or not ident:
        return None
    if _BARE_ATOM.fullmatch(ident) or (
            len(ident) > 2 and ident[0] == ident[-1] == "'"
            and "'" not in ident[1:-1]):
        return ident
    if _TABLE_REF.fullmatch(ident):
        return f"'{ident}'"
    return None


def _shell_arg(text: str) -> str:
    """``text`` as one shell word, the plainest way: 'a, _' as a rule,
    "'my tab', _" for a quoted atom."""
    if "'" not in text:
        return f"'{text}'"
    if not re.search(r'["$`\\!]', text):
        return f'"{text}"'
    return shlex.quote(text)


def _who_fills_table(t: dict[Any, Any], node: str) -> str:
    """The step after inspect --table: the code that inserts into it,
    named by calls (issue 40). A named table's name narrows ets:insert/2
    on the node; an unnamed one's id (a reference) cannot be written in a
    match, so its inserts are counted by process, its owner the first
    to look at."""
    ident = _table_arg(t)
    if ident and not _TABLE_REF.fullmatch(ident.strip("'")):
        return (f"  who fills it: beam-probe calls {node} ets:insert/2 "
                f"--match {_shell_arg(ident + ', _')} (its inserts, by "
                "the function calling)")
    owner = t.get("owner")
    return ("  who fills it: " + (f"its owner {owner}, or another process: "
                                  if owner else "")
            + f"beam-probe calls {node} ets:insert/2 --by process (every "
            "table's inserts, by process)")


def _who_feeds(row: dict[Any, Any], node: str, syntax: Syntax) -> str:
    """The step after inspect for a process that grew: the messages it is
    sent, by sender and shape (senders, issue 40). What fills a state or
    a mailbox arrives as messages. By its registered name when it has a
    plain one (the name outlives a restart), else its pid."""
    name = row.get("name")
    if isinstance(name, str) and _BARE_ATOM.fullmatch(name):
        who = syntax.name(name) or name
    else:
        who = f"'{syntax.code(row['pid'])}'"
    return (f"  who feeds it: beam-probe senders {node} {who} (the "
            "messages it is sent, by sender)")


def _who_makes_atoms(node: str, syntax: Syntax) -> str:
    """Atoms rising: the code that makes them (calls, issue 40).
    Elixir's String.to_atom/1 calls erlang:binary_to_atom/2, Erlang code
    list_to_atom/1 most often: the node's language goes first."""
    functions = ["erlang:list_to_atom/1", "erlang:binary_to_atom/2"]
    if syntax.elixir:
        functions.reverse()
    return (f"  who makes them: beam-probe calls {node} {functions[0]} "
            f"(or {functions[1]})")


def _suspects(s: dict[Any, Any], node: str, look: bool, syntax: Syntax,
              dead: bool = False) -> str:
    """The suspects; ``node`` is where to look closer (a crash dump's path
    when the node is ``dead``: no trace of its collections then)."""
    lines = ["SUSPECTS (three-snapshot rule)"]
    found = False
    if s["born_and_kept"]:
        found = True
        lines.append("born between the first and second snapshots, still "
                     "alive at the third:\n" + table(
                         ("what", "count", "memory", "binary", "growth",
                          "examples"),
                         [(e["what"], _count(e["count"]),
                           human_bytes(e["bytes"]),
                           human_bytes(e["binary_bytes"]),
                           _signed_bytes(e["growth"]), _examples(e))
                          for e in s["born_and_kept"][:SHOWN]], "lrrrrl",
                         syntax))
        if look:
            first = s["born_and_kept"][0]
            if first.get("examples"):
                pid = syntax.code(first["examples"][0])
                lines.append(f"  look closer: beam-probe proc-info {node} "
                             f"'{pid}'")
                lines.append(_inside(node, pid))
    if s["growing_processes"]:
        found = True
        lines.append("long-lived processes that grew in both intervals:\n"
                     + table(("pid", "what", "memory", "binary"),
                             [(r["pid"], r["name"] or r["what"],
                               " -> ".join(human_bytes(v)
                                           for v in r["memory"]),
                               " -> ".join(human_bytes(v)
                                           for v in r["binary_bytes"]))
                              for r in s["growing_processes"][:SHOWN]],
                             "llrr", syntax))
        if look:
            first = s["growing_processes"][0]
            pid = syntax.code(first["pid"])
            lines.append(f"  look closer: beam-probe proc-info {node} "
                         f"'{pid}'" + ("" if dead else
                                       f"; its collections: beam-probe "
                                       f"trace-gc {node} '{pid}'"))
            lines.append(_inside(node, pid))
            if not dead:
                lines.append(_who_feeds(first, node, syntax))
    if s["groups_rising"]:
        found = True
        lines.append("groups whose count rose in both intervals:\n" + table(
            ("what", "counts", "examples"),
            [(g["what"], " -> ".join(_count(n) for n in g["counts"]),
              _examples(g))
             for g in s["groups_rising"][:SHOWN]], "lll", syntax))
    if s["ets"]:
        found = True
        lines.append("ETS tables born and kept, or growing in both "
                     "intervals:\n" + table(
                         ("table", "owner", "rows", "bytes"),
                         [(t["name"], t["owner"],
                           " -> ".join(_count(v) for v in t["rows"]),
                           " -> ".join("-" if v is None else human_bytes(v)
                                       for v in t["bytes"]))
                          for t in s["ets"][:SHOWN]], "llrr", syntax))
        if look:
            # A dead node's tables keep no objects: no inspect --table.
            table_arg = None if dead else _table_arg(s["ets"][0])
            lines.append(
                "  look closer: "
                + (f"beam-probe inspect {node} --table {table_arg} (what "
                   "its objects hold); " if table_arg else "")
                + f"beam-probe ets {node} (the largest tables now, with "
                "their owners)")
            if not dead:
                lines.append(_who_fills_table(s["ets"][0], node))
    if s["ports_born_and_kept"]:
        found = True
        lines.append("ports born and kept: "
                     + ", ".join(s["ports_born_and_kept"][:10]))
    if s["atoms"]["rising"]:
        found = True
        lines.append(f"atoms added in both intervals: "
                     f"{_signed(s['atoms']['added'][0])}, "
                     f"{_signed(s['atoms']['added'][1])}")
        if look and not dead:
            lines.append(_who_makes_atoms(node, syntax))
    if not found:
        lines.append("none: nothing made between the first two snapshots "
                     "outlived the third, and nothing grew through both "
                     "intervals")
    return "\n".join(lines)


def leak_hunt_text(result: dict[Any, Any], syntax: Syntax) -> str:
    head = (f"{result['node']}: {result['taken']} snapshots, "
            f"{result['interval']:g} s apart, after --gc {result['gc']}"
            + (" (interrupted)" if result.get("interrupted") else "")
            + (f"; saved in {result['saved']}" if result.get("saved")
               else ""))
    if result.get("diff") is None:
        return head + "\nfewer than two snapshots: nothing to compare"
    return head + "\n\n" + diff_text(result["diff"], syntax)


# -- the cluster (--cluster): a file per node, compared node by node -------

def cluster_snapshot_text(result: dict[Any, Any], syntax: Syntax) -> str:
    rows = [(n["node"], _count(n["processes"]), _count(n["ets_tables"]),
             _count(n["ports"]),
             human_bytes(n["bytes"]), os.path.basename(n["file"]))
            for n in result["nodes"] if "error" not in n]
    lines = [f"cluster through {result['entry']}: {len(rows)} of "
             f"{len(result['nodes'])} nodes written to {result['folder']}",
             "", table(("node", "processes", "ETS tables", "ports", "size",
                        "file"), rows, "lrrrrl", syntax)] if rows else [
        f"cluster through {result['entry']}: no node answered"]
    lines += [f"{n['node']} did not answer: {n['error']}"
              for n in result["nodes"] if "error" in n]
    return "\n".join(lines)


def across_text(across: dict[Any, Any], syntax: Syntax) -> str:
    """The groups of every node side by side: on every node (an
    application's leak) first, on one node (that node's own state) last."""
    what = ("born between the first and second snapshots and kept at the "
            "third" if across["basis"] == "born_and_kept"
            else "grown in number")
    if not across["groups"]:
        return f"across the {across['nodes']} nodes: no group {what}"
    rows = [(g["what"], g["on"], ", ".join(
        f"{node} {_signed(count)}" if across["basis"] == "grew"
        else f"{node} {_count(count)}" for node, count in g["nodes"].items()))
        for g in across["groups"]]
    more = across.get("groups_total", len(rows)) - len(rows)
    return (f"across the {across['nodes']} nodes: groups {what}\n"
            + table(("what", "on", "per node"), rows, "lll", syntax)
            + (f"\n... and {more:,} more groups" if more > 0 else ""))


def cluster_diff_text(result: dict[Any, Any], syntax: Syntax) -> str:
    parts = [across_text(result["across"], syntax)]
    for row in result["nodes"]:
        if row.get("diff") is not None:
            parts.append(f"== {row['node']}\n"
                         + diff_text(row["diff"], syntax))
        if "error" in row:
            parts.append(f"{row['node']}: {row['error']}")
    return "\n\n".join(parts)


def cluster_leak_hunt_text(result: dict[Any, Any], syntax: Syntax) -> str:
    head = (f"cluster through {result['entry']}: {result['taken']} rounds "
            f"of snapshots of {len(result['nodes'])} nodes, "
            f"{result['interval']:g} s apart, after --gc {result['gc']}"
            + (" (interrupted)" if result.get("interrupted") else "")
            + f"; saved in {result['saved']}")
    if not any(r.get("diff") for r in result["nodes"]):
        return head + "\nfewer than two snapshots of any node: nothing to " \
            "compare"
    return head + "\n\n" + cluster_diff_text(result, syntax)


__all__ = ["across_text", "cluster_diff_text", "cluster_leak_hunt_text",
           "cluster_snapshot_text", "diff_text", "leak_hunt_text",
           "snapshot_text"]
