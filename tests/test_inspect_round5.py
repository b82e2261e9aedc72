"""inspect of a live process, as issue 37's hostile tester attacked it, on
real nodes (OTP 25, 27, 28): processes that cap their heap must live; a
gen_event of thousands of handlers must keep answering its callers; a
state of hundreds of MB must not be made to collect, nor a list walked to
its end; a dictionary of a million keys must not be listed; a gen_server
that hibernates into a loop of its own must be sent nothing; figures past
the budget are said to be lower bounds, never shown as small ones.

The node's own figures while inspect runs come from a ticker in it
(tests/erl/beam_probe_inspect_fixture.erl: the longest gap of a
millisecond timer, the node's memory at its highest, and
erlang:system_monitor's long_gc and long_schedule over 20 ms). Bounds are
generous (a shared, slow machine); what they catch is the tester's
hundreds of milliseconds and hundreds of MB.
"""

from __future__ import annotations

import json
import re

import pytest

from beam_probe.erldist.terms import Atom
from beam_probe.node.remote import attach
from conftest import run_here

FIXTURE = "beam_probe_inspect_fixture"
MB = 2 ** 20


@pytest.fixture(scope="module")
def node(session_nodes, otp):
    return session_nodes.start(otp)


def call(node, function: str, *args, timeout: float = 120):
    with attach(node.node, node.cookie.encode(), timeout=timeout) as remote:
        return remote.call(FIXTURE, function, list(args), timeout=timeout)


def erlang(node, module: str, function: str, *args):
    with attach(node.node, node.cookie.encode()) as remote:
        return remote.call(module, function, list(args))


def inspect(node, *args: str) -> dict:
    result = run_here("inspect", node.node, *args, "--format", "json",
                      node=node)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def whereis(node, name: str):
    return erlang(node, "erlang", "whereis", Atom(name))


def queue_of(node, name: str) -> int:
    return erlang(node, "erlang", "process_info", whereis(node, name),
                  Atom("message_queue_len"))[1]


def gone(node, name: str) -> None:
    """A heavy fixture killed once measured: four engineers' nodes share
    the machine's memory."""
    pid = whereis(node, name)
    if pid != Atom("undefined"):
        erlang(node, "erlang", "exit", pid, Atom("kill"))


def ticked(node, run) -> tuple[dict, dict]:
    """What ``run()`` returns, and the node's figures meanwhile."""
    call(node, "ticker_start")
    try:
        answer = run()
    finally:
        figures = call(node, "ticker_stop")
    return answer, {str(key): value for key, value in figures.items()}


def needs(answer: dict) -> int:
    found = re.search(r"a walk needs ([\d,]+)", answer["state"] or "")
    assert found, answer["state"]
    return int(found.group(1).replace(",", ""))


def test_a_process_that_caps_its_heap_lives(node):
    """Finding 3: a gen_server with max_heap_size (kill) of 20,000 to
    150,000 words and a 3.8 KiB state, and one of 600,000 words with a
    318,000-word heap, were killed by inspect. Each is left alone with its
    figures, and lives; one given room by the rule is walked, and lives."""
    cases = [("bp_cap20k", 480, 20_000), ("bp_cap60k", 480, 60_000),
             ("bp_cap150k", 480, 150_000),
             ("bp_cap600k", 300_000, 600_000)]
    for name, words, cap in cases:
        pid = call(node, "capped", Atom(name), words, cap)
        answer = inspect(node, name)
        assert "max_heap_size" in answer["state"], answer["state"]
        assert needs(answer) > cap
        assert answer["parts"][0]["path"] != "State"
        assert whereis(node, name) == pid, f"{name} was killed"
        assert queue_of(node, name) == 0
    # Given the room the rule asks (a tenth more than it said), the
    # small one is walked, again and again, and lives.
    name = "bp_cap20k"
    need = needs(inspect(node, name))
    pid = whereis(node, name)
    erlang(node, "gen_server", "call", Atom(name),
           (Atom("max_heap"), need * 11 // 10))
    for _ in range(3):
        answer = inspect(node, name)
        assert answer["state"] is None, answer["state"]
        assert answer["parts"][0]["path"] == "State"
        assert whereis(node, name) == pid, "walked, and killed"
    # With room for part of the budget only, the walk's budget is cut to
    # fit, and the answer says so.
    name = "bp_cap60k"
    least = re.search(r"\(([\d,]+) at the least budget",
                      inspect(node, name)["state"])
    assert least, "no least figure"
    pid = whereis(node, name)
    erlang(node, "gen_server", "call", Atom(name),
           (Atom("max_heap"), int(least.group(1).replace(",", ""))
            + 400 * 150))
    for _ in range(3):
        answer = inspect(node, name)
        assert "walked with a budget of" in answer["state"], answer["state"]
        assert answer["parts"][0]["path"] == "State"
        assert whereis(node, name) == pid, "walked, and killed"
    for name, _, _ in cases:
        gone(node, name)


def test_a_cap_counting_shared_binaries_is_left_alone(node, otp):
    """Round 5's review (finding 1 of its fix brief): on OTP 28 a
    gen_server holding 20,001 80-byte slices of one 4 MB binary, capped
    with include_shared_binaries => true (kill), was killed by inspect at
    ten times the need inspect stated: the walk's references each count
    the whole binary. On 27 and 28 it is left alone with the reason; OTP
    25 drops the flag (a plain cap, with room here): walked. Alive, the
    same pid, nothing left in its mailbox."""
    name = "bp_cap_shared"
    pid = call(node, "shared_capped", Atom(name), 8_000_000)
    try:
        for _ in range(2):
            answer = inspect(node, name)
            if otp == "25":
                assert answer["state"] is None, answer["state"]
                assert answer["parts"][0]["path"] == "State"
            else:
                assert "include_shared_binaries" in answer["state"], \
                    answer["state"]
                assert "8,000,000 words" in answer["state"]
                assert answer["parts"][0]["path"] != "State"
            assert whereis(node, name) == pid, "killed by inspect"
            assert queue_of(node, name) == 0
    finally:
        gone(node, name)


def test_thousands_of_handlers_share_one_budget(node):
    """Findings 7 and 15: a gen_event of 2,000 handlers was paused 5.2-5.9
    s (each handler walked with 64 terms at least) and a concurrent
    gen_event:call timed out; its inspect printed 4,000 root rows at
    --width 10. The manager keeps answering within its calls' timeout,
    and the rows are bounded by --width."""
    call(node, "handlers", Atom("bp_many_events"), 2000)
    call(node, "caller_start", Atom("bp_many_events"))
    try:
        # Caught in a call of its caller's now and then: nothing is sent
        # then, and the answer says to try again.
        for _ in range(20):
            answer = inspect(node, "bp_many_events", "--width", "10")
            if "running a callback" not in (answer["state"] or ""):
                break
    finally:
        calls = {str(k): v for k, v in call(node, "caller_stop").items()}
    assert answer["kind"] == "gen_event", answer["state"]
    assert calls["calls"] > 0 and calls["failed"] == 0, calls
    assert calls["longest_ms"] < 5000, calls
    # The walk's own measure of the manager's pause: a tenth of a
    # millisecond a term of the budget, and the handlers' entries.
    assert answer["total"]["pause_ms"] < 3000, answer["total"]
    roots = [p for p in answer["parts"] if p["depth"] == 0
             and p["path"].startswith("Handler")]
    assert len(roots) <= 11, len(roots)
    folded = [p for p in roots if p["kind"].endswith("other handlers")]
    # Every handler is on show, folded, or said not measured (past the
    # walk's time on the manager).
    skipped = re.search(r"([\d,]+) of its 2,000 handlers were not measured",
                        answer["state"] or "")
    skipped_n = int(skipped.group(1).replace(",", "")) if skipped else 0
    assert len(folded) == 1
    assert int(folded[0]["kind"].split()[0].replace(",", "")) \
        == 2000 - 10 - skipped_n
    # Handlers not walked make the figures lower bounds.
    assert answer["total"]["unmeasured"] >= skipped_n
    text = run_here("inspect", node.node, "bp_many_events", "--width", "10",
                    node=node)
    assert text.returncode == 0, text.stderr
    assert len(text.stdout.splitlines()) < 80, text.stdout[-2000:]
    if skipped_n:
        assert "what it holds: at least" in text.stdout
    gone(node, "bp_many_events")


def test_a_large_state_is_not_made_to_collect(node, otp):
    """Finding 8: a 320 MB state: node +345 MB, a 366 ms collection,
    pauses of 290-580 ms (length/1 and nthtail over the whole list). Fresh
    in its young heap, the state is left alone (a collection of ours would
    copy it); once in its old heap, it is walked over its first million
    elements, its figures said to be lower bounds, and the node barely
    moves."""
    pid = call(node, "long_list", Atom("bp_long"), 7_500_000, timeout=300)
    try:
        # All of it in its young heap, as a full collection leaves it,
        # and that heap all but full (100,000 words free): anything we
        # add collects it.
        with attach(node.node, node.cookie.encode(), timeout=300) as remote:
            remote.call("erlang", "garbage_collect", [pid], timeout=300)
            gc = dict(remote.call("erlang", "process_info",
                                  [pid, Atom("garbage_collection_info")])[1])
            free = gc[Atom("heap_block_size")] - gc[Atom("heap_size")] \
                - gc[Atom("stack_size")]
            remote.call("gen_server", "call", [
                pid, (Atom("garbage"), free - 100_000), Atom("infinity")],
                timeout=300)
        answer, figures = ticked(node, lambda: inspect(node, "bp_long"))
        assert "young heap" in answer["state"], answer["state"]
        assert figures["peak_rise"] < 64 * MB, figures
        assert figures["long_gc"] < 100, figures
        call(node, "promote", Atom("bp_long"), timeout=300)
        if otp == "28":
            # OTP 28 collects a process in full at the first system
            # message it handles, whoever sends it (README, Known limits:
            # measured here with sys's own statistics request): once.
            inspect(node, "bp_long")
        answer, figures = ticked(node, lambda: inspect(node, "bp_long"))
        assert answer["parts"][0]["path"] == "State", answer["state"]
        state = answer["parts"][0]
        assert state["kind"] == "list" and state["count"] == 1_000_000
        assert answer["total"]["unmeasured"] >= 1
        assert "lower bounds" in answer["state"]
        # The walk's own measure: the first million cells counted in
        # compiled code, not the list's 7.5 million (290-580 ms before).
        assert answer["total"]["pause_ms"] < 250, answer["total"]
        assert figures["peak_rise"] < 64 * MB, figures
        assert figures["long_gc"] < 100, figures
        text = run_here("inspect", node.node, "bp_long", node=node)
        assert "what it holds: at least" in text.stdout, text.stdout
    finally:
        gone(node, "bp_long")


def test_a_million_keys_are_not_listed(node):
    """Finding 9: get/0 inside a process of a million keys stalled a
    scheduler 61-112 ms each run, and grew the process from 317 to 575 MB
    for good. The dictionary is said too large from outside; the state is
    walked; the process keeps its size."""
    pid = call(node, "many_keys", Atom("bp_keys"), 1_000_000, timeout=300)
    try:
        call(node, "promote", Atom("bp_keys"), timeout=300)

        def heap() -> int:
            return erlang(node, "erlang", "process_info", pid,
                          Atom("total_heap_size"))[1]
        before = heap()
        answer, figures = ticked(node, lambda: [inspect(node, "bp_keys")
                                                for _ in range(2)][-1])
        assert answer["state"] is None, answer["state"]
        assert "keys" in answer["dictionary"], answer["dictionary"]
        assert not any(p["path"].startswith("get()")
                       for p in answer["parts"])
        assert heap() <= before * 1.1 + 100_000
        # Generous (a loaded machine stretches a time slice); what
        # catches the finding is the heap above and the note.
        assert figures["long_schedule"] < 250, figures
        assert figures["peak_rise"] < 64 * MB, figures
    finally:
        gone(node, "bp_keys")


def test_waiting_messages_do_not_hide_keys(node):
    """Round 5's review (finding 2 of its fix brief): the key count was
    estimated from outside with 96 bytes taken off a waiting message, and
    a small one costs ~88, so each message hid about a key: 150,000 keys
    behind 250,000 messages were estimated at none and the dictionary was
    copied whole. 30,000 keys (over the bound of 16,384) behind 60,000
    messages: the dictionary is not read, and the answer says why."""
    name = "bp_keys_queue"
    call(node, "keys_behind_queue", Atom(name), 30_000, 60_000)
    try:
        answer = inspect(node, name)
        assert not any(p["path"].startswith("get()")
                       for p in answer["parts"]), answer["parts"][:3]
        assert "60,000 waiting messages" in answer["dictionary"], \
            answer["dictionary"]
    finally:
        gone(node, name)


def test_a_gen_server_hibernating_into_its_own_loop_is_sent_nothing(node):
    """Finding 10: a gen_server that hibernates into a plain loop of its
    module's was sent system messages that stayed in its mailbox for
    good."""
    call(node, "hib_plain", Atom("bp_hib_plain"))
    answer = inspect(node, "bp_hib_plain")
    assert answer["kind"] == "plain"
    assert "hibernate" in answer["state"], answer["state"]
    assert queue_of(node, "bp_hib_plain") == 0


def test_a_fun_spawned_by_proc_lib_is_named_so(node):
    """Finding 15: proc_lib:spawn(Fun) (initial call proc_lib:init_p/3)
    was said "not started by proc_lib"."""
    call(node, "fun_spawned", Atom("bp_fun"))
    answer = inspect(node, "bp_fun")
    assert answer["kind"] == "plain"
    assert "not started by proc_lib" not in answer["state"]
    assert "started by proc_lib but runs no gen_server" in answer["state"]
    assert queue_of(node, "bp_fun") == 0


def test_past_the_budget_a_large_heap_is_not_measured_small(node):
    """Finding 14: past 16M words, a 115 MB state was reported as "104 B
    of terms"; size_shared ran 78-86 ms on a 10.7M-word heap. A part past
    the budget in a heap over 16 MB is said not measured, the figures
    lower bounds; under it, size_shared sizes it."""
    call(node, "nested", Atom("bp_nested"), 60_000, timeout=120)
    call(node, "promote", Atom("bp_nested"))
    try:
        answer, figures = ticked(node, lambda: inspect(
            node, "bp_nested", "--budget", "10"))
        assert answer["total"]["unmeasured"] >= 1, answer["total"]
        assert "lower bounds" in answer["state"], answer["state"]
        # The part itself says so: its bytes are its own words only.
        state = answer["parts"][0]
        assert state["path"] == "State" and \
            state["kind"] == "tuple nested, not measured", state
        assert figures["long_schedule"] < 250, figures
        text = run_here("inspect", node.node, "bp_nested", "--budget", "10",
                        node=node)
        assert "what it holds: at least" in text.stdout, text.stdout
        assert "{nested, ...}, not measured" in text.stdout, text.stdout
    finally:
        gone(node, "bp_nested")
    # A heap under the bound: sized whole, past the budget too.
    call(node, "nested", Atom("bp_nested_small"), 10_000)
    call(node, "promote", Atom("bp_nested_small"))
    answer = inspect(node, "bp_nested_small", "--budget", "10")
    assert answer["total"]["unmeasured"] == 0, answer["state"]
    # 10,000 lists of 42 words, a cons of 2 each, a tuple of 3.
    assert answer["total"]["bytes"] == pytest.approx(
        (10_000 * 42 + 3) * 8, rel=0.05)
    gone(node, "bp_nested_small")


def test_a_kind_not_measured_twice_is_a_bad_reply():
    """A part's kind is wrapped once at most: a peer's nesting of it is a
    bad reply in one line (exit 8), never a recursion."""
    from beam_probe.errors import BadReply
    from beam_probe.probes.inspect import _kind

    nm = Atom("not_measured")
    assert _kind((nm, Atom("map"))) == "map, not measured"
    assert _kind((nm, (Atom("record"), Atom("state")))) == \
        "record state, not measured"
    with pytest.raises(BadReply):
        _kind((nm, (nm, Atom("map"))))
