"""What ``calls`` traces, as the user writes it: a function
(``ets:insert/2``, ``MyApp.Cache.put/2``), a match on its arguments
(``--match 'sessions, _'``), and the rules that refuse what would hurt the
node.

Pure: text in, a :class:`FunctionSpec` and a match-specification head
(Erlang terms as ``erldist.terms`` maps them) out, or one
:class:`UsageError` line. The node never sees text: the head travels as
terms, so nothing the user writes is scanned or evaluated there.

The match is read in the function's language: Erlang's for ``m:f/a``
(``sessions`` an atom, ``"abc"`` a list, ``X`` a variable), Elixir's for
``Mod.f/a`` and ``:mod.f/a`` (``:sessions`` an atom, ``"abc"`` a binary,
``x`` a variable). Erlang's reader is ``erldist.consult``'s, the one that
reads -ssl_dist_optfile, given variables; Elixir's tokens are made here and
read by the same parser.

Safety follows recon_trace's rule (it refuses a module of ``'_'``, ``io``
and ``lists`` with any arguments unless a match specification narrows
them) and adds what a tracer run from outside must also fear; see
:func:`check_safe`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Optional

from beam_probe.erldist.consult import (ConsultError, Token, parse_sequence,
                                        tokenize)
from beam_probe.erldist.errors import UsageError
from beam_probe.erldist.terms import Atom, ImproperList

# The option that lets a refused specification through: written out, so
# that nobody traces every call of a hot module by accident.
ALLOW_FLAG = "--allow-broad"

# An atom holds at most 255 characters: a longer one in a head would fail
# to decode on the node, and a bad term closes the connection.
MAX_NAME = 255
MAX_ARITY = 255          # the VM's own limit on a function's arity
# --match bounds: a head is a handful of arguments; these stop a pasted
# term from costing us (a recursive reader) or the node (a huge literal
# compiled into every traced call's match).
MAX_MATCH_TEXT = 1000
MAX_NESTING = 16

# Every process calls these all the time; a trace of the whole module (or
# of io and lists, as recon_trace says, of any of their functions) with no
# narrowing match sends the tracer a message for nearly every reduction.
_RECON_BANNED = frozenset({"io", "lists"})
_HOT_MODULES = frozenset({
    "erlang", "ets", "maps", "lists", "io", "io_lib", "binary", "string",
    "unicode", "proplists", "gen", "gen_server", "gen_statem", "proc_lib",
    "erl_eval", "prim_eval", "timer", "erpc", "rpc"})
# The tracer itself is an erl_eval fun taking its messages with
# prim_eval:'receive'/2, counting them in ets (match_spec_run, insert_new,
# update_counter, under lists:zipwith) and sending summaries: tracing the
# functions it calls would make each traced call cost a second (our own
# processes are left untraced, but every process evaluating code, a
# shell's, an rpc's, goes through erl_eval).
_TRACER_OWN: dict[tuple[str, Optional[str]], str] = {
    ("erl_eval", None): "the tracer runs as an erl_eval fun",
    ("prim_eval", None): "the tracer takes its messages with prim_eval",
    ("ets", "update_counter"): "the tracer counts with ets:update_counter",
    ("ets", "insert_new"): "the tracer counts with ets:insert_new",
    ("ets", "match_spec_run"): "the tracer reads its messages with "
                               "ets:match_spec_run",
    ("erlang", "send"): "the tracer sends its summaries with erlang:send",
    ("erlang", "process_info"): "the tracer checks its mailbox with "
                                "erlang:process_info",
}

_ERLANG_ATOM = r"(?:[a-z][A-Za-z0-9_@]*|'(?:[^'\\]|\\.)*'|_)"
_ERLANG_MFA = re.compile(
    rf"(?P<m>{_ERLANG_ATOM}):(?P<f>{_ERLANG_ATOM})/(?P<a>\d+|_)", re.DOTALL)
_ALIAS = r"[A-Z][A-Za-z0-9_]*(?:\.[A-Z][A-Za-z0-9_]*)*"
_ELIXIR_ATOM = r":(?:[A-Za-z_][A-Za-z0-9_@]*|\"(?:[^\"\\]|\\.)*\"" \
               r"|'(?:[^'\\]|\\.)*')"
# Elixir's operators are functions of Kernel (Kernel.+/2); the compiler
# inlines most calls of them to erlang's, say so if nothing shows.
_OPERATOR = r"(?:===|!==|==|!=|<=|>=|<>|\+\+|--|\.\.|&&|\|\||[-+*/<>!])"
_ELIXIR_FUN = rf"(?:[a-z_][A-Za-z0-9_]*[?!]?|\"(?:[^\"\\]|\\.)*\"|{_OPERATOR})"
_ELIXIR_MFA = re.compile(
    rf"(?P<m>{_ALIAS}|{_ELIXIR_ATOM})\.(?P<f>{_ELIXIR_FUN})/(?P<a>\d+|_)",
    re.DOTALL)

_FORMS = ("m:f/a (ets:insert/2, 'my mod':f/1), Mod.f/a (MyApp.Cache.put/2) "
          "or :mod.f/a (:ets.insert/2); _ for any arity")


@dataclass(frozen=True)
class FunctionSpec:
    """A function to trace, named as the node names it."""

    module: str            # "ets", "Elixir.MyApp.Cache"; "_": any module
    function: str          # "_": any function of the module
    arity: Optional[int]   # None: any arity (the user wrote _)
    text: str              # as the user wrote it, for messages
    # Written in Elixir's form: --match is then read as Elixir.
    elixir: bool = False

    def mfa(self) -> tuple[str, str, Optional[int]]:
        return self.module, self.function, self.arity


def _unescape(body: str) -> str:
    """A quoted name's or string's escapes, the common ones of Erlang and
    Elixir (\\n \\t \\\\ \\' \\" \\xHH \\x{H..} \\u{H..})."""
    def one(match: re.Match[str]) -> str:
        code = match.group(1)
        if code[0] in "xu" and len(code) > 1:
            point = int(code[1:].strip("{}"), 16)
            if 0xD800 <= point <= 0xDFFF:
                # A surrogate: chr() makes it, UTF-8 cannot encode it.
                raise ValueError(code)
            return chr(point)
        return {"n": "\n", "t": "\t", "r": "\r", "s": " ", "e": "\x1b",
                "0": "\0"}.get(code, code)
    try:
        return re.sub(r"\\(x\{[0-9a-fA-F]{1,6}\}|x[0-9a-fA-F]{2}"
                      r"|u\{[0-9a-fA-F]{1,6}\}|u[0-9a-fA-F]{4}|.)",
                      one, body, flags=re.DOTALL)
    except (ValueError, OverflowError):
        raise UsageError(f"a bad escape in {body!r}") from None


def _name(text: str, what: str, spec: str) -> str:
    if text[:1] in "'\"":
        text = _unescape(text[1:-1])
    if not text:
        raise UsageError(f"{spec!r}: the {what} name is empty")
    if len(text) > MAX_NAME:
        raise UsageError(f"{spec[:40]!r}...: a {what} name is at most "
                         f"{MAX_NAME} characters (an atom's limit)")
    return text


def parse_function(text: str) -> FunctionSpec:
    """``m:f/a`` (Erlang) or ``Mod.f/a`` / ``:mod.f/a`` (Elixir); ``_`` for
    any arity (and, in Erlang's form, any module or function, which
    :func:`check_safe` then judges)."""
    spec = text.strip()
    if len(spec) > 2 * MAX_NAME + 16:
        raise UsageError(f"the function {spec[:40]!r}... is too long: "
                         f"names are at most {MAX_NAME} characters")
    erlang = _ERLANG_MFA.fullmatch(spec)
    elixir = None if erlang else _ELIXIR_MFA.fullmatch(spec)
    match = erlang or elixir
    if match is None:
        hint = ""
        if spec and "/" not in spec:
            hint = " (the arity is missing: add /N, or /_ for any)"
        raise UsageError(f"cannot read the function {spec!r}{hint}: "
                         f"write {_FORMS}")
    module = match.group("m")
    if elixir:
        module = (module[1:] if module.startswith(":")
                  else f"Elixir.{module}")
    module = _name(module, "module", spec)
    function = _name(match.group("f"), "function", spec)
    arity_text = match.group("a")
    arity = None if arity_text == "_" else int(arity_text)
    if arity is not None and arity > MAX_ARITY:
        raise UsageError(f"{spec!r}: an arity is 0 to {MAX_ARITY}")
    return FunctionSpec(module, function, arity, spec, elixir=bool(elixir))


# --- the match: the function's arguments as the user writes them ---------

# Elixir's term tokens, each made into one the Erlang parser reads (or a
# "value" token holding the term itself). Kept to what a match needs.
_ELIXIR_TOKEN = re.compile(r"""
    (?P<skip>    \s+ )
  | (?P<float>   -?\d[\d_]*\.\d[\d_]*(?:[eE][+-]?\d+)? )
  | (?P<hex>     -?0x[0-9a-fA-F_]+ )
  | (?P<int>     -?\d[\d_]* )
  | (?P<string>  "(?:[^"\\]|\\.)*" )
  | (?P<chars>   '(?:[^'\\]|\\.)*' )
  | (?P<char>    \?(?:\\.|.) )
  | (?P<atom>    :(?:[A-Za-z_][A-Za-z0-9_@]*[?!]?|"(?:[^"\\]|\\.)*"
                   |'(?:[^'\\]|\\.)*') )
  | (?P<key>     (?:[a-z_][A-Za-z0-9_@]*[?!]?|"(?:[^"\\]|\\.)*"):(?=\s) )
  | (?P<struct>  %(?:[A-Z][A-Za-z0-9_]*(?:\.[A-Z][A-Za-z0-9_]*)*)\{ )
  | (?P<alias>   [A-Z][A-Za-z0-9_]*(?:\.[A-Z][A-Za-z0-9_]*)* )
  | (?P<ident>   [a-z_][A-Za-z0-9_]*[?!]? )
  | (?P<punct>   <<|>>|=>|%\{|[\[\]{}(),|] )
""", re.VERBOSE | re.DOTALL)


def _elixir_tokens(text: str) -> list[Token]:
    items: list[Token] = []
    opened: list[str] = []   # the brackets open, innermost last

    def value(term: Any, written: str) -> None:
        items.append(("value", (term, written), 1))

    pos = 0
    while pos < len(text):
        match = _ELIXIR_TOKEN.match(text, pos)
        if match is None:
            raise UsageError(f"--match: cannot read {text[pos:pos + 12]!r} "
                             "(Elixir terms: :atom, 1, \"bin\", {a, b}, "
                             "[...], %{k: v}, x, _)")
        kind, written = match.lastgroup or "", match.group()
        pos = match.end()
        if kind == "skip":
            continue
        if kind == "float":
            value(float(written.replace("_", "")), written)
        elif kind in ("int", "hex"):
            value(int(written.replace("_", ""), 0), written)
        elif kind == "string" and "<<" in opened:
            # Within <<...>> a string is its UTF-8 bytes, as Elixir makes
            # them (the Erlang parser would write Latin-1).
            data = _unescape(written[1:-1]).encode("utf-8")
            for i, byte in enumerate(data):
                items += [("punct", ",", 1)] if i else []
                items.append(("int", str(byte), 1))
        elif kind == "string":
            value(_unescape(written[1:-1]).encode("utf-8"), written)
        elif kind == "chars":
            value(_unescape(written[1:-1]), written)
        elif kind == "char":
            value(ord(_unescape(written[1:])), written)
        elif kind == "atom":
            name = written[1:]
            if name[:1] in "'\"":
                name = _unescape(name[1:-1])
            value(_atom(name), written)
        elif kind == "key":
            if opened[-1:] != ["%{"]:
                raise UsageError(f"--match: {written} is a keyword key; "
                                 "here only in a map (%{k: v}); write a "
                                 "keyword list as [{:k, v}]")
            name = written[:-1]
            if name.startswith('"'):
                name = _unescape(name[1:-1])
            value(_atom(name), written)
            items.append(("punct", "=>", 1))
        elif kind == "struct":
            opened.append("%{")
            items.append(("punct", "#{", 1))
            value(Atom("__struct__"), written)
            items.append(("punct", "=>", 1))
            value(Atom(f"Elixir.{written[1:-1]}"), written)
            if not text[pos:].lstrip().startswith("}"):
                items.append(("punct", ",", 1))
        elif kind == "alias":
            value(Atom(f"Elixir.{written}"), written)
        elif kind == "ident":
            if written in ("true", "false"):
                value(written == "true", written)
            elif written == "nil":
                value(Atom("nil"), written)
            else:
                items.append(("var", written, 1))
        else:
            if written in ("[", "{", "%{", "<<"):
                opened.append(written)
            elif written in ("]", "}", ">>") and opened:
                opened.pop()
            items.append(("punct", "#{" if written == "%{" else written, 1))
    return items


def _atom(name: str) -> Atom:
    if len(name) > MAX_NAME:
        raise UsageError(f"--match: an atom is at most {MAX_NAME} "
                         f"characters ({name[:20]!r}... is {len(name)})")
    return Atom(name)


_VARIABLE_ATOM = re.compile(r"\$(?:\d+|_|\$)")


# What the other language's terms look like, for a hint when a match does
# not read: Elixir's :atom and %{...} in an Erlang-form spec, Erlang's
# #{...} in an Elixir-form one.
_ELIXIR_LOOK = re.compile(r"%\{|(?:^|[\s,{\[(]):[A-Za-z_\"']")
_ERLANG_LOOK = re.compile(r"#\{")


def parse_match(text: str, arity: Optional[int],
                elixir: bool = False) -> list[Any]:
    """See :func:`_parse_match`; a match that does not read, written in
    the other language's look, gets a hint which."""
    try:
        return _parse_match(text, arity, elixir)
    except UsageError as error:
        if elixir and _ERLANG_LOOK.search(text):
            raise UsageError(f"{error}; the function is in Elixir's form, so "
                             "--match is read as Elixir (:atom, %{k => v}); "
                             "write m:f/a for Erlang's") from None
        if not elixir and _ELIXIR_LOOK.search(text):
            raise UsageError(f"{error}; the function is in Erlang's form, so "
                             "--match is read as Erlang (atom, #{k => V}); "
                             "write :mod.f/a or Mod.f/a for Elixir's") \
                from None
        raise


def _parse_match(text: str, arity: Optional[int],
                 elixir: bool = False) -> list[Any]:
    """The match-specification head for ``--match``: one term a
    argument, ``Atom("_")`` for ``_`` (and ``_Name``), ``Atom("$1")``,
    ``Atom("$2")``... for the variables in the order they first appear (a
    variable written twice must match equal values). ``elixir``: read in
    Elixir's syntax (pass :attr:`FunctionSpec.elixir`).

    ``arity`` None (the user wrote ``/_``): the match fixes it, and the
    caller traces ``len(head)``. Otherwise the count of arguments must be
    ``arity``."""
    if len(text) > MAX_MATCH_TEXT:
        raise UsageError(f"--match is {len(text)} characters; at most "
                         f"{MAX_MATCH_TEXT}")
    names: dict[str, Atom] = {}

    def variable(name: str, _line: int = 1) -> Atom:
        if name.startswith("_"):
            return Atom("_")
        return names.setdefault(name, Atom(f"${len(names) + 1}"))

    try:
        items = _elixir_tokens(text) if elixir else tokenize(text)
    except ConsultError as error:
        raise UsageError(f"--match: {_plain(error)} (Erlang terms: atom, "
                         "1, \"list\", <<\"bin\">>, {a, B}, [...], "
                         "#{k => V}, _)") from None
    _check_nesting(items)
    for kind, value, _ in items:
        # '$1' or '_' written as an atom would be read by the node as a
        # variable or a wildcard, and collide with ours: say so.
        if kind == "qatom" and (_VARIABLE_ATOM.fullmatch(value[1:-1])):
            raise UsageError(f"--match: {value} would be read as a match "
                             "variable; write a variable (X) instead")
        if kind == "qatom" and len(_unescape(value[1:-1])) > MAX_NAME:
            raise UsageError(f"--match: an atom is at most {MAX_NAME} "
                             "characters")
        if kind == "value" and isinstance(value[0], Atom) \
                and _VARIABLE_ATOM.fullmatch(value[0]):
            raise UsageError(f"--match: {value[1]} would be read as a match "
                             "variable; write a variable (x) instead")
    try:
        head = parse_sequence(items, variable)
    except ConsultError as error:
        raise UsageError(f"--match: {_plain(error)}") from None
    for term in head:
        _check_keys(term)
    if arity is not None and len(head) != arity:
        raise UsageError(f"--match gives {len(head)} argument"
                         f"{'' if len(head) == 1 else 's'} where the "
                         f"function takes {arity}")
    if len(head) > MAX_ARITY:
        raise UsageError(f"--match gives {len(head)} arguments; a function "
                         f"takes at most {MAX_ARITY}")
    return head


def _plain(error: ConsultError) -> str:
    # consult's messages name a file's line; --match is one line.
    return re.sub(r"^line \d+: ", "", str(error))


def _check_nesting(items: list[Token]) -> None:
    depth = 0
    for kind, value, _ in items:
        if kind != "punct":
            continue
        if value in ("[", "{", "#{", "<<"):
            depth += 1
            if depth > MAX_NESTING:
                raise UsageError(f"--match nests terms more than "
                                 f"{MAX_NESTING} deep")
        elif value in ("]", "}", ">>"):
            depth -= 1


def _is_pattern(term: Any) -> bool:
    return isinstance(term, Atom) and (term == "_" or
                                       bool(_VARIABLE_ATOM.fullmatch(term)))


def _check_keys(term: Any) -> None:
    """A map's keys in a match must be literal: the node refuses a
    variable or a wildcard there (erlang:match_spec_test/3)."""
    if isinstance(term, dict):
        for key, value in term.items():
            if _holds_pattern(key):
                raise UsageError("--match: a map key must be a literal "
                                 "term, not a variable or _")
            _check_keys(value)
    elif isinstance(term, (tuple, list)):
        for item in term:
            _check_keys(item)
    elif isinstance(term, ImproperList):
        for item in list(term.items) + [term.tail]:
            _check_keys(item)


def _holds_pattern(term: Any) -> bool:
    if _is_pattern(term):
        return True
    if isinstance(term, (tuple, list)):
        return any(_holds_pattern(item) for item in term)
    if isinstance(term, dict):
        return any(_holds_pattern(k) or _holds_pattern(v)
                   for k, v in term.items())
    return False


# --- safety ---------------------------------------------------------------

def narrows(head: Optional[list[Any]]) -> bool:
    """Whether a head matches fewer calls than any: an argument that is not
    a bare ``_`` or variable, or a variable written twice."""
    if not head:
        return False
    seen: set[str] = set()
    for term in head:
        if not _is_pattern(term):
            return True
        if term != "_":
            if term in seen:
                return True
            seen.add(term)
    return False


def check_safe(spec: FunctionSpec, head: Optional[list[Any]],
               allow: bool) -> None:
    """Refuse, with one line naming the risk and :data:`ALLOW_FLAG`, what
    would flood the tracer or the node. ``head``: the parsed --match (None
    without one). ``allow``: the user wrote the flag out.

    - any module (``_:f/a``, ``_:_/_``): refused, flag or not;
      trace_pattern would set a pattern in every module loaded (on every
      function for ``_:_/_``, the tracer's erl_eval among them);
    - ``io`` and ``lists``, any function, and the whole of a module every
      process calls (``ets:_/_``, ``erlang:_/_``...): unless --match
      narrows the arguments, with the flag only (recon_trace's rule);
    - a function the tracer itself calls (erl_eval's, prim_eval's,
      ets:update_counter, ets:insert_new, ets:match_spec_run, erlang:send,
      erlang:process_info): our own processes are not
      traced, but every call of it on the node is a trace message besides
      its own work; unless --match narrows it, with the flag only.
    """
    module, function, _ = spec.mfa()
    flag = f"write {ALLOW_FLAG} to trace it anyway"
    if module == "_":
        # recon_trace refuses it too; here a pattern would be set in every
        # loaded module (for _:_/_ on every function, the tracer's own
        # erl_eval among them), called from anywhere.
        what = ("every function of every module, the tracer's own "
                "erl_eval among them" if function == "_"
                else f"{function} in every loaded module")
        raise UsageError(f"{spec.text}: a trace of {what}; name the module "
                         "(no flag allows any module)")
    if allow or narrows(head):
        return
    if module in _RECON_BANNED:
        # recon_trace refuses these only with any arity; lists:keyfind/3
        # is still called everywhere, the tracer's own lists:zipwith too.
        raise UsageError(f"{spec.text}: every process calls {module}, and "
                         "each call would be a trace message"
                         + (" (recon_trace refuses it too)"
                            if spec.arity is None else "")
                         + f"; narrow the arguments with --match, or {flag}")
    if module in _HOT_MODULES and function == "_":
        raise UsageError(f"{spec.text}: every function of {module}, which "
                         "every process calls; name one function, narrow "
                         f"with --match, or {flag}")
    why = (_TRACER_OWN.get((module, function))
           or _TRACER_OWN.get((module, None)))
    if why:
        raise UsageError(f"{spec.text}: {why}, so every call of it on the "
                         "node costs a trace message on top of the "
                         "tracer's own (our processes are left untraced); "
                         f"narrow the arguments with --match, or {flag}")


__all__ = ["ALLOW_FLAG", "FunctionSpec", "check_safe", "narrows",
           "parse_function", "parse_match"]
