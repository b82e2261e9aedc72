"""The HTTP side's security: Prometheus' exporter-toolkit web configuration.

Every Go exporter reads the same YAML file (``--web.config.file``):
``tls_server_config`` for HTTPS (and client certificates), and
``basic_auth_users``, user names to bcrypt hashes. Prometheus' own scrape
configuration speaks it (``scheme: https``, ``basic_auth``), so serve
reads it too, with the toolkit's names and defaults: TLS 1.2 at least,
paths relative to the file's folder. A key the toolkit has and we do not
implement is refused, never ignored: a file that names
``client_allowed_sans`` must not quietly allow every certificate.

PyYAML and bcrypt (the ``serve`` extra) are imported here, and this
module by serve alone, only when a file is given.
"""

from __future__ import annotations

import os
import re
import ssl
import stat
from dataclasses import dataclass, field
from typing import Any, Mapping

from beam_probe.errors import UsageError

# A web configuration of a few users and files is under a kilobyte.
MAX_WEB_CONFIG = 1 << 20
MAX_USERS = 1000
TOP = frozenset(("tls_server_config", "basic_auth_users",
                 "http_server_config"))
TLS_KEYS = frozenset(("cert_file", "key_file", "client_auth_type",
                      "client_ca_file", "min_version", "max_version"))
# The toolkit's keys we leave out: refused by name, so that no one relies
# on them in vain.
TLS_NOT_DONE = frozenset(("cert", "key", "client_ca", "client_allowed_sans",
                          "cipher_suites", "prefer_server_cipher_suites",
                          "curve_preferences"))
HTTP_KEYS = frozenset(("http2", "headers"))
HEADERS = frozenset(("Content-Security-Policy", "X-Frame-Options",
                     "X-Content-Type-Options", "X-XSS-Protection",
                     "Strict-Transport-Security"))
VERSIONS = {"TLS12": ssl.TLSVersion.TLSv1_2, "TLS13": ssl.TLSVersion.TLSv1_3}
# Go's tls.ClientAuthType names. RequestClientCert and RequireAnyClientCert
# take a certificate without checking it: the toolkit's own docs call them
# insecure, and Python's ssl cannot ask without checking.
CLIENT_AUTH = {"NoClientCert": ssl.CERT_NONE,
               "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
               "RequireAndVerifyClientCert": ssl.CERT_REQUIRED}
# $2a$, $2b$ or $2y$ (htpasswd -B writes 2y), a two-digit cost, 53
# characters of salt and hash in bcrypt's base64.
BCRYPT = re.compile(r"\$2[aby]\$(0[4-9]|[12][0-9]|3[01])\$[./A-Za-z0-9]{53}")


@dataclass(frozen=True)
class WebConfig:
    """What the file asks for: a server TLS context (None: plain HTTP), the
    users and their hashes (empty: no authentication), headers to add."""

    path: str
    tls: ssl.SSLContext | None = None
    users: Mapping[str, bytes] = field(default_factory=dict, repr=False)
    headers: tuple[tuple[str, str], ...] = ()
    client_certificates: bool = False

    @property
    def protects(self) -> bool:
        """Whether a stranger is kept out: users to log in as, or client
        certificates required."""
        return bool(self.users) or self.client_certificates


def _read(path: str) -> str:
    try:
        # Not blocking: a FIFO is refused, not waited on.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                raise UsageError(f"--web.config.file {path}: not a regular "
                                 "file")
            data = f.read(MAX_WEB_CONFIG + 1)
    except OSError as exc:
        raise UsageError(f"--web.config.file {path}: "
                         f"{exc.strerror or exc}") from None
    if len(data) > MAX_WEB_CONFIG:
        raise UsageError(f"--web.config.file {path}: over "
                         f"{MAX_WEB_CONFIG // 1024} KiB, not a web "
                         "configuration")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise UsageError(f"--web.config.file {path}: not UTF-8 "
                         "text") from None


def _parse(text: str, path: str) -> Any:
    import importlib

    # Through importlib: PyYAML has no type stubs, and its types are not
    # ours to check.
    yaml: Any = importlib.import_module("yaml")
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        return yaml.load(text, Loader=loader)  # noqa: S506 (a safe loader)
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        at = f" (line {where.line + 1})" if where is not None else ""
        problem = getattr(exc, "problem", None) or type(exc).__name__
        raise UsageError(f"--web.config.file {path}: not YAML{at}: "
                         f"{problem}") from None
    except RecursionError:
        raise UsageError(f"--web.config.file {path}: nested too "
                         "deeply") from None


def _table(value: Any, where: str, known: frozenset[str],
           not_done: frozenset[str] = frozenset()) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise UsageError(f"{where}: not a mapping")
    for key in value:
        if key in not_done:
            raise UsageError(f"{where}: {key} is not supported by "
                             "beam-probe serve")
        if key not in known:
            raise UsageError(f"{where}: unknown key {str(key)[:40]!r} "
                             f"(known: {', '.join(sorted(known))})")
    return value


def _string(table: Mapping[str, Any], key: str, where: str) -> str | None:
    value = table.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise UsageError(f"{where}: {key} must be a non-empty string")
    return value


def _in(folder: str, path: str) -> str:
    # As the toolkit does: relative paths are the file's folder's.
    return os.path.join(folder, path)


def _tls(table: Mapping[str, Any], folder: str, where: str
         ) -> tuple[ssl.SSLContext, bool]:
    cert, key = (_string(table, k, where) for k in ("cert_file", "key_file"))
    if not cert or not key:
        raise UsageError(f"{where}: cert_file and key_file are both needed")
    auth = _string(table, "client_auth_type", where) or "NoClientCert"
    if auth not in CLIENT_AUTH:
        raise UsageError(f"{where}: client_auth_type {auth[:40]!r} is not "
                         f"supported ({', '.join(CLIENT_AUTH)}; the others "
                         "take a certificate without checking it)")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    low = _string(table, "min_version", where) or "TLS12"
    high = _string(table, "max_version", where) or "TLS13"
    for name in (low, high):
        if name not in VERSIONS:
            raise UsageError(f"{where}: TLS version {name[:20]!r}: TLS12 or "
                             "TLS13")
    if VERSIONS[low] > VERSIONS[high]:
        raise UsageError(f"{where}: min_version is above max_version")
    ctx.minimum_version, ctx.maximum_version = VERSIONS[low], VERSIONS[high]

    def no_password() -> str:
        # OpenSSL would prompt on the terminal, and a service would hang.
        raise UsageError(f"{where}: the key in {key} is encrypted: use an "
                         "unencrypted key readable by this user only")

    try:
        ctx.load_cert_chain(_in(folder, cert), _in(folder, key),
                            password=no_password)
    except OSError as exc:   # ssl.SSLError is one
        reason = getattr(exc, "reason", None) or exc.strerror or exc
        raise UsageError(f"{where}: cert_file {cert} or key_file {key}: "
                         f"{reason}") from None
    ca = _string(table, "client_ca_file", where)
    if CLIENT_AUTH[auth] != ssl.CERT_NONE:
        if not ca:
            raise UsageError(f"{where}: {auth} needs client_ca_file")
        try:
            ctx.load_verify_locations(cafile=_in(folder, ca))
        except OSError as exc:
            reason = getattr(exc, "reason", None) or exc.strerror or exc
            raise UsageError(f"{where}: client_ca_file {ca}: "
                             f"{reason}") from None
    elif ca:
        # A CA file that checks nothing looks like protection and is none.
        raise UsageError(f"{where}: client_ca_file is given but "
                         "client_auth_type is NoClientCert: set "
                         "RequireAndVerifyClientCert")
    ctx.verify_mode = CLIENT_AUTH[auth]
    return ctx, CLIENT_AUTH[auth] == ssl.CERT_REQUIRED


def _users(value: Any, where: str) -> dict[str, bytes]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise UsageError(f"{where}: a mapping of user names to bcrypt "
                         "hashes")
    if len(value) > MAX_USERS:
        raise UsageError(f"{where}: over {MAX_USERS} users")
    users: dict[str, bytes] = {}
    for user, hashed in value.items():
        if not isinstance(user, str) or not user or ":" in user:
            raise UsageError(f"{where}: {str(user)[:40]!r} is not a user "
                             "name (a string without ':')")
        if not isinstance(hashed, str) or not BCRYPT.fullmatch(hashed):
            raise UsageError(f"{where}: {user[:40]!r}: not a bcrypt hash "
                             "(htpasswd -nBC 10 \"\" | tr -d ':\\n' makes "
                             "one)")
        users[user] = hashed.encode("ascii")
    return users


def _headers(table: Mapping[str, Any], where: str
             ) -> tuple[tuple[str, str], ...]:
    headers = _table(table.get("headers"), f"{where} headers", HEADERS)
    out = []
    for name, value in headers.items():
        if not isinstance(value, str) or any(c in value for c in "\r\n"):
            raise UsageError(f"{where} headers: {name}: a one-line string")
        if value:
            out.append((name, value))
    http2 = table.get("http2")
    if http2 is not None and not isinstance(http2, bool):
        raise UsageError(f"{where}: http2 must be true or false")
    return tuple(out)


def read_web_config(path: str) -> WebConfig:
    """The file at ``path`` as a WebConfig; one line for what is wrong."""
    import importlib

    try:
        for module in ("bcrypt", "yaml"):
            importlib.import_module(module)
    except ImportError as exc:
        raise UsageError(f"--web.config.file needs {exc.name}: pip install "
                         "'beam-probe[serve]'") from None
    where = f"--web.config.file {path}"
    parsed = _parse(_read(path), path)
    if parsed is None:
        parsed = {}
    top = _table(parsed, where, TOP)
    folder = os.path.dirname(os.path.abspath(path))
    tls, required = None, False
    tls_table = _table(top.get("tls_server_config"),
                       f"{where}: tls_server_config", TLS_KEYS, TLS_NOT_DONE)
    if tls_table:
        tls, required = _tls(tls_table, folder,
                             f"{where}: tls_server_config")
    http = _table(top.get("http_server_config"),
                  f"{where}: http_server_config", HTTP_KEYS)
    return WebConfig(path=path, tls=tls,
                     users=_users(top.get("basic_auth_users"),
                                  f"{where}: basic_auth_users"),
                     headers=_headers(http, f"{where}: http_server_config"),
                     client_certificates=required)


__all__ = ["WebConfig", "read_web_config"]
