"""calls and senders as text: the ranked counts, redrawn in place on a
terminal (frame), a block a interval when piped with --format table (line),
and the summary at the end."""

from __future__ import annotations

from typing import Any

from beam_probe.text.syntax import ERLANG, Syntax, choose
from beam_probe.text.tables import table

# Why a trace ended, said after "ended by".
_ENDED = {
    "duration": "--duration",
    "max": "--max: the calls counted reached it",
    "rate": "--rate: more calls a second than it allows; the trace stopped "
            "itself (exit 14)",
    "overload": "overload: the tracer's mailbox or memory passed its bound; "
                "the trace stopped itself (exit 14)",
    "interrupted": "Ctrl-C",
    "removed": "another tool: it took the trace away (destroyed its "
               "session, cleared its flags); the counts stop there "
               "(exit 14)",
}


def _atom(text: str, syntax: Syntax) -> str:
    if not syntax.elixir:
        return text
    from beam_probe.probes.atoms import elixir_atom

    return elixir_atom(text.strip("'")) if not text.startswith("'") \
        else elixir_atom(text[1:-1])


def shape(item: dict[str, Any], syntax: Syntax) -> str:
    """One shape (an argument, a message) in a few characters: a value
    where the node sent one, else its kind ({put,_,_}, list, map...)."""
    kind = item.get("kind")
    if kind == "atom" and "value" in item:
        return _atom(item["value"], syntax)
    if "value" in item:
        return str(item["value"])
    if kind == "tuple":
        size = item.get("size", 0)
        tag = _atom(item["tag"], syntax) if "tag" in item else "_"
        if size == 0:
            return "{}"
        if size <= 4:
            return "{" + ", ".join([tag] + ["_"] * (size - 1)) + "}"
        return f"{{{tag}, ...}} ({size} elements)"
    if kind == "list":
        return "[]" if item.get("empty") else "[...]"
    return str(kind)


def key_text(row: dict[str, Any], by: str, syntax: Syntax) -> str:
    """What a row counts, in words."""
    if by == "caller":
        if row.get("tail_call"):
            return "(tail call: caller unknown)"
        text = syntax.code(str(row["caller"]))
        return f"{text}  {row['line']}" if row.get("line") else text
    if by == "args":
        return ", ".join(shape(a, syntax) for a in row["args"])
    pid = row.get("process") or row.get("sender") or ""
    who = syntax.name(row.get("name")) or (
        syntax.code(row["initial_call"]) if row.get("initial_call") else "")
    text = f"{syntax.code(pid)} {who}".rstrip()
    if by == "shape" and "shape" in row:
        text += f"  {shape(row['shape'], syntax)}"
    return text


_HEADS = {"caller": "caller", "process": "process", "args": "arguments",
          "sender": "sender", "shape": "sender  message"}


def rows_table(rows: list[dict[str, Any]], by: str, syntax: Syntax) -> str:
    return table(("count", "share", "per s", _HEADS[by]),
                 [(f"{r['count']:,}", f"{100 * r['share']:.1f}%",
                   f"{r['per_s']:,.0f}", key_text(r, by, syntax))
                  for r in rows], "rrrl")


def _what(live_or_summary: Any) -> str:
    kind = getattr(live_or_summary, "kind", None) or \
        live_or_summary.get("command")
    traced = getattr(live_or_summary, "what", None) or \
        live_or_summary.get("traced")
    if kind == "calls":
        return f"calls of {traced}"
    return f"messages sent to {traced}"


def _syntax(live: Any) -> Syntax:
    wanted = getattr(live, "syntax_wanted", "erlang")
    return choose(wanted, lambda: bool(getattr(live, "elixir", False)))


def frame(live: Any, width: int, height: int, colour: bool = False
          ) -> list[str]:
    """The live view: what is traced, the counts so far, ranked."""
    syntax = _syntax(live)
    how = "a trace session of its own" if live.mode == "session" \
        else "erlang:trace/3"
    rate = live.total / live.elapsed if live.elapsed else 0.0
    head = (f"{live.node}: {_what(live)} by {live.by}, "
            f"{live.elapsed:.1f} s of {live.duration:g} s, "
            f"{live.total:,} counted ({rate:,.0f}/s); {how}")
    lines = [head[:width]]
    rows = live.ranked(name=False)
    if not rows:
        return lines + ["nothing counted yet"]
    room = max(1, height - 4)
    lines += [line[:width] for line in
              rows_table(rows[:room], live.by, syntax).split("\n")]
    if live.other:
        lines.append(f"and {live.other:,} more under keys not shown"[:width])
    unit = "calls" if live.kind == "calls" else "messages"
    lines.append(f"stops at {live.duration:g} s, {live.max_calls:,} {unit} "
                 f"or {live.rate:,}/s"[:width])
    return lines


def line(sample: dict[str, Any], syntax: Syntax = ERLANG) -> str:
    """One interval's ranking, as text (piped, --format table)."""
    by = sample.get("by", "caller")
    return (f"{sample['elapsed']:.1f} s: {sample['counted']:,} counted\n"
            + rows_table(sample["rows"], by, syntax) + "\n")


def summary_text(summary: dict[str, Any], syntax: Syntax = ERLANG) -> str:
    per_s = summary["per_s"]
    head = (f"\n{summary['counted']:,} {_what(summary)} counted on "
            f"{summary['node']} in {summary['elapsed']:.1f} s "
            f"({per_s:,.0f}/s), ended by "
            f"{_ENDED.get(summary['ended_by'], summary['ended_by'])}")
    target = summary.get("target")
    if target:
        who = syntax.name(target.get("name")) or ""
        head += f"\nreceiver: {syntax.code(target['pid'])} {who}".rstrip()
    if not summary["rows"]:
        return head + "\nnothing was counted"
    text = head + "\n" + rows_table(summary["rows"], summary["by"], syntax)
    if summary.get("other"):
        text += (f"\nand {summary['other']:,} more under keys not shown "
                 "(the node sends at most 5,000 a interval)")
    if any(r.get("tail_call") for r in summary["rows"]):
        text += ("\ntail call: the function was called as the last thing "
                 "its caller did, so its caller is not on the stack")
    return text


__all__ = ["frame", "key_text", "line", "rows_table", "shape",
           "summary_text"]
