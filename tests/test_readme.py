"""The README's promises that can drift from the code."""

from __future__ import annotations

import os
import re
import shlex

import pytest

from beam_probe.errors import EXIT_CODES
from conftest import run_cli

README = os.path.join(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))), "README.md")


def test_exit_code_table_matches_the_code():
    text = open(README, encoding="utf-8").read()
    section = text.split("## Exit codes", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| (\d+) \| (.+?) \|$", section, re.M)
    assert [(int(code), meaning) for code, meaning in rows] == EXIT_CODES


def _workflow_commands() -> list[list[str]]:
    """The command lines of the README's "The leak hunt" block."""
    text = open(README, encoding="utf-8").read()
    section = text.split("## The leak hunt", 1)[1].split("\n## ", 1)[0]
    block = section.split("```sh", 1)[1].split("```", 1)[0]
    return [shlex.split(line.split("#", 1)[0]) for line in
            block.strip().splitlines()]


@pytest.fixture(scope="module")
def demo_node(session_nodes, tmp_path_factory):
    """A node running the demo's leaky service, as `beam-probe demo`
    starts one."""
    from beam_probe.demo import SERVICE
    from beam_probe.node.local import compile_erl

    beams = str(tmp_path_factory.mktemp("demo-beams"))
    compile_erl([SERVICE], beams)
    return session_nodes.start("25", code_paths=(beams,),
                               eval_expr="beam_probe_demo:start()")


def test_the_workflow_runs_against_the_demo_node(demo_node):
    commands = _workflow_commands()
    assert [c[1] for c in commands] == [
        "watch", "proc-count", "proc-count", "bin-leak", "leak-hunt",
        "proc-info", "trace-gc", "ets", "alloc", "watch"]
    # Shorter waits than a real hunt's, the commands otherwise as written.
    quick = {"--interval": "0.2", "--duration": "0.5"}
    for command in commands:
        assert command[0] == "beam-probe" and command[2] == "app@db1"
        args = [quick.get(prev, word) for prev, word in
                zip([""] + command[2:], command[2:])]
        args[0] = demo_node.node
        if command[1] == "watch":
            args += ["--count", "3"]
        r = run_cli(command[1], *args, node=demo_node)
        assert r.returncode == 0, (command, r.stderr)
        assert r.stdout.strip(), command
