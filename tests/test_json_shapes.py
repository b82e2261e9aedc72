"""Every command's --format json, key by key and in order, with the type of
each value: what scripts read must not change when the code behind it
does. Written from the output of the code before the seams were redrawn
(issue 11), and kept since; keys are only ever added (check's rss,
alloc_usage_min, top_ets_memory and allocators came with alloc and ets)."""

from __future__ import annotations

import json

import pytest

from conftest import run_cli

S, I, F, B = "str", "int", "float", "bool"
S_OR_NULL = (S, "null")
# A mapping the node defines (process_info's garbage_collection item gains
# keys from release to release): any object.
NODES_OWN = "object"

MEMORY = {k: I for k in ("total", "processes", "processes_used", "system",
                         "atom", "atom_used", "binary", "code", "ets")}


CARRIERS = {k: I for k in ("blocks", "blocks_max", "block_bytes",
                           "block_bytes_max", "carriers", "carriers_max",
                           "carrier_bytes", "carrier_bytes_max",
                           "average_block")}


def row(number: str) -> dict:
    return {"pid": S, number: I, "name": S_OR_NULL,
            "current_function": S_OR_NULL, "initial_call": S_OR_NULL,
            "exited": B}


SHAPES = {
    "ping": (["ping"], {"node": S, "otp_release": S, "erts_version": S,
                        "rtt_ms": F}),
    "memory": (["memory"], {"node": S, "memory": MEMORY}),
    "proc-count": (["proc-count", "memory", "2"], {
        "node": S, "attribute": S, "scanned": I,
        "processes": [row("value")]}),
    "bin-leak": (["bin-leak", "2"], {
        "node": S, "scanned": I, "holders": I, "collected": I,
        "memory_before": MEMORY, "memory_after": MEMORY,
        "processes": [row("delta")]}),
    "bin-leak --dry-run": (["bin-leak", "2", "--dry-run"], {
        "node": S, "scanned": I, "holders": I, "collected": I,
        "memory_before": MEMORY, "memory_after": MEMORY,
        "processes": [], "dry_run": B, "would_collect": I}),
    "proc-window": (["proc-window", "memory", "2", "100"], {
        "node": S, "attribute": S, "window_ms": I, "scanned_first": I,
        "scanned_last": I, "processes": [row("delta")], "born_count": I,
        "born": [row("value")], "dead_count": I,
        "dead": [{"pid": S, "value": I}]}),
    "proc-info": (["proc-info", "code_server"], {
        "node": S, "pid": S,
        "meta": {"registered_name": S_OR_NULL, "group_leader": S,
                 "status": S},
        "signals": {"links": [S], "monitors": [S], "monitored_by": [S],
                    "trap_exit": B},
        "location": {"initial_call": S_OR_NULL,
                     "current_function": S_OR_NULL,
                     "current_stacktrace": [S]},
        "memory_used": {
            "memory": I, "message_queue_len": I, "heap_size": I,
            "total_heap_size": I,
            "garbage_collection": NODES_OWN,
            "binary_count": I, "binary_memory": I},
        "work": {"reductions": I}}),
    "check": (["check"], {
        "status": S, "exit_code": I,
        "nodes": [{"node": S,
                   "values": {"total": I, "processes": I, "binary": I,
                              "ets": I, "atom": I, "binary_share": F,
                              "process_count": I, "top_binary_memory": I,
                              "max_queue": I, "atom_use": F,
                              "rss": (I, "null"), "alloc_usage_min": F,
                              "top_ets_memory": I},
                   "allocators": NODES_OWN,
                   "status": S, "problems": [S]}]}),
    "alloc": (["alloc"], {
        "node": S, "used": I, "allocated": I, "usage": F,
        "memory_total": I, "rss": (I, "null"),
        "mseg_cache": {"hits": I, "calls": I, "hit_rate": (F, "null")},
        # A healthy node's verdict: in use, and the figures that say so.
        "verdict": {"case": S, "allocator": S_OR_NULL,
                    "evidence": {"allocated": I, "used": I, "usage": F}},
        "types": [{"type": S, "instances": I, "used": I, "allocated": I,
                   "usage": F, "used_max": I, "allocated_max": I,
                   "mbcs": CARRIERS, "sbcs": CARRIERS}],
        "raw": S_OR_NULL}),
    "ets": (["ets", "3"], {
        "node": S, "sort": S, "tables": I, "total_memory": I,
        "largest": [{"id": S, "name": S, "owner": S,
                     "owner_name": S_OR_NULL, "owner_group": S, "size": I,
                     "memory": I, "type": S, "protection": S}]}),
}

_TYPES = {str: S, int: I, float: F, bool: B, type(None): "null"}


def conforms(value, shape, where="$"):
    """Raise AssertionError naming the first place ``value`` departs from
    ``shape``: dict keys in order, list elements each, scalar types."""
    if isinstance(shape, dict):
        assert isinstance(value, dict), where
        assert list(value) == list(shape), (where, list(value), list(shape))
        for key, sub in shape.items():
            conforms(value[key], sub, f"{where}.{key}")
    elif isinstance(shape, list):
        assert isinstance(value, list), where
        for i, item in enumerate(value):
            conforms(item, shape[0], f"{where}[{i}]")
    elif shape == NODES_OWN:
        assert isinstance(value, dict), where
    else:
        allowed = shape if isinstance(shape, tuple) else (shape,)
        kind = _TYPES[type(value)]
        # A whole number of milliseconds may print without a fraction.
        assert kind in allowed or (kind == I and F in allowed), \
            (where, value, allowed)


@pytest.mark.parametrize("name", list(SHAPES))
def test_json_is_unchanged(target, name):
    args, shape = SHAPES[name]
    r = run_cli(args[0], target.node, *args[1:], "--format", "json",
                node=target)
    assert r.returncode == 0, r.stderr
    conforms(json.loads(r.stdout), shape)


SAMPLE = {"time": S, "epoch": F, "node": S, "total": I, "processes": I,
          "binary": I, "ets": I, "atom": I, "code": I, "system": I,
          "binary_share": F, "process_count": I, "process_limit": I,
          "port_count": I, "port_limit": I, "atom_count": I,
          "atom_limit": I, "atom_use": F, "ets_count": I, "ets_limit": I,
          "alloc_used": I, "alloc_allocated": I, "alloc_usage": F,
          "rss": (I, "null"), "gcs_per_s": (F, "null"),
          "reclaimed_per_s": (I, "null"), "gc": S, "collected": I,
          "gc_ms": F, "node_ms": F}
FLOOR = {k: I for k in ("total", "processes", "binary", "ets", "atom_count",
                        "process_count", "port_count")}
STATS = {"first": I, "last": I, "min": I, "max": I, "per_hour": (I, "null")}
SUMMARY = {"node": S, "samples": I, "down_samples": I, "seconds": F,
           "gc": S, "interval": F,
           "categories": {k: STATS for k in ("total", "processes", "binary",
                                             "ets", "atom_count",
                                             "process_count",
                                             "port_count")},
           "leaks": [{"category": S, "rises": I, "growth": I, "seconds": F,
                      "per_hour": (I, "null")}],
           "judged": B, "to_judge": I,
           "unconfirmed": [{"category": S, "rises": I, "growth": I,
                            "seconds": F, "per_hour": (I, "null")}]}


@pytest.mark.parametrize("gc", ["none", "holders"])
def test_watch_lines(target, gc):
    r = run_cli("watch", target.node, "--count", "2", "--interval", "0.2",
                "--gc", gc, node=target)
    assert r.returncode == 0, r.stderr
    *samples, summary = [json.loads(line) for line in r.stdout.splitlines()]
    shape = dict(SAMPLE, floor=FLOOR) if gc == "none" else SAMPLE
    for sample in samples:
        conforms(sample, shape)
    conforms(summary, {"summary": SUMMARY})


def test_plot_json(target, tmp_path):
    path = tmp_path / "w.jsonl"
    r = run_cli("watch", target.node, "--count", "2", "--interval", "0.2",
                "-o", str(path), node=target)
    assert r.returncode == 0, r.stderr
    r = run_cli("plot", str(path), "--format", "json", "--metric",
                "total,rss")
    assert r.returncode == 0, r.stderr
    points = [[F, (F, "null")]]
    conforms(json.loads(r.stdout), {
        "node": S, "samples": I, "skipped_lines": I, "first": F, "last": F,
        "metrics": [S], "series": {"total": points, "rss": points},
        "floors": {"total": points}, "leaks": []})


MEMORY7 = {k: I for k in ("total", "processes", "binary", "ets", "atom",
                          "code", "system")}
SNAP_SUMMARY = {"node": S, "time": S, "memory": MEMORY7, "alloc_used": I,
                "alloc_allocated": I, "processes": I, "ets_tables": I,
                "ports": I, "atoms": I}
MAYBE_I = (I, "null")
DIFF3 = {
    "before": SNAP_SUMMARY, "after": SNAP_SUMMARY, "middle": SNAP_SUMMARY,
    "suspects": {
        "born_and_kept": [{"what": S, "count": I, "bytes": I,
                           "binary_bytes": I, "growth": I,
                           "examples": [S]}],
        "growing_processes": [{"pid": S, "what": S, "name": S_OR_NULL,
                               "rising": [S], "memory": [I],
                               "binary_bytes": [I]}],
        "groups_rising": [{"what": S, "counts": [I], "examples": [S]}],
        "ets": [{"name": S, "id": S, "owner": S, "born": B,
                 "rows": [MAYBE_I], "bytes": [MAYBE_I]}],
        "ports_born_and_kept": [S],
        "atoms": {"added": [I], "rising": B}},
    "change": {"size_bytes": I, "memory": MEMORY7,
               "details": [{"what": S, "size_bytes": I, "binary_bytes": I,
                            "+": I, "-": I, "before": I, "after": I,
                            "examples": [S]}],
               "groups": I},
    "ets": [{"name": S, "id": S, "owner": S, "new": B, "rows_before": I,
             "rows_after": I, "bytes_before": I, "bytes_after": I}],
    "atoms": {"added": I, "names": [S], "all_named": B},
    "ports": {"before": I, "after": I, "new": [S], "new_count": I},
    "elixir": B}


def test_snapshot_and_leak_hunt_json(target, tmp_path):
    r = run_cli("snapshot", target.node, "-o", str(tmp_path / "a"),
                "--format", "json", node=target)
    assert r.returncode == 0, r.stderr
    conforms(json.loads(r.stdout), {
        "node": S, "file": S, "bytes": I, "time": S, "gc": S,
        "processes": I, "ets_tables": I, "ports": I})
    r = run_cli("leak-hunt", target.node, "--interval", "0", "--format",
                "json", node=target)
    assert r.returncode == 0, r.stderr
    conforms(json.loads(r.stdout), {
        "node": S, "interval": F, "gc": S, "taken": I, "files": [S],
        "saved": S_OR_NULL, "interrupted": B, "compared": I,
        "diff": DIFF3})
