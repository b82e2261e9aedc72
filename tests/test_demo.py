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

from conftest import run_cli

STEPS = ("watch", "proc-count", "bin-leak", "proc-info", "trace-gc",
         "leak-hunt", "alloc")


def _demo_nodes() -> set[str]:
    out = subprocess.run(["epmd", "-names"], capture_output=True,
                         text=True).stdout
    return {line.split()[1] for line in out.splitlines()
            if line.startswith("name beam_probe_demo_")}


@pytest.mark.slow
def test_demo_tours_every_step_and_stops_its_node():
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
    notes = re.findall(r"^> ", out, re.M)
    assert len(notes) >= len(STEPS)
    assert "demo_cache" in out  # proc-count and proc-info found the cache
    # Piped, the watch writes JSON lines and ends with its summary.
    (summary,) = [json.loads(line)["summary"] for line in out.splitlines()
                  if line.startswith('{"summary"')]
    assert summary["samples"] == 8
    assert "in use" in out  # alloc's verdict on a holder
    assert "Stopping beam_probe_demo_" in out and "--keep" in out
    assert _demo_nodes() <= before


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
    finally:
        # As the demo says: by its pid (not our child: the demo was).
        os.kill(pid, signal.SIGTERM)
        subprocess.run(["rm", "-rf", home])
    deadline = time.monotonic() + 10
    while _demo_nodes() - before and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _demo_nodes() <= before
