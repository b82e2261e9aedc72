"""Read Erlang terms written as text, as ``file:consult/1`` reads them.

beam-probe needs this for one file: the ``-ssl_dist_optfile`` a TLS node is
started with, which holds ``[{server, Opts}, {client, Opts}].``. The
grammar is the part of Erlang's term syntax such files use: atoms (bare and
quoted), strings (adjacent ones joined), integers (with ``Base#``),
floats, characters (``$a``), binaries of strings and integers, lists
(proper and ``[H | T]``), tuples, maps, and ``fun M:F/A`` (kept as an
:class:`ExportFun`, never called). Each term ends with ``.``. A variable, an
operator or a fun body is not a term; those get a ConsultError naming the
line, as erl would refuse them too.

Pure: text in, Python values out (the same mapping as the codec, see
``dist.terms``), so it is tested with strings alone.
"""

from __future__ import annotations

import re
from typing import Any, Callable

from beam_probe.erldist.terms import Atom, ExportFun, ImproperList


class ConsultError(ValueError):
    """The text is not a sequence of Erlang terms; says where and why."""


# One token per match, tried in this order. Whitespace and % comments are
# skipped between tokens (Erlang's comments run to the end of the line).
_TOKEN = re.compile(r"""
    (?P<skip>    (?:\s+|%[^\n]*)+ )
  | (?P<float>   -?\d+\.\d+(?:[eE][+-]?\d+)? )
  | (?P<based>   -?\d{1,2}\#[0-9a-zA-Z]+ )
  | (?P<int>     -?\d+ )
  | (?P<string>  "(?:[^"\\]|\\.)*" )
  | (?P<qatom>   '(?:[^'\\]|\\.)*' )
  | (?P<atom>    [a-z][A-Za-z0-9_@]* )
  | (?P<char>    \$(?:\\(?:x\{[0-9a-fA-F]+\}|x[0-9a-fA-F]{2}|[0-7]{1,3}|\^.|.)|.) )
  | (?P<var>     [A-Z_][A-Za-z0-9_@]* )
  | (?P<punct>   <<|>>|=>|\#\{|[\[\]{}(),|./:] )
""", re.VERBOSE | re.DOTALL)

_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "s": " ", "e": "\x1b",
            "b": "\b", "f": "\f", "v": "\v", "d": "\x7f", "\\": "\\",
            '"': '"', "'": "'"}
_ESCAPE = re.compile(r"\\(x\{[0-9a-fA-F]+\}|x[0-9a-fA-F]{2}|[0-7]{1,3}"
                     r"|\^.|.)", re.DOTALL)


def _unescape(body: str) -> str:
    def one(match: re.Match[str]) -> str:
        code = match.group(1)
        if code.startswith("x{"):
            point = int(code[2:-1], 16)
            # Past Unicode (chr() overflows) or a surrogate (no UTF-8, so
            # no atom or binary of it): one line, not a traceback.
            if point > 0x10FFFF or 0xD800 <= point <= 0xDFFF:
                raise ConsultError(f"\\{code} is not a Unicode character")
            return chr(point)
        if code[0] == "x" and len(code) == 3:
            return chr(int(code[1:], 16))
        if code[0] in "01234567":
            return chr(int(code, 8))
        if code[0] == "^":
            return chr(ord(code[1]) & 0x1F)
        return _ESCAPES.get(code, code)
    return _ESCAPE.sub(one, body)


# A token: its kind (a group name of _TOKEN, or "value": a term a caller
# put in the stream in place of text, held as (term, text written)), its
# text or value, its line.
Token = tuple[str, Any, int]


class _Tokens:
    def __init__(self, text: str, items: list[Token] | None = None) -> None:
        self.index = 0
        self.items: list[Token] = []
        if items is not None:
            self.items = items + [("eof", "", items[-1][2] if items else 1)]
            return
        pos, line = 0, 1
        while pos < len(text):
            match = _TOKEN.match(text, pos)
            if match is None:
                raise ConsultError(f"line {line}: cannot read "
                                   f"{text[pos:pos + 12]!r}")
            kind, value = match.lastgroup or "", match.group()
            if kind != "skip":
                self.items.append((kind, value, line))
            line += value.count("\n")
            pos = match.end()
        self.items.append(("eof", "", line))

    def peek(self) -> tuple[str, Any, int]:
        return self.items[self.index]

    def take(self) -> tuple[str, Any, int]:
        token = self.items[self.index]
        if token[0] != "eof":
            self.index += 1
        return token

    def expect(self, punct: str) -> None:
        kind, value, line = self.take()
        if kind != "punct" or value != punct:
            raise ConsultError(f"line {line}: expected {punct!r}, found "
                               f"{_written(kind, value)}")


def _written(kind: str, value: Any) -> str:
    if kind == "eof":
        return "the end"
    return repr(value[1] if kind == "value" else value)


def parse_terms(text: str) -> list[Any]:
    """Every ``Term.`` in ``text``, in order."""
    tokens = _Tokens(text)
    terms = []
    try:
        while tokens.peek()[0] != "eof":
            terms.append(_term(tokens))
            tokens.expect(".")
    except RecursionError:
        # Config files nest a few levels; hundreds is not a config file.
        raise ConsultError(f"line {tokens.peek()[2]}: terms nested too "
                           "deeply") from None
    return terms


def tokenize(text: str) -> list[Token]:
    """``text`` as Erlang tokens (whitespace and comments dropped), for a
    caller that rewrites some before :func:`parse_sequence` reads them."""
    return _Tokens(text).items[:-1]


def parse_sequence(items: list[Token],
                   variable: Callable[[str, int], Any] | None = None
                   ) -> list[Any]:
    """The comma-separated terms ``items`` hold, with no final dot: a
    function's arguments as a user writes them (``sessions, {a, _}``).
    ``variable(name, line)`` gives the value a variable stands for (a match
    specification's ``'$1'``); without it a variable is refused, as in a
    file. A token of kind ``value`` holds ``(term, text)`` and stands for
    the term (another language's reader, Elixir's, makes its own tokens)."""
    if variable is not None:
        items = [("value", (variable(text, line), text), line)
                 if kind == "var"
                 else (kind, text, line) for kind, text, line in items]
    tokens = _Tokens("", items)
    if tokens.peek()[0] == "eof":
        return []
    terms = []
    try:
        while True:
            terms.append(_term(tokens))
            kind, value, line = tokens.take()
            if kind == "eof":
                return terms
            if (kind, value) != ("punct", ","):
                raise ConsultError(f"line {line}: expected ',' or the end, "
                                   f"found {_written(kind, value)}")
    except RecursionError:
        raise ConsultError("terms nested too deeply") from None


def _term(tokens: _Tokens) -> Any:
    kind, value, line = tokens.take()
    if kind == "value":
        return value[0]
    if kind == "int":
        return int(value)
    if kind == "based":
        base, _, digits = value.lstrip("-").partition("#")
        try:
            number = int(digits, int(base))
        except ValueError:
            raise ConsultError(f"line {line}: bad number {value!r}") from None
        return -number if value.startswith("-") else number
    if kind == "float":
        return float(value)
    if kind == "char":
        return ord(_unescape(value[1:]))
    if kind == "string":
        parts = [_unescape(value[1:-1])]
        while tokens.peek()[0] == "string":
            parts.append(_unescape(tokens.take()[1][1:-1]))
        return "".join(parts)
    if kind == "atom":
        if value == "fun":
            return _fun(tokens, line)
        if value in ("true", "false"):
            return value == "true"
        return Atom(value)
    if kind == "qatom":
        return Atom(_unescape(value[1:-1]))
    if kind == "punct":
        if value == "[":
            return _list(tokens)
        if value == "{":
            return tuple(_sequence(tokens, "}"))
        if value == "#{":
            return _map(tokens)
        if value == "<<":
            return _binary(tokens, line)
    if kind == "var":
        raise ConsultError(f"line {line}: {value} is a variable, not a term")
    if kind == "eof":
        raise ConsultError(f"line {line}: a term is missing at the end")
    raise ConsultError(f"line {line}: unexpected {_written(kind, value)}")


def _sequence(tokens: _Tokens, close: str) -> list[Any]:
    items: list[Any] = []
    if tokens.peek()[:2] == ("punct", close):
        tokens.take()
        return items
    while True:
        items.append(_term(tokens))
        kind, value, line = tokens.peek()
        if (kind, value) == ("punct", ","):
            tokens.take()
            continue
        if close == "]" and (kind, value) == ("punct", "|"):
            return items
        tokens.expect(close)
        return items


def _list(tokens: _Tokens) -> Any:
    items = _sequence(tokens, "]")
    if tokens.peek()[:2] != ("punct", "|"):
        return items
    tokens.take()
    tail = _term(tokens)
    tokens.expect("]")
    if isinstance(tail, list):
        return items + tail
    return ImproperList(items, tail)


def _map(tokens: _Tokens) -> dict[Any, Any]:
    result: dict[Any, Any] = {}
    if tokens.peek()[:2] == ("punct", "}"):
        tokens.take()
        return result
    while True:
        key = _term(tokens)
        tokens.expect("=>")
        try:
            if key in result and not any(k == key and type(k) is type(key)
                                         for k in result):
                # 1, 1.0 and true are three keys in Erlang but one in a
                # dict: refused rather than one of them silently lost.
                raise ConsultError(f"line {tokens.peek()[2]}: map keys "
                                   f"{key!r} and one equal to it in Python "
                                   "(1, 1.0, true) cannot be told apart "
                                   "here")
            result[key] = _term(tokens)
        except TypeError:
            raise ConsultError(f"line {tokens.peek()[2]}: a map key must be "
                               "a plain term") from None
        if tokens.peek()[:2] == ("punct", ","):
            tokens.take()
            continue
        tokens.expect("}")
        return result


def _binary(tokens: _Tokens, line: int) -> bytes:
    out = bytearray()
    for item in _sequence(tokens, ">>"):
        if isinstance(item, str) and not isinstance(item, Atom):
            out += item.encode("latin-1", "strict") \
                if all(ord(c) < 256 for c in item) else item.encode("utf-8")
        elif isinstance(item, int) and not isinstance(item, bool):
            out.append(item & 0xFF)
        else:
            raise ConsultError(f"line {line}: a binary holds strings and "
                               "integers only here")
    return bytes(out)


def _fun(tokens: _Tokens, line: int) -> ExportFun:
    # Only `fun M:F/A` can be written in a consulted file (a fun body would
    # need compiling; OTP's ssl guide says the same of -ssl_dist_optfile).
    parts = [tokens.take(), tokens.take(), tokens.take(), tokens.take(),
             tokens.take()]
    shape = [(k, v) if k == "punct" else k.replace("qatom", "atom")
             for k, v, _ in parts]
    if shape != ["atom", ("punct", ":"), "atom", ("punct", "/"), "int"]:
        raise ConsultError(f"line {line}: only `fun Module:Function/Arity` "
                           "can be written in a term file")
    module, function = (_unescape(v[1:-1]) if k == "qatom" else v
                        for k, v, _ in (parts[0], parts[2]))
    return ExportFun(Atom(module), Atom(function), int(parts[4][1]))


__all__ = ["ConsultError", "Token", "parse_sequence", "parse_terms", "tokenize"]
