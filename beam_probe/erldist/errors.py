"""The errors of the distribution layer, each with the exit code the
command line gives it.

They live here, beside the protocol that raises them, so that nothing in
erldist imports from the layers above; beam_probe.errors adds the tool's
own (a process that is not there, output that cannot be written) and the
table of exit codes the manual shows (docs/manual/exit-codes.md).
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


class UsageError(ProbeError):
    """Arguments that make no sense (click's own usage errors also exit 2)."""

    exit_code = 2
    label = "usage"


class TlsConfigError(UsageError):
    """A TLS option or -ssl_dist_optfile that cannot be used."""

    label = "TLS settings"


