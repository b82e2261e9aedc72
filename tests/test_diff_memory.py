"""diff's memory is bounded per process, whatever the node's size (issue 39
item 2): three snapshots are passed over a chunk of rows at a time, and
what is held per process is the hub's arrays (snapshots/passes.py).

Three snapshots of a million processes read whole into columns took 279
MB (about 280 bytes a process); streamed, 74 MB (bench_snapshot.py). Here
the Python heap's peak (tracemalloc) over a diff of three real snapshots
of a node at two sizes, with processes born and dying between them so
that rows are found through the key index, not as slices: what each
process adds to the peak is the slope between the two sizes, which no
fixed cost (the interpreter, the modules, a chunk's columns) can hide.
"""

from __future__ import annotations

import random
import tracemalloc
from array import array

from beam_probe.node.remote import attach
from beam_probe.snapshots.compare import diff_files
from beam_probe.snapshots.keys import KeyIndex
from beam_probe.snapshots.take import snapshot

# Bytes a process may add to the peak of a diff of three snapshots: the
# hub's arrays take ~48 a process and its index 8-16. Measured on this
# test's snapshots: 53 a process; read whole into columns, 279.
BYTES_A_PROCESS = 120


SMALL, LARGE = 20_000, 100_000


# Between snapshots: this many of the processes stop and as many start.
CHURN = 3_000


def _snapshots(node, folder, size: int) -> list[str]:
    """Three snapshots of the node holding ``size`` idle processes of
    ours, CHURN of them replaced before the second and the third."""
    paths = []
    with attach(node.node, node.cookie.encode()) as r:
        idle = list(r.call("beam_probe_workload", "noise", [size]))
        for i in range(3):
            if i:
                r.call("beam_probe_workload", "stop_noise", [idle[:CHURN]])
                idle = idle[CHURN:] + list(r.call(
                    "beam_probe_workload", "noise", [CHURN]))
            path = str(folder / f"{size}-{i}.snapshot")
            snapshot(r, path, "none", 0, None, lambda text: None)
            paths.append(path)
        r.call("beam_probe_workload", "stop_noise", [idle])
    return paths


def _peak(paths: list[str]) -> tuple[int, dict]:
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        result = diff_files(paths)
        return tracemalloc.get_traced_memory()[1] - base, result
    finally:
        tracemalloc.stop()


def _noise(result: dict) -> dict:
    return next(d for d in result["change"]["details"]
                if d["what"] == "beam_probe_workload:noise_loop/0")


def test_a_diffs_memory_does_not_grow_with_the_rows_held(nodes, tmp_path):
    node = nodes.start("25")
    small = _snapshots(node, tmp_path, SMALL)
    large = _snapshots(node, tmp_path, LARGE)
    (low, low_result), (high, high_result) = _peak(small), _peak(large)
    # The answer is the diff's, found through the index: the churn born
    # and dead, the rest kept.
    for size, result in ((SMALL, low_result), (LARGE, high_result)):
        noise = _noise(result)
        assert (noise["before"], noise["after"]) == (size, size), noise
        assert (noise["+"], noise["-"]) == (2 * CHURN, 2 * CHURN), noise
        assert result["suspects"]["born_and_kept"][0]["what"] == \
            "beam_probe_workload:noise_loop/0"
        assert result["suspects"]["born_and_kept"][0]["count"] == CHURN
    per_process = (high - low) / (LARGE - SMALL)
    assert per_process < BYTES_A_PROCESS, \
        f"{per_process:.0f} bytes a process ({low} -> {high})"


def test_the_key_index_answers_as_a_dict():
    """Keys as pids make them, keys given twice (the later row's), and
    keys made to collide (past the probes, a dict of the rest)."""
    rng = random.Random(39)
    cases = [[], [5], [rng.getrandbits(63) for _ in range(2000)],
             [(rng.randrange(40) << 32) | rng.randrange(32768)
              for _ in range(5000)],
             [rng.randrange(30) for _ in range(300)],
             [i << 40 for i in range(3000)],
             [rng.randrange(-2**63, 2**63) for _ in range(1000)]]
    for keys in cases:
        index = KeyIndex(array("q", keys))
        rows = {key: row for row, key in enumerate(keys)}
        asked = array("q", keys[:500] + [rng.randrange(-2**63, 2**63)
                                         for _ in range(200)]
                      + list(range(40)))
        assert list(index.find(asked)) == [rows.get(k, -1) for k in asked]
