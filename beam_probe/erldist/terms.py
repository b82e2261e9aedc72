"""Python values for the Erlang terms that have no natural Python twin.

Mapping used throughout beam-probe (decode and encode agree on it):

    atom            Atom (a str subclass); true/false are Python bools
    integer         int            float        float
    binary          bytes          bitstring    BitString
    tuple           tuple          proper list  list
    improper list   ImproperList   map          dict
    charlist sent as STRING_EXT    str (code points 0..255)
    pid / port / reference / fun   Pid / Port / Reference / Fun / ExportFun

Each type is immutable and hashable and prints the way Erlang prints it, so a
pid read from a node can be shown to an operator as ``<0.123.0>``.
"""

from __future__ import annotations

from typing import Any


class Atom(str):
    """An Erlang atom. A str subclass, so it compares equal to its name."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"Atom({str.__repr__(self)})"


class _Frozen:
    """Immutable record with value equality; cheaper to import than dataclasses."""

    __slots__ = ()

    def _key(self) -> tuple[Any, ...]:
        names: tuple[str, ...] = self.__slots__
        return tuple(getattr(self, name) for name in names)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable")

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other._key() == self._key()

    def __hash__(self) -> int:
        return hash((type(self).__name__,) + self._key())

    def __repr__(self) -> str:
        names: tuple[str, ...] = self.__slots__
        fields = ", ".join(f"{n}={getattr(self, n)!r}" for n in names)
        return f"{type(self).__name__}({fields})"


def _init(obj: object, **fields: Any) -> None:
    for name, value in fields.items():
        object.__setattr__(obj, name, value)


class Pid(_Frozen):
    """A process identifier. ``str()`` gives the form the owning node prints."""

    __slots__ = ("node", "id", "serial", "creation")
    node: str
    id: int
    serial: int
    creation: int

    def __init__(self, node: str, id: int, serial: int, creation: int) -> None:
        _init(self, node=node, id=id, serial=serial, creation=creation)

    def __str__(self) -> str:
        # A node prints its own pids as <0.Id.Serial>, the form an operator
        # pastes into its shell (list_to_pid/1); a pid of another node gets
        # that node's index in the printing node's table instead of 0,
        # which only the node knows: probes that show such pids ask it
        # (erlang:pid_to_list/1) rather than print them here.
        return f"<0.{self.id}.{self.serial}>"


class Port(_Frozen):
    __slots__ = ("node", "id", "creation")
    node: str
    id: int
    creation: int

    def __init__(self, node: str, id: int, creation: int) -> None:
        _init(self, node=node, id=id, creation=creation)

    def __str__(self) -> str:
        return f"#Port<0.{self.id}>"


class Reference(_Frozen):
    """A reference; ``ids`` are the 32-bit words in wire order."""

    __slots__ = ("node", "creation", "ids")
    node: str
    creation: int
    ids: tuple[int, ...]

    def __init__(self, node: str, creation: int, ids: tuple[int, ...]) -> None:
        _init(self, node=node, creation=creation, ids=tuple(ids))

    def __str__(self) -> str:
        # Erlang prints the most significant word first: the reverse of the wire.
        return "#Ref<0." + ".".join(str(i) for i in reversed(self.ids)) + ">"


class ExportFun(_Frozen):
    """``fun Module:Function/Arity``."""

    __slots__ = ("module", "function", "arity")
    module: str
    function: str
    arity: int

    def __init__(self, module: str, function: str, arity: int) -> None:
        _init(self, module=module, function=function, arity=arity)

    def __str__(self) -> str:
        return f"fun {self.module}:{self.function}/{self.arity}"


class Fun(_Frozen):
    """A local fun (NEW_FUN_EXT). Opaque here: kept whole so it can be re-sent."""

    __slots__ = ("arity", "uniq", "index", "module", "old_index", "old_uniq",
                 "pid", "free_vars")
    arity: int
    uniq: bytes
    index: int
    module: str
    old_index: int
    old_uniq: int
    pid: Pid
    free_vars: tuple[Any, ...]

    def __init__(self, arity: int, uniq: bytes, index: int, module: str,
                 old_index: int, old_uniq: int, pid: Pid,
                 free_vars: tuple[Any, ...]) -> None:
        _init(self, arity=arity, uniq=uniq, index=index, module=module,
              old_index=old_index, old_uniq=old_uniq, pid=pid,
              free_vars=tuple(free_vars))

    def __str__(self) -> str:
        return f"#Fun<{self.module}.{self.old_index}.{self.old_uniq}>"


class BitString(_Frozen):
    """A bitstring whose last byte holds only ``bits`` (1..7) significant bits."""

    __slots__ = ("data", "bits")
    data: bytes
    bits: int

    def __init__(self, data: bytes, bits: int) -> None:
        _init(self, data=bytes(data), bits=bits)


class ImproperList(_Frozen):
    """``[A, B | Tail]`` where Tail is not a list."""

    __slots__ = ("items", "tail")
    items: tuple[Any, ...]
    tail: Any

    def __init__(self, items: tuple[Any, ...] | list[Any], tail: Any) -> None:
        _init(self, items=tuple(items), tail=tail)


class FrozenList(tuple):  # type: ignore[type-arg]
    """A list used as a map key (Python lists are unhashable)."""

    __slots__ = ()


class FrozenMap(frozenset):  # type: ignore[type-arg]
    """A map used as a key of another map; holds its (key, value) pairs."""

    __slots__ = ()


def freeze(term: Any) -> Any:
    """Return a hashable stand-in for ``term`` so it can key a dict."""
    if isinstance(term, list):
        return FrozenList(freeze(t) for t in term)
    if isinstance(term, dict):
        return FrozenMap((freeze(k), freeze(v)) for k, v in term.items())
    if isinstance(term, tuple) and not isinstance(term, FrozenList):
        return tuple(freeze(t) for t in term)
    return term


def integers(term: Any) -> list[int]:
    """A list of integers as Python ints. Erlang sends a list whose every
    element is 0..255 as STRING_EXT, which decodes to a str: a column of
    small counts arrives that way."""
    if isinstance(term, str):
        return [ord(c) for c in term]
    return list(term)


def format_term(term: Any, _depth: int = 0) -> str:
    """Render a decoded term roughly as Erlang's ``~p`` would, on one line;
    what is nested past MAX_FORMAT_DEPTH is written ``...``."""
    if isinstance(term, bool):
        return "true" if term else "false"
    if isinstance(term, Atom):
        return _format_atom(term)
    if _depth >= MAX_FORMAT_DEPTH and isinstance(
            term, (tuple, list, FrozenList, ImproperList, dict)):
        return "..."
    inner = _depth + 1
    if isinstance(term, tuple) and not isinstance(term, FrozenList):
        return "{" + ",".join(format_term(t, inner) for t in term) + "}"
    if isinstance(term, (list, FrozenList)):
        return "[" + ",".join(format_term(t, inner) for t in term) + "]"
    if isinstance(term, ImproperList):
        head = ",".join(format_term(t, inner) for t in term.items)
        return f"[{head}|{format_term(term.tail, inner)}]"
    if isinstance(term, (dict, FrozenMap)):
        # A FrozenMap (a map that keys another, frozen) is its pairs.
        items = term.items() if isinstance(term, dict) else term
        pairs = ",".join(f"{format_term(k, inner)} => {format_term(v, inner)}"
                         for k, v in items)
        return "#{" + pairs + "}"
    if isinstance(term, BitString):
        return _format_bits(term)
    if isinstance(term, bytes):
        if all(32 <= b < 127 for b in term):
            return '<<"' + term.decode("ascii").replace('"', '\\"') + '">>'
        return "<<" + ",".join(str(b) for b in term) + ">>"
    if isinstance(term, str):
        return '"' + term.replace('"', '\\"') + '"'
    if isinstance(term, (Pid, Port, Reference, Fun, ExportFun)):
        return str(term)
    if isinstance(term, int) and term.bit_length() > _WRITTEN_BITS:
        # Python refuses to write an integer of over 4,300 digits (a
        # ValueError), and a peer can send one of millions.
        return f"<an integer of {term.bit_length()} bits>"
    return repr(term)


def _format_bits(term: BitString) -> str:
    """A bitstring as Erlang writes one, <<1,2,7:3>>: the whole bytes,
    then the last byte's ``bits`` high bits as a value of that size."""
    data, bits = term.data, term.bits
    if not data or not 1 <= bits <= 8:
        return "<<>>"
    if bits == 8:
        return format_term(bytes(data))
    last = f"{data[-1] >> (8 - bits)}:{bits}"
    return "<<" + ",".join([*(str(b) for b in data[:-1]), last]) + ">>"


# Terms nested deeper than this are written "...": the decoder takes
# terms some 490 levels deep, and writing one needs more of Python's
# stack than reading it, so a label of 450 nested tuples (any process
# may put/2 one, and OTP 26.2+ lets us read it) ended top and proc-count
# in RecursionError (issue 37's last review). No label worth reading is
# nested 64 deep.
MAX_FORMAT_DEPTH = 64


# Integers up to this many bits (308 digits) are written out.
_WRITTEN_BITS = 1024


def _format_atom(name: str) -> str:
    if name and (name[0].islower() and name[0].isascii()) and all(
            c.isalnum() or c in "_@" for c in name):
        return name
    return "'" + name.replace("\\", "\\\\").replace("'", "\\'") + "'"


def mfa(term: Any) -> str | None:
    """``{M, F, A}`` as ``m:f/a``; None for ``undefined`` or anything else."""
    if isinstance(term, tuple) and len(term) == 3:
        m, f, a = term
        if isinstance(a, list):
            a = len(a)
        if not (isinstance(m, Atom) and isinstance(f, Atom)
                and isinstance(a, int) and not isinstance(a, bool)
                and 0 <= a <= 255):
            return None  # no function of any node: not written as one
        return f"{_format_atom(m)}:{_format_atom(f)}/{a}"
    return None
