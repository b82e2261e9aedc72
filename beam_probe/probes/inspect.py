"""inspect: which part of one process, or of one table, holds the memory.

The step the heap-snapshot guides end on ("expand the largest object
until you find what holds it"), taken on the node: one call to
erl_helpers/beam_probe_inspect.erl. A process's state is measured inside
the process, by the fun of a replace_state system request that throws
(its state is never copied out, and stays as it was); its dictionary
there too; its mailbox, when short, by our worker. A table is read in
chunks by our worker. What comes back is shapes and sizes: kinds,
counts, words, refc binary bytes, short keys; never a value.

Paths are written in both languages here (JSON carries Erlang's as
``path`` and Elixir's as ``path_elixir``), because the steps that make them
(a record's field names, a map's key) are not text once rendered.
"""

from __future__ import annotations

import re
from contextlib import contextmanager
from typing import Any, Iterator, NoReturn, TYPE_CHECKING

from beam_probe.erldist.terms import Atom, Pid, format_term, mfa
from beam_probe.errors import (BadReply, NoSuchProcess, RemoteError,
                               UsageError)
from beam_probe.node.forms import LIB, Local
from beam_probe.node.remote import Remote
from beam_probe.node.replies import Reply, count, escaped
from beam_probe.probes.info import atom_names, refused, target
from beam_probe.probes.atoms import elixir_atom

if TYPE_CHECKING:
    from beam_probe.probes.results import (InspectBinaries, InspectPart,
                                           InspectPin,
                                           ProcessInspection,
                                           TableFamily, TableInspection,
                                           TableObject)

HELPER = "beam_probe_inspect"

# The walk runs inside the target and blocks it: a budget of terms. A
# leaf costs one (the leaves of a container are measured in compiled
# passes, ~1 us each), a container walked 48 (erl_eval walks it: 0.5-2
# ms on OTP 25 here). 1,000 held a gen_server of a million-entry map
# 16-20 ms on this 2-core machine, "tens of milliseconds"; such a map is
# sampled (its first ~240 keys in hash order, a few of their values
# walked).
DEFAULT_BUDGET = 1_000
MAX_BUDGET = 1_000_000
# A table is read by our worker (the table stays usable): keys by
# ets:select/3 a slot at a time (a bag's by ets:next/2), as many a batch as
# it reads objects or 256K words of keys, objects by ets:lookup/2 in
# batches of about 2 MB as read (at most 500; a bag's key with more
# objects than that is counted, not read), three levels of each
# searched for binaries (~70-130 us an object here: 20,000 objects of a
# 10M-object table took 1.6-2.8 s).
DEFAULT_TABLE_BUDGET = 20_000
MAX_TABLE_BUDGET = 10_000_000
MAX_DEPTH = 10
MAX_WIDTH = 100
# The mailbox is read only below this many messages: process_info's
# messages copies all of them in one uninterruptible call.
MAILBOX_MOST = 10_000
# Copied into our worker (a plain process's dictionary, a mailbox) only
# from a process of at most this many words (8 MB on 64 bits).
COPY_MOST = 1_000_000
# The refc binaries a process refers to (process_info(P, binary), a copy
# of 6 words a reference, at most a reference per 6 words of its heap)
# are read from a heap of at most this many words (32 MB on 64 bits), so
# a broker's queue (16-24 MB of heap) is: 109,864 references were copied
# in 4-8 ms and summed on the node in 23-35 ms, 345,285 in 14-22 ms and
# 285-314 ms (OTP 25, 2 cores). Only figures come back. The helper says
# why in full.
BINARIES_MOST = 4_194_304
# How many of the largest binaries' sizes come back (the helper's 5).
LARGEST_BINARIES = 5
# A dictionary is read (inside the process, or copied from outside) only
# up to this many keys, estimated from outside without a copy: get/0 of a
# million keys stalled a scheduler 61-112 ms and grew its process by 258
# MB (the tester's, OTP 25). The helper holds the same figure.
DICTIONARY_MOST = 16_384

A_ERROR = Atom("error")
A_STATE = Atom("state")
A_HANDLER = Atom("handler")
A_TOO_LONG = Atom("too_long")
A_TOO_LARGE = Atom("too_large")
A_TOO_MANY = Atom("too_many")
A_KEYS_UNKNOWN = Atom("keys_unknown")
A_OTHER_HANDLERS = Atom("other_handlers")
A_NOT_MEASURED = Atom("not_measured")
# After a part's kind when its words are its own only.
NOT_MEASURED = ", not measured"

_WHY = {
    "not_proc_lib": "it was not started by proc_lib (proc_lib:spawn or a "
                    "gen behaviour's start), so it may be a plain receive "
                    "loop, which would keep a system message forever",
    "hibernating_loop": "it hibernates (erlang:hibernate/3), and before OTP "
                        "28 what it wakes into cannot be seen from outside: "
                        "its gen loop, or a loop of its module's own, which "
                        "would keep a system message forever; nothing was "
                        "sent to it: try again when it is awake",
    "hibernating_own": "it hibernates in erlang:hibernate/3, which OTP 28's "
                       "gen_server and gen_statem do not use for their own "
                       "loop: it wakes into a loop of its module's own, "
                       "which would keep a system message forever",
    "not_in_gen_loop": "it was started by proc_lib but runs no gen_server, "
                       "gen_statem or gen_event loop (a plain loop would "
                       "keep a system message forever)",
    "hibernating": "it hibernates, and its module is no gen behaviour",
    "hibernating_unknown": "it hibernates, and which loop it wakes into is "
                           "not known without copying its dictionary (it "
                           "is over the copy bound)",
    "busy_callback": "it is running a callback now, not waiting in its "
                     "gen loop, and may not come back to it for a while; "
                     "nothing was sent to it: try again when it is idle",
    "busy_system": "it is handling a system message now (another "
                   "inspect, or a debugger's); nothing was sent to it: "
                   "try again",
}


# RabbitMQ's own view of what its queues hold, suggested where the process
# is its (its gen_server2 loop, a rabbit_ module among its names): the
# broker counts what we cannot read from outside.
BROKER_VIEW = ("rabbitmqctl list_queues name memory message_bytes_ram",
               "rabbitmq-diagnostics memory_breakdown")
HIBERNATE = (Atom("erlang"), Atom("hibernate"), 3)
# Frames that are no process's own loop: where proc_lib starts it, and
# the BIFs it may be in.
_NOT_A_LOOP = ("proc_lib", "erlang")


def loop_of(info: dict[str, Any], declared: Any = ()) -> str | None:
    """The module whose loop the process runs, from outside: the
    outermost frame of its current stack that is not proc_lib's start
    (a gen_server's is gen_server, RabbitMQ's queues' gen_server2, a
    plain loop's its own module), else its current function's module.
    While it hibernates its stack is gone: the first behaviour its
    '$initial_call' module declares (``declared``; RabbitMQ's queues
    hibernate, and rabbit_prequeue declares gen_server2), else None."""
    current = info.get("current_function")
    if current == HIBERNATE:
        found = [str(b) for b in declared if isinstance(b, Atom)] \
            if isinstance(declared, list) else []
        return found[0] if found else None
    stack = info.get("current_stacktrace")
    modules = [frame[0] for frame in stack if isinstance(frame, tuple)
               and frame and isinstance(frame[0], Atom)] \
        if isinstance(stack, list) else []
    own = [m for m in modules if str(m) not in _NOT_A_LOOP]
    if own:
        return str(own[-1])
    if isinstance(current, tuple) and current and \
            isinstance(current[0], Atom):
        return str(current[0])
    return None


def looks_like_rabbit(loop: str | None, info: dict[str, Any],
                      started: Any, named: dict[str, Any] | None = None
                      ) -> bool:
    """RabbitMQ's process: its loop is gen_server2, or a rabbit module
    names it (registered name, '$initial_call', process_name's first
    element, a frame of its stack)."""
    if loop == "gen_server2":
        return True
    names: list[Any] = [info.get("registered_name"), started]
    for value in (named or {}).values():
        if isinstance(value, tuple) and value:
            names.append(value[0])
    for key in ("current_function", "initial_call"):
        if isinstance(info.get(key), tuple) and info[key]:
            names.append(info[key][0])
    stack = info.get("current_stacktrace")
    for frame in stack if isinstance(stack, list) else []:
        if isinstance(frame, tuple) and frame:
            names.append(frame[0])
    return any(isinstance(name, Atom) and (str(name) == "rabbit" or str(
        name).startswith("rabbit_")) for name in names)


# What marks a classic queue's process: its process_name's first element
# (3.10: rabbit_amqqueue_process), the module it starts in
# ('$initial_call' rabbit_prequeue:init/1) or a frame of its stack.
_QUEUE_MODULES = ("rabbit_amqqueue_process", "rabbit_prequeue")


def broker_view(loop: str | None, info: dict[str, Any], started: Any,
                named: dict[str, Any] | None = None) -> list[str]:
    """The broker's own commands that see what this process holds: for a
    queue, or a gen_server2 nothing else names (it may be one), both;
    for another of RabbitMQ's processes (a channel, a reader,
    rabbit_node_monitor) only the node's memory breakdown, as
    list_queues says nothing of it; none for a process of no broker."""
    if not looks_like_rabbit(loop, info, started, named):
        return []
    names: list[Any] = [started]
    label = (named or {}).get("process_name")
    if isinstance(label, tuple) and label:
        names.append(label[0])
    if isinstance(started, tuple) and started:
        names.append(started[0])
    stack = info.get("current_stacktrace")
    for frame in stack if isinstance(stack, list) else []:
        if isinstance(frame, tuple) and frame:
            names.append(frame[0])
    if any(isinstance(name, Atom) and str(name) in _QUEUE_MODULES
           for name in names):
        return list(BROKER_VIEW)
    # Nothing says what it is but its loop: it may be a queue.
    others = [name for name in names + [info.get("registered_name")]
              if isinstance(name, Atom) and str(name).startswith("rabbit")]
    if loop == "gen_server2" and not others:
        return list(BROKER_VIEW)
    return [BROKER_VIEW[1]]


def check_bounds(depth: int, width: int, budget: int | None,
                 table: bool) -> None:
    if not 0 <= depth <= MAX_DEPTH:
        raise UsageError(f"--depth is 0 to {MAX_DEPTH}, not {depth}")
    if not 1 <= width <= MAX_WIDTH:
        raise UsageError(f"--width is 1 to {MAX_WIDTH}, not {width}")
    most = MAX_TABLE_BUDGET if table else MAX_BUDGET
    if budget is not None and not 1 <= budget <= most:
        raise UsageError(f"--budget is 1 to {most:,}, not {budget}")


_TABLE_ID = re.compile(r"#Ref<\d+\.\d+\.\d+\.\d+>")


def table_spec(spec: str) -> tuple[Atom, Any]:
    """A table as the user gives it: its name (Erlang or Elixir form:
    MyApp.Cache is also tried as 'Elixir.MyApp.Cache', the name
    ``:ets.new(__MODULE__, ...)`` gives) or its id as ``ets`` prints it
    (#Ref<0.1.2.3>)."""
    spec = spec.strip()
    if _TABLE_ID.fullmatch(spec):
        return Atom("id"), spec
    names = atom_names(spec)
    if names is None:
        raise UsageError(f"TABLE is a table's name or its id as ets prints "
                         f"it (#Ref<0.1.2.3>), not {spec!r}")
    return Atom("names"), names


def _options(depth: int, width: int, budget: int,
             timeout: float) -> dict[Atom, int]:
    # The walk stops at 40% of the wait, the wait at 80% of --timeout: a
    # late answer still arrives before we give up on the call.
    wait_ms = max(100, int(timeout * 800))
    return {Atom("depth"): depth, Atom("width"): width,
            Atom("budget"): budget, Atom("walk_ms"): max(50, wait_ms // 2),
            Atom("wait_ms"): wait_ms, Atom("mailbox_most"): MAILBOX_MOST,
            Atom("copy_most"): COPY_MOST,
            Atom("binaries_most"): BINARIES_MOST}


# -- paths ------------------------------------------------------------------

def key_text(key: Any, elixir: bool) -> str:
    """A short key as the helper sent it: an atom, a small integer,
    {binary, Cut, Size}, {string, Cut, Length}, {kind, Kind}."""
    if isinstance(key, Atom):
        if not elixir:
            return format_term(key)
        return escaped(elixir_atom(str(key)))
    if isinstance(key, tuple) and len(key) == 2 and key[0] == Atom(
            "tuple") and isinstance(key[1], list):
        return "{" + (", " if elixir else ",").join(
            key_text(item, elixir) for item in key[1]) + "}"
    if isinstance(key, int) and not isinstance(key, bool):
        # The node sends small integers only; a crafted one of thousands
        # of digits is not written out (Python refuses past 4,300).
        return str(key) if key.bit_length() <= 64 else "<integer>"
    if isinstance(key, tuple) and len(key) == 3 and key[0] in (
            Atom("binary"), Atom("string")):
        cut, size = key[1], key[2]
        if key[0] == Atom("binary") and isinstance(cut, bytes):
            return _binary_key(cut, size, elixir)
        text = cut if isinstance(cut, str) else ""
        more = "..." if isinstance(size, int) and size > len(text) else ""
        text = escaped(text).replace('"', '\\"')
        return f"'{text}{more}'" if elixir else f'"{text}{more}"'
    if isinstance(key, tuple) and len(key) == 2 and key[0] == Atom("kind"):
        return _term_of_kind(key[1], elixir)
    return "<key>"


def _binary_key(cut: bytes, size: Any, elixir: bool) -> str:
    """A binary key's first bytes (``cut``, of ``size`` in all) as the
    node writes the binary: its text where it is UTF-8, else its bytes
    (<<255,254,...>>), never U+FFFD in their place. The node cuts at 16
    bytes, maybe inside a character: its last 1-3 bytes are left out."""
    more = isinstance(size, int) and size > len(cut)
    text = None
    for drop in range(4 if more else 1):
        try:
            text = cut[:len(cut) - drop].decode("utf-8")
            break
        except UnicodeDecodeError:
            continue
    dots = "..." if more else ""
    if text is None:
        numbers = (", " if elixir else ",").join(str(b) for b in cut)
        return f"<<{numbers}{(', ' if elixir else ',') + dots if more else ''}>>"
    text = escaped(text).replace('"', '\\"')
    return f'"{text}{dots}"' if elixir else f'<<"{text}{dots}">>'


def _term_of_kind(kind: Any, elixir: bool) -> str:
    """A term known by its kind alone, as the node's shell writes one of
    that kind with its values left out: a tuple led by an atom (a record)
    as ``{resource, ...}``, since the shell prints a record so where its
    definition is not loaded (ets:tab2list/1 of RabbitMQ's tables in a
    remote shell shows ``{resource,<<"/">>,queue,<<"q1">>}``) and we do
    not know it; an Elixir struct as ``%MyApp.Key{...}``, or as Erlang
    prints that map; any other kind as ``<binary>``."""
    if isinstance(kind, tuple) and len(kind) == 2 and \
            isinstance(kind[1], Atom):
        what, tag = kind
        if what == Atom("record"):
            return "{" + key_text(tag, elixir) + ", ...}"
        if what == Atom("struct"):
            if elixir:
                name = elixir_atom(str(tag))
                # A tag no alias names ('Elixir.', 'Elixir.foo bar') is
                # no module's struct: Elixir writes the map.
                if name.startswith(":"):
                    return "%{__struct__: " + escaped(name) + ", ...}"
                return "%" + name + "{...}"
            return "#{'__struct__' => " + format_term(tag) + ", ...}"
    if isinstance(kind, Atom):
        return f"<{kind}>"
    return "<key>"


class RecordNames:
    """Record field names the node found in the callback module."""

    def __init__(self, records: Any) -> None:
        self.fields: dict[tuple[str, int], list[str]] = {}
        for item in records if isinstance(records, list) else []:
            if isinstance(item, tuple) and len(item) == 2 and \
                    isinstance(item[0], Atom) and isinstance(item[1], list):
                names = [str(f) for f in item[1] if isinstance(f, Atom)]
                self.fields[(str(item[0]), len(names) + 1)] = names

    def known(self, tag: str, size: int) -> bool:
        return (tag, size) in self.fields

    def field(self, tag: str, size: int, index: int) -> str | None:
        """Field ``index`` (a tuple position) of record ``tag`` of ``size``
        elements; size 0 (a pin's path) when the tag has one definition."""
        if size == 0:
            found = [key for key in self.fields if key[0] == tag]
            size = found[0][1] if len(found) == 1 else -1
        names = self.fields.get((tag, size))
        if names and 2 <= index <= len(names) + 1:
            return names[index - 2]
        return None


def step_text(step: Any, elixir: bool, names: RecordNames, size: int) -> str:
    """One step of a path, in the node's syntax. ``size`` is the parent's
    element count (a record's arity picks its definition)."""
    if step == Atom("keys"):
        return " |> Map.keys()" if elixir else " (keys)"
    if step == Atom("list"):
        return "[_]" if not elixir else " |> Enum.at(_)"
    if step == Atom("env"):
        return " (closure)"
    if isinstance(step, tuple) and len(step) == 2:
        kind, arg = step
        if kind == Atom("elem"):
            return f" |> elem({arg - 1})" if elixir else f"{{{arg}}}"
        if kind == Atom("list"):
            return f" |> Enum.at({arg - 1})" if elixir else f"[{arg}]"
        if kind == Atom("key"):
            if arg == Atom("_"):
                return "[_]" if elixir else "#{_}"
            if elixir:
                if isinstance(arg, Atom) and re.fullmatch(
                        r"[a-z_][A-Za-z0-9_]*[?!]?", str(arg)):
                    return f".{arg}"
                return f"[{key_text(arg, True)}]"
            return f"#{{{key_text(arg, False)}}}"
    if isinstance(step, tuple) and len(step) == 3 and \
            step[0] == Atom("field"):
        tag, index = str(step[1]), step[2]
        name = names.field(tag, size, index)
        if elixir:
            return f" |> elem({index - 1})"
        return f"#{format_term(step[1])}.{name}" if name else f"{{{index}}}"
    return f" {format_term(step)[:40]}"


def _kind(kind: Any, names: "RecordNames | None" = None, size: int = 0) -> str:
    """A kind as text: 'map', 'struct Elixir.X', 'record state' for a
    record the module's debug_info defines, else 'tuple tag' (a tuple
    led by an atom: {M, F, A} is no record); ', not measured' after one
    whose words are its own only (past the budget, in a heap too large
    to size it in one call)."""
    if isinstance(kind, tuple) and len(kind) == 2 and \
            kind[0] == A_NOT_MEASURED:
        inner = kind[1]
        if isinstance(inner, tuple) and inner[:1] == (A_NOT_MEASURED,):
            raise BadReply("a part's kind not measured twice over")
        return _kind(inner, names, size) + NOT_MEASURED
    if isinstance(kind, tuple) and len(kind) == 2:
        if kind[0] == Atom("record") and names is not None and \
                not names.known(str(kind[1]), size):
            return f"tuple {kind[1]}"
        return f"{kind[0]} {kind[1]}"
    return str(kind) if isinstance(kind, Atom) else format_term(kind)[:60]


class _Tree:
    """Reads one walk's tree into rows: a part, then its children,
    largest first, then the rest of its elements in one row."""

    def __init__(self, where: str, wordsize: int, names: RecordNames) -> None:
        self.where = where
        self.wordsize = wordsize
        self.names = names

    def rows(self, node: Any, path: tuple[str, str], depth: int
             ) -> Iterator["InspectPart"]:
        if depth > MAX_DEPTH + 1:
            # What we asked for is at most --depth levels: a deeper tree
            # is no answer of ours (and would run Python's recursion out).
            raise BadReply(f"{self.where}: a tree deeper than "
                           f"{MAX_DEPTH + 1} levels")
        tree = Reply(self.where, node)
        kind = tree["kind"]
        size = tree.count("count")
        if depth and not tree.count("words") and not tree.count("binary"):
            return  # an immediate (a small integer, an atom): nothing held
        yield {"path": path[0], "path_elixir": path[1], "depth": depth,
               "kind": _kind(kind, self.names, size), "count": size,
               "bytes": tree.count("words") * self.wordsize,
               "binary_bytes": tree.count("binary"), "share": 0.0}
        children = tree.list("children")
        if len(children) > MAX_WIDTH:
            raise BadReply(f"{self.where}: {len(children):,} children where "
                           f"at most {MAX_WIDTH} were asked for")
        for item in children:
            if not (isinstance(item, tuple) and len(item) == 2):
                raise BadReply(f"{self.where}: a malformed child")
            step, child = item
            yield from self.rows(child, (
                path[0] + step_text(step, False, self.names, size),
                path[1] + step_text(step, True, self.names, size)), depth + 1)
        others = tree.map("others")
        rest = others.count("count")
        if children and rest and (others.count("words")
                                  or others.count("binary")):
            is_map = kind == Atom("map") or (isinstance(kind, tuple)
                                             and kind[0] == Atom("struct"))
            erl, ex = (("#{_}", "[_]") if is_map else
                       ("[_]", " |> Enum.at(_)") if kind == Atom("list")
                       else ("{_}", " |> elem(_)"))
            yield {"path": path[0] + erl, "path_elixir": path[1] + ex,
                   "depth": depth + 1,
                   "kind": f"{rest:,} other{'s' if rest != 1 else ''}",
                   "count": rest,
                   "bytes": others.count("words") * self.wordsize,
                   "binary_bytes": others.count("binary"), "share": 0.0}


def _pin_path(steps: Any, root: tuple[str, str], names: RecordNames
              ) -> tuple[str, str]:
    erl, ex = root
    for step in steps if isinstance(steps, list) else []:
        erl += step_text(step, False, names, 0)
        ex += step_text(step, True, names, 0)
    return erl, ex


def _pins(walk: Reply, root: tuple[str, str], names: RecordNames
          ) -> list["InspectPin"]:
    out: list["InspectPin"] = []
    for item in walk.list("pins"):
        if not (isinstance(item, tuple) and len(item) == 4):
            raise BadReply(f"{walk.helper}: a malformed pin")
        erl, ex = _pin_path(item[0], root, names)
        out.append({"path": erl, "path_elixir": ex,
                    "count": count(f"{walk.helper}'s pin count", item[1]),
                    "bytes": count(f"{walk.helper}'s pin bytes", item[2]),
                    "referenced_bytes": count(f"{walk.helper}'s pin",
                                              item[3])})
    return out


def _roots(part: Any) -> tuple[str, str]:
    if isinstance(part, tuple) and len(part) == 2 and \
            part[0] == A_OTHER_HANDLERS:
        return ("Handler(_)", "handler(_)")
    if part in (A_STATE, Atom("statem_state")):
        return ("State", "state")
    if part == Atom("statem_data"):
        return ("Data", "data")
    if isinstance(part, tuple) and len(part) == 3 and part[0] == A_HANDLER:
        module = format_term(part[1])
        who = f"{module}" if part[2] is False else \
            f"{module} {key_text(part[2], False)}"
        return (f"Handler({who})", f"handler({who})")
    return (format_term(part)[:40],) * 2


def process(remote: Remote, spec: str, depth: int = 3, width: int = 10,
            budget: int | None = None) -> ProcessInspection:
    """What the process ``spec`` holds: its state (where it can be read
    from outside), dictionary and short mailbox, as a size tree."""
    budget = budget or DEFAULT_BUDGET
    check_bounds(depth, width, budget, table=False)
    kind_arg, text = target(spec)
    raw = remote.run(HELPER, "process", (kind_arg, text),
                     Local("resolve", LIB), Local("walker"),
                     Local("describe", LIB),
                     _options(depth, width, budget, remote.timeout))
    if isinstance(raw, tuple) and len(raw) == 2 and raw[0] == A_ERROR:
        _refused(raw[1], spec, remote.node)
    with _malformed(f"{HELPER}:process"):
        return _read_process(remote.node, raw)


@contextmanager
def _malformed(where: str) -> Iterator[None]:
    """A reply no node of ours gives (a step of the wrong shape, a part
    missing, a tuple too short) is a BadReply, one line and exit 8,
    wherever the reading meets it."""
    try:
        yield
    except (IndexError, TypeError, ValueError, KeyError, AttributeError,
            RecursionError) as exc:
        raise BadReply(escaped(f"{where}'s reply is malformed "
                               f"({exc.__class__.__name__}: "
                               f"{str(exc)[:80]})")) from None


def _read_process(node: str, raw: Any) -> ProcessInspection:
    reply = Reply(f"{HELPER}:process", raw)
    wordsize = reply.wordsize()
    names = RecordNames(reply["records"])
    where = f"{HELPER}:process"
    info = reply.pairs("info")
    kind = str(reply["kind"])
    parts: list[InspectPart] = []
    pinned: list[InspectPin] = []
    sampled = False
    unmeasured = 0

    def add(walk_raw: Any, root: tuple[str, str],
            folded: int | None = None) -> None:
        nonlocal sampled, unmeasured
        walk = Reply(where, walk_raw)
        tree = _Tree(where, wordsize, names)
        rows = list(tree.rows(walk["tree"], root, 0))
        if folded is not None and rows:
            # A gen_event's handlers past --width, in one row.
            rows[0]["kind"] = f"{folded:,} other handler" \
                + ("s" if folded != 1 else "")
        pins = _pins(walk, root, names)
        parts.extend(rows)
        pinned.extend(pins)
        sampled = sampled or walk["sampled"] is True or walk["late"] is True
        if "unmeasured" in walk:
            unmeasured += walk.count("unmeasured")

    failed = None
    for item in reply.list("parts"):
        if not (isinstance(item, tuple) and len(item) == 2):
            raise BadReply(f"{where}: a malformed part")
        part, walk_raw = item
        if part == Atom("failed"):
            # Our walk raised inside the process (a term of a shape it
            # did not expect): its class, reason and where, no values.
            failed = format_term(walk_raw)[:200]
            continue
        add(walk_raw, _roots(part),
            count(where, part[1]) if isinstance(part, tuple) and len(part)
            == 2 and part[0] == A_OTHER_HANDLERS else None)
    dictionary = reply["dictionary"]
    dictionary_note = None
    if isinstance(dictionary, dict):
        add(dictionary, ("get()", "Process.get()"))
    elif isinstance(dictionary, tuple) and dictionary[0] == A_TOO_LARGE:
        dictionary_note = (f"not read: the process's heap is "
                           f"{count(where, dictionary[1]) * wordsize:,} "
                           "bytes, and reading a dictionary from outside "
                           "copies it")
    elif isinstance(dictionary, tuple) and dictionary[0] == A_TOO_MANY:
        dictionary_note = (f"not read: it has about "
                           f"{count(where, dictionary[1]):,} keys (estimated "
                           "from the process's memory outside its heap), "
                           f"over {DICTIONARY_MOST:,}; reading it makes a "
                           "list of every key (a million keys stalled a "
                           "scheduler 61-112 ms and grew the process by "
                           "258 MB)")
    elif isinstance(dictionary, tuple) and dictionary[0] == A_KEYS_UNKNOWN:
        dictionary_note = (f"not read: its {count(where, dictionary[1]):,} "
                           "waiting messages take memory outside its heap "
                           "as keys do, so whether it has under "
                           f"{DICTIONARY_MOST:,} keys cannot be told from "
                           "outside, and reading it makes a list of every "
                           "key")
    mailbox = reply["mailbox"]
    mailbox_note = None
    if isinstance(mailbox, dict):
        add(mailbox, ("Messages", "messages"))
    elif isinstance(mailbox, tuple) and mailbox[0] == A_TOO_LONG:
        mailbox_note = (f"{count(where, mailbox[1]):,} messages: over "
                        f"{MAILBOX_MOST:,}, only its length is read "
                        "(reading copies every message, and no call of "
                        "OTP 25-28 reads the first few alone, so none is "
                        "sampled)")
    elif isinstance(mailbox, tuple) and mailbox[0] == A_TOO_LARGE:
        mailbox_note = (f"not read: the process holds "
                        f"{count(where, mailbox[1]):,} bytes, and reading a "
                        "mailbox copies it")
    # The walk counts a binary once per reference to it; the node's own
    # list of the process's binaries, each once, bounds every figure.
    distinct = reply["binary_distinct"]
    distinct = None if distinct == Atom("unknown") else \
        count(f"{where}'s binary_distinct", distinct)
    if distinct is not None:
        for row in parts:
            row["binary_bytes"] = min(row["binary_bytes"], distinct)
        for pin in pinned:
            pin["referenced_bytes"] = min(pin["referenced_bytes"], distinct)
    roots = [row for row in parts if row["depth"] == 0]
    total_bytes = sum(row["bytes"] for row in roots)
    total_binary = sum(row["binary_bytes"] for row in roots)
    if distinct is not None:
        total_binary = min(total_binary, distinct)
    held = total_bytes + total_binary
    for row in parts:
        row["share"] = round((row["bytes"] + row["binary_bytes"]) / held, 4) \
            if held else 0.0
    pinned.sort(key=lambda pin: -pin["referenced_bytes"])
    timed_out = reply["timed_out"]
    loop = loop_of(info, reply["behaviours"] if "behaviours" in reply
                   else [])
    named = _named(reply)
    started = reply["started"] if "started" in reply else None
    binaries, binaries_note = _binaries(reply, info, wordsize)
    state_note = None
    why = str(reply["why"])
    limits = reply.map("limits") if "limits" in reply else None
    if why == "capped" and limits is not None:
        state_note = (
            f"not measured inside: its heap is capped (max_heap_size "
            f"{limits.count('cap'):,} words) and a walk needs "
            f"{limits.count('need'):,} ({limits.count('least'):,} at the "
            f"least budget; it has {limits.count('heap'):,}): our request "
            f"of {limits.count('fun_words'):,} words and the collections "
            "it brings on size its heaps for up to 4 times its old heap "
            "and 7 times what its young heap then holds (measured), and "
            "past the cap it would be killed; nothing was sent to it")
    elif why == "shared_binaries" and limits is not None:
        shared = limits.count("binaries") * wordsize
        state_note = (
            f"not measured inside: its heap is capped (max_heap_size "
            f"{limits.count('cap'):,} words) with include_shared_binaries, "
            "which counts each reference to a shared binary at the whole "
            f"binary's size ({shared / 2**20:,.1f} MiB of them now), and "
            "our walk makes references of its own: no room is known to be "
            "enough (one holding slices of a 4 MB binary was killed at ten "
            "times the need, OTP 28), so nothing was sent to it")
    elif why == "young_heap" and limits is not None:
        young = limits.count("young") * wordsize
        state_note = (
            f"not measured inside: {young / 2**20:,.0f} MiB of it is in its "
            "young heap, which the collection our walk would bring on "
            "copies (a pause of about 9 ms a million words, and as much "
            "memory again on the node, measured); it moves to its old heap "
            "at its next collection, whatever brings it on: try again "
            "then; nothing was sent to it")
    elif why != "gen" and loop == "gen_server2":
        state_note = ("its loop state cannot be read from outside: its "
                      "loop is RabbitMQ's gen_server2, whose sys handler "
                      "runs a replace_state fun without a catch before "
                      "RabbitMQ 3.12.1 (a fun that throws crashed a "
                      "queue), so it is never asked")
    elif why != "gen":
        state_note = ("its loop state cannot be read from outside: "
                      + _WHY.get(why, why))
    elif failed is not None:
        state_note = (f"our walk failed inside the process, which went on "
                      f"as it was (a bug of beam-probe's, please report "
                      f"it): {failed}")
    elif timed_out == Atom("exited"):
        state_note = "the process exited while we waited for its state"
    elif timed_out is True:
        state_note = ("it did not handle our request in time (a long "
                      "mailbox, or busy since); the request waits in its "
                      "mailbox behind the others, and when handled finds "
                      "us gone and measures nothing")
    handlers = reply["handlers"] if "handlers" in reply else None
    skipped = 0
    if isinstance(handlers, dict) and state_note is None:
        counts_ = Reply(where, handlers)
        total_handlers = counts_.count("total")
        # Handlers not walked hold what they hold: the figures are
        # lower bounds ("at least"), as for parts not measured in full.
        skipped = counts_.count("skipped")
        if skipped:
            state_note = (f"{skipped:,} of its {total_handlers:,} handlers "
                          "were not measured: the walk stops at 0.1 ms of "
                          "the manager's time a term of --budget (100 ms "
                          "at the default), whatever its handlers")
    if why == "gen" and limits is not None and "budget" in limits:
        cut = (f"walked with a budget of {limits.count('budget'):,} terms, "
               "less than asked: its heap is capped (max_heap_size "
               f"{limits.count('cap'):,} words), and the full budget "
               f"needs {limits.count('need'):,}")
        state_note = cut if state_note is None else f"{state_note}; {cut}"
    if unmeasured:
        sampled = True
        unmeasured_note = (
            f"{unmeasured:,} part{'s' if unmeasured != 1 else ''} not "
            "measured in full, so the figures are lower bounds: past "
            "--budget a part is sized in one call only while that stays "
            "within 16 MB of heap, and a list is counted to a thousand "
            "elements a term of --budget")
        state_note = unmeasured_note if state_note is None \
            else f"{state_note}; {unmeasured_note}"
    # What was not measured is never a figure: a state not read (refused,
    # timed out, failed) leaves its terms unknown, and its binaries are
    # the node's list's, each once, where that was read.
    read = why == "gen" and failed is None and timed_out is False
    held_bytes = total_bytes if read else None
    held_binary = total_binary if read else \
        binaries["bytes"] if binaries is not None else None
    name = info.get("registered_name")
    current = info.get("current_function")
    initial = info.get("initial_call")
    memory = info.get("memory")
    queue = info.get("message_queue_len")
    return {"node": node, "pid": str(reply["pid"]),
            "name": str(name) if isinstance(name, Atom) else None,
            "kind": kind,
            "current_function": mfa(current) if current else None,
            "initial_call": mfa(initial) if initial else None,
            "parts": parts, "pinned": pinned,
            "total": {"bytes": held_bytes, "binary_bytes": held_binary,
                      "memory": count(f"{where}'s memory", memory),
                      "message_queue_len": count(f"{where}'s queue", queue),
                      "binary_distinct": distinct,
                      "sampled": sampled,
                      "pause_ms": round(reply.count("pause_us") / 1000, 1),
                      "unmeasured": unmeasured + skipped,
                      "heap_bytes": count(f"{where}'s heap", info.get(
                          "total_heap_size")) * wordsize,
                      "young_heap_bytes": count(f"{where}'s young heap",
                                                info.get("heap_size"))
                      * wordsize},
            "state": state_note, "dictionary": dictionary_note,
            "mailbox": mailbox_note,
            "loop": loop, "binaries": binaries,
            "binaries_note": binaries_note,
            "see_also": broker_view(loop, info, started, named),
            "label": _label(named)}


def _named(reply: Reply) -> dict[str, Any]:
    """The dictionary keys that name the process, as the node read them
    ('$process_label', '$initial_call', process_name; small values)."""
    raw = reply["named"] if "named" in reply else []
    if not isinstance(raw, list) or not all(
            isinstance(item, tuple) and len(item) == 2
            and isinstance(item[0], Atom) for item in raw):
        raise BadReply(f"{reply.helper}: malformed names")
    return {str(key): value for key, value in raw}


def _label(named: dict[str, Any]) -> str | None:
    """What names it beyond a registered name: its label, else its
    process_name (RabbitMQ's {rabbit_amqqueue_process, #resource{}}),
    written as Erlang prints it, on one line and at most 200 characters
    (the node keeps values of at most 1,024 bytes)."""
    for key in ("$process_label", "process_name"):
        if key in named:
            return escaped(format_term(named[key]))[:200]
    return None


def _binaries(reply: Reply, info: dict[str, Any], wordsize: int
              ) -> tuple["InspectBinaries | None", str | None]:
    """The refc binaries the process refers to, as the node summed them
    from its list (process_info(P, binary)), or why they were not."""
    where = f"{reply.helper}'s binaries"
    raw = reply["binaries"] if "binaries" in reply else Atom("unknown")
    if isinstance(raw, dict):
        found = Reply(where, raw)
        # A list of sizes all under 256 travels as a string (STRING_EXT).
        sent = found["largest"]
        largest = [ord(c) for c in sent] if isinstance(sent, str) else \
            found.list("largest")
        if len(largest) > LARGEST_BINARIES:
            raise BadReply(f"{where}: {len(largest)} largest where "
                           f"{LARGEST_BINARIES} at most were asked for")
        out: InspectBinaries = {
            "references": found.count("references"),
            "count": found.count("count"), "bytes": found.count("bytes"),
            "alone_bytes": found.count("alone"),
            "largest": [count(where, size) for size in largest]}
        if out["count"] > out["references"] or \
                out["alone_bytes"] > out["bytes"] or \
                sum(out["largest"]) > out["bytes"]:
            raise BadReply(f"{where}: figures that contradict each other")
        return out, None
    if isinstance(raw, tuple) and len(raw) == 2 and raw[0] == A_TOO_LARGE:
        heap = count(where, raw[1]) * wordsize
        return None, (f"not measured: its heap is {heap:,} bytes, over "
                      f"{BINARIES_MOST * wordsize:,}, and the node's list "
                      "of the binaries it refers to (6 words a reference, "
                      "at most one per 6 words of heap) is copied whole to "
                      "be read")
    return None, "not measured: the process exited before they were read"


def _refused(why: Any, spec: str, node: str) -> NoReturn:
    if why == Atom("ours"):
        raise UsageError(f"{spec} is one of beam-probe's own processes on "
                         f"{node}")
    refused(why, spec, node, "inspect")


def _family(family: Any, elixir: bool = False) -> str:
    """A key family as the node writes it: {user, ...} for tuple keys led
    by user ({{resource, ...}, ...} for keys led by a record: see
    _term_of_kind), #session{} for a table of records tagged session (its
    key past the first element: the table declares itself a record's by
    its keypos), else the key's type (<integer>; an Elixir struct's
    name). Elixir's forms where ``elixir``."""
    if isinstance(family, tuple) and len(family) == 2:
        kind, what = family
        if kind == Atom("tuple"):
            return "{" + key_text(what, elixir) + ", ...}"
        if kind == Atom("record"):
            if elixir:
                return "{" + key_text(what, True) + ", ...}"
            return f"#{format_term(what)}{{}}"
        if kind == Atom("type"):
            return _term_of_kind(what, elixir)
    return format_term(family)[:60]


def table(remote: Remote, spec: str, width: int = 10,
          budget: int | None = None) -> TableInspection:
    """The table ``spec``'s objects grouped by key family, and its
    largest objects, exact up to ``budget`` objects and sampled past it."""
    budget = budget or DEFAULT_TABLE_BUDGET
    check_bounds(0, width, budget, table=True)
    kind_arg, text = table_spec(spec)
    raw = remote.run(HELPER, "table", (kind_arg, text), Local("walker"),
                     _options(0, width, budget, remote.timeout))
    if isinstance(raw, tuple) and len(raw) == 2 and raw[0] == A_ERROR:
        if raw[1] == Atom("no_such_table"):
            raise NoSuchTable(f"no table {spec} on {remote.node}")
        if isinstance(raw[1], tuple) and len(raw[1]) == 3 and \
                raw[1][0] == Atom("several"):
            _several(spec, remote.node, raw[1])
        if raw[1] == Atom("private"):
            raise UsageError(f"table {spec} is private: only its owner can "
                             "read it")
        raise RemoteError(f"inspect failed: {format_term(raw[1])}"[:300])
    with _malformed(f"{HELPER}:table"):
        return _read_table(remote.node, raw)


def _several(spec: str, node: str, several: Any) -> NoReturn:
    """Several tables, none a named_table, share the name: which ids to
    give, in one line (a usage error: the name does not say which)."""
    where = f"{HELPER}:table's tables"
    total = count(where, several[1])
    ids = several[2] if isinstance(several[2], list) else []
    shown = [text for text in ids[:10] if isinstance(text, str)
             and _TABLE_ID.fullmatch(text)]
    if total < 2 or not shown:
        raise BadReply(f"{where}: a malformed list of tables")
    more = f" and {total - len(shown):,} more" if total > len(shown) else ""
    raise UsageError(f"{total:,} tables on {node} are named {spec}, none "
                     f"of them a named_table: give one's id instead, "
                     f"{', '.join(shown)}{more}")


def _read_table(node: str, raw: Any) -> TableInspection:
    where = f"{HELPER}:table"
    reply = Reply(where, raw)
    wordsize = reply.wordsize()
    info = reply.pairs("info")
    size = count(f"{where}'s size", info.get("size"))
    stored = count(f"{where}'s memory", info.get("memory")) * wordsize
    seen = reply.count("seen")
    raw_unread = reply["unread"]
    if not (isinstance(raw_unread, tuple) and len(raw_unread) == 2):
        raise BadReply(f"{where}: a malformed unread count")
    unread = (count(where, raw_unread[0]), count(where, raw_unread[1]))
    # A table that grew while we read it: we saw more than it had.
    size = max(size, seen)
    # What could be read: a sample's figures are scaled to it, never to
    # the objects of the keys counted and not read.
    readable = max(size - unread[1], seen)
    families = []
    for item in reply.list("families"):
        if not (isinstance(item, tuple) and len(item) == 5
                and isinstance(item[4], tuple) and len(item[4]) == 3):
            raise BadReply(f"{where}: a malformed family")
        families.append((item[0], count(where, item[1]),
                         count(where, item[2]) * wordsize,
                         count(where, item[3]),
                         [count(where, n) for n in item[4]]))
    # What we read is flat copies; a compressed table stores less: sizes
    # are scaled to the table's own memory figure, which is what it holds.
    compressed = info.get("compressed") is True
    read = sum(f[2] for f in families)
    factor = readable / seen if seen else 1.0
    scale = (stored * readable / size / (read * factor)
             if compressed and read else 1.0)
    out: list[TableFamily] = []
    for family, n, words, binary, pin in families:
        out.append({"family": _family(family),
                    "family_elixir": _family(family, True),
                    "count": round(n * factor),
                    "bytes": round(words * factor * scale),
                    "binary_bytes": round(binary * factor),
                    "pinned": {"count": round(pin[0] * factor),
                               "bytes": round(pin[1] * factor),
                               "referenced_bytes": round(pin[2] * factor)}})
    out.sort(key=lambda f: -(f["bytes"] + f["binary_bytes"]))
    largest: list[TableObject] = []
    for item in reply.list("largest"):
        if not (isinstance(item, tuple) and len(item) == 4):
            raise BadReply(f"{where}: a malformed object")
        largest.append({"key": key_text(item[0], False),
                        "key_elixir": key_text(item[0], True),
                        "family": _family(item[1]),
                        "family_elixir": _family(item[1], True),
                        "bytes": round(count(where, item[2]) * wordsize
                                       * scale),
                        "binary_bytes": count(where, item[3])})
    name = info.get("name")
    return {"node": node, "table": format_term(reply["table"]),
            "name": format_term(name) if name is not None else None,
            "type": format_term(info.get("type")),
            "owner": str(info.get("owner")) if isinstance(info.get("owner"),
                                                          Pid) else None,
            "size": size, "memory": stored, "compressed": compressed,
            "families": out, "largest": largest,
            "sampled": seen < readable,
            "seen": seen,
            "fraction": round(seen / readable, 4) if readable else 1.0,
            "late": reply["late"] is True,
            # The table's size moved while it was read, or a key listed
            # had no object when read: objects written meanwhile were
            # seen or not, and an unfixed walk of a set or a bag may miss
            # a key or meet one twice if the table was resized (ets's
            # "Table traversal").
            "changed": reply["changed"] is True,
            # A bag's keys holding more objects than a batch may read at
            # once (ets:lookup/2 copies all of a key's objects): counted,
            # not read; the figures above leave them out.
            "unread_keys": unread[0], "unread_objects": unread[1]}


class NoSuchTable(NoSuchProcess):
    label = "no such table"


__all__ = ["DEFAULT_BUDGET", "DEFAULT_TABLE_BUDGET", "RecordNames",
           "check_bounds", "key_text", "process", "step_text", "table",
           "table_spec"]
