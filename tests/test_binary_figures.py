"""One figure for binaries, one rule for units (issue 38, item 4).

top's BINARY column showed 928.6 GiB for one RabbitMQ queue on a node of
1.1 GiB: recon's figure, a binary's whole size for every reference a
process makes to it. A process holding 1,000 slices of one 1 MiB binary
is that queue in small: recon's figure is 1,000 MiB, the bytes it holds
1 MiB. Where a column is recon's own answer (proc-count binary_memory)
it stays recon's, to the byte, with the distinct bytes beside it; every
other binary figure (top, check, serve's ranking) is the distinct one.
Every text table writes bytes in binary units with one decimal
(human_bytes), counts with thousands separators; JSON keeps the raw
integers."""

from __future__ import annotations

import json
import re

import pytest

from beam_probe.erldist.terms import Atom
from beam_probe.node.remote import attach
from beam_probe.text.tables import human_bytes
from conftest import run_here

MIB = 1 << 20
SLICES = 1000
RECON = SLICES * MIB  # what process_info(P, binary) sums, a slice each
HELD = MIB  # the one binary under the slices


@pytest.fixture
def sliced(nodes, otp):
    """A node (of each release) with one process holding 1,000 slices of
    100 bytes of one 1 MiB binary, received in one message."""
    node = nodes.start(otp)
    with attach(node.node, node.cookie.encode(), timeout=30) as remote:
        holder = str(remote.call("beam_probe_binaries", "slices",
                                 [SLICES, MIB]))
        binary = remote.call("erlang", "memory", [Atom("binary")])
        yield node, remote, holder, binary


def _json(node, *args: str) -> dict:
    r = run_here(*args, "--format", "json", node=node)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def _row(text: str, pid: str) -> list[str]:
    """A table's row for ``pid``, its cells split on runs of 2+ spaces (a
    figure with its unit, 1.0 MiB, is one cell)."""
    line = next(line for line in text.splitlines()
                if line.split(" ", 1)[0] == pid)
    return re.split(r" {2,}", line.strip())


def test_top_shows_and_ranks_the_bytes_a_process_holds(sliced):
    node, _remote, holder, binary = sliced
    frame = _json(node, "top", node.node, "--once", "--interval", "0.5",
                  "-N", "3", "--sort", "binary_memory")["frames"][0]
    first = frame["processes"][0]
    # Ranked first by the bytes it holds, which are 1 MiB: never more than
    # the node's binary memory, where recon's sum is 1,000 times that.
    assert first["pid"] == holder
    assert first["binary_memory"] == HELD <= binary < RECON
    text = run_here("top", node.node, "--once", "--interval", "0.5", "-N",
                    "3", "--sort", "binary_memory", node=node).stdout
    row = _row(text, holder)
    # PID NAME MEMORY BINARY▼ REDS MSGQ CURRENT FUNCTION
    assert row[3] == "1.0 MiB", row
    assert "GiB" not in " ".join(row)


def test_top_by_memory_shows_the_distinct_bytes_too(sliced):
    node, _remote, holder, _binary = sliced
    frame = _json(node, "top", node.node, "--once", "--interval", "0.5",
                  "-N", "500")["frames"][0]
    row = next(p for p in frame["processes"] if p["pid"] == holder)
    assert row["binary_memory"] == HELD


def test_proc_count_keeps_recons_figure_beside_the_distinct(sliced):
    node, remote, holder, _binary = sliced
    result = _json(node, "proc-count", node.node, "binary_memory", "1")
    reference = remote.call("beam_probe_reference", "proc_count",
                            [Atom("binary_memory"), 1])
    (first,) = result["processes"]
    # recon's own answer, exact (JSON keeps the raw integers).
    assert [(first["pid"], first["value"])] == \
        [(str(pid), value) for pid, value in reference]
    assert (first["pid"], first["value"], first["binary_distinct"]) == \
        (holder, RECON, HELD)
    text = run_here("proc-count", node.node, "binary_memory", "1",
                    node=node).stdout
    # pid, binary_memory, distinct, name, ...: in binary units.
    assert _row(text, holder)[1:3] == [human_bytes(RECON), "1.0 MiB"]
    assert human_bytes(RECON) == "1000.0 MiB"


def test_check_judges_the_bytes_held_and_says_so(sliced):
    node, _remote, holder, binary = sliced
    values = _json(node, "check", node.node)["nodes"][0]["values"]
    assert values["top_binary_memory"] == HELD <= binary
    # A threshold on one process's binaries does not fire on recon's sum.
    r = run_here("check", node.node, "--warn", "top_binary_memory=100MiB",
                 node=node)
    assert r.returncode == 0, r.stdout
    # ... and names the process that holds them (issue 38 item 1).
    assert f"top binary_memory 1.0 MiB (each binary once) in {holder}" \
        in r.stdout, r.stdout
    assert f"'top_binary_memory'={HELD}B;" in r.stdout


def test_text_tables_write_units_and_counts(sliced):
    """proc-count by memory in binary units, by message queue and heap
    words as counts; the JSON of both raw integers."""
    node, remote, _holder, _binary = sliced
    # A process with 12,345 messages waiting: a count past a thousand.
    waiting = remote.call("beam_probe_binaries", "slices", [1, 1000])
    remote.call("beam_probe_binaries", "flood", [waiting, 12345])
    waiting = str(waiting)
    by_memory = _json(node, "proc-count", node.node, "memory", "3")
    top = by_memory["processes"][0]
    assert isinstance(top["value"], int)
    text = run_here("proc-count", node.node, "memory", "3",
                    node=node).stdout
    assert _row(text, top["pid"])[1] == human_bytes(top["value"])
    assert re.fullmatch(r"\d+(\.\d)? (B|KiB|MiB|GiB)",
                        _row(text, top["pid"])[1])

    queues = _json(node, "proc-count", node.node, "message_queue_len", "1")
    assert queues["processes"][0]["pid"] == waiting
    assert queues["processes"][0]["value"] == 12345
    text = run_here("proc-count", node.node, "message_queue_len", "1",
                    node=node).stdout
    assert _row(text, waiting)[1] == "12,345"

    heaps = _json(node, "proc-count", node.node, "total_heap_size", "1")
    words = heaps["processes"][0]["value"]
    text = run_here("proc-count", node.node, "total_heap_size", "1",
                    node=node).stdout
    assert re.search(r"^pid +total_heap_size \(words\) ", text, re.M), text
    assert _row(text, heaps["processes"][0]["pid"])[1] == f"{words:,}"


def test_bin_leak_keeps_recons_count_and_shows_what_is_left(nodes, otp):
    """recon's delta is a count of references; beside it, the bytes the
    process still holds after the collection, each binary once."""
    node = nodes.start(otp)
    with attach(node.node, node.cookie.encode(), timeout=30) as remote:
        holder = str(remote.call("beam_probe_binaries", "keeps_one",
                                 [SLICES, MIB]))
    result = _json(node, "bin-leak", node.node, "1")
    (first,) = result["processes"]
    assert (first["pid"], first["delta"], first["binary_distinct"]) == \
        (holder, 1 - SLICES, HELD)
    # A second process, collected by the first run: its text row.
    with attach(node.node, node.cookie.encode(), timeout=30) as remote:
        holder = str(remote.call("beam_probe_binaries", "keeps_one",
                                 [SLICES, MIB]))
    text = run_here("bin-leak", node.node, "1", node=node).stdout
    # pid, delta, distinct, name, ...
    assert _row(text, holder)[1:3] == ["-999", "1.0 MiB"], text
    assert "distinct: the bytes each still holds" in text


def test_serves_top_series_ranks_the_bytes_held(sliced):
    """serve's binary ranking is top's figure, each binary once."""
    import urllib.parse

    from test_serve import samples, serve_env, serving

    node, _remote, _holder, binary = sliced
    with serving("--target", node.node, env=serve_env(node.cookie)) as s:
        code, _, body = s.get("probe?" + urllib.parse.urlencode(
            {"target": node.node, "module": "top", "n": "3"}))
    assert code == 200, body
    ranked = {series: value for series, value in samples(body.decode())
              .items() if series.startswith(
                  "beam_probe_top_process_binary_memory_bytes{")}
    first = next(value for series, value in ranked.items()
                 if 'rank="1"' in series)
    assert first == HELD <= binary < RECON, ranked


def test_proc_window_writes_units(sliced):
    """proc-window memory: a process born in the window listed with its
    memory at the end in binary units."""
    import threading
    import time

    node, _remote, _holder, _binary = sliced
    born: list[str] = []

    def bear() -> None:
        time.sleep(0.5)
        with attach(node.node, node.cookie.encode(), timeout=30) as remote:
            born.append(str(remote.call("beam_probe_binaries", "slices",
                                        [SLICES, MIB])))

    maker = threading.Thread(target=bear)
    maker.start()
    text = run_here("proc-window", node.node, "memory", "3", "3000",
                    node=node).stdout
    maker.join()
    assert "born inside the window" in text, text
    cell = _row(text.split("born inside the window", 1)[1], born[0])[1]
    # 1,000 slices on its heap, each a sub-binary and a reference: ~80 KiB.
    assert re.fullmatch(r"\d+\.\d (KiB|MiB)", cell), cell
