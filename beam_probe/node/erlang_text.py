"""A helper's Erlang source made ready for the node's own scanner: its
function definitions only, without comments, each function's variables
renamed V1, V2, ... in the order they first appear.

Why: erl_scan:string/1 on the node makes an atom of every name in the text
it scans: variables, type variables of -spec and -type, quoted atoms.
Atoms are never freed. Scanned as written, the helpers made ~160 of their
variable names atoms on a node meeting beam-probe for the first time (a
broker, OTP 25: 611 atoms added at first contact, issue 27); the forms
are renamed V1, V2, ... once parsed anyway (forms.canonical_variables),
so renaming the text first costs the node nothing more than those names.

Line breaks are kept where they were, so a form's line numbers are still
the file's. Pure: text in, text out.
"""

from __future__ import annotations

import re

# One Erlang token or run of text the renaming must step over whole
# (Latin-1 letters are letters in Erlang names: À starts a variable, ß an
# atom). Order
# matters: comments, strings, quoted atoms and character literals first,
# since each may hold what would otherwise read as a variable or a dot.
_TOKEN = re.compile(r"""
    (?P<comment>%[^\n]*)
  | (?P<string>"(?:\\.|[^"\\])*")
  | (?P<quoted>'(?:\\.|[^'\\])*')
  | (?P<char>\$(?:\\(?:\^.|[0-7]{1,3}|x\{[0-9a-fA-F]+\}|x[0-9a-fA-F]{2}|.)|.))
  | (?P<number>\d[\d_]*(?:\#[0-9a-zA-Z_]+|\.\d[\d_]*(?:[eE][+-]?\d+)?)?)
  | (?P<variable>[A-Z_\u00c0-\u00d6\u00d8-\u00de][A-Za-z0-9_@\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u00ff]*)
  | (?P<name>[a-z\u00df-\u00f6\u00f8-\u00ff][A-Za-z0-9_@\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u00ff]*)
  | (?P<dot>\.(?=\s|%|\Z))
  | (?P<space>\s+)
  | (?P<other>.)
""", re.VERBOSE | re.DOTALL)


def functions_only(source: str) -> str:
    """``source`` with only its function definitions, comments dropped
    and each function's variables renamed V1, V2, ..."""
    out: list[str] = []
    form: list[str] = []
    names: dict[str, str] = {}
    first: str | None = None  # the kind of the form's first token

    def end_form() -> None:
        nonlocal first
        text = "".join(form)
        # A function definition starts with its name (an atom, quoted or
        # not); attributes (-spec, -type, -module, ...) start with '-':
        # only their lines are kept.
        out.append(text if first in ("name", "quoted")
                   else "\n" * text.count("\n"))
        form.clear()
        names.clear()
        first = None

    for match in _TOKEN.finditer(source):
        kind, text = match.lastgroup, match.group()
        if kind == "comment":
            continue
        if first is None and kind != "space":
            first = kind
        if kind == "variable" and text != "_":
            text = names.setdefault(text, f"V{len(names) + 1}")
        form.append(text)
        if kind == "dot":
            end_form()
    end_form()
    return "".join(out)


__all__ = ["functions_only"]
