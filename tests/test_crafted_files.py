"""Files made to hurt: snapshots and histories whose counts, types or
compression claim what their bytes cannot hold. Each gives one line and
exit 2 (or a correct answer), quickly and in little memory; never exit 1,
which is a bug of ours.

The fixed cases run the real command line in a child process, whose peak
memory is measured; the property-based ones mutate the real files in
tests/data and run the command line in process.
"""

from __future__ import annotations

import json
import os
import struct
import sys
import time
import zlib

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from beam_probe.cli.app import invoke
from conftest import run_measured

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
REAL = os.path.join(DATA, "format2.snapshot")
LIMIT_SECONDS = 2.0
LIMIT_BYTES = 100 * 2**20


def _parts(path: str = REAL) -> tuple[bytes, dict, bytes]:
    """The magic line, the header, and the sections of a snapshot."""
    data = open(path, "rb").read()
    magic_end = data.index(b"\n") + 1
    header_end = data.index(b"\n", magic_end) + 1
    return data[:magic_end], json.loads(data[magic_end:header_end]), \
        data[header_end:]


def _snapshot(folder, name: str, header, body: bytes | None = None) -> str:
    magic, _real, sections = _parts()
    text = header if isinstance(header, bytes) else json.dumps(
        header).encode()
    path = os.path.join(folder, name)
    with open(path, "wb") as f:
        f.write(magic + text + b"\n" + (sections if body is None else body))
    return path


def _compressed(term: bytes) -> bytes:
    return b"P" + struct.pack(">I", len(term)) + zlib.compress(term, 9)


def _section(kind: bytes, term: bytes) -> bytes:
    return kind + struct.pack(">I", len(term)) + term


def _many_rows(rows: int) -> bytes:
    """A process section whose columns claim ``rows`` rows, each alike:
    a few KB compressed."""
    def binary(data: bytes) -> bytes:
        return b"m" + struct.pack(">I", len(data)) + data

    def atom(name: str) -> bytes:
        return b"w" + bytes([len(name)]) + name.encode()

    one = b"\x01" + bytes(7)
    pid = b"\x83X" + atom("nonode@nohost") + struct.pack(">III", 1, 0, 0)
    index = binary(one * rows)
    fields = [atom(k) + binary(one * rows) for k in (
        "memory", "binary_bytes", "binary_count", "message_queue_len")]
    fields += [atom("pids") + binary(pid * rows),
               atom("initial_call") + b"h\x02l\x00\x00\x00\x01h\x03"
               + atom("m") + atom("f") + b"a\x00j" + index,
               atom("groups") + b"h\x02l\x00\x00\x00\x01h\x02" + atom("name")
               + atom("x") + b"j" + index,
               atom("names") + b"h\x02jj" + index]
    term = b"t" + struct.pack(">I", len(fields)) + b"".join(fields)
    return b"\x83" + _compressed(term)


def _nested(levels: int, padding: int) -> bytes:
    """Compressed terms inside compressed terms, each under 64 MiB."""
    term = b"a\x01"
    for _ in range(levels):
        term = _compressed(b"h\x02" + term + b"m" + struct.pack(
            ">I", padding) + bytes(padding))
    return b"\x83" + term


END = b"E\x00\x00\x00\x00"


HEADER_CASES = [("atom_count=1e12", "atom_count", 10**12),
                ("atom_count=1e9", "atom_count", 10**9),
                ("atom_count=1e400", "atom_count", 10**400),
                ("atom_count=x", "atom_count", "x"),
                ("epoch=abc", "epoch", "abc"),
                ("epoch=1e308", "epoch", 1e308),
                ("epoch=-1e18", "epoch", -1e18),
                ("wordsize='8'", "wordsize", "8"),
                ("creation=[1]", "creation", [1])]


def crafted(folder) -> dict[str, str]:
    _magic, header, _body = _parts()
    cases = {}
    for name, key, value in HEADER_CASES:
        cases[name] = _snapshot(folder, name, dict(header, **{key: value}))
    cases["sample.total=abc"] = _snapshot(folder, "sample-total", dict(
        header, sample=dict(header["sample"], total="abc")))
    cases["deep-json-header"] = _snapshot(folder, "deep", b"[" * 100_000
                                          + b"]" * 100_000)
    cases["nested-compression"] = _snapshot(
        folder, "nested", header, _section(b"P", _nested(3, 60 * 2**20))
        + END)
    rows = _section(b"P", _many_rows(650_000))
    cases["40x650k-rows"] = _snapshot(
        folder, "rows", header, rows * 40 + _section(b"T", b"\x83j")
        + _section(b"O", b"\x83j") + END)
    cases["6000-rows-in-a-chunk"] = _snapshot(
        folder, "chunk", header, _section(b"P", _many_rows(6000)) * 3 + END)
    return cases


@pytest.fixture(scope="module")
def crafted_files(tmp_path_factory):
    return crafted(str(tmp_path_factory.mktemp("crafted")))


@pytest.mark.parametrize("case", [name for name, _k, _v in HEADER_CASES]
                         + ["sample.total=abc", "deep-json-header",
                            "nested-compression", "40x650k-rows",
                            "6000-rows-in-a-chunk"])
def test_a_crafted_snapshot_is_one_line_quickly(crafted_files, case):
    path = crafted_files[case]
    code, out, err, elapsed, peak = run_measured(
        [sys.executable, "-m", "beam_probe", "diff", REAL, path],
        dict(os.environ))
    lines = err.strip().splitlines()
    assert code == 2, (code, err)
    assert len(lines) == 1 and "damaged" in lines[0], err
    assert elapsed < LIMIT_SECONDS + 1.5  # the interpreter's start included
    assert peak < LIMIT_BYTES, f"peak RSS {peak / 2**20:.0f} MB"


def test_a_huge_atom_count_is_refused_even_when_it_is_an_int(crafted_files):
    """10^9 is a count the header's type allows; still no loop over it."""
    started = time.monotonic()
    assert invoke(["diff", REAL, crafted_files["atom_count=1e9"]]) == 2
    assert time.monotonic() - started < LIMIT_SECONDS


# -- mutations of real files -------------------------------------------------

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.sampled_from(
        [10**400, -10**18, 2**63, 2**31, 10**12]) | st.floats() | st.text(
        max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
        st.text(max_size=8), inner, max_size=4), max_leaves=8)
HEADER_KEYS = ["format", "node", "otp_release", "time", "epoch", "gc",
               "wordsize", "items", "sample", "atom_count", "creation",
               "elixir", "atoms_from", "atoms", "chunks"]


def _diff_exit(capsys, *paths: str) -> int:
    started = time.monotonic()
    code = invoke(["diff", *paths, "--format", "json"])
    out, err = capsys.readouterr()
    assert time.monotonic() - started < LIMIT_SECONDS
    assert code in (0, 2), (code, err)
    if code == 2:
        assert len(err.strip().splitlines()) == 1, err
    else:
        assert "change" in json.loads(out)
    return code


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(key=st.sampled_from(HEADER_KEYS), value=JSON_VALUES)
def test_any_header_value_is_an_answer_or_exit_2(tmp_path, capsys, key,
                                                 value):
    _magic, header, _body = _parts()
    if key == "sample" or (key in header["sample"] and value is None):
        header["sample"] = dict(header["sample"], total=value)
    else:
        header[key] = value
    path = _snapshot(str(tmp_path), "mutated", header)
    _diff_exit(capsys, REAL, path)


@settings(max_examples=80, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.data())
def test_damaged_bytes_are_an_answer_or_exit_2(tmp_path, capsys, data):
    raw = bytearray(open(REAL, "rb").read())
    how = data.draw(st.sampled_from(["flip", "truncate", "length"]))
    if how == "flip":
        for _ in range(data.draw(st.integers(1, 8))):
            at = data.draw(st.integers(0, len(raw) - 1))
            raw[at] = data.draw(st.integers(0, 255))
    elif how == "truncate":
        del raw[data.draw(st.integers(0, len(raw) - 1)):]
    else:
        # A section's length field: the first section follows the header.
        at = raw.index(b"\n", raw.index(b"\n") + 1) + 2
        raw[at:at + 4] = struct.pack(">I", data.draw(
            st.integers(0, 2**32 - 1)))
    path = tmp_path / "damaged.snapshot"
    path.write_bytes(bytes(raw))
    _diff_exit(capsys, REAL, str(path))


RECORD = {"time": "2026-11-23T10:00:00Z", "epoch": 1795381440.0,
          "node": "app@db1", "total": 100_000, "processes": 50_000,
          "binary": 10_000, "ets": 5_000}


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(key=st.sampled_from(["epoch", "total", "binary", "node", "time"]),
       value=JSON_VALUES | st.sampled_from([1e308, -1e18, float("nan"),
                                            float("inf")]))
def test_history_lines_of_any_value_plot_or_exit_2(tmp_path, capsys, key,
                                                   value):
    from beam_probe.history import records as history

    lines = [json.dumps(dict(RECORD, epoch=RECORD["epoch"] + i,
                             binary=RECORD["binary"] + i)) for i in range(6)]
    lines[3] = json.dumps(dict(RECORD, **{key: value}))
    path = tmp_path / "h.jsonl"
    path.write_text("\n".join(lines) + "\n")
    for fmt in ("json", "table"):
        started = time.monotonic()
        code = invoke(["plot", str(path), "--format", fmt])
        out, err = capsys.readouterr()
        assert code in (0, 2), (code, err)
        assert time.monotonic() - started < LIMIT_SECONDS
    records, _skipped = history.load_tail(str(path), ["app@db1"], 6)
    history.trend(records["app@db1"], 5)


def test_a_closed_stdout_is_one_line(tmp_path):
    import subprocess

    path = tmp_path / "h.jsonl"
    path.write_text(json.dumps(RECORD) + "\n")
    r = subprocess.run([sys.executable, "-m", "beam_probe", "plot",
                        str(path)], stdout=None, stderr=subprocess.PIPE,
                       text=True, preexec_fn=lambda: os.close(1))
    assert r.returncode == 11, r.stderr
    assert r.stderr.strip() == "beam-probe: output: standard output is " \
        "closed"


@pytest.mark.parametrize("node", ["x@" + "h" * 10_000, "n" * 100_000,
                                  "a@" + "b" * 64 + ".com", "a b@host",
                                  "a@host\x1b[31m"])
def test_a_node_name_no_node_can_have_is_a_usage_error(node):
    import subprocess

    env = dict(os.environ, BEAM_PROBE_COOKIE="c", BEAM_PROBE_NODE=node)
    r = subprocess.run([sys.executable, "-m", "beam_probe", "ping"],
                       env=env, capture_output=True, text=True, timeout=30)
    assert r.returncode == 2, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and \
        "not a node name" in r.stderr
    assert len(r.stderr) < 300
