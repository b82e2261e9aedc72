"""Names of the pool claimed on this machine: one holder at a time, freed
when released or when the holder dies (kill -9 included)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from beam_probe.erldist.claims import claim


@pytest.mark.parametrize("abstract", [True, False],
                         ids=["abstract-socket", "flock"])
def test_one_holder_at_a_time(abstract):
    node = f"claims_{os.getpid()}@host"
    first = claim(node, "beam_probe_1", abstract)
    assert first is not None
    assert claim(node, "beam_probe_1", abstract) is None
    assert claim(node.upper(), "beam_probe_1", abstract) is None
    other = claim(node, "beam_probe_2", abstract)
    elsewhere = claim("other_" + node, "beam_probe_1", abstract)
    assert other is not None and elsewhere is not None
    first.release()
    again = claim(node, "beam_probe_1", abstract)
    assert again is not None
    for held in (again, other, elsewhere):
        held.release()


@pytest.mark.parametrize("abstract", [True, False],
                         ids=["abstract-socket", "flock"])
def test_a_killed_holder_frees_its_name(abstract):
    node = f"claims_killed_{os.getpid()}@host"
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import sys, time; from beam_probe.erldist.claims import claim; "
         f"c = claim({node!r}, 'beam_probe_3', {abstract}); "
         "print(c is not None, flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "True"
        assert claim(node, "beam_probe_3", abstract) is None
        holder.send_signal(signal.SIGKILL)
        holder.wait(10)
        freed = claim(node, "beam_probe_3", abstract)
        assert freed is not None
        freed.release()
    finally:
        holder.kill()
        holder.wait()
