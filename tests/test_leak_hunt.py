"""bin-leak and proc-count against the in-node reference, pid for pid."""

from __future__ import annotations

import json

import pytest

from beam_probe.dist.terms import Atom
from beam_probe.probes import processes
from beam_probe.remote import attach
from conftest import run_cli

LEAKERS, KEEPERS, IDLE = 12, 8, 2000


@pytest.fixture(scope="module")
def leaky(session_nodes, otp):
    node = session_nodes.start(otp)
    with attach(node.node, node.cookie.encode(), timeout=60) as remote:
        pids = remote.call("beam_probe_workload", "start",
                           [LEAKERS, KEEPERS, IDLE])
        yield node, remote, pids


def loaded_modules(remote):
    return {str(m) for m, _ in remote.call("code", "all_loaded")}


def test_bin_leak_matches_reference(leaky):
    node, remote, (leakers, _keepers, _idle) = leaky
    remote.call("beam_probe_workload", "refill", [leakers])
    ours = processes.bin_leak(remote, 5)
    remote.call("beam_probe_workload", "refill", [leakers])
    reference = remote.call("beam_probe_reference", "bin_leak", [5])
    assert [(p["pid"], p["delta"]) for p in ours["processes"]] == \
        [(str(pid), delta) for pid, delta in reference]
    # The workload's largest leaker dropped 100 + 7 * LEAKERS binaries.
    assert ours["processes"][0]["delta"] <= -(100 + 7 * LEAKERS)
    assert ours["collected"] == ours["holders"] < ours["scanned"]
    assert ours["memory_after"]["binary"] < ours["memory_before"]["binary"]


@pytest.mark.parametrize("attribute", ["binary_memory", "message_queue_len"])
def test_proc_count_matches_reference(leaky, attribute):
    _node, remote, _pids = leaky
    n = 5
    ours = processes.proc_count(remote, attribute, n)
    reference = remote.call("beam_probe_reference", "proc_count",
                            [Atom(attribute), n])
    assert [(p["pid"], p["value"]) for p in ours["processes"]] == \
        [(str(pid), value) for pid, value in reference]


def test_binary_memory_finds_the_keepers(leaky):
    _node, remote, (_leakers, keepers, _idle) = leaky
    ours = processes.proc_count(remote, "binary_memory", 3)
    expected = [(str(keepers[j]), (j + 1) * 100000 + 1000 * j)
                for j in (KEEPERS - 1, KEEPERS - 2, KEEPERS - 3)]
    assert [(p["pid"], p["value"]) for p in ours["processes"]] == expected


def test_nothing_is_loaded_on_the_target(leaky):
    node, remote, (leakers, _k, _i) = leaky
    before = loaded_modules(remote)
    env = {"HOME": node.home}
    for args in (["ping"], ["memory"], ["bin-leak", "3"],
                 ["proc-count", "memory", "3"],
                 ["proc-count", "binary_memory", "3"]):
        r = run_cli(args[0], node.node, *args[1:], env=env)
        assert r.returncode == 0, r.stderr
    after = loaded_modules(remote)
    assert after - before == set()
    assert "beam_probe_scan" not in after


def test_cli_bin_leak_json_shape(leaky):
    node, remote, (leakers, _k, _i) = leaky
    remote.call("beam_probe_workload", "refill", [leakers])
    r = run_cli("bin-leak", node.node, "3", "--format", "json",
                env={"HOME": node.home})
    assert r.returncode == 0, r.stderr
    j = json.loads(r.stdout)
    assert j["node"] == node.node
    assert {"total", "binary"} <= set(j["memory_before"]) & set(
        j["memory_after"])
    first = j["processes"][0]
    assert set(first) == {"pid", "delta", "name", "current_function",
                          "initial_call"}
    assert first["pid"].startswith("<0.") and first["delta"] < 0
    assert first["current_function"].startswith("beam_probe_workload:")


def test_cli_proc_count_node_from_env(leaky):
    node, _remote, _pids = leaky
    r = run_cli("proc-count", "binary_memory", "3", "--format", "json",
                env={"HOME": node.home, "BEAM_PROBE_NODE": node.node})
    assert r.returncode == 0, r.stderr
    j = json.loads(r.stdout)
    assert j["attribute"] == "binary_memory" and len(j["processes"]) == 3
    text = run_cli("proc-count", node.node, "binary_memory", "3",
                   env={"HOME": node.home})
    assert "binary_memory" in text.stdout and "beam_probe_workload" in \
        text.stdout


def test_cli_usage_errors(leaky):
    node, _remote, _pids = leaky
    env = {"HOME": node.home}
    r = run_cli("proc-count", node.node, "bogus", "3", env=env)
    assert r.returncode == 2 and "binary_memory" in r.stderr
    r = run_cli("bin-leak", node.node, "0", env=env)
    assert r.returncode == 2 and "at least 1" in r.stderr
    r = run_cli("bin-leak", node.node, "many", env=env)
    assert r.returncode == 2 and "Traceback" not in r.stderr


def test_max_gc_caps_collection(leaky):
    _node, remote, (leakers, _k, _i) = leaky
    remote.call("beam_probe_workload", "refill", [leakers])
    result = processes.bin_leak(remote, 3, max_gc=2)
    assert result["collected"] == 2 < result["holders"]
