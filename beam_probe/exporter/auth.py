"""Basic authentication against bcrypt hashes, cheap for the scraper.

bcrypt is slow on purpose (~70 ms at cost 10 here, doubling per step of
cost): paid on every scrape it would make each one that much later, and
let anyone who reaches the port spend our CPU for nothing. So, as the
exporter-toolkit does, a password that passed is remembered (per user,
password and hash: a hash changed in the file is checked afresh), and
only unremembered ones pay bcrypt, a few at once: past that, a request
waits a moment and is answered 503, so guessing cannot take every
thread, and Prometheus' remembered password never waits behind it.

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
# bcrypt checks at once (bcrypt releases the GIL while it hashes): two
# cores' worth, so a flood of wrong guesses holds two workers at most.
CHECKS_AT_ONCE = 2
# How long a request waits for one of them before its 503.
CHECK_WAIT = 2.0
# bcrypt reads 72 bytes at most (bcrypt 5 refuses longer ones).
MAX_PASSWORD = 72
# Only the "Basic " scheme and base64 of a user and a password.
MAX_HEADER = 1024

OK, DENIED, BUSY = "ok", "denied", "busy"


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
        self._checks = threading.BoundedSemaphore(CHECKS_AT_ONCE)

    def _token(self, user: bytes, password: bytes, hashed: bytes) -> bytes:
        return hmac.new(self._key, b"\0".join((user, password, hashed)),
                        hashlib.sha256).digest()

    def check(self, header: str | None) -> str:
        """OK, DENIED (no header, a malformed one, a wrong user or
        password) or BUSY (no bcrypt check free in time)."""
        credentials = _credentials(header)
        if credentials is None:
            return DENIED
        user, password = credentials
        try:
            name = user.decode("utf-8")
        except UnicodeDecodeError:
            return DENIED
        hashed = self._users.get(name)
        token = self._token(user, password, hashed or b"")
        with self._lock:
            if hashed is not None and token in self._passed:
                self._passed.move_to_end(token)
                return OK
        if len(password) > MAX_PASSWORD:
            return DENIED
        if not self._checks.acquire(timeout=CHECK_WAIT):
            return BUSY
        try:
            # checkpw compares in constant time.
            passed = self._bcrypt.checkpw(password, hashed or self._stand_in)
        except ValueError:
            passed = False
        finally:
            self._checks.release()
        if not passed or hashed is None:
            return DENIED
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


__all__ = ["BUSY", "DENIED", "OK", "BasicAuth"]
