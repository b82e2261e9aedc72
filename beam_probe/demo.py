"""``beam-probe demo``: start a leaky demo node, probe it, stop it.

For a newcomer's first minute: it needs only Erlang installed (erl and
erlc on PATH), starts its own node with a private cookie, shows the real
commands and their output, and leaves nothing running.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time

from .errors import ProbeError
from .localnode import LocalNode, compile_erl
from .helpers import helper_path

# How long the demo service runs before the first probe: enough requests
# (one every 20 ms) for the leak to stand out from a fresh node's noise.
WARM_UP_SECONDS = 2.0

COMMANDS = (
    ("ping",),
    ("memory",),
    ("proc-count", "binary_memory", "3"),
    ("bin-leak", "5", "--dry-run"),
    ("bin-leak", "5"),
    ("proc-info", "demo_cache"),
    ("proc-window", "reductions", "3", "500"),
    # Without collections the binary floor rises: a leak, or garbage no
    # one collects? With the binary holders collected, it stays flat: the
    # idle workers' garbage, which bin-leak found above.
    ("watch", "--interval", "0.5", "--count", "8", "--floor", "2"),
    ("watch", "--interval", "0.5", "--count", "8", "--gc", "holders"),
)


class DemoError(ProbeError):
    label = "demo"


def run_demo(echo=print) -> int:
    erl, erlc = shutil.which("erl"), shutil.which("erlc")
    if not erl or not erlc:
        raise DemoError("the demo needs Erlang's erl and erlc on PATH "
                        "(Debian: apt-get install erlang-base)")
    workdir = tempfile.mkdtemp(prefix="beam-probe-demo-")
    try:
        compile_erl([helper_path("beam_probe_demo")], workdir, erlc)
        name = f"beam_probe_demo_{os.getpid()}"
        echo(f"Starting demo node {name} (a service that leaks refc "
             "binaries)...")
        with LocalNode(name, erl=erl, code_paths=(workdir,),
                       eval_expr="beam_probe_demo:start()") as node:
            time.sleep(WARM_UP_SECONDS)
            # The cookie reaches the commands through the node's private
            # HOME (~/.erlang.cookie), never through their arguments.
            env = dict(os.environ, HOME=node.home)
            for command in COMMANDS:
                args = [command[0], node.node, *command[1:]]
                echo(f"\n$ beam-probe {' '.join(args)}")
                sys.stdout.flush()
                result = subprocess.run(
                    [sys.executable, "-m", "beam_probe", *args], env=env)
                if result.returncode != 0:
                    raise DemoError(f"beam-probe {command[0]} exited with "
                                    f"{result.returncode}")
            echo(f"\nStopping {node.node}.")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0
