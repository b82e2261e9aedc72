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


def test_a_gen_server2_loop_is_named_and_the_broker_s_view_suggested():
    """A reply as the node gives it for an idle RabbitMQ queue (OTP 25:
    its dictionary past the copy bound, so only its stack names it):
    the loop is gen_server2, the state says why it is never asked, and
    rabbitmqctl is suggested; a plain process of no broker gets none."""
    from beam_probe.erldist.terms import Pid
    from beam_probe.probes.inspect import BROKER_VIEW, _read_process
    from beam_probe.text.inspect import process_text
    from beam_probe.text.syntax import ERLANG

    stack = [(Atom("gen_server2"), Atom("process_next_msg"), 1, []),
             (Atom("proc_lib"), Atom("init_p_do_apply"), 3, [])]
    info = [(Atom("registered_name"), []),
            (Atom("initial_call"), (Atom("proc_lib"), Atom("init_p"), 5)),
            (Atom("current_function"), stack[0][:3]),
            (Atom("current_stacktrace"), stack),
            (Atom("message_queue_len"), 20_000),
            (Atom("memory"), 23_000_000),
            (Atom("total_heap_size"), 2_800_000),
            (Atom("heap_size"), 600_000)]
    reply = {Atom("pid"): Pid("n@h", 90, 0, 1), Atom("info"): info,
             Atom("kind"): Atom("plain"),
             Atom("why"): Atom("not_in_gen_loop"), Atom("parts"): [],
             Atom("mailbox"): (Atom("too_long"), 20_000),
             Atom("dictionary"): (Atom("too_large"), 2_800_000),
             Atom("pause_us"): 0, Atom("timed_out"): False,
             Atom("records"): [], Atom("binary_distinct"): 52_428_800,
             Atom("binaries"): {Atom("references"): 12_801,
                                Atom("count"): 12_800,
                                Atom("bytes"): 52_428_800,
                                Atom("alone"): 50_000_000,
                                Atom("largest"): [4096] * 5},
             Atom("started"): Atom("undefined"), Atom("wordsize"): 8}
    answer = _read_process("n@h", reply)
    assert answer["loop"] == "gen_server2"
    assert "gen_server2" in answer["state"] and "3.12.1" in answer["state"]
    assert answer["see_also"] == list(BROKER_VIEW)
    assert answer["total"]["bytes"] is None
    assert answer["total"]["binary_bytes"] == 52_428_800
    assert answer["total"]["heap_bytes"] == 22_400_000
    shown = process_text(answer, ERLANG)
    assert "(gen_server2 loop; process memory 21.9 MiB, heap 21.4 MiB" \
        in shown
    assert "0 B" not in shown
    assert "rabbitmqctl list_queues name memory message_bytes_ram" in shown
    # Past the heap bound: not measured, with the reason.
    far = dict(reply, **{Atom("binaries"): (Atom("too_large"), 5_000_000),
                         Atom("binary_distinct"): Atom("unknown")})
    answer = _read_process("n@h", far)
    assert answer["binaries"] is None and answer["total"][
        "binary_bytes"] is None
    assert "not measured: its heap is 40,000,000 bytes" in \
        answer["binaries_note"]
    assert "refc binaries: not measured" in process_text(answer, ERLANG)
    # A plain loop of no broker: no suggestion.
    plain = [(Atom("foo"), Atom("loop"), 1, [])]
    answer = _read_process("n@h", dict(reply, **{Atom("info"): [
        (k, plain if k == Atom("current_stacktrace") else plain[0][:3]
         if k == Atom("current_function") else v) for k, v in info]}))
    assert answer["loop"] == "foo" and answer["see_also"] == []


def test_a_hibernating_process_s_loop_is_its_declared_behaviour():
    """A hibernating process has no stack: its loop is the behaviour its
    '$initial_call' module declares (RabbitMQ's queues hibernate, and
    rabbit_prequeue declares gen_server2), or unknown."""
    from beam_probe.probes.inspect import HIBERNATE, loop_of

    info = {"current_function": HIBERNATE, "current_stacktrace": []}
    assert loop_of(info, [Atom("gen_server2")]) == "gen_server2"
    assert loop_of(info, []) is None
    assert loop_of(info, "junk") is None


ELIXIR_TABLE = """
spawn(fn ->
  :ets.new(:bp_struct_keys, [:named_table, :public])
  rows = for i <- 1..10, do: {{%MyApp.Store{name: "s#{i}"}, :stat}, i}
  :ets.insert(:bp_struct_keys, rows)
  :ets.insert(:bp_struct_keys, {%MyApp.Store{name: "alone"}, 0})
  Process.sleep(:infinity)
end)
"""


@pytest.fixture(scope="module", params=["25", "27"],
                ids=["elixir1.14-otp25", "elixir1.18-otp27"])
def elixir_table_node(request, session_nodes):
    from test_elixir import start_elixir

    node = start_elixir(session_nodes, request.param, request)
    with attach(node.node, node.cookie.encode()) as remote:
        remote.call("Elixir.Code", "eval_string", [ELIXIR_TABLE.encode()])
        assert remote.call("ets", "info", [Atom("bp_struct_keys"),
                                           Atom("size")]) == 11
    return node


def test_struct_keys_read_as_elixir_on_an_elixir_node(elixir_table_node):
    """On an Elixir node the text is Elixir's without asking (the owner's
    pid makes the renderer ask the node which language it runs): a key
    that is a struct, or a tuple led by one, is %MyApp.Store{...}; with
    --syntax erlang and in JSON's family, Erlang's map."""
    node = elixir_table_node
    auto = run_here("inspect", node.node, "--table", "bp_struct_keys",
                    node=node)
    assert auto.returncode == 0, auto.stderr
    assert "{%MyApp.Store{...}, ...}" in auto.stdout
    assert "{%MyApp.Store{...}, :stat}" in auto.stdout
    assert "\n%MyApp.Store{...} " in auto.stdout
    assert "__struct__" not in auto.stdout and "Atom(" not in auto.stdout
    erlang = run_here("inspect", node.node, "--table", "bp_struct_keys",
                      "--syntax", "erlang", node=node)
    assert "{#{'__struct__' => 'Elixir.MyApp.Store', ...}, ...}" in \
        erlang.stdout
    families = {f["family"]: f for f in inspect(
        node, "--table", "bp_struct_keys")["families"]}
    assert families["{#{'__struct__' => 'Elixir.MyApp.Store', ...}, ...}"][
        "count"] == 10
    assert families["#{'__struct__' => 'Elixir.MyApp.Store', ...}"][
        "family_elixir"] == "%MyApp.Store{...}"


def test_a_hibernating_gen_server_names_what_its_module_declares(node, otp):
    """Before OTP 28 a hibernating gen_server is refused (what it wakes
    into cannot be seen); its loop is then what its '$initial_call'
    module declares, said as such, and its binaries are still counted."""
    with attach(node.node, node.cookie.encode()) as remote:
        if remote.call("erlang", "whereis", [Atom("bp_hib")]) == \
                Atom("undefined"):
            assert remote.call(FIXTURE, "start", [], timeout=60) == \
                Atom("ok")
    answer = inspect(node, "bp_hib")
    assert answer["loop"] == "gen_server"
    assert answer["binaries"] is not None
    if otp == "28":  # it hibernates in gen_server's own loop function
        assert answer["kind"] == "gen_server"
    else:
        assert answer["kind"] == "plain"
        assert answer["current_function"] == "erlang:hibernate/3"
        assert "(hibernating, of a gen_server module;" in text(node, "bp_hib")


def test_a_process_named_only_in_its_dictionary_is_labelled(broker_shapes,
                                                            otp):
    """The broker fixture's queue (a proc_lib gen_server named only by
    process_name, a 24 MB heap): inspect reads the keys that name it as
    every command does (on OTP 25 from a copy bounded by its heap), and
    shows process_name beside its pid, in text and JSON."""
    node = broker_shapes.node
    answer = inspect(node, broker_shapes.queue)
    assert answer["label"] == '{bpt_queue,<<"lq.104">>}'
    assert answer["name"] is None and answer["binaries"] is not None
    first = text(node, broker_shapes.queue).splitlines()[0]
    assert f'{broker_shapes.queue} {{bpt_queue,<<"lq.104">>}} (' in first
