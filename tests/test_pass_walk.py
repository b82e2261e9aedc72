"""A pass meets every process of the node once, and none of ours (issue
39's review): pmap/5 over 'every' walks OTP 28's process iterator a block
of the process table at a time ({Index, Block}, re-entered as {Index,
[]}), or on OTP 25 the list of erlang:processes(), and takes our own
processes (the call's, the connection's, the pass's workers, spawned
before the walk) out of each slice."""

from __future__ import annotations

import pytest

from beam_probe.erldist.terms import Atom
from beam_probe.node.forms import A_CLAUSE, A_CLAUSES, A_FUN, A_VAR, Form
from beam_probe.node.remote import attach
from ranking import window_with_traffic

EXTRA = 20_000  # several of the iterator's blocks (~4,000 pids each on 28)


def _call(name: str, args: list) -> tuple:
    return (Atom("call"), 1, (Atom("remote"), 1, (Atom("atom"), 1,
                                                  Atom("erlang")),
                              (Atom("atom"), 1, Atom(name))), args)


@pytest.mark.parametrize("release", ["25", "28"])
@pytest.mark.parametrize("jobs", [1, 3, 0, 10_000_000])
def test_a_pass_meets_every_process_once_and_none_of_ours(nodes, release,
                                                          jobs):
    node = nodes.start(release)
    with attach(node.node, node.cookie.encode(), timeout=60) as remote:
        remote.call("beam_probe_holders", "start", [EXTRA, 0], timeout=60)
        before = set(remote.call("erlang", "processes", []))
        slice_ = (A_VAR, 1, Atom("Slice"))
        # fun(Slice) -> {erlang:self(), Slice} end
        each = Form((A_FUN, 1, (A_CLAUSES, [(A_CLAUSE, 1, [slice_], [], [
            (Atom("tuple"), 1, [_call("self", []), slice_])])])))
        results, count = remote.run("beam_probe_lib", "pmap", each,
                                    Atom("list"), [], Atom("every"), jobs)
        after = set(remote.call("erlang", "processes", []))
    met = [pid for _, pids in results for pid in pids]
    workers = {worker for worker, _ in results}
    assert count == len(met)
    assert len(set(met)) == len(met), "a process met twice"
    assert not workers & set(met), "a worker of the pass was met"
    # Every process alive throughout is met, but ours: the connection's
    # (its owner and controller, alive before and after).
    missed = (before & after) - set(met)
    assert len(missed) <= 3, len(missed)
    assert len(met) >= EXTRA
    # Nothing met that was never the node's: the call's own processes
    # (its watcher and worker) were born after `before` and gone by
    # `after`.
    assert set(met) <= before | after


@pytest.mark.parametrize("release", ["25", "28"])
def test_proc_window_across_partitions(nodes, release):
    """proc-window keeps each pass split by phash2 of the pid into
    partitions of ~8,192 processes and joins them a partition at a
    time: at 40,000 processes (5 partitions), the increases, the born and
    the dead are those of the whole node, wherever they fall."""
    node = nodes.start(release)
    with attach(node.node, node.cookie.encode(), timeout=60) as remote:
        grow = remote.call("beam_probe_holders", "start", [40_000, 5],
                           timeout=60)
        victim = grow.pop()
        for k in range(15):
            remote.call("erlang", "send", [victim, ("before", k)])
        # The first pass over 40,000 processes takes well under a second
        # (0.2-0.5 s, 2 cores); the traffic after it under half a second:
        # the window is long enough for a machine several times slower.
        result, newborn = window_with_traffic(
            node, remote, grow, (50, 40, 30, 20), victim, 4, 4000, 1.5)
    assert result["scanned_first"] >= 40_000
    rows = [(p["pid"], p["delta"]) for p in result["processes"]]
    assert rows == [(str(pid), count)
                    for pid, count in zip(grow, (50, 40, 30, 20))]
    assert (str(newborn), 7) in [(p["pid"], p["value"])
                                 for p in result["born"]]
    assert {"pid": str(victim), "value": 15} in result["dead"]


@pytest.mark.parametrize("release", ["25", "28"])
def test_proc_count_all_lets_the_rows_sent_go(nodes, release):
    """proc-count --all ranks every process, then streams the ranking a
    chunk at a time: the rows sent are garbage at once. Bound to
    variables of the helper (erl_eval keeps them until it returns), the
    slices' lists, their join and the ranking stayed whole until the last
    chunk was taken."""
    from beam_probe.probes import processes

    size = 200_000
    node = nodes.start(release, args=("+P", "1000000"))
    cookie = node.cookie.encode()
    with attach(node.node, cookie, timeout=60) as watcher, \
            attach(node.node, cookie, timeout=60) as remote:
        watcher.call("beam_probe_workload", "start", [0, 0, size],
                     timeout=120)
        chunks = processes.proc_count_all(remote, "memory")
        taken = sum(len(next(chunks)) for _ in range(30))  # of ~40
        assert taken == 30 * processes.ALL_CHUNK
        ours = watcher.call("beam_probe_workload", "probes_running",
                            [Atom(watcher.conn.our_node)])
        heaps = []
        for pid in ours:
            watcher.call("erlang", "garbage_collect", [pid])
            info = watcher.call("erlang", "process_info",
                                [pid, Atom("total_heap_size")])
            heaps.append(info[1] if info else 0)
        chunks.close()
    # The heap after a collection (OTP 25, 200,000 processes): 6.2M words
    # with the ranking whole, 1.4M now (what is left to send, 50,000 rows,
    # and the room the heap keeps).
    assert ours and max(heaps) < 3_000_000, heaps
