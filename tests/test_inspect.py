"""inspect against real nodes (OTP 25, 27, 28): what in a process, or a
table, holds the memory, with the process left exactly as it was.

The fixture (tests/erl/beam_probe_inspect_fixture.erl) is a node's worth
of what real applications run: a gen_server whose state record keeps a
cache of 128-byte slices pinning 64 KiB requests, a gen_statem, a
gen_event handler, a hibernating gen_server, a busy one, a plain receive
loop, a proc_lib loop that is no gen behaviour, a worker under an
unregistered supervisor, and tables of three key families and of records.
"""

from __future__ import annotations

import json
import time

import pytest

from beam_probe.erldist.terms import Atom
from beam_probe.node.remote import attach
from conftest import run_here

FIXTURE = "beam_probe_inspect_fixture"


@pytest.fixture(scope="module")
def fixture_node(session_nodes, otp):
    node = session_nodes.start(otp, eval_expr=f"{FIXTURE}:start()")
    with attach(node.node, node.cookie.encode()) as remote:
        deadline = time.monotonic() + 30
        while remote.call("ets", "info", [Atom("bp_table"), Atom("size")]) \
                == Atom("undefined"):
            assert time.monotonic() < deadline, "the fixture never started"
            time.sleep(0.1)
    return node


def inspect(node, *args: str, code: int = 0) -> dict:
    result = run_here("inspect", node.node, *args, "--format", "json",
                      node=node)
    assert result.returncode == code, result.stderr
    return json.loads(result.stdout) if code == 0 else {}


def parts(result: dict) -> dict[str, dict]:
    return {part["path"]: part for part in result["parts"]}


def state_of(node, name: str):
    with attach(node.node, node.cookie.encode()) as remote:
        return remote.call("sys", "get_state", [Atom(name)])


def queue_of(node, name: str) -> int:
    with attach(node.node, node.cookie.encode()) as remote:
        pid = remote.call("erlang", "whereis", [Atom(name)])
        return remote.call("erlang", "process_info",
                           [pid, Atom("message_queue_len")])[1]


def test_the_slices_that_pin_requests_are_named(fixture_node):
    before = state_of(fixture_node, "bp_cache")
    result = inspect(fixture_node, "bp_cache")
    assert result["kind"] == "gen_server" and result["name"] == "bp_cache"
    shown = parts(result)
    # Record fields by name: the module's debug_info has the record.
    assert shown["State"]["kind"] == "record state"
    cache = shown["State#state.cache"]
    assert cache["kind"] == "map" and cache["count"] == 20
    # What a 64 KiB binary keeps alive: 65,536 bytes, or a little more
    # where the release rounds its allocation (65,792 on OTP 28).
    assert 20 * 65536 <= cache["binary_bytes"] <= 20 * 66000
    assert shown["State#state.log"]["count"] == 200
    # A record inside the record is named too.
    assert shown["State#state.name"]["kind"] == "record conn"
    assert "State#state.name#conn.buffer" in shown
    # Largest first: the cache holds 99% of what the state holds.
    children = [p for p in result["parts"] if p["depth"] == 1
                and p["path"].startswith("State")]
    assert children[0]["path"] == "State#state.cache"
    assert cache["share"] > 0.9
    (pinned,) = result["pinned"]
    assert pinned == {
        "path": "State#state.cache (keys)",
        "path_elixir": "state |> elem(1) |> Map.keys()",
        "count": 20, "bytes": 20 * 128,
        "referenced_bytes": cache["binary_bytes"]}
    assert result["total"]["sampled"] is False
    # The state is as it was, and no value crossed: the dictionary's
    # secret is sized, never shown.
    assert state_of(fixture_node, "bp_cache") == before
    assert "hunter2" not in json.dumps(result)
    assert shown["get()#{secret}"]["kind"] == "binary"
    text = run_here("inspect", fixture_node.node, "bp_cache",
                    node=fixture_node)
    assert text.returncode == 0, text.stderr
    assert "pinned binaries" in text.stdout and "binary:copy/1" in text.stdout
    assert "State#state.cache (keys): 20 slices" in text.stdout


def test_gen_statem_and_gen_event(fixture_node):
    states = [state_of(fixture_node, name)
              for name in ("bp_statem", "bp_events")]
    statem = inspect(fixture_node, "bp_statem")
    assert statem["kind"] == "gen_statem"
    roots = [p["path"] for p in statem["parts"] if p["depth"] == 0]
    assert roots[:2] == ["State", "Data"] and "get()" in roots
    assert parts(statem)["State"]["kind"] == "atom"
    data = parts(statem)["Data"]
    assert data["kind"] == "map" and data["binary_bytes"] == 30 * 100
    events = inspect(fixture_node, "bp_events")
    assert events["kind"] == "gen_event"
    handler = parts(events)[f"Handler({FIXTURE})"]
    assert handler["kind"] == "map"
    assert parts(events)[f"Handler({FIXTURE})#{{seen}}"]["count"] == 200
    # Both left as they were (gen_event catches the throw per handler).
    assert [state_of(fixture_node, name)
            for name in ("bp_statem", "bp_events")] == states


def test_hibernating_and_supervised_workers_are_read(fixture_node, otp):
    hib = inspect(fixture_node, "bp_hib")
    if otp == "28":
        # OTP 28's gen_server hibernates in a loop function of its own.
        assert hib["kind"] == "gen_server", hib["state"]
        assert hib["current_function"] == "gen_server:loop_hibernate/4"
    else:
        # Before 28, erlang:hibernate/3 hides what it wakes into (its gen
        # loop, or a loop of its module's own: issue 37): nothing is sent.
        assert hib["kind"] == "plain"
        assert "before OTP 28" in hib["state"], hib["state"]
        assert hib["current_function"] == "erlang:hibernate/3"
        assert queue_of(fixture_node, "bp_hib") == 0
    with attach(fixture_node.node, fixture_node.cookie.encode()) as remote:
        owner = remote.call("ets", "info", [Atom("bp_table"), Atom("owner")])
        links = remote.call("erlang", "process_info", [owner, Atom("links")])
        (supervisor,) = links[1]
        children = remote.call("supervisor", "which_children", [supervisor])
        worker = children[0][1]
    result = inspect(fixture_node, str(worker))
    assert result["kind"] == "gen_server" and result["name"] is None
    assert parts(result)["State"]["kind"] == "map"


def test_a_plain_loop_is_left_untouched(fixture_node):
    result = inspect(fixture_node, "bp_loop")
    assert result["kind"] == "plain"
    assert "plain receive loop" in result["state"]
    assert parts(result)["get()#{loop_key}"]["count"] == 100
    lib = inspect(fixture_node, "bp_proc_lib")
    assert lib["kind"] == "plain" and "no gen_server" in lib["state"]
    time.sleep(0.2)
    # No system message was left behind in either mailbox.
    assert queue_of(fixture_node, "bp_loop") == 0
    assert queue_of(fixture_node, "bp_proc_lib") == 0


def test_a_busy_process_is_not_sent_anything(fixture_node):
    """A process running a callback may not come back to its loop for a
    long while: nothing is sent to it, and its mailbox stays empty."""
    with attach(fixture_node.node, fixture_node.cookie.encode()) as remote:
        remote.call("gen_server", "cast", [Atom("bp_busy"),
                                           (Atom("sleep"), 4000)])
    time.sleep(0.1)
    answer = inspect(fixture_node, "bp_busy")
    assert "running a callback" in answer["state"]
    assert answer["parts"][0]["path"] != "State"
    # Still answered from outside (issue 38, item 2): its loop named, its
    # refc binaries listed by the node, its terms "not measured", never
    # 0 B, its heap and queue length read.
    assert answer["loop"] == "gen_server", answer["loop"]
    assert answer["binaries"] is not None, answer["binaries_note"]
    total = answer["total"]
    assert total["bytes"] is None
    assert total["binary_bytes"] == answer["binaries"]["bytes"]
    assert total["heap_bytes"] > 0 and total["message_queue_len"] == 0
    assert queue_of(fixture_node, "bp_busy") == 0
    deadline = time.monotonic() + 10  # until it is idle again
    while not inspect(fixture_node, "bp_busy")["state"] is None:
        assert time.monotonic() < deadline
        time.sleep(0.3)


def test_a_held_process_times_out_and_nothing_stays(fixture_node):
    """Idle in its loop, then held (suspended, as an overloaded node
    holds it) past --timeout: we give up in time, and when it runs again
    our request finds us gone; its mailbox drains, its state is as it
    was."""
    before = state_of(fixture_node, "bp_busy")
    with attach(fixture_node.node, fixture_node.cookie.encode()) as remote:
        remote.call(FIXTURE, "hold", [Atom("bp_busy"), 3000, Atom("resume")])
    started = time.monotonic()
    result = run_here("inspect", fixture_node.node, "bp_busy", "--timeout",
                      "1", "--format", "json", node=fixture_node)
    assert time.monotonic() - started < 5
    assert result.returncode == 0, result.stderr
    answer = json.loads(result.stdout)
    assert "did not handle our request in time" in answer["state"]
    deadline = time.monotonic() + 10
    while queue_of(fixture_node, "bp_busy") != 0:
        assert time.monotonic() < deadline
        time.sleep(0.2)
    assert state_of(fixture_node, "bp_busy") == before


def test_a_process_that_dies_while_we_wait(fixture_node):
    with attach(fixture_node.node, fixture_node.cookie.encode()) as remote:
        remote.call(FIXTURE, "hold", [Atom("bp_doomed"), 2000,
                                      Atom("kill")])
    answer = inspect(fixture_node, "bp_doomed", "--timeout", "10")
    assert "exited" in answer["state"]


def test_a_table_of_three_key_families(fixture_node):
    table = inspect(fixture_node, "--table", "bp_table")
    assert table["size"] == 365 and table["sampled"] is False
    families = {f["family"]: f for f in table["families"]}
    assert set(families) == {"{user, ...}", "{session, ...}", "<integer>"}
    assert families["{user, ...}"]["count"] == 300
    assert 300 * 200 <= families["{user, ...}"]["binary_bytes"] <= 300 * 264
    session = families["{session, ...}"]
    assert session["pinned"]["count"] == 40
    assert session["pinned"]["bytes"] == 4000
    assert 400_000 <= session["pinned"]["referenced_bytes"] <= 410_000
    assert table["families"][0]["family"] == "{session, ...}"  # largest
    assert table["largest"][0]["key"].startswith("{session,")
    # A compressed table is accounted as it is stored, not as the flat
    # copies we read.
    packed = inspect(fixture_node, "--table", "bp_compressed")
    (family,) = packed["families"]
    assert packed["compressed"] is True and family["count"] == 200
    assert family["bytes"] == pytest.approx(packed["memory"], rel=0.01)
    assert family["bytes"] < 200 * 100 * 16
    r = run_here("inspect", fixture_node.node, "--table", "bp_private",
                 node=fixture_node)
    assert r.returncode == 2 and "private" in r.stderr
    records = inspect(fixture_node, "--table", "bp_records")
    assert [f["family"] for f in records["families"]] == ["#session{}"]
    sampled = inspect(fixture_node, "--table", "bp_table", "--budget", "50")
    assert sampled["sampled"] is True and sampled["seen"] == 50
    assert sampled["fraction"] == round(50 / 365, 4)
    assert sum(f["count"] for f in sampled["families"]) == \
        pytest.approx(365, abs=3)


def test_bad_requests_get_one_line(fixture_node):
    node = fixture_node
    for args, code, words in (
            (("nobody_here",), 10, "no process registered"),
            (("--table", "no_table"), 10, "no table"),
            (("bp_cache", "--table", "bp_table"), 2, "not both"),
            (("bp_cache", "--depth", "99"), 2, "--depth"),
            (("bp_cache", "--budget", "0"), 2, "--budget"),
            (("<0.1.2",), 2, "bracket")):
        r = run_here("inspect", node.node, *args, node=node)
        assert r.returncode == code, (args, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1 and words in r.stderr


def test_a_bare_node_name_goes_before_table(fixture_node):
    short = fixture_node.node.split("@")[0]
    r = run_here("inspect", short, "--table", "bp_records", "--format",
                 "json", node=fixture_node)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["table"] == "bp_records"


def _tree(depth: int, children: int = 1) -> dict:
    node = {Atom("kind"): Atom("map"), Atom("count"): 1, Atom("words"): 3,
            Atom("binary"): 0, Atom("children"): [],
            Atom("others"): {Atom("count"): 0, Atom("words"): 0,
                             Atom("binary"): 0}}
    for _ in range(depth):
        node = dict(node, **{Atom("children"): [
            ((Atom("key"), Atom("a")), node)] * children})
    return node


def test_crafted_trees_are_refused_in_one_line():
    """A peer's tree deeper or wider than asked for is a bad reply (exit
    8), not a recursion error; keys of any shape render as text."""
    from beam_probe.errors import BadReply
    from beam_probe.probes.inspect import RecordNames, _Tree, key_text

    tree = _Tree("inspect", 8, RecordNames([]))
    assert [row["path"] for row in tree.rows(_tree(2), ("State", "state"),
                                             0)] == \
        ["State", "State#{a}", "State#{a}#{a}"]
    with pytest.raises(BadReply):
        list(tree.rows(_tree(5000), ("State", "state"), 0))
    with pytest.raises(BadReply):
        list(tree.rows(_tree(1, children=500), ("State", "state"), 0))
    for key in (Atom("ok"), 7, (Atom("binary"), b"\x00\n", 3),
                (Atom("string"), "a\u2028", 99), (Atom("kind"), Atom("pid")),
                (Atom("tuple"), [Atom("user"), 3]), 2**20000, None,
                (Atom("binary"), 5, "x")):
        for elixir in (False, True):
            text = key_text(key, elixir)
            assert isinstance(text, str) and "\n" not in text


def test_table_names_and_ids():
    from beam_probe.errors import UsageError
    from beam_probe.probes.inspect import table_spec

    assert table_spec("sessions") == (Atom("names"), ["sessions"])
    assert table_spec(":sessions") == (Atom("names"), ["sessions"])
    assert table_spec("'my table'") == (Atom("names"), ["my table"])
    assert table_spec("MyApp.Cache") == (Atom("names"), [
        "MyApp.Cache", "Elixir.MyApp.Cache"])
    assert table_spec("#Ref<0.1.2.3>") == (Atom("id"), "#Ref<0.1.2.3>")
    for bad in ("", "x" * 300, "a\nb"):
        with pytest.raises(UsageError):
            table_spec(bad)


def test_a_supervisor_and_a_small_process_left_its_size(fixture_node):
    """kernel_sup's state (a supervisor's record of child records) is read
    on every release, and a small process is not left with the larger heap
    a collection in the middle of our walk would size it for (seen: 21 KiB
    to 1.1 MiB, kept for minutes)."""
    sup = inspect(fixture_node, "kernel_sup")
    assert sup["kind"] == "gen_server" and sup["state"] is None
    state = parts(sup)["State"]
    assert state["kind"].startswith("tuple state") or \
        state["kind"] == "record state"
    assert state["bytes"] > 500
    with attach(fixture_node.node, fixture_node.cookie.encode()) as remote:
        pid = remote.call("erlang", "whereis", [Atom("bp_busy")])

        def heap() -> int:
            return remote.call("erlang", "process_info",
                               [pid, Atom("total_heap_size")])[1]
        before = heap()
        for _ in range(3):
            inspect(fixture_node, "bp_busy")
        assert heap() <= 2 * before + 4096


def test_the_largest_objects_come_largest_first(fixture_node):
    table = inspect(fixture_node, "--table", "bp_table", "--width", "5")
    held = [o["bytes"] + o["binary_bytes"] for o in table["largest"]]
    assert len(held) == 5 and held == sorted(held, reverse=True)


@pytest.fixture(scope="module")
def shapes_node(fixture_node):
    with attach(fixture_node.node, fixture_node.cookie.encode()) as remote:
        assert remote.call(FIXTURE, "start_shapes", [], timeout=60) == \
            Atom("ok")
    return fixture_node


def heap_of(node, name: str) -> int:
    with attach(node.node, node.cookie.encode()) as remote:
        pid = remote.call("erlang", "whereis", [Atom(name)])
        assert pid != Atom("undefined"), f"{name} is gone"
        return remote.call("erlang", "process_info",
                           [pid, Atom("total_heap_size")])[1]


def test_nothing_of_a_state_is_copied_into_its_process(shapes_node):
    """A record around a map of 200,000 entries, the process capped by
    max_heap_size at six times its heap (kill; twice, before inspect
    left a process without room for its rule alone): children of
    containers came
    back from a match specification copied into the process's own heap,
    level after level, until the cap killed it. It lives, and its heap
    is as it was."""
    before = heap_of(shapes_node, "bp_wrapped")
    answer = inspect(shapes_node, "bp_wrapped")
    assert answer["state"] is None, answer["state"]
    state = parts(answer)["State"]
    assert state["kind"] == "tuple state"  # no record: not in debug_info
    entries = parts(answer)["State{2}"]
    assert entries["count"] == 200_000
    # 200,000 x (3.75 map words + 3 tuple + 3 heap binary) x 8 bytes.
    assert entries["bytes"] == pytest.approx(200_000 * 9.75 * 8, rel=0.1)
    assert heap_of(shapes_node, "bp_wrapped") <= before * 2


def test_each_binary_counted_once(shapes_node):
    """A thousand 100-byte slices of one 1 MiB binary keep 1 MiB alive,
    not a thousand."""
    answer = inspect(shapes_node, "bp_shared")
    assert answer["total"]["binary_distinct"] == 1_048_576
    assert answer["total"]["binary_bytes"] == 1_048_576
    (pin,) = answer["pinned"]
    assert pin["path"] == "State#{fields}[_]" and pin["count"] == 1000
    assert pin["referenced_bytes"] == 1_048_576


def test_depth_past_the_budget_is_still_sized(shapes_node):
    """A gb_tree of 100,000 entries is 17 levels deep: past the budget
    its subtrees are sized by erts_debug:size_shared/1, not counted as
    their own few words (4 KB against 8.8 MB before)."""
    answer = inspect(shapes_node, "bp_tree")
    with attach(shapes_node.node, shapes_node.cookie.encode()) as remote:
        flat = remote.call("erts_debug", "flat_size",
                           [remote.call("sys", "get_state",
                                        [Atom("bp_tree")])]) * 8
    assert parts(answer)["State"]["bytes"] == pytest.approx(flat, rel=0.25)


def test_an_improper_list_is_counted_within_bounds(shapes_node):
    answer = inspect(shapes_node, "bp_improper")
    state = parts(answer)["State"]
    assert state["kind"] == "list" and state["count"] == 10_000
    assert answer["total"]["sampled"] is True


def test_a_hibernating_worker_of_a_gen_module_is_left_alone(shapes_node):
    """Started by proc_lib in a module that declares gen_server, but
    hibernating in a loop of its own ('$initial_call' is its loop, not
    init/1): no system message."""
    answer = inspect(shapes_node, "bp_worker")
    assert answer["kind"] == "plain" and "hibernates" in answer["state"]
    assert queue_of(shapes_node, "bp_worker") == 0


def test_malformed_replies_are_bad_replies():
    """Replies no node of ours gives: exit 8 in one line, never a
    traceback or a 'bug' exit 1."""
    from beam_probe.errors import BadReply
    from beam_probe.probes.inspect import _malformed, _read_process

    good_tree = _tree(0)
    base = {Atom("pid"): None, Atom("info"): [], Atom("kind"): Atom("plain"),
            Atom("why"): Atom("not_proc_lib"), Atom("parts"): [],
            Atom("mailbox"): (Atom("too_long"), 3),
            Atom("dictionary"): (Atom("too_large"), 5),
            Atom("pause_us"): 0, Atom("timed_out"): False,
            Atom("records"): [], Atom("binary_distinct"): Atom("unknown"),
            Atom("wordsize"): 8}
    walk = {Atom("tree"): good_tree, Atom("pins"): [], Atom("visits"): 1,
            Atom("sampled"): False, Atom("late"): False}
    crafted = [
        {Atom("dictionary"): {}},
        {Atom("mailbox"): (Atom("too_large"),)},
        {Atom("parts"): [(Atom("state"), dict(walk, **{Atom("pins"): [
            ([(Atom("elem"), Atom("foo"))], 1, 2, 3)]}))]},
        {Atom("parts"): [(Atom("state"), dict(walk, **{Atom("tree"): dict(
            good_tree, **{Atom("kind"): 2**20000})}))]},
        {Atom("parts"): [(Atom("state"),)]},
        {Atom("binary_distinct"): -1},
    ]
    for change in crafted:
        with pytest.raises(BadReply):
            with _malformed("beam_probe_inspect:process"):
                _read_process("n@h", dict(base, **change))


def test_text_says_when_binaries_count_per_reference():
    from beam_probe.text.inspect import process_text
    from beam_probe.text.syntax import Syntax

    result = {"node": "n@h", "pid": "<0.1.0>", "name": None,
              "kind": "gen_server", "current_function": None,
              "initial_call": None, "parts": [], "pinned": [],
              "total": {"bytes": 1, "binary_bytes": 5, "memory": 9,
                        "message_queue_len": 0, "binary_distinct": None,
                        "sampled": False, "pause_ms": 1.0},
              "state": None, "dictionary": None, "mailbox": None}
    assert "once per reference" in process_text(result, Syntax(False))
    result["total"]["binary_distinct"] = 5
    assert "once per reference" not in process_text(result, Syntax(False))
