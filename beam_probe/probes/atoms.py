"""How the node's languages write an atom's name: Elixir's alias or
:atom, Erlang's quoted form. One place for the probes that put both
forms in JSON (inspect's key_elixir, family_elixir) and for text."""

from __future__ import annotations

import re

from beam_probe.erldist.terms import Atom, format_term

# Elixir's plain atom (:name) and module alias (MyApp.Cache), as its
# inspect writes them; anything else is quoted (:"its text").
PLAIN = r"[a-z_][A-Za-z0-9_@]*[?!]?"
ALIAS = r"Elixir(?:\.[A-Z][A-Za-z0-9_]*)+"


def elixir_atom(name: str) -> str:
    """An atom (its text, unquoted) as Elixir writes it: a module alias
    (Elixir.MyApp.Cache) as MyApp.Cache, a plain atom as :name, any other
    as :"its text". Only a name Elixir could write as an alias loses its
    'Elixir.': 'Elixir.', 'Elixir.foo bar' and 'Elixir.lower' are atoms
    no alias names, and Elixir writes them :"Elixir.lower"."""
    if re.fullmatch(ALIAS, name):
        return name[len("Elixir."):]
    if re.fullmatch(PLAIN, name):
        return ":" + name
    quoted = name.replace("\\", "\\\\").replace('"', '\\"')
    return ':"' + quoted + '"'


def erlang_atom(name: str) -> str:
    """An atom (its text, unquoted) as Erlang writes it, quoted where it
    must be ('Elixir.MyApp.Key')."""
    return format_term(Atom(name))


__all__ = ["ALIAS", "PLAIN", "elixir_atom", "erlang_atom"]
