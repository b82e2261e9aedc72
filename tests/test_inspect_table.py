"""inspect --table as the hostile round ran it, on real nodes (OTP 25,
27, 28): a compressed table (a reader gets back 16 times what it
stores) and a table rewritten while it is read. What the walk costs is
watched on the node itself (tests/erl/beam_probe_table_fixture.erl): its
memory at the peak, the table's own memory, and the longest collection
and run without a yield that system_monitor saw. Bounds are generous (4
times what the README states), never a speed.
"""

from __future__ import annotations

import json

import pytest

from beam_probe.erldist.terms import Atom
from beam_probe.node.remote import attach
from conftest import run_here

FIXTURE = "beam_probe_table_fixture"
MB = 1024 * 1024
# README, "What it costs the node": a walk reads about 2 MB of objects
# at a time (as read, not as stored), and the node rises about 20 MB
# (18.5-19 MB for the packed table here, 2 cores).
STATED_RISE = 20 * MB


def _call(node, function: str, args: list):
    with attach(node.node, node.cookie.encode(), timeout=120) as remote:
        return remote.call(FIXTURE, function, args)


def _inspect(node, *args: str) -> dict:
    r = run_here("inspect", node.node, "--table", *args, "--format", "json",
                 "--timeout", "120", node=node, timeout=300)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def _watched(node, table: str, *args: str) -> tuple[dict, dict]:
    _call(node, "watch_start", [Atom(table)])
    result = _inspect(node, table, *args)
    watched = _call(node, "watch_stop", [])
    return result, {str(k): v
                    for k, v in watched.items()}


def test_a_compressed_table_is_read_by_what_it_costs_once_read(nodes, otp):
    node = nodes.start(otp)
    # 1,000 objects of 20,000 small integers: 20 MB stored (packed, a
    # byte each), 320 MB once read (2 words each).
    stored = _call(node, "packed", [Atom("bp_packed"), 1000, 20_000]) * 8
    assert 15 * MB < stored < 30 * MB
    result, watched = _watched(node, "bp_packed")
    print(f"\nOTP {otp}: packed table {stored / MB:.1f} MB stored: node "
          f"+{watched['memory_rise'] / MB:.1f} MB, longest gc "
          f"{watched['long_gc_ms']} ms, run {watched['long_schedule_ms']} ms,"
          f" ticker late {watched['late_ms']} ms")
    # Read whole, every object, and accounted as stored.
    assert result["compressed"] is True and result["sampled"] is False
    assert result["seen"] == 1000 and result["changed"] is False
    (family,) = result["families"]
    assert family["count"] == 1000
    assert 0.5 * stored < family["bytes"] < 1.5 * stored
    # Chunks sized by the stored words read 83 objects of 1.6 MB at a
    # time and took the node 2.3 GB higher; now a batch is ~2 MB as read.
    assert watched["memory_rise"] < 4 * STATED_RISE
    _no_long_pause(watched)


def _no_long_pause(watched: dict) -> None:
    # README: none over 50 ms was seen; the round saw both schedulers
    # stalled 0.5-1 s. Generous: a loaded machine stretches a run.
    assert watched["long_gc_ms"] < 500 and watched["long_schedule_ms"] < 500


def test_a_table_written_while_it_is_read_is_not_fixed(nodes, otp):
    node = nodes.start(otp)
    writer = _call(node, "churn", [Atom("bp_churn"), 20_000])
    try:
        # The whole table (--budget past its size): the walk lasts seconds
        # while the writer deletes and inserts, 100 writes a millisecond.
        result, watched = _watched(node, "bp_churn", "--budget", "40000")
        # Nothing is held when the walk ends: no fixation left behind.
        with attach(node.node, node.cookie.encode()) as remote:
            assert remote.call("ets", "info", [Atom("bp_churn"),
                                               Atom("safe_fixed")]) is False
    finally:
        _call(node, "churn_stop", [writer])
    print(f"\nOTP {otp}: churned table {watched['table_base'] / 1000:.1f} "
          f"words an object, at its peak {watched['table_peak'] / 1000:.1f};"
          f" node +{watched['memory_rise'] / MB:.1f} MB, longest gc "
          f"{watched['long_gc_ms']} ms, run {watched['long_schedule_ms']} "
          f"ms, ticker late {watched['late_ms']} ms; {result['seen']:,} "
          f"seen of {result['size']:,}")
    # A fixation for the whole walk kept every deleted object (the table
    # went from 64.5 to 123 MB): its words an object grew. Unfixed, they
    # stay as they were.
    assert watched["table_peak"] < 1.2 * watched["table_base"]
    _no_long_pause(watched)
    assert result["changed"] is True
    assert result["seen"] > 10_000


def test_a_table_of_one_size_rewritten_while_read_says_so(nodes, otp):
    """Its size the same at the end as at the start (a writer that
    deletes one for each it inserts): the keys listed whose objects were
    gone when read say that it changed."""
    node = nodes.start(otp)
    writer = _call(node, "churn", [Atom("bp_even"), 20_000, 0])
    try:
        result = _inspect(node, "bp_even", "--budget", "40000")
    finally:
        _call(node, "churn_stop", [writer])
    assert result["changed"] is True


@pytest.mark.parametrize("kind", ["bag", "duplicate_bag", "ordered_set"])
def test_each_object_is_read_once(nodes, otp, kind):
    node = nodes.start(otp)
    size = _call(node, "kind", [Atom("bp_kind"), Atom(kind)])
    # A bag of 300 keys holds 3,000 objects; a duplicate_bag 6,000 (each
    # twice); an ordered_set 300.
    assert size == {"bag": 3000, "duplicate_bag": 6000,
                    "ordered_set": 300}[kind]
    result = _inspect(node, "bp_kind")
    assert result["seen"] == size and result["size"] == size
    assert sum(f["count"] for f in result["families"]) == size
    assert result["sampled"] is False and result["changed"] is False
    half = _inspect(node, "bp_kind", "--budget", str(size // 2))
    assert half["seen"] == size // 2 and half["sampled"] is True


# A duplicate_bag of a million objects {k, I, {}} under one key (the
# round's), a bag of 30,000 of 200 words (1.6 KB) under one (a bag
# checks each insert against the key's others: a million would take
# hours to make).
ONE_KEY = {"duplicate_bag": (1_000_000, 0), "bag": (30_000, 200)}


@pytest.mark.parametrize("kind", ["bag", "duplicate_bag"])
def test_a_bag_key_of_a_million_objects_is_counted_not_copied(nodes, otp,
                                                              kind):
    """ets:lookup/2 of a bag's key copies all its objects, whatever the
    budget: a million under one key took the node +216 MB (+187 MB at
    --budget 1). Such a key is counted (select_count copies nothing) and
    left unread; the other keys are read."""
    node = nodes.start(otp)
    objects, words = ONE_KEY[kind]
    size = _call(node, "one_key", [Atom("bp_one_key"), Atom(kind), objects,
                                   words])
    assert size == objects + 100
    for budget in ("20000", "1"):
        result, watched = _watched(node, "bp_one_key", "--budget", budget)
        print(f"\nOTP {otp}: {kind}, {objects:,} objects under one key, "
              f"--budget {budget}: node +{watched['memory_rise'] / MB:.1f} "
              f"MB, longest gc {watched['long_gc_ms']} ms, run "
              f"{watched['long_schedule_ms']} ms, ticker late "
              f"{watched['late_ms']} ms; {result['seen']} read, "
              f"{result['unread_objects']:,} not")
        # Copied whole: +243 MB (duplicate_bag), +2,068 MB (bag) here.
        assert watched["memory_rise"] < 4 * STATED_RISE
        _no_long_pause(watched)
        assert result["changed"] is False
        if budget == "1":
            assert result["seen"] <= 1
            continue
        # The hundred other keys read whole; k's million counted apart,
        # never scaled into the families.
        assert result["seen"] == 100 and result["sampled"] is False
        assert result["unread_keys"] == 1
        assert result["unread_objects"] == objects
        assert sum(f["count"] for f in result["families"]) == 100


def test_keys_are_listed_by_their_size(nodes, otp):
    """Keys were listed 500 a select chunk whatever their size: 600 keys
    of 320 KB took the node +410 MB. Now a chunk lists only keys a guard
    proves small (100 integers here) and each large one is listed alone
    in its place, a batch taking about 2 MB of keys."""
    node = nodes.start(otp)
    stored = _call(node, "big_keys", [Atom("bp_big_keys"), 400, 20_000]) * 8
    assert stored > 100 * MB
    result, watched = _watched(node, "bp_big_keys")
    print(f"\nOTP {otp}: 400 keys of 320 KB and 100 small, "
          f"{stored / MB:.0f} MB: node "
          f"+{watched['memory_rise'] / MB:.1f} MB, longest gc "
          f"{watched['long_gc_ms']} ms, run {watched['long_schedule_ms']} ms,"
          f" ticker late {watched['late_ms']} ms")
    # Listed 500 a chunk: +363 MB here (2 cores, OTP 25).
    assert watched["memory_rise"] < 4 * STATED_RISE
    _no_long_pause(watched)
    assert result["seen"] == 500 and result["sampled"] is False
    assert result["unread_keys"] == 0 and result["changed"] is False
    assert sorted(f["count"] for f in result["families"]) == [100, 400]
