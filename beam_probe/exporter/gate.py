"""Basic auth at the front door, before a request takes a worker.

With the password checked on the workers, a flood of wrong passwords
held every one of them, each waiting up to 2 s for one of two bcrypt
checks, and filled the queue behind them: a remembered password waited
22.2 s behind 900 guesses, past Prometheus' timeout (issue 37, round 5).
So front.py puts each whole head to ``quick`` on its loop thread: a
remembered password (an HMAC, microseconds) goes on to the workers; no
credentials, or malformed ones, are answered 401 there and then; only
what bcrypt must tell goes to ``slow``, on the front door's GATE_WORKERS
threads, with a queue of GATE_QUEUED and 503 at once past it.

The gate's verdict is the request's: the handler does not look at the
header again, so how this reads a head cannot differ from how a worker
would.
"""

from __future__ import annotations

from typing import Iterable

from beam_probe.exporter.auth import CHECK, OK, BasicAuth
from beam_probe.exporter.front import PASS, SLOW, Refusal, short_reply

CHALLENGE = 'WWW-Authenticate: Basic realm="beam-probe", charset="UTF-8"\r\n'


def authorization(head: bytes) -> str | None:
    """The request head's Authorization header; None without one, or with
    more than one (then no credentials count)."""
    found: str | None = None
    lines = head.split(b"\n")
    for line in lines[1:]:
        line = line.rstrip(b"\r")
        if not line:
            break
        name, colon, value = line.partition(b":")
        if colon and name.strip().lower() == b"authorization":
            if found is not None:
                return None
            found = value.strip().decode("latin-1")
    return found


class PasswordGate:
    """front.Gate for basic auth: ``headers`` are the web configuration's,
    sent with the gate's own answers as with every other."""

    def __init__(self, auth: BasicAuth,
                 headers: Iterable[tuple[str, str]] = ()) -> None:
        self._auth = auth
        extra = "".join(f"{name}: {value}\r\n" for name, value in headers)
        self.unauthorized = Refusal(
            short_reply(401, "Unauthorized", CHALLENGE + extra),
            "unauthorized")
        self.busy = Refusal(
            short_reply(503, "Service Unavailable: busy checking passwords",
                        "Retry-After: 1\r\n" + extra), "auth_busy")

    def quick(self, head: bytes) -> str | Refusal:
        verdict = self._auth.quick(authorization(head))
        if verdict == OK:
            return PASS
        return SLOW if verdict == CHECK else self.unauthorized

    def slow(self, head: bytes) -> str | Refusal:
        if self._auth.check(authorization(head)) == OK:
            return PASS
        return self.unauthorized


__all__ = ["PasswordGate", "authorization"]
