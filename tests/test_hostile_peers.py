"""Peers that misbehave: before the handshake, and after a handshake with
the right cookie. Each must end in one line on stderr and a non-zero exit
within the timeout, with the probe's memory staying small.

The fake node here is test code: a socket server speaking just enough of
the handshake (erl_dist_protocol, version 6) to get past it.
"""

from __future__ import annotations

import os
import socket
import struct
import sys
import threading
import time

import pytest

from beam_probe.erldist import handshake
from conftest import run_measured

COOKIE = b"hostile-test-cookie"
TIMEOUT = 3.0


def _recv_exact(conn: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = conn.recv(n - len(data))
        if not chunk:
            raise ConnectionError("closed")
        data += chunk
    return data


def _recv16(conn: socket.socket) -> bytes:
    (length,) = struct.unpack(">H", _recv_exact(conn, 2))
    return _recv_exact(conn, length)


def _pass_handshake(conn: socket.socket) -> None:
    _recv16(conn)                                   # N: their name
    conn.sendall(handshake.frame16(b"sok"))
    ours = 0x1234567
    name = b"fake@127.0.0.1"
    flags = handshake.OUR_FLAGS | handshake.REQUIRED_PEER_FLAGS
    conn.sendall(handshake.frame16(b"N" + struct.pack(">QIIH", flags, ours, 1,
                                                     len(name)) + name))
    reply = _recv16(conn)                           # r: challenge + digest
    assert reply[:1] == b"r"
    (theirs,) = struct.unpack(">I", reply[1:5])
    assert reply[5:21] == handshake.digest(ours, COOKIE)
    conn.sendall(handshake.frame16(b"a" + handshake.digest(theirs, COOKIE)))


def _first_call(conn: socket.socket) -> None:
    """Skip ticks until the probe's first real message arrives."""
    while True:
        (length,) = struct.unpack(">I", _recv_exact(conn, 4))
        if length:
            _recv_exact(conn, length)
            return


def _deep_list(depth: int) -> bytes:
    return b"\x83" + b"l\x00\x00\x00\x01" * depth + b"j" * (depth + 1)


def _compressed(claimed: int, body: bytes) -> bytes:
    import zlib

    return b"\x83P" + struct.pack(">I", claimed) + zlib.compress(body, 9)


def _compressed_term(term: bytes) -> bytes:
    return _compressed(len(term), term)


def _compressed_zeros(head: bytes, zeros: int) -> bytes:
    """_compressed_term(head + bytes(zeros)), made in a tenth of a second
    instead of seconds (zlib at level 9 over 512 MiB took 2.6 s, paid at
    every collection): after a full flush deflate starts afresh, so every
    MiB of zeros compresses to the same block, made once and repeated."""
    import zlib

    chunk = 1 << 20
    deflate = zlib.compressobj(9, zlib.DEFLATED, -15)  # raw: we wrap it
    parts = [deflate.compress(head), deflate.flush(zlib.Z_FULL_FLUSH)]
    whole, rest = divmod(zeros, chunk)
    if whole:
        parts.append((deflate.compress(bytes(chunk))
                      + deflate.flush(zlib.Z_FULL_FLUSH)) * whole)
    parts.append(deflate.compress(bytes(rest)) + deflate.flush())
    # Adler-32 over zeros (RFC 1950): the sum A stays, B grows by A a byte.
    check = zlib.adler32(head)
    a, b = check & 0xFFFF, check >> 16
    check = ((b + zeros * a) % 65521) << 16 | a
    # RFC 1950: header (deflate, 32K window, level 9), data, Adler-32.
    return (b"\x83P" + struct.pack(">I", len(head) + zeros) + b"\x78\xda"
            + b"".join(parts) + struct.pack(">I", check))


def _list_of(count: int, element: bytes) -> bytes:
    return b"l" + struct.pack(">I", count) + element * count + b"j"


def _nested_compressed(levels: int, padding: int) -> bytes:
    """{{{..., <<0:Padding>>}, <<0:Padding>>}, <<0:Padding>>}, each level
    a compressed term: ~10 KB a level on the wire, ``padding`` bytes a
    level inflated (each level under the limit on its own)."""
    term = b"a\x01"
    for _ in range(levels):
        head = b"h\x02" + term + b"m" + struct.pack(">I", padding)
        term = _compressed_zeros(head, padding)[1:]
    return b"\x83" + term


# The control message of a SEND to the probe, {2, '', Pid}: the message
# after it is decoded whoever it is for.
_REPLY_TO = b"\x83h\x03a\x02d\x00\x00" + b"X\x77\x0efake@127.0.0.1" \
    + b"\x00" * 12


# What the fake node does once the probe is connected: bytes to send.
AFTER_HANDSHAKE = {
    "frame_of_4GB": struct.pack(">I", 0xFFFFFFFF) + b"p\x83",
    "list_length_beyond_data": b"p\x83l\xff\xff\xff\xf0a\x01",
    "binary_length_beyond_data": b"p\x83m\x7f\xff\xff\xffabc",
    "nested_300000_deep": b"p" + _deep_list(300_000),
    "atom_cache_never_set_up": b"\x83D\x01\x00\x05" + b"\x00" * 8,
    "unknown_tag": b"p\x83\xfe\x00\x00",
    # The limits of issue 10: a 500 MiB frame; 0.5 MB that inflates to
    # 512 MiB; 8M small integers in one 16 MB frame; a compressed term
    # within the size limit made of tiny nested tuples (2M of them).
    "frame_of_500MiB": struct.pack(">I", 500 * 2**20) + b"p\x83" + b"\x00"
    * 65536,
    "compressed_512MiB": b"p" + _REPLY_TO + _compressed_zeros(
        b"", 512 * 2**20),
    "list_of_8M_integers": b"p" + _REPLY_TO + b"\x83" + _list_of(
        8_000_000, b"a\x01"),
    "compressed_nested_tuples": b"p" + _REPLY_TO + _compressed_term(
        _list_of(1000, _list_of(2666, b"h\x01h\x01a\x01"))),
    # Issue 19: 40 levels of compressed terms, each 12 MiB inflated, under
    # the limit alone (they reached 1.2 GB when each level had its own).
    "compressed_40_levels": b"p" + _REPLY_TO + _nested_compressed(
        40, 12 * 2**20),
}
BEFORE_HANDSHAKE = {
    "garbage": b"HTTP/1.1 400 Bad Request\r\n\r\n",
    "silence": None,
    "closes_mid_frame": b"\x00\x40sok-and-then-nothing",
}


def _frame(payload: bytes, kind: str) -> bytes:
    if kind in ("frame_of_4GB", "frame_of_500MiB"):
        return payload
    return struct.pack(">I", len(payload)) + payload


class FakePeer:
    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.server = socket.socket()
        self.server.bind(("127.0.0.1", 0))
        self.server.listen()
        self.port = self.server.getsockname()[1]
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        try:
            conn, _ = self.server.accept()
        except OSError:
            return
        with conn:
            try:
                if self.kind in BEFORE_HANDSHAKE:
                    payload = BEFORE_HANDSHAKE[self.kind]
                    if payload is None:
                        time.sleep(TIMEOUT * 3)
                    else:
                        conn.sendall(payload)
                        if self.kind == "garbage":
                            time.sleep(TIMEOUT * 3)
                    return
                _pass_handshake(conn)
                _first_call(conn)
                payload = AFTER_HANDSHAKE[self.kind]
                conn.sendall(_frame(payload, self.kind))
                time.sleep(TIMEOUT * 3)             # and then say nothing
            except (OSError, ConnectionError):
                pass

    def close(self) -> None:
        self.server.close()


def _probe(port: int) -> tuple[int, str, str, float, int]:
    env = dict(os.environ, BEAM_PROBE_COOKIE=COOKIE.decode())
    return run_measured(
        [sys.executable, "-m", "beam_probe", "memory", "fake@127.0.0.1",
         "--dist-port", str(port), "--timeout", str(TIMEOUT),
         "--connect-timeout", str(TIMEOUT)], env)


@pytest.mark.parametrize("kind", list(BEFORE_HANDSHAKE) + list(
    AFTER_HANDSHAKE))
def test_hostile_peer_gets_one_line(kind):
    peer = FakePeer(kind)
    try:
        code, out, err, elapsed, peak = _probe(peer.port)
    finally:
        peer.close()
    assert code not in (0, 1), (code, err)      # 1 would be a bug of ours
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("beam-probe: "), err
    assert "Traceback" not in err and out == ""
    assert elapsed < TIMEOUT + 4
    assert peak < 100 * 2**20, f"peak RSS {peak / 2**20:.0f} MB"
    print(f"{kind}: peak RSS {peak / 2**20:.0f} MB")
    assert COOKIE.decode() not in err


# Property-based: whatever bytes arrive, the handshake parser and the
# decoder raise only their own errors (which the CLI turns into one line).

from hypothesis import given, settings, strategies as st  # noqa: E402

from beam_probe.erldist import etf  # noqa: E402


@settings(max_examples=400, deadline=None)
@given(st.lists(st.binary(max_size=64), max_size=6))
def test_handshake_parser_fuzz(chunks):
    hs = handshake.ClientHandshake("probe@127.0.0.1", COOKIE, creation=1,
                                   challenge=7)
    hs.start()
    try:
        for chunk in chunks:
            hs.receive(chunk)
            if hs.state == handshake.State.CONNECTED:
                break
    except handshake.HandshakeError:
        assert hs.state == handshake.State.FAILED


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=200))
def test_decoder_fuzz(data):
    try:
        etf.decode(b"\x83" + data)
    except etf.DecodeError:
        pass
