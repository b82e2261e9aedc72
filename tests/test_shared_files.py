"""Files on a shared machine (issue 27): the files beam-probe names itself
in a folder (snapshot --cluster -o DIR, leak-hunt --save DIR, leak-hunt
--cluster) never follow another user's link planted under that name, are
0600 in folders made 0700, and fit a file name whatever the node's name;
a place that cannot take them (under a regular file, a read-only file
system) is one line and exit 11 (2 for a file where a folder is meant),
never exit 1.

The other user is real where it matters: links planted by a child of uid
65534 (nobody) in a world-writable sticky folder, as /tmp is."""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
import tempfile
import time
import uuid

import pytest

from beam_probe.erldist.terms import Atom
from beam_probe.errors import OutputFailed
from beam_probe.node.remote import attach
from beam_probe.snapshots import format as snapfile
from conftest import REPO, one_line, run_here

NOBODY = 65534
PRECIOUS = b"root's own file\n"

needs_root = pytest.mark.skipif(os.geteuid() != 0,
                                reason="another user's links need root")


@pytest.fixture
def victim(tmp_path):
    """A file of ours, 0600, that a link will point at."""
    path = tmp_path / "victim"
    path.write_bytes(PRECIOUS)
    os.chmod(path, 0o600)
    return path


def plant_links(folder: str, names: list[str], aim: str) -> None:
    """Links named ``names`` in ``folder`` pointing at ``aim``, made by
    another user (nobody)."""
    code = ("import os, sys\n"
            f"for name in {names!r}:\n"
            f"    os.symlink({aim!r}, os.path.join({folder!r}, name))\n")
    for python in ("/usr/bin/python3", sys.executable):
        try:
            subprocess.run([python, "-c", code], user=NOBODY, group=NOBODY,
                           extra_groups=[], cwd="/", check=True,
                           capture_output=True, timeout=30)
            break
        except OSError:
            continue
    else:
        pytest.skip("no Python that another user may run")
    assert all(os.lstat(os.path.join(folder, n)).st_uid == NOBODY
               for n in names)


def hunt_names(node: str, count: int = 3) -> list[str]:
    """Every name a leak hunt starting in the next 30 s may give its
    files (the stamp is the second it starts)."""
    now = time.time()
    stamps = {time.strftime("%Y%m%dT%H%M%S", time.localtime(now + s))
              for s in range(-1, 30)}
    return [snapfile.file_name(node, f"-{stamp}-{i}")
            for stamp in sorted(stamps) for i in range(1, count + 1)]


def assert_ours(path: str, node: str) -> None:
    """A regular file (not a link), ours, 0600, a snapshot of ``node``."""
    info = os.lstat(path)
    assert stat.S_ISREG(info.st_mode), path
    assert info.st_uid == os.geteuid()
    assert stat.S_IMODE(info.st_mode) == 0o600, oct(info.st_mode)
    header, _sections = snapfile.read(path)
    assert header["node"] == node


# --- links planted under our names -------------------------------------------

@needs_root
def test_a_link_under_a_cluster_snapshots_name_is_replaced_not_followed(
        target, shared_tmp, victim):
    folder = os.path.join(shared_tmp, "before")
    os.mkdir(folder)
    os.chmod(folder, 0o1777)
    name = snapfile.file_name(target.node)
    plant_links(folder, [name], str(victim))
    r = run_here("snapshot", target.node, "--cluster", "--nodes",
                 target.node, "-o", folder, "--gc", "none", node=target)
    assert r.returncode == 0, r.stderr
    assert victim.read_bytes() == PRECIOUS
    assert stat.S_IMODE(os.stat(victim).st_mode) == 0o600
    assert_ours(os.path.join(folder, name), target.node)
    # Nothing else left behind (no temporary file).
    assert os.listdir(folder) == [name]


@needs_root
@pytest.mark.parametrize("cluster", [False, True], ids=["node", "cluster"])
def test_links_under_a_leak_hunts_names_are_replaced_not_followed(
        target, shared_tmp, victim, cluster):
    save = os.path.join(shared_tmp, "hunt")
    os.mkdir(save)
    os.chmod(save, 0o1777)
    names = hunt_names(target.node)
    plant_links(save, names, str(victim))
    extra = ("--cluster", "--nodes", target.node) if cluster else ()
    r = run_here("leak-hunt", target.node, "--interval", "0.2", "--gc",
                 "none", "--save", save, "--format", "json", *extra,
                 node=target)
    assert r.returncode == 0, r.stderr
    assert victim.read_bytes() == PRECIOUS
    result = json.loads(r.stdout)
    files = result["nodes"][0]["files"] if cluster else result["files"]
    assert len(files) == 3
    for path in files:
        assert os.path.basename(path) in names
        assert_ours(path, target.node)
    left = [n for n in os.listdir(save) if os.path.islink(
        os.path.join(save, n))]
    assert len(left) == len(names) - 3


# --- private files and folders -----------------------------------------------

def test_snapshots_are_private_whatever_the_umask(target, tmp_path):
    """0600 files in folders made 0700, under a umask of 022 (which made
    them 0644 and 0755); a tighter umask still applies."""
    old = os.umask(0o022)
    try:
        one = tmp_path / "one.snapshot"
        r = run_here("snapshot", target.node, "-o", str(one), "--gc",
                     "none", node=target)
        assert r.returncode == 0, r.stderr
        assert stat.S_IMODE(os.stat(one).st_mode) == 0o600
        folder = tmp_path / "made" / "here"
        r = run_here("snapshot", target.node, "--cluster", "--nodes",
                     target.node, "-o", str(folder), "--gc", "none",
                     node=target)
        assert r.returncode == 0, r.stderr
        for made in (folder, folder.parent):
            assert stat.S_IMODE(os.stat(made).st_mode) == 0o700
        for name in os.listdir(folder):
            assert_ours(str(folder / name), target.node)
        r = run_here("leak-hunt", target.node, "--interval", "0.2",
                     "--gc", "none", "--snapshots", "2", "--format", "json",
                     node=target)
        assert r.returncode == 0, r.stderr
        saved = json.loads(r.stdout)["saved"]
        assert stat.S_IMODE(os.stat(saved).st_mode) == 0o700
        for name in os.listdir(saved):
            assert_ours(os.path.join(saved, name), target.node)
        os.umask(0o077 | 0o200)
        two = tmp_path / "two.snapshot"
        r = run_here("snapshot", target.node, "-o", str(two), "--gc",
                     "none", node=target)
        assert r.returncode == 0, r.stderr
        assert stat.S_IMODE(os.stat(two).st_mode) == 0o400
    finally:
        os.umask(old)


# --- names that fit ----------------------------------------------------------

def test_file_names_fit_and_never_collide():
    plain = "app@db1"
    assert snapfile.file_name(plain) == "app@db1.snapshot"
    assert snapfile.file_name(plain, "-x-1") == "app@db1-x-1.snapshot"
    long_a = "n" * 236 + "@db1"
    long_b = "n" * 235 + "m@db1"
    wide = "\U0001F600" * 200 + "@db1"  # 4 bytes a character
    odd = ["a/b@h", "a_b@h", "a~b@h", ".hidden@h", "tab\there@h",
           "nul\x00@h", "\udcff@h", long_a, long_b, wide]
    names = [snapfile.file_name(n, "-20261124T152200-100") for n in odd]
    assert len(set(names)) == len(names)
    for name in names:
        raw = os.fsencode(name)
        assert len(raw) <= 120, name
        assert b"/" not in raw and b"\0" not in raw
        assert not name.startswith(".")
        assert name.endswith("-20261124T152200-100.snapshot")
    # A readable start, the same every time.
    assert names[-3].startswith("n" * 40)
    assert snapfile.file_name(long_a) == snapfile.file_name(long_a)


def _long_node_prefix() -> str:
    """A prefix that makes a test node's name (prefix_PID_N@host) about
    240 characters, as the issue's member had."""
    host = socket.gethostname().split(".")[0]
    return "bpl" + "x" * (240 - 3 - len(f"_{os.getpid()}_000@{host}"))


def test_a_member_with_a_240_character_name(nodes, tmp_path):
    """leak-hunt --cluster and the diff of snapshot --cluster folders with
    a member whose name is too long for a file name: its files are named
    by a start and a hash, and every answer names the node from the
    file's header."""
    cookie = f"long{uuid.uuid4().hex[:6]}"
    entry = nodes.start("25", prefix=f"bpe{uuid.uuid4().hex[:6]}",
                        cookie=cookie)
    member = nodes.start("25", prefix=_long_node_prefix(), cookie=cookie)
    assert len(member.node) >= 230
    with attach(entry.node, cookie.encode()) as remote:
        assert remote.call("net_kernel", "connect_node",
                           [Atom(member.node)]) is True
    save = tmp_path / "hunt"
    r = run_here("leak-hunt", entry.node, "--cluster", "--interval", "0.2",
                 "--gc", "none", "--save", str(save), "--format", "json",
                 node=entry)
    assert r.returncode == 0, r.stderr
    rows = {row["node"]: row for row in json.loads(r.stdout)["nodes"]}
    assert set(rows) == {entry.node, member.node}
    assert all(row["diff"] is not None and "error" not in row
               for row in rows.values())
    for path in rows[member.node]["files"]:
        assert "~" in os.path.basename(path)
        assert len(os.fsencode(os.path.basename(path))) < 255
        assert snapfile.read(path)[0]["node"] == member.node
    folders = [str(tmp_path / name) for name in ("a", "b")]
    for folder in folders:
        r = run_here("snapshot", entry.node, "--cluster", "-o", folder,
                     "--gc", "none", node=entry)
        assert r.returncode == 0, r.stderr
    r = run_here("diff", *folders, "--format", "json")
    assert r.returncode == 0, r.stderr
    rows = {row["node"]: row for row in json.loads(r.stdout)["nodes"]}
    assert set(rows) == {entry.node, member.node}
    assert "change" in rows[member.node]["diff"]


# --- places that cannot take the files ---------------------------------------

@pytest.fixture(params=["tmpfs-ro", "sys"])
def read_only(tmp_path, request):
    """A place no folder can be made in, root included (root ignores
    modes, so chmod cannot make one): a tmpfs mounted read-only (where we
    may mount), and /sys, which says nothing until a folder is made."""
    if request.param == "sys":
        yield "/sys"
        return
    place = tmp_path / "ro"
    place.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=64k",
                       "bp-ro", str(place)],
                      capture_output=True).returncode != 0:
        pytest.skip("mounting a file system needs root (CAP_SYS_ADMIN)")
    try:
        yield str(place)
    finally:
        subprocess.run(["umount", str(place)], check=True)


@pytest.fixture
def regular(tmp_path):
    path = tmp_path / "a-file"
    path.write_text("not a folder\n")
    return str(path)


NOWHERE = "bp_nosuch_node@nohost.invalid"


@pytest.mark.parametrize("args", [
    ("snapshot", NOWHERE, "-o", "{regular}/x"),
    ("snapshot", NOWHERE, "-o", "{regular}/x/y.snapshot"),
    ("snapshot", NOWHERE, "--cluster", "-o", "{regular}/x"),
    ("leak-hunt", NOWHERE, "--interval", "1", "--save", "{regular}/x"),
    ("leak-hunt", NOWHERE, "--interval", "1", "--cluster", "--save",
     "{regular}/x/y"),
    ("snapshot", NOWHERE, "-o", "{missing}/x.snapshot"),
], ids=["file", "file-deeper", "cluster", "save", "cluster-save",
        "no-folder"])
def test_a_place_under_a_regular_file_is_exit_11_before_connecting(
        regular, tmp_path, args):
    """Checked before anything connects (the node named does not exist:
    a check made after connecting would say so, exit 4)."""
    args = [a.format(regular=regular, missing=tmp_path / "missing")
            for a in args]
    r = run_here(*args)
    one_line(r, 11, "cannot write")
    assert os.path.isfile(regular)


@pytest.mark.parametrize("args", [
    ("snapshot", NOWHERE, "--cluster", "-o", "{regular}"),
    ("leak-hunt", NOWHERE, "--interval", "1", "--save", "{regular}"),
], ids=["cluster", "save"])
def test_a_file_where_a_folder_is_meant_is_a_usage_error(regular, args):
    r = run_here(*[a.format(regular=regular) for a in args])
    one_line(r, 2, regular, "is not a folder")


def test_a_read_only_place_is_exit_11(target, read_only):
    """Before connecting where the check can tell (a read-only mount),
    else (/sys, which says nothing until a folder is made there) when
    the folder is made: one line either way."""
    for args in (("-o", f"{read_only}/bp-x.snapshot"),
                 ("--cluster", "--nodes", target.node, "-o",
                  f"{read_only}/bp-x")):
        r = run_here("snapshot", target.node, *args, "--gc", "none",
                     node=target)
        one_line(r, 11, read_only)
    r = run_here("leak-hunt", target.node, "--interval", "0.2", "--gc",
                 "none", "--save", f"{read_only}/bp-x", node=target)
    one_line(r, 11, read_only)
    r = run_here("leak-hunt", target.node, "--interval", "0.2", "--gc",
                 "none", "--cluster", "--nodes", target.node, "--save",
                 f"{read_only}/bp-x", node=target)
    one_line(r, 11, read_only)
    assert not os.path.exists(f"{read_only}/bp-x")


def test_a_folder_that_cannot_be_made_is_output_failed(regular, tmp_path,
                                                       monkeypatch):
    """What the check before connecting cannot see (the place changed
    since, or a file system that says nothing until asked) is still
    OutputFailed when the folder is made: the hunt's own temporary
    folder included."""
    with pytest.raises(OutputFailed, match="Not a directory"):
        snapfile.open_folder(f"{regular}/x")
    with pytest.raises(OutputFailed, match="cannot make a folder in"):
        monkeypatch.setattr(tempfile, "tempdir", f"{regular}/tmp")
        snapfile.hunt_folder(None)


# --- single output files: another user's link is never followed -----------
#
# Issue 37, finding 6: root's `snapshot -o F`, `check --textfile F` and
# `alloc --raw F` wrote through a link another user planted in a sticky
# folder, overwriting a root-owned file. The tester's way: the link made
# by another uid (lchown to nobody), in a 1777 folder, at a root-owned
# file; every single-file output refuses it in one line and leaves the
# file as it was.

def _planted(folder: str, name: str, aim: str, owner: int = NOBODY) -> str:
    path = os.path.join(folder, name)
    os.symlink(aim, path)
    os.lchown(path, owner, owner)
    return path


def _watch_file(target, folder) -> str:
    """A watch file for plot to read, of two samples."""
    path = os.path.join(folder, "w.jsonl")
    r = run_here("watch", target.node, "--count", "2", "--interval", "0.2",
                 "--format", "json", "-o", path, node=target)
    assert r.returncode == 0, r.stderr
    return path


@needs_root
def test_another_users_link_is_refused_by_every_single_file_output(
        target, shared_tmp, victim, tmp_path):
    pytest.importorskip("matplotlib")
    history = _watch_file(target, str(tmp_path))
    os.chmod(victim, 0o644)
    cases = {  # the option's command line, and the link's name
        "snapshot": ["snapshot", target.node, "--gc", "none", "-o"],
        "alloc": ["alloc", target.node, "--raw"],
        "plot": ["plot", history, "-o"],
        "textfile": ["check", target.node, "--textfile"],
    }
    for case, args in cases.items():
        name = f"{case}.png" if case == "plot" else f"{case}.out"
        link = _planted(shared_tmp, name, str(victim))
        r = run_here(*args, link, node=target)
        if case == "textfile":
            # A monitoring plugin: WARNING (1), one line on stdout that
            # says why, the figures judged all the same.
            assert r.returncode == 1, (r.stdout, r.stderr)
            assert len(r.stdout.splitlines()) == 1, r.stdout
            assert f"textfile {link} not written: it is a symbolic link " \
                   "of another user (uid 65534)" in r.stdout, r.stdout
        else:
            line = one_line(r, 11, f"cannot write {link}",
                            "symbolic link of another user (uid 65534)",
                            "not followed")
            assert r.stdout == "", (case, r.stdout, line)
        assert victim.read_bytes() == PRECIOUS, case
        assert os.path.islink(link) and os.lstat(link).st_uid == NOBODY
        assert stat.S_IMODE(os.stat(victim).st_mode) == 0o644
    # No temporary file left beside them.
    assert sorted(os.listdir(shared_tmp)) == sorted(
        f"{c}.png" if c == "plot" else f"{c}.out" for c in cases)


@needs_root
def test_a_chain_through_another_users_link_is_refused(target, shared_tmp,
                                                       victim, tmp_path):
    """Our own link, to another user's link, to our file; and another
    user's link to a folder, with the file named under it: each link on
    the way is judged, as the kernel would meet it."""
    theirs = _planted(shared_tmp, "theirs", str(victim))
    ours = tmp_path / "ours.snapshot"
    ours.symlink_to(theirs)
    r = run_here("snapshot", target.node, "--gc", "none", "-o", str(ours),
                 node=target)
    one_line(r, 11, f"{theirs} is a symbolic link of another user")
    folder_link = _planted(shared_tmp, "place", str(tmp_path))
    r = run_here("alloc", target.node, "--raw", f"{folder_link}/a.etf",
                 node=target)
    one_line(r, 11, f"{folder_link} is a symbolic link of another user")
    assert not (tmp_path / "a.etf").exists()
    # The folder forms: snapshot --cluster -o, leak-hunt --save, and the
    # appending ones (watch -o, check --history) under such a folder.
    r = run_here("snapshot", target.node, "--cluster", "--nodes",
                 target.node, "-o", f"{folder_link}/snaps", "--gc", "none",
                 node=target)
    one_line(r, 11, "symbolic link of another user")
    r = run_here("watch", target.node, "--count", "1", "--format", "json",
                 "-o", f"{folder_link}/w.jsonl", node=target)
    one_line(r, 11, "symbolic link of another user")
    assert sorted(os.listdir(tmp_path)) == ["ours.snapshot", "victim"]
    assert victim.read_bytes() == PRECIOUS


@needs_root
def test_a_link_of_our_own_is_followed(target, shared_tmp, tmp_path):
    """The user's own link still leads where it points, in a sticky
    folder too (nobody else may remove or rename it there); a FIFO of
    another user's is refused, ours is written."""
    real = tmp_path / "real.snapshot"
    real.write_bytes(b"old")
    mine = _planted(shared_tmp, "mine.snapshot", str(real), owner=0)
    r = run_here("snapshot", target.node, "--gc", "none", "-o", mine,
                 node=target)
    assert r.returncode == 0, r.stderr
    assert os.path.islink(mine)
    assert snapfile.read(str(real))[0]["node"] == target.node
    fifo = os.path.join(shared_tmp, "fifo")
    os.mkfifo(fifo, 0o666)
    os.chown(fifo, NOBODY, NOBODY)
    import threading
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(
        open(fifo, "rb").read()), daemon=True)
    reader.start()
    try:
        r = run_here("alloc", target.node, "--raw", fifo, node=target)
        one_line(r, 11, "FIFO of another user (uid 65534)")
    finally:
        try:  # a reader still waiting for a writer is let go
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        except OSError:
            pass  # it was let go: nothing reads
        reader.join(10)
    assert got == [b""]  # it read nothing: our open was closed unwritten


def test_a_link_in_a_folder_others_may_write_is_refused(target, tmp_path):
    """Ours, but where anyone may swap it between our look and our open
    (a 0777 folder without the sticky bit)."""
    open_folder = tmp_path / "open"
    open_folder.mkdir()
    os.chmod(open_folder, 0o777)
    victim = tmp_path / "victim"
    victim.write_bytes(PRECIOUS)
    link = open_folder / "out.etf"
    link.symlink_to(victim)
    r = run_here("alloc", target.node, "--raw", str(link), node=target)
    one_line(r, 11, "which another user may change", "not followed")
    assert victim.read_bytes() == PRECIOUS


# --- issue 37, finding 6 after review: the walk is what is written through --
#
# The reviewer's race (/tmp/review_ad/race/run.py): the owner of a folder on
# the way swapped a folder for a link (renameat2 RENAME_EXCHANGE) between
# the check and the write, which reopened the path by its string; root's
# file landed in a root-only folder, 1 try in ~2,800. Here the swap is made
# deterministic: it happens right after the first look at the folder (an
# lstat, stat or open of it, whichever the code makes), so a writer that
# looks again by path is redirected every time, and one that writes
# through the descriptors of its walk never is.

SWAPPED = "bp_swapped"


def _swap_after_look(base, monkeypatch):
    """A folder ``BASE/att/bp_swapped`` (with an ``out.prom`` and a
    ``snaps`` folder), and a function that runs a writer with the swap
    armed: the folder is renamed to ``moved`` and a link to ``shut`` (a
    0700 folder holding precious files of the same names) takes its place
    as soon as it has been looked at. It returns ``moved``, having checked
    that nothing in ``shut`` changed."""
    att = base / "att"
    (att / SWAPPED / "snaps").mkdir(parents=True)
    (att / SWAPPED / "out.prom").write_bytes(b"old\n")
    shut = base / "shut"
    (shut / "snaps").mkdir(parents=True)
    for name in ("out.prom", "new.prom", "h.jsonl"):
        (shut / name).write_bytes(PRECIOUS)
    os.chmod(shut, 0o700)
    real = {name: getattr(os, name) for name in ("open", "stat", "lstat")}
    swapped: list[bool] = []

    def hooked(call):
        def look(path, *args, **kwargs):
            got = call(path, *args, **kwargs)
            if not swapped and isinstance(path, (str, os.PathLike)) and \
                    os.path.basename(os.fspath(path)) == SWAPPED:
                swapped.append(True)
                os.rename(att / SWAPPED, att / "moved")
                os.symlink(shut, att / SWAPPED)
            return got
        return look

    def run(writer):
        with monkeypatch.context() as patch:
            for name, call in real.items():
                patch.setattr(os, name, hooked(call))
            writer(str(att / SWAPPED))
        assert swapped, "the folder was never looked at"
        assert os.path.islink(att / SWAPPED)
        assert sorted(os.listdir(shut)) == ["h.jsonl", "new.prom",
                                            "out.prom", "snaps"]
        assert os.listdir(shut / "snaps") == []
        for name in ("out.prom", "new.prom", "h.jsonl"):
            assert (shut / name).read_bytes() == PRECIOUS
        return att / "moved"

    return run


def test_a_folder_swapped_for_a_link_after_the_look_is_not_written_through(
        tmp_path, monkeypatch):
    """Every writer of a file the user names: making a file, replacing
    one, writing through a link of ours in place, appending, and a Folder
    (existing, and made) for files of our naming. Each writes into the
    folder it looked at (now ``moved``), never where the link leads."""
    from beam_probe import files

    def through_link(sub):
        link = tmp_path / f"mine{len(os.listdir(tmp_path))}"
        link.symlink_to(f"{sub}/out.prom")
        files.write_whole(str(link), [b"in place\n"])

    def append(sub):
        fd, _ = files.open_append(f"{sub}/h.jsonl")
        try:
            os.write(fd, b"line\n")
        finally:
            os.close(fd)

    def in_folder(sub, name="snaps"):
        with files.Folder(f"{sub}/{name}") as folder:
            folder.write("n.snapshot", [b"snap\n"])

    cases = {
        "new": (lambda sub: files.write_whole(f"{sub}/new.prom",
                                              [b"new\n"]),
                "new.prom", b"new\n"),
        "replace": (lambda sub: files.write_whole(f"{sub}/out.prom",
                                                  [b"whole\n"]),
                    "out.prom", b"whole\n"),
        "through-link": (through_link, "out.prom", b"in place\n"),
        "append": (append, "h.jsonl", b"line\n"),
        "folder": (in_folder, "snaps/n.snapshot", b"snap\n"),
        "folder-made": (lambda sub: in_folder(sub, "made/here"),
                        "made/here/n.snapshot", b"snap\n"),
    }
    for case, (writer, written, content) in cases.items():
        base = tmp_path / case
        base.mkdir()
        moved = _swap_after_look(base, monkeypatch)(writer)
        assert (moved / written).read_bytes() == content, case


# --- what is written in place must be ours -----------------------------------

@needs_root
def test_a_link_of_ours_to_another_users_file_is_not_written_in_place(
        target, tmp_path, shared_tmp):
    """Our link leads to a file of nobody's: theirs to fill, not ours to
    truncate; to a hard link of root's file in a sticky folder (anyone can
    make one there where protected_hardlinks is off): truncating it would
    empty the original. Appending to such a hard link is refused too."""
    theirs = os.path.join(shared_tmp, "theirs.etf")
    with open(theirs, "wb") as f:
        f.write(PRECIOUS)
    os.chown(theirs, NOBODY, NOBODY)
    link = tmp_path / "out.etf"
    link.symlink_to(theirs)
    r = run_here("alloc", target.node, "--raw", str(link), node=target)
    one_line(r, 11, f"cannot write {link}", f"{theirs} is a file of "
             "another user (uid 65534)", "not written in place")
    original = tmp_path / "original"
    original.write_bytes(PRECIOUS)
    hard = os.path.join(shared_tmp, "hard.etf")
    os.link(original, hard)
    link.unlink()
    link.symlink_to(hard)
    r = run_here("alloc", target.node, "--raw", str(link), node=target)
    one_line(r, 11, f"{hard} has 1 other hard link(s)", "not written in "
             "place")
    r = run_here("watch", target.node, "--count", "1", "--format", "json",
                 "-o", hard, node=target)
    one_line(r, 11, hard, "other hard link(s)")
    assert original.read_bytes() == PRECIOUS
    assert open(theirs, "rb").read() == PRECIOUS


def test_our_own_hard_link_in_a_closed_folder_is_written_in_place(tmp_path):
    from beam_probe import files

    real = tmp_path / "real.prom"
    real.write_bytes(b"old\n")
    os.link(real, tmp_path / "also.prom")
    link = tmp_path / "link.prom"
    link.symlink_to(real)
    files.write_whole(str(link), [b"new\n"])
    assert (tmp_path / "also.prom").read_bytes() == b"new\n"
    assert link.is_symlink()


# --- a link of ours to a name that does not exist yet ------------------------

@pytest.mark.parametrize("shared", [False, True], ids=["closed", "sticky"])
def test_a_link_of_ours_to_a_missing_name_makes_the_file(tmp_path,
                                                         shared_tmp, shared):
    """The file is made where the link leads, as write_whole makes a file
    named directly: a temporary file renamed over the name, which never
    follows a link planted there, so a shared folder is no risk either.
    write_stream made nothing (ENOENT) where the folder was closed."""
    from beam_probe import files

    place = shared_tmp if shared else str(tmp_path / "closed")
    os.makedirs(place, exist_ok=True)
    aim = os.path.join(place, "made.prom")
    link = tmp_path / "link.prom"
    link.symlink_to(aim)
    assert files.write_whole(str(link), [b"made\n"]) == 5
    assert link.is_symlink()
    info = os.lstat(aim)
    assert stat.S_ISREG(info.st_mode) and info.st_uid == os.geteuid()
    assert stat.S_IMODE(info.st_mode) == 0o644
    assert open(aim, "rb").read() == b"made\n"
    assert sorted(os.listdir(place)) == ["made.prom"]


def test_dev_stdout_is_written_to_whatever_it_is(tmp_path):
    """/dev/stdout leads through /proc/self/fd/1 to "pipe:[N]", which no
    path names, or to a file (another user's, where root runs under sudo
    with the user's shell redirecting): the kernel follows /proc's links
    to the open file itself, which is ours to write."""
    code = ("from beam_probe import files\n"
            "files.write_whole('/dev/stdout', [b'to stdout\\n'])\n")
    piped = subprocess.run([sys.executable, "-c", code], cwd=REPO,
                           capture_output=True, timeout=60)
    assert piped.returncode == 0 and piped.stdout == b"to stdout\n", piped
    out = tmp_path / "out"
    out.write_bytes(b"x" * 100)
    if os.geteuid() == 0:
        # As under sudo: the file the user's shell opened is theirs.
        os.chown(out, NOBODY, NOBODY)
    with open(out, "r+b") as f:
        done = subprocess.run([sys.executable, "-c", code], cwd=REPO,
                              stdout=f, stderr=subprocess.PIPE, timeout=60)
    assert done.returncode == 0, done.stderr
    assert out.read_bytes() == b"to stdout\n"


# --- errors name the user's file ---------------------------------------------

@needs_root
def test_a_file_only_its_owner_may_replace_is_named_not_the_temporary(
        shared_tmp):
    """Another user (nobody) writing over root's file in a sticky folder:
    rename(2) says EPERM, and the line says why (the caller names the
    file: 'cannot write PATH: it belongs to...'); in a folder they may
    not write, the error names their file. Never the temporary file, and
    none is left behind."""
    out = os.path.join(shared_tmp, "out.prom")
    with open(out, "wb") as f:
        f.write(PRECIOUS)
    closed = os.path.join(shared_tmp, "closed")
    os.mkdir(closed, 0o755)
    code = ("import sys\n"
            f"sys.path.insert(0, {REPO!r})\n"
            "from beam_probe import files\n"
            f"for path in {[out, closed + '/x.prom']!r}:\n"
            "    try:\n"
            "        files.write_whole(path, [b'x'])\n"
            "    except OSError as exc:\n"
            "        print(str(exc))\n")
    for python in ("/usr/bin/python3", sys.executable):
        try:
            r = subprocess.run([python, "-c", code], user=NOBODY,
                               group=NOBODY, extra_groups=[], cwd="/",
                               capture_output=True, text=True, timeout=60)
            break
        except OSError:
            continue
    else:
        pytest.skip("no Python that another user may run")
    assert r.returncode == 0, r.stderr
    assert ".beam_probe" not in r.stdout
    assert r.stdout.splitlines() == [
        "it belongs to another user (uid 0), in a sticky folder where only "
        "they may replace it: not written",
        f"[Errno 13] Permission denied: '{closed}/x.prom'"]
    assert sorted(os.listdir(shared_tmp)) == ["closed", "out.prom"]
    assert os.listdir(closed) == []
    assert open(out, "rb").read() == PRECIOUS


# --- bidi controls in table cells --------------------------------------------

BIDI = "\u200e\u200f\u061c" + "".join(map(chr, range(0x202a, 0x202f))) \
    + "".join(map(chr, range(0x2066, 0x206a)))


def test_bidi_controls_are_escaped_in_table_cells(target, remote):
    """A registered name may hold the marks and isolates that reorder a
    line (Trojan Source): in a text table each is written as an escape,
    so a row reads as its bytes are. (A wide character still counts as
    one column: left alone.)"""
    from beam_probe.text.tables import one_line as cell, printable

    for mark in BIDI:
        assert cell(f"a{mark}b") == f"a\\u{ord(mark):04x}b"
        assert printable(f"a{mark}b") == f"a\\u{ord(mark):04x}b"
    name = f"bp_bidi_{os.getpid()}\u2067evil\u2069\u200f"
    remote.call("beam_probe_workload", "named", [Atom(name)])
    r = run_here("proc-count", target.node, "memory", "10000", node=target)
    assert r.returncode == 0, r.stderr
    assert not any(mark in r.stdout for mark in BIDI)
    assert f"bp_bidi_{os.getpid()}\\u2067evil\\u2069\\u200f" in r.stdout
