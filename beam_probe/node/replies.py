"""A helper's reply, read by key.

Helpers reply with maps (erl_helpers/*.erl say which keys, with -spec);
a probe reads one through a Reply, which turns the atom keys into text
once and names the helper and the key when one is missing or of the wrong
kind: a ProtocolError with one line, never an internal KeyError.
"""

from __future__ import annotations

from typing import Any, Iterator, Mapping

from beam_probe.erldist.errors import ProtocolError
from beam_probe.erldist.terms import format_term


class Reply(Mapping[str, Any]):
    """``helper``'s reply map, keys as text."""

    __slots__ = ("helper", "_items")

    def __init__(self, helper: str, value: Any) -> None:
        if not isinstance(value, dict):
            raise ProtocolError(f"{helper} replied {format_term(value)[:80]}"
                                ", not a map")
        self.helper = helper
        self._items = {str(key): item for key, item in value.items()}

    def __getitem__(self, key: str) -> Any:
        try:
            return self._items[key]
        except KeyError:
            raise ProtocolError(f"{self.helper}'s reply has no {key!r}") \
                from None

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def int(self, key: str) -> int:
        """An integer figure."""
        value = self[key]
        if isinstance(value, bool) or not isinstance(value, int):
            raise ProtocolError(f"{self.helper}'s {key} is "
                                f"{format_term(value)[:40]}, not an integer")
        return value

    def list(self, key: str) -> list[Any]:
        value = self[key]
        if not isinstance(value, list):
            raise ProtocolError(f"{self.helper}'s {key} is not a list")
        return value

    def map(self, key: str) -> "Reply":
        """A map within the reply, read the same way."""
        return Reply(f"{self.helper}'s {key}", self[key])

    def pairs(self, key: str) -> dict[str, Any]:
        """A proplist ([{Key, Value}], as erlang:memory/0 gives) by key."""
        value = self.list(key)
        try:
            return {str(k): v for k, v in value}
        except (TypeError, ValueError):
            raise ProtocolError(f"{self.helper}'s {key} is not a list of "
                                "pairs") from None


__all__ = ["Reply"]
