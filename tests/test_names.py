"""What a process holds and what it is, as a broker showed them wrongly:
a binary counted once per reference (a queue read 19.4 MB from 100
references to 2 binaries of 210 KB; check's top figure exceeded the node's
binary memory), and every queue named by proc_lib's entry point while its
dictionary said which queue it was."""

from __future__ import annotations

import json

import pytest

from beam_probe.erldist.terms import Atom
from beam_probe.node.remote import attach
from beam_probe.probes import health, processes
from beam_probe.snapshots.columns import load
from conftest import run_here

MB = 1024 * 1024
COUNT, REFS = 2, 50  # 2 binaries, 50 references each: 100 in all


@pytest.fixture
def shared(nodes):
    """A node with one process holding 100 references to 2 binaries of
    1 MiB: recon's figure is 100 MiB, the bytes it holds 2 MiB."""
    node = nodes.start()
    with attach(node.node, node.cookie.encode(), timeout=30) as remote:
        holder = remote.call("beam_probe_workload", "shared_refs",
                             [COUNT, MB, REFS])
        yield node, remote, str(holder)


def test_proc_count_keeps_recons_figure_and_shows_the_distinct_bytes(shared):
    node, remote, holder = shared
    ours = processes.proc_count(remote, "binary_memory", 3)
    reference = remote.call("beam_probe_reference", "proc_count",
                            [Atom("binary_memory"), 1])
    # (The rows below it are system processes whose few small binaries
    # move with our own traffic between the two scans.)
    top = ours["processes"][0]
    assert [(top["pid"], top["value"])] == \
        [(str(pid), value) for pid, value in reference]
    assert top["pid"] == holder and top["value"] == COUNT * REFS * MB
    assert top["binary_distinct"] == COUNT * MB
    assert all(p["binary_distinct"] <= p["value"] for p in ours["processes"])

    j = json.loads(run_here("proc-count", node.node, "binary_memory", "3",
                            "--format", "json", node=node).stdout)
    assert (j["processes"][0]["value"], j["processes"][0]["binary_distinct"]) \
        == (COUNT * REFS * MB, COUNT * MB)
    text = run_here("proc-count", node.node, "binary_memory", "3",
                    node=node).stdout
    header = next(line for line in text.splitlines()
                  if line.startswith("pid"))
    assert header.split()[:3] == ["pid", "binary_memory", "distinct"]
    row = next(line for line in text.splitlines() if line.startswith(holder))
    # In binary units, as every text table (issue 38); JSON above is exact.
    assert row.split()[1:5] == ["100.0", "MiB", "2.0", "MiB"]
    assert "once per reference" in text
    # Other rankings carry no such column.
    j = json.loads(run_here("proc-count", node.node, "memory", "3",
                            "--format", "json", node=node).stdout)
    assert "binary_distinct" not in j["processes"][0]


def test_proc_info_shows_both_figures(shared):
    node, _remote, holder = shared
    j = json.loads(run_here("proc-info", node.node, holder, "--format",
                            "json", node=node).stdout)
    used = j["memory_used"]
    assert (used["binary_count"], used["binary_memory"],
            used["binary_distinct"]) == (COUNT * REFS, COUNT * REFS * MB,
                                         COUNT * MB)
    text = run_here("proc-info", node.node, holder, node=node).stdout
    assert "binary_distinct     2097152 (2.0 MiB)" in text, text


def test_proc_count_all_streams_the_distinct_bytes_too(shared):
    node, _remote, holder = shared
    j = json.loads(run_here("proc-count", node.node, "binary_memory",
                            "--all", "--format", "json", node=node).stdout)
    row = next(p for p in j["processes"] if p["pid"] == holder)
    assert (row["value"], row["binary_distinct"]) == \
        (COUNT * REFS * MB, COUNT * MB)


def test_check_never_shows_a_process_holding_more_than_the_node(shared):
    node, remote, holder = shared
    values = health.measure(remote)["values"]
    binary = remote.call("erlang", "memory", [Atom("binary")])
    assert values["top_binary_memory"] == COUNT * MB <= binary
    r = run_here("check", node.node, node=node)
    # ... and names it (issue 38 item 1).
    assert f"top binary_memory 2.0 MiB (each binary once) in {holder} " \
        in r.stdout, r.stdout
    assert "'top_binary_memory'=2097152B" in r.stdout


def test_snapshots_and_diff_count_each_binary_once(shared, tmp_path):
    node, remote, holder = shared
    before, after = tmp_path / "a.snapshot", tmp_path / "b.snapshot"
    r = run_here("snapshot", node.node, "-o", str(before), "--gc", "none",
                 node=node)
    assert r.returncode == 0, r.stderr
    second = str(remote.call("beam_probe_workload", "shared_refs",
                             [COUNT, MB, REFS]))
    r = run_here("snapshot", node.node, "-o", str(after), "--gc", "none",
                 node=node)
    assert r.returncode == 0, r.stderr
    snap = load(str(after))
    for pid in (holder, second):
        row = next(i for i in range(len(snap.keys))
                   if snap.pid_text(snap.keys[i]) == pid)
        assert snap.binary[row] == COUNT * MB  # bytes, each binary once
        assert snap.binary_count[row] == COUNT * REFS  # references
    j = json.loads(run_here("diff", str(before), str(after), "--format",
                            "json").stdout)
    grown = max(d["binary_bytes"] for d in j["change"]["details"])
    # The second holder's 2 MiB, not its 100 MiB of references.
    assert COUNT * MB <= grown < 2 * COUNT * MB, grown


@pytest.fixture
def queue(nodes, otp):
    """A node (of each release) with a gen_server started by proc_lib
    under an unregistered supervisor, named in its dictionary as
    RabbitMQ names its queues."""
    node = nodes.start(otp)
    with attach(node.node, node.cookie.encode(), timeout=30) as remote:
        pid = remote.call("beam_probe_workload", "named_queue", [b"lq.104"])
        yield node, otp, str(pid)


LABEL = '{bp_queue_process,<<"lq.104">>}'
# No row is left out: a fresh node has well under this many processes.
EVERY = "500"


def test_rows_name_a_process_by_its_dictionary_on_every_release(queue):
    """OTP 26.2+ reads the keys one at a time; OTP 25, where
    process_info(P, {dictionary, Key}) is badarg, from a copy of the
    dictionary of each row shown (test_dictionary_names.py: the cap and
    the budget)."""
    node, otp, pid = queue
    j = json.loads(run_here("proc-count", node.node, "memory", EVERY,
                            "--format", "json", node=node).stdout)
    row = next(p for p in j["processes"] if p["pid"] == pid)
    text = run_here("proc-count", node.node, "memory", EVERY,
                    node=node).stdout
    line = next(line for line in text.splitlines() if line.startswith(pid))
    assert j["labels_read"] is True and j["unnamed"] is None
    assert row["label"] == LABEL
    # proc_lib's '$initial_call', not its entry point.
    assert row["initial_call"] == "beam_probe_workload:init/1"
    assert LABEL in line and "beam_probe_workload:init/1" in line
    assert "cannot read one dictionary key" not in text
    assert "unnamed" not in text


def test_snapshot_groups_name_the_gen_server_from_otp_26_2(queue, tmp_path):
    """A snapshot groups by proc_lib's '$initial_call' (a per-instance
    process_name would make a group of each queue), on OTP 25 too, whose
    dictionary it copies (test_snapshot.py tests the cap)."""
    node, otp, pid = queue
    path = tmp_path / "a.snapshot"
    r = run_here("snapshot", node.node, "-o", str(path), "--gc", "none",
                 node=node)
    assert r.returncode == 0, r.stderr
    snap = load(str(path))
    row = next(i for i in range(len(snap.keys))
               if snap.pid_text(snap.keys[i]) == pid)
    what = snap.group_names[snap.groups[row]]
    assert what.startswith("beam_probe_workload:init/1 under "), what


def test_a_clusters_table_names_the_nodes_that_cannot_say():
    from beam_probe.text import cluster as cluster_text
    from beam_probe.text.syntax import ERLANG

    def row(node, initial):
        return {"node": node, "pid": "<0.9.0>", "value": 5, "name": None,
                "label": None, "current_function": None,
                "initial_call": initial, "exited": False}

    result = {"entry": "a@h", "attribute": "memory",
              "nodes": [{"node": "a@h", "scanned": 9, "labels_read": True},
                        {"node": "b@h", "scanned": 9, "labels_read": False}],
              "processes": [row("a@h", "proc_lib:init_p/5"),
                            row("b@h", "proc_lib:init_p/5")]}
    text = cluster_text.proc_count_text(result, ERLANG)
    assert text.count("cannot read one dictionary key") == 1
    assert "b@h (before OTP 26.2)" in text
    result["nodes"][1]["labels_read"] = True
    assert "cannot read" not in cluster_text.proc_count_text(result, ERLANG)
