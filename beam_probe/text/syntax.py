"""Names, functions and pids as the node's own language writes them.

Probes return Erlang's forms (``'Elixir.MyApp.Cache':loop/1``,
``<0.113.0>``, ``code_server``), and JSON keeps them: one documented form
for scripts. Text for people follows the node: on a node running Elixir
tables read ``MyApp.Cache.loop/1``, ``#PID<0.113.0>``, ``:code_server``
and ``MyApp.Cache``; ``--syntax erlang|elixir`` chooses instead.

A ``Syntax`` is a value the CLI chooses once per run and passes to every
renderer, which applies it to each value as it composes its text (a cell
before a table measures it, so columns line up in either language): no
module state, and nothing rewritten after rendering.
"""

from __future__ import annotations

import re
from typing import Callable

from beam_probe.probes.atoms import PLAIN, elixir_atom

# Patterns, compiled by re (and cached there) when first used: a run on an
# Erlang node uses two of them (shows_code), and compiling all five at
# import was ~1 ms of every run's start-up.
_ATOM = r"(?:'(?:[^'\\]|\\.)+'|[a-z][A-Za-z0-9_@]*)"
# m:f/a as terms.mfa writes it, not inside a longer word or a path.
_MFA = rf"(?<![\w'/.#]){_ATOM}:{_ATOM}/\d+"
_PID = r"(?<![#\w])<(\d+\.\d+\.\d+)>"
_ELIXIR_MODULE = r"(?<![\w'.])'?Elixir\.([A-Z][\w.]*)'?"
_QUOTED_MFA = rf"({_ATOM}):({_ATOM})$"


class Syntax:
    """Erlang's forms (``elixir`` false: values as they are) or Elixir's."""

    __slots__ = ("elixir",)

    def __init__(self, elixir: bool) -> None:
        self.elixir = elixir

    def __repr__(self) -> str:
        return "ELIXIR" if self.elixir else "ERLANG"

    def name(self, text: str | None) -> str | None:
        """A registered name (an atom's text): ``MyApp.Cache`` or
        ``:code_server`` in Elixir."""
        if not text or not self.elixir:
            return text
        return _module(text)

    def code(self, text: str) -> str:
        """The pids, functions and Elixir module names within one value
        (a cell, a group's name, a stack frame)."""
        if not self.elixir:
            return text
        text = re.sub(_MFA, _mfa, text)
        text = re.sub(_PID, r"#PID<\1>", text)
        return re.sub(_ELIXIR_MODULE, r"\1", text)


ERLANG = Syntax(False)
ELIXIR = Syntax(True)


def choose(asked: str, detect: Callable[[], bool]) -> Syntax:
    """``asked`` is auto, erlang or elixir; auto asks ``detect`` (whether
    the node runs Elixir) and keeps Erlang's forms if it cannot tell."""
    if asked == "auto":
        try:
            return ELIXIR if detect() else ERLANG
        except Exception:  # noqa: BLE001 - a guess is never worth failing for
            return ERLANG
    return ELIXIR if asked == "elixir" else ERLANG


def shows_code(rendered: str) -> bool:
    """Whether text holds a pid or a function, which Elixir writes apart:
    only then is the node asked whether it runs Elixir (a round trip)."""
    return bool(re.search(_PID, rendered) or re.search(_MFA, rendered))


def _unquote(atom: str) -> str:
    if atom.startswith("'") and atom.endswith("'"):
        return atom[1:-1].replace("\\'", "'").replace("\\\\", "\\")
    return atom


def _module(atom: str) -> str:
    return elixir_atom(_unquote(atom))


def _mfa(match: re.Match[str]) -> str:
    text = match.group(0)
    arity_at = text.rindex("/")
    head, arity = text[:arity_at], text[arity_at:]
    quoted = re.match(_QUOTED_MFA, head)
    if quoted is None:
        return text
    module, function = quoted.group(1), _unquote(quoted.group(2))
    if not re.fullmatch(PLAIN, function):
        function = f'"{function}"'
    return f"{_module(module)}.{function}{arity}"


__all__ = ["ELIXIR", "ERLANG", "Syntax", "choose",
           "shows_code"]
