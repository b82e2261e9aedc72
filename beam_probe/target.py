"""Which node to attach to, and with which cookie: the operator's habits.

Node, first match wins: the first positional argument when it contains
``@``; ``--node``; ``BEAM_PROBE_NODE``; ``RELEASE_NODE`` (Elixir releases).
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
from typing import Any, Mapping

from .errors import CookieError, UsageError

NODE_ENV = ("BEAM_PROBE_NODE", "RELEASE_NODE")
COOKIE_ENV = ("BEAM_PROBE_COOKIE", "RELEASE_COOKIE")


def full_node_name(name: str, env: Mapping[str, str] | None = None) -> str:
    """``app`` -> ``app@shorthost``; a name with ``@`` is returned as it is."""
    env = os.environ if env is None else env
    name = name.strip()
    if not name or name.startswith("@") or name.endswith("@") or \
            name.count("@") > 1:
        raise UsageError(f"not a node name: {name!r} (expected name@host)")
    if "@" in name:
        return name
    if env.get("RELEASE_DISTRIBUTION") == "name":
        return f"{name}@{socket.getfqdn()}"
    return f"{name}@{socket.gethostname().split('.')[0]}"


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


def read_cookie_file(path: str) -> bytes:
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise CookieError(f"cookie file {path} does not exist") from None
    except OSError as exc:
        raise CookieError(f"cannot read cookie file {path}: "
                          f"{exc.strerror}") from None
    if info.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        # erl refuses such a file too ("must be accessible by owner only"):
        # a cookie anyone can read lets anyone run code on the node.
        raise CookieError(f"cookie file {path} is accessible by group or "
                          f"others (mode {stat.S_IMODE(info.st_mode):o}); "
                          f"run: chmod 400 {path}")
    try:
        with open(path, "rb") as f:
            data = f.read(4096)
    except OSError as exc:
        raise CookieError(f"cannot read cookie file {path}: "
                          f"{exc.strerror}") from None
    cookie = data.strip()
    if not cookie:
        raise CookieError(f"cookie file {path} is empty")
    return cookie


def resolve_cookie(cookie_file: str | None = None, cookie: str | None = None,
                   env: Mapping[str, str] | None = None) -> bytes:
    """The cookie, by the documented order. Never logged, never printed."""
    env = os.environ if env is None else env
    if cookie_file:
        return read_cookie_file(cookie_file)
    if cookie:
        return cookie.encode("utf-8")
    for var in COOKIE_ENV:
        if env.get(var):
            return env[var].encode("utf-8")
    home = env.get("HOME") or os.path.expanduser("~")
    path = os.path.join(home, ".erlang.cookie")
    if not os.path.exists(path):
        raise CookieError("no cookie: pass --cookie-file, or set "
                          "BEAM_PROBE_COOKIE or RELEASE_COOKIE, or create "
                          f"{path}")
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
        from .dist.tls import settings_from_optfile

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
    from .dist.tls import TlsSettings

    return TlsSettings(certfile=certfile, keyfile=keyfile,
                       cacertfile=cacertfile, server_name=server_name)
