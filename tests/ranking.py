"""What the leak-hunt tests share: a ranking held to recon's (the
in-node reference), and a proc-window with traffic during its window."""

from __future__ import annotations

import threading
import time
from typing import Any

from beam_probe.erldist.terms import Atom
from beam_probe.node.remote import attach
from beam_probe.probes import processes


def assert_ranks_as_reference(ours: Any, reference: Any, n: int) -> None:
    """proc-count's rows are the reference's, process for process and in
    its order (ties: the later process first, as recon orders them)."""
    ours_rows = [(p["pid"], p["value"]) for p in ours["processes"]]
    reference_rows = [(str(pid), value) for pid, value in reference]
    # The reference's own rpc process is alive during its scan, and the
    # process that ran our call may still be ending (it answers, then
    # exits): two of the newest pids, so the last in a zero-valued tail,
    # that our scan did not see. Compare everything but those.
    assert [row for row in ours_rows if row in reference_rows] == \
        [row for row in reference_rows if row in ours_rows]
    assert len(set(ours_rows) & set(reference_rows)) >= n - 2


def window_with_traffic(node: Any, remote: Any, grow: list, counts: tuple,
                        victim: Any, n: int, millis: int,
                        wait: float) -> tuple[dict, Any]:
    """proc-window of message_queue_len over ``millis`` ms, run on a
    connection of its own while this one, ``wait`` s in (once the first
    pass is done), sends each of ``grow`` its count of messages, starts a
    process that receives 7 (born) and kills ``victim`` (dead). Returns
    the window's result and the newborn's pid."""
    result: dict = {}

    def window() -> None:
        with attach(node.node, node.cookie.encode(), timeout=60) as other:
            result.update(processes.proc_window(
                other, "message_queue_len", n, millis))

    thread = threading.Thread(target=window)
    thread.start()
    time.sleep(wait)
    for pid, count in zip(grow, counts):
        for k in range(count):
            remote.call("erlang", "send", [pid, ("window", k)])
    newborn = remote.call("erlang", "spawn",
                          [Atom("timer"), Atom("sleep"), [Atom("infinity")]])
    for k in range(7):
        remote.call("erlang", "send", [newborn, ("born", k)])
    remote.call("erlang", "exit", [victim, Atom("kill")])
    thread.join(60)
    remote.call("erlang", "exit", [newborn, Atom("kill")])
    return result, newborn
