"""Names, functions and pids as the node's own language writes them.

Probes return Erlang's forms (``'Elixir.MyApp.Cache':loop/1``,
``<0.113.0>``, ``code_server``), and JSON keeps them: one documented form
for scripts. Text for people follows the node: on a node running Elixir
(its ``elixir`` application loaded) tables read ``MyApp.Cache.loop/1``,
``#PID<0.113.0>``, ``:code_server`` and ``MyApp.Cache``; ``--syntax
erlang|elixir`` chooses instead. A run shows one node, so the choice is
set once per run (``use``) and read by the renderers.
"""

from __future__ import annotations

import re
from typing import Any, Callable

_mode = "erlang"

_ATOM = r"(?:'(?:[^'\\]|\\.)+'|[a-z][A-Za-z0-9_@]*)"
# m:f/a as terms.mfa writes it, not inside a longer word or a path.
_MFA = re.compile(rf"(?<![\w'/.#]){_ATOM}:{_ATOM}/\d+")
_PID = re.compile(r"(?<![#\w])<(\d+\.\d+\.\d+)>")
_ELIXIR_MODULE = re.compile(r"(?<![\w'.])'?Elixir\.([A-Z][\w.]*)'?")
_PLAIN = re.compile(r"[a-z_][A-Za-z0-9_@]*[?!]?")


def use(mode: str) -> None:
    """Set the syntax of this run's text: "erlang" or "elixir"."""
    global _mode
    _mode = mode


def elixir() -> bool:
    return _mode == "elixir"


def choose(asked: str, detect: Callable[[], bool]) -> None:
    """``asked`` is auto, erlang or elixir; auto asks the node (``detect``)
    and keeps Erlang's forms if it cannot tell."""
    if asked == "auto":
        try:
            asked = "elixir" if detect() else "erlang"
        except Exception:  # noqa: BLE001 - a guess is never worth failing for
            asked = "erlang"
    use(asked)


def runs_elixir(remote: Any) -> bool:
    """Whether the node has the elixir application loaded (one call that
    names no new atom: application:loaded_applications/0)."""
    loaded = remote.call("application", "loaded_applications", [])
    return any(isinstance(app, tuple) and app and str(app[0]) == "elixir"
               for app in loaded)


def _unquote(atom: str) -> str:
    if atom.startswith("'") and atom.endswith("'"):
        return atom[1:-1].replace("\\'", "'").replace("\\\\", "\\")
    return atom


def _module(atom: str) -> str:
    name = _unquote(atom)
    if name.startswith("Elixir."):
        return name[len("Elixir."):]
    return ":" + (name if _PLAIN.fullmatch(name) else f'"{name}"')


def _mfa(match: re.Match) -> str:
    text = match.group(0)
    arity_at = text.rindex("/")
    head, arity = text[:arity_at], text[arity_at:]
    quoted = re.match(rf"({_ATOM}):({_ATOM})$", head)
    if quoted is None:
        return text
    module, function = quoted.group(1), _unquote(quoted.group(2))
    if not _PLAIN.fullmatch(function):
        function = f'"{function}"'
    return f"{_module(module)}.{function}{arity}"


def shows_code(rendered: str) -> bool:
    """Whether text holds a pid or a function, which Elixir writes apart."""
    return bool(_PID.search(rendered) or _MFA.search(rendered))


def name(text: str | None) -> str | None:
    """A registered name (an atom's text): ``MyApp.Cache`` or
    ``:code_server`` on Elixir, unchanged on Erlang."""
    if not text or _mode != "elixir":
        return text
    return _module(text)


def text(rendered: str) -> str:
    """Pids, functions and Elixir module names within rendered text."""
    if _mode != "elixir":
        return rendered
    rendered = _MFA.sub(_mfa, rendered)
    rendered = _PID.sub(r"#PID<\1>", rendered)
    return _ELIXIR_MODULE.sub(r"\1", rendered)


__all__ = ["choose", "elixir", "name", "runs_elixir", "shows_code", "text",
           "use"]
