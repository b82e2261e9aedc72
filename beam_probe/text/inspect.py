"""inspect's answers as text: a process's size tree and pinned binaries,
a table's key families. Paths in the node's syntax (the probe wrote
both; Syntax picks)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from beam_probe.probes.atoms import elixir_atom, erlang_atom
from beam_probe.text.syntax import Syntax
from beam_probe.text.tables import human_bytes, printable, table

if TYPE_CHECKING:
    from beam_probe.probes.results import ProcessInspection, TableInspection

# How a path is cut on screen (JSON keeps it whole).
PATH_WIDTH = 72
# After the kind of a part whose words are its own only (the probe's).
NOT_MEASURED = ", not measured"


def _kind(kind: str, syntax: Syntax) -> str:
    """'record state' as #state{}, 'tuple ok' (a tuple led by an atom) as
    {ok, ...}, 'struct Elixir.X' as %X{}; Elixir writes both tuples
    {:state, ...}. A part's ', not measured' stays after it."""
    if kind.endswith(NOT_MEASURED):
        return _kind(kind[:-len(NOT_MEASURED)], syntax) + NOT_MEASURED
    for word in ("record ", "tuple "):
        if kind.startswith(word):
            tag = kind[len(word):]
            if syntax.elixir:
                return "{" + elixir_atom(tag) + ", ...}"
            return f"#{tag}{{}}" if word == "record " else f"{{{tag}, ...}}"
    if kind.startswith("struct "):
        name = kind[len("struct "):]
        if not syntax.elixir:
            return f"#{{'__struct__' => {erlang_atom(name)}, ...}}"
        written = elixir_atom(name)
        # A tag no alias names is no module's struct: Elixir writes the map.
        return f"%{{__struct__: {written}, ...}}" \
            if written.startswith(":") \
            else f"%{written}{{}}"
    return kind


def _path(path: str) -> str:
    path = printable(path)
    return path if len(path) <= PATH_WIDTH else path[:PATH_WIDTH - 3] + "..."


def _figure(value: int | None) -> str:
    """A size, or "not measured" where there is none: never 0 B for what
    was not read."""
    return "not measured" if value is None else human_bytes(value)


def _holds(result: ProcessInspection) -> str:
    total = result["total"]
    if total["bytes"] is None:
        # Its binaries, where the node listed them, on the next line.
        return ("what it holds: its terms not measured (its state was not "
                "read: see state below)")
    return ("what it holds: " + ("at least " if total.get("unmeasured")
                                 else "")
            + f"{human_bytes(total['bytes'])} of terms and "
            f"{_figure(total['binary_bytes'])} of refc binaries kept alive"
            + ("; sampled: an estimate from part of it" if total["sampled"]
               else "")
            + (f"; the process paused {total['pause_ms']:g} ms"
               if total["pause_ms"] else ""))


def _binaries(result: ProcessInspection) -> str | None:
    """The node's list of the process's refc binaries, summed there."""
    if "binaries" not in result:
        return None  # a dump's answer: its own figures
    found = result["binaries"]
    if found is None:
        return f"refc binaries: {result.get('binaries_note') or 'not measured'}"
    if not found["count"]:
        return "refc binaries: none referred to"
    largest = ", ".join(human_bytes(size) for size in found["largest"])
    return (f"refc binaries: {found['count']:,} referred to"
            + (f" ({found['references']:,} references)"
               if found["references"] != found["count"] else "")
            + f", {human_bytes(found['bytes'])} each once, "
            f"{human_bytes(found['alone_bytes'])} of them held by it alone"
            f" (reference count 1); the largest {largest}")


def process_text(result: ProcessInspection, syntax: Syntax) -> str:
    total = result["total"]
    name = syntax.name(result["name"]) or ""
    if result.get("label"):
        name = f"{name} {syntax.code(printable(result.get('label') or ''))}"\
            .strip()
    key = "path_elixir" if syntax.elixir else "path"
    loop = result.get("loop")
    written = (syntax.name(loop) if syntax.elixir else loop) or ""
    # A hibernating process's loop is what its module declares: said so,
    # as its stack is gone (a module may hibernate into a loop of its own).
    kind = result["kind"] if result["kind"] != "plain" or not loop \
        else f"hibernating, of a {written} module" \
        if result["current_function"] == "erlang:hibernate/3" \
        else f"{written} loop"
    heap = (f", heap {human_bytes(total['heap_bytes'])} (young "
            f"{human_bytes(total['young_heap_bytes'])})"
            if "heap_bytes" in total and "young_heap_bytes" in total else "")
    lines = [
        f"{result['node']}: {syntax.code(result['pid'])} {name}".rstrip()
        + f" ({kind}; process memory "
        f"{human_bytes(total['memory'])}{heap}, "
        f"{total['message_queue_len']:,} messages)",
        _holds(result)]
    binaries = _binaries(result)
    if binaries:
        lines.append(binaries)
    if total["binary_distinct"] is None and total["binary_bytes"] and \
            total["bytes"] is not None:
        lines.append("binary figures count a binary once per reference to "
                     "it (the process's heap is over 32 MB: its list of "
                     "binaries was not read to count each once)")
    rows = []
    for part in result["parts"]:
        rows.append(("  " * part["depth"] + _path(part[key]),  # type: ignore[literal-required]
                     _kind(part["kind"], syntax),
                     f"{part['count']:,}" if part["count"] else "",
                     human_bytes(part["bytes"]),
                     human_bytes(part["binary_bytes"]),
                     f"{part['share']:.0%}"))
    if rows:
        lines.append("")
        lines.append(table(("part", "kind", "count", "bytes", "binary",
                            "share"), rows, "llrrrr"))
    if result["pinned"]:
        lines.append("")
        lines.append("pinned binaries: small slices that keep a much larger "
                     "binary alive")
        for pin in result["pinned"]:
            lines.append(
                f"  {_path(pin[key])}: {pin['count']:,} slices "  # type: ignore[literal-required]
                f"using {human_bytes(pin['bytes'])} keep "
                f"{human_bytes(pin['referenced_bytes'])} alive")
        copy = "binary:copy/1" if not syntax.elixir else ":binary.copy/1"
        lines.append(f"  fix: store a copy of the slice ({copy}) where it "
                     "is kept, so the large binary it came from can be "
                     "freed")
    for what in ("state", "dictionary", "mailbox"):
        note = result[what]
        if note:
            lines.append(f"{what}: {note}")
    if result.get("see_also"):
        lines.append("the broker's own view of what it holds: "
                     + "; ".join(result.get("see_also", [])))
    return "\n".join(lines)


def table_text(result: TableInspection, syntax: Syntax) -> str:
    lines = [
        f"{result['node']}: table {syntax.code(result['table'])} "
        f"({result['type']}, owner {syntax.code(result['owner'] or '?')}; "
        f"{result['size']:,} object{'s' if result['size'] != 1 else ''}, "
        f"{human_bytes(result['memory'])}"
        + (", compressed: sizes as stored" if result["compressed"] else "")
        + ")"]
    if result["sampled"]:
        readable = result["size"] - result.get("unread_objects", 0)
        lines.append(f"sampled: {result['seen']:,} of {readable:,} "
                     f"objects read ({result['fraction']:.1%}), the figures "
                     "scaled to the whole"
                     + (" (stopped at the deadline)" if result["late"]
                        else "")
                     + ("; an ordered_set is read from its lowest key, so "
                        "its sample is its first keys'" if result["type"]
                        == "ordered_set" else ""))
    if result.get("unread_keys"):
        lines.append(f"not read: {result['unread_objects']:,} objects under "
                     f"{result['unread_keys']:,} key"
                     f"{'s' if result['unread_keys'] != 1 else ''} holding "
                     "more than one batch may read (about 2 MB): counted, "
                     "left out of the figures")
    if result.get("changed"):
        lines.append("the table changed while it was read: objects written "
                     "meanwhile are counted or not, and a few may be missed "
                     "or counted twice (the walk does not fix the table)")
    family = "family_elixir" if syntax.elixir else "family"
    key = "key_elixir" if syntax.elixir else "key"
    rows = [(printable(f[family]), f"{f['count']:,}",  # type: ignore[literal-required]
             human_bytes(f["bytes"]), human_bytes(f["binary_bytes"]),
             f"{f['pinned']['count']:,}" if f["pinned"]["count"] else "",
             human_bytes(f["pinned"]["referenced_bytes"])
             if f["pinned"]["count"] else "")
            for f in result["families"]]
    lines.append("")
    lines.append(table(("key family", "objects", "bytes", "binary",
                        "pinned", "kept alive"), rows, "lrrrrr"))
    if result["largest"]:
        lines.append("")
        lines.append("largest objects:")
        lines.append(table(("key", "family", "bytes", "binary"),
                           [(printable(o[key]),  # type: ignore[literal-required]
                             printable(o[family]),  # type: ignore[literal-required]
                             human_bytes(o["bytes"]),
                             human_bytes(o["binary_bytes"]))
                            for o in result["largest"]], "llrr"))
    if any(f["pinned"]["count"] for f in result["families"]):
        copy = "binary:copy/1" if not syntax.elixir else ":binary.copy/1"
        lines.append("")
        lines.append(f"pinned: slices stored in the table keep their whole "
                     f"binary alive; store a copy ({copy}) instead")
    return "\n".join(lines)


def inspect_text(result: ProcessInspection | TableInspection,
                 syntax: Syntax) -> str:
    if "families" in result:
        return table_text(result, syntax)  # type: ignore[arg-type]
    return process_text(result, syntax)


__all__ = ["inspect_text", "process_text", "table_text"]
