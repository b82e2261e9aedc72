"""Everything after the handshake that is protocol and not I/O, as a sans-IO
object: bytes in, events and bytes out.

    session = Session("beam_probe_1@me", "app@db1", creation=7)
    ref, data = session.call("erlang", "memory", [])   # send data
    events, reply = session.receive(incoming)          # send reply, if any

It builds the frames we send (calls through the node's rex server, plain
messages, ticks) and reads the frames that arrive: a tick is echoed, an io
request from code that prints is answered (the output kept, a little), an
UNLINK_ID is acknowledged as the protocol requires, and every message of
the form ``{Ref, ...}`` comes out as a Tagged event for the transport to
route (a call's reply, or a chunk of a streamed one). Nothing here touches
a socket, a thread or a clock, so all of it is tested with byte strings
(tests/test_session.py); connection.py does the waiting.

Layouts: erl_dist_protocol, "Protocol between Connected Nodes"; the rex
request is gen_server's call protocol, ``{'$gen_call', {From, Tag},
{call, M, F, Args, GroupLeader}}``, answered ``{Tag, Result}`` with
``{badrpc, Reason}`` for failures.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from beam_probe.erldist import etf
from beam_probe.erldist import frames
from beam_probe.erldist.errors import RemoteError
from beam_probe.erldist.terms import Atom, Pid, Reference, format_term

# Output printed by code we call is kept for debugging, up to this much.
MAX_CAPTURED_OUTPUT = 64 * 1024

A_REX = Atom("rex")
A_EMPTY = Atom("")
A_GEN_CALL = Atom("$gen_call")
A_CALL = Atom("call")
A_BADRPC = Atom("badrpc")
A_IO_REQUEST = Atom("io_request")
A_IO_REPLY = Atom("io_reply")
A_OK = Atom("ok")
A_ERROR = Atom("error")
A_EXIT = "EXIT"

# Operations that deliver a message to one of our processes.
_DELIVERIES = (frames.SEND, frames.SEND_SENDER, frames.SEND_TT,
               frames.SEND_SENDER_TT, frames.ALIAS_SEND, frames.ALIAS_SEND_TT)


class Tagged(NamedTuple):
    """A message ``{Tag, Item, ...}`` sent to us: ``items`` after the tag.
    A call's reply has one item, its result."""

    tag: Reference
    items: tuple[Any, ...]


class Session:
    """The protocol state of one connection after its handshake."""

    def __init__(self, our_node: str, peer_node: str, creation: int,
                 max_frame: int = frames.MAX_FRAME,
                 max_items: int = etf.MAX_ITEMS) -> None:
        self.our_node = our_node
        self.peer_node = peer_node
        self.creation = creation
        # Our one process: the sender of every call and the group leader
        # of the code it runs, so that anything it prints comes to us.
        self.pid = Pid(Atom(our_node), 1, 0, creation)
        self.output: list[str] = []
        self._captured = 0
        self._refs = 0
        self._reader = frames.FrameReader(max_frame)
        self._limits = {"max_items": max_items,
                        "max_uncompressed": max_frame}

    # -- what we send ----------------------------------------------------------

    def new_ref(self) -> Reference:
        """A reference of ours, unique on this connection."""
        self._refs += 1
        n = self._refs
        return Reference(Atom(self.our_node), self.creation,
                         (n & 0x3FFFF, n >> 18 & 0xFFFFFFFF, 0))

    def call(self, module: str, function: str, args: list[Any],
             ref: Reference | None = None) -> tuple[Reference, bytes]:
        """rpc:call(Module, Function, Args) through the node's rex server:
        the reference its reply will be tagged with, and the bytes to send."""
        ref = self.new_ref() if ref is None else ref
        request = (A_GEN_CALL, (self.pid, ref),
                   (A_CALL, Atom(module), Atom(function), list(args),
                    self.pid))
        return ref, frames.build((frames.REG_SEND, self.pid, A_EMPTY, A_REX),
                                 request)

    def send(self, to: Pid, message: Any) -> bytes:
        """The bytes that send ``message`` to the process ``to``."""
        return frames.build((frames.SEND, A_EMPTY, to), message,
                            with_message=True)

    @staticmethod
    def tick() -> bytes:
        return frames.TICK

    # -- what arrives ------------------------------------------------------------

    def receive(self, data: bytes) -> tuple[list[Tagged], bytes]:
        """Take bytes from the node: the tagged messages they complete, and
        the bytes to send back (tick echoes, io replies, acknowledgements).

        Raises frames.FrameError or etf.DecodeError for malformed data."""
        events: list[Tagged] = []
        out = bytearray()
        for frame in self._reader.feed(data):
            if not frame:
                # A tick. Echoing it means we send at least as often as the
                # node expects, whatever its net_ticktime.
                out += frames.TICK
                continue
            control, message = frames.parse(frame, **self._limits)
            op = control[0]
            if op in _DELIVERIES:
                out += self._on_message(message, events)
            elif op == frames.UNLINK_ID and len(control) >= 4:
                # {35, Id, From, To}: the protocol requires an UNLINK_ID_ACK.
                out += frames.build((frames.UNLINK_ID_ACK, control[1],
                                     control[3], control[2]))
            # Links, monitors and exits are not ours to act on: we never link.
        return events, bytes(out)

    def _on_message(self, message: Any, events: list[Tagged]) -> bytes:
        if not isinstance(message, tuple) or not message:
            return b""
        if len(message) >= 2 and isinstance(message[0], Reference):
            events.append(Tagged(message[0], message[1:]))
        elif len(message) == 4 and message[0] == A_IO_REQUEST and \
                isinstance(message[1], Pid):
            reply = self._io_reply(message[3])
            return self.send(message[1], (A_IO_REPLY, message[2], reply))
        return b""

    def _io_reply(self, request: Any) -> Any:
        """Answer an io request as a sink that keeps a little of the output."""
        if not isinstance(request, tuple) or not request:
            return (A_ERROR, Atom("request"))
        kind = request[0]
        if kind == "put_chars":
            chars = request[-1] if len(request) in (2, 3) else b""
            text = chars.decode("utf-8", "replace") if isinstance(
                chars, bytes) else str(chars)
            if self._captured < MAX_CAPTURED_OUTPUT:
                self.output.append(text)
                self._captured += len(text)
            return A_OK
        if kind == "requests":
            for sub in request[1] if isinstance(request[1], list) else []:
                self._io_reply(sub)
            return A_OK
        if kind == "setopts":
            return A_OK
        if kind == "getopts":
            return []
        # Input of any kind: there is no terminal behind us.
        return (A_ERROR, Atom("enotsup"))

    # -- what a reply means --------------------------------------------------------

    def result(self, value: Any, what: str) -> Any:
        """A call's value, or RemoteError for ``{badrpc, Reason}``."""
        if isinstance(value, tuple) and len(value) == 2 and \
                value[0] == A_BADRPC:
            raise RemoteError(f"{what} failed on {self.peer_node}: "
                              f"{describe_badrpc(value[1])}")
        return value


def describe_badrpc(reason: Any) -> str:
    """A badrpc reason as one short phrase."""
    if isinstance(reason, tuple) and len(reason) == 2 and \
            reason[0] == A_EXIT:
        return "exception " + format_term(reason[1])[:500]
    return format_term(reason)[:500]


__all__ = ["Session", "Tagged", "describe_badrpc"]
