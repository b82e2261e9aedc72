"""One query, whole process: `beam-probe memory NODE` against `erl -hidden`.

Target (issue 2): median wall time at most 0.35x that of the erl one-liner
cron jobs use today. Run: python tests/bench_startup.py [RUNS]
"""

from __future__ import annotations

import os
import shutil
import sys

from benchlib import report, start_node, time_commands


def main(runs: int = 21) -> int:
    script = os.path.join(os.path.dirname(sys.executable), "beam-probe")
    if not os.path.exists(script):
        script = shutil.which("beam-probe")
    with start_node() as node:
        env = dict(os.environ, HOME=node.home)
        expr = (f"io:format(\"~p~n\", [rpc:call('{node.node}', erlang, "
                "memory, [])]), halt().")
        ours, base = time_commands(
            [script, "memory", node.node],
            ["erl", "-sname", f"bpb{os.getpid()}", "-hidden", "-noshell",
             "-eval", expr], env, runs)
    ok = report("memory, whole process (median of %d)" % runs, ours, base,
                0.35)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(*(int(a) for a in sys.argv[1:])))
