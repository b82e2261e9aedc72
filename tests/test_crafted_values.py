"""Values no node can give (2^2000, -5, 1.5, <<"x">> where a count
belongs), sent by real nodes: each is one line and exit 8 for one node
(check: UNKNOWN naming the cause, exit 3), and that node's row in a
cluster while the others answer; never exit 1.

How a real node is made to send them: a helper's result passed through a
tamper fun. The helpers' parsed forms are read from the forms cache
($BEAM_PROBE_CACHE), which beam-probe trusts when it is the user's own
(node/forms.py); the test plants there the forms of one helper whose
function wraps its real body, ``(fun(R) -> R#{Key := Value} end)(begin
Body end)``, so the node runs the real helper and tampers with its own
answer. Through a cluster's entry the same forms reach every member, and
the tamper looks at node() to pick the one hostile member. Nothing is
loaded on any node; the product's code is the code under test, its cache
reader included (the planted file is what a trusted cache may hold).
"""

from __future__ import annotations

import json
import os
import uuid

import pytest

from beam_probe.erldist import etf
from beam_probe.erldist.terms import Atom
from beam_probe.node.forms import (HelperForms, canonical_variables,
                                   helper_path, sha256)
from beam_probe.node.remote import attach
from conftest import one_line, run_here

# The crafted values, as Erlang expressions.
VALUES = {"2^2000": "1 bsl 2000", "-5": "-5", "1.5": "1.5",
          "binary": '<<"x">>'}


@pytest.fixture(scope="module")
def pair(session_nodes):
    """(entry, member): two connected OTP 25 nodes of one cookie."""
    tag = uuid.uuid4().hex[:6]
    cookie = f"v{tag}"
    entry, member = (session_nodes.start("25", prefix=f"{head}v{tag}",
                                         cookie=cookie)
                     for head in ("bp", "zz"))
    with attach(entry.node, entry.cookie.encode()) as remote:
        assert remote.call("net_kernel", "connect_node",
                           [Atom(member.node)]) is True
    return entry, member


@pytest.fixture(scope="module")
def target(pair):
    """The one node the one-node cases ask: the pair's entry, of OTP 25
    only. What is tested is beam-probe's reading, the same for every
    release; the tamper runs the real helper on any."""
    return pair[0]


def _expr(remote, text: str):
    ok, tokens, _end = remote.call("erl_scan", "string", [text + "."])
    assert ok == Atom("ok"), tokens
    ok, exprs = remote.call("erl_parse", "parse_exprs", [tokens])
    assert ok == Atom("ok"), exprs
    return exprs[0]


def plant(node, folder: str, module: str, function: str, tamper: str,
          only: str | None = None) -> None:
    """The forms cache in ``folder`` with ``module:function``'s result
    passed through ``tamper``, an Erlang expression of R (the real
    result); with ``only``, on that node alone."""
    if only is not None:
        tamper = f"case node() of '{only}' -> {tamper}; _ -> R end"
    with attach(node.node, node.cookie.encode()) as remote:
        with open(helper_path(module), "rb") as f:
            source = f.read()
        forms = {name: canonical_variables(clauses) for name, clauses in
                 HelperForms(remote.call)._parse(module,
                                                 source.decode()).items()}
        fun = _expr(remote, f"fun(R) -> {tamper} end")
    # {clause, Anno, Patterns, Guards, Body}: Body becomes
    # Fun(begin Body end).
    forms[function] = [
        (c[0], c[1], c[2], c[3],
         [(Atom("call"), 1, fun, [(Atom("block"), 1, c[4])])])
        for c in forms[function]]
    os.makedirs(folder, mode=0o700, exist_ok=True)
    path = os.path.join(folder, f"{module}-"
                        f"{sha256(source).hexdigest()[:20]}.etf")
    with open(path, "wb") as f:
        f.write(etf.encode(list(forms.items())))
    os.chmod(path, 0o600)


# --- the readers alone: each value at the edges of its range ----------------

GOOD_COUNTS = [0, 1, 2**64 - 1]
BAD_COUNTS = [-1, -5, 2**64, 2**2000, 2**20000, 1.5, float("nan"), True,
              b"x", "x", None, Atom("undefined"), [1], (1,)]


def _id(value) -> str:
    if type(value) is int and value.bit_length() > 64:
        return f"2^{value.bit_length() - 1}"
    return repr(value)


@pytest.mark.parametrize("value", GOOD_COUNTS + BAD_COUNTS, ids=_id)
def test_a_count_is_an_integer_within_64_bits(value):
    from beam_probe.errors import BadReply
    from beam_probe.node.replies import Reply

    reply = Reply("h:f", {Atom("k"): value, Atom("memory"): [
        (Atom("total"), value)]})
    if value in GOOD_COUNTS and type(value) is int:
        assert reply.count("k") == value
        assert reply.sizes("memory", ["total"]) == {"total": value}
        return
    negative = type(value) is int and -2**63 <= value < 0
    for read in (lambda: reply.count("k"),
                 *(() if negative else (lambda: reply.int("k"),)),
                 lambda: reply.sizes("memory", ["total"]),
                 lambda: reply.counts("memory")):
        with pytest.raises(BadReply) as caught:
            read()
        line = str(caught.value)
        assert line.startswith("h:f's ") and len(line) < 120, line
    # A change may be negative: -5 is an integer, 2^64 is not.
    if type(value) is int and value in (-1, -5):
        assert reply.int("k") == value


from hypothesis import given, settings, strategies as st  # noqa: E402

TERMS = st.recursive(
    # Powers of two made by map: hypothesis writes a sampled_from list
    # out, and Python refuses to write 2^20000.
    st.none() | st.booleans() | st.integers() | st.sampled_from(
        [63, 64, 2000, 20000]).map(lambda bits: 2**bits)
    | st.sampled_from([63, 64]).map(lambda bits: 2**bits - 1) | st.floats()
    | st.binary(max_size=20) | st.text(max_size=8)
    | st.text(max_size=8).map(Atom),
    lambda inner: st.lists(inner, max_size=4) | st.tuples(inner, inner)
    | st.dictionaries(st.text(max_size=4).map(Atom), inner, max_size=4),
    max_leaves=10)


@settings(max_examples=300, deadline=None)
@given(TERMS)
def test_every_reader_answers_or_says_why_in_one_line(term):
    """Whatever a node sends under a key, each reader gives a value of its
    kind and range or a BadReply of one short line; nothing else."""
    from beam_probe.errors import BadReply
    from beam_probe.node.replies import Reply

    reply = Reply("h:f", {Atom("k"): term})
    readers = {"count": lambda: reply.count("k"), "int": lambda: reply.int(
        "k"), "counts": lambda: reply.counts("k"),
        "wordsize": lambda: reply.wordsize("k"),
        "sizes": lambda: reply.sizes("k", ["total"]),
        "map": lambda: reply.map("k"), "list": lambda: reply.list("k")}
    for name, read in readers.items():
        try:
            value = read()
        except BadReply as exc:
            assert "\n" not in str(exc) and len(str(exc)) < 200, str(exc)
            continue
        if name == "count":
            assert type(value) is int and 0 <= value < 2**64
        elif name == "int":
            assert type(value) is int and -2**63 <= value < 2**64
        elif name == "counts":
            assert all(type(v) is int and 0 <= v < 2**64 for v in value)
        elif name == "wordsize":
            assert value in (4, 8) and type(value) is int
        elif name == "sizes":
            assert type(value["total"]) is int


def test_no_integer_is_too_long_to_write():
    from beam_probe.erldist.terms import format_term, mfa

    assert format_term(2**20000) == "<an integer of 20001 bits>"
    assert format_term(2**64) == str(2**64)
    assert mfa((Atom("m"), Atom("f"), 2**20000)) is None
    assert mfa((1, 2, 3)) is None
    assert mfa((Atom("m"), Atom("f"), [1, 2])) == "m:f/2"


# (what, command, helper module and function, tamper with V for the
# value, the key the error line must name)
ONE_NODE = {
    "alloc": (("alloc",), "beam_probe_alloc", "alloc",
              "R#{memory_total := V}", "memory_total"),
    "alloc types": (("alloc",), "beam_probe_alloc", "alloc",
                    "R#{types := [T#{sbcs := [V, 0, 0, 0, 0, 0, 0, 0]} "
                    "|| T <- maps:get(types, R)]}", "sbcs"),
    "watch": (("watch", "--count", "1", "--interval", "1"),
              "beam_probe_watch", "sample",
              "R#{process_count := V}", "process_count"),
    "watch memory": (("watch", "--count", "1", "--interval", "1"),
                     "beam_probe_watch", "sample",
                     "R#{memory := lists:keyreplace(binary, 1, "
                     "maps:get(memory, R), {binary, V})}", "binary"),
    "snapshot": (("snapshot", "--gc", "none"), "beam_probe_snapshot",
                 "snapshot", "R#{atom_count := V}", "atom_count"),
    "snapshot sample": (("snapshot", "--gc", "none"), "beam_probe_snapshot",
                        "snapshot", "R#{sample := maps:put(ets_count, V, "
                        "maps:get(sample, R))}", "ets_count"),
    "ets": (("ets",), "beam_probe_ets", "largest", "R#{tables := V}",
            "tables"),
    "ets size": (("ets",), "beam_probe_ets", "largest",
                 "R#{largest := [E#{info := lists:keyreplace(size, 1, "
                 "maps:get(info, E), {size, V})} || "
                 "E <- maps:get(largest, R)]}", "size"),
    "proc-count": (("proc-count", "memory", "3"), "beam_probe_scan",
                   "proc_count", "R#{scanned := V}", "scanned"),
}


ONE_NODE["watch shape"] = (
    ("watch", "--count", "1", "--interval", "1"), "beam_probe_watch",
    "sample", "[R, V]", "not a map")
ONE_NODE["proc-info"] = (
    ("proc-info", "code_server"), "beam_probe_scan", "proc_info",
    "R#{binary_memory := V}", "binary_memory")
ONE_NODE["proc-info items"] = (
    ("proc-info", "code_server"), "beam_probe_scan", "proc_info",
    "R#{items := lists:keyreplace(reductions, 1, maps:get(items, R), "
    "{reductions, V})}", "reductions")
ONE_NODE["trace-gc summary"] = (
    ("trace-gc", "code_server", "--duration", "0.2", "--format", "json"),
    "beam_probe_trace", "trace_gc", "R#{dropped := V}", "dropped")

# A snapshot's table section with one crafted table: the node packs it
# (term_to_binary) as it packs its real ones.
TABLES = ("R#{tables := erlang:term_to_binary([{t, t, self(), V, 5, set}], "
          "[compressed])}")
ONE_NODE["leak-hunt tables"] = (
    ("leak-hunt", "--interval", "0", "--snapshots", "2", "--gc", "none"),
    "beam_probe_snapshot", "snapshot", TABLES, "rows in its tables")


def _args(command: tuple[str, ...], node, tmp_path) -> list[str]:
    args = [command[0], node.node, *command[1:]]
    if command[0] == "snapshot":
        args += ["-o", str(tmp_path / "s.snapshot")]
    if command[0] == "leak-hunt":
        args += ["--save", str(tmp_path / "hunt")]
    return args


@pytest.mark.parametrize("value", VALUES)
@pytest.mark.parametrize("case", ONE_NODE)
def test_a_crafted_value_is_one_line_and_exit_8(target, tmp_path,
                                                monkeypatch, case, value):
    command, module, function, tamper, key = ONE_NODE[case]
    folder = str(tmp_path / "cache")
    plant(target, folder, module, function,
          tamper.replace("V", f"({VALUES[value]})"))
    monkeypatch.setenv("BEAM_PROBE_CACHE", folder)
    r = run_here(*_args(command, target, tmp_path), node=target)
    if command[0] == "leak-hunt":
        # A hunt says where its files go, then where it kept what it took.
        start, _, rest = r.stderr.partition("\n")
        assert "snapshots go to" in start, r.stderr
        kept, _, rest = rest.partition("\n")
        assert "snapshot kept in" in kept, r.stderr
        r.stderr = rest
    line = one_line(r, 8, "bad reply", key)
    assert f"{module}:{function}" in line or module in line, line
    if value == "2^2000" and key not in ("not a map",
                                         "rows in its tables"):
        assert "of 2001 bits" in line, line
    assert not os.path.exists(tmp_path / "s.snapshot")


@pytest.mark.parametrize("value", VALUES)
def test_check_is_unknown_naming_the_cause(target, tmp_path, monkeypatch,
                                           value):
    folder = str(tmp_path / "cache")
    plant(target, folder, "beam_probe_scan", "health",
          f"R#{{top_ets_memory := {VALUES[value]}}}")
    monkeypatch.setenv("BEAM_PROBE_CACHE", folder)
    r = run_here("check", target.node, node=target)
    assert r.returncode == 3, (r.stdout, r.stderr)
    assert r.stdout.startswith(f"BEAM UNKNOWN - {target.node}: bad reply: "
                               "beam_probe_scan:health's top_ets_memory "
                               "is "), r.stdout
    assert len(r.stdout.splitlines()) == 1 and r.stderr == ""
    r = run_here("check", target.node, "--format", "json", node=target)
    result = json.loads(r.stdout)
    assert r.returncode == 3 and result["status"] == "UNKNOWN", r.stdout
    assert "top_ets_memory" in result["nodes"][0]["error"]
    r = run_here("check", target.node, "--format", "prometheus", node=target)
    assert r.returncode == 3
    assert f'beam_probe_up{{node="{target.node}"}} 0' in r.stdout


def test_a_stack_frame_of_any_shape_is_shown(target, tmp_path,
                                              monkeypatch):
    """A stack is the process's to describe, not a figure: frames of other
    shapes, and a file name of code points no text has, are shown as
    terms, never a traceback."""
    folder = str(tmp_path / "cache")
    plant(target, folder, "beam_probe_scan", "proc_info",
          "R#{items := lists:keyreplace(current_stacktrace, 1, "
          "maps:get(items, R), {current_stacktrace, [{m, f, 1 bsl 2000, "
          "[{file, [99999999]}, {line, 3}]}, 7, {m, f, 1, [1, 2]}, "
          "{m, f, 0, [{file, \"caf\\x{e9}.erl\"}]}]})}")
    monkeypatch.setenv("BEAM_PROBE_CACHE", folder)
    r = run_here("proc-info", target.node, "code_server", "--format", "json",
                 node=target)
    assert r.returncode == 0, r.stderr
    stack = json.loads(r.stdout)["location"]["current_stacktrace"]
    assert stack[0].startswith("{m,f,<an integer of 2001 bits>") \
        and stack[0].endswith("([99999999]:3)"), stack
    assert stack[1:] == ["7", "m:f/1", "m:f/0 (caf\u00e9.erl)"], stack


def test_a_good_plant_changes_nothing(target, tmp_path, monkeypatch):
    """The control: a tamper that keeps the value shows the rig runs the
    real helper (and that the planted forms are used at all)."""
    folder = str(tmp_path / "cache")
    plant(target, folder, "beam_probe_alloc", "alloc",
          "R#{memory_total := 12345}")
    monkeypatch.setenv("BEAM_PROBE_CACHE", folder)
    r = run_here("alloc", target.node, "--format", "json", node=target)
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    assert report["memory_total"] == 12345
    assert report["types"], report


# --- a cluster with one hostile member ---------------------------------------


# (command, module, function, tamper, value): each value once at least.
CLUSTER = {
    "alloc": (("alloc",), "beam_probe_alloc", "alloc",
              "R#{mseg_calls := V}", "1 bsl 2000"),
    "ets": (("ets",), "beam_probe_ets", "largest", "R#{total_words := V}",
            "-5"),
    "snapshot": (("snapshot", "--gc", "none"), "beam_probe_snapshot",
                 "snapshot", "R#{creation := V}", "1.5"),
    "leak-hunt": (("leak-hunt", "--interval", "0", "--snapshots", "2",
                   "--gc", "none"), "beam_probe_snapshot", "snapshot",
                  "R#{process_count := V}", '<<"x">>'),
    "check": (("check",), "beam_probe_scan", "health",
              "R#{max_queue := V}", "-5"),
    # Its files are written, and then cannot be compared: its row.
    "leak-hunt tables": (("leak-hunt", "--interval", "0", "--snapshots",
                          "2", "--gc", "none"), "beam_probe_snapshot",
                         "snapshot", TABLES, "1 bsl 2000"),
}


def _cluster_args(command, entry, tmp_path) -> list[str]:
    args = [command[0], entry.node, *command[1:], "--cluster"]
    if command[0] == "snapshot":
        args += ["-o", str(tmp_path / "out")]
    if command[0] == "leak-hunt":
        args += ["--save", str(tmp_path / "hunt")]
    return args


@pytest.mark.parametrize("case", CLUSTER)
def test_a_hostile_member_is_its_row(pair, tmp_path, monkeypatch, case):
    entry, member = pair
    command, module, function, tamper, value = CLUSTER[case]
    folder = str(tmp_path / "cache")
    plant(entry, folder, module, function,
          tamper.replace("V", f"({value})"), only=member.node)
    monkeypatch.setenv("BEAM_PROBE_CACHE", folder)
    r = run_here(*_cluster_args(command, entry, tmp_path), "--format",
                 "json", node=entry)
    result = json.loads(r.stdout)
    rows = {row["node"]: row for row in result["nodes"]}
    assert set(rows) == {entry.node, member.node}, rows
    key = tamper.split("#{")[1].split(" ")[0]
    if tamper == TABLES:
        key = "values no node has"
    assert key in rows[member.node]["error"], rows[member.node]
    assert "error" not in rows[entry.node], rows[entry.node]
    if command[0] == "check":
        # The node answered with no figures to judge: UNKNOWN, its row
        # says why (a node that does not answer is CRITICAL).
        assert r.returncode == 3 and result["status"] == "UNKNOWN", r.stdout
        assert rows[member.node]["status"] == "UNKNOWN"
        assert rows[entry.node]["status"] == "OK", rows[entry.node]
        return
    if command[0] == "leak-hunt":
        # A hunt says where its files go, then where it kept them.
        start, _, rest = r.stderr.partition("\n")
        assert "snapshots go to" in start, r.stderr
        kept, _, rest = rest.partition("\n")
        assert "snapshots kept in" in kept, r.stderr
        r.stderr = rest
        assert rows[entry.node]["diff"] is not None
        assert len(rows[member.node]["files"]) == (2 if tamper == TABLES
                                                   else 0)
    one_line(r, 15, "1 of 2 nodes", member.node, key)


def test_watch_cluster_makes_a_hostile_member_down(pair, tmp_path,
                                                   monkeypatch):
    entry, member = pair
    folder = str(tmp_path / "cache")
    plant(entry, folder, "beam_probe_watch", "sample",
          "R#{atom_limit := 0}", only=member.node)
    monkeypatch.setenv("BEAM_PROBE_CACHE", folder)
    r = run_here("watch", entry.node, "--cluster", "--count", "2",
                 "--interval", "0.5", "--format", "json", node=entry)
    assert r.returncode == 0, r.stderr
    lines = [json.loads(line) for line in r.stdout.splitlines()]
    samples = [s for s in lines if "summary" not in s]
    theirs = [s for s in samples if s["node"] == member.node]
    ours = [s for s in samples if s["node"] == entry.node]
    assert theirs and all(s.get("down") for s in theirs), theirs
    assert "atom_limit is 0, not a count of at least 1" in theirs[0]["error"]
    assert ours and not any(s.get("down") for s in ours), ours


# --- trace-gc's chunks, which its tracer sends as messages -------------------

def _trace(chunks, summary):
    """A TraceGc fed ``chunks`` and ``summary`` as its node's tracer would
    send them (the tracer's messages cannot be tampered by a wrapper)."""
    from beam_probe.probes.trace_gc import TraceGc

    def stream():
        yield from chunks
        return summary

    probe = TraceGc(lambda: None, ["<0.1.0>"], None, 1.0, 100, 0,
                    lambda text: None)
    probe._stream = stream()
    probe.node = "n@h"
    return probe


def _started(statuses):
    return {Atom("kind"): Atom("started"), Atom("wordsize"): 8,
            Atom("mode"): Atom("trace"), Atom("statuses"): statuses}


def _status(**items):
    return {Atom(k): v for k, v in items.items()}


@pytest.mark.parametrize("chunk, words", [
    (_started([_status(status=Atom("traced"), pid=2**2000, info=[])]),
     "traced pid is an integer of 2001 bits"),
    ({Atom("kind"): Atom("events"), Atom("events"): [(1, 2, 3)]},
     "not a trace event"),
    ({Atom("kind"): Atom("events"), Atom("events"): [
        (Atom("trace_ts"), "PID", Atom("gc_minor_start"),
         [(Atom("heap_size"), -5)], 1)]}, "heap_size is -5"),
    ({Atom("kind"): Atom("events"), Atom("events"): [
        (Atom("trace_ts"), "PID", Atom("gc_minor_start"), [], 1.5)]},
     "event time is 1.5"),
])
def test_a_crafted_trace_chunk_is_a_bad_reply(chunk, words):
    from beam_probe.erldist.terms import Pid
    from beam_probe.errors import BadReply

    pid = Pid("n@h", 1, 0, 1)

    def real(term):
        if term == "PID":
            return pid
        if isinstance(term, tuple):
            return tuple(real(t) for t in term)
        if isinstance(term, list):
            return [real(t) for t in term]
        if isinstance(term, dict):
            return {k: real(v) for k, v in term.items()}
        return term
    first = _started([_status(status=Atom("traced"), pid=pid,
                              info=Atom("undefined")),
                      _status(status=Atom("not_found"), target=7),
                      _status(status=Atom("held"), pid=pid, held_by=3)])
    chunks = [real(chunk)] if chunk.get(Atom("kind")) == Atom("started") \
        else [first, real(chunk)]
    probe = _trace(chunks, {})
    with pytest.raises(BadReply, match=words):
        list(probe.samples())


def test_odd_statuses_are_shown_as_terms():
    from beam_probe.erldist.terms import Pid

    pid = Pid("n@h", 1, 0, 1)
    probe = _trace([_started([
        _status(status=Atom("traced"), pid=pid, info=[1, 2]),
        _status(status=Atom("not_found"), target=7),
        _status(status=Atom("held"), pid=pid, held_by=3)])],
        {Atom("reason"): Atom("duration"), Atom("trace_messages"): 0,
         Atom("dropped"): 0, Atom("reductions"): 5})
    head = next(probe.samples())
    assert head["tracing"][0]["group"] == "(exited)"
    assert head["skipped"] == [
        {"pid": "7", "why": "not_found"},
        {"pid": str(pid), "why": "held", "held_by": ["3"]}]


# --- top: every figure read through the same bounds (issue 37, 13) ---------

# (what, the tamper of beam_probe_top:pass/9's {Frame, State}, with V for
# the value): a row's reductions in the interval, the node's since the
# last pass, and the release (a string).
TOP = {
    "row reductions": "{F, S} = R, Rows = maps:get(rows, F), "
                      "{F#{rows := Rows#{reductions := "
                      "[V || _ <- maps:get(reductions, Rows)]}}, S}",
    "node reductions": "{F, S} = R, H = maps:get(header, F), "
                       "{F#{header := H#{gap := #{us => 1000000, "
                       "reductions => V, gcs => 0, words => 0}}}, S}",
    "otp_release": "{F, S} = R, H = maps:get(header, F), "
                   "{F#{header := H#{otp_release := V}}, S}",
}
TOP_VALUES = {**VALUES, "2^20000": "1 bsl 20000"}


def test_top_refuses_what_no_node_can_send(nodes, otp, tmp_path,
                                           monkeypatch):
    """Reductions of 2^2000 or 2^20000 ended top in OverflowError and
    ValueError, exit 1. Now a bad reply, one line naming the key, exit 8,
    on every release, text and JSON; the control (the real figures) is
    exit 0. The node's reductions may fall a little (its counters catch
    up with the keeper's), so -5 there is a rate of 0."""
    node = nodes.start(otp)
    monkeypatch.setenv("BEAM_PROBE_CACHE", str(tmp_path / "none"))
    r = run_here("top", node.node, "--once", "--interval", "0.5", "-N", "3",
                 node=node)
    assert r.returncode == 0, r.stderr
    for case, tamper in TOP.items():
        for value, expr in TOP_VALUES.items():
            folder = str(tmp_path / f"cache-{len(os.listdir(tmp_path))}")
            plant(node, folder, "beam_probe_top", "pass",
                  tamper.replace("V", f"({expr})"))
            monkeypatch.setenv("BEAM_PROBE_CACHE", folder)
            for fmt in ("table", "json"):
                r = run_here("top", node.node, "--once", "--interval", "0.5",
                             "-N", "3", "--format", fmt, node=node)
                if case == "node reductions" and value == "-5":
                    assert r.returncode == 0, r.stderr
                    if fmt == "json":
                        header = json.loads(r.stdout)["frames"][0]["header"]
                        assert header["reductions_per_s"] == 0
                    continue
                key = {"row reductions": "reductions",
                       "node reductions": "gap's reductions",
                       "otp_release": "otp_release"}[case]
                line = one_line(r, 8, "bad reply", "beam_probe_top", key)
                assert r.stdout == "", (case, value, r.stdout)
                if value.startswith("2^"):
                    assert f"of {int(value[2:]) + 1} bits" in line, line


# --- what the last review of issue 37 sent top and the process rows --------

def test_odd_shapes_in_top_and_the_rows_are_bad_replies(nodes, tmp_path,
                                                       monkeypatch):
    """A sort of 2^20000 (ValueError in str()), an info keyed by a list
    (TypeError in dict(), every command's rows) ended top and proc-count
    with exit 1: now a bad reply, exit 8. A memory kind past the total
    (OverflowError in the bar, or a bar of 10^10 characters) is drawn
    as a full bar."""
    node = nodes.start("25")
    cases = [
        (("top", "--once", "--interval", "0.5", "-N", "3"),
         "beam_probe_top", "pass",
         "{F, S} = R, {F#{sort := 1 bsl 20000}, S}",
         ("sorted by", "of 20001 bits")),
        (("proc-count", "memory", "3"), "beam_probe_scan", "proc_count",
         "Rows = maps:get(rows, R), R#{rows := Rows#{infos := "
         "[[{[1], 2}] || _ <- maps:get(infos, Rows)]}}",
         ("infos",)),
    ]
    for command, module, function, tamper, words in cases:
        folder = str(tmp_path / f"cache-{len(os.listdir(tmp_path))}")
        plant(node, folder, module, function, tamper)
        monkeypatch.setenv("BEAM_PROBE_CACHE", folder)
        r = run_here(command[0], node.node, *command[1:], node=node)
        one_line(r, 8, "bad reply", *words)
    folder = str(tmp_path / "cache-memory")
    plant(node, folder, "beam_probe_top", "pass",
          "{F, S} = R, H = maps:get(header, F), "
          "M = [{K, case K of total -> 1; processes -> 1 bsl 63; _ -> V end}"
          " || {K, V} <- maps:get(memory, H)], "
          "{F#{header := H#{memory := M}}, S}")
    monkeypatch.setenv("BEAM_PROBE_CACHE", folder)
    r = run_here("top", node.node, "--once", "--interval", "0.5", "-N", "3",
                 node=node)
    assert r.returncode == 0, r.stderr
    (line,) = [x for x in r.stdout.splitlines()
               if x.lstrip().startswith("processes ")]
    assert "·" not in line and len(line) < 200, line


@pytest.mark.parametrize("release", ["27", "28"])
def test_a_label_nested_past_the_writer_is_cut(nodes, release):
    """Any process may put/2 a label nested 450 deep, and OTP 26.2+ lets
    top and proc-count read it: writing it took more of Python's stack
    than reading it (RecursionError, exit 1). Past 64 levels it is
    written '...'."""
    node = nodes.start(release)
    with attach(node.node, node.cookie.encode()) as remote:
        ok, tokens, _end = remote.call("erl_scan", "string", [
            "D = lists:foldl(fun(_, A) -> {A} end, deep_label, "
            "lists:seq(1, 450)), "
            "P = spawn(fun() -> put('$process_label', D), "
            "receive stop -> ok end end)."])
        ok, exprs = remote.call("erl_parse", "parse_exprs", [tokens])
        assert ok == Atom("ok"), exprs
        remote.call("erl_eval", "exprs", [exprs, []])
    for command in (("top", "--once", "--interval", "0.5", "-N", "500",
                     "--sort", "memory"),
                    ("proc-count", "memory", "500")):
        r = run_here(command[0], node.node, *command[1:], node=node)
        assert r.returncode == 0, r.stderr
        # Its name is its label, cut by each command's own rule.
        assert "{{{{{{{{" in r.stdout, r.stdout
