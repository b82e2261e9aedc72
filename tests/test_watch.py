"""watch and plot: the leak rule on real nodes with leaks of known rate,
sawtooths that must not be taken for leaks, the node going away and
coming back, the live view through a pseudo-terminal, and plot's charts.
The pure parts (the rule, the floor, bounded series, the chart) are
tested with plain values."""

from __future__ import annotations

import json
import os
import re
import struct
import time

import pytest

from beam_probe.erldist.terms import Atom
from beam_probe.probes.trend import (NOISE_BYTES, Floor, LeakRule, Point, Series,
                              rising)
from beam_probe.text.chart import line_chart
from beam_probe.probes import results
from conftest import FakeClock, interrupt_cli, run_here
from shapes import conforms_to

MB = 1024 * 1024


def _watch(node, *args, timeout=120, clock=None):
    return run_here("watch", node.node, "--cookie", node.cookie, *args,
                    timeout=timeout, clock=clock)


class Stepping(FakeClock):
    """A fake clock whose every sleep moves the node's memory as the
    workload would have in that time: the watch runs as fast as its round
    trips, and what it sees is exact."""

    def __init__(self, remote, moves):
        super().__init__()
        self.stepper = remote.call("beam_probe_workload", "stepper", [])
        self.remote, self.moves, self.sleeps = remote, moves, 0

    def sleep(self, seconds):
        super().sleep(seconds)
        move = self.moves(self.sleeps, seconds)
        self.sleeps += 1
        held = self.remote.call("beam_probe_workload", "step",
                                [self.stepper, move])
        assert isinstance(held, int), held


def growing(rate):
    """rate bytes a second, in whole 64 KiB binaries."""
    return lambda i, seconds: int(rate * seconds) // 65536 * 65536


def _lines(stdout):
    """The samples, and the summary line."""
    items = [json.loads(line) for line in stdout.splitlines() if line]
    assert "summary" in items[-1], items[-1]
    return items[:-1], items[-1]["summary"]


# --- the pure parts ---------------------------------------------------------

def test_rising_needs_every_step_up_and_more_than_noise():
    up = [Point(t, 100 * MB + t * MB) for t in range(6)]
    assert rising("binary", up, 5).per_hour == pytest.approx(MB * 3600)
    assert rising("binary", up, 6) is None  # not enough points
    flat_step = up[:3] + [Point(3, up[2].value)] + up[4:]
    assert rising("binary", flat_step, 5) is None
    creeping = [Point(t, 100 * MB + t * 1000) for t in range(6)]
    assert rising("binary", creeping, 5, noise=NOISE_BYTES) is None


def test_floor_of_a_sawtooth_stays_flat_and_a_leak_lifts_it():
    saw, leak = Floor(4), Floor(4)
    saw_floors = [saw.add(10 + (i % 4) * 5) for i in range(20)]
    leak_floors = [leak.add(10 + i) for i in range(20)]
    assert set(saw_floors[4:]) == {10}
    assert leak_floors[-5:] == [22, 23, 24, 25, 26]  # 3 behind


def test_leak_rule_fires_per_category_and_not_across_a_gap():
    rule = LeakRule(rises=3)
    for t in range(3):
        rule.add(t, {"binary": 10 * MB * (t + 1), "ets": 5 * MB})
    rule.gap()
    assert rule.add(3, {"binary": 40 * MB, "ets": 5 * MB}) == []
    for t in range(4, 7):
        found = rule.add(t, {"binary": 10 * MB * (t + 1), "ets": 5 * MB})
    assert [r.category for r in found] == ["binary"]
    assert set(rule.fired) == {"binary"}


def test_series_memory_is_bounded_however_long_the_run():
    series = Series(capacity=64)
    for i in range(100_000):
        series.add(float(i), None if 500 <= i < 510 else float(i))
    points = list(series)
    assert len(points) <= 64
    assert points[0][0] < 2048 and points[-1][0] == 99_999
    assert any(value is None for _, value in points)  # the gap survives


def test_chart_fits_its_box_and_breaks_at_gaps():
    points = [(float(i), float(i % 7) if i != 20 else None)
              for i in range(40)]
    lines = line_chart([("a", points), ("b", [(0.0, 1.0), (39.0, 6.0)])],
                       60, 12)
    assert len(lines) == 12
    assert all(len(line) <= 60 for line in lines)
    assert any(0x2800 < ord(c) <= 0x28FF for c in "".join(lines))
    assert "a" in lines[-1] and "b" in lines[-1]
    assert line_chart([("a", [])], 60, 12) == ["(no data yet)"]


# --- real nodes -------------------------------------------------------------

@pytest.mark.parametrize("gc", ["holders", "none"])
def test_a_steady_leak_is_reported_with_its_rate(nodes, otp, gc):
    node = nodes.start(otp)
    rate = 4 * MB  # bytes a second
    with_floor = ["--floor", "2"] if gc == "none" else []
    from beam_probe.node.remote import attach

    with attach(node.node, node.cookie.encode()) as r:
        result = _watch(node, "--interval", "0.5", "--count", "9",
                        "--gc", gc, "--fail-on-leak", *with_floor,
                        clock=Stepping(r, growing(rate)))
    assert result.returncode == 12, result.stderr  # --fail-on-leak
    samples, summary = _lines(result.stdout)
    assert len(samples) == 9
    leaks = {leak["category"]: leak for leak in summary["leaks"]}
    assert "binary" in leaks, summary
    assert leaks["binary"]["per_hour"] == pytest.approx(rate * 3600,
                                                        rel=0.10)
    # Four seconds say nothing of an hour but through a rise's steady
    # steps: a category's first-to-last rate waits for a minute's span.
    assert summary["categories"]["binary"]["per_hour"] is None
    assert summary["judged"] is True and summary["unconfirmed"] == []
    fired = [s for s in samples if "leaks" in s]
    assert fired and all(s["gc"] == gc for s in samples)
    assert ("floor" in samples[0]) == (gc == "none")


def test_a_short_run_without_gc_is_not_judged(nodes, otp):
    """Ten samples of binary rising 2 MB each, no forced GC: the floors
    cannot judge before sample 17 (--floor 12 + 5 rises). The run says so,
    names what only rose, and --fail-on-leak exits 13, not 0."""
    node = nodes.start(otp)
    from beam_probe.node.remote import attach

    with attach(node.node, node.cookie.encode()) as r:
        result = _watch(node, "--interval", "0.5", "--count", "10",
                        "--fail-on-leak", clock=Stepping(r, growing(4 * MB)))
        text = _watch(node, "--interval", "0.5", "--count", "8",
                      "--format", "table", clock=Stepping(r, growing(4 * MB)))
    assert result.returncode == 13, result.stderr
    _samples, summary = _lines(result.stdout)
    assert summary["leaks"] == [] and summary["judged"] is False
    assert summary["to_judge"] == 17 - 10
    assert "binary" in [u["category"] for u in summary["unconfirmed"]]
    assert all(stats["per_hour"] is None
               for stats in summary["categories"].values())
    # Piped, --format table is a line of text a sample, then the summary.
    lines = text.stdout.splitlines()
    assert text.returncode == 0, text.stderr
    assert all(" total " in line for line in lines[:8])
    assert "not judged yet: 9 more samples, or --gc holders" in text.stdout
    assert "rising, not yet confirmed: binary +" in text.stdout
    assert "/h" not in text.stdout


def test_a_sawtooth_is_not_a_leak(nodes, otp):
    node = nodes.start(otp)
    from beam_probe.node.remote import attach

    # Three steps up of 2 MiB, then all dropped and collected, over and
    # over: the floor over 6 samples stays where it was.
    with attach(node.node, node.cookie.encode()) as r:
        saw = Stepping(r, lambda i, _s: Atom("drop") if i % 4 == 3
                       else 2 * MB)
        result = _watch(node, "--interval", "0.25", "--count", "20",
                        "--floor", "6", clock=saw)
    assert result.returncode == 0, result.stderr
    samples, summary = _lines(result.stdout)
    binary = [s["binary"] for s in samples]
    assert max(binary) - min(binary) > 4 * MB  # it did saw
    assert summary["leaks"] == []
    assert all("leaks" not in s for s in samples)


class Counting(FakeClock):
    """A fake clock whose every sleep moves the node's process count by
    what ``moves`` says (idle processes started or ended), so that each
    sample sees an exact count."""

    def __init__(self, remote, moves):
        super().__init__()
        self.counter = remote.call("beam_probe_steady", "counter", [])
        self.remote, self.moves, self.sleeps, self.held = remote, moves, 0, 0

    def sleep(self, seconds):
        super().sleep(seconds)
        move = self.moves(self.sleeps, self.held)
        self.sleeps += 1
        if move:
            self.held = self.remote.call("beam_probe_steady", "move",
                                         [self.counter, move])
            assert isinstance(self.held, int), self.held


def test_a_count_rising_every_other_sample_is_a_trend_leak(nodes, otp):
    """ejabberd's slow leak in steps, watched as its operator did
    (--interval 2, no --gc): one process more every other sample. Five
    rises in a row never happen; the trend rule names it, and says so."""
    from beam_probe.node.remote import attach
    from beam_probe.text.watch import summary_text

    node = nodes.start(otp)
    with attach(node.node, node.cookie.encode()) as r:
        result = _watch(node, "--interval", "2", "--count", "50",
                        "--fail-on-leak",
                        clock=Counting(r, lambda i, _held: i % 2))
    assert result.returncode == 12, result.stderr
    samples, summary = _lines(result.stdout)
    counts = [s["process_count"] for s in samples]
    # It did step, every other sample: 24 more, give or take one process
    # of the node's own that came or went meanwhile (seen once on OTP 27:
    # 23).
    assert abs(counts[-1] - counts[0] - 24) <= 1, counts
    # Never five rises in a row: the rule that passed it before.
    assert not any(counts[i] < counts[i + 1] < counts[i + 2]
                   < counts[i + 3] < counts[i + 4] < counts[i + 5]
                   for i in range(len(counts) - 5))
    leaks = summary["leaks"]
    assert [(leak["category"], leak["rule"]) for leak in leaks] == \
        [("process_count", "trend")], leaks
    trend = leaks[0]
    # One every 4 s is 900 an hour, whatever the window.
    assert trend["per_hour"] == pytest.approx(900, rel=0.15)
    assert trend["z"] >= 3.09 and trend["samples"] >= 24
    fired = [s for s in samples if "leaks" in s]
    assert fired and fired[0]["leaks"][0]["rule"] == "trend"
    # The JSON of a leak of either rule is the declared type's.
    conforms_to(summary, results.WatchSummary)
    conforms_to(fired[0], results.Sample)
    text = summary_text(summary)
    assert "leak suspected: process count +" in text
    assert "(trend: +" in text and "/h, Mann-Kendall z " in text


def test_a_churning_steady_count_is_no_leak(nodes, otp):
    """The same node, its count up and down at random between 0 and 8
    more processes, 60 samples: judged, and no leak (exit 0)."""
    import random

    from beam_probe.node.remote import attach

    node = nodes.start(otp)
    rng = random.Random(27)
    with attach(node.node, node.cookie.encode()) as r:
        result = _watch(node, "--interval", "2", "--count", "60",
                        "--fail-on-leak",
                        clock=Counting(r, lambda _i, held:
                                       rng.randint(0, 8) - held))
    assert result.returncode == 0, result.stderr
    samples, summary = _lines(result.stdout)
    counts = [s["process_count"] for s in samples]
    assert max(counts) - min(counts) >= 6  # it did churn
    assert summary["judged"] is True and summary["leaks"] == []
    assert all("leaks" not in s for s in samples)


def test_gc_holders_brings_an_idle_binary_leak_to_its_floor(nodes, otp):
    node = nodes.start(otp)
    from beam_probe.node.remote import attach

    with attach(node.node, node.cookie.encode()) as r:
        workload = r.call("beam_probe_workload", "start", [20, 0, 0])
        r.call("beam_probe_workload", "refill", [workload[0]])
        # 20 leakers drop 100 + 7 * I binaries of 1 KiB: about 3.5 MB.
        planted = sum(100 + 7 * i for i in range(1, 21)) * 1024
        before = dict(r.call("erlang", "memory"))[Atom("binary")]
        result = _watch(node, "--interval", "0.3", "--count", "2",
                        "--gc", "holders")
    assert result.returncode == 0, result.stderr
    samples, _ = _lines(result.stdout)
    assert samples[0]["collected"] >= 20
    assert samples[0]["binary"] < before - 0.9 * planted


@pytest.mark.slow
def test_node_gone_and_back_is_a_gap_then_a_reconnect(nodes):
    node = nodes.start("25")
    import subprocess
    import sys

    env = dict(os.environ, BEAM_PROBE_COOKIE=node.cookie)
    proc = subprocess.Popen(
        [sys.executable, "-m", "beam_probe", "watch", node.node,
         "--interval", "0.3", "--duration", "12"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(2.0)
        node.stop()
        time.sleep(1.5)
        node.start()
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert "Traceback" not in err
    samples, summary = _lines(out)
    kinds = ["down" if s.get("down") else "up" for s in samples]
    first_down, last_down = kinds.index("down"), len(kinds) - 1 - \
        kinds[::-1].index("down")
    assert "up" in kinds[:first_down] and "up" in kinds[last_down:]
    down = samples[first_down]
    assert set(down) == {"time", "epoch", "node", "down", "error"}
    assert summary["down_samples"] == kinds.count("down")
    # The restarted node's counters began again: no negative rates.
    assert all((s.get("gcs_per_s") or 0) >= 0 for s in samples)


def test_an_outage_is_one_down_sample_per_interval():
    """A node that takes 3.5 intervals to fail (a connect waiting out its
    timeout) is down in every interval, not once per failure."""
    from beam_probe.errors import TimedOut
    from beam_probe.probes.watch import Watch

    now = [1_000_000.0]

    class Unreachable:
        node = "app@db1"

        def ask(self, *args, **kwargs):
            now[0] += 3.5
            raise TimedOut("timed out connecting to db1:4369")

        def close(self):
            pass

    def sleep(seconds):
        now[0] += seconds

    watch = Watch(Unreachable, interval=1.0, count=8,
                  clock=lambda: now[0], sleep=sleep)
    samples = list(watch.samples())
    assert [s.get("down") for s in samples] == [True] * 8
    assert [s["epoch"] - 1_000_000 for s in samples] == list(range(8))
    assert all("timed out" in s["error"] for s in samples)
    assert watch.summary()["down_samples"] == 8


@pytest.mark.slow
def test_ctrl_c_is_a_normal_end_with_a_summary(target):
    code, out, err = interrupt_cli("watch", target.node, "--interval", "0.2",
                                   after=2.5, cookie=target.cookie)
    assert code == 0, err
    samples, summary = _lines(out)
    assert samples and summary["samples"] == len(samples)
    assert err == ""


def test_samples_carry_check_history_fields_with_the_same_types(target,
                                                               tmp_path):
    history = tmp_path / "h.jsonl"
    check = run_here("check", target.node, "--cookie", target.cookie,
                    "--history", str(history))
    assert check.returncode == 0, check.stdout + check.stderr
    record = json.loads(history.read_text().splitlines()[0])
    watch_file = tmp_path / "w.jsonl"
    result = _watch(target, "--count", "2", "--interval", "0.2",
                    "--output", str(watch_file))
    assert result.returncode == 0, result.stderr
    samples, _ = _lines(result.stdout)
    on_file = [json.loads(line) for line in
               watch_file.read_text().splitlines()]
    assert on_file == samples
    # A process pass each, a per-type allocator fold, a pass over tables.
    only_check = {"top_binary_memory", "max_queue", "alloc_usage_min",
                  "top_ets_memory"}
    for key, value in record.items():
        if key in only_check:
            continue
        assert key in samples[0], key
        assert type(samples[0][key]) is type(value), key
    # Both plot alike, mixed in one run.
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text(history.read_text() + watch_file.read_text())
    drawn = run_here("plot", str(mixed), "--format", "json")
    assert drawn.returncode == 0, drawn.stderr
    assert json.loads(drawn.stdout)["samples"] == 3


@pytest.mark.slow
def test_the_live_view_on_a_terminal_has_the_chart_and_the_verdict(target):
    import pty
    import select
    import sys

    pid, fd = pty.fork()
    if pid == 0:  # the child: beam-probe on a 100 x 30 terminal
        try:
            os.environ["BEAM_PROBE_COOKIE"] = target.cookie
            os.execv(sys.executable, [sys.executable, "-m", "beam_probe",
                                      "watch", target.node, "--interval",
                                      "0.3", "--count", "8"])
        finally:
            os._exit(127)
    import fcntl
    import termios

    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 100, 0, 0))
    out = b""
    deadline = time.monotonic() + 60
    resized = False
    while time.monotonic() < deadline:
        if not resized and out.count(b"\x1b[J") >= 3:
            # The terminal shrinks mid-watch: the next frames fit it.
            fcntl.ioctl(fd, termios.TIOCSWINSZ,
                        struct.pack("HHHH", 20, 70, 0, 0))
            resized = True
        ready, _, _ = select.select([fd], [], [], 1)
        if not ready:
            continue
        try:
            data = os.read(fd, 65536)
        except OSError:
            break
        if not data:
            break
        out += data
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    text = out.decode("utf-8", "replace")
    # Every frame ends by clearing what is below it; the summary follows
    # the last one.
    *frames, summary = text.split("\x1b[J")
    assert len(frames) >= 8  # one per sample, and one more per resize
    last = frames[-1]
    plain = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", last)
    # Eight samples without collections: the floors cannot judge yet.
    assert "not judged yet: 9 more samples, or --gc holders" in plain
    assert any(0x2800 < ord(c) <= 0x28FF for c in plain)  # the chart
    assert "floors over 12 samples" in plain and "━● total" in plain
    # The view fits the resized 70 x 20 terminal.
    visible = [line.strip("\r") for line in plain.split("\n")]
    assert len([line for line in visible if line]) <= 19
    assert max(len(line) for line in visible) <= 70
    assert "first" in summary  # the summary table, after the view


def test_plot_draws_a_history_file_in_the_terminal_and_a_png(tmp_path):
    lines = []
    for i in range(50):
        lines.append(json.dumps({
            "time": "2026-11-22T10:00:00Z", "epoch": 1795000000 + 60 * i,
            "node": "app@db1", "total": 100 * MB + i * MB,
            "processes": 40 * MB, "binary": 20 * MB + i * MB,
            "ets": 5 * MB}))
    lines.insert(10, "not json at all")
    lines.insert(20, '{"node": "app@db1", "torn')
    path = tmp_path / "h.jsonl"
    path.write_text("\n".join(lines) + "\n")
    text = run_here("plot", str(path), "--metric", "binary,ets")
    assert text.returncode == 0, text.stderr
    assert "app@db1: 50 samples" in text.stdout
    assert "2 lines skipped" in text.stdout
    assert any(0x2800 < ord(c) <= 0x28FF for c in text.stdout)
    as_json = json.loads(run_here("plot", str(path), "--format", "json",
                                 "--since", "1795001200").stdout)
    assert as_json["samples"] == 30 and as_json["skipped_lines"] == 2
    pytest.importorskip("matplotlib")
    png = tmp_path / "chart.png"
    drawn = run_here("plot", str(path), "-o", str(png))
    assert drawn.returncode == 0, drawn.stderr
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    assert (width, height) == (1000, 500)
    assert len(data) > 20_000  # lines, labels and a legend, not a blank


@pytest.mark.parametrize("args, message", [
    (("watch", "x@y", "--interval", "0"), "--interval"),
    (("watch", "x@y", "--gc", "some"), "--gc"),
    (("plot",), "expected FILE..."),
    (("plot", "/nonexistent/h.jsonl"), "cannot read /nonexistent/h.jsonl"),
    (("plot", "/etc"), "cannot read /etc"),
    (("plot", "/dev/null"), "character device, not a regular file"),
    (("plot", "pyproject.toml"), "no samples to plot in the files"),
    (("plot", "README.md", "--metric", "heap"), "unknown metric 'heap'"),
    (("plot", "README.md", "--since", "yesterday"), "--since must be"),
    (("plot", "README.md", "-o", "x.gif"), "--output must end in"),
])
def test_bad_input_gets_one_line(args, message):
    from beam_probe.cli import invoke

    import io
    import contextlib

    err = io.StringIO()
    with contextlib.redirect_stderr(err), \
            contextlib.redirect_stdout(io.StringIO()):
        code = invoke(list(args))
    assert code == 2, err.getvalue()
    lines = err.getvalue().strip().splitlines()
    assert message in lines[-1], lines
    assert "Traceback" not in err.getvalue()


def test_plot_refuses_a_mixed_cluster_file_without_node(tmp_path):
    path = tmp_path / "cluster.jsonl"
    path.write_text("".join(json.dumps({
        "time": "t", "epoch": 1795000000 + i, "node": f"n{i % 2}@h",
        "total": i}) + "\n" for i in range(6)))
    result = run_here("plot", str(path), "--metric", "total")
    assert result.returncode == 2
    assert "--node" in result.stderr
    picked = run_here("plot", str(path), "--metric", "total", "--node",
                     "n1@h", "--format", "json")
    assert json.loads(picked.stdout)["samples"] == 3


# --- what a terminal is sent ------------------------------------------------

COLOUR = b"\x1b[3"       # a foreground colour (the chart's series)
CURSOR = b"\x1b[?25l"    # the cursor hidden while the view draws


@pytest.mark.parametrize("term, no_color, cursor, colour", [
    ("xterm", None, True, True), ("xterm", "1", True, False),
    ("dumb", None, False, False)])
def test_the_live_view_respects_no_color_and_a_dumb_terminal(
        target, term, no_color, cursor, colour):
    from conftest import run_in_terminal

    env = dict(os.environ, HOME=target.home, TERM=term)
    env.pop("NO_COLOR", None)
    if no_color:
        env["NO_COLOR"] = no_color
    code, out = run_in_terminal("watch", target.node, "--interval", "0.2",
                                "--count", "3", env=env)
    assert code == 0, out
    assert (CURSOR in out) is cursor, out[:300]
    assert (COLOUR in out) is colour, out[:300]
    if term == "dumb":
        assert b"\x1b" not in out
        assert out.count(b"samples") >= 3  # each frame below the last


def test_series_are_told_apart_without_colour():
    """Each series has a glyph, on its line and in the legend."""
    from beam_probe.text.chart import MARKS

    rising = [(float(i), float(i)) for i in range(50)]
    falling = [(float(i), float(50 - i)) for i in range(50)]
    lines = line_chart([("up", rising), ("down", falling)], 60, 12)
    assert "\x1b" not in "".join(lines)
    body, legend = "".join(lines[:-2]), lines[-1]
    assert MARKS[0] in body and MARKS[1] in body
    assert f"━{MARKS[0]} up" in legend and f"━{MARKS[1]} down" in legend
