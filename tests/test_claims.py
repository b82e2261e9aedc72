"""Names of the pool claimed on this machine: one holder at a time, freed
when released or when the holder dies (kill -9 included), per user, and
never held by another local user for us (issue 27: another user bound the
old abstract-socket names of a node and every root probe of it failed).

The other user is real: a child started as uid/gid 65534 (nobody), which
needs root, as the suite runs in CI."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap

import pytest

from beam_probe.erldist import claims
from beam_probe.erldist.claims import claim
from conftest import run_here

NOBODY = 65534

needs_root = pytest.mark.skipif(os.geteuid() != 0,
                                reason="another user's files need root")


def test_one_holder_at_a_time():
    node = f"claims_{os.getpid()}@host"
    first = claim(node, "beam_probe_1")
    assert first is not None
    assert claim(node, "beam_probe_1") is None
    assert claim(node.upper(), "beam_probe_1") is None
    other = claim(node, "beam_probe_2")
    elsewhere = claim("other_" + node, "beam_probe_1")
    assert other is not None and elsewhere is not None
    first.release()
    again = claim(node, "beam_probe_1")
    assert again is not None
    for held in (again, other, elsewhere):
        held.release()


def test_a_killed_holder_frees_its_name():
    node = f"claims_killed_{os.getpid()}@host"
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import sys, time; from beam_probe.erldist.claims import claim; "
         f"c = claim({node!r}, 'beam_probe_3'); "
         "print(c is not None, flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "True"
        assert claim(node, "beam_probe_3") is None
        holder.send_signal(signal.SIGKILL)
        holder.wait(10)
        freed = claim(node, "beam_probe_3")
        assert freed is not None
        freed.release()
    finally:
        holder.kill()
        holder.wait()


def test_a_claim_lives_in_a_folder_of_ours_alone(tmp_path, monkeypatch):
    monkeypatch.setattr(claims, "TMP", str(tmp_path))
    held = claim("private@host", "beam_probe_1")
    assert held is not None and held._holder is not None
    folder = tmp_path / f"beam-probe-{os.geteuid()}"
    info = os.lstat(folder)
    assert info.st_uid == os.geteuid() and info.st_mode & 0o777 == 0o700
    (lock,) = folder.iterdir()
    assert os.lstat(lock).st_mode & 0o777 == 0o600
    held.release()


class Squatter:
    """A child process of another user (nobody) that runs ``code`` (which
    sets up whatever it squats), says "ready" and holds it until
    stopped."""

    def __init__(self, code: str) -> None:
        script = textwrap.dedent(code) + textwrap.dedent("""
            import sys, time
            print("ready", flush=True)
            time.sleep(120)
            """)
        # The system's Python: another user may not reach the venv's.
        for python in ("/usr/bin/python3", sys.executable):
            try:
                self.proc = subprocess.Popen(
                    [python, "-c", script], user=NOBODY, group=NOBODY,
                    extra_groups=[], cwd="/", stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE, text=True)
                break
            except OSError:
                continue
        else:
            pytest.skip("no Python that another user may run")
        line = self.proc.stdout.readline().strip()
        if line != "ready":
            self.stop()
            raise AssertionError(f"the squatter failed: {line!r} "
                                 f"{self.proc.stderr.read()}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


@needs_root
def test_the_old_socket_names_bound_by_another_user_stop_no_probe(target):
    """Another user binds every abstract-socket name the old scheme would
    claim for this node (the issue's attack): a ping still answers."""
    from beam_probe.erldist.dial import NAME_POOL

    names = ["\0beam-probe/" + claims._key(target.node, name)
             for name in NAME_POOL]
    squatter = Squatter(f"""
        import socket
        held = []
        for name in {names!r}:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.bind(name)
            held.append(s)
        """)
    try:
        # The names are really taken: binding one here fails.
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        with pytest.raises(OSError):
            probe.bind(names[0])
        probe.close()
        for _ in range(3):
            r = run_here("ping", target.node, "--format", "json",
                         node=target)
            assert r.returncode == 0, r.stderr
    finally:
        squatter.stop()


@needs_root
def test_a_claim_folder_made_by_another_user_is_not_used(
        target, shared_tmp, tmp_path, monkeypatch):
    """Another user makes our /tmp/beam-probe-UID first, open to all, and
    holds every claim file of the node in it: it is not ours, so claims
    go to the next folder of ours, and probes still answer."""
    from beam_probe.erldist.dial import NAME_POOL

    monkeypatch.setattr(claims, "TMP", shared_tmp)
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    cache = tmp_path / "cache"
    monkeypatch.setenv("BEAM_PROBE_CACHE", str(cache))
    planted = os.path.join(shared_tmp, f"beam-probe-{os.geteuid()}")
    keys = [claims._key(target.node, name) for name in NAME_POOL]
    squatter = Squatter(f"""
        import fcntl, os
        os.mkdir({planted!r})
        os.chmod({planted!r}, 0o777)
        held = []
        for key in {keys!r}:
            fd = os.open(os.path.join({planted!r}, key),
                         os.O_RDWR | os.O_CREAT, 0o666)
            os.fchmod(fd, 0o666)
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            held.append(fd)
        """)
    try:
        assert os.stat(planted).st_uid == NOBODY
        held = claim(target.node, NAME_POOL[0])
        assert held is not None and held._holder is not None
        assert os.listdir(cache / "claims") == [keys[0]]
        assert claim(target.node, NAME_POOL[0]) is None  # still one holder
        held.release()
        r = run_here("ping", target.node, "--format", "json", node=target)
        assert r.returncode == 0, r.stderr
    finally:
        squatter.stop()


@needs_root
@pytest.mark.parametrize("mode", [0o777, 0o755, 0o1733])
def test_a_folder_of_ours_that_others_may_enter_is_not_used(
        shared_tmp, tmp_path, monkeypatch, mode):
    """Ours, but others may write or enter it: a file they opened there
    before (or can open now) is a name they can hold."""
    monkeypatch.setattr(claims, "TMP", shared_tmp)
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    monkeypatch.setenv("BEAM_PROBE_CACHE", str(tmp_path / "cache"))
    folder = os.path.join(shared_tmp, f"beam-probe-{os.geteuid()}")
    os.mkdir(folder)
    os.chmod(folder, mode)
    held = claim("open@host", "beam_probe_1")
    assert held is not None
    assert os.listdir(folder) == []
    assert len(os.listdir(tmp_path / "cache" / "claims")) == 1
    held.release()


@needs_root
def test_a_link_in_place_of_the_claim_folder_is_not_followed(
        shared_tmp, tmp_path, monkeypatch):
    """Another user plants /tmp/beam-probe-UID as a link to a folder of
    ours: not followed (the link could be turned elsewhere later)."""
    monkeypatch.setattr(claims, "TMP", shared_tmp)
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    monkeypatch.setenv("BEAM_PROBE_CACHE", str(tmp_path / "cache"))
    aim = tmp_path / "aim"
    aim.mkdir(mode=0o700)
    link = os.path.join(shared_tmp, f"beam-probe-{os.geteuid()}")
    squatter = Squatter(f"""
        import os
        os.symlink({str(aim)!r}, {link!r})
        """)
    try:
        held = claim("linked@host", "beam_probe_1")
        assert held is not None and held._holder is not None
        assert list(aim.iterdir()) == []
        held.release()
    finally:
        squatter.stop()


def test_a_runtime_folder_of_ours_is_the_fallback(shared_tmp, tmp_path,
                                                  monkeypatch):
    """/tmp/beam-probe-UID unusable (here: a file in its place), and
    $XDG_RUNTIME_DIR ours: the claim is there."""
    monkeypatch.setattr(claims, "TMP", shared_tmp)
    with open(os.path.join(shared_tmp, f"beam-probe-{os.geteuid()}"),
              "w"):
        pass
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    held = claim("runtime@host", "beam_probe_1")
    assert held is not None and held._holder is not None
    assert len(os.listdir(runtime / "beam-probe")) == 1
    held.release()
