"""The hidden node against real OTP 25 and OTP 28.5 nodes."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from beam_probe.erldist import epmd
from beam_probe.erldist.dial import NAME_POOL, connect
from beam_probe.erldist.terms import Atom
from beam_probe.errors import (ConnectFailed, ConnectionLost, CookieError,
                               NodeNotFound, RemoteError, TimedOut)
from beam_probe.node.remote import attach


def test_handshake_and_call(target, remote, otp):
    assert remote.call("erlang", "node") == target.node
    release = remote.call("erlang", "system_info", [Atom("otp_release")])
    assert release == otp
    memory = dict(remote.call("erlang", "memory"))
    assert memory["total"] > 0


def test_we_are_hidden(target, remote):
    assert remote.call("erlang", "nodes") == []
    hidden = remote.call("erlang", "nodes", [Atom("hidden")])
    assert remote.conn.our_node in hidden
    assert remote.conn.our_node.split("@")[0] in NAME_POOL


def test_several_calls_in_flight(remote):
    started = time.monotonic()
    results = remote.calls([("timer", "sleep", [300]) for _ in range(6)]
                           + [("erlang", "node", [])])
    elapsed = time.monotonic() - started
    assert results[:6] == [Atom("ok")] * 6
    assert elapsed < 1.5, "the six sleeps should overlap, not queue"


def test_calls_from_threads(remote):
    out = {}

    def worker(i):
        out[i] = remote.call("erlang", "abs", [-i])
    threads = [threading.Thread(target=worker, args=(i,)) for i in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert out == {i: i for i in range(20)}


def test_remote_exception_is_one_error(remote):
    with pytest.raises(RemoteError, match="undef"):
        remote.call("no_such_module", "f")


def test_printing_code_does_not_hang(remote):
    assert remote.call("io", "format", ["hello ~p~n", [1]]) == Atom("ok")
    assert remote.call("io", "put_chars", ["plain text\n"]) == Atom("ok")
    assert "plain text\n" in remote.conn.output
    # Input has no terminal behind it: an error, not a hang.
    reply = remote.call("io", "get_line", ["prompt> "], timeout=5)
    assert isinstance(reply, tuple) and reply[0] == Atom("error")


def test_per_call_timeout(remote):
    with pytest.raises(TimedOut):
        remote.call("timer", "sleep", [2000], timeout=0.3)
    assert remote.call("erlang", "node")  # the connection is still good


@pytest.mark.slow
def test_idle_connection_outlives_net_ticktime(nodes, otp):
    # net_ticktime 2 s: the node ticks every half second and drops a
    # silent peer after ~2 s. We stay idle for three ticktimes.
    node = nodes.start(otp, args=("-kernel", "net_ticktime", "2"))
    with attach(node.node, node.cookie.encode(), timeout=10) as remote:
        time.sleep(6)
        assert remote.call("erlang", "node") == node.node


def test_wrong_cookie(target):
    with pytest.raises(CookieError, match="cookie"):
        connect(target.node, b"not-the-cookie", timeout=10)


def test_unknown_node_lists_what_epmd_has(target):
    host = target.node.split("@")[1]
    with pytest.raises(NodeNotFound) as info:
        connect(f"no_such_node_xyz@{host}", b"c", timeout=5)
    assert target.name in str(info.value)


def test_dist_port_skips_epmd(nodes, otp, monkeypatch):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    node = nodes.start(otp, dist_port=port)

    def no_epmd(*args):
        raise AssertionError("EPMD was asked")
    monkeypatch.setattr(epmd, "lookup", no_epmd)
    with attach(node.node, node.cookie.encode(), timeout=10,
                dist_port=port) as remote:
        assert remote.call("erlang", "node") == node.node


def test_a_different_node_on_the_port_is_refused(target, nodes, otp):
    """--dist-port pointing at the wrong node: its name would otherwise go
    into output, history and Prometheus labels."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    other = nodes.start(otp, dist_port=port)
    with pytest.raises(ConnectFailed, match=f"{other.node}, not "
                                            f"{target.node}"):
        connect(target.node, target.cookie.encode(), timeout=5,
                dist_port=port)


def test_node_killed_mid_call(nodes, otp):
    node = nodes.start(otp)
    with attach(node.node, node.cookie.encode(), timeout=30) as remote:
        timer = threading.Timer(0.5, node.proc.kill)
        timer.start()
        started = time.monotonic()
        with pytest.raises(ConnectionLost):
            remote.call("timer", "sleep", [20000])
        assert time.monotonic() - started < 10
        timer.join()


def test_connection_refused():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(ConnectFailed, match="refused"):
        connect("x@127.0.0.1", b"c", timeout=5, dist_port=port)


def test_silent_peer_times_out():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]
    try:
        started = time.monotonic()
        with pytest.raises(TimedOut):
            connect("x@127.0.0.1", b"c", timeout=1, dist_port=port)
        assert time.monotonic() - started < 3
    finally:
        server.close()


def test_names_come_from_a_small_pool(target, otp):
    """Many runs, several at once: the target gains at most a few atoms."""
    cookie = target.cookie.encode()
    with attach(target.node, cookie) as watcher:
        before = watcher.call("erlang", "system_info", [Atom("atom_count")])
        held = [attach(target.node, cookie) for _ in range(3)]
        names = {r.conn.our_node for r in held}
        assert len(names) == 3, "concurrent probes need distinct names"
        for r in held:
            r.close()
        for _ in range(15):
            with attach(target.node, cookie) as r:
                r.call("erlang", "node")
        after = watcher.call("erlang", "system_info", [Atom("atom_count")])
    assert after - before <= len(NAME_POOL)


def test_ctrl_c_in_the_middle_of_a_send_leaves_the_stream_whole(target):
    """A Ctrl-C (SIGINT) that lands while a frame is being written must
    not cut the frame: the node would read the next frame's bytes as the
    rest of this one and close the connection (trace-gc's Ctrl-C once
    ended "closed the connection in the middle of a call", exit 7). The
    interrupt is raised once the frame is whole."""
    import os
    import signal

    class Interrupted(Exception):
        pass

    armed = threading.Event()

    def handler(signum, frame):
        # Raised only inside the call below; a late timer is ignored.
        if armed.is_set():
            armed.clear()
            raise Interrupted()

    big = b"x" * (4 << 20)  # a frame that takes many writes to send
    previous = signal.signal(signal.SIGINT, handler)
    try:
        with attach(target.node, target.cookie.encode(), timeout=20) as r:
            interrupted = 0
            for i in range(30):
                def fire(delay=0.0005 * (i % 10)):
                    armed.wait(5)
                    time.sleep(delay)
                    os.kill(os.getpid(), signal.SIGINT)
                timer = threading.Thread(target=fire)
                timer.start()
                try:
                    armed.set()
                    r.call("erlang", "byte_size", [big])
                    time.sleep(0.01)
                except Interrupted:
                    interrupted += 1
                finally:
                    armed.clear()
                    timer.join()
            assert interrupted > 0, "no interrupt landed: nothing was tried"
            # The stream is whole: the node still answers here.
            assert r.call("erlang", "byte_size", [big]) == len(big)
    finally:
        signal.signal(signal.SIGINT, previous)
