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
copes with a race it loses (a probe of an older beam-probe, another user's
probe, a machine with our host name): see connect() in connection.py.

A claim is an flock() on a file in a folder of this user's alone: released
by the kernel when the process ends however it ends (kill -9 included).
Claims are per user. They were Linux abstract socket addresses
(``\\0beam-probe/<md5>-beam_probe_N``), which any local user can bind
first: another user holding the eight names of a node made every probe of
it fail. Nothing shared between users can be held so that others cannot
squat it, so each user claims among their own probes only; two users'
probes that pick one name at one instant meet in the handshake as a probe
of an older beam-probe would, and the one that loses tries another name.
The claim files stay (empty, at most eight a node): removing one as
another probe opens it would let two probes hold one name.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import errno
import os

if TYPE_CHECKING:
    from hashlib import md5
else:
    try:  # The builtin module avoids loading OpenSSL through hashlib (3 ms)
        from _md5 import md5
    except ImportError:  # pragma: no cover - CPython always has it
        from hashlib import md5


class Claim:
    """A name held on this machine; release() (or our exit) frees it."""

    def __init__(self, holder: int | None) -> None:
        self._holder = holder

    def release(self) -> None:
        holder, self._holder = self._holder, None
        if holder is not None:
            os.close(holder)


def _key(node: str, name: str) -> str:
    # The node as a user may spell it (host in any case), hashed: a node
    # name may be 255 characters and a host, too long for a file name.
    return md5(node.lower().encode("utf-8", "replace")).hexdigest()[:24] \
        + "-" + name


# Where the claim folder is looked for first: /tmp, not $TMPDIR, and not
# $XDG_RUNTIME_DIR first, because all of one user's probes must meet in
# one folder whatever their environment (a cron job has no
# XDG_RUNTIME_DIR, a shell has one). The tests point it elsewhere.
TMP = "/tmp"


def _candidates() -> list[tuple[str, bool]]:
    """The folders a claim may live in, in order, and whether the folders
    above one may be made: /tmp/beam-probe-UID; if someone else made that
    first (it must be ours: a folder another user owns or may enter lets
    them hold our names), $XDG_RUNTIME_DIR (made by the login manager,
    the user's alone, but only in a login session), then the user's
    cache, as node/forms.py finds it."""
    found = [(os.path.join(TMP, f"beam-probe-{os.geteuid()}"), False)]
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isabs(runtime):
        found.append((os.path.join(runtime, "beam-probe"), False))
    cache = os.environ.get("BEAM_PROBE_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(
            os.path.expanduser("~"), ".cache"), "beam-probe")
    if os.path.isabs(cache):
        found.append((os.path.join(cache, "claims"), True))
    return found


def _open_ours(path: str) -> int | None:
    """A descriptor of ``path`` if it is a folder (not a link) owned by us
    that no one else may enter: a user who can open a claim file, even to
    read, can flock it and hold the name. Checked on the open descriptor,
    so the folder checked is the folder used."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
                     | os.O_CLOEXEC)
    except OSError:
        return None
    info = os.fstat(fd)
    if info.st_uid == os.geteuid() and not info.st_mode & 0o077:
        return fd
    os.close(fd)
    return None


def _folder() -> int | None:
    """The first candidate folder that is ours, made 0700 where missing,
    open; None when there is none (no claims: the handshake's rules)."""
    for path, parents in _candidates():
        try:
            if parents:
                os.makedirs(os.path.dirname(path), mode=0o700,
                            exist_ok=True)
            os.mkdir(path, 0o700)
        except OSError:
            pass  # there already, or not to be made here
        fd = _open_ours(path)
        if fd is not None:
            return fd
    return None


def claim(node: str, name: str) -> Claim | None:
    """Hold ``name`` for connecting to ``node``; None when another probe of
    this user holds it now. Where no claim can be made at all (no folder
    of ours to be had), an empty claim: the handshake's own rules then
    keep probes apart, more slowly."""
    import fcntl

    folder = _folder()
    if folder is None:
        return Claim(None)
    try:
        fd = os.open(_key(node, name), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC
                     | os.O_NOFOLLOW, 0o600, dir_fd=folder)
    except OSError:
        return Claim(None)
    finally:
        os.close(folder)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        os.close(fd)
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            return None
        return Claim(None)
    return Claim(fd)


__all__ = ["Claim", "claim"]
