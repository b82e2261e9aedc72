"""The transport: one TCP connection to a node, after EPMD and the handshake.

A plain blocking socket with one reader thread, not asyncio: asyncio costs
~33 ms to import, a quarter of the budget of a one-query run, and the work
is a handful of request/reply exchanges. The protocol itself is sans-IO
(handshake.py before, session.py after the handshake); dial.py connects,
and this module does the I/O of a live connection: deadlines, the tick, and
the reader thread that feeds the session and hands replies to the calls
waiting for them (several can be in flight, from any thread).
"""

from __future__ import annotations

import contextlib
import signal
import socket
import threading
import time
from typing import TYPE_CHECKING, Any, Iterator

from beam_probe.erldist.errors import ConnectionLost, ProbeError, ProtocolError, TimedOut
from beam_probe.erldist import etf
from beam_probe.erldist import frames
from beam_probe.erldist.session import Session
from beam_probe.erldist.terms import Pid, Reference

if TYPE_CHECKING:
    from beam_probe.erldist.claims import Claim

# The target drops a peer it has heard nothing from for net_ticktime
# (60 s by default, checked in four ticks of 15 s). We echo every tick the
# node sends, which tracks whatever net_ticktime it has, and also send one of
# our own after this long without sending.
TICK_INTERVAL = 15.0

# What one read asks the socket for. Each read allocates this much for
# the reader thread, and the allocator keeps what a connection has once
# touched: at 1 MiB, a kept connection's process grew ~1.1 MiB over its
# first few hundred calls (the exporter, 20 targets: +25 MiB in ten
# minutes); at 64 KiB, 28 KiB. A 20 MB reply reads in the same 31 ms
# either way (measured).
_RECV_SIZE = 1 << 16

# Signals whose Python handler may raise (Ctrl-C's KeyboardInterrupt, the
# CLI's Terminated): held back while a frame is written from the main
# thread, where Python runs them.
_DEFERRED_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@contextlib.contextmanager
def _signals_deferred() -> Iterator[None]:
    """Run the block whole: a signal that arrives meanwhile has its handler
    run after it. sendall() runs Python's signal handlers between its
    writes, so a Ctrl-C raised there left half a frame on the wire; the
    node read the next frame's bytes as the rest of it and dropped the
    connection (trace-gc's Ctrl-C once ended "closed the connection in
    the middle of a call", exit 7). Handlers can only be changed, and only
    run, on the main thread: elsewhere nothing needs holding back."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[tuple[int, Any]] = []
    saved: dict[signal.Signals, Any] = {}
    for signum in _DEFERRED_SIGNALS:
        handler = signal.getsignal(signum)
        if callable(handler):
            saved[signum] = handler
            signal.signal(signum, lambda n, frame: caught.append((n, frame)))
    try:
        yield
    finally:
        for signum, handler in saved.items():
            signal.signal(signum, handler)
        for number, frame in caught[:1]:
            saved[signal.Signals(number)](number, frame)


class _Pending:
    __slots__ = ("event", "value", "error", "mailbox")

    def __init__(self, mailbox: "Mailbox | None" = None) -> None:
        self.event = threading.Event()
        self.value: Any = None
        self.error: ProbeError | None = None
        # A streamed call's reply goes to its mailbox, behind its chunks.
        self.mailbox = mailbox


# What a mailbox hands out: a message the node sent to our pid under the
# mailbox's tag, or the reply of the call that feeds it.
MESSAGE = "message"
REPLY = "reply"


class Mailbox:
    """Messages ``{Tag, ...}`` that code on the node sends straight to our
    pid, for one tag: the chunks of a streamed reply. Bounded: the node
    sends the next chunk only when we ask (flow control), so a peer that
    queues more than ``limit`` is broken or hostile, and fails the
    connection rather than fill our memory."""

    def __init__(self, tag: Reference, limit: int) -> None:
        self.tag = tag
        self.limit = limit
        self._items: list[tuple[str, Any]] = []
        self._error: ProbeError | None = None
        self._ready = threading.Condition()

    def put(self, kind: str, value: Any) -> bool:
        """Queue one item; False when the mailbox is full."""
        with self._ready:
            if kind == MESSAGE and sum(
                    1 for k, _ in self._items if k == MESSAGE) >= self.limit:
                return False
            self._items.append((kind, value))
            self._ready.notify()
            return True

    def fail(self, error: ProbeError) -> None:
        with self._ready:
            if self._error is None:
                self._error = error
            self._ready.notify()

    def get(self, timeout: float, what: str) -> tuple[str, Any]:
        """The next (MESSAGE, payload) or (REPLY, value); raises the
        connection's failure, or TimedOut after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        with self._ready:
            while not self._items:
                if self._error is not None:
                    raise self._error
                left = deadline - time.monotonic()
                if left <= 0 or not self._ready.wait(left):
                    if not self._items:
                        raise TimedOut(f"no answer to {what} within "
                                       f"{timeout:g} s")
            return self._items.pop(0)


class ReplyLimits:
    """How large a reply this connection accepts: bytes of one frame (also
    the most a compressed term may inflate to), and items one decode may
    make. The defaults fit every reply beam-probe asks for; a library user
    asking for bulk data raises them."""

    __slots__ = ("max_bytes", "max_items")

    def __init__(self, max_bytes: int = frames.MAX_FRAME,
                 max_items: int = etf.MAX_ITEMS) -> None:
        self.max_bytes = max_bytes
        self.max_items = max_items


class Connection:
    """A live, handshaken connection. Use :func:`dial.connect` to make one.

    The protocol is the session's (session.py, sans-IO); this class does the
    I/O around it: the socket, one reader thread feeding the session,
    waiting for replies (several calls may be in flight, from any thread),
    the tick we owe the node when we have been quiet, and the deadlines."""

    def __init__(self, sock: Any, our_node: str, peer_node: str,
                 creation: int, peer_flags: int, trailing: bytes = b"",
                 limits: "ReplyLimits | None" = None) -> None:
        # ``sock`` is a socket, or a tls.TlsChannel standing in for one.
        self.sock = sock
        self.our_node = our_node
        self.peer_node = peer_node
        self.peer_flags = peer_flags
        self.limits = limits or ReplyLimits()
        self.session = Session(our_node, peer_node, creation,
                               self.limits.max_bytes, self.limits.max_items)
        self.pid = self.session.pid
        self.output = self.session.output
        self._pending: dict[Reference, _Pending] = {}
        self._mailboxes: dict[Reference, Mailbox] = {}
        self._lock = threading.Lock()
        self._send_lock = threading.Lock()
        self._last_send = time.monotonic()
        self._closed = False
        self._failure: ProbeError | None = None
        self._trailing = trailing
        # Our name's claim on this machine (claims.py), freed with the
        # connection: while we hold the name, no probe here dials with it.
        self._claim: "Claim | None" = None
        self._thread = threading.Thread(target=self._read_loop,
                                        name="beam-probe-reader", daemon=True)
        self._thread.start()

    # -- calls ---------------------------------------------------------------

    def call(self, module: str, function: str, args: list[Any],
             timeout: float) -> Any:
        """rpc:call(Module, Function, Args) on the node, via its rex server.

        Raises RemoteError for {badrpc, Reason}, TimedOut, ConnectionLost.
        """
        return self.wait(self.call_async(module, function, args), timeout,
                         f"{module}:{function}/{len(args)}")

    def call_async(self, module: str, function: str, args: list[Any],
                   mailbox: Mailbox | None = None) -> Reference:
        """Send a call and return its reference; collect it with wait(), or
        from ``mailbox`` (as a REPLY item) when one is given."""
        ref = self.new_ref()
        with self._lock:
            if self._failure is not None:
                raise self._failure
            self._pending[ref] = _Pending(mailbox)
        _ref, data = self.session.call(module, function, args, ref)
        self._send(data)
        return ref

    def wait(self, ref: Reference, timeout: float, what: str = "call") -> Any:
        with self._lock:
            pending = self._pending.get(ref)
        if pending is None:
            raise KeyError(ref)
        if not pending.event.wait(timeout):
            with self._lock:
                self._pending.pop(ref, None)
            raise TimedOut(f"{self.peer_node} did not answer {what} within "
                           f"{timeout:g} s")
        with self._lock:
            self._pending.pop(ref, None)
        if pending.error is not None:
            raise pending.error
        return self.result(pending.value, what)

    def result(self, value: Any, what: str) -> Any:
        """A call's value, or RemoteError for ``{badrpc, Reason}``."""
        return self.session.result(value, what)

    def mailbox(self, tag: Reference, limit: int = 4) -> Mailbox:
        """Collect messages ``{tag, ...}`` sent to our pid; close it with
        close_mailbox()."""
        box = Mailbox(tag, limit)
        with self._lock:
            if self._failure is not None:
                raise self._failure
            self._mailboxes[tag] = box
        return box

    def close_mailbox(self, box: Mailbox) -> None:
        with self._lock:
            self._mailboxes.pop(box.tag, None)

    def send(self, to: Pid, message: Any) -> None:
        """Send ``message`` to the process ``to`` on the node."""
        self._send(self.session.send(to, message))

    def new_ref(self) -> Reference:
        """A reference of ours, unique on this connection."""
        with self._lock:
            return self.session.new_ref()

    @property
    def alive(self) -> bool:
        """Neither closed nor failed (the reader thread has seen nothing
        end it)."""
        return not self._closed and self._failure is None

    def hold(self, claim: "Claim | None") -> None:
        """Keep ``claim`` until the connection closes."""
        self._claim = claim

    def close(self) -> None:
        """Close the socket; the node sees a clean disconnect."""
        if self._closed:
            return
        self._closed = True
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
        self._release()
        self._fail_all(ConnectionLost("the connection was closed"))

    def _release(self) -> None:
        # close() and the reader thread's end may both get here.
        with self._lock:
            claim, self._claim = self._claim, None
        if claim is not None:
            claim.release()

    def __enter__(self) -> "Connection":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals -------------------------------------------------------------

    def _send(self, data: bytes) -> None:
        if not data:
            return
        with self._send_lock, _signals_deferred():
            if self._failure is not None:
                raise self._failure
            try:
                self.sock.sendall(data)
            except OSError as exc:
                err = ConnectionLost(f"connection to {self.peer_node} lost "
                                     f"while sending: {exc}")
                self._fail_all(err)
                raise err from None
            self._last_send = time.monotonic()

    def _fail_all(self, error: ProbeError) -> None:
        with self._lock:
            if self._failure is None:
                self._failure = error
            waiting = list(self._pending.values())
            boxes = list(self._mailboxes.values())
        for pending in waiting:
            if not pending.event.is_set():
                pending.error = error
                pending.event.set()
        for box in boxes:
            box.fail(error)

    def _read_loop(self) -> None:
        try:
            if self._trailing:
                self._feed(self._trailing)
            self.sock.settimeout(TICK_INTERVAL / 3)
            while not self._closed:
                try:
                    data = self.sock.recv(_RECV_SIZE)
                except socket.timeout:
                    if time.monotonic() - self._last_send >= TICK_INTERVAL:
                        self._send(self.session.tick())
                    continue
                if not data:
                    raise ConnectionLost(
                        f"{self.peer_node} closed the connection"
                        + (" in the middle of a call" if self._pending
                           else ""))
                self._feed(data)
                if time.monotonic() - self._last_send >= TICK_INTERVAL:
                    self._send(self.session.tick())
        except ProbeError as exc:
            self._fail_all(exc)
        except (frames.FrameError, etf.DecodeError) as exc:
            self._fail_all(ProtocolError(
                f"{self.peer_node} sent malformed data: {exc}"))
        except OSError as exc:
            if not self._closed:
                self._fail_all(ConnectionLost(
                    f"connection to {self.peer_node} lost: {exc}"))
        finally:
            if not self._closed:
                self._closed = True
                self.sock.close()
                self._release()

    def _feed(self, data: bytes) -> None:
        events, reply = self.session.receive(data)
        self._send(reply)
        for tag, items in events:
            self._deliver(tag, items)

    def _deliver(self, tag: Reference, items: tuple[Any, ...]) -> None:
        """A reply to a call, or a message for a mailbox; anything else
        (a reply that came after its call timed out) is dropped."""
        with self._lock:
            pending = self._pending.get(tag) if len(items) == 1 else None
            if pending is not None and pending.mailbox is not None:
                del self._pending[tag]
            box = self._mailboxes.get(tag)
        if pending is not None and pending.mailbox is not None:
            pending.mailbox.put(REPLY, items[0])
        elif pending is not None:
            pending.value = items[0]
            pending.event.set()
        elif box is not None and not box.put(MESSAGE, items):
            raise ProtocolError(f"{self.peer_node} sent more than "
                                f"{box.limit} unanswered messages of a "
                                "streamed reply")


__all__ = ["Connection", "Mailbox", "ReplyLimits"]
