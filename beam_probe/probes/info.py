"""recon:info/1 from outside: one process, grouped, never its mailbox or
dictionary.

One call: process_info(Pid, Items) with the items recon:info/1 shows,
minus 'dictionary' (reading it copies a process's private state and can be
large), plus the count and summed size of the refc binaries the process
references, computed on the node so a leaking process's list of a million
binaries never crosses the wire.
"""

from __future__ import annotations

import re
from typing import Any, Callable, NoReturn, TYPE_CHECKING

from beam_probe.erldist.terms import Atom, Pid, format_term, mfa
from beam_probe.errors import (NoSuchProcess, ProtocolError, RemoteError,
                               UsageError)
from beam_probe.node.forms import LIB, Local
from beam_probe.node.remote import Remote
from beam_probe.node.replies import Reply, count
from beam_probe.probes.processes import HELPER

if TYPE_CHECKING:
    from beam_probe.probes.results import ProcInfo

# recon:info/1's groups and their process_info items, in recon's order.
GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("meta", ("registered_name", "group_leader", "status")),
    ("signals", ("links", "monitors", "monitored_by", "trap_exit")),
    # current_function beside recon's two: a hibernating process has no
    # stack, and erlang:hibernate/3 is then where it is.
    ("location", ("initial_call", "current_function", "current_stacktrace")),
    ("memory_used", ("memory", "message_queue_len", "heap_size",
                     "total_heap_size", "garbage_collection",
                     "binary_count", "binary_memory", "binary_distinct")),
    ("work", ("reductions",)),
)

# The items that are counts or sizes, checked as such.
COUNTS = ("memory", "message_queue_len", "heap_size", "total_heap_size",
          "reductions")

# A pid as Erlang prints it (<0.123.0>), without the brackets a shell
# would eat (0.123.0), or as Elixir prints it (#PID<0.123.0>).
# Brackets come in pairs: `#PID<0.1.0` or `<0.1.0` is a typo, refused
# rather than looked up as a registered name.
_PID = re.compile(r"(?:#PID<|<)(\d+)\.(\d+)\.(\d+)>|(\d+)\.(\d+)\.(\d+)")
_PID_TYPO = re.compile(r"(?:#PID)?<?\d+\.\d+\.\d+>?")

# An atom is at most 255 characters (erl_parse).
MAX_NAME = 255


def target(spec: str) -> tuple[Atom, Any]:
    """What the user typed, as the node's helper takes it: ``{pid, Text}``
    or ``{names, [Candidate, ...]}``, the registered names it may mean.

    Every form an Erlang or Elixir user types is accepted: ``code_server``,
    ``'my name'`` (Erlang quoting), ``:code_server`` and ``:"my name"``
    (Elixir atoms), ``Elixir.MyApp.Cache`` and the Elixir alias
    ``MyApp.Cache`` (which is the atom 'Elixir.MyApp.Cache'). The node looks
    names up without creating an atom."""
    spec = spec.strip()
    match = _PID.fullmatch(spec)
    if match:
        return Atom("pid"), "<{}.{}.{}>".format(
            *(part for part in match.groups() if part is not None))
    if _PID_TYPO.fullmatch(spec):
        raise UsageError(f"PID must look like <0.123.0>, #PID<0.123.0> or "
                         f"0.123.0, not {spec!r} (a bracket is missing)")
    names = atom_names(spec)
    if names is None:
        raise UsageError(f"PID must look like <0.123.0> or #PID<0.123.0>, or "
                         f"be a registered name, not {spec!r}")
    return Atom("names"), names


def atom_names(spec: str) -> list[str] | None:
    """The atoms a name may mean, as the user typed it in Erlang or Elixir
    (``code_server``, ``'my name'``, ``:code_server``, ``:"my name"``,
    ``MyApp.Cache`` which is also 'Elixir.MyApp.Cache'), or None when it
    can be no atom (empty, too long, control characters)."""
    name = spec[1:] if spec.startswith(":") else spec
    if len(name) >= 2 and name[0] == name[-1] and name[0] in "'\"":
        name = name[1:-1]
    if not name or len(name) > MAX_NAME or any(ord(c) < 32 for c in name):
        return None
    names = [name]
    if name[0].isupper() and not name.startswith("Elixir."):
        names.append("Elixir." + name)
    return names


def refused(why: Any, spec: str, node: str, what: str) -> NoReturn:
    """The error a helper's resolve/1 of ``spec`` answered, as the
    exception the user reads: a usage error, or no such process."""
    if why == Atom("not_a_pid"):
        raise UsageError(f"{spec!r} is not a pid of {node}; give pids as it "
                         f"prints them, <0.N.M>")
    if why == Atom("no_such_name"):
        raise NoSuchProcess(f"no process registered as {spec} on {node}")
    if isinstance(why, tuple) and len(why) == 2 and \
            why[0] == Atom("other_node"):
        raise UsageError(f"{spec} is a pid of another node ({why[1]}); give "
                         f"pids as {node} prints them")
    if isinstance(why, tuple) and len(why) == 2 and \
            why[0] == Atom("not_alive"):
        raise NoSuchProcess(f"{why[1]} is not alive on {node} (it exited, "
                            f"or never existed)")
    raise RemoteError(f"{what} failed: {format_term(why)}"[:300])


def _plain(term: Any) -> Any:
    """A term as JSON-ready Python: atoms and pids as text."""
    if isinstance(term, bool) or isinstance(term, (int, float)):
        return term
    if isinstance(term, Atom):
        return None if term == "undefined" else str(term)
    if isinstance(term, list) and all(
            isinstance(item, tuple) and len(item) == 2
            and isinstance(item[0], Atom) for item in term) and term:
        return {str(key): _plain(value) for key, value in term}
    if isinstance(term, dict):
        return {format_term(key) if not isinstance(key, Atom) else str(key):
                _plain(value) for key, value in term.items()}
    if isinstance(term, list):
        return [_plain(item) for item in term]
    return format_term(term)


def _frame(frame: Any) -> str:
    """{M, F, Arity, [{file, F}, {line, L}]} as 'm:f/a (file:line)'."""
    if not isinstance(frame, tuple) or len(frame) < 3:
        return format_term(frame)
    text = mfa(frame[:3]) or format_term(frame)
    location = dict(item for item in frame[3] if isinstance(item, tuple)
                    and len(item) == 2) \
        if len(frame) > 3 and isinstance(frame[3], list) else {}
    file, line = location.get("file"), location.get("line")
    if file is not None:
        # A charlist: a str when every code is below 256, else a list of
        # code points; anything else (chr() of a crafted one would raise)
        # is shown as a term.
        where = file if isinstance(file, str) else "".join(map(chr, file)) \
            if isinstance(file, list) and all(
                type(c) is int and 0 <= c < 0x110000 for c in file) \
            else format_term(file)
        text += f" ({where}:{line})" if line is not None else f" ({where})"
    return text


def _value(key: str, value: Any, shown: Callable[[Any], str]) -> Any:
    if key == "registered_name":
        return str(value) if isinstance(value, Atom) else None
    if key == "group_leader":
        return shown(value)
    if key in ("links", "monitored_by"):
        return [shown(item) for item in value]
    if key == "monitors":
        # {process, Pid} or {process, {Name, Node}}, and ports on OTP 26+.
        return [shown(item[1]) if isinstance(item, tuple) else
                format_term(item) for item in value]
    if key in ("initial_call", "current_function"):
        return mfa(value)
    if key == "current_stacktrace":
        return [_frame(frame) for frame in value]
    return _plain(value)


def proc_info(remote: Remote, spec: str) -> ProcInfo:
    """One process the way recon:info/1 groups it."""
    kind, text = target(spec)
    raw = remote.run(HELPER, "proc_info", (kind, text), Local("resolve", LIB))
    if isinstance(raw, tuple) and raw[0] == Atom("error"):
        refused(raw[1], spec, remote.node, "proc_info")
    reply = Reply(f"{HELPER}:proc_info", raw)
    fields = reply.pairs("items")
    fields["binary_count"] = reply.count("binary_count")
    fields["binary_memory"] = reply.count("binary_memory")
    # Each binary once: a queue's 100 references to 2 binaries of 210 KB
    # are 19.4 MB of binary_memory and 420 KB of binary_distinct.
    fields["binary_distinct"] = reply.count("binary_distinct")
    missing = [key for _, keys in GROUPS for key in keys
               if key not in fields]
    if missing:
        raise ProtocolError(f"{HELPER}:proc_info's items lack {missing[0]}")
    for key in COUNTS:
        fields[key] = count(f"{HELPER}:proc_info's {key}", fields[key])
    # A pid of another node as the node prints it (<5.81.0>): only it knows
    # its own index for that node. Its own pids print as <0.N.M>.
    texts = {pid: "".join(text) for pid, text in reply.list("pid_texts")}

    def shown(term: Any) -> str:
        if isinstance(term, Pid):
            return texts.get(term) or str(term)
        return format_term(term)
    keys = dict(GROUPS)

    def group(name: str) -> dict[str, Any]:
        return {key: _value(key, fields[key], shown) for key in keys[name]}
    return {"node": remote.node, "pid": str(reply["pid"]),
            "meta": group("meta"), "signals": group("signals"),
            "location": group("location"),
            "memory_used": group("memory_used"), "work": group("work")}
