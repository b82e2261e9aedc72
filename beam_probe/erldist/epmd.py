"""Ask EPMD (port 4369) where a node listens: PORT_PLEASE2, and NAMES.

Layouts from erl_dist_protocol, "EPMD Protocol". Requests are framed by a
2-byte length; replies are not framed and the connection closes after them.
"""

from __future__ import annotations

import os
import socket
import struct
import time

from beam_probe.erldist.errors import (ConnectFailed, HostUnknown, NodeNotFound, ProtocolError,
                      TimedOut)

EPMD_PORT = 4369


def epmd_port() -> int:
    """EPMD's port: ERL_EPMD_PORT when set, as erl itself reads it."""
    try:
        return int(os.environ.get("ERL_EPMD_PORT") or EPMD_PORT)
    except ValueError:
        return EPMD_PORT
PORT_PLEASE2_REQ = 122
PORT2_RESP = 119
NAMES_REQ = 110

# A NAMES reply lists one line per registered node; a real host has a few
# dozen at most. The cap only guards against a peer that never stops.
MAX_NAMES_REPLY = 1024 * 1024

# An error message lists at most this many of the names EPMD knows: a host
# with 60,000 registered names would otherwise make a 445 KB "one line".
NAMES_SHOWN = 20


def port_please_request(short_name: str) -> bytes:
    name = short_name.encode("utf-8")
    return struct.pack(">HB", len(name) + 1, PORT_PLEASE2_REQ) + name


def parse_port_reply(reply: bytes) -> int | None:
    """The node's distribution port, or None when EPMD does not know it."""
    if len(reply) < 2 or reply[0] != PORT2_RESP:
        raise ProtocolError("EPMD sent a malformed PORT_PLEASE2 reply")
    if reply[1] != 0:
        return None
    if len(reply) < 12:
        raise ProtocolError("EPMD's PORT_PLEASE2 reply is truncated")
    (port, _node_type, _proto, high, low) = struct.unpack_from(">HBBHH",
                                                              reply, 2)
    if not low <= 6 <= high:
        raise ProtocolError(f"the node speaks distribution versions "
                            f"{low}..{high}; beam-probe speaks 6 (OTP 23+)")
    return int(port)


def parse_names_reply(reply: bytes) -> list[str]:
    """Node names from a NAMES reply ('name foo at port 1234' lines)."""
    names = []
    for line in reply[4:].decode("utf-8", "replace").splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0] == "name":
            names.append(parts[1])
    return names


def lookup_name(host: str) -> str | bytes:
    """``host`` as the resolver takes it. Python encodes a str host with
    the idna codec, whose import (with stringprep and unicodedata) was
    3.5 ms of a run (measured: the first getaddrinfo of "localhost" as str
    3.63 ms, as bytes 0.17 ms): an ASCII name goes as bytes, as idna would
    have made it. (create_connection passes bytes on to getaddrinfo, which
    takes them; typeshed lists str only.)"""
    return host.encode("ascii") if host.isascii() else host


def _exchange(host: str, request: bytes, deadline: float,
              limit: int = 4096) -> bytes:
    """Send one request and read the reply until EPMD closes, by
    ``deadline`` (a time.monotonic() value) for the whole exchange: a peer
    that sends one byte at a time cannot stretch it."""
    def remaining() -> float:
        left = deadline - time.monotonic()
        if left <= 0:
            raise socket.timeout
        return left

    port = epmd_port()
    try:
        sock = socket.create_connection((lookup_name(host), port),  # type: ignore[arg-type]
                                        timeout=remaining())
    except socket.gaierror:
        raise HostUnknown(f"host {host!r} is unknown (DNS lookup failed)") \
            from None
    except socket.timeout:
        raise TimedOut(f"timed out connecting to EPMD on {host}:"
                       f"{port}") from None
    except ConnectionRefusedError:
        raise ConnectFailed(f"no EPMD on {host}:{port} (connection "
                            "refused): is an Erlang node running there? For "
                            "a node without EPMD, give --dist-port") from None
    except OSError as exc:
        raise ConnectFailed(f"cannot reach EPMD on {host}:{port}: "
                            f"{exc.strerror or exc}") from None
    with sock:
        try:
            sock.settimeout(remaining())
            sock.sendall(request)
            chunks, size = [], 0
            while size < limit:
                sock.settimeout(remaining())
                chunk = sock.recv(min(65536, limit - size))
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
        except socket.timeout:
            raise TimedOut(f"EPMD on {host} did not answer in time") \
                from None
        except OSError as exc:
            raise ConnectFailed(f"EPMD on {host} failed: {exc}") from None
    return b"".join(chunks)


def listing(names: list[str], shown: int = NAMES_SHOWN) -> str:
    """Names for an error message: the first ``shown``, then a count."""
    if not names:
        return "none"
    text = ", ".join(names[:shown])
    if len(names) > shown:
        text += f", ... ({len(names) - shown} more)"
    return text


def names(host: str, deadline: float) -> list[str]:
    """The names registered with EPMD on ``host`` (for error messages)."""
    reply = _exchange(host, struct.pack(">HB", 1, NAMES_REQ), deadline,
                      MAX_NAMES_REPLY)
    return parse_names_reply(reply)


def lookup(short_name: str, host: str, deadline: float) -> int:
    """The distribution port of ``short_name`` on ``host``, asked by
    ``deadline`` (a time.monotonic() value)."""
    port = parse_port_reply(_exchange(host, port_please_request(short_name),
                                      deadline))
    if port is None:
        try:
            known = names(host, deadline)
        except (ConnectFailed, TimedOut, ProtocolError):
            known = []
        raise NodeNotFound(f"no node named {short_name!r} is registered with "
                           f"EPMD on {host} (registered there: "
                           f"{listing(known)})")
    return port
