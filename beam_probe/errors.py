"""The errors beam-probe reports, each with its exit code.

The CLI prints ``str(error)`` as one line and exits with ``error.exit_code``;
the README's exit code table is generated from the same numbers.
"""

from __future__ import annotations


class ProbeError(Exception):
    """Base of every error meant for the operator rather than a traceback."""

    exit_code = 1
    label = "error"


class CookieError(ProbeError):
    """No usable cookie, an unsafe cookie file, or the node rejected it."""

    exit_code = 3
    label = "cookie"


class NoCookie(CookieError):
    """No usable cookie on our side: none found, or a cookie file that is
    unsafe, unreadable or malformed (not the node's doing)."""


class NodeNotFound(ProbeError):
    """The node name is not registered with EPMD on its host."""

    exit_code = 4
    label = "node not found"


class HostUnknown(NodeNotFound):
    """The host name does not resolve."""

    label = "host unknown"


class ConnectFailed(ProbeError):
    """The host or port is unreachable, refused us, or refused the handshake."""

    exit_code = 5
    label = "cannot connect"


class TlsError(ConnectFailed):
    """TLS distribution could not be set up with the node."""

    label = "TLS"


class TimedOut(ProbeError):
    """No answer within --timeout."""

    exit_code = 6
    label = "timed out"


class ConnectionLost(ProbeError):
    """The connection closed while a call was waiting for its answer."""

    exit_code = 7
    label = "connection lost"


class ProtocolError(ProbeError):
    """The peer sent something that is not valid Erlang distribution."""

    exit_code = 8
    label = "protocol error"


class RemoteError(ProbeError):
    """The call reached the node but failed there (badrpc, an exception)."""

    exit_code = 9
    label = "remote call failed"


class NoSuchProcess(ProbeError):
    """The pid or registered name given is not a live process on the node."""

    exit_code = 10
    label = "no such process"


class OutputFailed(ProbeError):
    """Standard output could not be written: closed, or the disk is full."""

    exit_code = 11
    label = "output"


class UsageError(ProbeError):
    """Arguments that make no sense (click's own usage errors also exit 2)."""

    exit_code = 2
    label = "usage"


class TlsConfigError(UsageError):
    """A TLS option or -ssl_dist_optfile that cannot be used."""

    label = "TLS settings"


EXIT_CODES = [
    (0, "success"),
    (1, "unexpected error (a bug: please report it)"),
    (UsageError.exit_code, "bad arguments or options"),
    (CookieError.exit_code, "no cookie found, cookie file unsafe, or the node "
                            "rejected the cookie"),
    (NodeNotFound.exit_code, "host unknown, or no node of that name "
                             "registered with EPMD there"),
    (ConnectFailed.exit_code, "host unreachable, connection refused, the "
                              "node refused the handshake, or TLS failed"),
    (TimedOut.exit_code, "no answer within --timeout"),
    (ConnectionLost.exit_code, "the connection closed in the middle of a call"),
    (ProtocolError.exit_code, "the peer sent malformed distribution data"),
    (RemoteError.exit_code, "the call failed on the node (badrpc)"),
    (NoSuchProcess.exit_code, "no live process with that pid or name on the "
                              "node"),
    (OutputFailed.exit_code, "standard output could not be written (closed, "
                             "or the disk is full)"),
    (130, "interrupted (Ctrl-C, SIGINT)"),
    (141, "standard output is a pipe whose reader closed it (as `head` "
          "does); nothing more is written"),
    (143, "terminated (SIGTERM)"),
]


class Terminated(BaseException):
    """SIGTERM arrived: stop as Ctrl-C stops (a BaseException, so that no
    ``except Exception`` on the way swallows it)."""
