"""Basic authentication against bcrypt hashes, cheap for the scraper.

bcrypt is slow on purpose (~70 ms at cost 10 here, doubling per step of
cost): paid on every scrape it would make each one that much later, and
let anyone who reaches the port spend our CPU for nothing. So, as the
exporter-toolkit does, a password that passed is remembered (per user,
password and hash: a hash changed in the file is checked afresh).
``quick`` answers what needs no bcrypt (a remembered password, no or
malformed credentials) in microseconds; ``check`` pays bcrypt for the
rest, on threads of the front door's own (front.py, gate.py), so that
guesses never hold the threads that answer Prometheus.

What is remembered is an HMAC of the user and password under a key made
at start, never the password.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import threading
from collections import OrderedDict
from typing import Mapping

# Passwords that passed, remembered: a handful of scrapers is the use.
MAX_REMEMBERED = 256
# bcrypt reads 72 bytes at most (bcrypt 5 refuses longer ones).
MAX_PASSWORD = 72
# Only the "Basic " scheme and base64 of a user and a password.
MAX_HEADER = 1024

# CHECK: only bcrypt can tell (quick's answer, never check's).
OK, DENIED, CHECK = "ok", "denied", "check"


class BasicAuth:
    """Checks an ``Authorization`` header against ``users`` (name ->
    bcrypt hash)."""

    def __init__(self, users: Mapping[str, bytes]) -> None:
        import bcrypt

        self._bcrypt = bcrypt
        self._users = dict(users)
        # An unknown user is checked against a real hash all the same, so
        # that its answer takes as long as a wrong password's.
        self._stand_in = next(iter(self._users.values()))
        self._key = os.urandom(32)
        self._passed: OrderedDict[bytes, None] = OrderedDict()
        self._lock = threading.Lock()

    def _token(self, user: bytes, password: bytes, hashed: bytes) -> bytes:
        return hmac.new(self._key, b"\0".join((user, password, hashed)),
                        hashlib.sha256).digest()

    def quick(self, header: str | None) -> str:
        """OK (a remembered password), DENIED (no header, a malformed one,
        a password bcrypt would not read) or CHECK (only bcrypt can tell:
        a wrong or new password, an unknown user). Microseconds."""
        credentials = _credentials(header)
        if credentials is None:
            return DENIED
        user, password = credentials
        try:
            name = user.decode("utf-8")
        except UnicodeDecodeError:
            return DENIED
        if len(password) > MAX_PASSWORD:
            return DENIED
        hashed = self._users.get(name)
        if hashed is None:
            # An unknown user is checked against a real hash all the same,
            # so that its answer takes as long as a wrong password's.
            return CHECK
        token = self._token(user, password, hashed)
        with self._lock:
            if token in self._passed:
                self._passed.move_to_end(token)
                return OK
        return CHECK

    def check(self, header: str | None) -> str:
        """OK or DENIED, paying bcrypt unless ``quick`` can tell: the
        caller bounds how many run at once (bcrypt releases the GIL while
        it hashes, so each holds a core)."""
        verdict = self.quick(header)
        if verdict != CHECK:
            return verdict
        credentials = _credentials(header)
        assert credentials is not None
        user, password = credentials
        hashed = self._users.get(user.decode("utf-8"))
        try:
            # checkpw compares in constant time.
            passed = self._bcrypt.checkpw(password, hashed or self._stand_in)
        except ValueError:
            passed = False
        if not passed or hashed is None:
            return DENIED
        token = self._token(user, password, hashed)
        with self._lock:
            self._passed[token] = None
            while len(self._passed) > MAX_REMEMBERED:
                self._passed.popitem(last=False)
        return OK


def _credentials(header: str | None) -> tuple[bytes, bytes] | None:
    if not header or len(header) > MAX_HEADER:
        return None
    scheme, _, encoded = header.strip().partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        decoded = base64.b64decode(encoded.strip(), validate=True)
    except (binascii.Error, ValueError):
        return None
    user, colon, password = decoded.partition(b":")
    if not colon:
        return None
    return user, password


__all__ = ["CHECK", "DENIED", "OK", "BasicAuth"]
