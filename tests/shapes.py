"""What a JSON value must look like, read from the result types that the
probes return (beam_probe/probes/results.py): the JSON-shape tests derive
from the types instead of a second, hand-kept copy.

A TypedDict's keys appear in the order declared; the optional ones
(NotRequired, or a total=False part) may be absent; no other key may
appear. Values are checked against their declared types, recursively.
"""

from __future__ import annotations

import typing
from typing import Any, Union

from beam_probe.probes.results import is_typeddict, optional_keys

_NONE = type(None)


def conforms_to(value: Any, tp: Any, where: str = "$") -> None:
    """Raise AssertionError naming the first place ``value`` departs from
    the type ``tp``."""
    if tp is Any or tp is object:
        return
    if is_typeddict(tp):
        assert isinstance(value, dict), (where, value)
        hints = typing.get_type_hints(tp)
        declared = list(hints)
        optional = optional_keys(tp)
        unknown = [key for key in value if key not in hints]
        assert not unknown, (where, "keys not in the type", unknown)
        missing = [key for key in declared
                   if key not in optional and key not in value]
        assert not missing, (where, "keys missing", missing)
        order = [key for key in declared if key in value]
        assert list(value) == order, (where, list(value), order)
        for key in value:
            conforms_to(value[key], _strip(hints[key]), f"{where}.{key}")
        return
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is Union:
        errors = []
        for option in args:
            try:
                conforms_to(value, option, where)
                return
            except AssertionError as exc:
                errors.append(exc)
        raise AssertionError(where, value, tp, errors[:2])
    if origin in (list, typing.List):
        assert isinstance(value, list), (where, value)
        for i, item in enumerate(value):
            conforms_to(item, args[0] if args else Any, f"{where}[{i}]")
        return
    if origin in (tuple, typing.Tuple):
        # JSON has no tuples: a list of those types, in that order.
        assert isinstance(value, (list, tuple)) and \
            len(value) == len(args), (where, value)
        for i, (item, kind) in enumerate(zip(value, args)):
            conforms_to(item, kind, f"{where}[{i}]")
        return
    if origin in (dict, typing.Dict):
        assert isinstance(value, dict), (where, value)
        for key, item in value.items():
            assert isinstance(key, str), (where, key)
            conforms_to(item, args[1] if args else Any, f"{where}.{key}")
        return
    if tp is _NONE or tp is None:
        assert value is None, (where, value)
        return
    if tp is float:
        # A whole number may print without a fraction.
        assert isinstance(value, (int, float)) and \
            not isinstance(value, bool), (where, value)
        return
    if tp is int:
        assert isinstance(value, int) and not isinstance(value, bool), \
            (where, value)
        return
    assert isinstance(value, tp), (where, value, tp)


def _strip(tp: Any) -> Any:
    """NotRequired[X] -> X (get_type_hints keeps it on some releases)."""
    if typing.get_origin(tp) is getattr(typing, "NotRequired", None):
        return typing.get_args(tp)[0]
    return tp


__all__ = ["conforms_to"]
