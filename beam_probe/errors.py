"""The errors beam-probe reports, each with its exit code.

The CLI prints ``str(error)`` as one line and exits with ``error.exit_code``;
docs/manual/exit-codes.md is written from EXIT_CODES. The errors of
the distribution layer are defined in erldist.errors and re-exported here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import Any

from beam_probe.erldist.errors import (ConnectFailed, ConnectionLost, CookieError,
                             HostUnknown, NodeNotFound, ProbeError,
                             ProtocolError, RemoteError, TimedOut,
                             TlsConfigError, TlsError, UsageError)


class NoCookie(CookieError):
    """No usable cookie on our side: none found, or a cookie file that is
    unsafe, unreadable or malformed (not the node's doing)."""


class BadReply(ProtocolError):
    """A helper's reply that no node can give (node/replies.py): a key
    missing, a value of another type, or a figure out of range (2^2000,
    -5, 1.5 where a count belongs). Exit 8, as other malformed data from
    the peer; ``check`` calls it UNKNOWN (the node answered, but with no
    figures it can judge)."""

    label = "bad reply"


class NoSuchProcess(ProbeError):
    """The pid or registered name given is not a live process on the node."""

    exit_code = 10
    label = "no such process"


class NothingToTrace(NoSuchProcess):
    """trace-gc: none of the processes asked for could be traced (gone,
    not found, or traced by another tool)."""

    label = "nothing to trace"


class OutputFailed(ProbeError):
    """Standard output could not be written: closed, or the disk is full."""

    exit_code = 11
    label = "output"


# Not errors: verdicts and partial answers, said in the output too.
EXIT_LEAK = 12         # watch --fail-on-leak: a leak was suspected
EXIT_NOT_JUDGED = 13   # watch --fail-on-leak: too few samples to judge
EXIT_OVERLOAD = 14     # trace-gc, calls, senders ended early by overload

class ClusterIncomplete(ProbeError):
    """--cluster: some chosen nodes did not answer. Their rows say why; the
    others' answers are written first."""

    exit_code = 15
    label = "cluster"


EXIT_CODES = [
    (0, "success"),
    (1, "unexpected error (a bug: please report it)"),
    (UsageError.exit_code, "bad arguments or options, or a command's "
                           "extra not installed (`top`'s view, `serve`, "
                           "`plot -o`: the line says which)"),
    (CookieError.exit_code, "no cookie found, cookie file unsafe, or the node "
                            "rejected the cookie"),
    (NodeNotFound.exit_code, "host unknown, or no node of that name "
                             "registered with EPMD there"),
    (ConnectFailed.exit_code, "host unreachable, connection refused, the "
                              "node refused the handshake, or TLS failed"),
    (TimedOut.exit_code, "no answer within --timeout, or no connection "
                         "within --connect-timeout"),
    (ConnectionLost.exit_code, "the connection closed in the middle of a call"),
    (ProtocolError.exit_code, "the peer sent malformed distribution data, "
                              "or a reply no node can give (a count that "
                              "is negative, past 64 bits or not an "
                              "integer; the line names the key)"),
    (RemoteError.exit_code, "the call failed on the node (badrpc)"),
    (NoSuchProcess.exit_code, "no live process with that pid or name on the "
                              "node; `trace-gc`: none of the processes asked "
                              "for could be traced; `calls`, `senders`: "
                              "nothing to trace (the module is not loaded, "
                              "no such function or process) or, on OTP "
                              "25-26, another tool's tracer or trace "
                              "pattern is at work there (refused, left "
                              "alone)"),
    (OutputFailed.exit_code, "standard output, `watch --output` FILE, "
                             "`alloc --raw` FILE, `plot -o` FILE, or a "
                             "snapshot's file or folder (`snapshot -o`, "
                             "`leak-hunt --save`) could not be written "
                             "(closed, the disk is full, a read-only file "
                             "system, a path under a regular file), or "
                             "would be written through another user's "
                             "symbolic link (refused, never followed)"),
    (EXIT_LEAK, "`watch --fail-on-leak`: a leak was suspected"),
    (EXIT_NOT_JUDGED, "`watch --fail-on-leak`: the run ended before the "
                      "rule could judge (too few samples since the start "
                      "or the last gap); the output says how many more"),
    (EXIT_OVERLOAD, "`trace-gc`: the trace ended early because the "
                    "traced processes collected faster than the node's "
                    "tracer could forward (overload); what was traced is "
                    "shown. `calls`, `senders`: the trace stopped itself "
                    "past --rate or its tracer's bounds, or another tool "
                    "took it away; the counts up to then are shown"),
    (ClusterIncomplete.exit_code, "`--cluster`: one or more nodes did not "
                                  "answer (down, slow, not connected to "
                                  "the entry node, an answer too large, "
                                  "or failing); each is "
                                  "named in its row, and the others' "
                                  "answers are shown. `diff` of folders: "
                                  "a node not once in every folder, named "
                                  "in its row; the others are compared"),
    (130, "interrupted (Ctrl-C, SIGINT); `watch` ends on Ctrl-C as a "
          "normal stop, exit 0"),
    (141, "standard output is a pipe whose reader closed it (as `head` "
          "does); nothing more is written"),
    (143, "terminated (SIGTERM)"),
]


class EndedEarly(Exception):
    """A probe whose node failed it after part of the answer was in hand
    (leak-hunt's snapshots before the node went): ``result`` is written as
    any result is, then ``error`` ends the run with its line and code.
    ``elixir`` says how to show names, the node being gone to ask (None:
    the node is still there to ask)."""

    def __init__(self, result: Any, error: ProbeError,
                 elixir: bool | None = False) -> None:
        super().__init__(str(error))
        self.result, self.error, self.elixir = result, error, elixir


class Terminated(BaseException):
    """SIGTERM arrived: stop as Ctrl-C stops (a BaseException, so that no
    ``except Exception`` on the way swallows it)."""


__all__ = ["BadReply", "ConnectFailed", "ConnectionLost", "CookieError", "EXIT_CODES",
           "EXIT_LEAK", "EXIT_NOT_JUDGED", "EXIT_OVERLOAD", "EndedEarly",
           "NothingToTrace",
           "HostUnknown", "NoCookie", "NoSuchProcess", "NodeNotFound",
           "OutputFailed", "ProbeError", "ProtocolError", "RemoteError",
           "Terminated", "TimedOut", "TlsConfigError", "TlsError",
           "UsageError"]
