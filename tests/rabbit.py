"""Broker fixtures (issue 38): a real RabbitMQ, and nodes shaped like one.

How to use them (conftest imports the fixtures, so any test file can ask):

``rabbit`` (session-scoped): a real RabbitMQ 3.10.8 (Debian's, on this
machine's OTP 25), started by the tests on a private node name, ports and
folders, with a backlog: classic queues ``bpt.backlog.1..3`` each holding
``BACKLOG_MESSAGES`` transient messages of 1,024-4,096 byte bodies (refc
binaries, in the queue process's memory), and ``bpt.idle.1..2`` empty;
the management agent enabled (statistics every ``STATS_MS``, kept in
tables such as ``queue_msg_stats``, keyed ``{#resource{}, 5}``: they fill
a second or two after the backlog, so a test polls for their rows). It
is a ``Rabbit``: ``.node``, ``.cookie``, ``.home`` as a ``LocalNode`` has
them, so ``run_here("proc-count", rabbit.node, node=rabbit)`` runs against
it, and ``.queues`` maps each queue's name to its pid's text
(``"<0.812.0>"``), as ``rabbit.queue_pids()`` reads it anew. Skipped, with
the reason, where .ci/rabbitmq-root is missing (.ci/setup unpacks it);
an error where it is there and the broker does not start. One broker a session: it starts in about 5-8 s
on 2 cores (10 s with the machine's load at 8). Tests must not change it
beyond reading (other tests share it). An idle queue hibernates after a
second or so (gen_server2's backoff; current_function erlang:hibernate/3)
and any call to it (rabbit_amqqueue:info/2, queue_pids()) wakes it: a
test must accept either state, or make the one it needs just before.

``broker_shapes`` (module-scoped, one per ``otp``: 25, 27, 28): a node
running tests/erl/beam_probe_broker_fixture.erl's start/0 (see that file
for every figure), returned as a ``Shapes``: ``.node`` (the LocalNode),
``.queue`` (the pid text of a proc_lib gen_server named ONLY in its
dictionary, ``process_name = {bpt_queue, <<"lq.104">>}``, under an
unregistered supervisor, a heap of 24 MB or more), ``.holder`` (a plain
receive loop registered as ``bpt_refc_holder``: 5,000 refc binaries of
4,096 bytes, the first 1,000 shared with ``.sharer``; 200 messages
waiting), the tables ``bpt_queue_metrics`` (keyed by ``#resource{}``),
``bpt_queue_stat_pairs`` (keyed by ``{#resource{}, Stat}``) and an unnamed
one ``ets`` lists as ``bpt_unnamed_metrics`` (``.unnamed_table``, its id
as the node prints it), and ``bpt_struct_keyed``, keyed by an Elixir
struct (``%Broker.Queue{vhost: "/", name: "q1"}``, made without Elixir). ``start_broker_shapes(node)`` does the same on a
node a test started itself.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any, Iterator

import pytest

from beam_probe.node.local import LocalNode, short_host
from beam_probe.node.remote import attach
from conftest import REPO, unique_name

FIXTURE = "beam_probe_broker_fixture"
RABBIT_ROOT = os.environ.get("BEAM_PROBE_RABBITMQ_ROOT",
                             os.path.join(REPO, ".ci", "rabbitmq-root"))
RABBIT_HOME = os.path.join(RABBIT_ROOT, "usr", "lib", "rabbitmq", "lib",
                           "rabbitmq_server-3.10.8")
BACKLOG_QUEUES = 3
# 3,000 bodies of 2.5 KB on average: ~7.5 MB of refc binaries a queue,
# and a queue process of several MB (its message records).
BACKLOG_MESSAGES = 3000
# The queues' statistics interval, ms (collect_statistics_interval).
STATS_MS = 1000
# A loaded machine may take long to boot a broker (5-8 s unloaded, 2
# cores): a deadline for what would otherwise hang, not a speed.
START_DEADLINE = 240.0


def rabbit_missing() -> str | None:
    """Why a RabbitMQ cannot run here, or None."""
    server = os.path.join(RABBIT_HOME, "sbin", "rabbitmq-server")
    if not os.access(server, os.X_OK):
        return (f"no RabbitMQ 3.10.8 in {RABBIT_ROOT} (.ci/setup unpacks "
                "Debian's rabbitmq-server there)")
    if not shutil.which("erl"):
        return "no erl on PATH for RabbitMQ to run on"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Rabbit:
    """One private broker: started by ``start``, stopped by its pid."""

    name: str = field(default_factory=lambda: unique_name("bpt_rabbit"))
    cookie: str = field(default_factory=lambda: (
        f"bpr{os.getpid()}x{time.monotonic_ns()}"))
    home: str = ""
    base: str = ""
    proc: subprocess.Popen[bytes] | None = None
    started_in: float = 0.0
    queues: dict[str, str] = field(default_factory=dict)

    @property
    def node(self) -> str:
        return f"{self.name}@{short_host()}"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def start(self) -> "Rabbit":
        self.base = tempfile.mkdtemp(prefix=f"{self.name}-")
        self.home = os.path.join(self.base, "home")
        for sub in ("home", "mnesia", "log"):
            os.makedirs(os.path.join(self.base, sub))
        cookie = os.path.join(self.home, ".erlang.cookie")
        with open(cookie, "w") as f:
            f.write(self.cookie)
        os.chmod(cookie, 0o400)
        amqp = _free_port()
        dist = _free_port()
        conf = os.path.join(self.base, "rabbitmq.conf")
        with open(conf, "w") as f:
            # Reachable from this machine only. Statistics each second
            # (the default is 5 s): the management agent's tables fill
            # soon after the backlog.
            f.write(f"listeners.tcp.default = 127.0.0.1:{amqp}\n"
                    f"collect_statistics_interval = {STATS_MS}\n")
        plugins = os.path.join(self.base, "enabled_plugins")
        with open(plugins, "w") as f:
            # The management agent (no listener of its own; the UI's
            # plugin, rabbitmq_management, is not enabled) turns
            # statistics on and keeps them in tables keyed
            # {#resource{}, Interval}, as a broker with the UI has:
            # issue 38's table keyed {#resource{}, Stat}.
            f.write("[rabbitmq_management_agent].\n")
        env = dict(
            os.environ, HOME=self.home,
            # Nothing of the system's: no /etc/rabbitmq, /var/lib/rabbitmq.
            RABBITMQ_CONF_ENV_FILE=os.path.join(self.base, "rabbitmq-env"),
            RABBITMQ_NODENAME=self.node,
            RABBITMQ_NODE_PORT=str(amqp), RABBITMQ_DIST_PORT=str(dist),
            RABBITMQ_MNESIA_BASE=os.path.join(self.base, "mnesia"),
            RABBITMQ_LOG_BASE=os.path.join(self.base, "log"),
            RABBITMQ_CONFIG_FILE=conf,
            RABBITMQ_ENABLED_PLUGINS_FILE=plugins,
            RABBITMQ_PID_FILE=os.path.join(self.base, "pid"),
            RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS=(
                "-kernel inet_dist_use_interface {127,0,0,1}"),
            # Set, the script execs erl (no shell between): our child's
            # pid is beam.smp's. -noinput below keeps the shell off.
            RABBITMQ_ALLOW_INPUT="1",
            ERL_CRASH_DUMP=os.path.join(self.base, "erl_crash.dump"),
            # os_mon, xmerl, eldap: unpacked beside it, not in erlang-base.
            ERL_LIBS=os.path.join(RABBIT_ROOT, "usr", "lib", "erlang",
                                  "lib"))
        for steering in ("RABBITMQ_ENABLED_PLUGINS", "RABBITMQ_BASE",
                         "RABBITMQ_USE_LONGNAME"):
            env.pop(steering, None)
        started = time.monotonic()
        with open(os.path.join(self.base, "stdout.log"), "wb") as log:
            self.proc = subprocess.Popen(
                [os.path.join(RABBIT_HOME, "sbin", "rabbitmq-server"),
                 "-noinput"], cwd=self.base, env=env,
                stdin=subprocess.DEVNULL, stdout=log,
                stderr=subprocess.STDOUT,
                preexec_fn=_die_with(os.getpid()))
        self._await_startup(started + START_DEADLINE)
        self.started_in = time.monotonic() - started
        return self

    def _await_startup(self, deadline: float) -> None:
        """Until rabbit:is_running() answers true over our own connection."""
        assert self.proc is not None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"RabbitMQ exited at start (code "
                                   f"{self.proc.returncode}): {self.tail()}")
            try:
                with attach(self.node, self.cookie.encode(),
                            timeout=10) as remote:
                    if remote.call("rabbit", "is_running", []) is True:
                        return
            except Exception:  # not registered or not booted yet
                pass
            time.sleep(0.5)
        raise RuntimeError(f"RabbitMQ did not start in {START_DEADLINE:g} s:"
                           f" {self.tail()}")

    def tail(self) -> str:
        try:
            with open(os.path.join(self.base, "stdout.log"), "rb") as f:
                return f.read()[-400:].decode(errors="replace").strip()
        except OSError:
            return "(no log)"

    def load_backlog(self, beam_dir: str) -> None:
        """Queues with a backlog, made by the fixture module run on the
        broker through our connection (the tests may; the tool never)."""
        with attach(self.node, self.cookie.encode(), timeout=120) as remote:
            remote.call("code", "add_patha", [beam_dir])
            remote.call(FIXTURE, "backlog",
                        [BACKLOG_QUEUES, BACKLOG_MESSAGES, 38])
            # Deliveries are casts: wait until every queue counts them.
            deadline = time.monotonic() + 120
            while True:
                counts = self._counts(remote)
                if all(counts.get(f"bpt.backlog.{i}") == BACKLOG_MESSAGES
                       for i in range(1, BACKLOG_QUEUES + 1)):
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"backlog not queued: {counts}")
                time.sleep(0.2)
        self.queues = self.queue_pids()

    @staticmethod
    def _counts(remote: Any) -> dict[str, int]:
        return {name.decode(): count for name, _, count
                in remote.call(FIXTURE, "queues", [])}

    def queue_pids(self) -> dict[str, str]:
        """Each queue's name and its process's pid as the node prints it."""
        with attach(self.node, self.cookie.encode(), timeout=60) as remote:
            return {name.decode(): str(pid) for name, pid, _
                    in remote.call(FIXTURE, "queues", [])}

    def stop(self) -> None:
        """SIGKILL to beam.smp, our child (EPMD, shared, is left alone:
        it drops the name when the registration socket closes); its port
        programs end with it, as their pipes close."""
        if self.proc is not None and self.proc.poll() is None:
            children = _children(self.proc.pid)
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(30)
            # erl_child_setup and os_mon's cpu_sup see their pipes close
            # and exit; any that lingers is ours, ended by its pid.
            deadline = time.monotonic() + 10
            while children and time.monotonic() < deadline:
                children = [c for c in children if _alive(c)]
                time.sleep(0.1)
            for child in children:
                try:
                    os.kill(child, signal.SIGKILL)
                except OSError:
                    pass
        if self.base:
            shutil.rmtree(self.base, ignore_errors=True)
            self.base = ""


def _die_with(parent: int) -> Any:
    """The child's first act: SIGKILL it when ``parent`` (the tests)
    ends, however it ends. The fixture's finally stops the broker on a
    failure or Ctrl-C, but a SIGTERM or SIGKILL of pytest runs no
    finally, and the broker (~100 MB, a distribution port) was left
    running, its parent init (measured). PR_SET_PDEATHSIG outlives the
    script's exec of erl and beam.smp; beam's own children see their
    pipes close and exit."""
    import ctypes

    def arm() -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:  # the tests ended before it was set
            os._exit(1)
    return arm


def _children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (from /proc)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                # "pid (comm) state ppid ...": comm may hold spaces.
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        if ppid == pid:
            found.append(int(entry))
    return found


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.fixture(scope="session")
def rabbit(beam_dir) -> Iterator[Rabbit]:
    missing = rabbit_missing()
    if missing:
        pytest.skip(missing)
    broker = Rabbit()
    try:
        try:
            broker.start()
        except RuntimeError as e:
            # Installed but not starting is a failure, not a skip: a skip
            # here let CI pass with every broker test unrun.
            pytest.fail(f"RabbitMQ is in {RABBIT_ROOT} but did not start: "
                        f"{e}", pytrace=False)
        broker.load_backlog(beam_dir)
        yield broker
    finally:
        broker.stop()


@dataclass
class Shapes:
    node: LocalNode
    queue: str
    supervisor: str
    holder: str
    sharer: str
    unnamed_table: str
    info: dict[str, Any]


def start_broker_shapes(node: LocalNode) -> Shapes:
    """Run the broker fixture's start/0 on ``node`` (started with the
    tests' beam_dir on its code path, as NodeFactory starts every node)."""
    with attach(node.node, node.cookie.encode(), timeout=180) as remote:
        remote.call(FIXTURE, "start", [])
        info = {str(k): v for k, v in remote.call(FIXTURE, "info",
                                                  []).items()}
    return Shapes(node=node, queue=str(info["queue"]),
                  supervisor=str(info["supervisor"]),
                  holder=str(info["holder"]), sharer=str(info["sharer"]),
                  unnamed_table=str(info["unnamed_table"]), info=info)


@pytest.fixture(scope="module")
def broker_shapes(session_nodes, otp) -> Shapes:
    node = session_nodes.start(otp)
    return start_broker_shapes(node)


__all__ = ["Rabbit", "Shapes", "broker_shapes", "rabbit",
           "rabbit_missing", "start_broker_shapes"]
