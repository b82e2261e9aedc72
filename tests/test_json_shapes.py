"""Every command's --format json against the result type its probe
declares (beam_probe/probes/results.py): key by key, in order, with the
type of each value. What scripts read changes only when a type does, and
the types are the one copy of the shapes (tests/shapes.py reads them)."""

from __future__ import annotations

import json

import pytest

from beam_probe.probes import results as r
from conftest import run_here
from shapes import conforms_to

COMMANDS = {
    "ping": (["ping"], r.Ping),
    "memory": (["memory"], r.MemoryResult),
    "proc-count": (["proc-count", "memory", "2"], r.ProcCount),
    "bin-leak": (["bin-leak", "2"], r.BinLeak),
    "bin-leak --dry-run": (["bin-leak", "2", "--dry-run"], r.BinLeak),
    "proc-window": (["proc-window", "memory", "2", "100"], r.ProcWindow),
    "proc-info": (["proc-info", "code_server"], r.ProcInfo),
    "check": (["check"], r.CheckReport),
    "alloc": (["alloc"], r.AllocReport),
    "ets": (["ets", "3"], r.EtsReport),
    "inspect": (["inspect", "application_controller"], r.ProcessInspection),
    "inspect plain": (["inspect", "code_server"], r.ProcessInspection),
    "inspect --table": (["inspect", "--table", "ac_tab"],
                        r.TableInspection),
}


@pytest.mark.parametrize("name", list(COMMANDS))
def test_json_is_its_result_type(target, name):
    args, tp = COMMANDS[name]
    out = run_here(args[0], target.node, *args[1:], "--format", "json",
                  node=target)
    assert out.returncode == 0, out.stderr
    value = json.loads(out.stdout)
    conforms_to(value, tp)
    if name == "proc-info":
        # The groups hold the items recon:info/1 shows, in its order.
        from beam_probe.probes.info import GROUPS

        for group, keys in GROUPS:
            assert list(value[group]) == list(keys), group
    if name == "check":
        assert set(value["nodes"][0]) >= {"values", "allocators"}


@pytest.mark.parametrize("gc", ["none", "holders"])
def test_watch_lines(target, gc):
    out = run_here("watch", target.node, "--count", "2", "--interval", "0.2",
                  "--gc", gc, "--format", "json", node=target)
    assert out.returncode == 0, out.stderr
    *samples, summary = [json.loads(line) for line in out.stdout.splitlines()]
    for sample in samples:
        conforms_to(sample, r.Sample)
        assert ("floor" in sample) == (gc == "none")
        assert "total" in sample and "down" not in sample
    assert list(summary) == ["summary"]
    conforms_to(summary["summary"], r.WatchSummary)


def test_plot_json(target, tmp_path):
    path = tmp_path / "w.jsonl"
    out = run_here("watch", target.node, "--count", "2", "--interval", "0.2",
                  "-o", str(path), "--format", "json", node=target)
    assert out.returncode == 0, out.stderr
    out = run_here("plot", str(path), "--format", "json", "--metric",
                  "total,rss")
    assert out.returncode == 0, out.stderr
    value = json.loads(out.stdout)
    conforms_to(value, r.PlotData)
    assert list(value["series"]) == ["total", "rss"]


def test_snapshot_and_leak_hunt_json(target, tmp_path):
    out = run_here("snapshot", target.node, "-o", str(tmp_path / "a"),
                  "--format", "json", node=target)
    assert out.returncode == 0, out.stderr
    conforms_to(json.loads(out.stdout), r.SnapshotTaken)
    out = run_here("leak-hunt", target.node, "--interval", "0", "--format",
                  "json", node=target)
    assert out.returncode == 0, out.stderr
    hunt = json.loads(out.stdout)
    conforms_to(hunt, r.LeakHunt)
    assert "suspects" in hunt["diff"] and "middle" in hunt["diff"]


def test_trace_gc_json(target):
    out = run_here("trace-gc", target.node, "code_server", "<0.9999.0>",
                  "--duration", "0.5", "--format", "json", node=target)
    assert out.returncode == 0, out.stderr
    header, *collections, summary = [json.loads(line)
                                     for line in out.stdout.splitlines()]
    conforms_to(header, r.TraceHeader)
    assert header["skipped"] == [{"pid": "<0.9999.0>", "why": "not_alive"}]
    for collection in collections:
        conforms_to(collection, r.Collection)
    assert list(summary) == ["summary"]
    conforms_to(summary["summary"], r.TraceSummary)


def test_the_shapes_checker_refuses_what_departs():
    """A test that cannot fail is a defect: the checker's own refusals."""
    good = {"node": "a@b", "otp_release": "25", "erts_version": "13",
            "rtt_ms": 0.5}
    conforms_to(good, r.Ping)
    for bad in ({**good, "extra": 1}, {k: v for k, v in good.items()
                                       if k != "rtt_ms"},
                dict(reversed(list(good.items()))), {**good, "rtt_ms": "x"},
                {**good, "node": None}):
        with pytest.raises(AssertionError):
            conforms_to(bad, r.Ping)
