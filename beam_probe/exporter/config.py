"""Which nodes the exporter may dial, and with what: the allow-list.

Anyone who can reach the exporter can ask it to probe a target, and the
exporter dials with a cookie, which is the node's whole password. So it
dials only nodes an operator allowed: ``--target`` patterns, or the
``[[target]]`` tables of a TOML file that also give each its cookie and
TLS settings. A target is matched by its full name (``name@host``)
against shell-style patterns (``rabbit@mq-*.example.com``), first match
wins; one that matches none is refused before anything is looked up.

The host is matched a label at a time, case aside (DNS's rule): a ``*``
never crosses a dot, so ``rabbit@mq*`` allows ``rabbit@mq1`` and not
``rabbit@mq.attacker.example``, which a plain glob over the whole name
would let anyone who reaches the exporter point at their own EPMD, to
read a digest of our cookie or relay it.

A wildcard is refused unless the operator says so (--allow-target-patterns,
``allow_target_patterns = true``) or the rule's targets speak TLS
distribution with a verified certificate. The handshake's digest,
md5(cookie ++ challenge), binds no names (DESIGN.md, "Strangers"): any
local user on a target's host may register a name in its EPMD, and a
pattern lets an HTTP client make us dial that name, whose listener relays
our handshake to a real node of the same cookie and is then authenticated
there (shown by tests/test_serve.py's relay). Exact names leave a
stranger no name to choose. A certificate cannot be relayed: over TLS
the relay only passes bytes it cannot read or add to.

An IP address is no DNS name: ``*`` matched ``2130706433``,
``0x7f000001`` and ``::1`` as one label, spellings that the resolver
reads as 127.0.0.1 and ::1. A numeric or IPv6 host therefore matches only
a pattern that writes it out in full, character for character.

Nor is a host outside ASCII one: Python hands it to the idna codec, which
reads U+3002, U+FF0E and U+FF61 as dots: ``app@127<U+FF0E>0<U+FF0E>0<U+FF0E>1``
was one label to the match, matched ``app@*`` and dialled 127.0.0.1, and
``rabbit@mq<U+3002>attacker<U+3002>example`` matched ``rabbit@mq*`` (issue
37, round 5). A host we match and dial is therefore ASCII letters, digits,
``-``, ``_``, ``.`` and an IPv6 address's ``:``, the bytes the resolver is
handed as they are (no escape, no mapping); any other matches nothing.
"""

from __future__ import annotations

import os
import socket
import stat
import string
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Any, Mapping

from beam_probe.errors import UsageError
from beam_probe.node.address import (MAX_NODE_NAME, cookie_bytes,
                                     read_cookie_file, resolve_tls)

# A configuration of a thousand targets is a few tens of KB.
MAX_CONFIG = 1 << 20
MAX_RULES = 1000
RULE_KEYS = frozenset(("match", "cookie", "cookie_file", "dist_port", "tls",
                       "certfile", "keyfile", "cacertfile", "server_name",
                       "ssl_dist_optfile", "cluster"))
TOP_KEYS = frozenset(("listen", "timeout", "timeout_offset", "compat",
                      "target", "allow_target_patterns", "web_config_file"))
# fnmatch's special characters: a name without them is an exact name.
WILDCARDS = frozenset("*?[")
# A host's characters as the resolver takes them unchanged: host names'
# letters, digits and hyphens (RFC 1123), the underscore some carry, the
# dot, an IPv6 address's colon. Not a backslash (a resolver's escape).
HOST_CHARACTERS = frozenset(string.ascii_letters + string.digits + "-_.:")


@dataclass(frozen=True)
class Rule:
    """Targets matching ``pattern`` and how to reach them. ``cookie`` is
    None where the default cookie (--cookie-file, the environment,
    ~/.erlang.cookie) applies."""

    pattern: str
    cookie: bytes | None = field(default=None, repr=False)
    dist_port: int | None = None
    tls: Any = None
    cluster: bool = False

    @property
    def exact(self) -> bool:
        return not is_pattern(self.pattern)

    @property
    def verified_tls(self) -> bool:
        """TLS distribution that checks the node's certificate: a relay
        can pass its bytes on, never read or add to them."""
        return self.tls is not None and bool(getattr(self.tls, "verify",
                                                     False))


@dataclass(frozen=True)
class Settings:
    """What serve runs with, from its options and its file."""

    rules: tuple[Rule, ...]
    listen: str = "127.0.0.1:9149"
    timeout: float = 10.0
    timeout_offset: float = 0.5
    compat: bool = False

    def rule_for(self, node: str) -> Rule | None:
        for rule in self.rules:
            if matches(rule.pattern, node):
                return rule
        return None


def is_pattern(text: str) -> bool:
    return any(c in WILDCARDS for c in text)


def is_plain_host(host: str) -> bool:
    """Whether ``host`` is made of HOST_CHARACTERS alone: what we match is
    then what the resolver looks up, dot for dot."""
    return bool(host) and all(c in HOST_CHARACTERS for c in host)


def is_numeric_host(host: str) -> bool:
    """Whether ``host`` is an IP address in any spelling a resolver takes
    (IPv6; IPv4 dotted, short, decimal, octal or hex: inet_aton's forms),
    or ends in an all-numeric label, which no DNS name does (RFC 3696
    2: a top-level domain is never all digits)."""
    if ":" in host or "[" in host or "]" in host:
        return True
    last = host.rstrip(".").rpartition(".")[2].lower()
    if last.isdigit() or (last.startswith("0x") and all(
            c in "0123456789abcdef" for c in last[2:])):
        return True
    try:
        socket.inet_aton(host)
    except (OSError, ValueError):
        return False
    return True


def matches(pattern: str, node: str) -> bool:
    """Whether ``node`` (name@host) is one ``pattern`` allows: the name
    by a case-sensitive glob, the host label by label, case aside, so a
    wildcard never spans a dot. A numeric or IPv6 host matches only a
    host written out in full (no wildcard stands for any part of it). A
    host that is not plain (is_plain_host) matches nothing."""
    alive, at, host = node.partition("@")
    want_alive, _, want_host = pattern.partition("@")
    if not at or not is_plain_host(host) or \
            not fnmatchcase(alive, want_alive):
        return False
    if is_numeric_host(host):
        return host.lower() == want_host.lower()
    labels, wanted = host.lower().split("."), want_host.lower().split(".")
    return len(labels) == len(wanted) and all(
        fnmatchcase(label, want) for label, want in zip(labels, wanted))


def check_pattern(pattern: str, source: str) -> str:
    pattern = pattern.strip()
    if not pattern or pattern.count("@") != 1 or pattern.startswith("@") \
            or pattern.endswith("@") or len(pattern) > MAX_NODE_NAME:
        raise UsageError(f"{source}: {pattern[:60]!r} is not a target "
                         "pattern: name@host, with * and ? (rabbit@*, "
                         "*@db-?.example.com)")
    host = pattern.partition("@")[2]
    if any(c not in HOST_CHARACTERS and c not in "*?[]!" for c in host):
        # It would match nothing (matches() refuses such a host).
        raise UsageError(f"{source}: {pattern[:60]!r}: a host is ASCII "
                         "letters, digits, '-', '_' and '.' (write an "
                         "international name in its xn-- form)")
    if _wild_address(host):
        # It would match nothing: an address matches only written out.
        raise UsageError(f"{source}: {pattern[:60]!r}: a wildcard in an IP "
                         "address matches nothing; write each address in "
                         "full, or use host names")
    return pattern


def _wild_address(host: str) -> bool:
    """A host pattern with a wildcard that stands for part of an address
    (10.0.0.*, 10.0.*.1, fe80::*): it could only match spellings."""
    if not is_pattern(host):
        return False
    labels = [label.translate({ord(c): None for c in "*?[]"})
              for label in host.split(".")]
    return ":" in host or labels[-1].isdigit() or (
        all(not label or label.isdigit() for label in labels)
        and any(labels))


def check_rules(rules: tuple[Rule, ...] | list[Rule],
                allow_patterns: bool) -> None:
    """Refuse a pattern that lets a stranger choose the name we dial,
    unless the operator allowed patterns or its targets speak verified
    TLS distribution."""
    if allow_patterns:
        return
    for rule in rules:
        if not rule.exact and not rule.verified_tls:
            raise UsageError(
                f"--target {rule.pattern[:60]!r} is a pattern: any local "
                "user of a matching host can register a matching name in "
                "its EPMD and relay our handshake to a node of the same "
                "cookie; give exact node names, use TLS distribution, or "
                "accept the risk with --allow-target-patterns")


def open_rules(rules: tuple[Rule, ...] | list[Rule]) -> list[Rule]:
    """The rules whose pattern lets someone else choose the name dialled
    (a pattern without verified TLS distribution)."""
    return [r for r in rules if not r.exact and not r.verified_tls]


def _private(path: str, data_stat: os.stat_result) -> bool:
    return not (data_stat.st_mode & (stat.S_IRWXG | stat.S_IRWXO))


def read_file(path: str) -> dict[str, Any]:
    """The TOML file at ``path``, parsed; one line for what is wrong."""
    import importlib

    try:
        tomllib: Any = importlib.import_module("tomllib")
    except ImportError:  # Python 3.10
        try:
            tomllib = importlib.import_module("tomli")
        except ImportError:
            raise UsageError("--config needs Python 3.11 or newer (or the "
                             "tomli package)") from None
    try:
        # Not blocking: a FIFO is refused, not waited on.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as f:
            info = os.fstat(f.fileno())
            if not stat.S_ISREG(info.st_mode):
                raise UsageError(f"--config {path}: not a regular file")
            data = f.read(MAX_CONFIG + 1)
    except OSError as exc:
        raise UsageError(f"--config {path}: {exc.strerror or exc}") from None
    if len(data) > MAX_CONFIG:
        raise UsageError(f"--config {path}: over {MAX_CONFIG // 1024} KiB, "
                         "not a configuration")
    try:
        parsed: dict[str, Any] = tomllib.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise UsageError(f"--config {path}: not UTF-8 text") from None
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"--config {path}: not TOML: {exc}") from None
    parsed["__private__"] = _private(path, info)
    return parsed


def _get(table: Mapping[str, Any], key: str, kind: type | tuple[type, ...],
         where: str) -> Any:
    value = table.get(key)
    if value is None:
        return None
    if not isinstance(value, kind) or (kind is int and isinstance(value,
                                                                  bool)):
        raise UsageError(f"{where}: {key} has the wrong type "
                         f"({type(value).__name__})")
    return value


def rule_from(table: Any, where: str, private: bool) -> Rule:
    """One ``[[target]]`` table as a Rule."""
    if not isinstance(table, dict):
        raise UsageError(f"{where}: not a table")
    unknown = sorted(set(table) - RULE_KEYS)
    if unknown:
        raise UsageError(f"{where}: unknown key {unknown[0]!r} (known: "
                         f"{', '.join(sorted(RULE_KEYS))})")
    pattern = _get(table, "match", str, where)
    if pattern is None:
        raise UsageError(f"{where}: no match = \"name@host\" pattern")
    pattern = check_pattern(pattern, where)
    cookie: bytes | None = None
    if table.get("cookie") is not None:
        if not private:
            # As ssh treats a private key: a cookie in a file others can
            # read is a cookie others have.
            raise UsageError(f"{where}: the file holds a cookie and others "
                             "can read it: chmod 600, or use cookie_file")
        cookie = cookie_bytes(_get(table, "cookie", str, where),
                              f"{where} cookie")
    elif table.get("cookie_file") is not None:
        cookie = read_cookie_file(_get(table, "cookie_file", str, where))
    port = _get(table, "dist_port", int, where)
    if port is not None and not 1 <= port <= 65535:
        raise UsageError(f"{where}: dist_port {port} is not a port")
    tls = checked_tls(resolve_tls(
        bool(_get(table, "tls", bool, where)),
        _get(table, "ssl_dist_optfile", str, where),
        certfile=_get(table, "certfile", str, where),
        keyfile=_get(table, "keyfile", str, where),
        cacertfile=_get(table, "cacertfile", str, where),
        server_name=_get(table, "server_name", str, where)))
    return Rule(pattern, cookie, port, tls,
                bool(_get(table, "cluster", bool, where)))


def checked_tls(tls: Any) -> Any:
    """TLS settings whose files load: a missing CA file is a line at start,
    not an ``up 0`` at every scrape."""
    if tls is not None:
        from beam_probe.erldist.tls import make_context

        make_context(tls)
    return tls


def settings_from(parsed: Mapping[str, Any], path: str) -> dict[str, Any]:
    """The file's top-level settings and its rules, by name."""
    unknown = sorted(set(parsed) - TOP_KEYS - {"__private__"})
    if unknown:
        raise UsageError(f"--config {path}: unknown key {unknown[0]!r} "
                         f"(known: {', '.join(sorted(TOP_KEYS))})")
    tables = parsed.get("target", [])
    if not isinstance(tables, list):
        raise UsageError(f"--config {path}: target must be [[target]] "
                         "tables")
    if len(tables) > MAX_RULES:
        raise UsageError(f"--config {path}: over {MAX_RULES} targets")
    private = bool(parsed.get("__private__"))
    out: dict[str, Any] = {
        "rules": [rule_from(t, f"--config {path}, target {i + 1}", private)
                  for i, t in enumerate(tables)]}
    where = f"--config {path}"
    for key, kind in (("listen", str), ("timeout", (int, float)),
                      ("timeout_offset", (int, float)), ("compat", bool),
                      ("allow_target_patterns", bool),
                      ("web_config_file", str)):
        value = _get(parsed, key, kind, where)
        if value is not None:
            out[key] = value
    return out


__all__ = ["Rule", "Settings", "check_pattern", "check_rules", "checked_tls",
           "is_numeric_host", "is_pattern", "is_plain_host", "matches",
           "open_rules", "read_file", "rule_from", "settings_from"]
