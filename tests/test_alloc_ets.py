"""alloc and ets on real OTP 25 and 28 nodes: the allocator figures against
sums computed in the node, the three verdicts' first two made on purpose
(a fragmented binary allocator, a plain holder), a planted table listed
first with its exact size and memory, and bad input."""

from __future__ import annotations

import json

import pytest

from beam_probe.erldist.terms import Atom
from beam_probe.probes.alloc import FRAGMENTED_MIN
from beam_probe.node.remote import attach
from conftest import run_here

MB = 1024 * 1024


def _json(node, command, *args):
    r = run_here(command, node.node, *args, "--format", "json", node=node)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_alloc_figures_are_the_nodes_own_sums(target, remote):
    ours = _json(target, "alloc")
    reference = {str(t): (used, allocated) for t, used, allocated in
                 remote.call("beam_probe_reference", "alloc_sums", [])}
    assert {t["type"] for t in ours["types"]} == set(reference)
    assert "literal_alloc" in reference  # recon_alloc leaves it out
    for t in ours["types"]:
        used, allocated = reference[t["type"]]
        # Read a moment apart, by two calls: the call's own processes
        # (the guard, its worker) take and give back a carrier or two of
        # eheap_alloc in between (measured: 2 MB).
        assert abs(t["allocated"] - allocated) <= max(allocated // 10,
                                                      4 * MB), t
        assert abs(t["used"] - used) <= max(used // 10, 4 * MB), t
        assert t["used"] <= t["allocated"]
        assert t["mbcs"]["block_bytes"] + t["sbcs"]["block_bytes"] == \
            t["used"]
    assert ours["allocated"] == sum(t["allocated"] for t in ours["types"])
    assert ours["rss"] > ours["allocated"] // 2  # Linux: read, in bytes
    assert ours["verdict"]["case"] == "in_use"


def test_a_fragmented_binary_allocator_is_named(nodes, otp):
    node = nodes.start(otp)
    with attach(node.node, node.cookie.encode()) as r:
        # 3,000 binaries of 64 KB (~190 MB), one in 32 kept: ~6 MB live in
        # carriers that cannot be returned.
        r.call("beam_probe_workload", "fragment", [3000, 32])
    report = _json(node, "alloc")
    binary = next(t for t in report["types"] if t["type"] == "binary_alloc")
    assert binary["allocated"] >= FRAGMENTED_MIN and binary["usage"] < 0.2
    assert report["verdict"]["case"] == "fragmentation"
    assert report["verdict"]["allocator"] == "binary_alloc"
    evidence = report["verdict"]["evidence"]
    assert evidence["blocks_per_carrier"] <= 8  # a few pin each carrier
    assert evidence["used"] == binary["used"]
    text = run_here("alloc", node.node, node=node).stdout
    first = text.splitlines()[0].split(": ", 1)[1]
    assert first.startswith("fragmentation: binary_alloc: ")
    assert "live blocks a carrier" in first and "blocks over" in first
    check = run_here("check", node.node, "--warn", "alloc_usage_min=50%",
                    "--format", "json", node=node)
    assert check.returncode == 1, check.stdout
    # The same figure a moment later (our own calls move it a little).
    assert abs(json.loads(check.stdout)["nodes"][0]["values"][
        "alloc_usage_min"] - 100 * binary["usage"]) < 1


def test_a_burst_partly_freed_is_a_peak_not_fragmentation(nodes, otp):
    """After a burst, carriers still many blocks full each: the verdict
    says a peak passed, with its figures, and to watch whether allocated
    comes back down; not "a few live blocks"."""
    node = nodes.start(otp)
    with attach(node.node, node.cookie.encode()) as r:
        # 40,000 binaries of 2 KB (~80 MB) at once, one in three kept.
        r.call("beam_probe_workload", "burst", [40_000, 2048, 3])
    report = _json(node, "alloc")
    verdict = report["verdict"]
    assert verdict["case"] == "peak", verdict
    assert verdict["allocator"] == "binary_alloc"
    evidence = verdict["evidence"]
    assert evidence["blocks_per_carrier"] > 8
    assert evidence["used_max"] >= 2 * evidence["used"]
    text = run_here("alloc", node.node, node=node).stdout
    assert text.splitlines()[0].split(": ", 1)[1].startswith(
        "after a peak: binary_alloc: ")
    assert "beam-probe watch" in text.splitlines()[0]


def test_peak_used_is_never_below_used(target):
    report = _json(target, "alloc")
    for t in report["types"]:
        assert t["used_max"] >= t["used"], t
        assert t["allocated_max"] >= t["allocated"], t
    header = run_here("alloc", target.node, node=target).stdout.splitlines()
    assert any(line.startswith("allocator") and "peak used" in line
               for line in header)


def test_an_idle_node_with_a_large_process_table_is_healthy(nodes, otp):
    """As brokers start theirs: +P 2000000 sizes ll_alloc's carriers up
    front (67 MiB at 54% on OTP 27), a reserve that is not fragmentation."""
    node = nodes.start(otp, args=("+P", "2000000"))
    report = _json(node, "alloc")
    assert report["verdict"]["case"] == "in_use", report["verdict"]
    check = run_here("check", node.node, "--format", "json", node=node)
    value = json.loads(check.stdout)["nodes"][0]["values"]["alloc_usage_min"]
    assert value > 75, value


def test_a_plain_holder_is_memory_in_use(nodes, otp):
    node = nodes.start(otp)
    with attach(node.node, node.cookie.encode()) as r:
        r.call("beam_probe_workload", "hold_binaries", [3000])
    report = _json(node, "alloc")
    binary = next(t for t in report["types"] if t["type"] == "binary_alloc")
    assert binary["used"] >= 3000 * 65536 and binary["usage"] > 0.8
    assert report["verdict"]["case"] == "in_use"


def test_ets_lists_a_planted_table_first_exactly(nodes, otp):
    node = nodes.start(otp)
    with attach(node.node, node.cookie.encode()) as r:
        r.call("beam_probe_workload", "big_table", [Atom("bp_big"), 20000])
        words = r.call("ets", "info", [Atom("bp_big"), Atom("memory")])
        wordsize = r.call("erlang", "system_info", [Atom("wordsize")])
        tables = len(r.call("ets", "all", []))
    report = _json(node, "ets", "3")
    first = report["largest"][0]
    assert (first["name"], first["size"], first["memory"]) == \
        ("bp_big", 20000, words * wordsize)
    assert first["owner_name"] == "bp_big_owner"
    assert (first["type"], first["protection"]) == ("set", "public")
    assert len(report["largest"]) == 3 and report["tables"] == tables
    by_size = _json(node, "ets", "1", "--sort", "size")["largest"]
    assert by_size[0]["name"] == "bp_big"
    check = _json(node, "check")
    assert check["nodes"][0]["values"]["top_ets_memory"] == words * wordsize
    text = run_here("ets", node.node, "2", node=node).stdout
    assert text.splitlines()[3].startswith("bp_big ")  # title, head, rule


@pytest.mark.parametrize("args, message", [
    (["ets", "0"], "N must be at least 1"),
    (["ets", "10001"], "at most 10000"),
    (["ets", "3", "--sort", "rows"], "'rows' is not one of"),
    (["alloc", "extra"], "unexpected argument"),
])
def test_bad_input_is_one_line(target, args, message):
    r = run_here(args[0], target.node, *args[1:], node=target)
    assert r.returncode == 2, r.stderr
    # One line of ours; click's own option errors end with theirs, under
    # its usage line.
    last = r.stderr.strip().splitlines()[-1]
    assert message in last and "Traceback" not in r.stderr, r.stderr


def test_raw_writes_the_full_data_for_offline_study(target, tmp_path):
    from beam_probe.erldist import etf

    path = tmp_path / "alloc.etf"
    report = _json(target, "alloc", "--raw", str(path))
    assert report["raw"] == str(path)
    data = path.read_bytes()
    raw = etf.decode(data, max_items=10_000_000, max_uncompressed=1 << 28)
    kinds = {str(kind) for kind, _ in raw}
    assert "mseg_alloc" in kinds and "binary_alloc" in kinds
    # The folded reply is a few hundred bytes per type; the raw data, even
    # compressed, far more.
    assert len(data) > 2000
    bad = run_here("alloc", target.node, "--raw", str(tmp_path / "no" / "x"),
                  node=target)
    assert bad.returncode == 11 and "cannot write" in bad.stderr
