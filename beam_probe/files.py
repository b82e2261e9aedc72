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


class NotRegular(OSError):
    """The path exists but is not a regular file."""


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


def write_whole(path: str, pieces: list[bytes], mode: int = 0o644) -> int:
    """Write ``pieces`` to ``path``; the bytes written.

    A regular file (or none yet) is replaced whole: the pieces go to a
    temporary file beside ``path`` (a hidden ``.beam_probe.*.tmp``:
    node_exporter's textfile collector reads only *.prom), flushed to disk,
    then renamed over ``path``, so a reader never sees half a file. Any
    other existing path is never replaced, as node_exporter and OpenSSH
    treat their files: a device, a FIFO, a terminal or a symbolic link
    (/dev/stdout, /dev/null) is written in place as a stream
    (write_stream), a directory is refused. OSError as the system raised
    it (NotRegular for a directory), the temporary file removed."""
    import tempfile

    try:
        info = os.lstat(path)
    except FileNotFoundError:
        info = None
    if info is not None and stat.S_ISDIR(info.st_mode):
        raise NotRegular(f"{path} is a directory")
    if info is not None and not stat.S_ISREG(info.st_mode):
        return write_stream(path, pieces)
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".beam_probe.",
                               suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            for piece in pieces:
                f.write(piece)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return sum(len(piece) for piece in pieces)


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
    if isinstance(exc, NotRegular):
        return str(exc)
    return exc.strerror or str(exc)
