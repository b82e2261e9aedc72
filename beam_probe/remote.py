"""Calling the target: plain rpc, and helper functions from erl_helpers/.

Nothing is ever loaded into the target. A helper is a function written in a
real ``.erl`` file under erl_helpers/ that calls only stock OTP modules; it is
sent as source text, parsed by the target's own erl_scan and erl_parse, and
run by erl_eval as a fun. Its heavy work is done by stock compiled functions
taking external funs (``lists:zipwith(fun erlang:process_info/2, ...)``), so
it runs at compiled speed; erl_eval only walks its few top-level calls.
"""

from __future__ import annotations

import os
import time
from typing import Any

try:  # The builtin modules avoid loading OpenSSL through hashlib (~2 ms).
    from _sha2 import sha256  # CPython 3.12+
except ImportError:
    try:
        from _sha256 import sha256  # CPython 3.10, 3.11
    except ImportError:  # pragma: no cover - other interpreters
        from hashlib import sha256

from .dist import etf
from .dist.connection import Connection, connect
from .dist.terms import Atom, ExportFun
from .errors import RemoteError

_HERE = os.path.dirname(os.path.abspath(__file__))
# Installed, the .erl files sit inside the package (pyproject maps them to
# beam_probe/erl); in a source checkout they are in erl_helpers/ beside it.
HELPER_DIRS = (os.path.join(_HERE, "erl"),
               os.path.join(os.path.dirname(_HERE), "erl_helpers"))

A_ERL_SCAN = Atom("erl_scan")
A_ERL_PARSE = Atom("erl_parse")
A_ERL_EVAL = Atom("erl_eval")
A_DOT = Atom("dot")
A_OK = Atom("ok")


class Local:
    """An argument to ``Remote.run``: another function of the same helper
    file, passed as a fun. Helpers cannot call each other by name (erl_eval
    runs one function, with no module around it), so a helper that needs
    one takes it as an argument and beam-probe builds the fun from its
    clauses."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name


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


class Remote:
    """One attached node: a connection plus the default per-call timeout."""

    def __init__(self, conn: Connection, timeout: float) -> None:
        self.conn = conn
        self.timeout = timeout
        self.node = conn.peer_node
        self._functions: dict[tuple[str, str], Any] = {}

    def call(self, module: str, function: str, args: list | tuple = (),
             timeout: float | None = None) -> Any:
        return self.conn.call(module, function, list(args),
                              self.timeout if timeout is None else timeout)

    def calls(self, requests: list[tuple[str, str, list]],
              timeout: float | None = None) -> list[Any]:
        """Several calls in flight at once; results in request order."""
        refs = [self.conn.call_async(m, f, list(a)) for m, f, a in requests]
        deadline = time.monotonic() + (self.timeout if timeout is None
                                       else timeout)
        return [self.conn.wait(ref, max(0.0, deadline - time.monotonic()),
                               f"{m}:{f}/{len(a)}")
                for ref, (m, f, a) in zip(refs, requests)]

    def run(self, module: str, function: str, *args: Any,
            timeout: float | None = None) -> Any:
        """Run ``function`` from erl_helpers/``module``.erl on the target."""
        form, bindings = self.expression(module, function, *args)
        # erl_eval:expr/5 with return format 'value' sends back the value
        # alone, not the bindings (which would echo every argument back).
        return self.call("erl_eval", "expr",
                         [form, bindings, Atom("none"), Atom("none"),
                          Atom("value")], timeout)

    def expression(self, module: str, function: str,
                   *args: Any) -> tuple[Any, list]:
        """The abstract form of ``function(Args...)`` and its bindings, for
        erl_eval:expr/5 here or on any node this one reaches."""
        clauses = self._clauses(module, function)
        line = 1
        # Fun(Arg0, Arg1, ...) with Fun the helper's clauses as a fun;
        # values travel as erl_eval bindings, Local arguments as funs.
        actuals, bindings = [], []
        for i, arg in enumerate(args):
            if isinstance(arg, Local):
                actuals.append((Atom("fun"), line, (
                    Atom("clauses"), self._clauses(module, arg.name))))
            else:
                name = Atom(f"BeamProbeArg{i}")
                actuals.append((Atom("var"), line, name))
                bindings.append((name, arg))
        call = (Atom("call"), line, (Atom("fun"), line,
                                     (Atom("clauses"), clauses)), actuals)
        return call, bindings

    def _clauses(self, module: str, function: str) -> Any:
        key = (module, function)
        if key not in self._functions:
            for name, clauses in self._helper_forms(module).items():
                self._functions[(module, name)] = clauses
        if key not in self._functions:
            raise RemoteError(f"no function {function} in helper {module}.erl")
        return self._functions[key]

    def _helper_forms(self, module: str) -> dict[str, Any]:
        """The helper's functions as abstract forms, from the on-disk cache
        when this exact source was parsed before.

        Parsing on the node costs two round trips and a few thousand tokens
        each way, 6-10 ms of a 200 ms run (measured); the forms depend only
        on the source text (the abstract format is stable across OTP
        releases), so they are cached under its hash. A cache that cannot
        be read or written is ignored.
        """
        with open(helper_path(module), "rb") as f:
            source = f.read()
        path = os.path.join(cache_dir(), f"{module}-"
                            f"{sha256(source).hexdigest()[:20]}.etf")
        try:
            with open(path, "rb") as f:
                return dict(etf.decode(f.read()))
        except (OSError, etf.DecodeError, TypeError, ValueError):
            pass
        forms = self._parse_helper(module, source.decode("utf-8"))
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            tmp = f"{path}.{os.getpid()}.tmp"
            with open(tmp, "wb") as f:
                f.write(etf.encode(list(forms.items())))
            os.replace(tmp, path)
        except OSError:
            pass
        return forms

    def _parse_helper(self, module: str, source: str) -> dict[str, Any]:
        """Scan and parse a helper file with the target's own parser.

        Two round trips per helper file and connection: one erl_scan of the
        whole file, one lists:map of erl_parse:parse_form over its forms.
        """
        scanned = self.call("erl_scan", "string", [source])
        if not (isinstance(scanned, tuple) and scanned[0] == A_OK):
            raise RemoteError(f"the node could not scan {module}.erl: "
                              f"{scanned!r}"[:300])
        forms, current = [], []
        for token in scanned[1]:
            current.append(token)
            if token[0] == A_DOT:
                forms.append(current)
                current = []
        functions = [form for form in forms
                     if form[0][0] == Atom("atom")]
        parsed = self.call("lists", "map",
                           [ExportFun(A_ERL_PARSE, Atom("parse_form"), 1),
                            functions])
        result = {}
        for item in parsed:
            if not (isinstance(item, tuple) and item[0] == A_OK):
                raise RemoteError(f"the node could not parse {module}.erl: "
                                  f"{item!r}"[:300])
            form = item[1]
            # {function, Anno, Name, Arity, Clauses}
            result[str(form[2])] = form[4]
        return result

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> "Remote":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def attach(node: str, cookie: bytes, *, timeout: float = 15.0,
           dist_port: int | None = None, tls: Any = None) -> Remote:
    """Connect to ``node`` as a hidden node; the caller closes the Remote.
    ``tls`` is a ``dist.tls.TlsSettings`` for nodes on TLS distribution."""
    return Remote(connect(node, cookie, timeout=timeout, dist_port=dist_port,
                          tls=tls), timeout)


__all__ = ["Local", "Remote", "attach"]
