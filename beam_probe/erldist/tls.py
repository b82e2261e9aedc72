"""TLS distribution: what a node started with ``-proto_dist inet_tls`` needs.

Such a node speaks the ordinary distribution protocol (EPMD lookup in the
clear, then handshake and frames exactly as over TCP) inside a TLS session
on its distribution port; OTP's ssl guide, "Using TLS for Erlang
Distribution". So TLS here is only a layer between the socket and
connection.py: :func:`start` wraps a connected socket in a
:class:`TlsChannel` that has the few socket methods the connection uses.

Settings (TlsSettings) come from our own options (``--tls``,
``--certfile``, ...) or from the node's own ``-ssl_dist_optfile``, read by
beam_probe.target: configuration is the operator's, not the transport's.

The ``ssl`` module is imported only here, and this module only when TLS is
asked for: loading OpenSSL costs ~10 ms that a plain run need not pay.
"""

from __future__ import annotations

import os
import socket
import ssl
import threading
import time
from dataclasses import dataclass
from typing import Any

from beam_probe.erldist.errors import TimedOut, TlsConfigError, TlsError

# TLS versions by the names OTP's ssl gives them.
VERSIONS = {"tlsv1.2": ssl.TLSVersion.TLSv1_2,
            "tlsv1.3": ssl.TLSVersion.TLSv1_3}

_RECV_SIZE = 1 << 16


@dataclass(frozen=True)
class TlsSettings:
    """How to set up TLS to a node. ``source`` names where the settings came
    from, for messages. ``server_name`` is the name the node's certificate
    must carry (default: the host part of the node name); ``check_hostname``
    False verifies the chain but not the name (Erlang's
    ``{server_name_indication, disable}``)."""

    certfile: str | None = None
    keyfile: str | None = None
    cacertfile: str | None = None
    password: str | None = None
    verify: bool = True
    check_hostname: bool = True
    server_name: str | None = None
    versions: tuple[str, ...] = ()
    source: str = "--tls"

    def __repr__(self) -> str:
        # The key's password must not reach a log line or traceback.
        return (f"TlsSettings(source={self.source!r}, "
                f"certfile={self.certfile!r}, cacertfile={self.cacertfile!r})")


def make_context(settings: TlsSettings) -> ssl.SSLContext:
    """An SSLContext for the client side; TlsConfigError names the file
    that could not be used."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    # OTP 25-28 offer TLS 1.2 and 1.3 for distribution by default.
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    if settings.versions:
        chosen = sorted(VERSIONS[v] for v in settings.versions)
        ctx.minimum_version, ctx.maximum_version = chosen[0], chosen[-1]
    if settings.verify:
        if settings.cacertfile:
            _load(settings.cacertfile, "CA certificates",
                  lambda: ctx.load_verify_locations(cafile=settings.cacertfile))
        else:
            ctx.load_default_certs()
        ctx.check_hostname = settings.check_hostname
    else:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    if settings.keyfile and not settings.certfile:
        raise TlsConfigError(f"{settings.source}: a key file without a "
                             "certificate file (--certfile)")
    if settings.certfile:
        def password() -> str:
            # Without this, OpenSSL would prompt on the terminal for an
            # encrypted key, and a cron job would hang.
            if settings.password is None:
                raise TlsConfigError(
                    f"the key in {settings.keyfile or settings.certfile} is "
                    "encrypted: give its password as {password, \"...\"} in "
                    "an -ssl_dist_optfile, or use an unencrypted key "
                    "readable by this user only")
            return settings.password

        _load(settings.certfile, "certificate and key",
              lambda: ctx.load_cert_chain(settings.certfile, settings.keyfile,
                                          password=password),
              settings.keyfile)
    return ctx


def _load(path: str, what: str, action: Any, keyfile: str | None = None
          ) -> None:
    for name in (path, keyfile):
        if name and not os.path.isfile(name):
            raise TlsConfigError(f"cannot load {what}: {name} does not exist")
    try:
        action()
    except TlsConfigError:
        raise
    except ssl.SSLError as exc:
        files = path + (f" and {keyfile}" if keyfile else "")
        raise TlsConfigError(f"cannot load {what} from {files}: "
                             f"{_reason(exc)}") from None
    except OSError as exc:
        raise TlsConfigError(f"cannot load {what} from {path}: "
                             f"{exc.strerror or exc}") from None


class TlsChannel:
    """A TLS session over a connected socket, with the socket methods
    connection.py uses (``sendall``, ``recv``, ``settimeout``, ...).

    OpenSSL forbids using one SSL object from two threads at once, and the
    connection reads in its reader thread while calls send from others. So
    the session is an ``SSLObject`` over memory buffers, every use of it is
    under one lock, and the socket I/O is ours: the reader waits on the
    socket without holding the lock.
    """

    def __init__(self, sock: socket.socket, context: ssl.SSLContext,
                 server_name: str) -> None:
        self.sock = sock
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self._tls = context.wrap_bio(self._incoming, self._outgoing,
                                     server_side=False,
                                     server_hostname=server_name)
        self._lock = threading.Lock()
        self._timeout: float | None = None

    def handshake(self, deadline: float) -> None:
        while True:
            with self._lock:
                try:
                    self._tls.do_handshake()
                    done = True
                except ssl.SSLWantReadError:
                    done = False
                self._flush()
            if done:
                return
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise socket.timeout
            self.sock.settimeout(remaining)
            data = self.sock.recv(_RECV_SIZE)
            if not data:
                raise ConnectionResetError("closed during the TLS handshake")
            with self._lock:
                self._incoming.write(data)

    def version(self) -> str | None:
        return self._tls.version()

    def sendall(self, data: bytes) -> None:
        with self._lock:
            view = memoryview(data)
            while view:
                written = self._tls.write(view)
                view = view[written:]
            self._flush()

    def recv(self, size: int) -> bytes:
        """Like socket.recv: at most ``size`` bytes of plaintext, within the
        timeout for the whole call, however many TLS records and raw reads
        it takes (a peer sending a byte at a time cannot stretch it)."""
        deadline = None if self._timeout is None else \
            time.monotonic() + self._timeout
        while True:
            with self._lock:
                try:
                    data = self._tls.read(size)
                except ssl.SSLWantReadError:
                    data = b""
                except ssl.SSLZeroReturnError:
                    return b""  # the node sent close_notify
                # Reading can produce records to send (a TLS 1.3 key update).
                self._flush()
            if data:
                return data
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise socket.timeout("timed out")
                self.sock.settimeout(left)
            raw = self.sock.recv(_RECV_SIZE)
            if not raw:
                return b""
            with self._lock:
                self._incoming.write(raw)

    def settimeout(self, timeout: float | None) -> None:
        self._timeout = timeout
        self.sock.settimeout(timeout)

    def getsockname(self) -> Any:
        return self.sock.getsockname()

    def shutdown(self, how: int) -> None:
        with self._lock:
            try:
                self._tls.unwrap()
            except (ssl.SSLError, ValueError):
                pass  # no close_notify back from the node is expected
            try:
                self._flush()
            except OSError:
                pass
        self.sock.shutdown(how)

    def close(self) -> None:
        self.sock.close()

    def _flush(self) -> None:
        pending = self._outgoing.read()
        if pending:
            self.sock.sendall(pending)


def start(sock: socket.socket, context: ssl.SSLContext, node: str,
          host: str, settings: TlsSettings, deadline: float) -> TlsChannel:
    """The TLS handshake with ``node`` on a connected socket; a one-line
    TlsError (or TimedOut) if it cannot be completed."""
    channel = TlsChannel(sock, context, settings.server_name or host)
    try:
        channel.handshake(deadline)
    except socket.timeout:
        sock.close()
        raise TimedOut(f"{node} did not complete a TLS handshake in time: is "
                       "it started with -proto_dist inet_tls?") from None
    except OSError as exc:
        sock.close()
        raise failure(exc, node, settings) from None
    return channel


def failure(exc: OSError, node: str, settings: TlsSettings) -> Exception:
    """The one line for a TLS failure, naming the likely cause."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        detail = exc.verify_message or _reason(exc)
        hint = ""
        if "mismatch" in detail.lower():
            hint = (" (the name checked comes from the node name; a "
                    "certificate for another name needs "
                    "{server_name_indication, \"name\"} in an optfile or "
                    "--tls-server-name)")
        elif "issuer" in detail or "self-signed" in detail or \
                "self signed" in detail:
            hint = (" (is the CA that signed it in "
                    f"{settings.cacertfile or 'the system store'}?)")
        return TlsError(f"cannot verify {node}'s certificate: {detail}{hint}")
    if isinstance(exc, ssl.SSLError):
        reason = _reason(exc)
        upper = (getattr(exc, "reason", None) or str(exc)).upper()
        if "CERTIFICATE_REQUIRED" in upper or (
                "HANDSHAKE_FAILURE" in upper and not settings.certfile):
            return TlsError(f"{node} requires a client certificate: pass "
                            "--certfile and --keyfile (or an optfile with "
                            "certfile and keyfile)")
        if any(alert in upper for alert in ("BAD_CERTIFICATE", "UNKNOWN_CA",
                                            "CERTIFICATE_UNKNOWN",
                                            "DECRYPT_ERROR",
                                            "ACCESS_DENIED")):
            return TlsError(f"{node} rejected our client certificate "
                            f"{settings.certfile}: {reason} (is it signed by "
                            "a CA in the node's cacertfile?)")
        if "WRONG_VERSION_NUMBER" in upper or "PACKET_LENGTH" in upper or \
                "RECORD_LAYER" in upper or "UNEXPECTED_EOF" in upper:
            return TlsError(f"{node} does not answer in TLS: it may use plain "
                            "distribution (drop --tls)")
        return TlsError(f"TLS with {node} failed: {reason}")
    return TlsError(f"{node} closed the connection during the TLS handshake: "
                    "it may not use TLS distribution, or it rejected us "
                    f"({exc.strerror or exc})")


def _reason(exc: ssl.SSLError) -> str:
    reason = getattr(exc, "reason", None)
    if reason:
        return str(reason).lower().replace("_", " ")
    return str(exc.args[1] if len(exc.args) > 1 else exc)


__all__ = ["TlsChannel", "TlsSettings", "VERSIONS", "failure",
           "make_context", "start"]
