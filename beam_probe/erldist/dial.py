"""Dialling a node: EPMD, the socket, TLS, our name, the handshake.

What makes connecting more than one handshake is our name. Names come from
a small fixed pool (NAME_POOL), claimed on this machine before use
(claims.py) and tried from a random one, so that any number of probes,
from cron and from people, share a node without one failing because of
another. Every wait is bounded by one deadline for the whole set-up,
across every read.
"""

from __future__ import annotations

import os
import socket
import time
from typing import TYPE_CHECKING, Any

from beam_probe.erldist import epmd
from beam_probe.erldist.claims import claim
from beam_probe.erldist.connection import Connection, ReplyLimits
from beam_probe.erldist.errors import (ConnectFailed, ConnectionLost, CookieError,
                     ProtocolError, TimedOut)
from beam_probe.erldist.handshake import (ClientHandshake, ClosedAfterReply, CookieRejected,
                        HandshakeError, NameBusy, NotAllowed, State,
                        TlsRequired, WrongNode)

if TYPE_CHECKING:  # ssl is loaded only when TLS is asked for
    from beam_probe.erldist.tls import TlsSettings

# Our own names. Each name becomes an atom on the target the first time it
# connects, and atoms are never collected, so names come from this fixed pool
# rather than being made per run: any number of runs adds at most this many
# atoms, and this many probes on one machine can be attached to one node at
# once; more wait for a name to free (see connect).
NAME_POOL = tuple(f"beam_probe_{i}" for i in range(1, 9))

# When every name is busy, wait this long (times a random factor from 1 to
# 2, so probes that collided do not collide again in step) before the next
# round. A quick probe holds its name for ~40 ms.
BUSY_WAIT = 0.05


class NodeAddress:
    """Where to find a node: its full name, host, and short name."""

    def __init__(self, node: str) -> None:
        alive, sep, host = node.partition("@")
        if not sep or not alive or not host:
            raise ValueError(f"not a node name: {node[:300]!r} (expected "
                             "name@host)")
        if len(node) > 255:
            # An atom: erl refuses longer names, and EPMD's request and the
            # handshake carry a name's length in 2 bytes.
            raise ValueError("not a node name: longer than 255 characters")
        self.node = node
        self.alive = alive
        self.host = host

    @property
    def long_names(self) -> bool:
        # A node started with -name has a dotted host (or an IP address);
        # one started with -sname does not. Our name must take the same form.
        return "." in self.host or ":" in self.host


def connect(node: str, cookie: bytes, *, timeout: float = 15.0,
            dist_port: int | None = None,
            names: tuple[str, ...] = NAME_POOL,
            tls: "TlsSettings | None" = None,
            limits: ReplyLimits | None = None,
            claims: bool = True) -> Connection:
    """EPMD lookup (unless ``dist_port``), TCP connect, TLS when ``tls`` is
    given, handshake.

    ``timeout`` bounds the whole set-up, across every read. A busy name
    (another probe on this machine holds its claim, or the node has a
    connection or a handshake of that name) is not an error: the next name
    of the pool is tried, starting from a random one so that probes started
    in the same instant spread out, and when every name is busy, the next
    round waits a little, until ``timeout``. ``claims=False`` skips the
    claims on this machine, leaving the handshake's rules alone to keep
    probes apart (tests use it). Raises a ProbeError subclass with a
    one-line message for every way this can fail.
    """
    address = NodeAddress(node)
    deadline = time.monotonic() + timeout
    context = None
    if tls is not None:
        from beam_probe.erldist import tls as tls_layer
        # Certificates are loaded before anything is sent, so a bad file is
        # reported as such rather than as a failed connection.
        context = tls_layer.make_context(tls)
    port = dist_port or epmd.lookup(address.alive, address.host, deadline)
    creation = int.from_bytes(os.urandom(4), "big") | 1
    busy: Exception | None = None
    # A close after our challenge reply is a wrong cookie, or a name race
    # lost at that instant: only a second one, under another name, is
    # taken for the cookie.
    closed_after_reply: ClosedAfterReply | None = None
    while True:
        first = _random_index(len(names))
        for i in range(len(names)):
            name = names[(first + i) % len(names)]
            held = claim(node, name) if claims else None
            if claims and held is None:
                busy = busy or NameBusy("other probes on this machine "
                                        "hold the names")
                continue
            try:
                conn = _attempt(address, port, name, cookie, creation,
                                deadline, timeout, context, tls, limits)
            except NameBusy as exc:
                busy = exc
            except ClosedAfterReply as exc:
                if closed_after_reply is not None:
                    raise CookieError(f"{node} rejected the connection: "
                                      f"{exc}") from None
                closed_after_reply = exc
            except TimedOut:
                if busy is None:
                    raise
                break
            else:
                # The claim lasts as long as the connection.
                conn.hold(held)
                held = None
                return conn
            finally:
                if held is not None:
                    held.release()
        pause = BUSY_WAIT * (1 + _random_index(1000) / 1000)
        if time.monotonic() + pause >= deadline:
            break
        time.sleep(pause)
    if busy is None and closed_after_reply is not None:
        raise CookieError(f"{node} rejected the connection: "
                          f"{closed_after_reply}")
    raise ConnectFailed(f"all {len(names)} beam-probe names were busy on "
                        f"{node} for {timeout:g} s: too many probes at once "
                        f"({busy})")


def _attempt(address: NodeAddress, port: int, name: str, cookie: bytes,
             creation: int, deadline: float, timeout: float, context: Any,
             tls: "TlsSettings | None", limits: ReplyLimits | None
             ) -> Connection:
    """One handshake as ``name``; NameBusy when the node has that name."""
    node = address.node
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise TimedOut(f"{node} did not complete the handshake within "
                       f"{timeout:g} s")
    sock: Any = _open_socket(address.host, port, remaining)
    our_node = f"{name}@{_our_host(address, sock)}"
    if context is not None:
        from beam_probe.erldist import tls as tls_layer
        assert tls is not None  # a context is only built from settings
        sock = tls_layer.start(sock, context, node, address.host, tls,
                               deadline)
    try:
        # inet_tls_dist frames the handshake with 4-byte lengths.
        hs = _handshake(sock, our_node, cookie, creation, deadline,
                        4 if context is not None else 2, node)
    except (NameBusy, ClosedAfterReply):
        sock.close()
        raise
    except CookieRejected as exc:
        sock.close()
        raise CookieError(f"{node} rejected the connection: {exc}") \
            from None
    except (NotAllowed, TlsRequired, WrongNode) as exc:
        sock.close()
        raise ConnectFailed(f"{node}: {exc}") from None
    except HandshakeError as exc:
        sock.close()
        raise ProtocolError(f"handshake with {node} failed: {exc}") \
            from None
    except socket.timeout:
        sock.close()
        raise TimedOut(f"{node} did not complete the handshake within "
                       f"{timeout:g} s") from None
    except OSError as exc:
        sock.close()
        if context is not None and tls is not None:
            from beam_probe.erldist import tls as tls_layer
            # Under TLS 1.3 the node checks our certificate after our side
            # of the TLS handshake is done: its refusal arrives here.
            raise tls_layer.failure(exc, node, tls) from None
        raise ConnectionLost(f"connection to {node} lost during the "
                             f"handshake: {exc}") from None
    sock.settimeout(None)
    return Connection(sock, our_node, hs.peer_name or node, creation,
                      hs.peer_flags, hs.trailing, limits)


def _handshake(sock: Any, our_node: str, cookie: bytes,
               creation: int, deadline: float, length_size: int,
               expected_peer: str) -> ClientHandshake:
    hs = ClientHandshake(our_node, cookie, creation=creation,
                         challenge=int.from_bytes(os.urandom(4), "big"),
                         length_size=length_size,
                         expected_peer=expected_peer)
    sock.settimeout(max(0.001, deadline - time.monotonic()))
    sock.sendall(hs.start())
    while hs.state != State.CONNECTED:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise socket.timeout
        sock.settimeout(remaining)
        try:
            data = sock.recv(4096)
        except ConnectionResetError:
            # A pending handshake shut down by the node can arrive as a
            # reset rather than a close: the same event.
            data = b""
        if not data:
            raise hs.connection_closed()
        try:
            reply = hs.receive(data)
        except NameBusy as exc:
            if exc.answer:
                sock.sendall(exc.answer)
            raise
        if reply:
            sock.sendall(reply)
    return hs


def _our_host(address: NodeAddress, sock: socket.socket) -> str:
    if address.long_names:
        # The address we reach the node from is one it can reach us at.
        return str(sock.getsockname()[0])
    return socket.gethostname().split(".")[0]


def _open_socket(host: str, port: int, timeout: float) -> socket.socket:
    try:
        sock = socket.create_connection((epmd.lookup_name(host), port),  # type: ignore[arg-type]
                                        timeout=timeout)
    except socket.gaierror:
        raise ConnectFailed(f"host {host!r} is unknown (DNS lookup failed)") \
            from None
    except socket.timeout:
        raise TimedOut(f"timed out connecting to {host}:{port}") from None
    except ConnectionRefusedError:
        raise ConnectFailed(f"connection to {host}:{port} refused: no node "
                            "listens there") from None
    except OSError as exc:
        raise ConnectFailed(f"cannot reach {host}:{port}: "
                            f"{exc.strerror or exc}") from None
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def _random_index(n: int) -> int:
    # os.urandom rather than the random module: no import on start-up.
    return int.from_bytes(os.urandom(2), "big") % n


__all__ = ["NAME_POOL", "NodeAddress", "connect"]
