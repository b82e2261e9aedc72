"""`inspect DUMP PID` on a deep recursion and a long list, in the dump of
a real death (a capped node whose eater runs out of memory: see
tests/test_crashdump.py), OTP 25, 27, 28. The hostile round's inspect of
a process of 326,474 stack slots was killed after 922 s (each slot
searched the heap's text); a 1.5M-element list's count was blank.
The fixture (tests/erl/beam_probe_deep_fixture.erl): bp_deep, 200,000
frames deep, each frame's two slots holding the State all of them hold
and a tuple of its own (400,000 slots); bp_long, a list of 1,500,000
integers. Deadlines here only keep a hang from hanging the suite.
"""

from __future__ import annotations

import json
import os
import shutil
import time

import pytest

from beam_probe.erldist.terms import Atom
from beam_probe.node.remote import attach
from conftest import NodeFactory, run_cli
from test_crashdump import CAPPED, _kill

DEPTH = 200_000
LENGTH = 1_500_000


@pytest.fixture(scope="module")
def deep_dump(beam_dir, otp, tmp_path_factory):
    factory = NodeFactory(beam_dir)
    try:
        node = factory.start(otp, args=CAPPED, eval_expr=(
            f"beam_probe_deep_fixture:start({DEPTH}, {LENGTH})"))
        with attach(node.node, node.cookie.encode()) as remote:
            deadline = time.monotonic() + 120
            while remote.call("erlang", "whereis", [Atom("bp_long")]) \
                    == Atom("undefined"):
                assert time.monotonic() < deadline, "never started"
                time.sleep(0.2)
        _kill(node, Atom("eheap"))
        out = str(tmp_path_factory.mktemp("deep"))
        dump = os.path.join(out, f"{otp}-deep.dump")
        shutil.copy(os.path.join(node.home, "erl_crash.dump"), dump)
    finally:
        factory.stop_all()
    yield dump


def _inspect(dump: str, name: str) -> dict:
    r = run_cli("inspect", dump, name, "--format", "json", timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout)


def test_a_deep_recursion_is_read_once(deep_dump):
    result = _inspect(deep_dump, "bp_deep")
    parts = result["parts"]
    roots = [p for p in parts if p["depth"] == 0]
    # The State every frame holds is counted once, where the dump first
    # wrote it; the other frames' slots are shared, one row for most.
    shared = [p for p in roots if p["kind"].startswith("shared")]
    assert sum(max(p["count"], 1) for p in shared) >= DEPTH - 1
    # Each frame's own tuple, {frame, N}: 3 words, 200,000 of them, in
    # the slots shown and the one row of the others.
    others = [p for p in roots if p["path"].endswith("other stack slots")
              and not p["kind"].startswith("shared")]
    assert len(others) == 1 and others[0]["count"] > DEPTH - 100
    total = result["total"]["bytes"]
    assert 3 * 8 * DEPTH <= total <= result["total"]["memory"]
    assert len(roots) < 200  # bounded: not a row a slot


def test_a_long_list_is_counted(deep_dump):
    result = _inspect(deep_dump, "bp_long")
    (listed,) = [p for p in result["parts"] if p["depth"] == 0
                 and p["kind"] == "list"]
    assert listed["count"] == LENGTH
    # Two words a cell, integers immediate.
    assert listed["bytes"] >= 2 * 8 * LENGTH


def test_a_stack_past_the_bound_is_counted_whole(deep_dump, monkeypatch):
    """Stack slots are placed up to a bound (a Root each in memory); past
    it, what the others hold is counted with the last slot placed, and
    the answer says so. The bound made small here: the total is the
    same."""
    from beam_probe.crashdump import inspect as dead
    from beam_probe.crashdump.reader import Dump

    with Dump(deep_dump) as dump:
        whole = dead.inspect(dump, "bp_deep")
    monkeypatch.setattr(dead, "MAX_STACK_ROOTS", 1_000)
    with Dump(deep_dump) as dump:
        bounded = dead.inspect(dump, "bp_deep")
    assert whole["state"] is None
    assert "past the first 1,000" in (bounded["state"] or "")
    assert bounded["total"]["bytes"] == whole["total"]["bytes"]
