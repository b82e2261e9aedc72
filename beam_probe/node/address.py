"""Which node to attach to, and with which cookie: the operator's habits.

Node, first match wins: the first positional argument when it contains
``@``, or when it is a bare name the command's own words do not read
(``ping demo``); ``--node``; ``BEAM_PROBE_NODE``; ``RELEASE_NODE`` (Elixir releases).
A bare ``app`` means ``app@`` this machine's short host name, as
``erl -sname app`` would name it (or the full name when an Elixir release
says ``RELEASE_DISTRIBUTION=name``).

Cookie, first match wins: ``--cookie-file``; ``--cookie``; ``BEAM_PROBE_COOKIE``;
``RELEASE_COOKIE``; ``~/.erlang.cookie``. Cookie files readable by group or
others are refused, as erl refuses them.

TLS: ``--ssl-dist-optfile`` (the node's own file), or ``--tls`` with
certificate options; none of these means plain TCP distribution.
"""

from __future__ import annotations

import os
import socket
import stat
from typing import TYPE_CHECKING, Any, Mapping

from beam_probe.errors import NoCookie, TlsConfigError, UsageError

if TYPE_CHECKING:  # ssl is loaded only when TLS is asked for
    from beam_probe.erldist.tls import TlsSettings

NODE_ENV = ("BEAM_PROBE_NODE", "RELEASE_NODE")
COOKIE_ENV = ("BEAM_PROBE_COOKIE", "RELEASE_COOKIE")


# A node name is an atom: at most 255 characters (erl refuses longer). A
# host name is at most 253 characters in labels of at most 63 (RFC 1035);
# longer ones failed deep in the resolver or the EPMD request's 2-byte
# length, as internal errors.
MAX_NODE_NAME = 255
MAX_HOST = 253
MAX_LABEL = 63


def full_node_name(name: str, env: Mapping[str, str] | None = None) -> str:
    """``app`` -> ``app@shorthost``; a name with ``@`` is returned as it is.
    UsageError for anything that cannot be a node's name."""
    env = os.environ if env is None else env
    name = name.strip()
    shown = repr(name) if len(name) <= 60 else repr(name[:40]) + \
        f"... ({len(name)} characters)"
    if not name or name.startswith("@") or name.endswith("@") or \
            name.count("@") > 1:
        raise UsageError(f"not a node name: {shown} (expected name@host)")
    if "@" not in name:
        host = socket.getfqdn() if env.get("RELEASE_DISTRIBUTION") == \
            "name" else socket.gethostname().split(".")[0]
        name = f"{name}@{host}"
    alive, _, host = name.partition("@")
    if len(name) > MAX_NODE_NAME:
        raise UsageError(f"not a node name: {shown} (a node name is at "
                         f"most {MAX_NODE_NAME} characters)")
    if not name.isprintable() or any(c.isspace() for c in name):
        raise UsageError(f"not a node name: {shown} (it holds spaces or "
                         "control characters)")
    if len(host) > MAX_HOST or any(
            not 0 < len(label) <= MAX_LABEL for label in host.split(".")):
        raise UsageError(f"not a node name: {shown} (its host is not a "
                         "host name)")
    return name


def resolve_node(option: str | None,
                 env: Mapping[str, str] | None = None) -> str:
    """The node to attach to, from --node or the environment."""
    env = os.environ if env is None else env
    if option:
        return full_node_name(option, env)
    for var in NODE_ENV:
        if env.get(var):
            return full_node_name(env[var], env)
    raise UsageError("no node given: pass NODE (name@host) or --node, or set "
                     "BEAM_PROBE_NODE or RELEASE_NODE")


# erl reads the whole cookie file; a real one is a few dozen bytes.
MAX_COOKIE_FILE = 4096


def parse_cookie_file(data: bytes) -> bytes:
    """The cookie in a cookie file's bytes, read as erl reads it (kernel's
    auth:read_cookie/1): a run of printable ASCII (space included, so
    leading and trailing spaces are part of the cookie), then only newlines,
    carriage returns and spaces. Raises ValueError otherwise."""
    end = 0
    while end < len(data) and 0x20 <= data[end] <= 0x7E:
        end += 1
    if data[end:].strip(b"\n\r ") != b"":
        raise ValueError("it holds characters erl does not accept in a "
                         "cookie (printable ASCII only)")
    if end == 0:
        raise ValueError("it is empty")
    return data[:end]


def read_cookie_file(path: str) -> bytes:
    from beam_probe.files import error_text, read_regular

    try:
        data, info = read_regular(path, MAX_COOKIE_FILE)
    except FileNotFoundError:
        raise NoCookie(f"cookie file {path} does not exist") from None
    except OSError as exc:
        raise NoCookie(f"cannot read cookie file {path}: "
                       f"{error_text(exc)}") from None
    except ValueError as exc:
        raise NoCookie(f"cookie file: {exc}") from None
    if info.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        # erl refuses such a file too ("must be accessible by owner only"):
        # a cookie anyone can read lets anyone run code on the node.
        raise NoCookie(f"cookie file {path} is accessible by group or "
                       f"others (mode {stat.S_IMODE(info.st_mode):o}); "
                       f"run: chmod 400 {path}")
    try:
        return parse_cookie_file(data)
    except ValueError as exc:
        raise NoCookie(f"cookie file {path} is not usable: {exc}") from None


def cookie_bytes(cookie: str, source: str) -> bytes:
    """A cookie given as text, as the node digests it: OTP hashes the
    cookie atom's characters as Latin-1 bytes (dist_util:gen_digest/2 over
    atom_to_list/1), so 'cøøkie' is c, 0xF8, 0xF8, ..."""
    try:
        return cookie.encode("latin-1")
    except UnicodeEncodeError:
        raise NoCookie(f"the cookie from {source} has characters beyond "
                       "Latin-1, which Erlang cannot digest") from None


def resolve_cookie(cookie_file: str | None = None, cookie: str | None = None,
                   env: Mapping[str, str] | None = None) -> bytes:
    """The cookie, by the documented order. Never logged, never printed."""
    env = os.environ if env is None else env
    if cookie_file:
        return read_cookie_file(cookie_file)
    if cookie:
        return cookie_bytes(cookie, "--cookie")
    for var in COOKIE_ENV:
        if env.get(var):
            return cookie_bytes(env[var], var)
    home = env.get("HOME") or os.path.expanduser("~")
    path = os.path.join(home, ".erlang.cookie")
    if not os.path.lexists(path):
        raise NoCookie(
            f"no cookie: {path} does not exist. The node's cookie is in "
            "~/.erlang.cookie of the user that runs it, or, for a release, "
            "in releases/COOKIE or RELEASE_COOKIE; give it with "
            "--cookie-file, BEAM_PROBE_COOKIE or RELEASE_COOKIE")
    return read_cookie_file(path)


def resolve_tls(tls: bool, optfile: str | None = None, *,
                certfile: str | None = None, keyfile: str | None = None,
                cacertfile: str | None = None,
                server_name: str | None = None) -> Any:
    """TLS settings (a ``dist.tls.TlsSettings``), or None for plain TCP.

    The certificate options only make sense with ``--tls``, and not beside
    an optfile that already names certificates: either is a usage error
    rather than a silent choice.
    """
    given = [name for name, value in (("--certfile", certfile),
                                      ("--keyfile", keyfile),
                                      ("--cacertfile", cacertfile))
             if value]
    if optfile:
        if given:
            raise UsageError(f"{given[0]} and --ssl-dist-optfile both name "
                             "certificates: give one or the other")
        settings = settings_from_optfile(optfile)
        if server_name:
            from dataclasses import replace

            settings = replace(settings, server_name=server_name)
        return settings
    if not tls:
        if given or server_name:
            raise UsageError(f"{(given or ['--tls-server-name'])[0]} is for "
                             "TLS distribution: add --tls")
        return None
    from beam_probe.erldist.tls import TlsSettings

    return TlsSettings(certfile=certfile, keyfile=keyfile,
                       cacertfile=cacertfile, server_name=server_name)


# -ssl_dist_optfile: the node's own file, whose {client, Opts} part holds
# what a node uses to connect to its peers: exactly our position. The ssl
# options of that part that we apply are read here; the others (ciphers,
# depth, reuse_sessions, verify_fun, ...) tune or extend OTP's ssl and have
# no faithful equivalent, so they are ignored. An optfile is a few KB.
MAX_OPTFILE = 1 << 20

def settings_from_optfile(path: str) -> "TlsSettings":
    """The ``{client, Opts}`` part of a node's ``-ssl_dist_optfile``."""
    from beam_probe.erldist.consult import ConsultError, parse_terms
    from beam_probe.files import error_text, read_regular

    source = f"--ssl-dist-optfile {path}"
    try:
        data, _info = read_regular(path, MAX_OPTFILE)
        text = data.decode("utf-8")
    except OSError as exc:
        raise TlsConfigError(f"cannot read {path}: {error_text(exc)}") \
            from None
    except UnicodeDecodeError:
        raise TlsConfigError(f"{path} is not UTF-8 text") from None
    except ValueError as exc:
        raise TlsConfigError(str(exc)) from None
    try:
        terms = parse_terms(text)
    except ConsultError as exc:
        raise TlsConfigError(f"{path}: {exc}") from None
    if len(terms) != 1 or not isinstance(terms[0], list):
        raise TlsConfigError(f"{path} must hold one term, "
                             "[{server, [...]}, {client, [...]}].")
    client = None
    for entry in terms[0]:
        if isinstance(entry, tuple) and len(entry) == 2 and \
                entry[0] == "client" and isinstance(entry[1], list):
            client = entry[1]
    if client is None:
        raise TlsConfigError(f"{path} has no {{client, [...]}} options: "
                             "those are the ones a node connects with")
    return _client_settings(client, source, path)


def _client_settings(options: list[Any], source: str, path: str
                     ) -> "TlsSettings":
    from beam_probe.erldist.terms import Atom
    from beam_probe.erldist.tls import VERSIONS, TlsSettings

    found: dict[str, Any] = {}
    for option in options:
        if not (isinstance(option, tuple) and len(option) == 2
                and isinstance(option[0], Atom)):
            continue  # bare atoms and the like tune OTP's ssl only
        key, value = str(option[0]), option[1]
        if key in ("cert", "key", "cacerts", "certs_keys"):
            raise TlsConfigError(f"{path}: option {key} (keys or certificates "
                                 "written into the file) is not supported; "
                                 "use certfile, keyfile and cacertfile")
        found[key] = value

    def text(key: str) -> str | None:
        value = found.get(key)
        if value is None:
            return None
        if isinstance(value, bytes):
            value = value.decode("utf-8", "replace")
        if not isinstance(value, str) or isinstance(value, Atom):
            raise TlsConfigError(f"{path}: {key} must be a string")
        return value

    verify = found.get("verify", "verify_peer")
    if verify not in ("verify_peer", "verify_none"):
        raise TlsConfigError(f"{path}: verify must be verify_peer or "
                             f"verify_none, not {verify}")
    sni = found.get("server_name_indication")
    versions = found.get("versions", [])
    if not isinstance(versions, list) or any(
            str(v) not in VERSIONS for v in versions):
        raise TlsConfigError(f"{path}: versions may name only "
                             f"{', '.join(sorted(VERSIONS))}")
    return TlsSettings(
        certfile=text("certfile"), keyfile=text("keyfile"),
        cacertfile=text("cacertfile"), password=text("password"),
        verify=verify == "verify_peer",
        check_hostname=sni != "disable",
        server_name=sni if isinstance(sni, str) and sni != "disable"
        and not isinstance(sni, Atom) else None,
        versions=tuple(str(v) for v in versions), source=source)
