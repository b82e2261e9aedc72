"""Terms the node sends are written as Erlang writes them in every
command's text and JSON, never as the Python objects that decode them
(``BitString(data=...)``, ``FrozenMap({...})``): a process names itself
with any term (RabbitMQ's process_name is a tuple of a record; a label
may hold a bitstring or a map), and proc-count, inspect and top show it.
Real nodes, OTP 25, 27, 28."""

from __future__ import annotations

import pytest

from beam_probe.erldist.terms import Atom, BitString, FrozenMap, format_term
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
