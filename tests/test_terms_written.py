"""Terms the node sends are written as Erlang writes them in every
command's text and JSON, never as the Python objects that decode them
(``BitString(data=...)``, ``FrozenMap({...})``): a process names itself
with any term (RabbitMQ's process_name is a tuple of a record; a label
may hold a bitstring or a map), and proc-count, inspect and top show it.
Real nodes, OTP 25, 27, 28."""

from __future__ import annotations

import json

import pytest

from beam_probe.erldist.terms import (Atom, BitString, FrozenMap,
                                      ImproperList, format_term)
from beam_probe.node.remote import attach
from conftest import run_here

# What a Python object's repr starts with, in any output.
LEAKS = ("BitString(", "FrozenMap(", "FrozenList(", "ImproperList(",
         "Atom(", "Pid(", "Reference(", "<(")


def test_format_term_writes_what_erlang_writes():
    # <<1,2,7:3>>: the last byte's 3 high bits are used (BIT_BINARY_EXT).
    assert format_term(BitString(b"\x01\x02\xe0", 3)) == "<<1,2,7:3>>"
    assert format_term(BitString(b"\x80", 1)) == "<<1:1>>"
    assert format_term(BitString(b"ab", 8)) == '<<"ab">>'
    assert format_term(FrozenMap([(Atom("a"), 1)])) == "#{a => 1}"


@pytest.fixture(scope="module")
def named(session_nodes, otp):
    """A gen_server naming itself {bp_queue_process, Name} where Name is
    a bitstring inside a map."""
    node = session_nodes.start(otp)
    with attach(node.node, node.cookie.encode()) as remote:
        bits = remote.call("erlang", "list_to_bitstring",
                           [[b"q\x01", BitString(b"\xe0", 3)]])
        name = {Atom("bits"): bits}
        pid = remote.call("beam_probe_workload", "named_queue", [name])
    return node, str(pid)


@pytest.mark.parametrize("args", [("inspect", "PID"),
                                  ("proc-count", "memory", "5000")])
@pytest.mark.parametrize("form", ["table", "json"])
def test_a_name_of_any_term_is_written_as_erlang_writes_it(named, args,
                                                           form):
    node, pid = named
    command, *rest = args
    result = run_here(command, node.node,
                      *[pid if a == "PID" else a for a in rest],
                      "--format", form, node=node)
    assert result.returncode == 0, result.stderr
    assert "q\\001" in result.stdout or "113,1" in result.stdout, \
        result.stdout[-2000:]
    assert "7:3" in result.stdout
    for leak in LEAKS:
        assert leak not in result.stdout, (leak, result.stdout[-2000:])


@pytest.fixture(scope="module")
def odd_keys(session_nodes, otp):
    """The fixture's public table bp_resources, with keys of odd names
    beside its {#resource{}, Stat} keys."""
    node = session_nodes.start(otp)
    with attach(node.node, node.cookie.encode()) as remote:
        assert remote.call("beam_probe_inspect_fixture", "outside_start", [],
                           timeout=60) == Atom("ok")
        keys = [{Atom("__struct__"): Atom("Elixir.")},
                {Atom("__struct__"): Atom("Elixir.foo bar")},
                (Atom("Elixir.lower"), 1),
                b"\xff\xfe" * 20,          # not UTF-8
                "é".encode() * 8,          # 16 bytes of UTF-8, whole
                "é".encode() * 30,         # cut inside a character
                # Improper lists, alone and in a tuple: sublist/2 and
                # length/1 fail on them (inspect ended in a
                # function_clause).
                ImproperList([104, 105], 3),
                (ImproperList([Atom("a")], Atom("b")), 1),
                ]
        for i, key in enumerate(keys):
            # Larger objects first among the table's 40 of 136 bytes.
            remote.call("ets", "insert", [Atom("bp_resources"),
                                          (key, b"x" * (1000 + 10 * i))])
    return node


@pytest.mark.parametrize("syntax, expected", [
    ("erlang", ["#{'__struct__' => 'Elixir.', ...}",
                "#{'__struct__' => 'Elixir.foo bar', ...}",
                "{'Elixir.lower', ...}",
                "<<255,254,255,254,255,254,255,254,255,254,255,254,255,254,"
                "255,254,...>>",
                '<<"éééééééé">>', '<<"éééééééé...">>', "<list>",
                "{<list>, ...}"]),
    ("elixir", ['%{__struct__: :"Elixir.", ...}',
                '%{__struct__: :"Elixir.foo bar", ...}',
                '{:"Elixir.lower", ...}',
                "<<255, 254, 255, 254, 255, 254, 255, 254, 255, 254, 255, "
                "254, 255, 254, 255, 254, ...>>",
                '"éééééééé"', '"éééééééé..."', "<list>",
                "{<list>, ...}"]),
])
def test_odd_keys_are_written_as_the_node_writes_them(odd_keys, syntax,
                                                      expected):
    """Atoms no Elixir alias names keep their 'Elixir.' and are quoted;
    a struct tag that is no alias is Elixir's map; a binary key that is
    not UTF-8 is its bytes, never U+FFFD; one cut inside a character is
    its whole characters and '...'; one of exactly 16 bytes is whole."""
    node = odd_keys
    result = run_here("inspect", node.node, "--table", "bp_resources",
                      "--syntax", syntax, "--format", "json", "-n", "12",
                      node=node)
    assert result.returncode == 0, result.stderr
    found = json.loads(result.stdout)
    field = "key_elixir" if syntax == "elixir" else "key"
    family = "family_elixir" if syntax == "elixir" else "family"
    written = {o[field] for o in found["largest"]} | \
        {o[family] for o in found["largest"]} | \
        {f[family] for f in found["families"]}
    for text in expected:
        assert text in written, (text, sorted(written))
    assert not any("\ufffd" in text for text in written), written
    table = run_here("inspect", node.node, "--table", "bp_resources",
                     "--syntax", syntax, "-n", "12", node=node)
    assert table.returncode == 0, table.stderr
    assert "\ufffd" not in table.stdout
    for text in expected:
        assert text in table.stdout, (text, table.stdout)
