"""top against real nodes: one frame (--once, JSON) on every release; the
view under Textual's Pilot (keys, sorting, opening a process, a filter, a
node that dies under it and returns, a terminal too small, a cluster);
the view in a real terminal (tmux); and nothing of ours left on the node
after q or kill -9."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from typing import Any, Callable

import pytest

from beam_probe.erldist.terms import Atom
from beam_probe.node.local import LocalNode
from beam_probe.node.remote import attach
from conftest import REPO, one_line, run_here, unique_name
from shapes import conforms_to

# The workload's figures (tests/erl/beam_probe_workload.erl): keeper J
# holds (J + 1) * 100,000 + 1,000 * J bytes of binaries and 3 * J unread
# messages; the leakers have the largest heaps.
LEAKERS, KEEPERS, IDLE = 5, 5, 1000


def _start_workload(node: LocalNode) -> None:
    with attach(node.node, node.cookie.encode()) as remote:
        remote.call("beam_probe_workload", "start", [LEAKERS, KEEPERS, IDLE])


@pytest.fixture(scope="module")
def busy(session_nodes) -> LocalNode:
    node = session_nodes.start("25", prefix="bptop")
    _start_workload(node)
    return node


def _connect(node: LocalNode) -> Callable[[], Any]:
    return lambda: attach(node.node, node.cookie.encode(), timeout=20)



def _ours(node: LocalNode) -> tuple[list[str], list[Any]]:
    """The hidden nodes connected to ``node`` but the asker, and the
    processes of ours there: running erl_eval's code (the keeper, its
    sentinel, their workers; the node runs none of its own), or holding
    the list of our processes that the keeper keeps (hibernating)."""
    from beam_probe.erldist.terms import ExportFun

    with attach(node.node, node.cookie.encode(), timeout=10) as remote:
        peers = remote.call("erlang", "nodes", [Atom("hidden")])
        pids = remote.call("erlang", "processes", [])
        infos = remote.call("lists", "zipwith", [
            ExportFun("erlang", "process_info", 2), pids,
            [[Atom("current_function"), Atom("dictionary")]] * len(pids)])
        ours = []
        for pid, info in zip(pids, infos):
            if not isinstance(info, list):
                continue  # exited meanwhile
            fields = dict(info)
            module = fields[Atom("current_function")][0]
            keys = [k for k, _ in fields[Atom("dictionary")]]
            if module in (Atom("erl_eval"), Atom("prim_eval")) or \
                    Atom("$beam_probe_ours") in keys:
                ours.append((str(pid), fields[Atom("current_function")]))
        return ([str(p) for p in peers if str(p) != remote.conn.our_node],
                ours)


def _left_nothing(node: LocalNode, within: float = 2.0) -> None:
    """Within ``within`` seconds: no connection of ours, and no process
    of ours (the keeper, its sentinel, their workers)."""
    deadline = time.monotonic() + within
    while True:
        peers, ours = _ours(node)
        if not peers and not ours:
            return
        assert time.monotonic() < deadline, (peers, ours)
        time.sleep(0.1)


def _json(*args: str, node: LocalNode) -> dict:
    result = run_here(*args, "--format", "json", node=node)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


# -- one frame ---------------------------------------------------------------


def test_one_frame_by_release(nodes, otp):
    """--once: two passes an interval apart; the JSON is the view's shape,
    ranked as the node ranks, counted as proc-count counts; the text has
    the header and the sorted column marked; nothing of ours stays."""
    from beam_probe.probes.results import TopView

    node = nodes.start(otp)
    _start_workload(node)
    view = _json("top", node.node, "--once", "--interval", "0.5", "-N", "12",
                 node=node)
    conforms_to(view, TopView)
    (frame,) = view["frames"]
    assert frame["header"]["otp_release"] == otp
    assert view["down"] == [] and frame["window_s"] > 0.4
    memory = [p["memory"] for p in frame["processes"]]
    assert len(memory) == 12 and memory == sorted(memory, reverse=True)
    assert {p["current_function"] for p in frame["processes"][:LEAKERS]} \
        == {"beam_probe_workload:leaker/0"}
    assert all(isinstance(p["reductions"], int) for p in frame["processes"])
    # Our keeper, sentinel and workers are not the node's.
    assert not any((p["initial_call"] or "").startswith("erl_eval")
                   for p in frame["processes"])
    counted = _json("proc-count", node.node, "memory", "1", node=node)
    assert abs(frame["scanned"] - counted["scanned"]) <= 2
    # The ports are the node's: what a plain call of ours counts, less
    # that call's own connection.
    with attach(node.node, node.cookie.encode()) as remote:
        ports = remote.call("erlang", "system_info", [Atom("port_count")])
    assert frame["header"]["port_count"] == ports - 1
    # The node ranks: the largest binary holder is proc-count's too, and
    # top's figure is proc-count's distinct one (each binary once), not
    # recon's per reference: a process holding 100 references to one
    # 1 MiB binary is 100 MiB to recon, 1 MiB to top.
    with attach(node.node, node.cookie.encode()) as remote:
        shared = str(remote.call("beam_probe_workload", "shared_refs",
                                 [1, 1024 * 1024, 100]))
    ranked = _json("top", node.node, "--once", "--interval", "0.5", "-N",
                   "3", "--sort", "binary_memory", node=node)
    holder = _json("proc-count", node.node, "binary_memory", "1",
                   node=node)["processes"][0]
    first = ranked["frames"][0]["processes"][0]
    assert holder["pid"] == first["pid"] == shared
    assert holder["value"] == 100 * 1024 * 1024
    assert first["binary_memory"] == holder["binary_distinct"] \
        == 1024 * 1024

    text = run_here("top", node.node, "--once", "--interval", "0.5", "-N",
                    "5", "--sort", "message_queue_len", node=node)
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    assert lines[0].startswith(f"{node.node}  OTP {otp}  up ")
    assert any(line.startswith("memory ") for line in lines)
    assert "sorted by message_queue_len" in text.stdout
    assert "MSGQ▼" in text.stdout
    # The keeper with the most unread messages (3 * 4) first.
    heading = next(i for i, line in enumerate(lines) if "MSGQ" in line)
    assert lines[heading + 2].split()[-2] == str(3 * (KEEPERS - 1))
    _left_nothing(node)


def test_a_filter_matches_names_and_initial_calls(busy):
    view = _json("top", busy.node, "--once", "--interval", "0.5",
                 "--filter", "code_serv", node=busy)
    (frame,) = view["frames"]
    assert [p["name"] for p in frame["processes"]] == ["code_server"]
    assert frame["matched"] == 1 and frame["scanned"] > IDLE
    # An initial call matches too: the workload's processes are spawned
    # from funs (erlang:apply/2).
    view = _json("top", busy.node, "--once", "--interval", "0.5", "-N",
                 "5", "--filter", "apply", node=busy)
    assert view["frames"][0]["matched"] >= LEAKERS + KEEPERS + IDLE
    assert {p["initial_call"] for p in view["frames"][0]["processes"]} == {
        "erlang:apply/2"}
    # What frames a name in the term format, or names a process lacks,
    # matches nothing.
    for text in ("undefined", "registered_name", "dictionary", "init_p"):
        view = _json("top", busy.node, "--once", "--interval", "0.5",
                     "--filter", text, node=busy)
        assert view["frames"][0]["matched"] == 0, text
    # Nor the bytes between two names: init_p, then the tag of its arity
    # (a), once matched every proc_lib process.
    view = _json("top", busy.node, "--once", "--interval", "0.5",
                 "--filter", "pa", node=busy)
    assert view["frames"][0]["matched"] < 5, view["frames"][0]


def test_a_filter_typed_during_a_pass_labels_the_next_frame(busy):
    """The view's thread sets the filter while the feed's thread waits on
    a pass: the frame says the filter it was asked with (a CI run showed
    every process under a filter typed mid-pass), and the next refresh
    applies the new one."""
    from beam_probe.probes.top import TopFeed

    feed = TopFeed(_connect(busy), interval=0.5, n=40)
    feed.open()
    asked = feed._request

    def typed_meanwhile(filter_text):
        request = asked(filter_text)
        feed.filter = "code_serv"  # a key pressed once the pass is asked
        return request

    try:
        feed._request = typed_meanwhile
        view = feed.refresh()
        assert view["filter"] == "" and view["frames"][0]["filter"] == ""
        assert len(view["frames"][0]["processes"]) > 1
        feed._request = asked
        view = feed.refresh()
        assert view["filter"] == "code_serv"
        assert [p["name"] for p in view["frames"][0]["processes"]] == [
            "code_server"]
    finally:
        feed.close()


@pytest.mark.parametrize("args, words", [
    (("--interval", "0.1"), ("--interval",)),
    (("-N", "0"), ("-N", "500")),
    (("-N", "501"), ("-N",)),
    (("--filter", "x" * 65), ("filter", "64")),
    (("--filter", "x"), ("filter", "2")),
    (("--filter", "caf\udce9"), ("filter", "UTF-8")),
    (("--sort", "heap"), ("--sort",)),
    (("--jobs", "-1"), ("--jobs",)),
])
def test_bad_options_are_one_line(busy, args, words):
    result = run_here("top", busy.node, "--once", *args, node=busy)
    one_line(result, 2, *words)


def test_once_a_node_gone_between_passes_is_its_error(nodes):
    """--once against a node that dies between its two passes: its error
    and exit code, no frame of stale rows and success."""
    import threading

    node = nodes.start("25")
    threading.Timer(1.0, node.proc.kill).start()
    result = run_here("top", node.node, "--once", "--interval", "3",
                      node=node)
    line = one_line(result)
    assert result.returncode not in (0, 1) and result.stdout == "", line


def test_textual_is_imported_by_the_view_alone(busy):
    """A frame (--once) and every other command start without Textual
    or rich: the view alone pays for them (bench_startup)."""
    code = ("import sys; from beam_probe.cli import invoke; "
            f"invoke(['top', '{busy.node}', '--once', '--interval', '0.5']);"
            f" invoke(['memory', '{busy.node}']); "
            "print(sorted({m.split('.')[0] for m in sys.modules} & "
            "{'textual', 'rich'}))")
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO,
                            env=dict(os.environ, HOME=busy.home),
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "sorted by memory" in result.stdout
    assert result.stdout.splitlines()[-1] == "[]"


def test_a_crash_dump_is_refused(tmp_path):
    dump = tmp_path / "erl_crash.dump"
    dump.write_text("=erl_crash_dump:0.5\nWed Nov 25 00:00:00 2026\n")
    one_line(run_here("top", str(dump), "--once"), 2, "live node")


def test_an_idle_keeper_ends_and_the_next_refresh_starts_another(busy):
    """top paused (or gone quiet with its connection open): the keeper
    ends after its idle time; the next refresh starts a new one, which
    has no window yet."""
    from beam_probe.probes.top import TopFeed

    feed = TopFeed(_connect(busy), interval=0.5, n=5)
    feed.idle = 1.0
    feed.open()
    try:
        feed.refresh()
        first = feed._keepers[busy.node]
        assert feed.refresh()["frames"][0]["window_s"] is not None
        assert _ours(busy)[1], "no keeper of ours seen"
        time.sleep(feed.idle_time() + 0.5)
        peers, ours = _ours(busy)
        assert ours == [] and len(peers) == 1  # the feed's connection
        view = feed.refresh()
        assert view["down"] == [] and view["frames"][0]["window_s"] is None
        assert feed._keepers[busy.node] != first
    finally:
        feed.close()


def test_an_idle_nodes_rates_leave_our_passes_out(busy):
    """Reductions a second on an idle node: its own (~160 a second), not
    our passes' (~500,000 a second at this interval, left in)."""
    from beam_probe.probes.top import TopFeed

    feed = TopFeed(_connect(busy), interval=0.5, n=5)
    feed.open()
    try:
        rates = []
        for _ in range(6):
            rates.append(feed.refresh()["frames"][0]["header"][
                "reductions_per_s"])
            time.sleep(0.5)
    finally:
        feed.close()
    # Left in, our passes were ~500,000 a second here; the machine's
    # other work may wake the node now and then, hence the median.
    import statistics

    assert rates[0] is None and None not in rates[1:], rates
    assert statistics.median(rates[2:]) < 20_000, rates


def test_reductions_are_the_intervals(busy):
    """A busy process ranks first by the reductions of the interval; an
    idle one shows the few our reads cost it; a filter changed leaves
    every window as it was (not a process's whole life)."""
    from beam_probe.probes.top import TopFeed

    feed = TopFeed(_connect(busy), interval=0.5, n=500, sort="reductions")
    feed.open()
    with attach(busy.node, busy.cookie.encode()) as remote:
        churn = remote.call("beam_probe_workload", "churn", [100])
        try:
            feed.filter = "code_serv"
            feed.refresh()
            time.sleep(0.5)
            feed.filter = ""
            view = feed.refresh()
        finally:
            remote.conn.send(churn, Atom("stop"))
            feed.close()
    rows = view["frames"][0]["processes"]
    assert rows[0]["name"] == "bp_churn" and rows[0]["reductions"] > 50_000
    by_name = {r["name"]: r for r in rows if r["name"]}
    # code_server has done tens of thousands since it started.
    assert by_name["code_server"]["reductions"] < 1000, by_name["code_server"]
    idle = [r["reductions"] for r in rows
            if r["current_function"] == "beam_probe_workload:idle/0"]
    assert idle and max(idle) <= 10, idle
    done = [r["reductions"] for r in rows]
    assert done == sorted(done, reverse=True)


def test_rows_new_to_the_top_keep_their_window(busy):
    """The keeper keeps the last pass's reductions compressed, and beside
    them those of the few that ranked best; a row that did not rank last
    time is looked up in the chunks: a process that climbed into the top
    shows the reductions of the interval (not its life), one born since
    the last pass shows its whole life."""
    from beam_probe.probes.top import TopFeed

    feed = TopFeed(_connect(busy), interval=0.5, n=3, sort="binary_memory")
    feed.open()
    with attach(busy.node, busy.cookie.encode()) as remote:
        def step(pid: Any, what: Any) -> None:
            remote.call("beam_probe_workload", "step", [pid, what])

        def reductions(pid: Any) -> int:
            return remote.call("erlang", "process_info",
                               [pid, Atom("reductions")])[1]

        climber = remote.call("beam_probe_workload", "stepper", [])
        born = None
        try:
            # A life of work before the first pass, then nothing held.
            for _ in range(5):
                step(climber, 16 * 2**20)
                step(climber, Atom("drop"))
            lived = reductions(climber)
            first = feed.refresh()["frames"][0]["processes"]
            assert str(climber) not in [r["pid"] for r in first]
            born = remote.call("beam_probe_workload", "stepper", [])
            step(climber, 8 * 2**20)
            step(born, 16 * 2**20)
            rows = feed.refresh()["frames"][0]["processes"]
            by_pid = {r["pid"]: r for r in rows}
            assert [r["pid"] for r in rows[:2]] == [str(born), str(climber)]
            now = {pid: reductions(pid) for pid in (climber, born)}
        finally:
            for pid in (climber, born):
                if pid is not None:
                    remote.call("erlang", "exit", [pid, Atom("kill")])
            feed.close()
    window = by_pid[str(climber)]["reductions"]
    assert 0 < window < now[climber] - lived + 50 < lived, (window, lived)
    # All its life was in the window; our reads since cost it a few.
    whole = by_pid[str(born)]["reductions"]
    assert now[born] - 50 <= whole <= now[born], (whole, now[born])


def test_a_window_by_reductions_outlives_churn(busy):
    """Ranked by reductions, the last pass's figures are found by where
    the walk met each process, chunk by chunk: with processes ended
    before the others in the walk and others born since, every process
    that lived through both passes still shows its window (a few
    reductions, for an idle one), never its life."""
    from beam_probe.probes.top import TopFeed

    feed = TopFeed(_connect(busy), interval=0.5, n=500, sort="reductions")
    feed.open()
    with attach(busy.node, busy.cookie.encode(), timeout=60) as remote:
        def spawn(count: int) -> list[Any]:
            return [remote.call("beam_probe_workload", "stepper", [])
                    for _ in range(count)]

        # Each does ~5,000 reductions of work, then idles.
        worked = spawn(2400)
        born: list[Any] = []
        try:
            for pid in worked:
                remote.call("beam_probe_workload", "step", [pid, 8 * 65536])
                remote.call("beam_probe_workload", "step", [pid, Atom("drop")])
            lived = remote.call("erlang", "process_info",
                                [worked[-1], Atom("reductions")])[1]
            assert lived > 1000, lived
            feed.refresh()
            for pid in worked[:1200]:
                remote.call("erlang", "exit", [pid, Atom("kill")])
            born = spawn(1200)
            rows = feed.refresh()["frames"][0]["processes"]
        finally:
            for pid in worked + born:
                remote.call("erlang", "exit", [pid, Atom("kill")])
            feed.close()
    survivors = {str(pid) for pid in worked[1200:]}
    windows = [r["reductions"] for r in rows if r["pid"] in survivors]
    assert len(rows) == 500 and max(windows, default=0) < 200, windows
    done = [r["reductions"] for r in rows]
    assert done == sorted(done, reverse=True)


def test_a_frozen_node_is_down_in_seconds_and_back_after(nodes):
    """SIGSTOP: the refresh waits a few passes' worth, a short call
    finds the node silent, and the node is down, its rows kept; SIGCONT,
    and the next refresh dials again."""
    from beam_probe.probes.top import TopFeed

    node = nodes.start("25")
    _start_workload(node)
    feed = TopFeed(_connect(node), interval=0.5, n=5)
    feed.open()
    try:
        feed.refresh()
        feed.refresh()
        os.kill(node.proc.pid, signal.SIGSTOP)
        try:
            started = time.monotonic()
            view = feed.refresh()
            took = time.monotonic() - started
        finally:
            os.kill(node.proc.pid, signal.SIGCONT)
        assert [d["node"] for d in view["down"]] == [node.node]
        assert "2 s" in view["down"][0]["error"] and took < 8, (took, view)
        assert len(view["frames"][0]["processes"]) == 5  # kept
        view = feed.refresh()
        assert view["down"] == [] and view["frames"][0]["window_s"] is None
    finally:
        feed.close()


# -- the view, under Textual's Pilot ---------------------------------------


async def _until(pilot: Any, condition: Callable[[], bool],
                 timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "the view never got there"
        await pilot.pause(0.05)


def _text(app: Any, selector: str) -> str:
    from textual.widgets import Static

    return str(app.query_one(selector, Static).content)


def _screen_text(app: Any) -> str:
    return str(app.screen.query_one("#body").content)


def _app(node: LocalNode, size=(130, 40), **kw: Any):
    from beam_probe.live.app import TopApp
    from beam_probe.probes.top import TopFeed
    from beam_probe.text.syntax import ERLANG

    feed = TopFeed(_connect(node), interval=kw.pop("interval", 0.5), **kw)
    feed.open()
    return feed, TopApp(feed, ERLANG, lambda name: attach(
        name, node.cookie.encode(), timeout=20))


def test_keys_sort_open_filter_pause(nodes, otp):
    from textual.widgets import DataTable

    from beam_probe.live.app import FILTER_SETTLE

    from beam_probe.text import top as words

    busy = nodes.start(otp)
    _start_workload(busy)
    feed, app = _app(busy)

    def ranked(key: str) -> list[int]:
        return [row[key] for row in words.rows(app.view)]

    async def script() -> None:
        async with app.run_test(size=(130, 40)) as pilot:
            await _until(pilot, lambda: app.drawn >= 1)
            assert busy.node in _text(app, "#header")
            table = app.query_one("#processes", DataTable)
            assert table.row_count >= 20 and feed.n == 40 - 9
            assert ranked("memory") == sorted(ranked("memory"), reverse=True)
            for key, column in (("b", "binary_memory"), ("l",
                                "message_queue_len"), ("r", "reductions"),
                                ("m", "memory")):
                await pilot.press(key)
                await _until(pilot, lambda: app.view["sort"] == column
                             and app.view["frames"][0]["sort"] == column)
                values = [v or 0 for v in ranked(column)]
                assert values == sorted(values, reverse=True), column
                heading = [str(c.label) for c in table.columns.values()]
                assert words.TITLES[column] + "▼" in heading
            # Open the first process: its proc-info and what it holds.
            first = words.rows(app.view)[0]["pid"]
            table.focus()
            table.move_cursor(row=0)
            await pilot.press("enter")
            await _until(pilot, lambda: app.screen is not app.screen_stack[0]
                         and "loading" not in _screen_text(app))
            opened = _screen_text(app)
            assert first in opened and "current_function" in opened
            assert "what it holds: " in opened  # inspect's
            await pilot.press("escape")
            await _until(pilot, lambda: len(app.screen_stack) == 1)
            # A filter applies as it is typed (issue 38): no Enter. One
            # character is not applied (it would match nearly every
            # process); two are.
            await pilot.press("slash", "c")
            await pilot.pause(FILTER_SETTLE * 3)
            assert feed.filter == "" and app.view["filter"] == ""
            await pilot.press(*"ode_serv")
            await _until(pilot, lambda: app.view["filter"] == "code_serv")
            assert [r["name"] for r in words.rows(app.view)] == [
                "code_server"]
            assert app.query_one("#filter").display   # still typing
            await pilot.press("backspace", "backspace")
            await _until(pilot, lambda: app.view["filter"] == "code_se")
            await pilot.press("escape")
            await _until(pilot, lambda: app.view["filter"] == "" and
                         len(words.rows(app.view)) > 1)
            # Enter applies at once and closes the field; Escape clears.
            await pilot.press("slash", *"code_serv", "enter")
            await _until(pilot, lambda: app.view["filter"] == "code_serv")
            assert [r["name"] for r in words.rows(app.view)] == [
                "code_server"]
            await pilot.press("escape")
            await _until(pilot, lambda: app.view["filter"] == "" and
                         len(words.rows(app.view)) > 1)
            # Paused: the header says so, and nothing more is asked.
            await pilot.press("p")
            await _until(pilot, lambda: "PAUSED" in _text(app, "#header"))
            await pilot.pause(0.3)
            frozen = app.drawn
            await pilot.pause(1.2)
            assert app.drawn == frozen
            await pilot.press("p")
            await _until(pilot, lambda: app.drawn > frozen)
            for key, word in (("question_mark", "sort by memory"),
                              ("e", "ac_tab"), ("a", "binary_alloc")):
                await pilot.press(key)
                await _until(pilot, lambda: len(app.screen_stack) == 2 and
                             "loading" not in _screen_text(app))
                assert word in _screen_text(app), key
                await pilot.press("escape")
                await _until(pilot, lambda: len(app.screen_stack) == 1)
            await pilot.press("q")

    try:
        asyncio.run(script())
    finally:
        feed.close()
    _left_nothing(busy)


def test_a_terminal_too_small_says_so(busy):
    feed, app = _app(busy)

    async def script() -> None:
        async with app.run_test(size=(50, 10)) as pilot:
            await pilot.pause(0.2)
            assert "terminal too small (50x10)" in _text(app, "#small")
            assert not app.query_one("#processes").display
            await pilot.resize_terminal(120, 30)
            await _until(pilot, lambda: app.query_one("#processes").display
                         and app.drawn >= 1)
            assert not app.query_one("#small").display
            await pilot.press("q")

    try:
        asyncio.run(script())
    finally:
        feed.close()


def test_a_node_that_dies_keeps_its_rows_and_returns(beam_dir):
    """Killed under the view: the header says since when, the rows stay;
    the same node started again is found on a new connection."""
    name, cookie = unique_name("bptopdie"), f"c{uuid.uuid4().hex[:8]}"
    started = [LocalNode(name, cookie=cookie, code_paths=(beam_dir,)).start()]
    node = started[0]
    _start_workload(node)
    feed, app = _app(node)
    try:
        async def script() -> None:
            async with app.run_test(size=(130, 40)) as pilot:
                await _until(pilot, lambda: app.drawn >= 1)
                rows = app.query_one("#processes").row_count
                node.proc.kill()
                node.proc.wait(10)
                await _until(pilot, lambda: bool(app.view["down"]))
                assert "DOWN since" in _text(app, "#down")
                assert app.query_one("#processes").row_count == rows
                again = LocalNode(name, cookie=cookie,
                                  code_paths=(beam_dir,)).start()
                started.append(again)
                await _until(pilot, lambda: not app.view["down"],
                             timeout=30)
                assert _text(app, "#down") == ""
                assert app.view["frames"][0]["header"]["uptime_s"] < 30
                await pilot.press("q")

        asyncio.run(script())
    finally:
        feed.close()
        for each in started:
            each.stop()


# -- a cluster -----------------------------------------------------------------


@pytest.fixture(scope="module")
def trio(session_nodes):
    from test_cluster import _three

    entry, before, after = _three(session_nodes, "t")
    _start_workload(after)
    return entry, before, after


def test_a_cluster_has_a_node_column_and_a_picker(trio):
    from beam_probe.text import top as words

    entry, before, after = trio
    view = _json("top", entry.node, "--cluster", "--once", "--interval",
                 "0.5", node=entry)
    assert [f["node"] for f in view["frames"]] == [entry.node, before.node,
                                                   after.node]
    text = run_here("top", entry.node, "--cluster", "--once", "--interval",
                    "0.5", "-N", "8", node=entry).stdout
    assert "NODE" in text and after.node in text
    # The largest heaps are the workload's, on the node after.
    heading = next(i for i, line in enumerate(text.splitlines())
                   if line.startswith("PID"))
    assert text.splitlines()[heading + 2].split()[1] == after.node

    feed, app = _app(entry, cluster_view=True)

    async def script() -> None:
        async with app.run_test(size=(150, 40)) as pilot:
            await _until(pilot, lambda: app.drawn >= 1 and
                         len(app.view["frames"]) == 3)
            assert "NODE" in words.columns(app.view)
            await pilot.press("n")
            await _until(pilot, lambda: len(app.screen_stack) == 2)
            for _ in range(feed.members.index(after.node) + 1):
                await pilot.press("down")
            await pilot.press("enter")
            await _until(pilot, lambda: app.view["focus"] == after.node
                         and [f["node"] for f in app.view["frames"]]
                         == [after.node])
            assert "NODE" not in words.columns(app.view)
            assert after.node in _text(app, "#header")
            # A member's process opens over a connection to it.
            await pilot.press("enter")
            await _until(pilot, lambda: len(app.screen_stack) == 2 and
                         "loading" not in _screen_text(app))
            assert "leaker" in _screen_text(app)
            await pilot.press("escape", "q")

    try:
        asyncio.run(script())
    finally:
        feed.close()
    for node in trio:  # every member's keeper ended with the connection
        _left_nothing(node)


# -- a real terminal --------------------------------------------------------


class Tmux:
    """A tmux server of our own (its own socket, in a folder of its own),
    running one command in a window of a fixed size; stopped with
    kill-server, and its folder removed."""

    def __init__(self, command: list[str], env: dict[str, str],
                 size: tuple[int, int] = (110, 32)) -> None:
        import tempfile

        self.folder = tempfile.mkdtemp(prefix="bpt-tmux-")
        self.socket = os.path.join(self.folder, "socket")
        self.run("new-session", "-d", "-s", "top", "-x", str(size[0]),
                 "-y", str(size[1]), "env", *(f"{k}={v}" for k, v in
                                               env.items()), *command)
        self.pid = int(self.run("display-message", "-p", "-t", "top",
                                "#{pane_pid}").strip())

    def run(self, *args: str) -> str:
        return subprocess.run(["tmux", "-S", self.socket, *args],
                              capture_output=True, text=True, check=True,
                              timeout=10).stdout

    def screen(self, escapes: bool = False) -> str:
        return self.run("capture-pane", "-p", *(["-e"] if escapes else []),
                        "-t", "top")

    def wait_for(self, text: str, timeout: float = 30) -> str:
        deadline = time.monotonic() + timeout
        while True:
            shown = self.screen()
            if text in shown:
                return shown
            assert time.monotonic() < deadline, shown
            time.sleep(0.1)

    def close(self) -> None:
        subprocess.run(["tmux", "-S", self.socket, "kill-server"],
                       capture_output=True, timeout=10)
        shutil.rmtree(self.folder, ignore_errors=True)


def _colours(screen: str) -> set[int]:
    """The colour parameters of the SGR sequences on a screen: 30-37,
    38 (256 or true colour), 40-47, 48, 90-97, 100-107."""
    import re

    found = set()
    for params in re.findall(r"\x1b\[([0-9;]*)m", screen):
        for word in params.split(";"):
            if word.isdigit() and (30 <= int(word) <= 38 or
                                   40 <= int(word) <= 48 or
                                   90 <= int(word) <= 97 or
                                   100 <= int(word) <= 107):
                found.add(int(word))
                break
    return found


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _top_in_tmux(node: LocalNode) -> Tmux:
    if shutil.which("tmux") is None:
        pytest.fail("tmux is not installed (.ci/setup installs it)")
    env = {"HOME": node.home, "PYTHONPATH": REPO, "NO_COLOR": "1",
           "TERM": "xterm-256color", "PATH": os.environ["PATH"]}
    return Tmux([sys.executable, "-m", "beam_probe", "top", node.node,
                 "--interval", "1"], env)


def test_in_a_real_terminal(busy, tmp_path):
    """tmux: the view drawn, a key, a capture, q; NO_COLOR draws no
    colour; the node is left as it was."""
    tmux = _top_in_tmux(busy)
    try:
        shown = tmux.wait_for("sorted by memory")
        assert busy.node in shown and "MEMORY▼" in shown
        tmux.run("send-keys", "-t", "top", "b")
        shown = tmux.wait_for("sorted by binary_memory")
        assert "BINARY▼" in shown
        (tmp_path / "top.txt").write_text(shown)
        coloured = tmux.screen(escapes=True)
        # NO_COLOR: no foreground or background colour is ever set (the
        # defaults, 39 and 49, and bold or reverse may be).
        assert _colours(coloured) == set(), coloured[:400]
        tmux.run("send-keys", "-t", "top", "q")
        deadline = time.monotonic() + 10
        while _alive(tmux.pid):
            assert time.monotonic() < deadline, "top did not quit on q"
            time.sleep(0.1)
    finally:
        tmux.close()
    _left_nothing(busy)


def test_closing_the_terminal_leaves_nothing_on_the_node(busy):
    """The terminal goes (its window closed: SIGHUP): top ends, and
    nothing of ours stays."""
    tmux = _top_in_tmux(busy)
    try:
        tmux.wait_for("sorted by memory")
        pid = tmux.pid
        tmux.close()  # the server and its window go: SIGHUP
        deadline = time.monotonic() + 10
        while _alive(pid):
            assert time.monotonic() < deadline, "top outlived its terminal"
            time.sleep(0.1)
        _left_nothing(busy)
    finally:
        tmux.close()


def test_the_header_says_when_the_interval_stretches(busy):
    """A pass over a quarter of the interval: four passes, said."""
    from beam_probe.probes.top import TopFeed
    from beam_probe.text import top as words

    feed = TopFeed(_connect(busy), interval=2.0, n=5)
    feed.open()
    try:
        view = feed.refresh()
        assert view["stretched"] is None and feed.next_wait() == 2.0
        # As a million processes on two cores would take it.
        feed.frames[busy.node]["pass_ms"] = 1800.0
        view = feed.view()
        assert view["stretched"] == 7.2 and feed.next_wait() == 7.2
        assert "refresh every 7.2 s, stretched from 2 s" in \
            words.header_lines(view)[-1]
    finally:
        feed.close()


def test_kill_9_leaves_nothing_on_the_node(busy):
    tmux = _top_in_tmux(busy)
    try:
        tmux.wait_for("sorted by memory")
        os.kill(tmux.pid, signal.SIGKILL)
        _left_nothing(busy)
    finally:
        tmux.close()


# -- names no table should trust (issue 37, 15) ------------------------------

LONG = "bp_long_" + "x" * 192  # 200 characters
FORGED = "bp_nl\n<0.999.0>  forged_row  1 GiB"


def _named_with_mail(node: LocalNode, name: str, messages: int) -> Any:
    """A process registered as ``name`` with ``messages`` unread: it tops
    a ranking by mailbox (the node's own processes have none)."""
    with attach(node.node, node.cookie.encode()) as remote:
        pid = remote.call("beam_probe_workload", "named", [Atom(name)])
        for i in range(messages):
            remote.call("erlang", "send", [pid, i])
    return pid


def test_names_are_one_line_and_the_name_column_is_capped(nodes, otp):
    """A 200-character registered name no longer hides the figures, and a
    newline in one is written as Erlang writes the atom, on its row: the
    text has as many rows as processes, each with all its columns."""
    from beam_probe.text.top import NAME_WIDTH

    node = nodes.start(otp)
    _named_with_mail(node, LONG, 9)
    _named_with_mail(node, FORGED, 8)
    text = run_here("top", node.node, "--once", "--interval", "0.5", "-N",
                    "4", "--sort", "message_queue_len", node=node)
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    heading = next(i for i, line in enumerate(lines) if "MSGQ▼" in line)
    table = lines[heading:]
    assert len(table) == 2 + 4, text.stdout  # heading, rule, four rows
    assert "forged_row" not in " ".join(
        line for line in table if "bp_nl" not in line)
    long_row, nl_row = table[2], table[3]
    assert long_row.split()[1] == LONG[:NAME_WIDTH - 1] + "…"
    assert "'bp_nl\\n<0.999.0>  forged_row  1 GiB'"[:NAME_WIDTH - 1] \
        in nl_row
    # Every figure is on its row, in its column, under a heading that
    # fits a terminal of 120 columns.
    assert len(table[0]) < 120, table[0]
    for row in (long_row, nl_row):
        assert row.split()[-2] in ("9", "8") and "B" in row, row
    # JSON keeps the names as they are.
    view = _json("top", node.node, "--once", "--interval", "0.5", "-N", "2",
                 "--sort", "message_queue_len", node=node)
    names = [p["name"] for p in view["frames"][0]["processes"]]
    assert names == [LONG, FORGED]
    # Every text table escapes a cell's line breaks (text/tables.py):
    # proc-count's rows, whole and streamed (--all).
    for args in (("2",), ("--all",)):
        counted = run_here("proc-count", node.node, "message_queue_len",
                           *args, node=node)
        assert counted.returncode == 0, counted.stderr
        rows = [line for line in counted.stdout.splitlines()
                if "<0." in line]
        assert not any(line.lstrip().startswith("<0.999.0>")
                       for line in rows), counted.stdout
        assert any("bp_nl\\n<0.999.0>  forged_row  1 GiB" in line
                   for line in rows), counted.stdout


def test_the_view_forgets_a_long_name_once_it_is_gone(nodes):
    """In the view, the NAME column is as wide as the names shown now:
    a DataTable's columns only widen, and a 200-character name kept every
    figure off the screen after its process exited."""
    from textual.widgets import DataTable

    from beam_probe.text.top import NAME_WIDTH

    node = nodes.start("25")
    long_pid = _named_with_mail(node, LONG, 9)
    feed, app = _app(node, sort="message_queue_len")

    def name_width() -> int:
        table = app.query_one("#processes", DataTable)
        (column,) = [c for c in table.columns.values()
                     if str(c.label) == "NAME"]
        return column.content_width

    def names() -> list[Any]:
        return [row["name"] for row in words.rows(app.view)]

    from beam_probe.text import top as words

    def widest_shown() -> int:
        return max([len("NAME")] + [len(words.name_cell(row, app.syntax))
                                    for row in words.rows(app.view)])

    async def script() -> None:
        async with app.run_test(size=(130, 40)) as pilot:
            # A DataTable sizes its columns when it is next idle, not as
            # rows are added: wait for the width, never assume it is
            # there with the frame (a loaded machine saw 4 for a while).
            await _until(pilot, lambda: app.drawn >= 1 and LONG in names()
                         and name_width() == NAME_WIDTH)
            with attach(node.node, node.cookie.encode()) as remote:
                remote.call("erlang", "exit", [long_pid, Atom("kill")])
            await _until(pilot, lambda: LONG not in names())
            drawn = app.drawn
            await _until(pilot, lambda: app.drawn > drawn
                         and name_width() == widest_shown())
            assert name_width() < NAME_WIDTH
            await pilot.press("q")

    try:
        asyncio.run(script())
    finally:
        feed.close()


# -- the view without its extra (issue 37, 16) -------------------------------

@pytest.mark.parametrize("missing", ["rich", "textual"])
def test_the_view_without_its_extra_names_the_extra(busy, monkeypatch,
                                                    missing):
    """On a terminal, top draws with Textual (and rich, which Textual
    brings): without them, one line naming the extra to install, exit 2
    (as serve says of its own), not "internal error: ModuleNotFoundError".
    Simulated in this process: the modules made unimportable, the view's
    module forgotten so that it is imported again."""
    import io

    from beam_probe.cli import invoke
    from beam_probe.cli.environment import Environment

    for name in list(sys.modules):
        if name == missing or name.startswith(missing + "."):
            monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setitem(sys.modules, missing, None)
    monkeypatch.delitem(sys.modules, "beam_probe.live.app", raising=False)
    out, err = io.StringIO(), io.StringIO()
    environment = Environment(
        stdout=out, stderr=err, stdout_isatty=True, stderr_isatty=False,
        stdin_isatty=True, env=dict(os.environ, HOME=busy.home,
                                    TERM="xterm-256color"))
    code = invoke(["top", busy.node, "--interval", "0.5"], environment)
    line = one_line((code, out.getvalue(), err.getvalue()), 2,
                    "pip install 'beam-probe[top]'", "--once needs nothing",
                    missing)
    assert "internal error" not in line and out.getvalue() == "", line
    _left_nothing(busy, within=10)
