"""beam-probe check: thresholds, exit codes, outputs, history, cluster,
and the container's entry script."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys

import pytest

from beam_probe.history import records as history
from beam_probe.checks import report
from beam_probe.checks import thresholds
from beam_probe.erldist.terms import Atom
from beam_probe.node.remote import attach
from conftest import REPO, run_here

# --- thresholds, pure -------------------------------------------------------


@pytest.mark.parametrize("spec, expected", [
    ("binary=1KB", ("binary", 1000)),
    ("total=500MB", ("total", 500e6)),
    ("ets=1GiB", ("ets", 2**30)),
    ("atom=2kib", ("atom", 2048)),
    ("binary_share=80%", ("binary_share", 80)),
    ("atom_use=12.5", ("atom_use", 12.5)),
    ("max_queue=50k", ("max_queue", 50000)),
    ("process_count=1000", ("process_count", 1000)),
])
def test_threshold_units(spec, expected):
    assert thresholds.parse(spec) == expected


@pytest.mark.parametrize("spec, words", [
    ("bogus=1", "unknown key"), ("binary", "KEY=VALUE"),
    ("binary=80%", "takes bytes"), ("binary_share=5MB", "percentage"),
    ("max_queue=1GB", "a count"), ("total=lots", "not a number"),
])
def test_threshold_errors(spec, words):
    with pytest.raises(thresholds.ThresholdError, match=words):
        thresholds.parse(spec)


def test_evaluate_worst_wins():
    values = {"binary": 600, "max_queue": 5}
    status, problems = thresholds.evaluate(
        values, {"binary": 500, "max_queue": 10}, {"binary": 1000})
    assert status == thresholds.WARNING and len(problems) == 1
    status, _ = thresholds.evaluate(values, {"binary": 500},
                                    {"max_queue": 5})
    assert status == thresholds.CRITICAL


# --- history and the trend rule, pure ----------------------------------------


MIB = 1024 * 1024


def _seed(path, node, binaries, start=1_000_000.0, step=600.0):
    for i, value in enumerate(binaries):
        history.append(str(path), [history.record(node, {"binary": value},
                                                  start + i * step)])


def _load(path, node, need=100):
    records, _skipped = history.load_tail(str(path), [node], need)
    return records[node]


def test_trend_fires_after_n_consecutive_rises(tmp_path):
    path = tmp_path / "h.jsonl"
    _seed(path, "a@h", [m * MIB for m in (10, 11, 12, 13, 14)])
    assert history.trend(_load(path, "a@h"), 5) is None   # 4 rises so far
    _seed(path, "a@h", [15 * MIB], start=1_000_000 + 5 * 600)
    fired = history.trend(_load(path, "a@h"), 5)
    # 5 MiB over 5 * 10 minutes: 6 MiB per hour.
    assert fired["rises"] == 5 and \
        fired["growth_per_hour"] == pytest.approx(6 * MIB)
    assert history.trend(_load(path, "a@h"), 6) is None


def test_trend_ignores_rises_within_the_noise(tmp_path):
    """Five rises of a few KB (a probe's own connection leaves that much)
    are not a leak; five that add up past 1 MiB, or past 1% of a large
    figure, are."""
    path = tmp_path / "h.jsonl"
    _seed(path, "a@h", [60_000 + 8_000 * i for i in range(6)])
    assert history.trend(_load(path, "a@h"), 5) is None
    path.unlink()
    big = 10 * 1024 * MIB
    _seed(path, "a@h", [big + 20 * MIB * i for i in range(6)])
    assert history.trend(_load(path, "a@h"), 5) is None    # 100 MiB < 1%
    path.unlink()
    _seed(path, "a@h", [big + 30 * MIB * i for i in range(6)])
    assert history.trend(_load(path, "a@h"), 5)["rises"] == 5


def test_trend_needs_every_step_to_rise(tmp_path):
    path = tmp_path / "h.jsonl"
    _seed(path, "a@h", [m * MIB for m in (10, 20, 30, 30, 40, 50, 60)])
    assert history.trend(_load(path, "a@h"), 5) is None
    assert history.trend(_load(path, "a@h"), 3)["rises"] == 3


def test_history_keeps_nodes_apart_and_survives_junk(tmp_path):
    path = tmp_path / "h.jsonl"
    _seed(path, "a@h", [1, 2])
    with open(path, "a") as f:
        f.write('{"half a line\n')
    _seed(path, "b@h", [9])
    assert [r["binary"] for r in _load(path, "a@h")] == [1, 2]
    lines = path.read_text().splitlines()
    assert json.loads(lines[0])["node"] == "a@h" and "time" in json.loads(
        lines[0])


def test_a_torn_last_line_does_not_swallow_the_next_record(tmp_path):
    path = tmp_path / "h.jsonl"
    _seed(path, "a@h", [1])
    with open(path, "a") as f:
        f.write('{"node":"a@h","binary":5,"ep')      # a crash mid-write
    _seed(path, "a@h", [2], start=1_000_600)
    records, skipped = history.load_tail(str(path), ["a@h"], 10)
    assert [r["binary"] for r in records["a@h"]] == [1, 2] and skipped == 1


def test_bad_bytes_are_skipped_and_counted(tmp_path):
    path = tmp_path / "h.jsonl"
    _seed(path, "a@h", [1, 2])
    with open(path, "ab") as f:
        f.write(b'{"node":"a@h","binary":\xff}\n\x00\x01\n[1,2]\n"x"\n')
    _seed(path, "a@h", [3], start=1_002_000)
    records, skipped = history.load_tail(str(path), ["a@h"], 10)
    assert [r["binary"] for r in records["a@h"]] == [1, 2, 3]
    assert skipped == 4


def test_only_the_tail_is_read(tmp_path, monkeypatch):
    """A history of any size costs the same: the trend reads backwards only
    as far as it needs."""
    path = tmp_path / "h.jsonl"
    line = json.dumps(history.record("old@h", {"binary": 1}, 1.0)) + "\n"
    with open(path, "w") as f:
        f.write(line * (40 * 1024 * 1024 // len(line)))  # ~40 MB
    _seed(path, "a@h", list(range(1, 8)))
    reads = []
    real = os.pread
    monkeypatch.setattr(os, "pread",
                        lambda fd, n, at: reads.append(n) or real(fd, n, at))
    records, _ = history.load_tail(str(path), ["a@h"], 6)
    assert [r["binary"] for r in records["a@h"]] == [2, 3, 4, 5, 6, 7]
    assert sum(reads) <= history.BLOCK
    records, _ = history.load_tail(str(path), ["never@h"], 6)
    assert records["never@h"] == [] and sum(reads) <= \
        history.BLOCK + history.MAX_TAIL


def test_a_fifo_is_refused_not_waited_on(tmp_path):
    fifo = tmp_path / "h.fifo"
    os.mkfifo(fifo)
    with pytest.raises(history.HistoryError, match="FIFO"):
        history.append(str(fifo), [history.record("a@h", {"binary": 1}, 1)])
    with pytest.raises(OSError, match="FIFO"):
        history.load_tail(str(fifo), ["a@h"], 5)


# --- textfile ----------------------------------------------------------------

VALUES = {"total": 100, "processes": 10, "binary": 30, "ets": 5, "atom": 1,
          "binary_share": 30.0, "process_count": 7, "top_binary_memory": 20,
          "max_queue": 2, "atom_use": 0.5}


def _report():
    return report.judge([{"node": "a@h", "values": VALUES},
                         {"node": "b@h", "error": "no answer within 2 s"}],
                        {}, {}, {})


def test_prometheus_textfile_format():
    text = report.prometheus(_report())
    families = set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            families.add(line.split()[2])
            continue
        if line.startswith("#"):
            continue
        # name{labels} value: no timestamp, a node label on every sample.
        match = re.fullmatch(r'(beam_probe_\w+)\{(node="[^"]+"[^}]*)\} '
                             r'(-?[0-9.]+)', line)
        assert match, line
        assert match.group(1) in families
    assert 'beam_probe_up{node="b@h"} 0' in text
    assert 'beam_probe_status{node="b@h"} 2' in text
    assert 'beam_probe_memory_bytes{node="a@h",type="binary"} 30' in text


def test_textfile_written_atomically(tmp_path, monkeypatch):
    path = tmp_path / "beam.prom"
    path.write_text("old\n")
    report.write_atomically(str(path), "new\n")
    assert path.read_text() == "new\n"
    assert os.listdir(tmp_path) == ["beam.prom"]       # no temporary left

    def broken_replace(src, dst, **dir_fds):
        raise OSError("disk full")
    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError):
        report.write_atomically(str(path), "half\n")
    assert path.read_text() == "new\n"                  # readers never see half
    assert os.listdir(tmp_path) == ["beam.prom"]


# --- the command against real nodes -------------------------------------------


def check(node, *args, **kw):
    return run_here("check", node.node, *args, env={"HOME": node.home}, **kw)


def test_exit_codes(target):
    r = check(target)
    assert r.returncode == 0 and r.stdout.startswith("BEAM OK - "), r.stdout
    assert "'binary'=" in r.stdout and "|" in r.stdout
    r = check(target, "--warn", "binary=1B", "--crit", "total=1TB")
    assert r.returncode == 1 and r.stdout.startswith("BEAM WARNING")
    r = check(target, "--warn", "binary=1B", "--crit", "process_count=1")
    assert r.returncode == 2 and r.stdout.startswith("BEAM CRITICAL")
    assert "process_count" in r.stdout
    for bad in (["--warn", "bogus=1"], ["--crit", "binary=80%"],
                ["--no-such-option"], ["--trend", "3"],
                ["--warn", "binary_share=150%"],
                ["--warn", "binary=2GB", "--crit", "binary=1GB"],
                ["--timeout", "nan"], ["--connect-timeout", "inf"],
                ["--cookie-file", "/nonexistent/cookie"]):
        r = check(target, *bad)
        assert r.returncode == 3, (bad, r.stdout, r.stderr)
        # Nagios shows stdout only: the reason must be there, on one line.
        assert r.stdout.startswith("BEAM UNKNOWN - "), (bad, r.stdout)
        assert len(r.stdout.strip().splitlines()) == 1, (bad, r.stdout)
        assert "Traceback" not in r.stderr


def test_thresholds_are_echoed_as_written(target):
    # Issue 38: --warn binary=100MB was echoed as 95.4MiB, a figure the user
    # never wrote. The text is echoed; the number is still what compares.
    key, limit = thresholds.parse("binary=100MB")
    assert limit == 100e6 and thresholds.show(key, limit) == "100MB"
    r = check(target, "--warn", "binary=1KB", "--crit", "max_queue= 50k")
    assert r.returncode == 1 and r.stdout.startswith("BEAM WARNING"), r.stdout
    assert ">= 1KB (warning)" in r.stdout, r.stdout
    assert "KiB (warning)" not in r.stdout
    # perfdata stays numeric, as Nagios reads it.
    assert re.search(r"'binary'=\d+B;1000;;0;", r.stdout), r.stdout
    assert re.search(r"'max_queue'=\d+;;50000;0;", r.stdout), r.stdout


@pytest.mark.parametrize("spec, expected", [
    ("binary=5m", ("binary", 5e6)), ("binary=5MB", ("binary", 5e6)),
    ("binary=5MiB", ("binary", 5 * 2**20)), ("max_queue=2M", ("max_queue", 2e6)),
    ("total=1g", ("total", 1e9)), ("binary_share=100%", ("binary_share", 100))])
def test_one_rule_for_units(spec, expected):
    assert thresholds.parse(spec) == expected


def test_warning_above_critical_is_refused():
    with pytest.raises(thresholds.ThresholdError, match="above the critical"):
        thresholds.parse_both(["binary=2GB"], ["binary=1GB"])
    assert thresholds.parse_both(["binary=1GB"], ["binary=1GB"])


def test_unreachable_is_critical(target):
    name = target.node.replace("@", "_nobody@")
    r = run_here("check", name, env={"HOME": target.home})
    assert r.returncode == 2 and r.stdout.startswith("BEAM CRITICAL")
    assert "node not found" in r.stdout


def test_json_and_textfile(target, tmp_path):
    prom = tmp_path / "beam.prom"
    r = check(target, "--format", "json", "--textfile", str(prom),
              "--warn", "max_queue=1000000")
    assert r.returncode == 0, r.stderr
    j = json.loads(r.stdout)
    assert j["status"] == "OK" and j["exit_code"] == 0
    values = j["nodes"][0]["values"]
    assert set(values) == set(thresholds.KEYS)
    assert values["process_count"] > 10 and 0 < values["binary_share"] < 100
    text = prom.read_text()
    assert f'beam_probe_up{{node="{target.node}"}} 1' in text
    r = check(target, "--format", "prometheus")
    assert r.returncode == 0 and "# TYPE beam_probe_memory_bytes gauge" in \
        r.stdout


def test_history_and_trend(nodes, otp, tmp_path):
    # A node holding a 4 MiB binary: the rise from the seeded runs to it is
    # past the rule's noise (1 MiB).
    target = nodes.start(otp, eval_expr=(
        "spawn(fun() -> B = binary:copy(<<7>>, 4 bsl 20), "
        "receive stop -> B end end)"))
    path = tmp_path / "history.jsonl"
    # Four earlier runs, each with more binary memory than the last, all
    # below anything a live node has: this run makes the fourth rise...
    _seed(path, target.node, [1, 2, 3, 4])
    r = check(target, "--history", str(path), "--trend", "5")
    assert r.returncode == 0, r.stdout       # ...which is not yet five
    path.unlink()
    _seed(path, target.node, [1, 2, 3, 4])
    r = check(target, "--history", str(path), "--trend", "4",
              "--format", "json")
    assert r.returncode == 1, r.stdout
    row = json.loads(r.stdout)["nodes"][0]
    assert row["trend"]["rises"] == 4 and row["trend"]["growth_per_hour"] > 0
    assert any("rose 4 times" in p for p in row["problems"])
    assert len(path.read_text().splitlines()) == 5


def _limit_file_size(limit):
    import resource

    def apply():
        # Python ignores SIGXFSZ, so a write past the limit is short, then
        # fails with EFBIG: what a full disk does to an append.
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return apply


def test_a_full_disk_is_reported_without_hiding_the_verdict(target, tmp_path):
    path = tmp_path / "history.jsonl"
    # Larger than the textfile, so the limit cuts only the history.
    seeded = 200  # the textfile, with its allocator series, is ~4 KB
    _seed(path, target.node, [1] + [0] * (seeded - 1))
    size = path.stat().st_size
    prom = tmp_path / "beam.prom"
    env = dict(os.environ, HOME=target.home)
    cmd = [sys.executable, "-m", "beam_probe", "check", target.node,
           "--history", str(path), "--crit", "process_count=1",
           "--textfile", str(prom)]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True,
                       preexec_fn=_limit_file_size(size + 96))
    # The thresholds' CRITICAL stands; the torn append is named.
    assert r.returncode == 2 and r.stdout.startswith("BEAM CRITICAL"), r.stdout
    assert "history" in r.stdout and "not written" in r.stdout
    assert "process_count" in r.stdout and prom.exists()
    # With room again, the next record starts on a line of its own.
    r = check(target, "--history", str(path), "--format", "json")
    assert r.returncode == 0, r.stdout
    records, skipped = history.load_tail(str(path), [target.node],
                                         seeded + 10)
    assert len(records[target.node]) == seeded + 1 and skipped == 1
    r = check(target, "--history", str(path))
    assert r.returncode == 0 and "history" not in r.stdout.split("|")[0]


def test_a_damaged_history_never_blinds_the_check(target, tmp_path):
    path = tmp_path / "history.jsonl"
    path.write_bytes(b"\xff\xfe not a record\n" + b"\x00" * 100 + b"\n")
    prom = tmp_path / "beam.prom"
    r = check(target, "--history", str(path), "--warn", "process_count=1",
              "--textfile", str(prom), "--format", "json")
    assert r.returncode == 1, (r.stdout, r.stderr)
    j = json.loads(r.stdout)
    assert j["history_skipped_lines"] == 2
    assert "process_count" in j["nodes"][0]["problems"][0]
    assert f'beam_probe_up{{node="{target.node}"}} 1' in prom.read_text()


def test_cluster_two_nodes_and_a_silent_one(nodes, otp):
    cookie = f"bpcluster{os.getpid()}"
    a = nodes.start(otp, cookie=cookie)
    b = nodes.start(otp, cookie=cookie)
    with attach(a.node, cookie.encode(), timeout=20) as remote:
        assert remote.call("net_kernel", "connect_node", [Atom(b.node)]) \
            is True
    r = run_here("check", a.node, "--cluster", "--format", "json",
                env={"HOME": a.home})
    assert r.returncode == 0, r.stdout + r.stderr
    j = json.loads(r.stdout)
    assert [row["node"] for row in j["nodes"]] == [a.node, b.node]
    assert all(row["status"] == "OK" for row in j["nodes"])
    # Each node names its own top holder (on a fresh OTP 27 node an
    # unnamed erlang:apply/2: its initial call), and so does its line.
    holders = [row["top_binary_holder"] for row in j["nodes"]]
    assert all(h and h["pid"].startswith("<") and (h["name"] or
                                                   h["initial_call"])
               for h in holders), holders
    r = run_here("check", a.node, "--cluster", "--crit", "process_count=1",
                env={"HOME": a.home})
    assert r.returncode == 2
    assert f"'{b.node} binary'=" in r.stdout and b.node in r.stdout
    lines = r.stdout.splitlines()
    for node in (a.node, b.node):
        (line,) = [x for x in lines[1:] if x.startswith(node + " ")]
        assert re.search(r"\(each binary once\) in <[0-9.]+> \S", line), \
            line
    # A node that stops answering: reported as such, and CRITICAL.
    os.kill(b.pid, signal.SIGSTOP)
    try:
        r = run_here("check", a.node, "--cluster", "--timeout", "2",
                    "--format", "json", env={"HOME": a.home})
    finally:
        os.kill(b.pid, signal.SIGCONT)
    assert r.returncode == 2, r.stdout
    rows = {row["node"]: row for row in json.loads(r.stdout)["nodes"]}
    assert rows[a.node]["status"] == "OK"
    assert rows[b.node]["status"] == "CRITICAL"
    # The whole check within --timeout: connecting, then the node's share.
    assert re.search(r"no answer within 1\.\d s", rows[b.node]["error"])


# --- who: the processes behind the per-process figures (issue 38) -----------

# A process named only by process_name, as RabbitMQ names a queue, that
# holds 8,000 refc binaries of 4 KB (32 MB: more than anything a fresh
# node holds) and leaves 1,000 messages waiting (it takes only stop).
_HOLDER = ("S = self(), P = spawn(fun() -> put(process_name, "
           "{bpt_check_queue, <<\"bpt.check.1\">>}), B = [binary:copy("
           "<<I:32768>>) || I <- lists:seq(1, 8000)], S ! {self(), ready}, "
           "receive stop -> length(B) end end), receive {P, ready} -> ok "
           "after 60000 -> exit(P, kill) end, "
           "[P ! {waiting, I} || I <- lists:seq(1, 1000)], P.")
_HOLDER_NAME = '{bpt_check_queue,<<"bpt.check.1">>}'


def _spawn_holder(node):
    with attach(node.node, node.cookie.encode(), timeout=20) as remote:
        _ok, tokens, _end = remote.call("erl_scan", "string", [_HOLDER])
        ok, exprs = remote.call("erl_parse", "parse_exprs", [tokens])
        assert ok == Atom("ok"), exprs
        _value, pid, _bindings = remote.call("erl_eval", "exprs",
                                             [exprs, []])
    return str(pid)


def test_check_names_the_holders(nodes, otp):
    """The largest holder of binaries and the longest queue are named in
    check's first line and its JSON, from the dictionary on every
    release; the textfile gets no process label (one per process)."""
    node = nodes.start(otp)
    pid = _spawn_holder(node)
    r = check(node, "--format", "json")
    assert r.returncode == 0, r.stdout + r.stderr
    row = json.loads(r.stdout)["nodes"][0]
    holder = {"pid": pid, "name": _HOLDER_NAME,
              "initial_call": row["top_binary_holder"]["initial_call"]}
    assert row["top_binary_holder"] == holder, row
    assert row["max_queue_holder"] == holder, row
    assert row["values"]["top_binary_memory"] >= 8000 * 4096
    assert row["values"]["max_queue"] >= 1000
    r = check(node)
    assert r.returncode == 0, r.stdout + r.stderr
    first = r.stdout.splitlines()[0]
    named = f"in {pid} {_HOLDER_NAME}"
    summary, _perfdata = first.split(" | ")
    assert re.search(r"top binary_memory [0-9.]+ MiB \(each binary once\) "
                     + re.escape(named) + r", max_queue [0-9,]+ "
                     + re.escape(named) + ", ", summary), first
    r = check(node, "--format", "prometheus")
    assert r.returncode == 0 and "bpt_check_queue" not in r.stdout \
        and pid not in r.stdout and "bpt.check.1" not in r.stdout, r.stdout


def test_holder_names_are_cut_and_kept_off_perfdata():
    """A name past 60 characters keeps its start and end; a "|" in it
    would start Nagios's perfdata."""
    values = dict(VALUES, binary=30, total=100, binary_share=30.0, rss=None,
                  alloc_usage_min=100.0, top_ets_memory=0)
    name = "{bpt_queue,<<\"" + "x" * 100 + "|end\">>}"
    holder = {"pid": "<0.705.0>", "name": name, "initial_call": None}
    report_ = report.judge([{"node": "a@h", "values": values,
                             "top_binary_holder": holder,
                             "max_queue_holder": None}], {}, {}, {})
    line = report.nagios(report_, {}, {})
    assert line.count("|") == 1, line
    shown = line.split(" in <0.705.0> ")[1].split(", max_queue")[0]
    assert len(shown) == report.HOLDER_WIDTH, shown
    assert shown.startswith("{bpt_queue,") and shown.endswith("¦end\">>}")
    assert "max_queue 2, atom_use" in line


# --- the container's entry point, run directly --------------------------------


def test_docker_entrypoint_runs_one_check(target, tmp_path):
    import sys

    probe = os.path.join(os.path.dirname(sys.executable), "beam-probe")
    env = dict(os.environ, HOME=target.home, BEAM_PROBE_NODE=target.node,
               BEAM_PROBE_ONCE="1", BEAM_PROBE_BIN=probe,
               BEAM_PROBE_TEXTFILE=str(tmp_path / "beam.prom"),
               BEAM_PROBE_HISTORY=str(tmp_path / "history.jsonl"),
               BEAM_PROBE_CHECK_ARGS="--warn binary=1B")
    script = os.path.join(REPO, "docker", "entrypoint.sh")
    r = subprocess.run([script], env=env, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 1 and r.stdout.startswith("BEAM WARNING"), \
        r.stdout + r.stderr
    assert "beam_probe_up" in (tmp_path / "beam.prom").read_text()
    assert len((tmp_path / "history.jsonl").read_text().splitlines()) == 1
    env.pop("BEAM_PROBE_NODE")
    r = subprocess.run([script], env=env, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode != 0 and "BEAM_PROBE_NODE" in r.stderr


def test_docker_files_agree_with_the_script():
    dockerfile = open(os.path.join(REPO, "docker", "Dockerfile")).read()
    compose = open(os.path.join(REPO, "docker", "compose.yaml")).read()
    assert "docker/entrypoint.sh" in dockerfile and "ENTRYPOINT" in dockerfile
    for var in ("BEAM_PROBE_NODE", "BEAM_PROBE_COOKIE",
                "BEAM_PROBE_INTERVAL", "BEAM_PROBE_CHECK_ARGS"):
        assert var in compose
    assert "-setcookie" not in compose
