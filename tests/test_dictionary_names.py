"""Names from the dictionary on every release (issue 38, item 1): on OTP
25 every RabbitMQ queue was proc_lib:init_p/5 everywhere, since a single
dictionary key cannot be read before OTP 26.2. Now the rows a command
shows are named from a copy of their dictionary, within a cap a copy and
a budget a command (beam_probe_lib.erl's describe/1). A queue named only
in its dictionary, with a heap of ~24 MB as a busy broker queue has, is
named by proc-count, bin-leak, proc-window, top and its filter, serve's
label (its kind only) and trace-gc, on OTP 25, 27 and 28; a process whose
heap (~100 MB of dictionary) is past the cap stays unnamed on 25, and
the table says so in one line."""

from __future__ import annotations

import json

import pytest

from beam_probe.erldist.terms import Atom
from beam_probe.exporter.families import process_label
from beam_probe.node.remote import attach
from beam_probe.probes import processes, vm
from conftest import run_here

FIXTURE = "beam_probe_names_fixture"
# ~24 MB of heap (a list of small integers: two words an element), as a
# busy RabbitMQ queue's 16-24 MB; ~100 MB in the other's dictionary.
QUEUE_WORDS = 3_000_000
HUGE_WORDS = 13_000_000
LABEL = '{bpt_queue,<<"lq.104">>}'
HUGE_LABEL = '{bpt_queue,<<"lq.huge">>}'
INIT = f"{FIXTURE}:init/1"  # proc_lib's '$initial_call'
MIB = 1024 * 1024


@pytest.fixture(scope="module")
def broker(session_nodes, otp):
    """A node of each release holding the queue and the huge process."""
    node = session_nodes.start(otp)
    with attach(node.node, node.cookie.encode(), timeout=120) as remote:
        queue, heap = remote.call(FIXTURE, "queue",
                                  [b"lq.104", (QUEUE_WORDS, 0)], timeout=120)
        huge, huge_heap = remote.call(FIXTURE, "queue",
                                      [b"lq.huge", (1000, HUGE_WORDS)],
                                      timeout=120)
    # The shapes the tests rely on: under the per-copy cap, and past it.
    assert 16 * MIB < heap < 64 * MIB, heap
    assert huge_heap > 64 * MIB, huge_heap
    return node, otp, str(queue), str(huge)


def _row(rows, pid):
    return next(p for p in rows if p["pid"] == pid)


def test_proc_count_names_the_queue_and_says_which_rows_it_cannot(broker):
    node, otp, queue, huge = broker
    j = json.loads(run_here("proc-count", node.node, "memory", "5",
                            "--format", "json", node=node).stdout)
    assert j["labels_read"] is True
    row = _row(j["processes"], queue)
    assert (row["label"], row["initial_call"]) == (LABEL, INIT)
    big = _row(j["processes"], huge)
    text = run_here("proc-count", node.node, "memory", "5",
                    node=node).stdout
    line = next(line for line in text.splitlines() if line.startswith(queue))
    assert LABEL in line and INIT in line
    if otp == "25":
        # Its heap is past the cap: not copied, and said once.
        assert (big["label"], big["initial_call"]) == \
            (None, "proc_lib:init_p/5")
        unnamed = j["unnamed"]
        assert unnamed["pids"] == [huge] and unnamed["rows"] == 1
        assert unnamed["largest_heap"] > unnamed["per_copy"] == 64 * MIB
        assert text.count("1 row unnamed: its heap (") == 1, text
        assert ") exceeds what reading a dictionary may cost" in text
        assert "(64.0 MiB a process)" in text
    else:
        # One key at a time: the heap does not matter.
        assert (big["label"], big["initial_call"]) == (HUGE_LABEL, INIT)
        assert j["unnamed"] is None and "unnamed" not in text


def test_bin_leak_names_the_queue(broker):
    node, _otp, queue, _huge = broker
    with attach(node.node, node.cookie.encode(), timeout=60) as remote:
        remote.call("gen_server", "call", [_pid(remote, queue),
                                           (Atom("garbage"), 2000)])
    j = json.loads(run_here("bin-leak", node.node, "3", "--format", "json",
                            node=node).stdout)
    row = _row(j["processes"], queue)
    assert row["delta"] < 0  # (minor collections freed some already)
    assert (row["label"], row["initial_call"]) == (LABEL, INIT)


def _pid(remote, text):
    return remote.call("erlang", "list_to_pid", [text])


def test_proc_window_names_the_queue_that_grew(broker):
    node, _otp, _queue, _huge = broker
    with attach(node.node, node.cookie.encode(), timeout=60) as remote:
        grower, _ = remote.call(FIXTURE, "queue", [b"lq.grow", (1000, 0)])
        # Grows for ~10 s at most (a window of the 200,000 elements).
        remote.call("erlang", "send", [grower, (Atom("grow"), 500_000)])
        result = processes.proc_window(remote, "memory", 3, 2000)
    row = _row(result["processes"], str(grower))
    assert row["delta"] > 0
    assert (row["label"], row["initial_call"]) == \
        ('{bpt_queue,<<"lq.grow">>}', INIT)


def test_top_and_its_filter_find_the_queue_by_name(broker):
    node, _otp, queue, _huge = broker
    j = json.loads(run_here("top", node.node, "--once", "-N", "5",
                            "--filter", "lq.104", "--interval", "0.5",
                            "--format", "json", node=node).stdout)
    frame = j["frames"][0]
    assert [p["pid"] for p in frame["processes"]] == [queue]
    assert frame["processes"][0]["label"] == LABEL
    assert frame["matched"] == 1
    # By the process_name's kind too (the huge one's heap is past the
    # filter's 64 MiB a process on every release: not matched by it).
    j = json.loads(run_here("top", node.node, "--once", "-N", "5",
                            "--filter", "bpt_queue", "--interval", "0.5",
                            "--format", "json", node=node).stdout)
    found = {p["pid"] for p in j["frames"][0]["processes"]}
    assert queue in found


def test_serve_labels_a_queue_by_its_kind(broker):
    node, otp, queue, huge = broker
    with attach(node.node, node.cookie.encode(), timeout=60) as remote:
        found = vm.top(remote, 5)
    row = _row(found["memory"], queue)
    assert process_label(row) == "bpt_queue"  # never <<"lq.104">>
    big = _row(found["memory"], huge)
    assert process_label(big) == ("proc_lib:init_p/5" if otp == "25"
                                  else "bpt_queue")


def test_trace_gc_names_the_queue(broker):
    node, _otp, queue, _huge = broker
    r = run_here("trace-gc", node.node, queue, "--duration", "0.5",
                 "--format", "json", node=node)
    assert r.returncode == 0, r.stderr
    first = json.loads(r.stdout.splitlines()[0])
    who = first["tracing"][0]
    assert (who["pid"], who["label"], who["group"]) == (queue, LABEL, INIT)
    text = run_here("trace-gc", node.node, queue, "--duration", "0.5",
                    node=node).stdout
    assert LABEL in text.splitlines()[0], text


def test_the_unnamed_line_says_why(broker):
    """The budget's wording, where a row fits the cap but not what is
    left of the command's budget (rendered, no node needed)."""
    from beam_probe.text.node import unnamed_note

    note = unnamed_note({"unnamed": {"rows": 2, "pids": ["<0.1.0>",
                                                         "<0.2.0>"],
                                     "largest_heap": 60 * MIB,
                                     "per_copy": 64 * MIB,
                                     "budget": 256 * MIB}})
    assert note == ("2 rows unnamed: this command's budget for reading "
                    "dictionaries (256.0 MiB) was spent")


def test_a_clusters_table_says_which_node_left_rows_unnamed():
    from beam_probe.text import cluster as cluster_text
    from beam_probe.text.syntax import ERLANG

    unnamed = {"rows": 1, "pids": ["<0.90.0>"], "largest_heap": 200 * MIB,
               "per_copy": 64 * MIB, "budget": 256 * MIB}
    row = {"node": "b@h", "pid": "<0.90.0>", "value": 5, "name": None,
           "label": None, "current_function": None,
           "initial_call": "proc_lib:init_p/5", "exited": False}
    result = {"entry": "a@h", "attribute": "memory",
              "nodes": [{"node": "a@h", "scanned": 9, "labels_read": True,
                         "unnamed": None},
                        {"node": "b@h", "scanned": 9, "labels_read": True,
                         "unnamed": unnamed}],
              "processes": [row]}
    text = cluster_text.proc_count_text(result, ERLANG)
    assert text.count("unnamed") == 1
    assert "(b@h: 1 row unnamed: its heap (200.0 MiB) exceeds" in text


def test_the_commands_budget_leaves_the_last_copies_unnamed(nodes, otp):
    """Six processes each holding ~48 MB in their dictionaries, each under
    the 64 MiB cap: on OTP 25 the first five copies spend ~229 MiB of the
    256 MiB budget, and the sixth, whose heap would pass it, is left
    unnamed, said in one line. From 26.2 no dictionary is copied: every
    row is named."""
    node = nodes.start(otp)
    with attach(node.node, node.cookie.encode(), timeout=120) as remote:
        pids = []
        for i in range(6):
            pid, heap = remote.call(FIXTURE, "queue",
                                    [f"lq.b{i}".encode(), (1000, 6_000_000)],
                                    timeout=120)
            assert 40 * MIB < heap < 64 * MIB, heap
            pids.append(str(pid))
    j = json.loads(run_here("proc-count", node.node, "memory", "6",
                            "--format", "json", node=node).stdout)
    assert sorted(p["pid"] for p in j["processes"]) == sorted(pids)
    named = [p for p in j["processes"] if p["label"]]
    if otp == "25":
        assert len(named) == 5, j
        unnamed = j["unnamed"]
        assert unnamed["rows"] == 1
        assert unnamed["largest_heap"] < unnamed["per_copy"]
        text = run_here("proc-count", node.node, "memory", "6",
                        node=node).stdout
        assert ("1 row unnamed: this command's budget for reading "
                "dictionaries (256.0 MiB) was spent") in text
    else:
        assert len(named) == 6 and j["unnamed"] is None


def test_tops_frame_and_view_say_which_rows_are_unnamed():
    """top --once's text and the view's header (unnamed_lines) carry the
    line, a node's name before it when several are shown."""
    from beam_probe.text.top import unnamed_lines

    unnamed = {"rows": 2, "pids": ["<0.90.0>", "<0.91.0>"],
               "largest_heap": 300 * MIB, "per_copy": 64 * MIB,
               "budget": 256 * MIB}
    view = {"nodes": ["a@h"], "focus": None,
            "frames": [{"node": "a@h", "unnamed": unnamed},
                       {"node": "b@h", "unnamed": None}]}
    assert unnamed_lines(view) == [
        "", "(2 rows unnamed: their heaps (up to 300.0 MiB) exceed what "
        "reading a dictionary may cost (64.0 MiB a "
        "process))"]
    view["nodes"] = ["a@h", "b@h"]
    assert unnamed_lines(view)[1].startswith("(a@h: 2 rows unnamed")
    view["frames"][0]["unnamed"] = None
    assert unnamed_lines(view) == []


def test_a_name_as_large_as_its_heap_is_not_read_on_any_release(nodes,
                                                                  otp):
    """A process_name of ~320 MB (a list the process made: anyone may
    put any term there). From OTP 26.2 a single key is read alone, but
    its value is still copied whole: read regardless of the heap, the
    row was read (and its value dropped, past 1,024 bytes) with no word
    of it, 320 MB copied into our process on the node. Now the heap
    bounds the keys' values too: past the budget it stays unnamed, on
    every release, and the table says so; the queue beside it is named."""
    node = nodes.start(otp)
    with attach(node.node, node.cookie.encode(), timeout=180) as remote:
        big, heap = remote.call(FIXTURE, "queue",
                                [(Atom("seq"), 20_000_000), (0, 0)],
                                timeout=180)
        small, _ = remote.call(FIXTURE, "queue", [b"lq.s", (1000, 0)],
                               timeout=60)
    assert heap > 256 * MIB, heap
    j = json.loads(run_here("proc-count", node.node, "memory", "40",
                            "--format", "json", node=node).stdout)
    assert j["unnamed"] is not None, j["unnamed"]
    assert j["unnamed"]["pids"] == [str(big)], j["unnamed"]
    assert j["unnamed"]["largest_heap"] > j["unnamed"]["per_copy"]
    assert _row(j["processes"], str(big))["label"] is None
    assert _row(j["processes"], str(small))["label"] == \
        '{bpt_queue,<<"lq.s">>}'
    # --all says it too, once at the end (it said nothing before).
    every = json.loads(run_here("proc-count", node.node, "memory", "--all",
                                "--format", "json", node=node).stdout)
    assert every["unnamed"]["pids"] == [str(big)], every.get("unnamed")
    text = run_here("proc-count", node.node, "memory", "--all",
                    node=node).stdout
    assert text.count("1 row unnamed: its heap (") == 1, text[-500:]
    # top's filter: on 26.2+ every pass read (and encoded) the 320 MB
    # name to match it, 2.7 s a frame then 24-68 s (2 cores, OTP 28);
    # now the heap is read first and the keys only within 64 MiB.
    j = json.loads(run_here("top", node.node, "--once", "-N", "5",
                            "--filter", "bpt_queue", "--interval", "0.5",
                            "--format", "json", node=node).stdout)
    found = {p["pid"] for p in j["frames"][0]["processes"]}
    assert found == {str(small)}, found


# The two ways names are read: a copy of the dictionary (before OTP
# 26.2) and single keys (26.2+; 27 reads them as 28 does). ~20 s each.
@pytest.mark.parametrize("release", ["25", "28"])
def test_proc_count_all_names_every_queue_of_a_large_broker(nodes, release):
    """18,000 queues whose dictionaries are ~1 KB in the external format
    (a RabbitMQ queue's is ~780 bytes). Each copy was charged 16 times
    that, ~16 KB, so on OTP 25 proc-count --all spent the 256 MiB budget
    on the first ~16,000 and left the rest unnamed; a copy so small costs
    what the row's other reads do and is charged nothing now: every queue
    is named, whichever way the release reads names."""
    count = 18_000
    node = nodes.start(release)
    with attach(node.node, node.cookie.encode(), timeout=180) as remote:
        remote.call(FIXTURE, "queues", [count, 1000], timeout=180)
    j = json.loads(run_here("proc-count", node.node, "memory", "--all",
                            "--format", "json", node=node).stdout)
    queues = [p for p in j["processes"]
              if (p["label"] or "").startswith("{bpt_queue,")]
    assert len(queues) == count, (len(queues), j.get("unnamed"))
    assert j["unnamed"] is None, j["unnamed"]


def test_ets_bounds_what_its_owner_says_it_is(nodes, otp):
    """A table's owner whose '$initial_call' is a 16 KB term (anyone may
    put the key): from OTP 26.2, where ets reads the key alone, it was
    the owner's group, printed whole (~9,000 characters); now a value is
    kept only up to 1,024 bytes, as every name, and the owner is known
    by its initial call."""
    node = nodes.start(otp)
    with attach(node.node, node.cookie.encode(), timeout=60) as remote:
        owner = remote.call(FIXTURE, "owner", [2000], timeout=60)
    j = json.loads(run_here("ets", node.node, "3", "--format", "json",
                            node=node).stdout)
    table = next(t for t in j["largest"] if t["owner"] == str(owner))
    assert "bpt_owner" not in table["owner_group"], table["owner_group"][:200]
    assert len(table["owner_group"]) < 100, table["owner_group"][:200]


def test_bin_leak_and_proc_window_say_which_rows_are_unnamed():
    """The line proc-count and top write under their tables, under
    bin-leak's and proc-window's too (rendered, no node needed): once,
    and none where every row is named."""
    from beam_probe.text.node import bin_leak_text, proc_window_text
    from beam_probe.text.syntax import ERLANG

    unnamed = {"rows": 1, "pids": ["<0.90.0>"], "largest_heap": 117 * MIB,
               "per_copy": 64 * MIB, "budget": 256 * MIB}
    row = {"pid": "<0.90.0>", "delta": 5_000_000, "name": None,
           "label": None, "kind": None, "current_function": None,
           "initial_call": "proc_lib:init_p/5", "exited": False}
    memory = {"total": 100 * MIB, "binary": 10 * MIB}
    leak = {"node": "a@h", "scanned": 9, "holders": 1, "collected": 1,
            "memory_before": memory, "memory_after": memory,
            "processes": [dict(row, delta=-80)], "labels_read": True,
            "unnamed": unnamed}
    window = {"node": "a@h", "attribute": "memory", "window_ms": 1000,
              "scanned_first": 9, "scanned_last": 9, "processes": [row],
              "labels_read": True, "unnamed": unnamed, "born_count": 0,
              "born": [], "dead_count": 0, "dead": []}
    line = ("(1 row unnamed: its heap (117.0 MiB) exceeds what reading a "
            "dictionary may cost (64.0 MiB a process))")
    for render, result in ((bin_leak_text, leak),
                           (proc_window_text, window)):
        text = render(result, ERLANG)  # type: ignore[arg-type]
        assert text.splitlines().count(line) == 1, text
        named = render(dict(result, unnamed=None), ERLANG)  # type: ignore[arg-type]
        assert "unnamed" not in named, named
