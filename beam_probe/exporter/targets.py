"""One connection per target, kept across scrapes, and the scrapes on it.

A target's connection stays open between scrapes (our reader thread
answers the node's ticks), so a scrape costs one call, not a handshake.
When it fails, the scrape says ``beam_probe_up 0`` and the connection is
dropped; the next scrape dials again at once, and while dialling keeps
failing, every scrape within the backoff answers ``up 0`` at once
without dialling (a node that is down costs neither it nor us a thing).

The work of a scrape (dialling, the call) runs in a thread of its own,
and the scrape waits for it until its deadline (Prometheus' scrape
timeout less an offset) and not a moment more: a name that takes long to
resolve, a node that is slow to answer or a cluster member that does not,
make a late ``up 0``, never a late answer. One piece of work runs on a
connection at a time, holding the target's turn until it ends; scrapes
that arrive meanwhile for the same thing share its answer.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable

from beam_probe.errors import ProbeError
from beam_probe.erldist.errors import ConnectionLost, ProtocolError, TimedOut
from beam_probe.exporter.config import Rule
from beam_probe.node.remote import GUARD_MARGIN, Remote, attach
from beam_probe.probes import vm as vm_probe
from beam_probe.probes.results import NodeFailure, TopProcesses, VmFigures

# Backoff after a failed dial: 1 s, doubling, at most this (a node back
# after a restart is seen within one backoff of its return).
BACKOFF_FIRST = 1.0
BACKOFF_MOST = 16.0
# Targets the exporter keeps state for (a connection, the holders' last
# reductions); past it, the one scraped least recently is let go.
MAX_TARGETS = 500
# A target not scraped for this long is let go (its connection closed):
# a target Prometheus no longer asks for holds nothing on the node. The
# sweep runs this often, scrapes or not.
IDLE_CLOSE = 600.0
SWEEP_EVERY = 30.0
# Whatever the deadline, a call is given at least this long.
MIN_CALL = 0.05
# Threads doing scrapes' work, made as needed and kept (a thread made for
# each scrape grew the RSS by its churn: 29 -> 32 MiB over a minute of
# three targets, measured). Work past them waits its turn; a scrape waits
# for it until its deadline.
WORKERS = 64
# Dials at once: a dial may hold its worker for the whole dial timeout
# (a blackholed host, a slow DNS lookup), so at most half the workers
# dial, and targets already connected always find one free.
DIALS = WORKERS // 2
# A flight whose scrape gave it less than this does not count toward
# TIMEOUTS_TO_REDIAL: a client asking for a 0.1 s scrape must not be able
# to drop a connection that Prometheus' scrapes use.
REDIAL_MIN_DEADLINE = 1.0
# Default-module scrapes in a row that time out before the connection is
# dropped and dialled afresh: a peer gone without a word (a host powered
# off, a dropped route) leaves a connection that never fails by itself.
# The top module's timeouts do not count: on a large node it may simply
# be slow.
TIMEOUTS_TO_REDIAL = 2

MODULES = ("default", "top")


@dataclass
class Outcome:
    """One scrape: whether the node answered, each node's figures (one,
    or a cluster's), the idle-holder estimate per node for ``top``."""

    up: bool
    seconds: float = 0.0
    error: str | None = None
    vm: list[VmFigures | NodeFailure] = field(default_factory=list)
    top: list[TopProcesses | NodeFailure] = field(default_factory=list)
    idle: dict[str, tuple[int, int] | None] = field(default_factory=dict)
    cluster: bool = False


@dataclass
class _Flight:
    started: float
    done: threading.Event = field(default_factory=threading.Event)
    outcome: Outcome | None = None


class Target:
    """What the exporter keeps of one target between scrapes."""

    def __init__(self, node: str, rule: Rule, cookie: bytes) -> None:
        self.node = node
        self.rule = rule
        self.cookie = cookie
        self.turn = threading.Lock()      # one piece of work at a time
        self.remote: Remote | None = None
        self.failures = 0
        self.timeouts = 0
        self.retry_at = 0.0
        self.last_error = ""
        self.flights: dict[tuple[str, bool, int], _Flight] = {}
        # node -> {pid: reductions} of its largest binary holders at the
        # last top scrape.
        self.holders: dict[str, dict[str, int]] = {}
        self.used = time.monotonic()
        # Set once the pool has let it go: its work still queued or
        # running must not dial a connection no one would close.
        self.gone = False

    def alive(self) -> bool:
        remote = self.remote
        return remote is not None and remote.conn.alive

    def close(self) -> None:
        remote, self.remote = self.remote, None
        if remote is not None:
            remote.close()


class Pool:
    """The targets, their connections and their scrapes. ``dial`` makes a
    Remote (attach, by default); ``dial_timeout`` bounds a dial, which may
    outlast the scrape that began it (the next scrape then finds the
    connection made)."""

    def __init__(self, default_cookie: Callable[[], bytes],
                 dial: Callable[..., Remote] = attach, jobs: int = 0,
                 dial_timeout: float = 10.0) -> None:
        self._default_cookie = default_cookie
        self._dial = dial
        self._jobs = jobs
        self._dial_timeout = dial_timeout
        self._lock = threading.Lock()
        self._targets: dict[str, Target] = {}
        self._closed = threading.Event()
        self._sweeper: threading.Thread | None = None
        from concurrent.futures import ThreadPoolExecutor

        self._work = ThreadPoolExecutor(WORKERS,
                                        thread_name_prefix="beam-probe-scrape")
        self._dialling = threading.BoundedSemaphore(DIALS)
        # Told of each dial's result ("ok", "failed"): /metrics counts.
        self.on_dial: Callable[[str], None] = lambda result: None

    # -- what /metrics shows --------------------------------------------

    def open_connections(self) -> int:
        with self._lock:
            return sum(1 for t in self._targets.values() if t.alive())

    def known_targets(self) -> int:
        with self._lock:
            return len(self._targets)

    # -- scrapes ----------------------------------------------------------

    def scrape(self, node: str, rule: Rule, module: str, cluster: bool,
               n: int, deadline: float) -> Outcome:
        """Scrape ``node`` (allowed by ``rule``) by ``module``; the answer
        comes by ``deadline`` (time.monotonic()), ``up 0`` if the work is
        not done by then."""
        started = time.monotonic()
        if self._closed.is_set():
            return self._down(started, "the exporter is stopping", cluster)
        target = self._target(node, rule)
        # n means nothing to the default module: one flight for all.
        key = (module, cluster, n if module == "top" else 0)
        with self._lock:
            flight = target.flights.get(key)
            if flight is None:
                flight = _Flight(started)
                try:
                    self._work.submit(self._fly, target, key, flight,
                                      deadline)
                except RuntimeError:  # the pool is shut down
                    return self._down(started, "the exporter is stopping",
                                      cluster)
                target.flights[key] = flight
        if flight.done.wait(max(0.0, deadline - time.monotonic())) \
                and flight.outcome is not None:
            return replace(flight.outcome,
                           seconds=time.monotonic() - started)
        return self._down(started, f"no answer within the scrape's "
                          f"{deadline - started:.1f} s", cluster)

    def _fly(self, target: Target, key: tuple[str, bool, int],
             flight: _Flight, deadline: float) -> None:
        module, cluster, n = key
        outcome: Outcome | None = None
        try:
            if time.monotonic() >= deadline:
                # It waited for a worker past its scrape's end.
                outcome = self._down(flight.started, "no worker was free "
                                     "before the scrape's end", cluster)
            elif not target.turn.acquire(
                    timeout=max(0.0, deadline - time.monotonic())):
                outcome = self._down(flight.started, "the previous scrape of "
                                     "this target is still running", cluster)
            else:
                try:
                    outcome = self._run(target, module, cluster, n, deadline,
                                        flight.started)
                finally:
                    target.turn.release()
        except Exception as exc:  # a bug of ours: still an answer
            outcome = self._down(flight.started, f"internal error: "
                                 f"{type(exc).__name__}: {exc}", cluster)
        finally:
            with self._lock:
                target.flights.pop(key, None)
            flight.outcome = outcome
            flight.done.set()

    def _target(self, node: str, rule: Rule) -> Target:
        """The pool's Target of ``node``, made on first use. Keyed by the
        name with its host in lower case, as the allow-list matches it:
        rabbit@MQ1 and rabbit@mq1 are one node, one connection (each
        spelling its own would let a client take the node's eight names)."""
        alive, _, host = node.partition("@")
        key = f"{alive}@{host.lower()}"
        now = time.monotonic()
        with self._lock:
            if self._sweeper is None:
                self._sweeper = threading.Thread(
                    target=self._sweep_forever, name="beam-probe-sweep",
                    daemon=True)
                self._sweeper.start()
            let_go: list[Target] = []
            target = self._targets.get(key)
            # The key settles the rule (the allow-list matches the same
            # name, its host case aside), so a target's never changes.
            if target is None:
                cookie = rule.cookie if rule.cookie is not None \
                    else self._default_cookie()
                target = self._targets[key] = Target(node, rule, cookie)
            target.used = now
            while len(self._targets) > MAX_TARGETS:
                name = min((n for n, t in self._targets.items()
                            if t is not target),
                           key=lambda n: self._targets[n].used)
                let_go.append(self._targets.pop(name))
            for other in let_go:
                other.gone = True
        self._let_go(let_go)
        return target

    def _sweep_forever(self) -> None:
        while not self._closed.wait(SWEEP_EVERY):
            self.sweep()

    def sweep(self, now: float | None = None) -> None:
        """Let go of the targets not scraped for IDLE_CLOSE."""
        now = time.monotonic() if now is None else now
        with self._lock:
            idle = [name for name, t in self._targets.items()
                    if not t.flights and now - t.used > IDLE_CLOSE]
            let_go = [self._targets.pop(name) for name in idle]
            for target in let_go:
                target.gone = True
        self._let_go(let_go)

    @staticmethod
    def _let_go(targets: list[Target]) -> None:
        for target in targets:
            # Closed once its last piece of work is over; work queued for
            # it finds it gone and dials nothing.
            if target.turn.acquire(timeout=0):
                try:
                    target.close()
                finally:
                    target.turn.release()
            else:
                threading.Thread(target=_close_when_free, args=(target,),
                                 daemon=True).start()

    @staticmethod
    def _down(started: float, error: str, cluster: bool) -> Outcome:
        return Outcome(up=False, seconds=time.monotonic() - started,
                       error=error, cluster=cluster)

    def _connect(self, target: Target) -> Remote | str:
        """The target's connection, dialled if need be; the reason when
        there is none. Called with the target's turn held."""
        if target.gone:
            target.close()
            return "the exporter let this target go (idle, or too many)"
        if target.remote is not None and not target.alive():
            # The node went (a restart): dial now, no backoff.
            target.close()
        if target.remote is not None:
            return target.remote
        now = time.monotonic()
        if now < target.retry_at:
            return (f"{target.last_error} (next dial in "
                    f"{target.retry_at - now:.1f} s)")
        rule = target.rule
        if not self._dialling.acquire(blocking=False):
            return f"over {DIALS} targets are being dialled at once"
        try:
            target.remote = self._dial(target.node, target.cookie,
                                       timeout=self._dial_timeout,
                                       connect_timeout=self._dial_timeout,
                                       dist_port=rule.dist_port,
                                       tls=rule.tls)
        except ProbeError as exc:
            target.failures += 1
            target.retry_at = time.monotonic() + min(
                BACKOFF_MOST, BACKOFF_FIRST * 2 ** (target.failures - 1))
            target.last_error = str(exc)
            self.on_dial("failed")
            return target.last_error
        finally:
            self._dialling.release()
        target.failures = 0
        self.on_dial("ok")
        return target.remote

    def _run(self, target: Target, module: str, cluster: bool, n: int,
             deadline: float, started: float) -> Outcome:
        remote = self._connect(target)
        if isinstance(remote, str):
            return self._down(started, remote, cluster)
        remote.timeout = max(MIN_CALL, deadline - time.monotonic())
        outcome = Outcome(up=True, cluster=cluster)
        try:
            if module == "top":
                found: list[TopProcesses | NodeFailure] = \
                    vm_probe.top_cluster(remote, n, self._jobs,
                                         deadline=deadline) \
                    if cluster else [vm_probe.top(remote, n, self._jobs)]
                outcome.top = found
                outcome.idle = self._idle(target, found)
            else:
                outcome.vm = vm_probe.vm_cluster(remote, deadline=deadline) \
                    if cluster else [vm_probe.vm(remote)]
        except (ConnectionLost, ProtocolError) as exc:
            # The connection is gone or cannot be trusted: the next scrape
            # dials afresh.
            target.close()
            return self._down(started, str(exc), cluster)
        except TimedOut as exc:
            if module == "default" and \
                    deadline - started >= REDIAL_MIN_DEADLINE:
                target.timeouts += 1
                if target.timeouts >= TIMEOUTS_TO_REDIAL:
                    target.timeouts = 0
                    target.close()
            if target.remote is not None:
                # The node's guard ends the abandoned work within this
                # margin of its deadline: the turn is kept until then, so
                # two passes of ours never overlap on the node.
                time.sleep(GUARD_MARGIN)
            return self._down(started, str(exc), cluster)
        except ProbeError as exc:
            return self._down(started, str(exc), cluster)
        if module == "default":
            target.timeouts = 0
        outcome.seconds = time.monotonic() - started
        return outcome

    @staticmethod
    def _idle(target: Target, found: list[Any]
              ) -> dict[str, tuple[int, int] | None]:
        from beam_probe.exporter.families import idle_holders

        out: dict[str, tuple[int, int] | None] = {}
        for answer in found:
            if "error" in answer:
                continue
            node = answer["node"]
            out[node] = idle_holders(target.holders.get(node),
                                     answer["holders"])
            target.holders[node] = {pid: reductions for pid, _, reductions
                                    in answer["holders"]}
        # Bounded: the nodes of this scrape, at most.
        for gone in set(target.holders) - {a["node"] for a in found}:
            target.holders.pop(gone, None)
        return out

    def close(self) -> None:
        self._closed.set()
        self._work.shutdown(wait=False, cancel_futures=True)
        with self._lock:
            targets = list(self._targets.values())
            self._targets.clear()
            for target in targets:
                target.gone = True
        self._let_go(targets)


def _close_when_free(target: Target) -> None:
    with target.turn:
        target.close()


__all__ = ["MODULES", "Outcome", "Pool", "Target"]
