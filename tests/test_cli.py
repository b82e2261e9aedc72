"""The command line, run as a child process against real nodes."""

from __future__ import annotations

import json
import os
import socket

from conftest import one_line, run_here


def test_ping(target, otp):
    r = run_here("ping", target.node, node=target)
    assert r.returncode == 0, r.stderr
    assert f"OTP {otp}" in r.stdout and "round trip" in r.stdout
    j = json.loads(run_here("ping", target.node, "--format", "json",
                           node=target).stdout)
    assert j["node"] == target.node and j["otp_release"] == otp
    assert j["rtt_ms"] > 0


def test_memory_table_and_json(target):
    r = run_here("memory", target.node, node=target)
    assert r.returncode == 0, r.stderr
    assert "total" in r.stdout and "MiB" in r.stdout
    j = json.loads(run_here("memory", target.node, "--format", "json",
                           node=target).stdout)
    assert j["node"] == target.node
    assert j["memory"]["total"] >= j["memory"]["processes"] > 0
    assert set(j["memory"]) >= {"total", "processes", "binary", "ets",
                                "atom", "code", "system"}


def test_node_and_cookie_from_release_env(target):
    env = {"RELEASE_NODE": target.name, "RELEASE_COOKIE": target.cookie,
           "HOME": "/nonexistent"}
    r = run_here("memory", "--format", "json", env=env)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["node"] == target.node


def test_cookie_file_option(target):
    r = run_here("ping", "--node", target.node, "--cookie-file",
                target.cookie_file, env={"HOME": "/nonexistent"})
    assert r.returncode == 0, r.stderr




def test_wrong_cookie_is_one_line_exit_3(target):
    r = run_here("memory", target.node, env={"BEAM_PROBE_COOKIE": "wrong123"})
    line = one_line(r, 3, "cookie")
    assert "wrong123" not in line and target.cookie not in line


def test_unknown_node_exit_4(target):
    host = target.node.split("@")[1]
    r = run_here("memory", f"nobody@{host}", node=target)
    one_line(r, 4, "nobody", target.name)


def test_unknown_host_exit_4(target):
    r = run_here("ping", "a@no-such-host.invalid", node=target)
    one_line(r, 4, "unknown")


def test_connection_refused_exit_5(target):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    r = run_here("ping", "a@127.0.0.1", "--dist-port", str(port), node=target)
    one_line(r, 5, "refused")


def test_timeout_exit_6(target):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    try:
        r = run_here("ping", "a@127.0.0.1", "--dist-port",
                    str(server.getsockname()[1]), "--connect-timeout", "0.5",
                    node=target)
        one_line(r, 6, "0.5 s")
    finally:
        server.close()


def test_unsafe_cookie_file_refused(target, tmp_path):
    path = tmp_path / "cookie"
    path.write_text(target.cookie)
    os.chmod(path, 0o644)
    r = run_here("ping", target.node, "--cookie-file", str(path))
    one_line(r, 3, "chmod 400")


# --- output larger than a pipe holds, its reader gone (issue 37, 15) --------

def _crowded(nodes):
    """A node of a few thousand processes: proc-count's text of 3,000
    rows is ~300 KB, over the 64 KiB a pipe holds."""
    from beam_probe.node.remote import attach

    node = nodes.start("25")
    with attach(node.node, node.cookie.encode()) as remote:
        remote.call("beam_probe_workload", "start", [1, 1, 3000])
    return node


def test_a_reader_that_closes_the_pipe_early_is_exit_141(nodes):
    """As `beam-probe proc-count NODE memory 3000 | head -1` does: the
    reader takes one line and goes. Exit 141, quietly, with
    PYTHONUNBUFFERED=1 too (many containers set it), where the write
    that the closed pipe cut short was taken as whole: exit 0, the rest
    of the output lost, no word of it."""
    import subprocess
    import sys

    node = _crowded(nodes)
    for unbuffered in (True, False):
        for fmt in ("table", "json"):
            env = {k: v for k, v in os.environ.items()
                   if k != "PYTHONUNBUFFERED"}
            env["HOME"] = node.home
            if unbuffered:
                env["PYTHONUNBUFFERED"] = "1"
            probe = subprocess.Popen(
                [sys.executable, "-m", "beam_probe", "proc-count",
                 node.node, "memory", "3000", "--format", fmt],
                env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            first = probe.stdout.readline()
            assert first, "no output at all"
            probe.stdout.close()  # as head -1 does, with more to come
            _out, err = probe.communicate(timeout=120)
            assert (probe.returncode, err) == (141, b""), (unbuffered, fmt,
                                                           err)
    # The whole output, read to the end, is over what a pipe holds: the
    # case is the one the issue saw.
    whole = subprocess.run(
        [sys.executable, "-m", "beam_probe", "proc-count", node.node,
         "memory", "3000"], env=dict(os.environ, HOME=node.home,
                                     PYTHONUNBUFFERED="1"),
        capture_output=True, timeout=120)
    assert whole.returncode == 0 and len(whole.stdout) > 4 * 65536
