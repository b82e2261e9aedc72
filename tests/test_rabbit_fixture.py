"""tests/rabbit.py's broker ends with the tests however they end: a
SIGKILL of the process that started it (pytest killed by a CI timeout,
or SIGTERM, which runs no finally) stops it too."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import REPO
from rabbit import _alive, rabbit_missing

STARTER = """
import sys, time
sys.path.insert(0, "tests")
import conftest  # noqa: F401 (rabbit imports it: it goes first)
from rabbit import Rabbit
broker = Rabbit().start()
print(broker.pid, broker.base, flush=True)
time.sleep(600)
"""


@pytest.mark.skipif(rabbit_missing() is not None,
                    reason=str(rabbit_missing()))
def test_the_broker_dies_with_the_process_that_started_it():
    starter = subprocess.Popen([sys.executable, "-c", STARTER], cwd=REPO,
                               stdout=subprocess.PIPE, text=True)
    broker, base = 0, ""
    try:
        assert starter.stdout is not None
        line = starter.stdout.readline()  # once the broker runs
        assert line, "the starter ended without a broker"
        pid_text, base = line.split()
        broker = int(pid_text)
        assert _alive(broker)
        starter.send_signal(signal.SIGKILL)
        starter.wait(30)
        # A deadline only against a broker that never goes.
        deadline = time.monotonic() + 60
        while _alive(broker) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not _alive(broker), "the broker outlived its starter"
    finally:
        if starter.poll() is None:
            starter.kill()
            starter.wait(30)
        if broker and _alive(broker):
            os.kill(broker, signal.SIGKILL)
        if base.startswith("/tmp/"):
            subprocess.run(["rm", "-rf", "--", base], check=False)


PROBE_TEST = f"""
import sys
sys.path.insert(0, {os.path.join(REPO, "tests")!r})
from conftest import beam_dir  # noqa: E402,F401
from rabbit import rabbit  # noqa: E402,F401


def test_needs_the_broker(rabbit):
    pass
"""


def test_a_broker_that_does_not_start_is_an_error_not_a_skip(tmp_path):
    """A RabbitMQ root whose server exits at once (a broken unpack, a
    release that no longer boots) errs the tests that need it, with the
    broker's words: a skip let CI pass with every broker test unrun."""
    root = tmp_path / "root"
    sbin = root / "usr/lib/rabbitmq/lib/rabbitmq_server-3.10.8/sbin"
    sbin.mkdir(parents=True)
    server = sbin / "rabbitmq-server"
    server.write_text("#!/bin/sh\necho 'BOOT FAILED: no such app'\nexit 1\n")
    server.chmod(0o755)
    test = tmp_path / "test_needs_broker.py"
    test.write_text(PROBE_TEST)
    env = dict(os.environ, BEAM_PROBE_RABBITMQ_ROOT=str(root))
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         str(test)], cwd=str(tmp_path), env=env,
        capture_output=True, text=True, timeout=600)
    out = result.stdout + result.stderr
    assert "1 error" in out and "skipped" not in out, out[-3000:]
    assert "BOOT FAILED" in out, out[-3000:]
