"""The demo is the first command a newcomer runs: a guided tour that must
work as the README says, read clearly in a pipe, and leave nothing running
(or, with --keep, a node the printed commands reach and stop)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from conftest import run_cli, run_here

STEPS = ("watch", "proc-count", "bin-leak", "proc-info", "trace-gc",
         "leak-hunt", "alloc", "inspect", "calls")

# inspect's line for a group of pinned slices: path, count, their bytes,
# the bytes they keep alive.
PINNED = re.compile(r"^  (\S+) \(keys\): ([\d,]+) slices using "
                    r"([\d.]+ \w+) keep ([\d.]+ \w+) alive$", re.M)


def _demo_nodes() -> set[str]:
    out = subprocess.run(["epmd", "-names"], capture_output=True,
                         text=True).stdout
    return {line.split()[1] for line in out.splitlines()
            if line.startswith("name beam_probe_demo_")}


MIB = 1024 * 1024
UNITS = {"B": 1, "KiB": 1024, "MiB": MIB, "GiB": 1024 * MIB}


def _bytes(text: str) -> float:
    number, unit = text.split()
    return float(number) * UNITS[unit]


def _steps(out: str) -> dict[str, str]:
    """Each step's output (its command's, without its note), by command."""
    parts = re.split(r"^\$ beam-probe ", out, flags=re.M)[1:]
    steps = {}
    for part in parts:
        command = part.split()[0]
        body = part.split("\n", 1)[1]
        steps[command] = body.split("\n> ", 1)[0]
    return steps


def _rows(text: str) -> list[list[str]]:
    """The rows under a table's dashed rule, split on runs of 2+ spaces."""
    lines = text.splitlines()
    rule = next(i for i, line in enumerate(lines)
                if line.startswith("---") and set(line) <= {"-", " "})
    rows = []
    for line in lines[rule + 1:]:
        if not line.strip():
            break
        rows.append(re.split(r"\s{2,}", line.strip()))
    return rows


@pytest.mark.slow
def test_demo_tours_every_step_and_says_what_its_output_shows():
    before = _demo_nodes()
    result = run_cli("demo", timeout=240)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr
    out = result.stdout
    positions = [out.index(f"$ beam-probe {step} beam_probe_demo_")
                 for step in STEPS]
    assert positions == sorted(positions)  # in the tour's order
    # Each step: a numbered title before its command, a note after it.
    assert len(re.findall(r"^\d\. .+\?$|^\d\. .+\.$", out, re.M)) == \
        len(STEPS)
    assert len(re.findall(r"^> ", out, re.M)) >= len(STEPS)
    # Text in a pipe too: no JSON line anywhere.
    assert not re.search(r"^\{", out, re.M)
    steps = _steps(out)

    # 1. Binary memory moves with the requests; the last line is the rule.
    samples = re.findall(r"  binary ([\d.]+ \w+)  ", steps["watch"])
    assert len(samples) == 8
    binary = [_bytes(s) for s in samples]
    assert max(binary) - min(binary) > MIB
    assert steps["watch"].strip().splitlines()[-1].startswith(
        ("no leak suspected", "leak suspected", "not judged yet",
         "rising, not yet confirmed"))

    # 2. demo_cache holds the most refc binary memory.
    # (pid, binary_memory, distinct, name, ...)
    assert _rows(steps["proc-count"])[0][3] == "demo_cache"

    # 3. A collection freed binary memory; demo_cache dropped the most.
    freed = re.search(r"binary memory: .* \(freed ([\d.]+ \w+)\)",
                      steps["bin-leak"])
    assert freed and _bytes(freed.group(1)) > 0
    rows = _rows(steps["bin-leak"])
    # (pid, delta, distinct, name, ...): recon's count of references.
    assert rows[0][3] == "demo_cache" and int(rows[0][1]) < 0
    assert all(int(rows[0][1]) <= int(row[1]) for row in rows)

    # 4. About its 20 keys, each pinning a 64 KiB request.
    count = int(re.search(r"binary_count +(\d+)", steps["proc-info"])[1])
    memory = int(re.search(r"binary_memory +(\d+)", steps["proc-info"])[1])
    assert 20 <= count <= 40
    assert abs(memory - count * 65536) <= 4 * 65536

    # 5. Several collections a second, mostly minor.
    kinds = [row[3] for row in _rows(steps["trace-gc"])]
    assert len(kinds) >= 4  # in 2 s
    assert kinds.count("minor") >= kinds.count("major")

    # 6. Nothing made between the snapshots and kept.
    assert "none: nothing made between the first two snapshots outlived" \
        in steps["leak-hunt"]

    # 7. In use.
    assert re.search(r"^beam_probe_demo_\w+@\S+: in use: ", steps["alloc"],
                     re.M)

    # 8. The state's cache field, a map of 20 keys, and the keys pinned:
    # 20 slices of 128 bytes keeping 20 requests of 64 KiB alive; the fix.
    inspect = steps["inspect"]
    assert re.search(r"<0\.\d+\.0> demo_cache \(gen_server;", inspect), \
        inspect
    cache = next(row for row in _rows(inspect)
                 if row[0] == "State#state.cache")
    assert cache[1:3] == ["map", "20"], cache
    (pin,) = PINNED.findall(inspect)
    assert pin[:3] == ("State#state.cache", "20", "2.5 KiB"), pin
    assert abs(_bytes(pin[3]) - 20 * 65536) <= 0.1 * MIB  # 1.2 MiB shown
    assert "fix: store a copy of the slice (binary:copy/1)" in inspect

    # 9. Every cast to demo_cache from feeder/2, at the line that cuts
    # the slice; up to 50 a second; half-second summaries.
    _only_the_feeder(steps["calls"])
    assert "0.5 s: " in steps["calls"] and "1.0 s: " in steps["calls"]
    assert "ended by --duration" in steps["calls"]
    assert "$ beam-probe calls beam_probe_demo_" in out and \
        " gen_server:cast/2 --match 'demo_cache, _' " in out  # pastable
    assert "Stopping beam_probe_demo_" in out and "--keep" in out
    assert _demo_nodes() <= before


def _only_the_feeder(text: str) -> None:
    """The calls step's claim, on its final table: one caller, feeder/2,
    at the service's line that casts the slice, up to 50 a second."""
    summary = text.rsplit(" calls of gen_server:cast/2 counted on ", 1)
    count = int(summary[0].split()[-1].replace(",", ""))
    rate = float(re.match(r"\S+ in [\d.]+ s \(([\d.]+)/s\)",
                          summary[1]).group(1))
    assert count > 0 and rate <= 55, text
    rows = _rows(summary[1])
    assert len(rows) == 1, rows
    caller, where = rows[0][3:5]
    assert caller == "beam_probe_demo:feeder/2", rows
    _the_casting_line(where)


def _the_casting_line(where: str) -> None:
    from beam_probe.demo import SERVICE

    name, line = where.split(":")
    assert name == "beam_probe_demo.erl", where
    source = open(SERVICE, encoding="utf-8").read().splitlines()
    cast = source[int(line) - 1]
    assert "gen_server:cast(demo_cache" in cast and "binary:part" in cast


@pytest.fixture(scope="module")
def demo_service(session_nodes, otp, tmp_path_factory):
    """The demo's leaky service on a node of each release."""
    from beam_probe.demo import SERVICE
    from beam_probe.node.local import compile_erl

    beams = str(tmp_path_factory.mktemp(f"demo-{otp}"))
    compile_erl([SERVICE], beams)
    return session_nodes.start(otp, code_paths=(beams,),
                               eval_expr="beam_probe_demo:start()")


def _summary(result) -> dict:
    assert result.returncode == 0, (result.returncode, result.stderr)
    last = json.loads(result.stdout.splitlines()[-1])
    return last["summary"]


def test_who_fills_the_cache_on_each_release(demo_service):
    """Step 9's claim on every release: the casts to demo_cache come from
    feeder/2, at its casting line; and senders, which the note names,
    counts them from demo_feeder, though they are sent to the name
    demo_cache (a send to a registered name is traced with the name as
    its receiver, not the pid)."""
    node = demo_service
    found = _summary(run_here("calls", node.node, "gen_server:cast/2",
                              "--match", "demo_cache, _", "--duration", "1",
                              "--format", "json", node=node))
    assert [row["caller"] for row in found["rows"]] == [
        "beam_probe_demo:feeder/2"], found
    _the_casting_line(found["rows"][0]["line"])
    assert found["counted"] > 0 and found["ended_by"] == "duration"
    sent = _summary(run_here("senders", node.node, "demo_cache", "--by",
                             "shape", "--duration", "1", "--format", "json",
                             node=node))
    assert [(row["name"], row["shape"]) for row in sent["rows"]] == [
        ("demo_feeder", {"kind": "tuple", "size": 2,
                         "tag": "'$gen_cast'"})], sent
    assert sent["counted"] > 0


@pytest.mark.slow
def test_demo_keep_leaves_a_node_the_printed_commands_reach():
    before = _demo_nodes()
    result = run_cli("demo", "--keep", timeout=240)
    assert result.returncode == 0, result.stderr
    match = re.search(r"kill (\d+) && rm -rf (\S+)", result.stdout)
    assert match, result.stdout[-1000:]
    pid, home = int(match.group(1)), match.group(2)
    try:
        (node,) = _demo_nodes() - before
        command = re.search(r"^  beam-probe memory (.+)$", result.stdout,
                            re.M).group(1).split()
        r = subprocess.run([sys.executable, "-m", "beam_probe", "memory",
                            *command], capture_output=True, text=True,
                           env={k: v for k, v in os.environ.items()
                                if k != "HOME"} | {"HOME": "/nonexistent"})
        assert r.returncode == 0, r.stderr
        assert node in r.stdout
        # The node's code outlives the demo: inspect still names the
        # record's fields from the beam the node loaded.
        command = re.search(r"^  beam-probe inspect (.+)$", result.stdout,
                            re.M).group(1).split()
        r = run_cli("inspect", *command)
        assert r.returncode == 0, r.stderr
        assert PINNED.search(r.stdout).groups()[:2] == \
            ("State#state.cache", "20"), r.stdout
    finally:
        # As the demo says: by its pid (not our child: the demo was).
        os.kill(pid, signal.SIGTERM)
        subprocess.run(["rm", "-rf", home])
    deadline = time.monotonic() + 10
    while _demo_nodes() - before and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _demo_nodes() <= before
