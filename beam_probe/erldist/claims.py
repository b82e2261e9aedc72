"""Claiming a name of the pool on this machine before using it on a node.

Two probes on one machine that pick the same pool name for the same node
race in the node's handshake code: OTP's dist_util keeps one pending
handshake per name. Which of the two loses depends on how the node's name
sorts against ours (net_kernel compares the atoms): a node whose name sorts
*higher* answers the second ``nok``, which we treat as a busy name; a node
whose name sorts *lower* shuts the first handshake down and answers the
second ``ok_simultaneous``. The first then sees its connection closed
after status ``ok``, before the challenge or even after its challenge
reply, where a close otherwise means a wrong cookie. Measured on OTP 25
against ``app1@HOST``: 10-13 of 28 probes started together failed.

So a probe first claims the name on this machine, for this node, and holds
the claim for as long as its connection lives; probes here never meet in
the node's handshake code. (Probes on other machines have other host parts
in their names, so they never share a name with ours.) The handshake still
copes with a race it loses (a probe of an older beam-probe, a machine with
our host name): see connect() in connection.py.

A claim is a Linux abstract socket address: bound by one process at a time,
released by the kernel when the process ends however it ends (kill -9
included), nothing left in the file system, no permission shared between
users. Elsewhere it is an flock() on a file in a per-user folder of /tmp.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import errno
import os
import socket
import sys

if TYPE_CHECKING:
    from hashlib import md5
else:
    try:  # The builtin module avoids loading OpenSSL through hashlib (3 ms)
        from _md5 import md5
    except ImportError:  # pragma: no cover - CPython always has it
        from hashlib import md5


class Claim:
    """A name held on this machine; release() (or our exit) frees it."""

    def __init__(self, holder: object) -> None:
        self._holder = holder

    def release(self) -> None:
        holder, self._holder = self._holder, None
        if isinstance(holder, socket.socket):
            holder.close()
        elif isinstance(holder, int):
            os.close(holder)


def _key(node: str, name: str) -> str:
    # The node as a user may spell it (host in any case), hashed: an
    # abstract address holds at most 107 bytes, a node name up to 255 + host.
    return md5(node.lower().encode("utf-8", "replace")).hexdigest()[:24] \
        + "-" + name


def claim(node: str, name: str, abstract: bool | None = None
          ) -> Claim | None:
    """Hold ``name`` for connecting to ``node``; None when another probe on
    this machine holds it now. Where no claim can be made at all (no
    abstract sockets, an unwritable temporary directory), an empty claim:
    the handshake's own rules then keep probes apart, more slowly."""
    if abstract is None:
        abstract = sys.platform.startswith("linux")
    key = _key(node, name)
    if abstract:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.bind("\0beam-probe/" + key)
        except OSError as exc:
            sock.close()
            if exc.errno == errno.EADDRINUSE:
                return None
            return Claim(None)
        return Claim(sock)
    return _flock(key)


def _flock(key: str) -> Claim | None:
    import fcntl

    # /tmp, not $TMPDIR: probes of one user with different TMPDIRs must
    # still meet here.
    folder = os.path.join("/tmp", f"beam-probe-{os.getuid()}")
    try:
        os.makedirs(folder, mode=0o700, exist_ok=True)
        fd = os.open(os.path.join(folder, key), os.O_RDWR | os.O_CREAT
                     | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    except OSError:
        return Claim(None)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        os.close(fd)
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            return None
        return Claim(None)
    return Claim(fd)


__all__ = ["Claim", "claim"]
