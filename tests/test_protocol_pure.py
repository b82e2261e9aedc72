"""The handshake, framing and EPMD parsing, driven with byte strings only."""

from __future__ import annotations

import struct

import pytest

from beam_probe.erldist import epmd, frames
from beam_probe.erldist.handshake import (OUR_FLAGS, REQUIRED_PEER_FLAGS,
                                       ClientHandshake, ClosedAfterReply,
                                       CookieRejected, LostRace,
                                       HandshakeError, NameBusy, NotAllowed,
                                       State, TlsRequired, WrongNode, digest,
                                       frame16, frame32, same_node)
from beam_probe.erldist.terms import Atom, Pid
from beam_probe.errors import ProtocolError

COOKIE = b"secret"
PEER_FLAGS = OUR_FLAGS | 0x1


def challenge_msg(challenge=4242, name=b"app@host", flags=PEER_FLAGS):
    return frame16(b"N" + struct.pack(">QIIH", flags, challenge, 77,
                                      len(name)) + name)


def started(our_challenge=99):
    hs = ClientHandshake("beam_probe_1@me", COOKIE, creation=5,
                         challenge=our_challenge)
    first = hs.start()
    return hs, first


def test_send_name_is_version_6_form():
    _hs, first = started()
    (length,) = struct.unpack(">H", first[:2])
    assert length == len(first) - 2
    assert first[2:3] == b"N"
    flags, creation, nlen = struct.unpack(">QIH", first[3:17])
    assert flags == OUR_FLAGS and creation == 5
    assert first[17:] == b"beam_probe_1@me" and nlen == 15
    assert not flags & 0x1, "PUBLISHED must be off to stay hidden"
    for required in (0x4, 0x10, 0x100, 0x80, 0x200, 0x400, 0x800, 0x10000,
                     0x20000, 0x40000, 0x1000000, 0x2000000, 1 << 34):
        assert flags & required


def test_full_handshake_one_byte_at_a_time():
    hs, _ = started(our_challenge=99)
    stream = frame16(b"sok") + challenge_msg(4242) + frame16(
        b"a" + digest(99, COOKIE)) + b"\x00\x00\x00\x00"
    replies = b"".join(hs.receive(stream[i:i + 1])
                       for i in range(len(stream) - 4))
    assert replies == frame16(b"r" + struct.pack(">I", 99)
                              + digest(4242, COOKIE))
    assert hs.state == State.CONNECTED
    assert hs.peer_name == "app@host" and hs.peer_creation == 77
    assert hs.peer_flags == PEER_FLAGS


def test_trailing_bytes_after_ack_are_kept():
    hs, _ = started(1)
    hs.receive(frame16(b"sok") + challenge_msg())
    hs.receive(frame16(b"a" + digest(1, COOKIE)) + b"\x00\x00\x00\x00xyz")
    assert hs.trailing == b"\x00\x00\x00\x00xyz"


def test_digest_is_md5_of_cookie_and_decimal_challenge():
    import hashlib
    assert digest(4294967295, b"c") == hashlib.md5(b"c4294967295").digest()


def test_wrong_ack_digest_means_cookie_mismatch():
    hs, _ = started(1)
    hs.receive(frame16(b"sok") + challenge_msg())
    with pytest.raises(CookieRejected):
        hs.receive(frame16(b"a" + digest(2, COOKIE)))
    assert hs.state == State.FAILED


def test_close_after_our_reply_is_a_cookie_or_a_late_race():
    # Not yet a cookie verdict: connect() tries another name first.
    hs, _ = started()
    hs.receive(frame16(b"sok") + challenge_msg())
    err = hs.connection_closed()
    assert isinstance(err, ClosedAfterReply) and "cookie" in str(err)
    assert not isinstance(err, (CookieRejected, NameBusy))


@pytest.mark.parametrize("status", [b"ok", b"ok_simultaneous"])
def test_close_before_the_challenge_is_a_lost_name_race(status):
    # A node whose name sorts lower than ours shuts a pending handshake
    # down when another arrives from the same name: never the cookie.
    hs, _ = started()
    hs.receive(frame16(b"s" + status))
    err = hs.connection_closed()
    assert isinstance(err, LostRace) and isinstance(err, NameBusy)
    assert "cookie" not in str(err)


def test_close_before_status_means_our_name_is_busy():
    # dist_util closes silently on 'already_pending': not the cookie.
    hs, _ = started()
    err = hs.connection_closed()
    assert isinstance(err, NameBusy) and not isinstance(err, CookieRejected)
    assert "status" in str(err)


@pytest.mark.parametrize("status,error", [
    (b"alive", NameBusy), (b"nok", NameBusy), (b"not_allowed", NotAllowed),
    (b"weird", HandshakeError)])
def test_statuses(status, error):
    hs, _ = started()
    with pytest.raises(error):
        hs.receive(frame16(b"s" + status))


def test_alive_is_answered_so_the_other_probe_keeps_its_connection():
    hs, _ = started()
    with pytest.raises(NameBusy) as info:
        hs.receive(frame16(b"salive"))
    assert info.value.answer == frame16(b"sfalse")
    with pytest.raises(NameBusy) as info:
        started()[0].receive(frame16(b"snok"))
    assert info.value.answer == b""


def test_a_different_node_answering_is_refused_before_our_reply():
    hs = ClientHandshake("beam_probe_1@me", COOKIE, creation=5, challenge=9,
                         expected_peer="app@host")
    hs.start()
    with pytest.raises(WrongNode, match="other@host, not app@host"):
        hs.receive(frame16(b"sok") + challenge_msg(name=b"other@host"))
    assert hs.state == State.FAILED


@pytest.mark.parametrize("asked,answered,same", [
    ("app@db1", "app@db1", True),
    ("app@db1", "app@db1.example.com", True),
    ("app@db1.example.com", "app@db1", True),
    ("app@DB1.Example.com", "app@db1.example.com", True),
    ("app@db1", "app@db2", False),
    ("app@db1", "web@db1", False),
    ("app@db1", "app@db10.example.com", False),
    ("app@db1.example.com", "app@db1.other.com", False),
    ("app@127.0.0.1", "app@vm", False),
    ("app@127", "app@127.0.0.1", False)])
def test_same_node_accepts_short_and_long_host_forms(asked, answered, same):
    assert same_node(asked, answered) is same


def test_old_version_5_challenge_refused():
    hs, _ = started()
    with pytest.raises(HandshakeError, match="OTP 23"):
        hs.receive(frame16(b"sok") + frame16(b"n" + b"\x00" * 12))


def test_peer_without_required_flags_refused():
    hs, _ = started()
    with pytest.raises(HandshakeError, match="capabilities"):
        hs.receive(frame16(b"sok") + challenge_msg(
            flags=PEER_FLAGS & ~REQUIRED_PEER_FLAGS))


@pytest.mark.parametrize("junk", [b"HTTP/1.1 400 Bad Request\r\n",
                                  b"\x00\x00", b"\xff\xff" + b"x" * 10])
def test_garbage_instead_of_a_handshake(junk):
    hs, _ = started()
    with pytest.raises(HandshakeError):
        hs.receive(junk)


def test_tls_framing_uses_4_byte_lengths_throughout():
    # inet_tls_dist runs the handshake in {packet, 4} mode.
    hs = ClientHandshake("beam_probe_1@me", COOKIE, creation=5, challenge=99,
                         length_size=4)
    first = hs.start()
    (length,) = struct.unpack(">I", first[:4])
    assert length == len(first) - 4 and first[4:5] == b"N"
    name = b"app@host"
    stream = (frame32(b"sok")
              + frame32(b"N" + struct.pack(">QIIH", PEER_FLAGS, 4242, 77,
                                           len(name)) + name)
              + frame32(b"a" + digest(99, COOKIE)))
    replies = b"".join(hs.receive(stream[i:i + 1])
                       for i in range(len(stream)))
    assert replies == frame32(b"r" + struct.pack(">I", 99)
                              + digest(4242, COOKIE))
    assert hs.state == State.CONNECTED
    assert hs.alive_reply() == frame32(b"sfalse")


@pytest.mark.parametrize("record", [
    b"\x15\x03\x03\x00\x02\x02\x0a",        # alert: unexpected_message
    b"\x16\x03\x01\x00\x05hello"])           # a handshake record
def test_a_tls_answer_is_named_as_such(record):
    hs, _ = started()
    with pytest.raises(TlsRequired, match="-proto_dist inet_tls"):
        hs.receive(record)
    assert hs.state == State.FAILED


def test_frame_reader_splits_ticks_and_frames():
    reader = frames.FrameReader()
    msg = frames.build((frames.SEND, Atom(""), Pid(Atom("a@b"), 1, 0, 1)),
                       (1, 2))
    stream = frames.TICK + msg + frames.TICK
    out = []
    for i in range(len(stream)):
        out += reader.feed(stream[i:i + 1])
    assert out[0] == b"" and out[2] == b""
    control, message = frames.parse(out[1])
    assert control[0] == frames.SEND and message == (1, 2)


def test_frame_reader_cuts_many_frames_from_one_read():
    reader = frames.FrameReader()
    msg = frames.build((frames.SEND, Atom(""), Pid(Atom("a@b"), 1, 0, 1)),
                       list(range(300)))
    out = reader.feed((msg + frames.TICK) * 50 + msg[:10])
    assert len(out) == 100 and reader.pending == 6
    assert out[-1] == b"" and frames.parse(out[0])[1] == list(range(300))
    assert reader.feed(msg[10:]) == [msg[4:]]


def test_frame_reader_refuses_a_4_gib_frame_at_once():
    reader = frames.FrameReader()
    with pytest.raises(frames.FrameError, match="limit"):
        reader.feed(b"\xff\xff\xff\xff")


def test_frame_with_atom_cache_header_refused():
    with pytest.raises(frames.FrameError, match="atom cache"):
        frames.parse(b"\x44\x00")


def test_epmd_port_reply():
    reply = bytes([119, 0]) + struct.pack(">HBBHHH", 40000, 77, 0, 6, 6, 3) \
        + b"app" + b"\x00\x00"
    assert epmd.parse_port_reply(reply) == 40000
    assert epmd.parse_port_reply(bytes([119, 1])) is None
    with pytest.raises(ProtocolError):
        epmd.parse_port_reply(b"garbage")
    with pytest.raises(ProtocolError, match="versions"):
        epmd.parse_port_reply(bytes([119, 0]) + struct.pack(
            ">HBBHHH", 1, 77, 0, 5, 5, 0))


def test_epmd_request_and_names():
    assert epmd.port_please_request("app") == b"\x00\x04zapp"
    names = struct.pack(">I", 4369) + b"name a at port 1\nname b at port 2\n"
    assert epmd.parse_names_reply(names) == ["a", "b"]
