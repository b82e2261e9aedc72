"""The whole cluster through one node (--cluster): real three-node clusters
of OTP 25 nodes, reached through one of them, with memory planted on one
node only. Names sort before (aaa...), between (bpc..., the entry) and
after (zzz...) beam-probe's own beam_probe_N."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid

import pytest

from beam_probe.erldist.terms import Atom
from beam_probe.node.remote import attach
from conftest import REPO, _run_env, one_line, run_here
from shapes import conforms_to

HOLDER_BINARIES = 40  # 64 KiB each, on the last node only


def _connect(entry, others) -> None:
    with attach(entry.node, entry.cookie.encode()) as remote:
        for other in others:
            assert remote.call("net_kernel", "connect_node",
                               [Atom(other.node)]) is True


def _call(node, function, *args):
    with attach(node.node, node.cookie.encode()) as remote:
        return remote.call("beam_probe_workload", function, list(args))


def _three(factory, letter: str):
    """(entry, before, after): three connected OTP 25 nodes of one cookie,
    named to sort between, before and after beam_probe_N."""
    tag = uuid.uuid4().hex[:6]
    cookie = f"c{letter}{tag}"
    entry, before, after = (
        factory.start("25", prefix=f"{head}{letter}{tag}", cookie=cookie)
        for head in ("bp", "aa", "zz"))
    _connect(entry, [before, after])
    return entry, before, after


@pytest.fixture(scope="module")
def cluster(session_nodes):
    """(entry, before, after); the one after holds binaries (bp_holder)
    and the one before a large table (bp_big_owner)."""
    entry, before, after = _three(session_nodes, "c")
    _call(after, "hold_binaries", HOLDER_BINARIES)
    _call(before, "big_table", Atom("bp_cluster_table"), 20_000)
    return entry, before, after


def _json(entry, *args: str) -> tuple[int, dict, str]:
    r = run_here(*args, "--format", "json", node=entry)
    return r.returncode, json.loads(r.stdout) if r.stdout else {}, r.stderr


def _type(name: str):
    from beam_probe.probes import results

    return getattr(results, name)


def test_proc_count_ranks_every_node_and_names_each(cluster):
    entry, before, after = cluster
    code, result, err = _json(entry, "proc-count", entry.node,
                              "binary_memory", "5", "--cluster")
    assert code == 0, err
    conforms_to(result, _type("ClusterProcCount"))
    assert result["entry"] == entry.node
    # The entry first, then the others as erlang:nodes() sorts them.
    assert [n["node"] for n in result["nodes"]] == [
        entry.node, before.node, after.node]
    top = result["processes"][0]
    assert (top["node"], top["name"]) == (after.node, "bp_holder")
    assert top["value"] >= HOLDER_BINARIES * 65536
    values = [p["value"] for p in result["processes"]]
    assert values == sorted(values, reverse=True)


def test_our_own_processes_are_not_the_entry_nodes(cluster):
    """On the entry node the fan-out's own processes run beside the
    node's: they are left out, as one node's probe leaves ours out, so
    each node counts what its own proc-count counts."""
    entry, before, after = cluster
    code, result, err = _json(entry, "proc-count", entry.node, "memory",
                              "50", "--cluster")
    assert code == 0, err
    functions = {p["current_function"] for p in result["processes"]}
    assert not functions & {"erpc:mcall_receive_replies/5",
                            "prim_eval:receive/2"}, functions
    # A node just connected runs global's resolvers for a moment (seen:
    # two, gone within a second): counts are compared once they agree
    # twice in a row, which a constant difference never does.
    for _ in range(10):
        counts = {n["node"]: n["scanned"] for n in _json(
            entry, "proc-count", entry.node, "memory", "1",
            "--cluster")[1]["nodes"]}
        alone = {node.node: _json(node, "proc-count", node.node, "memory",
                                  "1")[1]["scanned"] for node in cluster}
        if counts == alone:
            break
        time.sleep(0.3)
    assert counts == alone


def test_every_ranking_takes_the_cluster(cluster):
    entry, before, after = cluster
    names = [entry.node, before.node, after.node]
    for args, kind, rows in (
            (("bin-leak", entry.node, "3"), "ClusterBinLeak", "processes"),
            (("proc-window", entry.node, "reductions", "3", "200"),
             "ClusterProcWindow", "processes"),
            (("ets", entry.node, "3"), "ClusterEts", "largest"),
            (("alloc", entry.node), "ClusterAlloc", None)):
        code, result, err = _json(entry, *args, "--cluster")
        assert code == 0, (args, err)
        conforms_to(result, _type(kind))
        assert [n["node"] for n in result["nodes"]] == names, args
        if rows:
            assert {r["node"] for r in result[rows]} <= set(names)
    code, result, _ = _json(entry, "ets", entry.node, "1", "--cluster")
    assert [(t["node"], t["name"]) for t in result["largest"]] == [
        (before.node, "bp_cluster_table")]


def test_the_text_names_each_node(cluster):
    entry, before, after = cluster
    r = run_here("proc-count", entry.node, "binary_memory", "3",
                 "--cluster", node=entry)
    assert r.returncode == 0, r.stderr
    assert f"cluster through {entry.node}:" in r.stdout
    assert "3 nodes, all 3 answered" in r.stdout
    holder = next(line for line in r.stdout.splitlines()
                  if "bp_holder" in line)
    assert holder.startswith(after.node)


def test_nodes_chooses_and_a_node_out_of_reach_is_its_row(cluster):
    entry, before, after = cluster
    code, result, err = _json(entry, "proc-count", entry.node, "memory", "3",
                              "--nodes", f"{after.node},nosuch@nohost")
    assert code == 15
    one_line((code, "", err), 15, "cluster", "1 of 2 nodes answered",
             "nosuch@nohost", "not connected to the entry")
    assert [n["node"] for n in result["nodes"]] == [after.node,
                                                    "nosuch@nohost"]
    assert "error" in result["nodes"][1]
    assert {p["node"] for p in result["processes"]} == {after.node}


def test_a_node_of_another_cookie_is_its_row(cluster, nodes):
    entry, _before, _after = cluster
    stranger = nodes.start("25", prefix="zzx")  # its own cookie
    code, result, err = _json(entry, "alloc", entry.node, "--nodes",
                              f"{entry.node},{stranger.node}")
    assert code == 15, err
    assert result["nodes"][0]["node"] == entry.node
    assert "verdict" in result["nodes"][0]
    assert result["nodes"][1]["node"] == stranger.node
    assert result["nodes"][1]["error"].startswith(
        "not connected to the entry node")


@pytest.mark.parametrize("args,words", [
    (("proc-count", "x@h", "memory", "3", "--nodes", "nohost"),
     ["--nodes", "'nohost'", "not a node name"]),
    (("proc-count", "x@h", "memory", "--all", "--cluster"),
     ["--all", "--cluster"]),
    (("alloc", "x@h", "--raw", "f", "--cluster"), ["--raw", "--cluster"]),
    (("bin-leak", "x@h", "3", "--dry-run", "--include-hidden"),
     ["--dry-run", "--cluster"]),
    (("ets", "x@h", "--nodes", ","), ["--nodes", "at least one"]),
    (("ets", "x@h", "--nodes", "a@h,beam_probe_3@h"),
     ["beam_probe_3@h", "beam-probe connection"]),
])
def test_bad_cluster_arguments_are_one_line(args, words):
    r = run_here(*args)
    one_line(r, 2, *words)


@pytest.mark.slow
def test_a_frozen_node_times_out_in_its_row(cluster, nodes):
    """A node stopped with SIGSTOP: its row says it did not answer within
    --timeout, the others answer, and the run ends by then."""
    entry, before, after = cluster
    frozen = nodes.start("25", prefix="zzy", cookie=entry.cookie)
    _connect(entry, [frozen])
    os.kill(frozen.pid, signal.SIGSTOP)
    try:
        started = time.monotonic()
        code, result, err = _json(entry, "proc-count", entry.node, "memory",
                                  "3", "--cluster", "--timeout", "2")
        elapsed = time.monotonic() - started
    finally:
        os.kill(frozen.pid, signal.SIGCONT)
    assert code == 15, err
    rows = {n["node"]: n for n in result["nodes"]}
    assert rows[frozen.node] == {"node": frozen.node,
                                 "error": "no answer within 2 s"}
    assert all("scanned" in rows[n.node] for n in cluster)
    assert elapsed < 2 + 2 + 3, elapsed  # the guard's margin, and slack


@pytest.mark.slow
def test_killing_beam_probe_stops_the_work_on_every_node(cluster):
    """kill -9 in the middle of a fan-out (a 20 s proc-window on every
    node): within a second nothing of ours runs on any node."""
    entry, before, after = cluster
    # What earlier calls of this test's own left running (bp_holder, started
    # through a connection of the fixture's), per node.
    left_before = {}
    for node in cluster:
        with attach(node.node, node.cookie.encode()) as remote:
            left_before[node.node] = set(_running(remote))
    proc = subprocess.Popen(
        [sys.executable, "-m", "beam_probe", "proc-window", entry.node,
         "reductions", "3", "20000", "--cluster"], cwd=REPO,
        env=_run_env(None, entry), stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL)
    try:
        with attach(after.node, after.cookie.encode()) as remote:
            ours = left_before[after.node]
            deadline = time.monotonic() + 10
            while not set(_running(remote)) - ours:
                assert time.monotonic() < deadline, "the work never started"
                time.sleep(0.05)
            proc.kill()
            proc.wait()
            gone = time.monotonic() + 1.0
            while set(_running(remote)) - ours and time.monotonic() < gone:
                time.sleep(0.05)
            assert set(_running(remote)) - ours == set()
        for node in (entry, before):
            with attach(node.node, node.cookie.encode()) as remote:
                assert set(_running(remote)) - left_before[node.node] == set()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _running(remote) -> list:
    """The processes beam-probe runs started on this node that still run
    (their group leader is a beam_probe_N pid), this call's own aside.
    None is left out by name: the run under test may have the name this
    test's own connection has (each holds its pool name on its own node)."""
    return remote.call("beam_probe_workload", "probes_running",
                       [Atom("nobody@nowhere")])



# --- watch --cluster --------------------------------------------------------

def test_watch_flags_the_leaking_node_and_only_it(cluster):
    """One node's binaries grow 4 MiB a second (a fake clock steps them at
    each of the watch's sleeps): after collections of the binary holders,
    the rule fires on that node alone, and --fail-on-leak exits 12."""
    from test_watch import Stepping, _lines, growing

    entry, before, after = cluster
    with attach(after.node, after.cookie.encode()) as remote:
        clock = Stepping(remote, growing(8 << 20))
        r = run_here("watch", entry.node, "--cluster", "--gc", "holders",
                     "--interval", "0.5", "--count", "8", "--fail-on-leak",
                     node=entry, clock=clock)
        remote.call("beam_probe_workload", "step",
                    [clock.stepper, Atom("drop")])
    assert r.returncode == 12, r.stderr
    samples, summary = _lines(r.stdout)
    assert len(samples) == 8 * 3
    assert {s["node"] for s in samples} == {n.node for n in cluster}
    leaking = {n["node"]: [l["category"] for l in n["leaks"]]
               for n in summary["nodes"]}
    assert "binary" in leaking[after.node]
    assert leaking[entry.node] == leaking[before.node] == []
    assert summary["entry"] == entry.node
    assert [n["node"] for n in summary["nodes"]] == [
        entry.node, before.node, after.node]


def test_watch_view_draws_a_line_a_node_and_the_chart(cluster):
    entry, before, after = cluster
    r = run_here("watch", entry.node, "--cluster", "--interval", "0.2",
                 "--count", "3", "--metric", "binary", node=entry, tty=True,
                 size=(120, 40))
    assert r.returncode == 0, r.stderr
    assert f"cluster through {entry.node}: 3 nodes every 0.2 s" in r.stdout
    for node in cluster:
        assert any(line.startswith(node.node) for line in
                   r.stdout.splitlines()), node.node
    assert "binary per hour" in r.stdout


@pytest.mark.slow
def test_watch_goes_on_when_a_node_freezes(cluster, nodes):
    """A node stopped with SIGSTOP is down in each sample (no answer
    within four fifths of the interval); the others are sampled on time."""
    entry, _before, _after = cluster
    frozen = nodes.start("25", prefix="zzw", cookie=entry.cookie)
    _connect(entry, [frozen])
    try:
        os.kill(frozen.pid, signal.SIGSTOP)
        started = time.monotonic()
        r = run_here("watch", entry.node, "--cluster", "--interval", "1",
                     "--count", "3", node=entry)
        elapsed = time.monotonic() - started
    finally:
        os.kill(frozen.pid, signal.SIGCONT)
    assert r.returncode == 0, r.stderr
    rows = [json.loads(line) for line in r.stdout.splitlines()]
    down = [s for s in rows if s.get("node") == frozen.node]
    assert len(down) == 3 and all(s.get("down") for s in down)
    # Four fifths of the interval: the round must end before the next.
    assert down[0]["error"] == "no answer within 0.8 s"
    # The three others answer in their rounds: on a loaded machine one
    # may miss a round's 0.8 s too (one CI run lost a round of all three),
    # and is then down in that round alone, never held back for the next.
    live = [s for s in rows if s.get("node") not in (None, frozen.node)]
    assert len(live) == 3 * 3
    others = [s for s in live if "total" in s]
    assert len({s["node"] for s in others}) == 3, live
    assert all(s.get("down") and s["error"].startswith("no answer within")
               for s in live if "total" not in s), live
    assert elapsed < 3 * (1 + 2) + 3, elapsed


def test_plot_overlays_or_picks_the_nodes_of_a_cluster_file(cluster,
                                                              tmp_path):
    entry, before, after = cluster
    path = str(tmp_path / "cluster.jsonl")
    r = run_here("watch", entry.node, "--cluster", "--interval", "0.2",
                 "--count", "3", "-o", path, node=entry)
    assert r.returncode == 0, r.stderr
    one = run_here("plot", path)
    one_line(one, 2, "more than one node", "--node")
    picked = run_here("plot", path, "--node", after.node, "--format", "json")
    assert picked.returncode == 0, picked.stderr
    assert json.loads(picked.stdout)["node"] == after.node
    overlaid = run_here("plot", path, "--node", "all", "--metric", "binary",
                        "--format", "json")
    assert overlaid.returncode == 0, overlaid.stderr
    data = json.loads(overlaid.stdout)
    assert data["metrics"] == ["binary"]
    assert list(data["series"]) == [n.node for n in cluster]
    assert all(len(points) == 3 for points in data["series"].values())
    text = run_here("plot", path, "--node", "all", "--metric", "binary",
                    size=(100, 24))
    assert text.returncode == 0 and "3 nodes" in text.stdout


# --- snapshot, diff and leak-hunt of a cluster -------------------------------

WORKERS, NOISE = 37, 5


@pytest.fixture
def scene_cluster(nodes):
    """A fresh three-node cluster, the snapshot scene on each node."""
    three = _three(nodes, "d")
    for node in three:
        _call(node, "scene")
    return three


def test_folders_of_cluster_snapshots_diff_node_by_node_and_across(
        scene_cluster, tmp_path):
    """37 proc_lib workers born on one node between the first two
    snapshots, and NOISE processes on every node, all kept at the third:
    the view across the nodes tells the application's (every node) from
    the one node's, and each node's diff names its own."""
    entry, before, after = scene_cluster
    folders = [str(tmp_path / name) for name in ("one", "two", "three")]

    def snapshot(folder):
        r = run_here("snapshot", entry.node, "--cluster", "-o", folder,
                     "--format", "json", node=entry)
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout)

    first = snapshot(folders[0])
    conforms_to(first, _type("ClusterSnapshot"))
    assert sorted(os.listdir(folders[0])) == sorted(
        f"{n.node}.snapshot" for n in scene_cluster)
    _call(after, "plant", WORKERS, 0, "bpc_")
    for node in scene_cluster:
        _call(node, "noise", NOISE)
    snapshot(folders[1])
    snapshot(folders[2])
    r = run_here("diff", *folders, "--format", "json")
    assert r.returncode == 0, r.stderr
    result = json.loads(r.stdout)
    conforms_to(result, _type("ClusterDiff"))
    groups = {g["what"]: g for g in result["across"]["groups"]}
    assert result["across"]["basis"] == "born_and_kept"
    noise = groups["beam_probe_workload:noise_loop/0"]
    assert noise["on"] == "every node"
    assert noise["nodes"] == {n.node: NOISE for n in scene_cluster}
    workers = groups["beam_probe_workload:leak_worker/1 under bp_leak_sup"]
    assert (workers["on"], workers["nodes"]) == ("one node",
                                                 {after.node: WORKERS})
    kept = {row["node"]: [g["what"] for g in
                          row["diff"]["suspects"]["born_and_kept"]]
            for row in result["nodes"]}
    assert "beam_probe_workload:leak_worker/1 under bp_leak_sup" in kept[after.node]
    assert "beam_probe_workload:leak_worker/1 under bp_leak_sup" not in kept[entry.node]
    text = run_here("diff", *folders)
    assert text.returncode == 0 and "across the 3 nodes" in text.stdout
    assert f"== {after.node}" in text.stdout


def test_files_and_folders_are_not_mixed(tmp_path):
    folder = tmp_path / "d"
    folder.mkdir()
    one_line(run_here("diff", str(folder), str(tmp_path / "x.snapshot")),
             2, "not both")
    empty = tmp_path / "e"
    empty.mkdir()
    one_line(run_here("diff", str(folder), str(empty)), 2,
             "no snapshot files")


def test_leak_hunt_hunts_every_node_and_keeps_a_file_each(scene_cluster,
                                                          tmp_path):
    entry, _before, _after = scene_cluster
    save = tmp_path / "hunt"
    r = run_here("leak-hunt", entry.node, "--cluster", "--interval", "0.2",
                 "--save", str(save), "--format", "json", node=entry)
    assert r.returncode == 0, r.stderr
    result = json.loads(r.stdout)
    conforms_to(result, _type("ClusterLeakHunt"))
    assert result["taken"] == 3 and len(os.listdir(save)) == 9
    assert [row["node"] for row in result["nodes"]] == [
        n.node for n in (entry, _before, _after)]
    assert all("suspects" in row["diff"] for row in result["nodes"])
    start, _, end = r.stderr.partition("\n")       # where, then how many
    assert start.startswith(f"beam-probe: snapshots go to {save} "), start
    one_line((0, "", end), 0, "9 snapshots kept in", str(save))
    assert result["across"]["nodes"] == 3


@pytest.mark.slow
def test_a_cluster_of_three_releases(nodes, tmp_path):
    """OTP 25, 27 and 28 in one cluster, reached through the OTP 27 node
    (each release talks to the one before and after it): every node answers
    the rankings, a watch and a snapshot, the helper forms the entry node
    parsed evaluated by each node's own erl_eval."""
    tag = uuid.uuid4().hex[:6]
    cookie = f"mx{tag}"
    entry = nodes.start("27", prefix=f"bpm{tag}", cookie=cookie)
    old = nodes.start("25", prefix=f"aam{tag}", cookie=cookie)
    new = nodes.start("28", prefix=f"zzm{tag}", cookie=cookie)
    _connect(entry, [old, new])
    names = [entry.node, old.node, new.node]
    for args in (("proc-count", entry.node, "memory", "3"),
                 ("bin-leak", entry.node, "3"), ("ets", entry.node, "3"),
                 ("alloc", entry.node)):
        code, result, err = _json(entry, *args, "--cluster")
        assert code == 0, (args, err)
        assert [n["node"] for n in result["nodes"]] == names, args
    r = run_here("watch", entry.node, "--cluster", "--interval", "0.2",
                 "--count", "2", node=entry)
    assert r.returncode == 0, r.stderr
    samples = [json.loads(line) for line in r.stdout.splitlines()][:-1]
    assert sorted(s["node"] for s in samples if "total" in s) == sorted(
        names * 2)
    folder = str(tmp_path / "mixed")
    code, result, err = _json(entry, "snapshot", entry.node, "--cluster",
                              "-o", folder)
    assert code == 0, err
    assert len(os.listdir(folder)) == 3


def test_a_ranking_of_the_cluster_is_bounded_in_all(cluster):
    """N rows from each node cross the entry together: N x nodes is held
    to one node's bound."""
    entry, _before, _after = cluster
    r = run_here("proc-count", entry.node, "memory", "5000", "--cluster",
                 node=entry)
    one_line(r, 2, "N x nodes", "10,000", "5000 x 3")


@pytest.mark.slow
def test_a_node_that_dies_mid_fan_out_is_its_row(cluster, nodes):
    """A node killed during a 3 s proc-window of the cluster: its row says
    the connection to it was lost, the others answer."""
    import threading

    entry, _before, _after = cluster
    doomed = nodes.start("25", prefix="zzv", cookie=entry.cookie)
    _connect(entry, [doomed])
    killer = threading.Timer(1.0, lambda: os.kill(doomed.pid,
                                                   signal.SIGKILL))
    killer.start()
    try:
        code, result, err = _json(entry, "proc-window", entry.node,
                                  "reductions", "3", "3000", "--cluster")
    finally:
        killer.cancel()
    assert code == 15, err
    rows = {n["node"]: n for n in result["nodes"]}
    assert rows[doomed.node] == {"node": doomed.node,
                                 "error": "connection to it lost"}
    assert all("scanned_first" in rows[n.node] for n in cluster)
    one_line((code, "", err), 15, doomed.node, "connection to it lost")


@pytest.mark.slow
def test_leak_hunt_names_the_workers_on_their_node_only(scene_cluster,
                                                        tmp_path):
    """37 proc_lib workers planted on one node between the first and the
    second rounds of a cluster leak hunt: that node's suspects name them,
    the others' do not, and the view across the nodes says one node."""
    import threading

    entry, before, after = scene_cluster
    planter = threading.Timer(1.0, lambda: _call(after, "plant", WORKERS, 0,
                                                 "bph_"))
    planter.start()
    try:
        r = run_here("leak-hunt", entry.node, "--cluster", "--interval",
                     "2", "--format", "json", node=entry)
    finally:
        planter.cancel()
    assert r.returncode == 0, r.stderr
    result = json.loads(r.stdout)
    group = "beam_probe_workload:leak_worker/1 under bp_leak_sup"
    kept = {row["node"]: {g["what"]: g["count"] for g in
                          row["diff"]["suspects"]["born_and_kept"]}
            for row in result["nodes"]}
    assert kept[after.node].get(group) == WORKERS
    assert group not in kept[entry.node] and group not in kept[before.node]
    across = {g["what"]: g for g in result["across"]["groups"]}
    assert across[group]["on"] == "one node"
    assert across[group]["nodes"] == {after.node: WORKERS}


# -- harmless to the cluster (issue 27) --------------------------------------

@pytest.fixture(scope="module")
def crowd(session_nodes):
    """(entry, before, after): three connected nodes of their own; the one
    after runs 400 extra processes, so its answers are the largest."""
    entry, before, after = _three(session_nodes, "t")
    _call(after, "noise", 400)
    return entry, before, after


def _atom_count(node) -> int:
    with attach(node.node, node.cookie.encode()) as remote:
        return remote.call("erlang", "system_info", [Atom("atom_count")])


def _newest_atoms(node, since: int) -> list:
    with attach(node.node, node.cookie.encode()) as remote:
        count = remote.call("erlang", "system_info", [Atom("atom_count")])
        return [remote.call("erlang", "binary_to_term",
                            [bytes([131, 75]) + i.to_bytes(3, "big")])
                for i in range(since, count)]


def test_names_the_entry_is_not_connected_to_are_never_dialled(crowd):
    """300 names whose hosts do not resolve: the entry looks none of them
    up (it would, inside net_kernel, and refuse connections meanwhile),
    makes no atom of any, and says in each one's row why it was not
    asked; the node it is connected to answers."""
    entry, _before, after = crowd
    tag = uuid.uuid4().hex[:8]

    def names(round_: str) -> str:
        return ",".join([after.node] + [f"n{i}x{round_}{tag}@h{i}.invalid"
                                        for i in range(300)])

    _json(entry, "proc-count", entry.node, "memory", "3", "--nodes",
          names("warm"))  # our helper's own atoms, once
    atoms = _atom_count(entry)
    started = time.monotonic()
    code, result, err = _json(entry, "proc-count", entry.node, "memory", "3",
                              "--nodes", names("new"))
    took = time.monotonic() - started
    assert code == 15, err
    one_line((code, "", err), 15, "1 of 301 nodes answered",
             "not connected to the entry", "and 299 more")
    rows = result["nodes"]
    assert rows[0]["node"] == after.node and "scanned" in rows[0]
    assert all(r["error"].startswith("not connected to the entry node")
               for r in rows[1:])
    assert took < 10, took
    # Our own connections' names are a pool of a few atoms, made once.
    assert [a for a in _newest_atoms(entry, atoms)
            if not str(a).startswith("beam_probe_")] == []


def test_a_members_atoms_are_never_made_on_the_entry(crowd, tmp_path):
    """A process registered on one member under a name that exists only
    there: its snapshot (which names it) crosses the entry as bytes, and
    the name never becomes an atom on the entry."""
    entry, _before, after = crowd
    name = f"bp_only_there_{uuid.uuid4().hex}"
    _call(after, "named", Atom(name))
    folder = str(tmp_path / "snaps")
    code, result, err = _json(entry, "snapshot", entry.node, "--cluster",
                              "-o", folder)
    assert code == 0, err
    assert {row["node"] for row in result["nodes"]} == {n.node
                                                        for n in crowd}
    with attach(after.node, after.cookie.encode()) as remote:
        assert remote.call("erlang", "whereis", [Atom(name)]) != \
            Atom("undefined")
    with attach(entry.node, entry.cookie.encode()) as remote:
        # A string, not an atom, crosses: asking makes no atom either.
        with pytest.raises(Exception, match="badarg"):
            remote.call("erlang", "list_to_existing_atom", [list(name.encode())])
    code, diff, err = _json(entry, "diff", folder, folder)
    assert code == 0, err


def _sizes(remote, nodes) -> dict[str, int]:
    """What each node's proc-count of 400 rows takes in bytes, read from
    the fan-out's own refusals with a budget too small for any answer."""
    from beam_probe.probes.processes import COUNT_LOCALS, HELPER

    args = (Atom("memory"), 400, 0, *COUNT_LOCALS)
    # Answers, not failures (whose size would say nothing).
    assert [kind for kind, _ in remote.fan_out(
        nodes, HELPER, "proc_count", *args, timeout=10)] == ["ok"] * 3
    # Room for the three nodes' notes of their sizes (~40 bytes each),
    # none for an answer (hundreds of bytes at least).
    held_most = remote.held_most
    remote.fan_budget, remote.held_most = 200, 1
    replies = remote.fan_out(nodes, HELPER, "proc_count", *args, timeout=10)
    remote.held_most = held_most
    assert [kind for kind, _ in replies] == ["oversize"] * len(nodes)
    return {node: value[0] for node, (_, value) in zip(nodes, replies)}


def test_a_large_answer_is_fetched_in_pieces(crowd):
    """The node after answers more than a frame may carry (the frame
    lowered here): its answer stays on it and is fetched a piece at a
    time through the entry; every node answers, the large one in full."""
    from beam_probe.probes.processes import proc_count_cluster

    entry, before, after = crowd
    nodes = [n.node for n in crowd]
    with attach(entry.node, entry.cookie.encode()) as remote:
        sizes = _sizes(remote, nodes)
        small = max(sizes[entry.node], sizes[before.node])
        assert sizes[after.node] > 2 * small, sizes
        remote.fan_budget = (small + sizes[after.node]) // 2
        result = proc_count_cluster(remote, "memory", 400, nodes=nodes)
    assert all("scanned" in row for row in result["nodes"]), result["nodes"]
    assert sum(p["node"] == after.node for p in result["processes"]) >= 300


def test_one_nodes_answer_over_what_we_take_is_its_row_alone(crowd):
    """Over what beam-probe takes from one node even in pieces, only the
    answer's size crosses: that node's row says so, the others answer."""
    from beam_probe.errors import EndedEarly
    from beam_probe.probes.processes import proc_count_cluster

    entry, before, after = crowd
    nodes = [n.node for n in crowd]
    with attach(entry.node, entry.cookie.encode()) as remote:
        sizes = _sizes(remote, nodes)
        small = max(sizes[entry.node], sizes[before.node])
        remote.fan_budget = remote.held_most = \
            (small + sizes[after.node]) // 2
        with pytest.raises(EndedEarly) as ended:
            proc_count_cluster(remote, "memory", 400, nodes=nodes)
    rows = {row["node"]: row for row in ended.value.result["nodes"]}
    assert "scanned" in rows[entry.node] and "scanned" in rows[before.node]
    assert "beam-probe takes from one node" in rows[after.node]["error"], \
        rows[after.node]
    assert {p["node"] for p in ended.value.result["processes"]} == {
        entry.node, before.node}


def test_a_held_answer_ends_when_we_go(crowd, monkeypatch):
    """A large answer waiting on its node for us to fetch it: when our
    connection goes, its holder ends within a second or so."""
    from beam_probe.node.remote import Remote
    from beam_probe.probes.processes import COUNT_LOCALS, HELPER

    entry, _before, after = crowd
    held = []
    monkeypatch.setattr(Remote, "_fetched", lambda self, node, answer,
                        budget, timeout: held.append(answer[0])
                        or ("undecodable", "not fetched"))
    with attach(entry.node, entry.cookie.encode()) as remote:
        remote.fan_budget = 200
        remote.fan_out([after.node], HELPER, "proc_count", Atom("memory"),
                       400, 0, *COUNT_LOCALS, timeout=10)
    assert len(held) == 1
    with attach(after.node, after.cookie.encode()) as remote:
        for _ in range(50):
            if remote.call("erlang", "is_process_alive", held) is False:
                break
            time.sleep(0.05)
        assert remote.call("erlang", "is_process_alive", held) is False


def test_answers_that_do_not_fit_together_are_asked_again_apart(crowd):
    """Each node's answer fits in a frame, but not all three together:
    the entry passes on what fits and beam-probe asks the others again,
    in groups that fit; every node answers."""
    from beam_probe.probes.processes import (COUNT_LOCALS, HELPER,
                                             proc_count_cluster)

    entry, _before, _after = crowd
    nodes = [n.node for n in crowd]
    with attach(entry.node, entry.cookie.encode()) as remote:
        sizes = _sizes(remote, nodes)
        remote.fan_budget = max(sizes.values()) * 5 // 4
        assert sum(sizes.values()) > max(sizes.values()) * 5 // 4
        once = remote.fan_out(nodes, HELPER, "proc_count", Atom("memory"),
                              400, 0, *COUNT_LOCALS, timeout=10)
        assert "crowded" in [kind for kind, _ in once], once
        result = proc_count_cluster(remote, "memory", 400, nodes=nodes)
    assert all("scanned" in row for row in result["nodes"]), result["nodes"]
    assert {p["node"] for p in result["processes"]} == set(nodes)


def test_a_folder_of_more_files_than_a_cluster_has_nodes_is_refused(tmp_path):
    """A diff of folders keeps every node's diff for its answer: the files
    a folder may hold are bounded by the nodes a cluster may have, checked
    before any is read."""
    from beam_probe.probes.cluster import MAX_NODES

    crowded = tmp_path / "crowded"
    crowded.mkdir()
    for i in range(MAX_NODES + 1):
        (crowded / f"n{i}.snapshot").write_bytes(b"")
    one_line(run_here("diff", str(crowded), str(crowded)), 2,
             f"{MAX_NODES + 1:,} snapshot files", f"at most {MAX_NODES:,}")


def test_snapshot_batches_are_cut_by_bytes(crowd, tmp_path):
    """Each node's snapshot estimated from its process count: with room
    for one node's at a time, the nodes are asked one batch each (and
    every snapshot is written); with the frame's room, all at once."""
    from beam_probe.snapshots import cluster as snapshots
    from beam_probe.snapshots import take

    entry, _before, _after = crowd
    nodes = [n.node for n in crowd]
    said: list[str] = []
    with attach(entry.node, entry.cookie.encode()) as remote:
        remote.fan_budget = 2 * (take.SNAPSHOT_BYTES_BASE + 4_000)
        result = snapshots.snapshot_cluster(
            remote, str(tmp_path / "one"), nodes, False, "none", 0, None,
            said.append)
        reads = [s for s in said if s.startswith("reading every process")]
        assert reads == ["reading every process, table and port of 1 "
                         "nodes"] * 3, said
        assert all("file" in row for row in result["nodes"]), result
        said.clear()
        remote.fan_budget = 16 * 1024 * 1024
        snapshots.snapshot_cluster(remote, str(tmp_path / "all"), nodes,
                                   False, "none", 0, None, said.append)
    assert [s for s in said if s.startswith("reading every process")] == \
        ["reading every process, table and port of 3 nodes"]


def test_a_member_answering_with_a_huge_term_is_its_row(nodes, tmp_path):
    """A member whose erl_eval answers with a 20 MB term instead of bytes:
    the entry passes on only its size, its row says so, and the other
    nodes answer (it once failed the whole command with exit 8)."""
    from beam_probe.node.local import compile_erl

    entry, before, hostile = _three(nodes, "h")
    compile_erl([os.path.join(REPO, "tests", "erl", "hostile",
                              "erl_eval.erl")], str(tmp_path))
    with attach(hostile.node, hostile.cookie.encode()) as remote:
        remote.call("code", "unstick_mod", [Atom("erl_eval")])
        loaded = remote.call("code", "load_abs",
                             [str(tmp_path / "erl_eval")])
        assert loaded == (Atom("module"), Atom("erl_eval")), loaded
    code, result, err = _json(entry, "proc-count", entry.node, "memory",
                              "3", "--cluster")
    assert code == 15, err
    rows = {row["node"]: row for row in result["nodes"]}
    assert "scanned" in rows[entry.node] and "scanned" in rows[before.node]
    assert "not as beam-probe's helpers answer" in \
        rows[hostile.node]["error"], rows[hostile.node]


def test_connect_dials_only_named_nodes_whose_hosts_resolve(crowd, nodes):
    """--connect: the entry dials a named node it was not connected to
    (same cookie, resolvable host) and asks it; a name whose host does not
    resolve here is never dialled, its row says it is not connected."""
    entry, _before, _after = crowd
    loner = nodes.start("25", prefix="zzl", cookie=entry.cookie)
    stray = f"n{uuid.uuid4().hex[:6]}@nohost-{uuid.uuid4().hex[:6]}.invalid"
    code, result, err = _json(entry, "proc-count", entry.node, "memory", "3",
                              "--nodes", f"{loner.node},{stray}")
    assert code == 15, err
    rows = {row["node"]: row for row in result["nodes"]}
    assert rows[loner.node]["error"].startswith("not connected")
    code, result, err = _json(entry, "proc-count", entry.node, "memory", "3",
                              "--nodes", f"{loner.node},{stray}",
                              "--connect")
    assert code == 15, err
    rows = {row["node"]: row for row in result["nodes"]}
    assert "scanned" in rows[loner.node], rows
    assert rows[stray]["error"].startswith("not connected")


@pytest.mark.parametrize("args,words", [
    (("proc-count", "x@h", "memory", "3", "--connect"),
     ["--connect", "--nodes"]),
])
def test_connect_without_nodes_is_one_line(args, words):
    one_line(run_here(*args), 2, *words)


def test_connect_dials_at_most_a_few(crowd):
    entry, _before, _after = crowd
    names = ",".join(f"n{i}@h{i}.invalid" for i in range(17))
    r = run_here("proc-count", entry.node, "memory", "3", "--nodes", names,
                 "--connect", node=entry)
    one_line(r, 2, "--connect dials at most 16")


def test_one_nodes_large_snapshot_is_fetched_in_pieces(crowd, monkeypatch):
    """A snapshot larger than half a frame by estimate (the frame lowered
    here) is asked as a fan-out to the node itself and fetched a piece at
    a time: the same snapshot as one reply gives."""
    from beam_probe.node.remote import Remote
    from beam_probe.snapshots.take import take

    _entry, _before, after = crowd
    fetched = []
    real = Remote._fetched
    monkeypatch.setattr(Remote, "_fetched", lambda self, *a: fetched.append(
        a[1][1]) or real(self, *a))
    with attach(after.node, after.cookie.encode()) as remote:
        whole = take(remote, "none")
        assert fetched == []
        remote.fan_budget = 4_000
        pieces = take(remote, "none")
    assert len(fetched) == 1 and fetched[0] > 3 * 4_000, fetched
    assert abs(pieces[0]["processes"] - whole[0]["processes"]) <= 5
    assert pieces[0]["processes"] > 400
    assert [kind for kind, _ in pieces[1]] == [kind for kind, _ in whole[1]]
