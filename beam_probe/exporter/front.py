"""The exporter's front door: accepting connections and reading requests.

A thread a connection from the moment it is accepted let 64 half-sent
connections (slowloris) hold every thread: 16 of 18 real scrapes were
refused over 30 s, and 29% of 1,000 concurrent scrapes failed (issue 37).
So one thread, with a selector, accepts every connection and reads each
one's TLS handshake and request head without blocking; a connection costs
a socket and a buffer until its head is whole, and only then takes a
worker thread to be answered. Rules:

- A connection has HEAD_DEADLINE from its accept to send its whole head
  (TLS handshake included); past it, it is closed. Prometheus sends its
  request at once.
- At most MAX_PENDING connections are still sending (PER_SOURCE from one
  address); a new one past that closes the OLDEST still sending, not the
  newcomer: a real scrape sends its head within a round trip, so it is
  always among the youngest, and a slowloris can only shed itself.
- A head over MAX_HEAD bytes is answered 431 and closed.
- Whole requests wait for one of WORKERS threads; at most MAX_QUEUED
  wait. One more is answered 503 at once (with Retry-After), never
  dropped unanswered.
- With a gate (gate.py: basic auth), a whole head is first put to its
  quick check on this thread: passed, refused (answered at once), or
  slow (a password only bcrypt can tell). Slow ones wait for one of
  GATE_WORKERS threads of their own, at most GATE_QUEUED of them, 503 at
  once past that; so guesses never hold a worker nor a place in its
  queue, and a remembered password goes straight to the workers.
- One request per connection (HTTP/1.0, as before): Prometheus opens a
  connection per scrape when told so, and nothing waits on an idle one.
"""

from __future__ import annotations

import selectors
import socket
import ssl
import threading
import time
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

# From accept to a whole request head, TLS handshake included. Prometheus
# sends its request at once; a few seconds covers a slow link.
HEAD_DEADLINE = 5.0
# Connections still sending their head, in all and from one address:
# each costs a file descriptor and at most MAX_HEAD bytes.
MAX_PENDING = 1024
PER_SOURCE = 256
# A scrape's request head is ~300 bytes (with basic auth, ~350).
MAX_HEAD = 16384
# Requests answered at once: a scrape may hold its thread for its whole
# timeout (10 s by default) while the node answers.
WORKERS = 64
# Whole requests waiting for a worker; past it, 503 at once.
MAX_QUEUED = 1024
# The longest a worker waits for a client to take its answer.
WRITE_TIMEOUT = 10.0
# The kernel's queue of connections not yet accepted (Linux caps it at
# net.core.somaxconn, 4096 by default): a burst of a thousand scrapes
# must wait there, not be refused, while the loop accepts.
BACKLOG = 1024
# Accepted in one go before the loop reads the heads that came meanwhile.
ACCEPT_BATCH = 32
READ_SIZE = 4096
# Threads for the gate's slow checks, and how many may wait for one. With
# them on the WORKERS, a flood of wrong passwords held every worker (each
# waiting up to 2 s for one of two bcrypt checks) and the queue behind
# them: a remembered password waited 22.2 s behind 900 guesses (issue 37,
# round 5). bcrypt holds a core while it hashes: two cores' worth. 16
# waiting at ~70 ms a check (cost 10, measured here) is ~0.6 s of wait.
GATE_WORKERS = 2
GATE_QUEUED = 16

# A gate's verdicts on a head: on to the workers, or to its slow check.
PASS, SLOW = "pass", "slow"


@dataclass(frozen=True)
class Refusal:
    """A gate's answer in place of the request's: ``reply`` is sent as it
    is, and ``reason`` told to on_drop."""

    reply: bytes
    reason: str


class Gate(Protocol):
    """What a request must pass before a worker answers it."""

    # Sent when GATE_QUEUED slow checks already wait.
    busy: Refusal

    def quick(self, head: bytes) -> str | Refusal:
        """PASS, SLOW or a Refusal, on the loop's thread: microseconds."""
        ...

    def slow(self, head: bytes) -> str | Refusal:
        """PASS or a Refusal, on a thread of the gate's own."""
        ...


@dataclass(eq=False)
class Pending:
    """A connection, from its accept to its answer."""

    sock: Any
    address: Any
    source: str
    accepted: float
    head: bytearray = field(default_factory=bytearray)
    handshaking: bool = False
    arrived: float = 0.0    # when its head was whole

    @property
    def due(self) -> float:
        return self.accepted + HEAD_DEADLINE


def _end_of_head(data: bytearray) -> bool:
    # http.server takes a bare LF as a line end as well as CRLF.
    return b"\r\n\r\n" in data or b"\n\n" in data or b"\n\r\n" in data


def short_reply(code: int, reason: str, extra: str = "") -> bytes:
    """A whole HTTP answer whose text is ``reason``; ``extra``: header
    lines, each ending in CRLF."""
    text = f"{reason}\n".encode()
    return (f"HTTP/1.0 {code} {reason}\r\nContent-Type: text/plain; "
            f"charset=utf-8\r\nContent-Length: {len(text)}\r\n{extra}"
            f"Connection: close\r\n\r\n").encode() + text


BUSY_REPLY = short_reply(503, "Service Unavailable: every worker is busy",
                    "Retry-After: 1\r\n")
TOO_LARGE_REPLY = short_reply(431, "Request Header Fields Too Large")


class Bounded:
    """Threads with a queue of a bound: a task past it is refused at once,
    never queued without end (the workers and the gate's checkers)."""

    def __init__(self, threads: int, queued: int, name: str) -> None:
        self._executor = ThreadPoolExecutor(threads, thread_name_prefix=name)
        self._bound = threads + queued
        self._taken = 0           # handed over, not yet done
        self._lock = threading.Lock()

    def take(self, task: Callable[[Pending], None],
             pending: Pending) -> str:
        """'taken', 'busy' (past the bound) or 'closed' (shut down)."""
        with self._lock:
            if self._taken >= self._bound:
                return "busy"
            self._taken += 1

        def run() -> None:
            try:
                task(pending)
            finally:
                with self._lock:
                    self._taken -= 1
        try:
            self._executor.submit(run)
        except RuntimeError:   # shut down
            with self._lock:
                self._taken -= 1
            return "closed"
        return "taken"

    def shutdown(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)


class Front:
    """Listens on ``address`` and hands each whole request head to
    ``handle(pending, front)`` on a worker thread. ``tls``: a server
    SSLContext, or None for plain HTTP. ``gate``: what a request must
    pass first, or None. ``on_drop(reason)`` is told of each connection
    closed unanswered or answered by the front itself: head_deadline,
    shed_oldest, too_large, busy, and the gate's refusals' reasons."""

    def __init__(self, address: tuple[str, int],
                 handle: Callable[[Pending, Front], None],
                 tls: ssl.SSLContext | None = None,
                 log: Callable[[str], None] | None = None,
                 gate: Gate | None = None) -> None:
        host, port = address
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.socket = socket.socket(family, socket.SOCK_STREAM)
        try:
            self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self.socket.bind((host, port))
            self.socket.listen(BACKLOG)
        except OSError:
            self.socket.close()
            raise
        self.socket.setblocking(False)
        self.server_address = self.socket.getsockname()
        self.tls = tls
        self.log = log
        self.on_drop: Callable[[str], None] = lambda reason: None
        self._handle = handle
        self._selector = selectors.DefaultSelector()
        self._selector.register(self.socket, selectors.EVENT_READ)
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._selector.register(self._wake_r, selectors.EVENT_READ)
        # Oldest first: insertion order is accept order.
        self._pending: OrderedDict[Pending, None] = OrderedDict()
        self._by_source: dict[str, OrderedDict[Pending, None]] = {}
        self._workers = Bounded(WORKERS, MAX_QUEUED, "beam-probe-http")
        self.gate = gate
        self._checkers = Bounded(GATE_WORKERS, GATE_QUEUED,
                                 "beam-probe-gate")
        self._stop = threading.Event()
        self._stopped = threading.Event()
        self._stopped.set()
        self._accept_paused_until = 0.0

    # -- the loop ---------------------------------------------------------

    def serve_forever(self, poll_interval: float = 0.5) -> None:
        self._stopped.clear()
        try:
            while not self._stop.is_set():
                now = time.monotonic()
                wait = poll_interval
                if self._pending:
                    oldest = next(iter(self._pending))
                    wait = min(wait, max(0.0, oldest.due - now))
                if self._accept_paused_until:
                    wait = min(wait, max(0.0, self._accept_paused_until
                                         - now))
                for key, events in self._selector.select(wait):
                    if key.fileobj is self.socket:
                        self._accept()
                    elif key.fileobj is self._wake_r:
                        try:
                            self._wake_r.recv(64)
                        except OSError:
                            pass
                    else:
                        self._advance(key.data)
                self._expire(time.monotonic())
                self._resume_accepting(time.monotonic())
        finally:
            self._stopped.set()

    def shutdown(self) -> None:
        """Stop serve_forever (from another thread) and wait for it."""
        self._stop.set()
        try:
            self._wake_w.send(b"x")
        except OSError:
            pass
        self._stopped.wait()

    def server_close(self) -> None:
        self._stop.set()
        for pending in list(self._pending):
            self._close(pending)
        try:
            self._selector.close()
        except (OSError, RuntimeError):
            pass
        self.socket.close()
        self._wake_r.close()
        self._wake_w.close()
        self._workers.shutdown()
        self._checkers.shutdown()

    # -- accepting ----------------------------------------------------------

    def _accept(self) -> None:
        for _ in range(ACCEPT_BATCH):
            try:
                sock, address = self.socket.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                if exc.errno in (24, 23):   # EMFILE, ENFILE: out of files
                    self._out_of_files()
                return
            sock.setblocking(False)
            pending = Pending(sock, address, str(address[0]),
                              time.monotonic())
            if self.tls is not None:
                try:
                    pending.sock = self.tls.wrap_socket(
                        sock, server_side=True,
                        do_handshake_on_connect=False)
                except (OSError, ValueError):
                    sock.close()
                    continue
                pending.handshaking = True
            self._admit(pending)

    def _admit(self, pending: Pending) -> None:
        mine = self._by_source.setdefault(pending.source, OrderedDict())
        while len(mine) >= PER_SOURCE:
            self._shed(next(iter(mine)))
        while len(self._pending) >= MAX_PENDING:
            self._shed(next(iter(self._pending)))
        mine = self._by_source.setdefault(pending.source, OrderedDict())
        mine[pending] = None
        self._pending[pending] = None
        try:
            self._selector.register(pending.sock, selectors.EVENT_READ,
                                    pending)
        except (OSError, ValueError):
            self._forget(pending)
            pending.sock.close()

    def _shed(self, oldest: Pending) -> None:
        """Make room by the oldest connection still sending: read what it
        sent first, and a whole request is served, not shed (in a burst,
        heads wait in the kernel while the loop accepts)."""
        self._advance(oldest)
        if oldest in self._pending:
            self._drop(oldest, "shed_oldest")

    def _out_of_files(self) -> None:
        # The connection stays in the kernel's queue and the listener stays
        # readable: free a descriptor (the oldest half-sent connection) or
        # look away for a moment, rather than spin.
        if self._pending:
            self._shed(next(iter(self._pending)))
            return
        if self.log is not None:
            self.log("beam-probe: out of file descriptors: not accepting "
                     "for 0.1 s")
        try:
            self._selector.unregister(self.socket)
        except (KeyError, ValueError):
            pass
        self._accept_paused_until = time.monotonic() + 0.1

    def _resume_accepting(self, now: float) -> None:
        if self._accept_paused_until and now >= self._accept_paused_until:
            self._accept_paused_until = 0.0
            self._selector.register(self.socket, selectors.EVENT_READ)

    # -- reading heads ------------------------------------------------------

    def _advance(self, pending: Pending) -> None:
        sock = pending.sock
        if pending.handshaking:
            try:
                sock.do_handshake()
            except ssl.SSLWantReadError:
                self._want(pending, selectors.EVENT_READ)
                return
            except ssl.SSLWantWriteError:
                self._want(pending, selectors.EVENT_WRITE)
                return
            except (OSError, ValueError):
                self._drop(pending, None)
                return
            pending.handshaking = False
            self._want(pending, selectors.EVENT_READ)
        while True:
            try:
                data = sock.recv(READ_SIZE)
            except (BlockingIOError, InterruptedError, ssl.SSLWantReadError):
                self._want(pending, selectors.EVENT_READ)
                return
            except ssl.SSLWantWriteError:
                self._want(pending, selectors.EVENT_WRITE)
                return
            except (OSError, ValueError):
                self._drop(pending, None)
                return
            if not data:
                self._drop(pending, None)
                return
            pending.head += data
            if _end_of_head(pending.head):
                self._dispatch(pending)
                return
            if len(pending.head) > MAX_HEAD:
                self._answer_and_close(pending, TOO_LARGE_REPLY, "too_large")
                return

    def _want(self, pending: Pending, events: int) -> None:
        try:
            self._selector.modify(pending.sock, events, pending)
        except (KeyError, ValueError, OSError):
            pass

    def _expire(self, now: float) -> None:
        while self._pending:
            oldest = next(iter(self._pending))
            if oldest.due > now:
                return
            self._drop(oldest, "head_deadline")

    # -- handing over -----------------------------------------------------

    def _dispatch(self, pending: Pending) -> None:
        """A whole head, on the loop's thread: through the gate's quick
        check, to the workers or the gate's threads."""
        self._forget(pending)
        pending.arrived = time.monotonic()
        if self.gate is not None:
            verdict = self.gate.quick(bytes(pending.head))
            if isinstance(verdict, Refusal):
                self._reply_and_close(pending, verdict)
                return
            if verdict == SLOW:
                self._to_gate(pending)
                return
        self._to_workers(pending)

    def _to_gate(self, pending: Pending) -> None:
        assert self.gate is not None
        taken = self._checkers.take(self._check, pending)
        if taken == "busy":
            self._reply_and_close(pending, self.gate.busy)
        elif taken == "closed":
            self._close_socket(pending.sock)

    def _check(self, pending: Pending) -> None:
        """The gate's slow check, on one of its threads."""
        assert self.gate is not None
        try:
            verdict = self.gate.slow(bytes(pending.head))
        except Exception as exc:
            if self.log is not None:
                self.log(f"beam-probe: a check of a request from "
                         f"{pending.source} failed: "
                         f"{type(exc).__name__}: {exc}")
            verdict = Refusal(BUSY_REPLY, "busy")
        if isinstance(verdict, Refusal):
            self._reply_and_close(pending, verdict)
        else:
            self._to_workers(pending)

    def _to_workers(self, pending: Pending) -> None:
        """Hand a request to the workers (any thread: it is no longer
        the loop's)."""
        taken = self._workers.take(self._work, pending)
        if taken == "busy":
            self._reply_and_close(pending, Refusal(BUSY_REPLY, "busy"))
        elif taken == "closed":
            self._close_socket(pending.sock)

    def _work(self, pending: Pending) -> None:
        try:
            pending.sock.setblocking(True)
            pending.sock.settimeout(WRITE_TIMEOUT)
            self._handle(pending, self)
        except (ConnectionError, TimeoutError, ssl.SSLError):
            pass   # a client gone before its answer is not news
        except Exception as exc:
            if self.log is not None:
                self.log(f"beam-probe: a request from {pending.source} "
                         f"failed: {type(exc).__name__}: {exc}")
        finally:
            self._close_socket(pending.sock)

    # -- closing ------------------------------------------------------------

    def _forget(self, pending: Pending) -> None:
        self._pending.pop(pending, None)
        mine = self._by_source.get(pending.source)
        if mine is not None:
            mine.pop(pending, None)
            if not mine:
                del self._by_source[pending.source]
        try:
            self._selector.unregister(pending.sock)
        except (KeyError, ValueError, OSError):
            pass

    def _close(self, pending: Pending) -> None:
        self._forget(pending)
        self._close_socket(pending.sock)

    def _drop(self, pending: Pending, reason: str | None) -> None:
        self._close(pending)
        if reason is not None:
            self.on_drop(reason)

    def _answer_and_close(self, pending: Pending, reply: bytes,
                          reason: str) -> None:
        """A short answer from the loop itself, never waiting."""
        self._forget(pending)
        self._reply_and_close(pending, Refusal(reply, reason))

    def _reply_and_close(self, pending: Pending, refusal: Refusal) -> None:
        """A short answer to a connection the loop no longer watches, never
        waiting: what does not fit in the socket's buffer at once is not
        sent."""
        try:
            if not pending.handshaking:
                pending.sock.send(refusal.reply)
        except (OSError, ValueError):
            pass
        self._close_socket(pending.sock)
        self.on_drop(refusal.reason)

    @staticmethod
    def _close_socket(sock: Any) -> None:
        try:
            # Our answer is all written: tell the client so at once,
            # rather than when the socket object is collected.
            socket.socket.shutdown(sock, socket.SHUT_WR)
        except (OSError, ValueError, TypeError):
            pass
        try:
            sock.close()
        except OSError:
            pass


def raise_file_limit(wanted: int = 65536) -> int:
    """Raise this process's soft limit of open files towards its hard
    limit (Go's runtime does so for every Go exporter since 1.19): each
    connection, waiting or served, and each target's is one. The limit."""
    try:
        import resource
    except ImportError:
        return 0
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (OSError, ValueError):
            pass
    return int(soft)


__all__ = ["PASS", "SLOW", "Front", "Gate", "Pending", "Refusal",
           "raise_file_limit", "short_reply"]
