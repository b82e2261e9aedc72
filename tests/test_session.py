"""The protocol after the handshake (erldist/session.py), driven with byte
strings only: what we send, what each kind of frame that arrives gives."""

from __future__ import annotations

import pytest

from beam_probe.erldist import etf, frames
from beam_probe.erldist.errors import RemoteError
from beam_probe.erldist.session import Session, Tagged
from beam_probe.erldist.terms import Atom, Pid, Reference

NODE = Atom("app@db1")


def session():
    return Session("beam_probe_3@me", "app@db1", creation=7)


def from_node(control, message=None):
    """A frame as the node would send it."""
    return frames.build(control, message, with_message=message is not None)


def sent(data: bytes):
    """The frames in bytes we send, parsed."""
    return [frames.parse(f) for f in frames.FrameReader().feed(data)]


def test_a_call_is_a_gen_call_to_rex_with_us_as_group_leader():
    s = session()
    ref, data = s.call("erlang", "memory", [])
    [(control, message)] = sent(data)
    assert control == (frames.REG_SEND, s.pid, Atom(""), Atom("rex"))
    assert message == (Atom("$gen_call"), (s.pid, ref),
                       (Atom("call"), Atom("erlang"), Atom("memory"), [],
                        s.pid))
    assert s.pid == Pid(Atom("beam_probe_3@me"), 1, 0, 7)


def test_references_are_ours_and_unique():
    s = session()
    refs = {s.new_ref() for _ in range(1000)}
    assert len(refs) == 1000
    assert all(r.node == "beam_probe_3@me" and r.creation == 7 for r in refs)


def test_a_reply_comes_out_tagged_whatever_the_send_operation():
    s = session()
    ref, _ = s.call("erlang", "node", [])
    for control in ((frames.SEND, Atom(""), s.pid),
                    (frames.SEND_SENDER, Pid(NODE, 40, 0, 1), s.pid),
                    (frames.ALIAS_SEND, Pid(NODE, 40, 0, 1), ref)):
        events, reply = s.receive(from_node(control, (ref, NODE)))
        assert events == [Tagged(ref, (NODE,))] and reply == b""


def test_a_streamed_chunk_keeps_its_sender():
    s = session()
    tag, sender = s.new_ref(), Pid(NODE, 77, 0, 1)
    events, _ = s.receive(from_node((frames.SEND, Atom(""), s.pid),
                                    (tag, sender, [1, 2])))
    assert events == [Tagged(tag, (sender, [1, 2]))]


def test_frames_split_anywhere_and_run_together():
    s = session()
    ref, _ = s.call("erlang", "node", [])
    stream = (frames.TICK + from_node((frames.SEND, Atom(""), s.pid),
                                      (ref, 1)) + frames.TICK) * 3
    events, replies = [], b""
    for i in range(len(stream)):
        got, reply = s.receive(stream[i:i + 1])
        events += got
        replies += reply
    assert events == [Tagged(ref, (1,))] * 3
    assert replies == frames.TICK * 6           # every tick echoed


def test_badrpc_is_a_remote_error():
    s = session()
    with pytest.raises(RemoteError, match=r"m:f/0 failed on app@db1: exception \{undef,\[\]\}"):
        s.result((Atom("badrpc"), ("EXIT", (Atom("undef"), []))), "m:f/0")
    assert s.result((Atom("ok"), 1), "m:f/0") == (Atom("ok"), 1)


def test_io_requests_are_answered_and_output_kept():
    s = session()
    printer = Pid(NODE, 90, 0, 1)
    tag = Reference(NODE, 1, (5, 6, 7))
    events, reply = s.receive(from_node(
        (frames.SEND, Atom(""), s.pid),
        (Atom("io_request"), printer, tag,
         (Atom("put_chars"), Atom("unicode"), b"hello\n"))))
    assert events == [] and s.output == ["hello\n"]
    [(control, message)] = sent(reply)
    assert control == (frames.SEND, Atom(""), printer)
    assert message == (Atom("io_reply"), tag, Atom("ok"))
    _events, reply = s.receive(from_node(
        (frames.SEND, Atom(""), s.pid),
        (Atom("io_request"), printer, tag, (Atom("get_line"), "> "))))
    assert sent(reply)[0][1] == (Atom("io_reply"), tag,
                                 (Atom("error"), Atom("enotsup")))


def test_unlink_id_is_acknowledged():
    s = session()
    other = Pid(NODE, 12, 0, 1)
    _events, reply = s.receive(from_node((frames.UNLINK_ID, 42, other,
                                          s.pid)))
    assert sent(reply) == [((frames.UNLINK_ID_ACK, 42, s.pid, other), None)]


def test_links_monitors_and_exits_are_ignored():
    s = session()
    other = Pid(NODE, 12, 0, 1)
    for control in ((frames.LINK, other, s.pid),
                    (frames.EXIT, other, s.pid, Atom("normal")),
                    (frames.MONITOR_P, other, s.pid, s.new_ref())):
        assert s.receive(from_node(control)) == ([], b"")


def test_other_messages_are_dropped():
    s = session()
    for message in (Atom("hello"), (), (1, 2), [s.new_ref(), 1]):
        assert s.receive(from_node((frames.SEND, Atom(""), s.pid),
                                   message)) == ([], b"")


def test_limits_apply_to_what_arrives():
    s = Session("p@me", "app@db1", creation=1, max_frame=1000,
                max_items=100)
    with pytest.raises(frames.FrameError, match="limit"):
        s.receive(b"\x00\x00\x10\x00")
    s = Session("p@me", "app@db1", creation=1, max_items=100)
    with pytest.raises(etf.DecodeError, match="limit"):
        s.receive(from_node((frames.SEND, Atom(""), s.pid),
                            list(range(1000))))
