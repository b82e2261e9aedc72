"""``beam-probe demo``: start a leaky demo node, probe it, stop it.

For a newcomer's first minute: it needs only Erlang installed (erl and
erlc on PATH), starts its own node with a private cookie, shows the real
commands and their output, and leaves nothing running.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from typing import Callable

from beam_probe.errors import ProbeError
from beam_probe.node.local import LocalNode, compile_erl

# How long the demo service runs before the first probe: enough requests
# (one every 20 ms) for the leak to stand out from a fresh node's noise.
WARM_UP_SECONDS = 2.0

# The tour: what to ask, in the order a leak hunt asks it, each step with
# what to look for in its output. Every sentence holds of every run (the
# service always leaks the same way: beam_probe_demo.erl, beside this
# file), and
# tests/test_demo.py checks each claim against the numbers the step
# printed. Each command's text is the same on a terminal and in a pipe
# (watch: --format table).
STEPS: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("1. Is memory growing? Watch it.",
     ("watch", "--interval", "0.5", "--count", "8", "--floor", "2",
      "--format", "table"),
     "Binary memory moves with the requests: about 3 MiB of 64 KiB "
     "requests arrive each second, and it falls back when a worker or the "
     "cache collects. The last line is memwatch's rule over these eight "
     "samples (five rises in a row, through each category's floor). On a "
     "real node, watch for minutes, with --gc holders to collect first, "
     "before blaming a leak."),
    ("2. Who holds it? Rank the processes.",
     ("proc-count", "binary_memory", "3"),
     "demo_cache holds the most refc binary memory: each key it keeps is "
     "a 128-byte slice of a request, and a slice pins its whole 64 KiB "
     "parent. binary_memory counts a binary once per reference, as recon "
     "does; distinct, once."),
    ("3. Would a collection free it?",
     ("bin-leak", "5"),
     "bin-leak collected the binary holders: the negative numbers are the "
     "references each dropped, and the memory lines show what came back. "
     "demo_cache dropped the most: it keeps 20 keys, and the keys it had "
     "let go of were still referenced from its heap until this "
     "collection."),
    ("4. Look closer at the suspect.",
     ("proc-info", "demo_cache"),
     "Just after that collection, its binary_count is about its 20 keys "
     "(a few more have arrived since), and its binary_memory is that many "
     "64 KiB requests: what the keys pin. Its heap is tiny. The mailbox and "
     "dictionary are never read."),
    ("5. How often does it collect?",
     ("trace-gc", "demo_cache", "--duration", "2"),
     "It collects several times a second, and mostly minor collections: "
     "they leave its old heap alone, so a key that reached the old heap "
     "keeps its 64 KiB request until a major collection, which its "
     "fullsweep_after setting puts off (bin-leak forced one above). The "
     "bin vheap column is the collector's count of the binaries it "
     "references, not proc-info's binary_memory."),
    ("6. What was made between snapshots, and kept?",
     ("leak-hunt", "--interval", "1"),
     "Three snapshots, one second apart, each after collecting the binary "
     "holders. Nothing new was made and kept: this leak is binaries held "
     "by long-lived processes, not new processes, tables or atoms. The "
     "snapshots are kept for diff (the demo's go with it)."),
    ("7. Leak or fragmentation?",
     ("alloc",),
     "The verdict line: here the memory is in use (held, as above), not "
     "fragmented carriers nor memory outside the allocators."),
    ("8. What in it holds them?",
     ("inspect", "demo_cache", "--width", "3"),
     "The cause. Measured inside demo_cache (its gen_server state is never "
     "copied out): its state record's cache field, a map of 20 keys, "
     "holds the binaries, and under pinned binaries are those keys: 20 "
     "slices of 128 bytes keeping 20 requests of 64 KiB alive. The "
     "fix is the line under them: cache binary:copy(Key), and each request "
     "is freed once its worker is done with it. The record's field names "
     "come from the module's debug_info; values are never shown."),
    ("9. Who fills it?",
     ("calls", "gen_server:cast/2", "--match", "demo_cache, _",
      "--duration", "2", "--format", "table"),
     "The code that puts the keys in: every gen_server:cast/2 to "
     "demo_cache comes from beam_probe_demo:feeder/2, at the line shown: "
     "the one that cuts the slice (copy it there, or in the cache). One "
     "cast a request, up to 50 a second. The match narrowed the trace to "
     "casts to demo_cache, on the node, where the tracer counted them and "
     "sent a summary each half second, never a message a call. `senders "
     "NODE demo_cache` names the same source as a process: demo_feeder."),
)


# The demo's leaky service: loaded only into the demo's own node, so it
# lives here, not among the helpers that run on inspected nodes.
SERVICE = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                       "beam_probe_demo.erl")


class DemoError(ProbeError):
    label = "demo"


def run_demo(echo: Callable[[str], None] = print, keep: bool = False) -> int:
    """The tour on a node of its own; with ``keep``, the node is left
    running for the newcomer to try commands by hand, and how to reach
    it and stop it is printed."""
    erl, erlc = shutil.which("erl"), shutil.which("erlc")
    if not erl or not erlc:
        raise DemoError("the demo needs Erlang's erl and erlc on PATH "
                        "(Debian: apt-get install erlang-base)")
    # The demo's folder: the module's beam, the node's private HOME and
    # leak-hunt's snapshots. A kept node keeps it: inspect reads the
    # record's field names from the beam the node loaded.
    workdir = tempfile.mkdtemp(prefix="beam-probe-demo-")
    node = None
    kept = False
    try:
        compile_erl([SERVICE], workdir, erlc)
        name = f"beam_probe_demo_{os.getpid()}"
        echo(f"Starting demo node {name}: a service that receives 64 KiB "
             "requests, hands\neach to one of 20 workers, and caches a "
             "key cut from each. Somewhere, binaries\nleak. Nine steps "
             "find where, why, and the code that does it, as you would\n"
             "on a real node.")
        node = LocalNode(name, erl=erl, code_paths=(workdir,),
                         eval_expr="beam_probe_demo:start()",
                         home_parent=workdir).start()
        time.sleep(WARM_UP_SECONDS)
        # The cookie reaches the commands through the node's private
        # HOME (~/.erlang.cookie), never through their arguments.
        assert node.home is not None  # set by start()
        env = dict(os.environ, HOME=node.home)
        # leak-hunt keeps its snapshots in a folder of the temporary
        # directory: the demo's own, removed with it.
        env["TMPDIR"] = workdir
        for title, command, note in STEPS:
            args = [command[0], node.node, *command[1:]]
            echo(f"\n{title}\n$ beam-probe {shlex.join(args)}")
            sys.stdout.flush()
            result = subprocess.run(
                [sys.executable, "-m", "beam_probe", *args], env=env)
            if result.returncode != 0:
                raise DemoError(f"beam-probe {command[0]} exited with "
                                f"{result.returncode}")
            echo("\n" + textwrap.fill(note, 76, initial_indent="> ",
                                      subsequent_indent="> "))
        if keep:
            echo(_kept(node, workdir))
            node, kept = None, True  # left running, on purpose
        else:
            echo(f"\nStopping {node.node}. Run `beam-probe demo --keep` to "
                 "keep it and try commands by hand.")
    finally:
        if node is not None:
            node.stop()
        if not kept:
            shutil.rmtree(workdir, ignore_errors=True)
    return 0


def _kept(node: LocalNode, workdir: str) -> str:
    return (f"\nThe demo node {node.node} keeps running (OS pid {node.pid})."
            f"\nIts cookie is in {node.cookie_file}; try, for example:\n\n"
            f"  beam-probe memory {node.node} --cookie-file "
            f"{node.cookie_file}\n"
            f"  beam-probe watch {node.node} --cookie-file "
            f"{node.cookie_file} --gc holders\n"
            f"  beam-probe inspect {node.node} demo_cache --cookie-file "
            f"{node.cookie_file}\n\n"
            f"Stop it when done (the folder holds its HOME and code):\n\n"
            f"  kill {node.pid} && rm -rf {workdir}\n")
