"""Calling the target: plain rpc, and helper functions from erl_helpers/.

Every helper runs under the guard of erl_helpers/beam_probe_scan.erl
(guard/3): a watchdog process on the node ends the call, and the workers it
started, within moments of our connection going (Ctrl-C, kill -9, a network
failure) or of the call's deadline. Nothing we start outlives us.

This module is the one place where erl_eval:expr/5 is spelled: ``run`` on
the attached node, ``fan_out`` through it to the nodes it is connected to.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Generator

from beam_probe.erldist import etf
from beam_probe.erldist.connection import MESSAGE, Connection, ReplyLimits
from beam_probe.erldist.dial import connect
from beam_probe.erldist.etf import Encoded
from beam_probe.erldist.errors import ProtocolError
from beam_probe.erldist.terms import Atom, Pid, Reference, format_term
from beam_probe.errors import RemoteError, TimedOut
from beam_probe.node.forms import LIB, HelperForms, Local, Var, work_fun
from beam_probe.node.replies import Reply

GUARD = LIB

# A fan-out's replies cross the attached node in one frame: together they
# may take the frame's bytes (ReplyLimits.max_bytes) less this much for
# the list and tuples around them (13 bytes a node: 64 KiB covers 5,000).
FAN_MARGIN = 64 * 1024
# One node's reply of a fan-out:
#   ("ok", value)
#   ("not_connected", None)   the attached node is not connected to it
#   ("crowded", bytes)        it answered, but its answer did not fit in
#                             the frame beside the others': ask it again
#                             in a smaller group
#   ("oversize", (bytes, most))  its answer alone is over what a node may
#                             send, even a piece at a time
#   ("unread", bytes)         it answered with a large term, not bytes (no
#                             node of ours does): the entry dropped it
#   ("undecodable", why), ("malformed", term)
#   ("error", (Class, Reason))  as erpc:multicall gives a failure, or as
#                             the node's work raised it
FanReply = tuple[str, Any]

# A node's answer over a frame stays on the node, in a process of its own,
# and is fetched a piece at a time (beam_probe_lib:encoded/5, piece/4): up
# to this many frames' worth (a snapshot of ~40 million idle processes;
# 5 million fit in one frame), which we hold whole to decode. The same
# bound holds what all the answers of one fan-out may inflate to, whatever
# the number of nodes, so that such an answer can be decoded at all. The
# holder ends when we go, after its last piece, or after this long
# unasked.
HELD_MOST = 8
HELD_IDLE = 30.0
A_HELD = Atom("beam_probe_held")
A_GONE = Atom("beam_probe_gone")

# The node stops a helper this long after we would have given up waiting
# for it: we time out first and say so, then close the connection (which
# stops it at once); a library caller that keeps the connection open has
# the work stopped by this deadline instead.
GUARD_MARGIN = 2.0

A_NONE = Atom("none")
A_VALUE = Atom("value")
A_NODE = Atom("node")
A_MORE = Atom("more")
A_INFINITY = Atom("infinity")
A_EXIT = Atom("EXIT")
A_KILLED = Atom("killed")
A_OK = Atom("ok")
A_ERROR = Atom("error")
A_BEAM_PROBE = Atom("beam_probe")
A_NOT_CONNECTED = Atom("not_connected")
A_CROWDED = Atom("crowded")
A_UNREAD = Atom("unread")
A_OVERSIZE = Atom("beam_probe_oversize")
A_FAILED = Atom("beam_probe_failed")


def _millis(seconds: float | None) -> Any:
    return A_INFINITY if seconds is None else max(0, int(seconds * 1000))


class Remote:
    """One attached node: a connection plus the default per-call timeout."""

    def __init__(self, conn: Connection, timeout: float) -> None:
        self.conn = conn
        self.timeout = timeout
        self.node = conn.peer_node
        self.helpers = HelperForms(self._plain_call)
        self._encoded: dict[tuple[Any, ...], Encoded] = {}
        # What a fan-out's answers may take in all, and one node's alone:
        # they cross the attached node in one frame.
        self.fan_budget = conn.limits.max_bytes - FAN_MARGIN
        # What one node's answer may be in all, fetched a piece at a time.
        self.held_most = HELD_MOST * conn.limits.max_bytes

    def _plain_call(self, module: str, function: str, args: list[Any]) -> Any:
        return self.call(module, function, args)

    def call(self, module: str, function: str, args: list[Any] | tuple[Any, ...] = (),
             timeout: float | None = None) -> Any:
        return self.conn.call(module, function, list(args),
                              self.timeout if timeout is None else timeout)

    def calls(self, requests: list[tuple[str, str, list[Any]]],
              timeout: float | None = None) -> list[Any]:
        """Several calls in flight at once; results in request order."""
        refs = [self.conn.call_async(m, f, list(a)) for m, f, a in requests]
        deadline = time.monotonic() + (self.timeout if timeout is None
                                       else timeout)
        return [self.conn.wait(ref, max(0.0, deadline - time.monotonic()),
                               f"{m}:{f}/{len(a)}")
                for ref, (m, f, a) in zip(refs, requests)]

    def guarded(self, module: str, function: str, args: tuple[Any, ...],
                watch: Any, deadline: float | None,
                encode: int | None = None) -> tuple[Any, list[Any]]:
        """The abstract form of ``guard(Watch, Deadline, fun() ->
        Function(Args...) end)`` and its bindings, for erl_eval:expr/5 on
        any node. ``watch`` is a term or a Var; ``deadline`` in seconds, or
        None for no deadline (the watch alone ends it).

        The form depends only on the helper and on which arguments are
        Locals and Vars (values go in the bindings), so it is encoded once
        per connection: a watch sends the same 12 KB form every sample,
        and encoding it cost ~3 ms of beam-probe's CPU each time.

        With ``encode``, the whole is wrapped in ``encoded(fun() -> ...
        end, Encode)``: the value comes back as the bytes of its external
        term format, at most ``encode`` of them (fan_out)."""
        bindings: list[Any] = []
        inner = self.helpers.call(module, function, args, bindings)
        form = self.helpers.call(GUARD, "guard",
                                 (watch, _millis(deadline), work_fun(inner)),
                                 bindings)
        if encode is not None:
            form = self.helpers.call(
                GUARD, "encoded",
                (work_fun(form), encode, Var("BeamProbeConnection"),
                 self.held_most, _millis(HELD_IDLE)), bindings)
        key = (module, function, encode is not None,
               tuple(_shape(a) for a in (*args, watch)))
        encoded = self._encoded.get(key)
        if encoded is None:
            encoded = self._encoded[key] = Encoded(form)
        # erl_eval reads a list of bindings as an orddict: sorted by name.
        return encoded, sorted(bindings)

    def run(self, module: str, function: str, *args: Any,
            timeout: float | None = None) -> Any:
        """Run ``function`` from erl_helpers/``module``.erl on the target,
        under the guard, and return its value."""
        timeout = self.timeout if timeout is None else timeout
        form, bindings = self.guarded(module, function, args,
                                      self.watch(), timeout + GUARD_MARGIN)
        try:
            return self.call("erl_eval", "expr", _expr_args(form, bindings),
                             timeout)
        except RemoteError as exc:
            raise _deadline(exc, timeout) from None

    def ask(self, module: str, function: str, *args: Any,
            timeout: float | None = None) -> Reply:
        """``run``, for a helper that replies with a map: its Reply, read
        by key (a missing key is a ProtocolError naming the helper)."""
        return Reply(f"{module}:{function}",
                     self.run(module, function, *args, timeout=timeout))

    def stream(self, module: str, function: str, *args: Any,
               timeout: float | None = None, limit: int = 2,
               address: Callable[[Pid, Reference], tuple[Any, ...]]
               | None = None) -> Generator[Any, None, Any]:
        """Run a streaming helper: it takes our pid and a tag first (or
        the arguments ``address(Pid, Tag)`` makes, before ``args``),
        sends ``{Tag, Sender, Chunk}`` messages and waits for ``{Tag,
        more}`` after each. Yields each chunk; the helper's own value,
        once it ends, is the generator's return value. ``timeout`` bounds
        each wait; the work has no deadline of its own (the guard stops it
        when we go, and the helper when we stop asking)."""
        timeout = self.timeout if timeout is None else timeout
        tag = self.conn.new_ref()
        box = self.conn.mailbox(tag, limit)
        first = (self.conn.pid, tag) if address is None \
            else address(self.conn.pid, tag)
        try:
            form, bindings = self.guarded(
                module, function, (*first, *args), self.watch(), None)
            what = f"{module}:{function}"
            self.conn.call_async("erl_eval", "expr",
                                 _expr_args(form, bindings), box)
            while True:
                kind, item = box.get(timeout, what)
                if kind == MESSAGE:
                    sender, chunk = item if len(item) == 2 else (None, None)
                    if not isinstance(sender, Pid):
                        raise RemoteError(f"{what} sent a malformed chunk")
                    yield chunk
                    self.conn.send(sender, (tag, A_MORE))
                else:
                    return self.conn.result(item, what)
        finally:
            self.conn.close_mailbox(box)

    def fan_out(self, nodes: list[str], module: str, function: str,
                *args: Any, timeout: float, wait: float | None = None
                ) -> list[FanReply]:
        """``function`` on each of ``nodes`` at once, through the attached
        node (erpc:multicall), each under a guard that watches the call on
        the attached node: when we go, it goes, and so do they. Only the
        nodes the attached node is connected to are asked: it never dials
        one (beam_probe_lib:fan_out/5 says why).

        Each node answers with the bytes of its value, which the attached
        node passes through undecoded; they are decoded here, each node's
        alone, under this connection's limits. Returns, in ``nodes``'
        order, a FanReply a node. ``timeout`` bounds each node; we wait
        ``wait`` for the whole (by default a little longer, so that slow
        nodes are reported as such rather than ending the call)."""
        most = self.fan_budget
        inner, bindings = self.guarded(module, function, args,
                                       Var("BeamProbeWatch"),
                                       timeout + GUARD_MARGIN, encode=most)
        replies = self.run(GUARD, "fan_out",
                           [n.encode("utf-8") for n in nodes], inner,
                           bindings, _millis(timeout), most,
                           timeout=timeout + GUARD_MARGIN
                           if wait is None else wait)
        if not isinstance(replies, list) or len(replies) != len(nodes):
            raise ProtocolError("the entry node's fan-out answered "
                                f"{format_term(replies)[:80]}, not one "
                                "reply a node")
        # One budget for all the nodes' answers, as for one reply: their
        # number must not multiply what we may be made to hold.
        budget = etf.Budget(self.conn.limits.max_items,
                            HELD_MOST * self.conn.limits.max_bytes)
        answers = [self._fanned(reply, budget, most) for reply in replies]
        return [self._fetched(node, answer[1], budget, timeout)
                if answer[0] == "held" else answer
                for node, answer in zip(nodes, answers)]

    def _fetched(self, node: str, held: tuple[Pid, int],
                 budget: etf.Budget, timeout: float) -> FanReply:
        """A node's answer held on it (over a frame), fetched a piece at a
        time through the attached node, then decoded within ``budget``."""
        holder, size = held
        step = self.fan_budget * 15 // 16  # a piece's own encoding grows it
        pieces: list[bytes] = []
        for offset in range(0, size, step):
            (kind, piece), = self.fan_out(
                [node], GUARD, "piece", holder, offset,
                min(step, size - offset), _millis(timeout), timeout=timeout)
            if kind != "ok" or not isinstance(piece, bytes):
                why = piece[1] if isinstance(piece, tuple) and \
                    len(piece) == 2 and piece[0] == A_GONE else (kind, piece)
                return ("undecodable", f"its answer of {size:,} bytes "
                        f"could not be fetched: {format_term(why)[:80]}")
            pieces.append(piece)
        try:
            return ("ok", etf.decode_within(b"".join(pieces), budget,
                                            budget.inflate))
        except etf.DecodeError as exc:
            return ("undecodable", str(exc))

    def _fanned(self, reply: Any, budget: etf.Budget, most: int
                ) -> FanReply:
        """One node's reply of a fan-out, decoded within ``budget``, which
        the fan-out's nodes share."""
        if not (isinstance(reply, tuple) and len(reply) == 2):
            return ("malformed", reply)
        kind, value = reply
        if kind == A_ERROR and isinstance(value, tuple) and len(value) == 2 \
                and value[0] == A_BEAM_PROBE:
            if value[1] == A_NOT_CONNECTED:
                return ("not_connected", None)
            if isinstance(value[1], tuple) and len(value[1]) == 2 \
                    and _size(value[1][1]):
                if value[1][0] == A_CROWDED:
                    return ("crowded", value[1][1])
                if value[1][0] == A_UNREAD:
                    return ("unread", value[1][1])
        if kind != A_OK:
            return ("error", reply)
        if isinstance(value, tuple) and len(value) == 2 \
                and value[0] == A_OVERSIZE and _size(value[1]):
            return ("oversize", (value[1], self.held_most))
        if isinstance(value, tuple) and len(value) == 3 \
                and value[0] == A_HELD and isinstance(value[1], Pid) \
                and _size(value[2]) \
                and value[2] <= self.held_most:
            return ("held", (value[1], value[2]))
        if not isinstance(value, bytes):
            return ("malformed", value)
        try:
            decoded = etf.decode_within(value, budget,
                                        self.conn.limits.max_bytes)
        except etf.DecodeError as exc:
            return ("undecodable", str(exc))
        if isinstance(decoded, tuple) and len(decoded) == 3 \
                and decoded[0] == A_FAILED:
            return ("error", (decoded[1], decoded[2]))
        return ("ok", decoded)


    def watch(self) -> tuple[Any, ...]:
        """What guard/3 watches for a call on the attached node: our
        connection to it."""
        return (A_NODE, Atom(self.conn.our_node))

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> "Remote":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _size(value: Any) -> bool:
    """Whether ``value`` is a byte count a node may say (a peer's integer
    of thousands of digits cannot even be written)."""
    return isinstance(value, int) and not isinstance(value, bool) \
        and 0 <= value < 1 << 64


def _shape(arg: Any) -> tuple[Any, ...]:
    """What of an argument is part of the form: a Local's or a Var's name;
    a value is a binding, whatever it is."""
    if isinstance(arg, Local):
        return ("local", arg.module, arg.name)
    if isinstance(arg, Var):
        return ("var", arg.name)
    return ("value",)


def _expr_args(form: Any, bindings: list[Any]) -> list[Any]:
    # erl_eval:expr/5 with return format 'value' sends back the value alone,
    # not the bindings (which would echo every argument back).
    return [form, bindings, A_NONE, A_NONE, A_VALUE]


def _deadline(exc: RemoteError, timeout: float) -> Exception:
    """The guard's deadline, {badrpc, {'EXIT', {beam_probe_deadline, Ms}}},
    as what it means."""
    if "beam_probe_deadline" in str(exc):
        return TimedOut(f"the node stopped the work at its deadline "
                        f"({timeout + GUARD_MARGIN:g} s)")
    return exc


def attach(node: str, cookie: bytes, *, timeout: float = 15.0,
           connect_timeout: float | None = None,
           dist_port: int | None = None, tls: Any = None,
           limits: ReplyLimits | None = None) -> Remote:
    """Connect to ``node`` as a hidden node; the caller closes the Remote.

    ``timeout`` is the default limit of each call, ``connect_timeout`` (by
    default the same) that of connecting. ``tls`` is a
    ``erldist.tls.TlsSettings`` for nodes on TLS distribution; ``limits`` a
    ``ReplyLimits`` for callers that ask for bulk replies."""
    conn = connect(node, cookie, dist_port=dist_port, tls=tls, limits=limits,
                   timeout=timeout if connect_timeout is None
                   else connect_timeout)
    return Remote(conn, timeout)


__all__ = ["FanReply", "Local", "Remote", "ReplyLimits", "Var", "attach"]
