"""A helper's reply, read by key.

Helpers reply with maps (erl_helpers/*.erl say which keys, with -spec);
a probe reads one through a Reply, which turns the atom keys into text
once and names the helper and the key when one is missing or of the wrong
kind: a ProtocolError with one line, never an internal KeyError.

Every figure is checked where it is read, for its type and its range: a
node keeps its counts and sizes in 64-bit words, so a count is an integer
from 0 to 2^64 - 1, and anything else (2^2000, -5, 1.5, a binary where a
count belongs) is a reply no node can give, from a hostile peer or a
broken one. It is refused there, naming the helper and the key
(BadReply, exit 8; a cluster node's row), before any arithmetic, array,
JSON or text meets it: such values reached those and ended in exit 1.
"""

from __future__ import annotations

import builtins
from typing import Any, Iterable, Iterator, Mapping

from beam_probe.erldist.terms import format_term
from beam_probe.errors import BadReply

# A node's counts and sizes are machine words: 64 bits on any node.
COUNT_LIMIT = 2**64


def shown(value: Any) -> str:
    """A value as an error line shows it: short, and never the thousand
    digits of a crafted integer (Python refuses to write one of over
    4,300 digits at all)."""
    if isinstance(value, int) and not isinstance(value, bool) \
            and value.bit_length() > 64:
        return f"an integer of {value.bit_length()} bits"
    if isinstance(value, (bytes, bytearray)) and len(value) > 16:
        return f"a binary of {len(value)} bytes"
    return escaped(format_term(value)[:40])[:40]


def escaped(text: str) -> str:
    """Control characters escaped: an error may be a plugin's first line
    or a JSON row, where a newline would start another, and keys and
    values are the peer's text."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def _bad(text: str) -> BadReply:
    return BadReply(escaped(text))


def count(where: str, value: Any, least: int = 0) -> int:
    """``value`` as a count or a size (an integer from ``least`` to
    2^64 - 1), or a BadReply naming ``where`` (the helper and the key)."""
    if isinstance(value, bool) or not isinstance(value, int) \
            or not least <= value < COUNT_LIMIT:
        raise _bad(f"{where} is {shown(value)}, not a count"
                       + (f" of at least {least}" if least else ""))
    return value


def integer(where: str, value: Any) -> int:
    """``value`` as a figure that may be negative (a change), within 64
    bits, or a BadReply naming ``where``."""
    if isinstance(value, bool) or not isinstance(value, int) \
            or not -COUNT_LIMIT // 2 <= value < COUNT_LIMIT:
        raise _bad(f"{where} is {shown(value)}, not an integer of 64 "
                       "bits")
    return value


def counts(where: str, values: Any, length: int | None = None,
           signed: bool = False) -> list[int]:
    """A list of counts (``length`` of them when given): a column, or a
    tuple of figures. A list of small integers arrives as a string
    (STRING_EXT), read as its code points."""
    if isinstance(values, str):
        values = [ord(c) for c in values]
    if not isinstance(values, (list, tuple)) or \
            (length is not None and len(values) != length):
        raise _bad(f"{where} is {shown(values)}, not "
                       + (f"{length} counts" if length is not None
                          else "a list of counts"))
    if signed:
        return [integer(where, v) for v in values]
    return [count(where, v) for v in values]


class Reply(Mapping[str, Any]):
    """``helper``'s reply map, keys as text."""

    __slots__ = ("helper", "_items")

    def __init__(self, helper: str, value: Any) -> None:
        if not isinstance(value, dict):
            raise _bad(f"{helper} replied {shown(value)}, not a map")
        self.helper = helper
        self._items = {str(key) if isinstance(key, str) else format_term(key):
                       item for key, item in value.items()}

    def __getitem__(self, key: str) -> Any:
        try:
            return self._items[key]
        except KeyError:
            raise _bad(f"{self.helper}'s reply has no {key!r}") \
                from None

    def __contains__(self, key: object) -> bool:
        # Mapping's own asks __getitem__, whose missing key is a BadReply.
        return key in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> builtins.int:
        return len(self._items)

    def int(self, key: str) -> builtins.int:
        """An integer figure that may be negative, within 64 bits."""
        return integer(f"{self.helper}'s {key}", self[key])

    def count(self, key: str, least: builtins.int = 0) -> builtins.int:
        """A count or a size: an integer from ``least`` to 2^64 - 1."""
        return count(f"{self.helper}'s {key}", self[key], least)

    def wordsize(self, key: str = "wordsize") -> builtins.int:
        """erlang:system_info(wordsize): 4 or 8 bytes."""
        value = self[key]
        if isinstance(value, bool) or not isinstance(value, int) \
                or value not in (4, 8):
            raise _bad(f"{self.helper}'s {key} is {shown(value)}, "
                           "neither 4 nor 8")
        return int(value)

    def counts(self, key: str, length: builtins.int | None = None,
               signed: bool = False) -> builtins.list[builtins.int]:
        """A list (or tuple) of counts; of 64-bit integers with
        ``signed``."""
        return counts(f"{self.helper}'s {key}", self[key], length, signed)

    def list(self, key: str) -> list[Any]:
        value = self[key]
        if not isinstance(value, list):
            raise _bad(f"{self.helper}'s {key} is {shown(value)}, not "
                           "a list")
        return value

    def map(self, key: str) -> "Reply":
        """A map within the reply, read the same way."""
        return Reply(f"{self.helper}'s {key}", self[key])

    def pairs(self, key: str) -> dict[str, Any]:
        """A proplist ([{Key, Value}], as erlang:memory/0 gives) by key."""
        value = self.list(key)
        if not all(isinstance(pair, tuple) and len(pair) == 2
                   for pair in value):
            raise _bad(f"{self.helper}'s {key} is not a list of pairs")
        return {str(k) if isinstance(k, str) else format_term(k): v
                for k, v in value}

    def sizes(self, key: str, names: Iterable[str]) -> dict[str, builtins.int]:
        """A proplist of counts (erlang:memory/0's), each of ``names``
        present and a count; others are left out."""
        pairs = self.pairs(key)
        out = {}
        for name in names:
            if name not in pairs:
                raise _bad(f"{self.helper}'s {key} has no {name}")
            out[name] = count(f"{self.helper}'s {key} {name}", pairs[name])
        return out


__all__ = ["BadReply", "COUNT_LIMIT", "Reply", "count", "counts", "escaped",
           "integer", "shown"]
