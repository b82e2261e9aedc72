"""The Erlang that runs on inspected nodes: find it, have the node parse it,
cache the forms, and build the expression erl_eval runs.

Nothing is ever loaded into the target. A helper is a function written in a
real ``.erl`` file under erl_helpers/ that calls only stock OTP modules; it is
sent as source text, parsed by the target's own erl_scan and erl_parse, and
run by erl_eval as a fun. Its heavy work is done by stock compiled functions
taking external funs (``lists:zipwith(fun erlang:process_info/2, ...)``), so
it runs at compiled speed; erl_eval only walks its few top-level calls.

The parsed forms are code that beam-probe sends to every node it probes, so
the cache that keeps them is trusted only as ssh trusts its own files: the
folder and the file must belong to this user and be writable by no one else.
Otherwise the helper is parsed afresh (and the cache left alone).
"""

from __future__ import annotations

import os
from typing import Any, Callable

try:  # The builtin modules avoid loading OpenSSL through hashlib (~2 ms).
    from _sha2 import sha256  # type: ignore[import-not-found]  # 3.12+
except ImportError:
    try:
        from _sha256 import sha256  # type: ignore[import-not-found]
    except ImportError:  # pragma: no cover - other interpreters
        from hashlib import sha256

from beam_probe.erldist import etf
from beam_probe.erldist.terms import Atom, ExportFun
from beam_probe.errors import RemoteError
from beam_probe.node.erlang_text import functions_only

_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Installed, the .erl files sit inside the package (pyproject maps them to
# beam_probe/erl); in a source checkout they are in erl_helpers/ beside it.
HELPER_DIRS = (os.path.join(_PACKAGE, "erl"),
               os.path.join(os.path.dirname(_PACKAGE), "erl_helpers"))

# A cached form file is a few tens of KB; anything far larger is not ours.
MAX_CACHE_FILE = 4 * 1024 * 1024

A_ATOM = Atom("atom")
A_CALL = Atom("call")
A_CLAUSE = Atom("clause")
A_CLAUSES = Atom("clauses")
A_DOT = Atom("dot")
A_FUN = Atom("fun")
A_NAMED_FUN = Atom("named_fun")
A_OK = Atom("ok")
A_VAR = Atom("var")
A_WILDCARD = Atom("_")

Call = Callable[[str, str, list[Any]], Any]


# The mechanics every helper is built on (guard, pmap, values, top,
# describe, settled, snapshots, resolve, fan_out): erl_helpers/
# beam_probe_lib.erl.
LIB = "beam_probe_lib"


class Local:
    """An argument to a helper: another function of a helper file (the same
    one unless ``module`` is given), passed as a fun. Helpers cannot call
    each other by name (erl_eval runs one function, with no module around
    it), so a helper that needs one takes it as an argument and beam-probe
    builds the fun from its clauses."""

    __slots__ = ("name", "module")

    def __init__(self, name: str, module: str | None = None) -> None:
        self.name = name
        self.module = module


class Var:
    """An argument that is a variable bound on the node where the expression
    runs (for an expression fanned out to other nodes)."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name


class Form:
    """An argument that is an abstract expression, inserted as it is."""

    __slots__ = ("expr",)

    def __init__(self, expr: Any) -> None:
        self.expr = expr


def cache_dir() -> str:
    """$BEAM_PROBE_CACHE, else $XDG_CACHE_HOME/beam-probe, else
    ~/.cache/beam-probe."""
    explicit = os.environ.get("BEAM_PROBE_CACHE")
    if explicit:
        return explicit
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(
        os.path.expanduser("~"), ".cache")
    return os.path.join(base, "beam-probe")


def helper_path(module: str) -> str:
    for folder in HELPER_DIRS:
        path = os.path.join(folder, module + ".erl")
        if os.path.exists(path):
            return path
    raise FileNotFoundError(f"helper source {module}.erl not found in "
                            f"{' or '.join(HELPER_DIRS)}")


def canonical_variables(clauses: Any) -> Any:
    """The clauses with their variables renamed V1, V2, ... in order of
    first appearance. Every variable name is an atom on the node, and atoms
    are never collected; renamed, all helpers share a few dozen names
    instead of adding each of their own (the renaming is one to one within
    a function, so its meaning is unchanged)."""
    names: dict[str, Atom] = {}

    def rename(name: Atom) -> Atom:
        new = names.get(name)
        if new is None:
            new = names[name] = Atom(f"V{len(names) + 1}")
        return new

    def walk(term: Any) -> Any:
        if type(term) is tuple:
            if len(term) == 3 and term[0] == A_VAR and \
                    isinstance(term[2], Atom) and term[2] != A_WILDCARD:
                return (term[0], term[1], rename(term[2]))
            if len(term) == 4 and term[0] == A_NAMED_FUN and \
                    isinstance(term[2], Atom):
                # {named_fun, Anno, Name, Clauses}: the name is a variable
                # in its body, written as a bare atom here.
                return (term[0], term[1], rename(term[2]), walk(term[3]))
            return tuple(walk(item) for item in term)
        if type(term) is list:
            return [walk(item) for item in term]
        return term

    return walk(clauses)


class HelperForms:
    """The parsed functions of helper files, by (module, function)."""

    def __init__(self, call: Call) -> None:
        # ``call(module, function, args)`` runs one plain rpc on the node,
        # for the two parsing round trips of an uncached helper.
        self._call = call
        self._functions: dict[tuple[str, str], Any] = {}

    def clauses(self, module: str, function: str) -> Any:
        key = (module, function)
        if key not in self._functions:
            for name, clauses in self._load(module).items():
                self._functions[(module, name)] = clauses
        if key not in self._functions:
            raise RemoteError(f"no function {function} in helper {module}.erl")
        return self._functions[key]

    def fun(self, module: str, function: str) -> tuple[Any, ...]:
        """``fun`` expression of a helper's clauses."""
        return (A_FUN, 1, (A_CLAUSES, self.clauses(module, function)))

    def call(self, module: str, function: str, args: tuple[Any, ...],
             bindings: list[Any], prefix: str = "BeamProbeArg") -> tuple[Any, ...]:
        """The expression ``Fun(Arg0, Arg1, ...)`` for a helper, with values
        passed as erl_eval bindings (appended to ``bindings``), Local
        arguments as funs, Var arguments as the variables they name and Form
        arguments as the expressions they hold."""
        actuals = []
        for arg in args:
            if isinstance(arg, Local):
                actuals.append(self.fun(arg.module or module, arg.name))
            elif isinstance(arg, Var):
                actuals.append((A_VAR, 1, Atom(arg.name)))
            elif isinstance(arg, Form):
                actuals.append(arg.expr)
            else:
                name = Atom(f"{prefix}{len(bindings)}")
                actuals.append((A_VAR, 1, name))
                bindings.append((name, arg))
        return (A_CALL, 1, self.fun(module, function), actuals)

    def _load(self, module: str) -> dict[str, Any]:
        """The helper's functions as abstract forms, from the on-disk cache
        when this exact source was parsed before and the cache is ours.

        Parsing on the node costs two round trips and a few thousand tokens
        each way, 6-10 ms of a 200 ms run (measured); the forms depend only
        on the source text (the abstract format is stable across OTP
        releases), so they are cached under its hash.
        """
        with open(helper_path(module), "rb") as f:
            source = f.read()
        folder = cache_dir()
        path = os.path.join(folder, f"{module}-"
                            f"{sha256(source).hexdigest()[:20]}.etf")
        cached = _read_cache(folder, path)
        if cached is not None:
            return cached
        forms = {name: canonical_variables(clauses) for name, clauses in
                 self._parse(module, source.decode("utf-8")).items()}
        _write_cache(folder, path, forms)
        return forms

    def _parse(self, module: str, source: str) -> dict[str, Any]:
        """Scan and parse a helper file with the target's own parser.

        Two round trips per helper file and connection: one erl_scan of the
        whole file, one lists:map of erl_parse:parse_form over its forms.
        """
        # Only the functions, their variables renamed first: the node's
        # scanner makes an atom of every name it reads (erlang_text.py).
        scanned = self._call("erl_scan", "string", [functions_only(source)])
        if not (isinstance(scanned, tuple) and scanned[0] == A_OK):
            raise RemoteError(f"the node could not scan {module}.erl: "
                              f"{scanned!r}"[:300])
        forms, current = [], []
        for token in scanned[1]:
            current.append(token)
            if token[0] == A_DOT:
                forms.append(current)
                current = []
        functions = [form for form in forms if form[0][0] == A_ATOM]
        parsed = self._call("lists", "map",
                            [ExportFun(Atom("erl_parse"),
                                       Atom("parse_form"), 1), functions])
        result = {}
        for item in parsed:
            if not (isinstance(item, tuple) and item[0] == A_OK):
                raise RemoteError(f"the node could not parse {module}.erl: "
                                  f"{item!r}"[:300])
            form = item[1]
            # {function, Anno, Name, Arity, Clauses}
            result[str(form[2])] = form[4]
        return result


def _trusted_folder(folder: str) -> bool:
    from beam_probe.files import trusted

    try:
        return trusted(os.stat(folder))
    except OSError:
        return False


def _read_cache(folder: str, path: str) -> dict[str, Any] | None:
    """The cached forms, if the folder and the file are this user's alone
    and the file decodes; None otherwise (then the helper is parsed)."""
    from beam_probe.files import read_regular, trusted

    if not _trusted_folder(folder):
        return None
    try:
        data, info = read_regular(path, MAX_CACHE_FILE)
        if not trusted(info):
            return None
        return dict(etf.decode(data))
    except (OSError, ValueError, TypeError):  # etf.DecodeError is a ValueError
        return None


def _write_cache(folder: str, path: str, forms: dict[str, Any]) -> None:
    """Write the forms (0600, then a rename), into a folder made 0700 or
    already this user's alone; a cache that cannot be written is simply not
    used."""
    try:
        os.makedirs(folder, mode=0o700, exist_ok=True)
        if not _trusted_folder(folder):
            return
        tmp = f"{path}.{os.getpid()}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_TRUNC,
                     0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(etf.encode(list(forms.items())))
        os.replace(tmp, path)
    except OSError:
        pass


def work_fun(expr: Any) -> Form:
    """``fun() -> Expr end``."""
    return Form((A_FUN, 1, (A_CLAUSES, [(A_CLAUSE, 1, [], [], [expr])])))


__all__ = ["LIB", "Form", "HelperForms", "Local", "Var", "work_fun", "cache_dir", "canonical_variables",
           "helper_path"]
