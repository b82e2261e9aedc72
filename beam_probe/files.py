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
    temporary file beside it (a hidden ``.beam_probe.*.tmp``:
    node_exporter's textfile collector reads only *.prom), flushed to disk,
    then renamed over it, so a reader never sees half a file. Any other
    existing path is never replaced, as node_exporter and OpenSSH treat
    their files: a device, a FIFO, a terminal (/dev/stdout, /dev/null) is
    written in place as a stream, a directory is refused. A link on the
    way is followed only if it is the user's (see _walk): one another user
    planted is refused, never followed. Through a link of the user's, an
    existing regular file is written in place (the link and the file are
    kept), and a name that does not exist yet is made, as if the user had
    named it. A file written in place must be ours or root's, and not
    a hard link of another name in a folder others may write (_in_place).

    Every name is opened relative to the folder the walk holds open, never
    again by its path: a folder on the way swapped for a link after it
    was looked at (rename(2) with RENAME_EXCHANGE, by whoever owns the
    folder above it) cannot redirect the write (issue 37: root's file was
    renamed into a root-only folder so, 1 try in ~2,800).

    ``mode`` is set exactly (a textfile must be readable by the
    collector); None creates the file 0600, narrowed by the umask
    (PRIVATE_FILE). OSError naming ``path`` (Refused, saying why, for a
    directory or another user's link, file or FIFO), the temporary file
    removed."""
    place = _walk(path)
    try:
        info = place.info
        if info is not None and stat.S_ISDIR(info.st_mode):
            raise NotRegular(f"{path} is a directory")
        if place.magic:
            # /dev/stdout: a descriptor of ours, written as it is.
            return _stream(place, path, pieces)
        if info is None or (stat.S_ISREG(info.st_mode)
                            and not place.through_link):
            return _replace(place.folder, place.name, pieces, mode, path)
        return _stream(place, path, pieces)
    finally:
        place.close()


# The kernel follows at most 40 links resolving one path (MAXSYMLINKS);
# a longer chain is ELOOP there, and here.
_MAX_LINKS = 40

# A folder is held open to make files in it and to open the next name of
# a path, not to list it: O_PATH needs no read permission (a drop folder
# may be write-only). O_NOFOLLOW makes a link on the way fail to open as
# a folder (ENOTDIR), so that it is read and judged, never followed.
_DIR_FLAGS = getattr(os, "O_PATH", os.O_RDONLY) | os.O_DIRECTORY \
    | os.O_CLOEXEC
_STEP_FLAGS = _DIR_FLAGS | os.O_NOFOLLOW


class _Place:
    """Where a walk ended: ``folder`` (held open) and the ``name`` in it
    ("." where the path names that folder itself), what the name is
    (``info``, its lstat; None while it does not exist, and then ``rest``
    are the names below it, for a Folder to make), whether the name was
    reached through a link (``through_link``), and whether that link is
    one of /proc's (``magic``: the kernel follows it to an open file, no
    path in between). ``where`` is the name's path, links resolved."""

    def __init__(self, folder: int, name: str, where: str,
                 info: os.stat_result | None, through_link: bool,
                 magic: bool = False, rest: list[str] | None = None
                 ) -> None:
        self.folder, self.name, self.where = folder, name, where
        self.info, self.through_link, self.magic = info, through_link, magic
        self.rest = rest or []

    def close(self) -> None:
        fd, self.folder = self.folder, -1
        if fd >= 0:
            os.close(fd)


def check_output(path: str, folder: bool = False) -> str:
    """Where writing ``path`` leads (its links resolved), or Refused if
    following a link on the way would trust another user. What the
    commands check before connecting; the writers walk again. A
    ``folder`` (for files of our naming) may be missing, folders above
    it too: they are made."""
    place = _walk(path, folder)
    place.close()
    return place.where


def _walk(path: str, missing_ok: bool = False) -> _Place:
    """Walk ``path`` as the kernel resolves it, holding each folder open
    and opening the next name relative to it with O_NOFOLLOW: what was
    judged on the way is what is written through. A symbolic link met is
    read (readlink relative to its folder) and followed only if it
    belongs to this user or root, in a folder of theirs that nobody else
    can change it in (closed to others, or sticky, as /tmp is): a link
    another user planted in a shared folder is how root was made to
    overwrite its own files (issue 37), and Linux's protected_symlinks
    stops that only where it is switched on (it was off there and here).
    A link in /proc (/dev/stdout's /proc/self/fd/1, to "pipe:[N]" or a
    file) is followed by the kernel, which goes to the open file itself
    without a path; nobody can plant one there.

    A folder on the way that does not exist is FileNotFoundError at once
    (write_whole makes none); with ``missing_ok`` (Folder makes them) the
    walk ends there, ``rest`` holding the names below it. The caller
    closes the place."""
    import errno

    absolute = path.startswith("/")
    fd = os.open("/" if absolute else ".", _DIR_FLAGS)
    here = "/" if absolute else os.getcwd()
    try:
        # Names still to resolve, the next one last.
        pending = path.split("/")[::-1]
        hops, through_link = 0, False
        while pending:
            part = pending.pop()
            if part in ("", "."):
                continue
            if part == "..":
                # The folder's own parent, as the kernel takes it.
                fd = _step(fd, os.open("..", _STEP_FLAGS, dir_fd=fd))
                here = os.path.dirname(here)
                continue
            last = not any(rest not in ("", ".") for rest in pending)
            step = os.path.join(here, part)
            try:
                fd = _step(fd, os.open(part, _STEP_FLAGS, dir_fd=fd))
                here = step
                continue
            except FileNotFoundError as exc:
                if not last and not missing_ok:
                    raise OSError(exc.errno, exc.strerror, step) from None
                rest = [p for p in pending[::-1] if p not in ("", ".")]
                if ".." in rest:  # the kernel cannot go back up either
                    raise OSError(exc.errno, exc.strerror, step) from None
                return _Place(fd, part, os.path.join(step, *rest), None,
                              through_link, rest=rest)
            except OSError as exc:
                if exc.errno not in (errno.ENOTDIR, errno.ELOOP):
                    raise OSError(exc.errno, exc.strerror, step) from None
            # Not a folder: a link, or (the last name) what is written.
            info = os.stat(part, dir_fd=fd, follow_symlinks=False)
            if not stat.S_ISLNK(info.st_mode):
                if not last:
                    raise OSError(errno.ENOTDIR, os.strerror(errno.ENOTDIR),
                                  step)
                return _Place(fd, part, step, info, through_link)
            _trust_link(path, step, info, here, os.fstat(fd))
            hops += 1
            if hops > _MAX_LINKS:
                raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), path)
            if _in_proc(fd):
                if last:
                    return _Place(fd, part, step, os.stat(part, dir_fd=fd),
                                  True, magic=True)
                here = os.path.join(here, os.readlink(part, dir_fd=fd))
                fd = _step(fd, os.open(part, _DIR_FLAGS, dir_fd=fd))
                continue
            through_link = through_link or last
            target = os.readlink(part, dir_fd=fd)
            if target.startswith("/"):
                fd = _step(fd, os.open("/", _DIR_FLAGS))
                here = "/"
            pending.extend(target.split("/")[::-1])
        return _Place(fd, ".", here, os.fstat(fd), through_link)
    except BaseException:
        os.close(fd)
        raise


def _step(old: int, new: int) -> int:
    """The walk moves on from the folder ``old`` to ``new``."""
    os.close(old)
    return new


_PROC: list[int] = []


def _in_proc(fd: int) -> bool:
    """Whether the folder ``fd`` is on /proc's file system."""
    if not _PROC:
        try:
            _PROC.append(os.stat("/proc").st_dev)
        except OSError:
            _PROC.append(-1)
    return os.fstat(fd).st_dev == _PROC[0]


def _closed(place: os.stat_result) -> bool:
    """Whether a folder (its stat) is this user's or root's, and nobody
    else may make or replace a name in it."""
    return place.st_uid in (os.geteuid(), 0) and not place.st_mode & (
        stat.S_IWGRP | stat.S_IWOTH)


def _trust_link(path: str, link: str, info: os.stat_result, folder: str,
                place: os.stat_result) -> None:
    """Refused unless the link ``link`` (met resolving ``path``) is this
    user's or root's, in a folder (``folder``, its stat ``place``) of this
    user's or root's that nobody else can write, or that is sticky (where
    only a link's owner and the folder's may remove or rename it)."""
    me = os.geteuid()
    # The message follows "cannot write PATH: ".
    shown = "it" if os.path.abspath(path) == link else link
    if info.st_uid not in (me, 0):
        raise Refused(f"{shown} is a symbolic link of another user (uid "
                      f"{info.st_uid}): not followed (name the file it "
                      "points to)")
    if not (_closed(place) or place.st_uid in (me, 0)
            and place.st_mode & stat.S_ISVTX):
        raise Refused(f"{shown} is a symbolic link in {folder}, which "
                      "another user may change: not followed (name the "
                      "file it points to)")


def _in_place(fd: int, place: _Place, path: str) -> None:
    """Refused unless the open file ``fd`` (the name ``place`` found) may
    be written in place: a regular file or FIFO must be this user's or
    root's (another user's FIFO would hand them what is written; their
    file is theirs to fill), and a regular file with other hard links in
    a folder others may write is refused too: anyone can hard-link root's
    file there where protected_hardlinks is off, and truncating the link
    would empty the original. Devices pass (only root can make one; a
    terminal belongs to whoever logged in on it)."""
    info = os.fstat(fd)
    shown = "it" if place.where == os.path.abspath(path) else place.where
    if stat.S_ISFIFO(info.st_mode) and info.st_uid not in (os.geteuid(), 0):
        raise Refused(f"{shown} is a FIFO of another user (uid "
                      f"{info.st_uid}): not written")
    if not stat.S_ISREG(info.st_mode):
        return
    if info.st_uid not in (os.geteuid(), 0):
        raise Refused(f"{shown} is a file of another user (uid "
                      f"{info.st_uid}): not written in place (name a file "
                      "of yours)")
    if info.st_nlink > 1 and not _closed(os.fstat(place.folder)):
        raise Refused(f"{shown} has {info.st_nlink - 1} other hard "
                      "link(s) and lies in a folder others may write: not "
                      "written in place (name a file of yours)")


# Files that hold what a run read from a node (snapshots: process names,
# tables, node names; often read as root) are made 0600 and their folders
# 0700, as the kernel makes a core dump 0600: a user's umask of 022 would
# otherwise let every local user read what root saw. The umask still
# applies (it can only take bits away); sharing a file is a chmod away.
PRIVATE_FILE, PRIVATE_FOLDER = 0o600, 0o700


def _replace(dir_fd: int, name: str, pieces: list[bytes],
             mode: int | None, shown: str) -> int:
    """Write ``pieces`` to a temporary file of the folder ``dir_fd``, made
    exclusively (O_EXCL|O_NOFOLLOW, under a random name), and rename it to
    ``name``. rename(2) replaces whatever ``name`` is, a symbolic link
    included, without following it: a link planted under that name is
    itself replaced, and whatever it pointed at is never opened. An error
    names ``shown``, the user's path, never the temporary file."""
    import binascii
    import errno

    try:
        while True:
            tmp = f".beam_probe.{binascii.hexlify(os.urandom(8)).decode()}" \
                ".tmp"
            try:
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL
                             | os.O_NOFOLLOW | os.O_CLOEXEC, PRIVATE_FILE,
                             dir_fd=dir_fd)
            except FileExistsError:
                continue  # someone's file (or link) of that name: another
            break
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror, shown) from None
    try:
        with os.fdopen(fd, "wb") as f:
            for piece in pieces:
                f.write(piece)
            f.flush()
            if mode is not None:
                os.fchmod(f.fileno(), mode)
            os.fsync(f.fileno())
        os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException as exc:
        try:
            os.unlink(tmp, dir_fd=dir_fd)
        except OSError:
            pass
        if not isinstance(exc, OSError) or isinstance(exc, Refused):
            raise
        if exc.errno == errno.EPERM:
            # A sticky folder (/tmp): only a file's owner (or the
            # folder's) may replace it; rename(2) says EPERM.
            try:
                owner = os.stat(name, dir_fd=dir_fd,
                                follow_symlinks=False).st_uid
            except OSError:
                owner = os.geteuid()
            if owner != os.geteuid() and \
                    os.fstat(dir_fd).st_mode & stat.S_ISVTX:
                # The message follows "cannot write PATH: ".
                raise Refused(f"it belongs to another user (uid {owner}), "
                              "in a sticky folder where only they may "
                              "replace it: not written") from None
        raise OSError(exc.errno, exc.strerror, shown) from None
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
    may be a link of theirs, never another user's (_walk refuses it); it
    is reached by the walk's descriptors, and a folder made here is made
    relative to its parent's, opened with O_NOFOLLOW and must be ours."""

    def __init__(self, path: str) -> None:
        import errno

        self.path = path
        place = _walk(path, missing_ok=True)
        try:
            if place.info is None:
                self.fd = _make_folders(place, path)
            elif stat.S_ISDIR(place.info.st_mode) and place.name == ".":
                self.fd, place.folder = place.folder, -1
            else:
                raise OSError(errno.ENOTDIR, os.strerror(errno.ENOTDIR),
                              path)
        finally:
            place.close()

    def write(self, name: str, pieces: list[bytes]) -> int:
        """``pieces`` to the file ``name`` of this folder, 0600 under the
        umask, replacing what was there (a link is not followed)."""
        if not name or "/" in name or name in (".", ".."):
            raise Refused(f"{name!r} is not a file name")
        return _replace(self.fd, name, pieces, None, self.join(name))

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


def _make_folders(place: _Place, path: str) -> int:
    """Make the missing folder ``place.name`` and those under it
    (``place.rest``), each 0700 (under the umask), relative to the one
    above it; the last one, held open."""
    fd, place.folder = place.folder, -1
    try:
        for name in [place.name, *place.rest]:
            try:
                os.mkdir(name, PRIVATE_FOLDER, dir_fd=fd)
            except FileExistsError:
                # Made by someone else between our look and our mkdir:
                # it must pass what a folder of ours must (opened
                # without following a link, owned by us).
                pass
            fd = _step(fd, os.open(name, _STEP_FLAGS, dir_fd=fd))
            if os.fstat(fd).st_uid != os.geteuid():
                raise Refused(f"{path} was replaced by someone else's "
                              "folder as it was made")
        return fd
    except BaseException:
        os.close(fd)
        raise


def _stream(place: _Place, path: str, pieces: list[bytes]) -> int:
    """Write ``pieces`` in place into the existing name ``place`` found:
    a device, a FIFO with a reader, a terminal, or the file a link of the
    user's names (a regular file there is truncated first: _in_place says
    which may be). Opened relative to its folder with O_NOFOLLOW (a /proc
    link excepted: the kernel takes it to the open file); never creates
    a file. A FIFO that nobody reads is an error at once, not a wait
    (O_NONBLOCK on open: ENXIO); a full device (/dev/full) raises
    ENOSPC."""
    import errno
    import fcntl

    try:
        fd = os.open(place.name, os.O_WRONLY | os.O_NONBLOCK | os.O_NOCTTY
                     | os.O_CLOEXEC | (0 if place.magic else os.O_NOFOLLOW),
                     dir_fd=place.folder)
    except OSError as exc:
        if exc.errno == errno.ENXIO:
            raise NotRegular(f"{path} is a FIFO or socket that nothing "
                             "reads") from None
        if exc.errno == errno.ELOOP:
            raise Refused("it became a symbolic link as it was opened: "
                          "not followed") from None
        raise OSError(exc.errno, exc.strerror, path) from None
    try:
        if not place.magic:
            _in_place(fd, place, path)
        if stat.S_ISREG(os.fstat(fd).st_mode):
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
    """``path`` opened to append (created if missing, 0644), and its stat.
    The last component is never followed if it is a symbolic link: a root
    cron job appending in a shared folder must not write where someone
    else's link points (NotRegular, naming it); a link among its folders
    is followed only if it is the user's (_walk), and the file is opened
    relative to the folder the walk holds. An existing file must pass
    what a file written in place must (_in_place: ours or root's, no hard
    link of another name in a shared folder)."""
    import errno

    place = _walk(path)
    try:
        if place.through_link or place.magic:
            raise NotRegular(f"{path} is a symbolic link: not followed "
                             "for appending (name the file itself)")
        if place.info is not None and stat.S_ISDIR(place.info.st_mode):
            raise NotRegular(f"{path} is a directory")
        try:
            fd = os.open(place.name, os.O_RDWR | os.O_APPEND | os.O_CREAT
                         | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY
                         | os.O_CLOEXEC, 0o644, dir_fd=place.folder)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise NotRegular(f"{path} is a symbolic link: not followed "
                                 "for appending (name the file itself)") \
                    from None
            raise OSError(exc.errno, exc.strerror, path) from None
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise NotRegular(f"{path} is {kind(info.st_mode)}, not a "
                                 "regular file")
            _in_place(fd, place, path)
            return fd, info
        except BaseException:
            os.close(fd)
            raise
    finally:
        place.close()


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
