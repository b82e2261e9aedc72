"""The distribution handshake (version 6, OTP 23+), as a sans-IO state machine.

Feed it the bytes the peer sent; it returns the bytes to send back and moves
through its states. No sockets here, so every step is testable with byte
strings. Message layouts follow OTP's erl_dist_protocol documentation
("Distribution Handshake"), from the initiating side (we are node A):

    A -> B  send_name        'N' Flags:64 Creation:32 NLen:16 Name
    B -> A  recv_status      's' Status
    B -> A  recv_challenge   'N' Flags:64 Challenge:32 Creation:32 NLen:16 Name
    A -> B  send_challenge_reply  'r' Challenge:32 Digest:16/binary
    B -> A  recv_challenge_ack    'a' Digest:16/binary

Every handshake message is framed by a 2-byte big-endian length over TCP.
Over TLS distribution (``inet_tls_dist``) the socket is in ``{packet, 4}``
mode from the start, so there the length takes 4 bytes: ``length_size=4``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import struct

if TYPE_CHECKING:
    from hashlib import md5
else:
    try:  # The builtin module avoids loading OpenSSL through hashlib (3 ms)
        from _md5 import md5
    except ImportError:  # pragma: no cover - CPython always has it
        from hashlib import md5

# Capability flags (erl_dist_protocol, "Distribution Flags").
DFLAG_PUBLISHED = 0x1
DFLAG_EXTENDED_REFERENCES = 0x4
DFLAG_DIST_MONITOR = 0x8
DFLAG_FUN_TAGS = 0x10
DFLAG_NEW_FUN_TAGS = 0x80
DFLAG_EXTENDED_PIDS_PORTS = 0x100
DFLAG_EXPORT_PTR_TAG = 0x200
DFLAG_BIT_BINARIES = 0x400
DFLAG_NEW_FLOATS = 0x800
DFLAG_SMALL_ATOM_TAGS = 0x4000
DFLAG_UTF8_ATOMS = 0x10000
DFLAG_MAP_TAG = 0x20000
DFLAG_BIG_CREATION = 0x40000
DFLAG_HANDSHAKE_23 = 0x1000000
DFLAG_UNLINK_ID = 0x2000000
DFLAG_MANDATORY_25_DIGEST = 0x4000000
DFLAG_V4_NC = 1 << 34

# What OTP 25 through 28 insist on (OTP 26+ adds UNLINK_ID and V4_NC and
# answers `not_allowed` without them). PUBLISHED is deliberately absent: that
# keeps us hidden, out of the target's nodes() and out of global's mesh.
# DIST_HDR_ATOM_CACHE and FRAGMENTS are absent too, so every message arrives
# as a plain pass-through frame that the codec alone can read.
OUR_FLAGS = (DFLAG_EXTENDED_REFERENCES | DFLAG_FUN_TAGS | DFLAG_NEW_FUN_TAGS
             | DFLAG_EXTENDED_PIDS_PORTS | DFLAG_EXPORT_PTR_TAG
             | DFLAG_BIT_BINARIES | DFLAG_NEW_FLOATS | DFLAG_SMALL_ATOM_TAGS
             | DFLAG_UTF8_ATOMS | DFLAG_MAP_TAG | DFLAG_BIG_CREATION
             | DFLAG_HANDSHAKE_23 | DFLAG_UNLINK_ID | DFLAG_MANDATORY_25_DIGEST
             | DFLAG_V4_NC)

# The peer must speak the same encodings back, or we could not read it.
REQUIRED_PEER_FLAGS = (DFLAG_EXTENDED_REFERENCES | DFLAG_EXTENDED_PIDS_PORTS
                       | DFLAG_UTF8_ATOMS | DFLAG_NEW_FLOATS
                       | DFLAG_HANDSHAKE_23 | DFLAG_BIG_CREATION)

# Handshake messages are small (the longest is a name of at most 255 bytes
# plus 19 bytes of header); anything much larger is not a BEAM node talking.
MAX_HANDSHAKE_MESSAGE = 1024

# A TLS record starts with its content type, then the major version, 3 for
# every SSL/TLS version (RFC 8446, section 5.1): 0x15 alert, 0x16 handshake.
# Read as a handshake length that is 5379 bytes or more, beyond any real
# handshake message, so a node on TLS distribution cannot be mistaken.
TLS_RECORD_STARTS = (b"\x15\x03", b"\x16\x03")


class HandshakeError(Exception):
    """The handshake failed; ``str()`` says why, for an operator."""


class NameBusy(HandshakeError):
    """Our name is in use on the peer: another probe holds it, or is in the
    middle of its own handshake with it. Try another name.

    OTP's dist_util answers a name it already knows in three ways: status
    ``alive`` (a connection of that name is up), ``nok`` (a handshake from
    that name is pending) or, for a pending handshake it cannot classify,
    a silent close. ``answer`` is what to send before closing (the reply to
    ``alive``, which keeps the other probe's connection)."""

    def __init__(self, message: str, answer: bytes = b"") -> None:
        super().__init__(message)
        self.answer = answer


class LostRace(NameBusy):
    """The node closed the connection after status ``ok``, before its
    challenge: another handshake from our name arrived, and a node whose
    name sorts lower than ours shuts the first one down (net_kernel's
    simultaneous-connect rule). Not a refusal: try another name."""


class ClosedAfterReply(HandshakeError):
    """The node closed the connection after our challenge reply, without a
    word. Its digest check failing (a wrong cookie) does that; so does a
    name race lost at that moment (see LostRace). connect() tells the two
    apart by trying again under another name."""


class NotAllowed(HandshakeError):
    """The peer refused us (status `not_allowed`)."""


class WrongNode(HandshakeError):
    """The node that answered is not the node we asked for."""


class TlsRequired(HandshakeError):
    """The peer answered in TLS: it runs TLS distribution."""


class CookieRejected(HandshakeError):
    """One side's digest did not match: the cookies differ."""


class State:
    SEND_NAME = "send_name"
    AWAIT_STATUS = "await_status"
    AWAIT_CHALLENGE = "await_challenge"
    AWAIT_ACK = "await_ack"
    CONNECTED = "connected"
    FAILED = "failed"


_WAITING_FOR = {State.AWAIT_STATUS: "its status",
                State.AWAIT_CHALLENGE: "its challenge",
                State.AWAIT_ACK: "its acknowledgement"}


def digest(challenge: int, cookie: bytes) -> bytes:
    """md5(Cookie ++ integer_to_list(Challenge)), the protocol's proof."""
    return md5(cookie + str(challenge).encode("ascii")).digest()


def same_node(asked: str, answered: str) -> bool:
    """Whether the node that answered is the one asked for.

    Names must match as Erlang itself requires, except that the host may be
    given in short or long form (``app@db1`` for ``app@db1.example.com``,
    and the other way round) and host names compare case-insensitively, as
    DNS names do. An IP address never matches a host name.
    """
    if asked == answered:
        return True
    alive_a, _, host_a = asked.partition("@")
    alive_b, _, host_b = answered.partition("@")
    if alive_a != alive_b or not host_a or not host_b:
        return False
    host_a, host_b = host_a.lower(), host_b.lower()
    if host_a == host_b:
        return True
    short, long_ = sorted((host_a, host_b), key=len)
    return "." not in short and long_.startswith(short + ".") and \
        not long_.replace(".", "").isdigit()


def frame16(payload: bytes) -> bytes:
    return struct.pack(">H", len(payload)) + payload


def frame32(payload: bytes) -> bytes:
    return struct.pack(">I", len(payload)) + payload


class ClientHandshake:
    """Drive one outgoing handshake.

    >>> hs = ClientHandshake("probe@host", b"cookie", creation=7, challenge=1)
    >>> first = hs.start()          # send these bytes
    >>> reply = hs.receive(data)    # bytes from the peer -> bytes to send
    >>> hs.state == State.CONNECTED

    After CONNECTED, ``peer_name``, ``peer_flags``, ``peer_creation`` are set
    and ``trailing`` holds any bytes that arrived after the final message.
    """

    def __init__(self, our_name: str, cookie: bytes, creation: int,
                 challenge: int, flags: int = OUR_FLAGS,
                 length_size: int = 2, expected_peer: str | None = None
                 ) -> None:
        if length_size not in (2, 4):
            raise ValueError("length_size is 2 (TCP) or 4 (TLS)")
        self.our_name = our_name
        # The name we asked for; the peer's own name must be the same node
        # (see same_node), or we would report on a node nobody asked about.
        self.expected_peer = expected_peer
        self.length_size = length_size
        self._frame = frame16 if length_size == 2 else frame32
        self.cookie = cookie
        self.creation = creation
        self.our_challenge = challenge & 0xFFFFFFFF
        self.flags = flags
        self.state = State.SEND_NAME
        self.status: str | None = None
        self.peer_name: str | None = None
        self.peer_flags = 0
        self.peer_creation = 0
        self.trailing = b""
        self._buffer = b""

    def start(self) -> bytes:
        if self.state != State.SEND_NAME:
            raise HandshakeError("handshake already started")
        name = self.our_name.encode("utf-8")
        self.state = State.AWAIT_STATUS
        return self._frame(b"N" + struct.pack(">QIH", self.flags,
                                              self.creation, len(name))
                           + name)

    def receive(self, data: bytes) -> bytes:
        """Take bytes from the peer; return the bytes to send (maybe b"")."""
        if self.state in (State.CONNECTED, State.FAILED, State.SEND_NAME):
            raise HandshakeError(f"unexpected data in state {self.state}")
        self._buffer += data
        out = b""
        while self.state not in (State.CONNECTED, State.FAILED):
            message = self._next_message()
            if message is None:
                break
            try:
                out += self._handle(message)
            except HandshakeError:
                self.state = State.FAILED
                raise
        if self.state == State.CONNECTED:
            self.trailing, self._buffer = self._buffer, b""
        return out

    def connection_closed(self) -> HandshakeError:
        """The error that a close by the peer means in the current state."""
        was, self.state = self.state, State.FAILED
        if was == State.AWAIT_STATUS:
            # dist_util closes without a status when a handshake from our
            # name is already pending there ('already_pending').
            return NameBusy("the node closed the connection before giving "
                            "a status: our name is busy there")
        if was == State.AWAIT_CHALLENGE:
            return LostRace(f"the node closed the connection after status "
                            f"{self.status}: another handshake from our "
                            f"name replaced ours")
        if was == State.AWAIT_ACK:
            # The peer checks our digest before it sends its ack and closes
            # without a word when it does not match (erl_dist_protocol).
            return ClosedAfterReply(
                "the node closed the connection after our challenge reply: "
                "the cookie does not match the node's cookie")
        return HandshakeError(
            f"the node closed the connection during the handshake "
            f"(waiting for {_WAITING_FOR.get(was, was)})")

    def alive_reply(self, keep_existing: bool = True) -> bytes:
        """Answer to status `alive`: 'false' keeps the peer's connection."""
        return self._frame(b"s" + (b"false" if keep_existing else b"true"))

    def _next_message(self) -> bytes | None:
        size = self.length_size
        if len(self._buffer) < size:
            return None
        if size == 2 and self._buffer[:2] in TLS_RECORD_STARTS:
            self.state = State.FAILED
            raise TlsRequired(
                "the node answered in TLS: it uses TLS distribution "
                "(-proto_dist inet_tls); connect with --tls and certificates, "
                "or --ssl-dist-optfile")
        (length,) = struct.unpack_from(">H" if size == 2 else ">I",
                                       self._buffer)
        if length == 0 or length > MAX_HANDSHAKE_MESSAGE:
            self.state = State.FAILED
            raise HandshakeError(
                f"the peer sent a handshake message of {length} bytes: "
                "not an Erlang distribution handshake")
        if len(self._buffer) < size + length:
            return None
        message = self._buffer[size:size + length]
        self._buffer = self._buffer[size + length:]
        return message

    def _handle(self, message: bytes) -> bytes:
        tag = message[:1]
        if self.state == State.AWAIT_STATUS:
            if tag != b"s":
                raise HandshakeError(f"expected a status message, got tag "
                                     f"{tag!r}: not an Erlang node?")
            return self._on_status(message[1:].decode("latin-1"))
        if self.state == State.AWAIT_CHALLENGE:
            if tag != b"N":
                raise HandshakeError(
                    f"expected a version 6 challenge, got tag {tag!r}; "
                    "beam-probe needs OTP 23 or later")
            return self._on_challenge(message)
        if self.state == State.AWAIT_ACK:
            if tag != b"a" or len(message) != 17:
                raise HandshakeError(f"expected a challenge ack, got tag "
                                     f"{tag!r}")
            if message[1:] != digest(self.our_challenge, self.cookie):
                # The peer proved it does not know our cookie: it may not be
                # the node we think, so nothing more is said to it.
                raise CookieRejected(
                    "the node's reply to our challenge is wrong: it does not "
                    "share our cookie")
            self.state = State.CONNECTED
            return b""
        raise HandshakeError(f"unexpected message in state {self.state}")

    def _on_status(self, status: str) -> bytes:
        self.status = status
        if status in ("ok", "ok_simultaneous"):
            self.state = State.AWAIT_CHALLENGE
            return b""
        if status == "alive":
            # A node of our name is already connected: another probe running
            # now. Say 'false' so the peer keeps that one; the caller picks
            # the next name from the pool.
            self.state = State.FAILED
            raise NameBusy("a node with our name is already connected",
                           self.alive_reply(keep_existing=True))
        if status == "nok":
            # A handshake from our name is pending there: another probe
            # started in the same instant.
            raise NameBusy("a handshake from our name is already pending")
        if status == "not_allowed":
            raise NotAllowed(
                "the node refused the connection (status not_allowed): it "
                "restricts which nodes may connect (net_kernel:allow/1)")
        raise HandshakeError(f"unknown handshake status {status!r}")

    def _on_challenge(self, message: bytes) -> bytes:
        if len(message) < 19:
            raise HandshakeError("challenge message too short")
        flags, challenge, creation, name_len = struct.unpack_from(
            ">QIIH", message, 1)
        if 19 + name_len != len(message):
            raise HandshakeError("challenge message length does not match "
                                 "its name length")
        missing = REQUIRED_PEER_FLAGS & ~flags
        if missing:
            raise HandshakeError(f"the node lacks distribution capabilities "
                                 f"we need (flags {missing:#x})")
        self.peer_flags = flags
        self.peer_creation = creation
        self.peer_name = message[19:].decode("utf-8", "replace")
        if self.expected_peer is not None and not same_node(
                self.expected_peer, self.peer_name):
            raise WrongNode(
                f"the node there is {self.peer_name}, not "
                f"{self.expected_peer}: check the name (and --dist-port)")
        self.state = State.AWAIT_ACK
        return self._frame(b"r" + struct.pack(">I", self.our_challenge)
                           + digest(challenge, self.cookie))
