"""Names and arities as a dump writes them, and as no node writes them
(the hostile round: 'nl\\nname' showed as nlnname, an arity of 2^48 - 1
was shown). A real node's dump (erlang:halt/1, OTP 25, 27, 28) whose
processes are registered under names with a newline, a tab, a quote and
a backslash; then copies of it with one figure made impossible.
"""

from __future__ import annotations

import json
import os
import re

import pytest

from beam_probe.erldist.errors import ConnectionLost, ProbeError
from beam_probe.erldist.terms import Atom
from beam_probe.node.remote import attach
from conftest import NodeFactory, run_here

NAMES = ["nl\nname", "tab\tx", "q'x", "bs\\x", "\x01ctl"]


@pytest.fixture(scope="module")
def named_dump(beam_dir, otp, tmp_path_factory):
    factory = NodeFactory(beam_dir)
    try:
        node = factory.start(otp)
        with attach(node.node, node.cookie.encode()) as remote:
            for i, name in enumerate(NAMES):
                # Each a few MB of heap: among the largest.
                remote.call("beam_probe_deep_fixture", "hold",
                            [Atom(name), 200_000 + i])
            try:
                remote.call("erlang", "halt", ["beam_probe test: names"])
            except (ConnectionLost, ProbeError):
                pass
        node.proc.wait(120)
        out = str(tmp_path_factory.mktemp("names"))
        dump = os.path.join(out, f"{otp}-names.dump")
        with open(os.path.join(node.home, "erl_crash.dump"), "rb") as f:
            data = f.read()
        with open(dump, "wb") as f:
            f.write(data)
    finally:
        factory.stop_all()
    return dump


def _json(*args: str) -> dict:
    r = run_here(*args, "--format", "json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_names_read_as_the_node_had_them(named_dump):
    o = _json("crashdump", named_dump)
    names = {p["name"] for p in o["processes"]["by_memory"]}
    assert set(NAMES) <= names, names
    # As text: each name on its own row, its newline and control
    # characters escaped, never raw.
    r = run_here("crashdump", named_dump)
    assert r.returncode == 0, r.stderr
    assert "nl\\nname" in r.stdout and "\\x01ctl" in r.stdout
    assert not any(line.startswith("name") for line in
                   r.stdout.splitlines())
    # inspect of it gives the same name.
    inspected = _json("inspect", named_dump, _pid(o, "q'x"))
    assert inspected["name"] == "q'x"


def _pid(overview: dict, name: str) -> str:
    (pid,) = [p["pid"] for p in overview["processes"]["by_memory"]
              if p["name"] == name]
    return pid


def _crafted(dump: str, tmp_path, old: bytes, new: bytes) -> str:
    with open(dump, "rb") as f:
        data = f.read()
    assert old in data
    path = str(tmp_path / "crafted.dump")
    with open(path, "wb") as f:
        f.write(data.replace(old, new, 1))
    return path


def test_an_arity_no_node_writes_is_damaged(named_dump, tmp_path):
    # The =proc of 'tab\tx': its initial call given an arity of 2^48 - 1.
    with open(named_dump, "rb") as f:
        data = f.read()
    at = data.index(b"Name: 'tab\\tx'\n")
    spawned = re.compile(rb"Spawned as: [^\n]*\n").search(data, at)
    assert spawned is not None
    crafted = _crafted(named_dump, tmp_path, spawned.group(0) + data[
        spawned.end():spawned.end() + 40],
        b"Spawned as: m:f/281474976710655\n" + data[
            spawned.end():spawned.end() + 40])
    o = _json("crashdump", crafted)
    (row,) = [p for p in o["processes"]["by_memory"]
              if p["name"] == "tab\tx"]
    assert "damaged" in row["initial_call"]
    assert "/281474976710655" not in row["initial_call"]


def test_a_tuple_no_node_writes_is_damaged(named_dump, tmp_path):
    # q'x's {held, List}: its heap line given an arity of 2^48 - 1.
    pid = _pid(_json("crashdump", named_dump), "q'x")
    with open(named_dump, "rb") as f:
        data = f.read()
    at = data.index(b"\n=proc_heap:" + pid.encode() + b"\n")
    held = data.index(b":t2:A4:held,", at)
    path = str(tmp_path / "crafted.dump")
    with open(path, "wb") as f:
        f.write(data[:held] + b":tFFFFFFFFFFFF:A4:held," + data[held + 12:])
    inspected = _json("inspect", path, pid)
    (root,) = [p for p in inspected["parts"] if p["depth"] == 0]
    assert root["kind"] == "damaged" and root["count"] == 0
    assert (1 << 48) - 1 not in {p["count"] for p in inspected["parts"]}
