"""What a newcomer trips over first: beam-probe with no arguments, help,
shell completion, tables of nothing but zeros, one rule for byte units."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from conftest import run_cli


def test_no_arguments_is_the_overview_and_success():
    r = run_cli()
    assert r.returncode == 0, r.stderr
    assert "The leak hunt, in order:" in r.stdout and "Commands:" in r.stdout
    assert "demo" in r.stdout


def test_help_command_shows_a_commands_help():
    r = run_cli("help", "proc-count")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("Usage: beam-probe proc-count")
    assert run_cli("help").stdout == run_cli().stdout
    bad = run_cli("help", "nosuch")
    assert bad.returncode == 2 and bad.stderr.strip().count("\n") == 0
    assert "no command 'nosuch'" in bad.stderr


def _complete(words: str, index: int) -> list[str]:
    env = dict(os.environ, COMP_WORDS=words, COMP_CWORD=str(index),
               _BEAM_PROBE_COMPLETE="bash_complete")
    out = subprocess.run([sys.executable, "-c",
                          "from beam_probe.cli.app import main; "
                          "main(prog_name='beam-probe')"],
                         env=env, capture_output=True, text=True).stdout
    return [line.split(",", 1)[1] for line in out.splitlines() if line]


def test_shell_completion_knows_commands_attributes_and_options():
    assert _complete("beam-probe proc-c", 1) == ["proc-count"]
    assert _complete("beam-probe proc-count app@db1 bin", 3) == \
        ["binary_memory"]
    assert "--gc" in _complete("beam-probe watch app@db1 --g", 3)
    assert _complete("beam-probe trace-gc app@db1 --max-e", 3) == \
        ["--max-events"]
    # The script the README tells users to install.
    script = subprocess.run(
        [sys.executable, "-c", "from beam_probe.cli.app import main; "
         "main(prog_name='beam-probe')"],
        env=dict(os.environ, _BEAM_PROBE_COMPLETE="bash_source"),
        capture_output=True, text=True).stdout
    assert "complete" in script and "_BEAM_PROBE_COMPLETE" in script


def test_all_zero_tables_say_so_in_one_line(target):
    r = run_cli("proc-count", target.node, "message_queue_len", "5",
                node=target)
    assert r.returncode == 0, r.stderr
    assert re.fullmatch(rf"{re.escape(target.node)}: message_queue_len is "
                        r"0 for every one of the \d+ processes",
                        r.stdout.strip()), r.stdout
    r = run_cli("proc-window", target.node, "message_queue_len", "5", "50",
                node=target)
    assert r.returncode == 0, r.stderr
    assert "changed over the window (an idle node): nothing to rank" \
        in r.stdout


def test_bytes_are_shown_in_binary_units_everywhere(target):
    memory = run_cli("memory", target.node, node=target).stdout
    check = run_cli("check", target.node, "--warn", "total=1KB",
                    node=target).stdout
    units = re.compile(r"\d(?:\.\d)? ?(KiB|MiB|GiB|KB|MB|GB)\b")
    assert set(units.findall(memory)) <= {"KiB", "MiB", "GiB"}
    head = check.split("|")[0]
    # The threshold is echoed as the user wrote it (issue 38: 100MB, not
    # 95.4MiB); every figure of the node's is in binary units.
    assert ">= 1KB (warning)" in head, head
    figures = head.replace(">= 1KB", "")
    assert units.findall(figures) and \
        set(units.findall(figures)) <= {"KiB", "MiB", "GiB"}
    # A count and a byte figure never share a name: 'processes' is bytes.
    assert "process_count " in head and "processes " not in head


def test_bin_leak_with_nothing_dropped_says_so():
    from beam_probe.text.node import bin_leak_text
    from beam_probe.text.syntax import ERLANG

    memory = {"total": 1000, "binary": 100}
    row = {"pid": "<0.1.0>", "delta": 0, "name": None,
           "current_function": None, "initial_call": None, "exited": False}
    text = bin_leak_text({
        "node": "a@b", "scanned": 40, "holders": 2, "collected": 2,
        "memory_before": memory, "memory_after": memory,
        "processes": [row, dict(row, pid="<0.2.0>")]}, ERLANG)
    assert text.endswith("no process dropped a refc binary reference when "
                         "collected: nothing held one idle")
    assert "<0.1.0>" not in text
