"""Arguments the command line refuses before it connects to anything: run
in this process (beam_probe.cli.invoke), with no node started. Each is one
line on stderr and exit code 2 (check: a BEAM UNKNOWN line on stdout, 3)."""

from __future__ import annotations

import pytest

from beam_probe.cli import invoke

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


def one_line(result, code, *words):
    got, out, err = result
    assert got == code, (got, out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    for word in words:
        assert word in lines[0], lines[0]


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


def test_help_has_examples(cli):
    code, out, _err = cli("memory", "--help")
    assert code == 0 and "Examples" in out and "RELEASE_COOKIE" in out
    for command in ("ping", "memory", "bin-leak", "proc-count",
                    "proc-window", "proc-info", "check", "demo"):
        code, out, _err = cli(command, "--help")
        assert code == 0 and out.startswith("Usage: "), command
