"""A dead node read from its crash dump, on dumps made by real deaths of
real nodes (OTP 25, 27, 28): eheap_alloc failing on a node whose memory
is capped (+MMscs 256 +MMsco true +Musac false: without +Musac false it
never runs out), erlang:halt/1 with a reason, and a dump cut short by
ERL_CRASH_DUMP_BYTES. The node (tests/erl/beam_probe_dump_fixture.erl)
holds what applications hold: a gen_server whose state keeps slices
pinning 64 KiB binaries, a worker under an unregistered supervisor, a
receive loop's list, a mailbox of 100,000 messages, a table of 10,000
objects. Two snapshots are taken before the eheap death, with processes
born between them: diff a b dump names them.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from beam_probe.erldist.terms import Atom
from beam_probe.errors import ConnectionLost, ProbeError
from beam_probe.node.remote import attach
from conftest import REPO, NodeFactory, one_line, run_here

FIXTURE = "beam_probe_dump_fixture"
HALT_REASON = "beam_probe test: halted on purpose"
# The node's memory, capped: the eater dies within a second.
CAPPED = ("+MMscs", "256", "+MMsco", "true", "+Musac", "false")


def _wait_started(node) -> None:
    with attach(node.node, node.cookie.encode()) as remote:
        deadline = time.monotonic() + 30
        while remote.call("erlang", "whereis", [Atom("bp_dump_owner")]) \
                == Atom("undefined"):
            assert time.monotonic() < deadline, "the fixture never started"
            time.sleep(0.1)


def _kill(node, how) -> None:
    """Ask the node to die, and wait until it has (its dump written)."""
    with attach(node.node, node.cookie.encode()) as remote:
        try:
            remote.call(FIXTURE, "die", [how])
        except (ConnectionLost, ProbeError):
            pass
    node.proc.wait(120)


def _death(factory, otp, out, kind) -> dict[str, str]:
    made: dict[str, str] = {}
    env = dict(os.environ)
    args: tuple[str, ...] = ()
    if kind == "eheap":
        args = CAPPED
    if kind == "cut":
        env["ERL_CRASH_DUMP_BYTES"] = "300000"
    node = factory.start(otp, args=args, env=env,
                         eval_expr=f"{FIXTURE}:start()")
    _wait_started(node)
    if kind == "eheap":
        for name, born in (("a", None), ("b", 50)):
            if born:
                with attach(node.node, node.cookie.encode()) as remote:
                    remote.call(FIXTURE, "born", [born])
            path = os.path.join(out, f"{otp}-{name}.snapshot")
            r = run_here("snapshot", node.node, "-o", path, node=node)
            assert r.returncode == 0, r.stderr
            made[name] = path
    with attach(node.node, node.cookie.encode()) as remote:
        remote.call(FIXTURE, "mailbox", [100_000])
    if kind == "eheap":
        _kill(node, Atom("eheap"))
    else:
        _kill(node, (Atom("halt"), HALT_REASON))
    dump = os.path.join(out, f"{otp}-{kind}.dump")
    shutil.copy(os.path.join(node.home, "erl_crash.dump"), dump)
    made["dump"] = dump
    return made


@pytest.fixture(scope="session")
def deaths(beam_dir, tmp_path_factory):
    """Dumps of real deaths, made once a session per release and kind."""
    out = str(tmp_path_factory.mktemp("dumps"))
    factory = NodeFactory(beam_dir)
    made: dict[tuple[str, str], dict[str, str]] = {}

    def make(otp: str, kind: str) -> dict[str, str]:
        if (otp, kind) not in made:
            made[otp, kind] = _death(factory, otp, out, kind)
        return made[otp, kind]
    yield make
    factory.stop_all()


@pytest.fixture
def eheap(deaths, otp):
    return deaths(otp, "eheap")


def json_of(*args: str) -> dict:
    r = run_here(*args, "--format", "json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_overview_says_why_when_and_who(eheap, otp):
    dump = eheap["dump"]
    r = run_here("crashdump", dump)
    assert r.returncode == 0, r.stderr
    text = r.stdout
    assert "eheap_alloc could not get" in text and "process heaps" in text
    assert f"OTP {otp}" in text and "64-bit" in text
    assert "collecting" in text or "running" in text
    assert "bp_dump_eater" in text and "bp_dump_mailbox" in text
    assert f"beam-probe inspect {dump} " in text
    o = json_of("crashdump", dump)
    assert o["cause"]["kind"] == "out_of_memory"
    assert o["cause"]["allocator"] == "eheap_alloc"
    assert o["cause"]["request_bytes"] > 0
    assert o["complete"] is True and o["ending"] == "end"
    assert o["otp_release"] == otp and o["word_size"] == 8
    top = o["processes"]["by_memory"][0]
    assert top["name"] == "bp_dump_eater"
    assert top["memory"] > 10 * 1024 * 1024
    (queue,) = [p for p in o["processes"]["by_message_queue_len"]
                if p["name"] == "bp_dump_mailbox"]
    assert queue["message_queue_len"] == 100_000
    assert any(r["name"] == "bp_dump_eater" for r in o["running"])
    table = next(t for t in o["ets"]["largest"] if t["name"] ==
                 "bp_dump_table")
    assert table["size"] == 10_000 and table["owner_name"] == "bp_dump_owner"
    assert o["counts"]["processes"] > 40 and o["counts"]["atom_limit"] > 0
    assert o["memory"]["total"] > o["memory"]["processes"] > 0
    assert o["allocators"]["rss"] is None


def test_memory_and_alloc_from_the_dump(eheap):
    dump = eheap["dump"]
    memory = json_of("memory", dump)
    assert memory["crash_dump"]["file"] == dump
    assert memory["memory"]["processes"] > 10 * 1024 * 1024
    text = run_here("memory", dump).stdout
    assert text.startswith(f"from crash dump {dump} (node ")
    alloc = json_of("alloc", dump)
    eheap_alloc = next(t for t in alloc["types"]
                       if t["type"] == "eheap_alloc")
    assert eheap_alloc["used"] > 10 * 1024 * 1024
    assert alloc["rss"] is None and alloc["verdict"]["case"]
    assert "not in a crash dump" in run_here("alloc", dump).stdout


def test_proc_count_ranks_the_dead(eheap):
    dump = eheap["dump"]
    memory = json_of("proc-count", dump, "memory", "3")
    assert memory["processes"][0]["name"] == "bp_dump_eater"
    queue = json_of("proc-count", dump, "message_queue_len", "1")
    assert queue["processes"][0]["name"] == "bp_dump_mailbox"
    assert queue["processes"][0]["value"] == 100_000
    binary = json_of("proc-count", dump, "binary_memory", "2")
    # The cache and the worker under the unregistered supervisor each
    # keep 20 slices of 64 KiB binaries alive.
    for row in binary["processes"]:
        assert row["value"] >= 20 * 65536, row
        assert row["initial_call"] == f"{FIXTURE}:init/1", row
    names = {row["name"] for row in binary["processes"]}
    assert "bp_dump_cache" in names
    text = run_here("proc-count", dump, "binary_memory", "2").stdout
    assert f"beam-probe inspect {dump} '<0." in text
    assert json_of("proc-count", dump, "stack_size", "1")["processes"]


def test_ets_and_proc_info_from_the_dump(eheap):
    dump = eheap["dump"]
    tables = json_of("ets", dump, "3", "--sort", "size")
    first = tables["largest"][0]
    assert first["name"] == "bp_dump_table" and first["size"] == 10_000
    assert first["memory"] > 10_000 * 8
    info = json_of("proc-info", dump, "bp_dump_cache")
    assert info["location"]["initial_call"] == f"{FIXTURE}:init/1"
    assert info["location"]["current_function"].startswith("gen_server:")
    assert info["memory_used"]["binary_memory"] >= 20 * 65536
    assert info["meta"]["registered_name"] == "bp_dump_cache"
    r = run_here("proc-info", dump, "<0.9999.0>")
    one_line(r, 10, "no process <0.9999.0>")


def test_inspect_finds_the_pinned_slices_of_a_dead_gen_server(eheap, otp):
    dump = eheap["dump"]
    result = json_of("inspect", dump, "bp_dump_cache")
    assert result["kind"] == "dead"
    cache = next(p for p in result["parts"] if p["path"].endswith("{2}"))
    assert cache["kind"] == "map" and cache["count"] == 20
    text = run_here("inspect", dump, "bp_dump_cache").stdout
    assert '#{<<"key' in text
    if otp == "25":
        # OTP 25 writes no =binary for a slice whose ProcBin it did not
        # meet: the slices are there, what they pin is not; it says so.
        assert result["pinned"] == []
        assert "not in the dump" in result["state"]
        assert f"{20 * 65536:,} bytes of binaries" in result["state"]
        return
    (pinned,) = result["pinned"]
    assert pinned["count"] == 20 and pinned["bytes"] == 20 * 128
    assert pinned["referenced_bytes"] == 20 * 65536
    assert pinned["path"].endswith("{2}#{_}")
    assert cache["binary_bytes"] == 20 * 65536
    assert "binary:copy/1" in text


def test_inspect_decodes_a_loop_list_and_a_long_mailbox(eheap):
    dump = eheap["dump"]
    loop = json_of("inspect", dump, "bp_dump_loop")
    (root,) = [p for p in loop["parts"] if p["depth"] == 0]
    assert root["kind"] == "list" and root["path"].startswith(
        f"{FIXTURE}:loop/1 y")
    # 1,000 cons cells, 1,000 3-tuples and 1,000 5-byte heap binaries:
    # 1000 * (2 + 4 + 3) words, as erts_debug:flat_size/1 counts them.
    assert root["bytes"] == pytest.approx(1000 * 9 * 8, rel=0.01)
    mailbox = json_of("inspect", dump, "bp_dump_mailbox")
    messages = next(p for p in mailbox["parts"] if p["path"] == "Messages")
    assert messages["count"] == 100_000
    assert messages["bytes"] == 100_000 * 3 * 8  # {msg, I}: 3 words
    assert mailbox["total"]["message_queue_len"] == 100_000


def test_diff_names_what_was_born_and_kept_until_the_death(eheap):
    r = run_here("diff", eheap["a"], eheap["b"], eheap["dump"],
                 "--format", "json")
    assert r.returncode == 0, r.stderr
    result = json.loads(r.stdout)
    born = result["suspects"]["born_and_kept"]
    group = next(g for g in born if "holder/1" in g["what"])
    assert group["count"] == 50
    # Grouped as the snapshots group them: the dump's processes and the
    # files' meet by pid, and their groups read alike.
    assert group["what"] == f"{FIXTURE}:holder/1"
    two = json.loads(run_here("diff", eheap["a"], eheap["b"],
                              "--format", "json").stdout)
    assert any(d["what"] == group["what"] and d["+"] == 50
               for d in two["change"]["details"])
    # The loop, the mailbox and the cache were there from the start: not
    # born, not suspects; their parent was born with them.
    assert {g["what"] for g in born if "bp_dump" in g["what"]} == {
        "bp_dump_born"}
    text = run_here("diff", eheap["a"], eheap["b"], eheap["dump"]).stdout
    assert f"{FIXTURE}:holder/1" in text
    r = run_here("diff", eheap["dump"], eheap["a"])
    one_line(r, 2, "give it last")


def test_groups_read_alike_in_the_snapshot_and_the_dump(eheap):
    """Issue 38, item 1: a process alive at the second snapshot and in the
    dump is grouped alike by both, on every release: the worker under the
    unregistered supervisor by its '$initial_call' (OTP 25 as 27 and
    28), not proc_lib:init_p/5."""
    from beam_probe.crashdump.snapshot import load_dump
    from beam_probe.snapshots.columns import load

    def groups(snap):
        return {key: snap.group_names[group]
                for key, group in zip(snap.keys, snap.groups)}

    before, dead = groups(load(eheap["b"])), groups(load_dump(eheap["dump"]))
    workers = [key for key, what in before.items()
               if what.startswith(f"{FIXTURE}:init/1 under ")]
    assert len(workers) == 1, before  # the cache is registered
    both = [key for key in before if key in dead]
    assert len(both) > 40
    assert {key: dead[key] for key in both} == \
        {key: before[key] for key in both}
    assert not any(what.startswith("proc_lib:init_p/")
                   for what in dead.values())


def test_a_halt_says_its_reason(deaths, otp):
    dump = deaths(otp, "halt")["dump"]
    o = json_of("crashdump", dump)
    assert o["slogan"] == HALT_REASON and o["cause"]["kind"] == "halt"
    assert o["complete"] is True
    assert "erlang:halt/1" in run_here("crashdump", dump).stdout


def test_a_dump_cut_short_answers_with_what_it_has(deaths, otp):
    dump = deaths(otp, "cut")["dump"]
    assert os.path.getsize(dump) <= 400_000
    o = json_of("crashdump", dump)
    assert o["ending"] == "abort" and o["complete"] is False
    assert o["abort_reason"]
    assert "cut short" in run_here("crashdump", dump).stdout
    # What it has, it answers; the processes past the cut are not there.
    count = json_of("proc-count", dump, "memory", "3")
    assert count["scanned"] == o["counts"]["processes"]


def test_commands_that_need_a_live_node_say_so(eheap):
    dump = eheap["dump"]
    one_line(run_here("ping", dump), 2, "asks a live node", "crashdump")
    one_line(run_here("inspect", dump, "--table", "bp_dump_table"), 2,
             "ets FILE")
    one_line(run_here("proc-count", dump, "memory", "--all"), 2, "give N")
    one_line(run_here("alloc", dump, "--cluster"), 2, "--cluster")


def test_a_path_that_is_no_file_is_not_looked_for_as_a_node(tmp_path):
    one_line(run_here("memory", str(tmp_path / "gone.dump")), 2,
             "no file", "gone.dump")
    one_line(run_here("memory", "./erl_crash.dump.missing/x"), 2, "no file")
    one_line(run_here("proc-count", str(tmp_path), "memory", "3"), 2,
             "is a directory")
    one_line(run_here("crashdump", str(tmp_path / "gone.dump")), 2,
             "gone.dump")


# --- damaged and crafted dumps: one line, exit 2, in bounded time -----------

HEAD = b"=erl_crash_dump:0.5\nTue Nov 24 21:04:24 2026\nSlogan: test\n" \
    b"System version: Erlang/OTP 25 [erts-13.1.5] [64-bit]\nAtoms: 10\n"


def _crafted(tmp_path, name: str, data: bytes) -> str:
    path = tmp_path / name
    path.write_bytes(data)
    return str(path)


@pytest.mark.parametrize("data, words", [
    (b"", "not an Erlang crash dump"),
    (b"\x1f\x8b\x08\x00" + bytes(100), "gzip-compressed"),
    (b"-----BEGIN PGP MESSAGE-----\n" + bytes(100), "decrypt it first"),
    (b"=erl_crash_dump:0.4\nTue\n", "format '0.4'"),
    (bytes(range(256)) * 64, "not an Erlang crash dump"),
    (HEAD + b"=proc:<0.1.0>\nState: Waiting\nMemory: 9" + b"9" * 40
     + b"\n=end\n", "not a count"),
    (HEAD + b"=proc:<0.1.0>\nState: Waiting\n=end\n", "no 'Memory'"),
])
def test_a_damaged_dump_is_one_line_and_exit_2(tmp_path, data, words):
    path = _crafted(tmp_path, "bad.dump", data)
    one_line(run_here("crashdump", path, timeout=30), 2, words)
    one_line(run_here("proc-count", path, "memory", "3", timeout=30), 2)


# What a reader may hold while it refuses a long section: far below the
# gigabyte line, far above what it needs (~28 MB resident, 2 cores).
READ_LIMIT = 256 * 1024 * 1024


def _limited() -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_DATA, (READ_LIMIT, READ_LIMIT))


@pytest.mark.parametrize("before", [b"", b"=proc:<0.0.0>\nState: Waiting\n"
                                    b"Memory: 5\n"])
@pytest.mark.parametrize("args", [("crashdump",),
                                  ("proc-count", "memory", "3"),
                                  ("inspect", "<0.1.0>")])
def test_a_one_gigabyte_line_is_refused_unread(tmp_path, before, args):
    """A =proc a gigabyte long (a hole with no newline, alone or after a
    short =proc in the same window) is refused by every reader, which
    never holds it: the child may allocate at most READ_LIMIT, so a
    reader of the whole section (the overview's figures once read it,
    1 GB resident, 18 s) fails with a MemoryError instead of the line.
    No timing: the deadline is only against a hang."""
    path = tmp_path / "huge.dump"
    with open(path, "wb") as f:
        f.write(HEAD + before + b"=proc:<0.1.0>\nState: Waiting\nName: ")
        # A hole: a gigabyte of NULs with no newline, in no disk space.
        f.truncate(f.tell() + 1024 ** 3)
        f.seek(0, 2)
        f.write(b"\nMemory: 10\n=end\n")
    command, *rest = args
    result = subprocess.run(
        [sys.executable, "-m", "beam_probe", command, str(path), *rest],
        capture_output=True, text=True, timeout=600, preexec_fn=_limited,
        cwd=REPO)
    one_line(result, 2, "=proc:<0.1.0>", "over 64 MiB")


def test_heap_addresses_in_a_cycle_end(tmp_path):
    heap = (b"=proc:<0.1.0>\nState: Waiting\nMemory: 1000\n"
            b"=proc_stack:<0.1.0>\ny0:H10\n"
            b"=proc_heap:<0.1.0>\n10:t2:H20,H10\n20:t2:H10,H20\n"
            b"30:lH30|H10\n=end\n")
    path = _crafted(tmp_path, "cycle.dump", HEAD + heap)
    r = run_here("inspect", path, "<0.1.0>", "--depth", "8", timeout=30)
    assert r.returncode == 0, r.stderr
    assert "y0" in r.stdout


def test_a_dump_cut_mid_line_names_the_section_it_ends_in(deaths, tmp_path):
    real = open(deaths("25", "halt")["dump"], "rb").read()
    at = real.index(b"=proc:<0.") + 40
    path = _crafted(tmp_path, "cut.dump", real[:at])
    o = json_of("crashdump", path)
    assert o["ending"] == "truncated" and o["cut_in"].startswith("=proc:<0.")
    assert "cut short" in run_here("memory", path).stdout


def _answers_or_exit_2(path: str) -> None:
    """Every reading of a damaged dump: an answer (0), one line and exit 2,
    or no such process (10); never a traceback or exit 1."""
    for args in (("crashdump", path), ("proc-count", path, "memory", "2"),
                 ("proc-count", path, "binary_memory", "2"),
                 ("inspect", path, "bp_dump_cache"),
                 ("inspect", path, "bp_dump_mailbox"),
                 ("proc-info", path, "bp_dump_loop"), ("ets", path),
                 ("alloc", path)):
        r = run_here(*args, timeout=60)
        assert r.returncode in (0, 2, 10), (args, r.returncode, r.stderr)
        if r.returncode:
            one_line(r)


# 12 examples of six commands each: ~25 s on 2 cores (25 took ~50 s of
# CI's 30 minutes); the kinds of damage are drawn afresh every run.
@settings(max_examples=12, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.data())
def test_mutated_real_dumps_answer_or_exit_2(deaths, tmp_path, data):
    source = deaths("25", "halt")["dump"]
    raw = bytearray(open(source, "rb").read())
    how = data.draw(st.sampled_from(["flip", "truncate", "lines", "numbers"]))
    if how == "flip":
        for _ in range(data.draw(st.integers(1, 16))):
            at = data.draw(st.integers(0, len(raw) - 1))
            raw[at] = data.draw(st.integers(0, 255))
    elif how == "truncate":
        del raw[data.draw(st.integers(len(HEAD), len(raw) - 1)):]
    elif how == "lines":
        # A line of the dump copied over another: sections and heap
        # lines out of place, addresses that point anywhere.
        lines = bytes(raw).split(b"\n")
        for _ in range(data.draw(st.integers(1, 8))):
            a = data.draw(st.integers(1, len(lines) - 1))
            b = data.draw(st.integers(1, len(lines) - 1))
            lines[a] = lines[b]
        raw = bytearray(b"\n".join(lines))
    else:
        # A figure made absurd: a count of 30 digits, a negative size.
        text = bytes(raw)
        spots = [m.start(1) for m in re.finditer(rb"(?:: |:Y[hcs]|t)(\d+)",
                                                 text[:200_000])]
        at = data.draw(st.sampled_from(spots))
        raw[at:at] = data.draw(st.sampled_from([b"9" * 30, b"-", b"FFFF"]))
    path = tmp_path / "mutated.dump"
    path.write_bytes(bytes(raw))
    _answers_or_exit_2(str(path))


# --- what an independent review broke ---------------------------------------

def _proc(pid: str, extra: bytes = b"") -> bytes:
    return (f"=proc:{pid}\nState: Waiting\nSpawned as: erlang:apply/2\n"
            f"Message queue length: 0\nMemory: 2000\n").encode() + extra


def test_a_supervisor_of_thousands_links_is_read(tmp_path):
    links = ", ".join(f"<0.{i}.0>" for i in range(100, 20_100))
    data = HEAD + _proc("<0.44.0>", f"Link list: [{links}]\n".encode()) \
        + _proc("<0.45.0>") + b"=end\n"
    path = _crafted(tmp_path, "sup.dump", data)
    r = run_here("proc-count", path, "memory", "2", "--format", "json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["scanned"] == 2


@pytest.mark.parametrize("line", [
    b"100:t2:I1,A-5:", b"100:t2:I1,A:", b"100:t3:A5:a,b,c,I1,I2",
    b"100:Yh" + b"F" * 15 + b":AAAA", b"100:t2:,", b"100:l|",
])
def test_odd_heap_terms_end_quickly(tmp_path, line):
    data = HEAD + _proc("<0.1.0>") + b"=proc_stack:<0.1.0>\ny0:H100\n" \
        b"=proc_heap:<0.1.0>\n" + line + b"\n=end\n"
    path = _crafted(tmp_path, "odd.dump", data)
    started = time.monotonic()
    r = run_here("inspect", path, "<0.1.0>", timeout=20)
    assert r.returncode in (0, 2), r.stderr
    if r.returncode:
        one_line(r)
    assert time.monotonic() - started < 10


@pytest.mark.parametrize("initial", [
    b"t3:H300,H300,I1", b"t3:A1:m,A1:f,I-1", b"t3:A1:m,A1:f,I99999"])
def test_a_put_initial_call_of_any_shape_is_no_crash(tmp_path, initial):
    """Anyone may put('$initial_call', X): only {M, F, A} of atoms is
    proc_lib's; anything else leaves the process's own initial call."""
    data = HEAD + _proc("<0.1.0>") + b"=proc_dictionary:<0.1.0>\nH200\n" \
        b"=proc_stack:<0.1.0>\n=proc_heap:<0.1.0>\n" \
        b"200:t2:AD:$initial_call,H250\n250:" + initial + \
        b"\n300:t1:I1\n=end\n"
    path = _crafted(tmp_path, "ic.dump", data)
    for args in (("proc-info", path, "<0.1.0>"),
                 ("proc-count", path, "memory", "1"),
                 ("inspect", path, "<0.1.0>")):
        r = run_here(*args, "--format", "json")
        assert r.returncode == 0, (args, r.stderr)
    info = json.loads(run_here("proc-info", path, "<0.1.0>", "--format",
                               "json").stdout)
    assert info["location"]["initial_call"] == "erlang:apply/2"


def test_every_message_is_counted_past_the_hundred_thousandth(tmp_path):
    n = 150_000
    messages = b"".join(b"H%X:N\n" % (0x10000 + 32 * i) for i in range(n))
    heap = b"".join(b"%X:t2:A3:msg,I%d\n" % (0x10000 + 32 * i, i)
                    for i in range(n))
    data = HEAD + _proc("<0.1.0>").replace(b"length: 0", b"length: %d" % n) \
        + b"=proc_messages:<0.1.0>\n" + messages \
        + b"=proc_stack:<0.1.0>\n=proc_heap:<0.1.0>\n" + heap + b"=end\n"
    path = _crafted(tmp_path, "mbox.dump", data)
    result = json_of("inspect", path, "<0.1.0>")
    root = next(p for p in result["parts"] if p["path"] == "Messages")
    assert root["count"] == n and root["bytes"] == n * 3 * 8
    others = next(p for p in result["parts"] if p["path"] == "Messages[_]")
    assert others["count"] == n - 10 and others["bytes"] == (n - 10) * 24


def test_a_slot_that_points_into_another_is_counted_once(tmp_path):
    # y0 = {state, {small, 1}, <<1 KiB>>}; y1 = y0's {small, 1}.
    data = HEAD + _proc("<0.1.0>") + b"=proc_stack:<0.1.0>\n" \
        b"y0:H100\ny1:H200\ny2:H400\ny10:H500\n=proc_heap:<0.1.0>\n" \
        b"100:t3:A5:state,H200,H300\n200:t2:A5:small,I1\n" \
        b"300:Yh40:" + b"A" * 88 + b"\n400:t1:I7\n500:t1:I8\n=end\n"
    path = _crafted(tmp_path, "shared.dump", data)
    result = json_of("inspect", path, "<0.1.0>")
    roots = [p for p in result["parts"] if p["depth"] == 0]
    assert [p["path"].split()[-1] for p in roots] == ["y0", "y2", "y10",
                                                      "y1"]
    y0 = roots[0]
    assert y0["bytes"] == (4 + 3 + 2 + 8) * 8
    assert roots[-1]["bytes"] == 0 and "shared" in roots[-1]["kind"]


def test_a_section_written_among_the_heaps_is_no_process(tmp_path):
    """An atom's name is written raw in =atoms: one that holds
    "\\n=proc:..." must not add a process."""
    data = HEAD + _proc("<0.1.0>") + b"=proc_stack:<0.1.0>\n" \
        b"=proc_heap:<0.1.0>\n=atoms\nok\n=proc:<0.2.0>\nState: Waiting\n" \
        b"Memory: 999999\n=end\n"
    path = _crafted(tmp_path, "forged.dump", data)
    for attribute in ("memory", "stack_size"):
        result = json_of("proc-count", path, attribute, "5")
        assert [p["pid"] for p in result["processes"]] == ["<0.1.0>"]


def test_a_dump_without_its_name_is_still_a_dump(eheap, tmp_path,
                                                  monkeypatch):
    """A rotated or renamed dump (no .dump, no /) is read as one when
    it starts as a dump, and the commands it suggests read it so too."""
    renamed = tmp_path / "crash.txt"
    shutil.copy(eheap["dump"], renamed)
    monkeypatch.chdir(tmp_path)
    text = run_here("crashdump", "crash.txt").stdout
    assert "beam-probe proc-count ./crash.txt memory 10" in text
    r = run_here("proc-count", "crash.txt", "memory", "1")
    assert r.returncode == 0, r.stderr
    one_line(run_here("inspect", "./crash.txt"), 2, "expected")
    one_line(run_here("watch", "./crash.txt", "--count", "1"), 2,
             "asks a live node")
    r = run_here("check", "./crash.txt")
    assert r.returncode == 3 and "crashdump" in r.stdout


def test_diff_with_a_dump_holds_in_any_time_zone(eheap, monkeypatch):
    monkeypatch.setenv("TZ", "Asia/Tokyo")
    time.tzset()
    try:
        r = run_here("diff", eheap["a"], eheap["b"], eheap["dump"])
    finally:
        monkeypatch.undo()
        time.tzset()
    assert r.returncode == 0, r.stderr
    # Look closer at the dump, not at the dead node's name.
    assert f"beam-probe proc-info {eheap['dump']} '<0." in r.stdout


def test_reading_a_large_heap_leaves_it_on_disk(tmp_path):
    """Every pass over a dump gives its pages back: inspect and proc-info
    of a process with 240 MB of heap lines stay far below that (an
    inspect that searched a heap by mm.find alone once peaked at the
    dump's whole size)."""
    n = 6_000_000
    line = b"%012X:t2:I7,I8\n"
    heap = b"".join(line % (0x100000 + 24 * i) for i in range(n))
    data = HEAD + _proc("<0.1.0>") + _proc("<0.2.0>") + \
        b"=proc_stack:<0.1.0>\ny0:H%012X\n=proc_heap:<0.1.0>\n" % (
            0x100000 + 24 * (n - 1)) + heap + b"=end\n"
    path = _crafted(tmp_path, "large.dump", data)
    del heap, data
    for args in (("inspect", path, "<0.1.0>"), ("proc-info", path,
                                                "<0.2.0>"),
                 ("crashdump", path)):
        result = subprocess.run(
            ["/usr/bin/time", "-f", "%M", sys.executable, "-m", "beam_probe",
             *args], capture_output=True, text=True, cwd=REPO)
        assert result.returncode == 0, result.stderr
        peak_mib = int(result.stderr.split()[-1]) / 1024
        assert peak_mib < 120, (args, peak_mib)


# --- and what a second review broke ------------------------------------------

def test_a_supervisors_links_are_listed_whole(tmp_path):
    links = ", ".join(f"<0.{i}.0>" for i in range(100, 20_100))
    data = HEAD + _proc("<0.44.0>", f"Link list: [{links}]\n".encode()) \
        + b"=end\n"
    path = _crafted(tmp_path, "sup.dump", data)
    info = json_of("proc-info", path, "<0.44.0>")
    assert len(info["signals"]["links"]) == 20_000


def test_messages_past_the_cap_counted_when_the_next_is_an_atom(tmp_path):
    n = 150_000
    lines = []
    heap = []
    for i in range(n):
        if 100_000 <= i < 100_010:
            lines.append(b"A4:tick:N\n")  # immediates hold no line
        else:
            lines.append(b"H%X:N\n" % (0x10000 + 32 * i))
            heap.append(b"%X:t2:A3:msg,I%d\n" % (0x10000 + 32 * i, i))
    data = HEAD + _proc("<0.1.0>") + b"=proc_messages:<0.1.0>\n" \
        + b"".join(lines) + b"=proc_stack:<0.1.0>\n=proc_heap:<0.1.0>\n" \
        + b"".join(heap) + b"=end\n"
    path = _crafted(tmp_path, "mix.dump", data)
    result = json_of("inspect", path, "<0.1.0>")
    root = next(p for p in result["parts"] if p["path"] == "Messages")
    assert root["count"] == n and root["bytes"] == (n - 10) * 24


def test_a_slot_pointing_into_a_root_before_the_last_is_shared(tmp_path):
    data = HEAD + _proc("<0.1.0>") + b"=proc_stack:<0.1.0>\n" \
        b"y0:H100\ny1:H500\ny2:H200\n=proc_heap:<0.1.0>\n" \
        b"100:t3:A5:state,H200,H300\n200:t3:I1,I2,I3\n300:t3:I4,I5,I6\n" \
        b"500:t1:I9\n=end\n"
    path = _crafted(tmp_path, "shared2.dump", data)
    roots = {p["path"].split()[-1]: p for p in
             json_of("inspect", path, "<0.1.0>")["parts"] if p["depth"] == 0}
    assert roots["y0"]["bytes"] == (4 + 4 + 4) * 8
    assert roots["y2"]["bytes"] == 0 and "shared" in roots["y2"]["kind"]


def test_an_abort_names_the_section_it_cut_and_leaves_it_out(tmp_path):
    data = HEAD + _proc("<0.1.0>") + b"=proc:<0.2.0>\nState: Wai" \
        b"\n=abort:CRASH_DUMP_SIZE_LIMIT\n"
    path = _crafted(tmp_path, "abort.dump", data)
    o = json_of("crashdump", path)
    assert o["ending"] == "abort" and o["cut_in"] == "=proc:<0.2.0>"
    assert o["abort_reason"] == "CRASH_DUMP_SIZE_LIMIT"
    assert o["processes"]["count"] == 1


def test_a_stale_dump_is_not_the_last_of_three(eheap, tmp_path):
    """A dump written two weeks before the snapshots is not the node's
    death after them (a day's margin is kept for time zones)."""
    raw = open(eheap["dump"], "rb").read()
    first, rest = raw.split(b"\n", 2)[1], raw.split(b"\n", 2)[2]
    when = time.strptime(first.decode(), "%a %b %d %H:%M:%S %Y")
    earlier = time.strftime("%a %b %d %H:%M:%S %Y", time.localtime(
        time.mktime(when) - 14 * 86400)).encode()
    stale = tmp_path / "stale.dump"
    stale.write_bytes(raw.split(b"\n", 1)[0] + b"\n" + earlier + b"\n" + rest)
    one_line(run_here("diff", eheap["a"], eheap["b"], str(stale)), 2,
             "taken before")


def test_bare_names_of_files_and_folders(eheap, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    shutil.copy(eheap["dump"], tmp_path / "demo")
    one_line(run_here("inspect", "demo"), 2, "expected")
    assert run_here("memory", "demo").returncode == 0
    (tmp_path / "dir.dump").mkdir()
    one_line(run_here("memory", "dir.dump"), 2, "is a directory")
    # --node and BEAM_PROBE_NODE take a dump's path too.
    path = str(tmp_path / "demo")
    assert run_here("memory", "--node", path).stdout.startswith(
        f"from crash dump {path}")
    r = run_here("proc-count", "memory", "1", env={"BEAM_PROBE_NODE": path})
    assert r.returncode == 0 and r.stdout.startswith("from crash dump"), \
        r.stderr
    one_line(run_here("watch", "--count", "1",
                      env={"BEAM_PROBE_NODE": path}), 2, "asks a live node")
