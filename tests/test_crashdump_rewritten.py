"""A dump rewritten while it is read (the hostile round: a node that
crashed again to the same path killed `crashdump` and `proc-count DUMP`
with SIGBUS, exit 135 and no line). The node rewrites erl_crash.dump in
place (truncated, then written anew); beam-probe reads the file with
os.pread, never mapped, and a read that comes back short or a file that
changed since it was opened is one line, exit 2. On real dumps of real
deaths (tests/test_crashdump.py makes them), OTP 25, 27, 28.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading

import pytest

from beam_probe.crashdump.reader import Dump, DumpChanged
from conftest import one_line, run_here
from test_crashdump import deaths  # noqa: F401  (the fixture)


@pytest.fixture
def two(deaths, otp, tmp_path):  # noqa: F811
    """A copy of an eheap death to read, and a halt death to write over
    it, as a node that dies again writes its dump."""
    copy = str(tmp_path / "erl_crash.dump")
    shutil.copy(deaths(otp, "eheap")["dump"], copy)
    return copy, deaths(otp, "halt")["dump"]


def _rewrite(path: str, other: str, keep: int = 0) -> None:
    """What the node does: the same file truncated, then written anew
    (here: the first ``keep`` bytes of another dump, or all of it)."""
    with open(other, "rb") as f:
        data = f.read()
    with open(path, "r+b") as f:
        f.truncate(0)
        f.write(data[:keep] if keep else data)


def test_a_dump_truncated_under_a_reader_is_one_line(two):
    copy, _ = two
    with Dump(copy) as dump:  # the head read, the heaps not yet
        os.truncate(copy, dump.size // 2)
        with pytest.raises(DumpChanged, match="changed while it was read"):
            dump.count("proc_heap")  # reads on, to the end


def test_a_dump_replaced_under_a_reader_is_one_line(two):
    copy, other = two
    with Dump(copy) as dump:
        _rewrite(copy, other)
        with pytest.raises(DumpChanged, match="changed while it was read"):
            dump.count("proc_heap")


@pytest.mark.parametrize("command", [("crashdump",), ("proc-count", "memory", "3"),
                                     ("proc-count", "stack_size", "1")])
def test_commands_on_a_dump_rewritten_mid_read(two, command):
    """The commands the tester ran, in a process of their own (a SIGBUS
    is a signal), while the dump is rewritten again and again: each ends
    with its answer (read between two rewrites) or one line and exit 2,
    never a signal; and at least one met a rewrite (exit 2)."""
    copy, other = two
    with open(copy, "rb") as f:
        original = f.read()
    stop = threading.Event()

    def rewriter() -> None:
        # Truncated and rewritten in pieces, as a dying node writes:
        # the original back, then the other dump, again and again.
        while not stop.is_set():
            for data in (original, open(other, "rb").read()):
                with open(copy, "r+b") as f:
                    f.truncate(0)
                    for at in range(0, len(data), 1 << 20):
                        f.write(data[at:at + (1 << 20)])
                        f.flush()
                        if stop.is_set():
                            return
    thread = threading.Thread(target=rewriter, daemon=True)
    thread.start()
    met = 0
    try:
        # Until one run meets a rewrite, however long the machine takes
        # to: a loaded machine read six whole copies between rewrites
        # (the 1 MiB writes outran the reads). Forty runs is the bound.
        for _ in range(40):
            if met:
                break
            r = subprocess.run([sys.executable, "-m", "beam_probe", *command[:1],
                                copy, *command[1:]], capture_output=True,
                               text=True, timeout=300)
            assert r.returncode in (0, 2), (r.returncode, r.stderr[-2000:])
            if r.returncode == 2:
                line = one_line((r.returncode, r.stdout, r.stderr), 2)
                if "changed while it was read" not in line:
                    # Read between a truncation and its rewrite: a file
                    # that is not (yet) a whole dump.
                    assert "crash dump" in line, line
                met += 1
    finally:
        stop.set()
        thread.join(30)
    assert met >= 1


def test_a_whole_copy_still_reads(two):
    copy, _ = two
    r = run_here("proc-count", copy, "memory", "3")
    assert r.returncode == 0, r.stderr
