"""The demo is the first command a newcomer runs: it must work as the
README says, and leave nothing running."""

from __future__ import annotations

import json
import subprocess

import pytest

from conftest import run_cli


def _demo_nodes() -> set[str]:
    out = subprocess.run(["epmd", "-names"], capture_output=True,
                         text=True).stdout
    return {line.split()[1] for line in out.splitlines()
            if line.startswith("name beam_probe_demo_")}


@pytest.mark.slow
def test_demo_runs_every_step_and_stops_its_node():
    before = _demo_nodes()
    result = run_cli("demo", timeout=180)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr
    out = result.stdout
    for step in ("ping", "memory", "proc-count", "bin-leak", "proc-info",
                 "proc-window", "watch"):
        assert f"$ beam-probe {step} beam_probe_demo_" in out, step
    assert "demo_cache" in out  # proc-info found the cache by name
    # Piped, each watch writes JSON lines and ends with its summary.
    summaries = [json.loads(line)["summary"] for line in out.splitlines()
                 if line.startswith('{"summary"')]
    assert [s["gc"] for s in summaries] == ["none", "holders"]
    assert all(s["samples"] == 8 for s in summaries)
    assert "Stopping beam_probe_demo_" in out
    assert _demo_nodes() <= before
