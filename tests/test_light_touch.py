"""A light touch on the target: atoms stable over runs, nothing loaded, no
mailbox or dictionary read, the cookie never shown."""

from __future__ import annotations

import glob
import json
import os
import re

from beam_probe.erldist.terms import Atom
from conftest import REPO, run_cli

COMMANDS = (["ping"], ["memory"], ["bin-leak", "3"], ["bin-leak", "3",
            "--dry-run"], ["proc-count", "memory", "3"],
            ["proc-count", "binary_memory", "3"],
            ["proc-window", "reductions", "3", "50"],
            ["proc-info", "code_server"], ["check"])


def _run_all(node):
    for args in COMMANDS:
        r = run_cli(args[0], node.node, *args[1:], env={"HOME": node.home})
        assert r.returncode == 0, (args, r.stderr)


def test_atom_count_stays_where_the_first_run_left_it(target, remote):
    _run_all(target)
    first = remote.call("erlang", "system_info", [Atom("atom_count")])
    loaded = {str(m) for m, _ in remote.call("code", "all_loaded")}
    _run_all(target)
    _run_all(target)
    assert remote.call("erlang", "system_info", [Atom("atom_count")]) == first
    assert {str(m) for m, _ in remote.call("code", "all_loaded")} == loaded


def test_no_mailbox_or_dictionary_is_ever_asked_for():
    """The process_info items that read a mailbox or a dictionary appear
    nowhere in what we send to a node."""
    sources = glob.glob(os.path.join(REPO, "beam_probe", "**", "*.py"),
                        recursive=True)
    sources.append(os.path.join(REPO, "erl_helpers", "beam_probe_scan.erl"))
    for path in sources:
        text = open(path, encoding="utf-8").read()
        for item in ("messages", "dictionary"):
            for match in re.finditer(rf"Atom\(\"{item}\"\)|\b{item}\b[,\]]",
                                     text):
                raise AssertionError(f"{path} asks for {item}: "
                                     f"{match.group(0)}")


def test_cookie_never_shown(target):
    secret = "sekrit-cookie-do-not-show"
    env = {"HOME": target.home, "BEAM_PROBE_COOKIE": secret,
           "BEAM_PROBE_DEBUG": "1"}
    for args in (["ping", target.node], ["memory", target.node, "--format",
                                         "json"],
                 ["check", target.node, "--format", "json"]):
        r = run_cli(*args, env=env)
        assert r.returncode != 0
        assert secret not in r.stdout and secret not in r.stderr, args
    r = run_cli("ping", target.node, "--cookie", secret,
                env={"HOME": target.home})
    assert r.returncode == 3 and secret not in r.stderr
    # Nothing we start on anyone's behalf gets a cookie in its arguments.
    for path in glob.glob(os.path.join(REPO, "beam_probe", "**", "*.py"),
                          recursive=True) + [os.path.join(REPO, "docker",
                                                          "compose.yaml")]:
        assert "-setcookie" not in open(path).read(), path


def test_max_gc_and_dry_run_in_json(target):
    r = run_cli("bin-leak", target.node, "3", "--dry-run", "--max-gc", "2",
                "--format", "json", env={"HOME": target.home})
    assert r.returncode == 0, r.stderr
    j = json.loads(r.stdout)
    assert j["dry_run"] is True and j["collected"] == 0
    assert j["would_collect"] == min(2, j["holders"])
