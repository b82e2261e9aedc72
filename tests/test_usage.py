"""Arguments the command line refuses before it connects to anything: run
in this process (beam_probe.cli.invoke), with no node started. Each is one
line on stderr and exit code 2 (check: a BEAM UNKNOWN line on stdout, 3)."""

from __future__ import annotations

import pytest

from beam_probe.cli import invoke
from conftest import one_line

NOWHERE = "a@nowhere.invalid"


@pytest.fixture
def cli(capsys, monkeypatch):
    for var in ("BEAM_PROBE_NODE", "RELEASE_NODE", "BEAM_PROBE_COOKIE",
                "RELEASE_COOKIE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", "/nonexistent")

    def run(*argv: str) -> tuple[int, str, str]:
        code = invoke(list(argv))
        out, err = capsys.readouterr()
        return code, out, err
    return run




@pytest.mark.parametrize("argv, words", [
    (["memory", NOWHERE, "extra"], ["unexpected argument 'extra'"]),
    (["memory"], ["no node"]),
    (["proc-count", NOWHERE, "bogus", "3"], ["binary_memory"]),
    (["proc-count", NOWHERE, "memory"], ["--all"]),
    (["proc-count", NOWHERE, "memory", "3", "--all"], ["--all"]),
    (["bin-leak", NOWHERE, "0"], ["at least 1"]),
    (["bin-leak", NOWHERE, "many"], ["whole number"]),
    (["bin-leak", NOWHERE], ["expected [NODE] N"]),
    (["proc-count", NOWHERE, "memory", "10001"], ["at most 10000"]),
    (["bin-leak", NOWHERE, "20000"], ["at most 10000"]),
    (["proc-window", NOWHERE, "memory", "99999", "10"], ["at most 10000"]),
    (["proc-window", NOWHERE, "memory", "3", "3600001"],
     ["MILLISECONDS must be at most 3600000"]),
    (["proc-info", NOWHERE, "x" * 256], ["PID must look like"]),
    (["proc-info", NOWHERE, "bad\x01name"], ["PID must look like"]),
    (["ping", "a@"], ["not a node name"]),
    (["proc-info", NOWHERE, "#PID<0.1.0"], ["bracket is missing"]),
    (["proc-info", NOWHERE, "<0.1.0"], ["bracket is missing"]),
    (["proc-info", NOWHERE, "0.1.0>"], ["bracket is missing"]),
])
def test_refused_before_connecting(cli, argv, words):
    one_line(cli(*argv), 2, *words)


@pytest.mark.parametrize("argv", [
    ["proc-count", NOWHERE, "memory", "3", "--jobs", "-1"],
    ["ping", NOWHERE, "--timeout", "nope"],
    ["ping", NOWHERE, "--dist-port", "70000"],
    ["ping", NOWHERE, "--format", "yaml"],
])
def test_option_errors_are_usage_errors(cli, argv):
    # click's own errors too: one line, as ours, not its usage and hint.
    one_line(cli(*argv), 2, "beam-probe: usage: ", "--help")


@pytest.mark.parametrize("argv, words", [
    (["watch", NOWHERE, "--interval", "0"], ["--interval"]),
    (["ping", NOWHERE, "--dist-port", ""], ["--dist-port"]),
    (["--no-such-option"], ["--no-such-option"]),
    (["no-such-command"], ["no-such-command"]),
])
def test_click_usage_errors_are_one_line(cli, argv, words):
    one_line(cli(*argv), 2, *words)


@pytest.mark.parametrize("value", ["inf", "nan", "1e308", "-1", "0"])
def test_absurd_timeouts_are_usage_errors(cli, value):
    for option in ("--timeout", "--connect-timeout"):
        one_line(cli("ping", NOWHERE, option, value), 2, "seconds")


@pytest.mark.parametrize("argv", [
    ["--no-such-option"], ["--warn", "bogus=1"], ["--crit", "binary=80%"],
    ["--trend", "3"], ["--warn", "binary_share=150%"],
    ["--warn", "binary=2GB", "--crit", "binary=1GB"], ["--timeout", "nan"],
    ["extra"]])
def test_check_says_unknown_on_stdout(cli, argv):
    code, out, _err = cli("check", NOWHERE, *argv)
    assert code == 3 and out.startswith("BEAM UNKNOWN - "), (argv, out)
    assert len(out.strip().splitlines()) == 1


def _examples(help_text: str) -> list[list[str]]:
    """The command lines under a help's "Examples:"."""
    import shlex

    block = help_text.split("Examples:", 1)[1]
    lines, pending = [], ""
    for line in block.splitlines()[1:]:
        if not line.startswith("  ") or not line.strip():
            break
        if line.rstrip().endswith("\\"):  # continued on the next line
            pending += line.rstrip()[:-1] + " "
            continue
        words = shlex.split(pending + line)
        pending = ""
        # VAR=value words before the command, as in a shell.
        while words and "=" in words[0] and words[0] != "beam-probe":
            words.pop(0)
        # What the shell does with the output is the shell's.
        for i, word in enumerate(words):
            if word in (">", ">>", "|"):
                del words[i:]
                break
        lines.append(words)
    return lines


def test_every_help_has_examples_that_parse(cli):
    """Each command's help shows examples, and each example is a command
    line that beam-probe accepts: its options exist, its arguments read
    and pass the probe's checks (all of it short of connecting)."""
    from beam_probe.cli.app import main
    from beam_probe.cli.commands import DECLARED
    from beam_probe.cli.declare import Declaration

    declared = {d.name: d for d in DECLARED}
    with main.make_context("beam-probe", []) as top:
        names = main.list_commands(top)
    assert {"watch", "leak-hunt", "check", "demo", "help"} <= set(names)
    for name in names:
        code, out, _err = cli(name, "--help")
        assert code == 0 and out.startswith(f"Usage: beam-probe {name}"), \
            name
        examples = _examples(out) if "Examples:" in out else []
        if name == "demo":  # no arguments to show
            continue
        assert examples, f"{name}'s help has no examples"
        for words in examples:
            assert words[:2] == ["beam-probe", name], (name, words)
            command = main.get_command(top, name)
            assert command is not None
            with command.make_context(name, words[2:]) as ctx:
                found = declared.get(name)
                if isinstance(found, Declaration):
                    from types import SimpleNamespace

                    _node, values = found.parse(ctx.params["args"])
                    if found.check is not None and found.kind != "offline":
                        found.check(SimpleNamespace(**ctx.params, **values))


def test_the_examples_checker_refuses_a_bad_example(cli):
    """The check above can fail: an example with an option no command
    has, or a count out of range, is caught."""
    import click

    from beam_probe.cli.app import main
    from beam_probe.cli.commands import DECLARED
    from beam_probe.errors import UsageError

    with main.make_context("beam-probe", []) as top:
        memory, declared = (main.get_command(top, "memory"),
                            main.get_command(top, "bin-leak"))
    assert memory is not None and declared is not None
    with pytest.raises(click.UsageError):
        memory.make_context("memory", ["app@db1", "--nosuch"])
    bin_leak = next(d for d in DECLARED if d.name == "bin-leak")
    with declared.make_context(
            "bin-leak", ["app@db1", "0"]) as ctx:
        from types import SimpleNamespace

        _node, values = bin_leak.parse(ctx.params["args"])
        with pytest.raises(UsageError):
            bin_leak.check(SimpleNamespace(**ctx.params, **values))


def test_the_cookie_help_names_the_environment(cli):
    code, out, _err = cli("memory", "--help")
    assert code == 0 and "Examples" in out and "RELEASE_COOKIE" in out
