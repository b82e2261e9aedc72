"""Reading the user's files safely: regular files only, never blocking, a
bounded size, and trust checks for files whose contents run on nodes.

A path that names a FIFO, a device or a socket would block a read forever
or stream without end; a cron job must not hang on one. Files are opened
with O_NONBLOCK (opening a FIFO does not wait for a writer) and checked
with fstat on the open descriptor, so the check and the read are about the
same file.
"""

from __future__ import annotations

import os
import stat

_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"),
          (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"))


class Refused(OSError):
    """A path beam-probe will not use as it stands; the message says why."""


class NotRegular(Refused):
    """The path exists but is not a regular file."""


def shell_path(path: str) -> str:
    """A file's path as a command to paste takes it where a node's name
    may stand: quoted, with a './' where it has no '/' (a bare word is
    read as a node)."""
    import shlex

    return shlex.quote(path if "/" in path else "./" + path)


def kind(mode: int) -> str:
    for test, name in _KINDS:
        if test(mode):
            return name
    return "not a regular file"


def open_regular(path: str, flags: int = os.O_RDONLY,
                 mode: int = 0o644) -> tuple[int, os.stat_result]:
    """An open descriptor of ``path`` and its stat; NotRegular if it is not
    a regular file. ``mode`` is for a file O_CREAT makes. The caller closes
    the descriptor."""
    fd = os.open(path, flags | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC,
                 mode)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise NotRegular(f"{path} is {kind(info.st_mode)}, not a "
                             "regular file")
        return fd, info
    except BaseException:
        os.close(fd)
        raise


def write_whole(path: str, pieces: list[bytes], mode: int | None = 0o644
                ) -> int:
    """Write ``pieces`` to ``path``; the bytes written.

    A regular file (or none yet) is replaced whole: the pieces go to a
    temporary file beside ``path`` (a hidden ``.beam_probe.*.tmp``:
    node_exporter's textfile collector reads only *.prom), flushed to disk,
    then renamed over ``path``, so a reader never sees half a file. Any
    other existing path is never replaced, as node_exporter and OpenSSH
    treat their files: a device, a FIFO, a terminal or a symbolic link
    (/dev/stdout, /dev/null) is written in place as a stream
    (write_stream), a directory is refused. The user named this path, so
    a link in it is theirs to follow; names beam-probe picks itself in a
    folder go through Folder, which never follows one. ``mode`` is set
    exactly (a textfile must be readable by the collector); None creates
    the file 0600, narrowed by the umask (PRIVATE_FILE). OSError as the
    system raised it (NotRegular for a directory), the temporary file
    removed."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        info = None
    if info is not None and stat.S_ISDIR(info.st_mode):
        raise NotRegular(f"{path} is a directory")
    if info is not None and not stat.S_ISREG(info.st_mode):
        return write_stream(path, pieces)
    folder, name = os.path.split(os.path.abspath(path))
    dir_fd = os.open(folder, _DIR_FLAGS)
    try:
        return _replace(dir_fd, name, pieces, mode)
    finally:
        os.close(dir_fd)


# Files that hold what a run read from a node (snapshots: process names,
# tables, node names; often read as root) are made 0600 and their folders
# 0700, as the kernel makes a core dump 0600: a user's umask of 022 would
# otherwise let every local user read what root saw. The umask still
# applies (it can only take bits away); sharing a file is a chmod away.
PRIVATE_FILE, PRIVATE_FOLDER = 0o600, 0o700

# A folder is held open to make files in it, not to list it: O_PATH needs
# no read permission (a drop folder may be write-only), where it exists.
_DIR_FLAGS = getattr(os, "O_PATH", os.O_RDONLY) | os.O_DIRECTORY \
    | os.O_CLOEXEC


def _replace(dir_fd: int, name: str, pieces: list[bytes],
             mode: int | None) -> int:
    """Write ``pieces`` to a temporary file of the folder ``dir_fd``, made
    exclusively (O_EXCL|O_NOFOLLOW, under a random name), and rename it to
    ``name``. rename(2) replaces whatever ``name`` is, a symbolic link
    included, without following it: a link planted under that name is
    itself replaced, and whatever it pointed at is never opened."""
    import binascii

    while True:
        tmp = f".beam_probe.{binascii.hexlify(os.urandom(8)).decode()}.tmp"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL
                         | os.O_NOFOLLOW | os.O_CLOEXEC, PRIVATE_FILE,
                         dir_fd=dir_fd)
        except FileExistsError:
            continue  # someone's file (or link) of that name: another
        break
    try:
        with os.fdopen(fd, "wb") as f:
            for piece in pieces:
                f.write(piece)
            f.flush()
            if mode is not None:
                os.fchmod(f.fileno(), mode)
            os.fsync(f.fileno())
        os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        try:
            os.unlink(tmp, dir_fd=dir_fd)
        except OSError:
            pass
        raise
    return sum(len(piece) for piece in pieces)


class Folder:
    """A folder beam-probe writes files into under names it picks itself
    (a file per node of snapshot --cluster -o DIR, leak-hunt's snapshots):
    opened once, made 0700 (narrowed by the umask) where it is missing,
    and every file in it written by write(), which never follows a link.

    Why a temporary file renamed into place rather than O_EXCL on the
    name itself: O_EXCL would refuse every second run into the same
    folder, and let any user who can write there block us by planting
    the name; a rename replaces a planted link or file without opening
    it, and a reader never sees half a file. The folder the user named
    is theirs to be a link (resolved once, here); one we just made is
    opened with O_NOFOLLOW and must be ours."""

    def __init__(self, path: str) -> None:
        self.path = path
        created = _make_folders(path)
        self.fd = os.open(path, _DIR_FLAGS
                          | (os.O_NOFOLLOW if created else 0))
        if created and os.fstat(self.fd).st_uid != os.geteuid():
            os.close(self.fd)
            raise Refused(f"{path} was replaced by someone else's folder "
                          "as it was made")

    def write(self, name: str, pieces: list[bytes]) -> int:
        """``pieces`` to the file ``name`` of this folder, 0600 under the
        umask, replacing what was there (a link is not followed)."""
        if not name or "/" in name or name in (".", ".."):
            raise Refused(f"{name!r} is not a file name")
        return _replace(self.fd, name, pieces, None)

    def join(self, name: str) -> str:
        return os.path.join(self.path, name)

    def close(self) -> None:
        fd, self.fd = self.fd, -1
        if fd >= 0:
            os.close(fd)

    def __enter__(self) -> "Folder":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _make_folders(path: str) -> bool:
    """Make ``path`` and any missing folder above it, each 0700 (under the
    umask); whether ``path`` itself was made here."""
    missing = []
    here = os.path.abspath(path)
    while not os.path.lexists(here):
        missing.append(here)
        parent = os.path.dirname(here)
        if parent == here:
            break
        here = parent
    for folder in reversed(missing):
        try:
            os.mkdir(folder, PRIVATE_FOLDER)
        except FileExistsError:
            # Made by someone else between our look and our mkdir: treated
            # as made here, so it must pass what a folder of ours must
            # (opened without following a link, owned by us).
            pass
    return bool(missing)


def write_stream(path: str, pieces: list[bytes]) -> int:
    """Write ``pieces`` into an existing ``path`` in place: a device, a
    FIFO with a reader, a terminal, or what a symbolic link names (a
    regular file there is truncated first). Never creates a file. A FIFO
    that nobody reads is an error at once, not a wait (O_NONBLOCK on open:
    ENXIO); a full device (/dev/full) raises ENOSPC."""
    import errno
    import fcntl

    try:
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK | os.O_NOCTTY
                     | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ENXIO:
            raise NotRegular(f"{path} is a FIFO or socket that nothing "
                             "reads") from None
        raise
    try:
        info = os.fstat(fd)
        if stat.S_ISREG(info.st_mode):
            os.ftruncate(fd, 0)
        # Blocking from here: a reader that is slow must not lose bytes.
        fcntl.fcntl(fd, fcntl.F_SETFL,
                    fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
        written = 0
        for piece in pieces:
            view = memoryview(piece)
            while view:
                n = os.write(fd, view)
                view = view[n:]
                written += n
        return written
    finally:
        os.close(fd)


def open_append(path: str) -> tuple[int, os.stat_result]:
    """``path`` opened to append (created if missing), and its stat. The
    last component is never followed if it is a symbolic link: a root cron
    job appending in a shared folder must not write where someone else's
    link points (NotRegular, naming it)."""
    import errno

    try:
        return open_regular(path, os.O_RDWR | os.O_APPEND | os.O_CREAT
                            | os.O_NOFOLLOW)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise NotRegular(f"{path} is a symbolic link: not followed "
                             "for appending (name the file itself)") \
                from None
        raise


def read_regular(path: str, limit: int) -> tuple[bytes, os.stat_result]:
    """Up to ``limit`` bytes of a regular file, and its stat. Raises
    OSError (NotRegular for FIFOs and the like); a file larger than
    ``limit`` raises ValueError."""
    fd, info = open_regular(path)
    try:
        if info.st_size > limit:
            raise ValueError(f"{path} is {info.st_size} bytes, over the "
                             f"{limit}-byte limit")
        chunks, size = [], 0
        while size <= limit:
            chunk = os.read(fd, limit + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > limit:
            raise ValueError(f"{path} is over the {limit}-byte limit")
        return b"".join(chunks), info
    finally:
        os.close(fd)


def trusted(info: os.stat_result) -> bool:
    """Whether a file or folder is ours alone to write, as ssh asks of its
    own files: owned by this user, and not writable by group or others."""
    return info.st_uid == os.geteuid() and not info.st_mode & (
        stat.S_IWGRP | stat.S_IWOTH)


def error_text(exc: OSError) -> str:
    """An OSError as a short phrase: 'No such file or directory'."""
    if isinstance(exc, Refused):
        return str(exc)
    return exc.strerror or str(exc)
