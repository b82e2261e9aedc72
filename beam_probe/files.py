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
    """Write ``pieces`` to ``path``; the bytes written. The one writer of
    a file the user names (snapshot -o, check --textfile, alloc --raw,
    plot -o).

    A regular file (or none yet) is replaced whole: the pieces go to a
    temporary file beside ``path`` (a hidden ``.beam_probe.*.tmp``:
    node_exporter's textfile collector reads only *.prom), flushed to disk,
    then renamed over ``path``, so a reader never sees half a file. Any
    other existing path is never replaced, as node_exporter and OpenSSH
    treat their files: a device, a FIFO, a terminal or a symbolic link
    (/dev/stdout, /dev/null) is written in place as a stream
    (write_stream), a directory is refused. A link on the way is followed
    only if it is the user's (check_output): one another user planted is
    refused, never followed. ``mode`` is set exactly (a textfile must be
    readable by the collector); None creates the file 0600, narrowed by
    the umask (PRIVATE_FILE). OSError as the system raised it (Refused,
    naming the cause, for a directory or another user's link or FIFO),
    the temporary file removed."""
    resolved, through_link, missing = _resolve(path)
    try:
        info: os.stat_result | None = os.lstat(resolved)
    except (FileNotFoundError, NotADirectoryError):
        info = None
    if info is not None and stat.S_ISDIR(info.st_mode):
        raise NotRegular(f"{path} is a directory")
    if through_link:
        if info is not None:
            # A link of the user's: written in place, where it leads.
            return write_stream(resolved, pieces, follow=False)
        # One that leads nowhere we can name (/proc/self/fd/1 to
        # "pipe:[N]"), or to nothing yet: opened as the user wrote it
        # (each link on the way was checked), unless the name it lacks
        # is in a folder where another user could make it a link now.
        assert missing is not None
        if not _closed(missing):
            raise Refused(f"it is a symbolic link to {resolved}, which "
                          f"does not exist, in {missing}, where another "
                          "user may make it: not followed")
        return write_stream(path, pieces, follow=True)
    if info is not None and not stat.S_ISREG(info.st_mode):
        return write_stream(resolved, pieces, follow=False)
    folder, name = os.path.split(resolved)
    dir_fd = os.open(folder, _DIR_FLAGS)
    try:
        return _replace(dir_fd, name, pieces, mode)
    finally:
        os.close(dir_fd)


# The kernel follows at most 40 links resolving one path (MAXSYMLINKS);
# a longer chain is ELOOP there, and here.
_MAX_LINKS = 40


def check_output(path: str, folder: bool = False) -> str:
    """Where writing ``path`` leads (its links resolved), or Refused if
    following a link on the way would trust another user. What the
    commands check before connecting; the writers check again. A
    ``folder`` (for files of our naming) may be missing, folders above
    it too: they are made."""
    return _resolve(path, folder)[0]


def _resolve(path: str, missing_ok: bool = False
             ) -> tuple[str, bool, str | None]:
    """``path`` with every symbolic link on the way resolved; whether its
    last name was reached through a link; and, when that last name does
    not exist (yet), the folder it would be in. Refused, naming the link,
    if following one would trust another user: a link is followed only if
    it belongs to this user or root, in a folder of theirs that nobody
    else can change it in (closed to others, or sticky, as /tmp is). A
    link another user planted in a shared folder is how root was made to
    overwrite its own files (issue 37): Linux's protected_symlinks stops
    that only where it is switched on, and it was off there and here. A
    folder on the way that does not exist is FileNotFoundError at once
    (write_whole makes none), so that nobody can make it a link after
    this look; with ``missing_ok`` (Folder makes them) the walk ends
    there.

    The links are read one by one as the kernel resolves them, so that a
    chain (our link to someone's link) is judged link by link; a link to
    what no path names (/proc/self/fd/1 to "pipe:[N]") ends the walk."""
    import errno

    here = "/" if path.startswith("/") else os.getcwd()
    # Names still to resolve, the next one last.
    pending = path.split("/")[::-1]
    hops, through_link = 0, False
    while pending:
        part = pending.pop()
        if part in ("", "."):
            continue
        if part == "..":
            here = os.path.dirname(here)
            continue
        step = os.path.join(here, part)
        try:
            info = os.lstat(step)
        except (FileNotFoundError, NotADirectoryError) as exc:
            if not missing_ok and any(rest not in ("", ".")
                                      for rest in pending):
                raise OSError(exc.errno, exc.strerror, step) from None
            return (os.path.join(step, *pending[::-1]), through_link,
                    here)
        if not stat.S_ISLNK(info.st_mode):
            here = step
            continue
        _trust_link(path, step, info, here)
        hops += 1
        if hops > _MAX_LINKS:
            raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), path)
        through_link = through_link or not any(
            rest not in ("", ".") for rest in pending)
        target = os.readlink(step)
        if target.startswith("/"):
            here = "/"
        pending.extend(target.split("/")[::-1])
    return here, through_link, None


def _closed(folder: str) -> bool:
    """Whether ``folder`` is this user's or root's, and nobody else may
    make or replace a name in it."""
    place = os.stat(folder)
    return place.st_uid in (os.geteuid(), 0) and not place.st_mode & (
        stat.S_IWGRP | stat.S_IWOTH)


def _trust_link(path: str, link: str, info: os.stat_result,
                folder: str) -> None:
    """Refused unless the link ``link`` (met resolving ``path``) is this
    user's or root's, in a folder of this user's or root's that nobody
    else can write, or that is sticky (where only a link's owner and the
    folder's may remove or rename it)."""
    me = os.geteuid()
    # The message follows "cannot write PATH: ".
    shown = "it" if os.path.abspath(path) == link else link
    if info.st_uid not in (me, 0):
        raise Refused(f"{shown} is a symbolic link of another user (uid "
                      f"{info.st_uid}): not followed (name the file it "
                      "points to)")
    place = os.stat(folder)
    if not (_closed(folder) or place.st_uid in (me, 0)
            and place.st_mode & stat.S_ISVTX):
        raise Refused(f"{shown} is a symbolic link in {folder}, which "
                      "another user may change: not followed (name the "
                      "file it points to)")


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
    may be a link of theirs (resolved once, here), never another user's
    (check_output refuses it); one we just made is opened with
    O_NOFOLLOW and must be ours."""

    def __init__(self, path: str) -> None:
        self.path = path
        _resolve(path, missing_ok=True)
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


def write_stream(path: str, pieces: list[bytes], follow: bool = True
                 ) -> int:
    """Write ``pieces`` into an existing ``path`` in place: a device, a
    FIFO with a reader, a terminal, or what a symbolic link names (a
    regular file there is truncated first). Never creates a file. A FIFO
    that nobody reads is an error at once, not a wait (O_NONBLOCK on open:
    ENXIO); a full device (/dev/full) raises ENOSPC. Without ``follow``,
    a link found at ``path`` is refused (it was not one when looked at),
    and a FIFO must be this user's or root's: one another user made would
    hand them what we write (devices only root can make)."""
    import errno
    import fcntl

    try:
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK | os.O_NOCTTY
                     | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW))
    except OSError as exc:
        if exc.errno == errno.ENXIO:
            raise NotRegular(f"{path} is a FIFO or socket that nothing "
                             "reads") from None
        if exc.errno == errno.ELOOP and not follow:
            raise Refused("it became a symbolic link as it was opened: "
                          "not followed") from None
        raise
    try:
        info = os.fstat(fd)
        if not follow and stat.S_ISFIFO(info.st_mode) and \
                info.st_uid not in (os.geteuid(), 0):
            raise Refused(f"it is a FIFO of another user (uid "
                          f"{info.st_uid}): not written")
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
    link points (NotRegular, naming it); a link among its folders is
    followed only if it is the user's (check_output)."""
    import errno

    _resolve(path)
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
