"""inspect's answers from outside, and keys in the node's syntax (issue 38,
items 2 and 3), against real nodes (OTP 25, 27, 28).

The fixture (beam_probe_inspect_fixture:outside_start/0): a plain receive
loop holding 5,000 refc binaries of 4,000 bytes, the first 1,000 shared
with a peer; a plain loop with 12,000 messages waiting; tables keyed
``{#resource{}, Stat}`` as RabbitMQ's metrics tables are, one a
named_table, one not, and two more sharing a name, neither named_table.
"""

from __future__ import annotations

import json

import pytest

from beam_probe.erldist.terms import Atom
from beam_probe.node.remote import attach
from conftest import run_here

FIXTURE = "beam_probe_inspect_fixture"


@pytest.fixture(scope="module")
def node(session_nodes, otp):
    started = session_nodes.start(otp)
    with attach(started.node, started.cookie.encode()) as remote:
        # Called through rpc, whose process exits at once: the binaries'
        # only holders are then the fixture's two processes.
        assert remote.call(FIXTURE, "outside_start", [], timeout=60) == \
            Atom("ok")
    return started


def inspect(node, *args: str) -> dict:
    result = run_here("inspect", node.node, *args, "--format", "json",
                      node=node)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def text(node, *args: str) -> str:
    result = run_here("inspect", node.node, *args, node=node)
    assert result.returncode == 0, result.stderr
    return result.stdout


def queue_of(node, name: str) -> int:
    with attach(node.node, node.cookie.encode()) as remote:
        pid = remote.call("erlang", "whereis", [Atom(name)])
        return remote.call("erlang", "process_info",
                           [pid, Atom("message_queue_len")])[1]


def test_a_plain_loop_s_binaries_are_measured_from_outside(node):
    """A loop whose state cannot be read (no sys) still has its refc
    binaries counted from the node's list, each once, and the share only
    it holds; its terms are "not measured", never 0 B."""
    answer = inspect(node, "bp_holder")
    assert answer["kind"] == "plain" and answer["loop"] == FIXTURE
    assert "plain receive loop" in answer["state"]
    assert answer["binaries"] == {
        "references": 5000, "count": 5000, "bytes": 20_000_000,
        "alone_bytes": 16_000_000, "largest": [4000] * 5}
    assert answer["binaries_note"] is None
    total = answer["total"]
    assert total["bytes"] is None
    assert total["binary_bytes"] == 20_000_000
    assert total["binary_distinct"] == 20_000_000
    # Its heap holds 5,000 ProcBins (6 words on 25, 8 on 27 and 28).
    assert 0 < total["young_heap_bytes"] <= total["heap_bytes"]
    assert total["heap_bytes"] >= 5000 * 6 * 8
    assert answer["see_also"] == []
    shown = text(node, "bp_holder")
    assert "0 B of terms" not in shown
    assert "its terms not measured" in shown
    assert f"({FIXTURE} loop; process memory" in shown
    assert "refc binaries: 5,000 referred to, 19.1 MiB each once, " \
        "15.3 MiB of them held by it alone" in shown
    assert queue_of(node, "bp_holder") == 0  # nothing was sent to it
    peer = inspect(node, "bp_holder_peer")["binaries"]
    assert peer["count"] == 1000 and peer["alone_bytes"] == 0


def test_a_long_mailbox_says_why_none_is_sampled(node):
    """No call of OTP 25-28 reads a mailbox's first messages alone:
    process_info(P, messages) copies them all, so past MAILBOX_MOST only
    the length is read, and the answer says no sample was taken."""
    answer = inspect(node, "bp_backlog")
    assert answer["total"]["message_queue_len"] == 12_000
    assert "none is sampled" in answer["mailbox"]
    assert answer["binaries"]["count"] == 0
    assert "refc binaries: none referred to" in text(node, "bp_backlog")
    assert queue_of(node, "bp_backlog") == 12_000


def test_keys_led_by_a_record_are_written_as_the_node_writes_them(node):
    """{#resource{}, Stat} keys: the shell, without the record's
    definition, prints {resource,<<"/">>,queue,<<"q1">>}; a family is
    that with its values left out, in text and JSON, in either syntax;
    never a Python repr."""
    answer = inspect(node, "--table", "bp_resources")
    (family,) = answer["families"]
    assert family["family"] == "{{resource, ...}, ...}"
    assert family["family_elixir"] == "{{:resource, ...}, ...}"
    assert family["count"] == 40
    keys = {o["key"] for o in answer["largest"]}
    assert keys <= {"{{resource, ...},messages}", "{{resource, ...},memory}"}
    assert {o["key_elixir"] for o in answer["largest"]} <= {
        "{{:resource, ...}, :messages}", "{{:resource, ...}, :memory}"}
    for syntax in ("erlang", "elixir"):
        shown = text(node, "--table", "bp_resources", "--syntax", syntax)
        assert "Atom(" not in shown and "<(" not in shown
        assert ("{{:resource, ...}, ...}" if syntax == "elixir"
                else "{{resource, ...}, ...}") in shown
    assert "Atom(" not in json.dumps(answer)


def test_an_unnamed_table_is_found_by_its_name(node):
    """`ets` lists a table that is no named_table under its name: inspect
    finds it by that name; where two share it, one line gives their ids
    (exit 2), and either id works."""
    answer = inspect(node, "--table", "bp_resources_unnamed")
    assert answer["name"] == "bp_resources_unnamed"
    assert answer["table"].startswith("#Ref<") and answer["size"] == 40
    result = run_here("inspect", node.node, "--table", "bp_resources_twice",
                      node=node)
    assert result.returncode == 2, result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert "2 tables" in line and "named_table" in line
    ids = [word.strip(",") for word in line.split() if
           word.startswith("#Ref<")]
    assert len(ids) == 2
    for ident in ids:
        assert inspect(node, "--table", ident)["name"] == \
            "bp_resources_twice"


def test_kinds_are_written_in_either_syntax():
    """Keys and families known by their kind, without a node: a record's
    tag, an Elixir struct, a plain kind."""
    from beam_probe.probes.inspect import _family, key_text

    record = (Atom("kind"), (Atom("record"), Atom("resource")))
    struct = (Atom("kind"), (Atom("struct"), Atom("Elixir.MyApp.Key")))
    assert key_text(record, False) == "{resource, ...}"
    assert key_text(record, True) == "{:resource, ...}"
    assert key_text(struct, False) == \
        "#{'__struct__' => 'Elixir.MyApp.Key', ...}"
    assert key_text(struct, True) == "%MyApp.Key{...}"
    assert key_text((Atom("kind"), Atom("binary")), True) == "<binary>"
    assert _family((Atom("tuple"), struct), True) == "{%MyApp.Key{...}, ...}"
    assert _family((Atom("type"), (Atom("struct"),
                                   Atom("Elixir.MyApp.Key"))), True) == \
        "%MyApp.Key{...}"
    assert _family((Atom("record"), Atom("session"))) == "#session{}"
    assert _family((Atom("record"), Atom("session")), True) == \
        "{:session, ...}"
    # Whatever a peer sends, one line of text, never a repr.
    for odd in ((Atom("kind"), (1, 2)), (Atom("kind"), (Atom("record"), 5)),
                (Atom("kind"), None)):
        assert key_text(odd, False) == "<key>"
