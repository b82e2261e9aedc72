"""A light touch on the target: atoms stable over runs, nothing loaded, no
mailbox or dictionary read, the cookie never shown."""

from __future__ import annotations

import glob
import json
import os

import pytest

from beam_probe.erldist.terms import Atom, ExportFun
from conftest import REPO, hold_every_pool_name, run_cli

COMMANDS = (["ping"], ["memory"], ["bin-leak", "3"], ["bin-leak", "3",
            "--dry-run"], ["proc-count", "memory", "3"],
            ["proc-count", "binary_memory", "3"],
            ["proc-window", "reductions", "3", "50"],
            ["proc-info", "code_server"], ["check"],
            ["watch", "--count", "2", "--interval", "0.2", "--gc", "holders"],
            ["watch", "--count", "1", "--gc", "all"],
            ["leak-hunt", "--interval", "0", "--snapshots", "2"],
            ["alloc"], ["ets", "5"], ["ets", "5", "--sort", "size"],
            ["trace-gc", "code_server", "--duration", "0.3"])


def _run_all(node, env=None):
    for args in COMMANDS:
        r = run_cli(args[0], node.node, *args[1:],
                    env={"HOME": node.home, **(env or {})})
        assert r.returncode == 0, (args, r.stderr)


@pytest.mark.slow
def test_atom_count_stays_where_the_first_run_left_it(target, remote):
    hold_every_pool_name(target)
    _run_all(target)
    first = remote.call("erlang", "system_info", [Atom("atom_count")])
    loaded = {str(m) for m, _ in remote.call("code", "all_loaded")}
    _run_all(target)
    _run_all(target)
    assert remote.call("erlang", "system_info", [Atom("atom_count")]) == first
    assert {str(m) for m, _ in remote.call("code", "all_loaded")} == loaded


def _terms(value):
    """Every term inside ``value``, itself included."""
    yield value
    if isinstance(value, (tuple, list)):
        for item in value:
            yield from _terms(item)
    elif isinstance(value, dict):
        for pair in value.items():
            yield from _terms(pair)


def test_no_mailbox_or_dictionary_is_ever_asked_for(target, monkeypatch,
                                                     capsys):
    """Everything every command sends to a node, decoded: the process_info
    items that read a mailbox appear nowhere in it, and a whole dictionary
    is asked for only where its heap was read first (issue 38: before OTP
    26.2 a row is named from a copy of its dictionary, made only where
    total_heap_size, which bounds it, is under the cap)."""
    from beam_probe.cli import invoke
    from beam_probe.erldist import frames
    from beam_probe.erldist.connection import Connection

    sent = []
    real = Connection._send

    def record(self, data):
        sent.append(data)
        real(self, data)
    monkeypatch.setattr(Connection, "_send", record)
    monkeypatch.setenv("HOME", target.home)
    for args in COMMANDS + (["proc-count", "memory", "--all"],):
        assert invoke([args[0], target.node, *args[1:]]) == 0, (
            args, capsys.readouterr().err)
    reader = frames.FrameReader()
    messages = [frames.parse(f) for data in sent
                for f in reader.feed(data) if f]
    # A helper parsed on the node (the forms cache is cold at a session's
    # start) sends its tokens, {atom, Line, dictionary} among them: what is
    # asked is in the forms, not in the tokens they are parsed from.
    def parsing(message) -> bool:
        return any(isinstance(t, ExportFun) and t.function == "parse_form"
                   for t in _terms(message))
    terms = [t for _control, message in messages if not parsing(message)
             for t in _terms(message)]
    seen = {str(t) for t in terms if isinstance(t, Atom)}
    assert {"erl_eval", "process_info", "binary"} <= seen  # it looked
    assert "messages" not in seen
    # The dictionary is read one key at a time, never whole: the atom
    # appears only as the first element of a pair expression
    # {dictionary, Key}, whose key is one of the keys that name a process
    # (or a variable bound to them, in describe/1's comprehension).
    def atom_expr(t, name=None):
        return isinstance(t, tuple) and len(t) == 3 and t[0] == "atom" \
            and (name is None or t[2] == name)
    def pair(t) -> bool:
        return isinstance(t, tuple) and len(t) == 3 and t[0] == "tuple" \
            and isinstance(t[2], list) and len(t[2]) == 2 \
            and atom_expr(t[2][0], "dictionary")
    allowed = {"$initial_call", "$process_label", "process_name", "var"}
    single_key = [t for t in terms if pair(t) and (
        str(t[2][1][2]) if atom_expr(t[2][1]) else t[2][1][0]) in allowed]
    # Any other use of the atom (process_info(P, dictionary), the whole,
    # or the {dictionary, D} it answers): only in a form that reads
    # total_heap_size too (describe/1's and trace-gc's rule: the heap
    # bounds the copy, and is read first).
    copies = 0
    for _control, message in messages:
        if parsing(message):
            continue
        found = [t for t in _terms(message) if isinstance(t, Atom)
                 and t == "dictionary"]
        singles = [t for t in _terms(message) if pair(t) and (
            str(t[2][1][2]) if atom_expr(t[2][1]) else t[2][1][0])
            in allowed]
        if len(found) > len(singles):
            assert any(atom_expr(t, "total_heap_size")
                       for t in _terms(message)), message
            copies += 1
    assert single_key and copies


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


def _atoms_since(remote, since: int) -> list[str]:
    """The names of the atoms a node made since it had ``since`` of them
    (atoms by index: binary_to_term of ATOM_CACHE_REF-less <<131,75,I:24>>,
    the undocumented encoding the snapshot reads them by)."""
    count = remote.call("erlang", "system_info", [Atom("atom_count")])
    return [str(remote.call("erlang", "binary_to_term",
                            [bytes([131, 75]) + i.to_bytes(3, "big")]))
            for i in range(since, count)]


@pytest.mark.slow
def test_first_contact_adds_few_atoms_of_ours(nodes, tmp_path):
    """A node meeting beam-probe for the first time, every command run
    once with nothing cached: of the atoms it gains, those that are ours
    (our pool names, the V1.. of renamed variables, the names our helpers
    are written with) are few, and no variable name of a helper as
    written is among them (the node's scanner never sees one)."""
    import re

    from beam_probe.node.erlang_text import _TOKEN, functions_only
    from beam_probe.node.forms import HELPER_DIRS
    from beam_probe.node.remote import attach

    node = nodes.start("25")
    env = {"HOME": node.home, "BEAM_PROBE_CACHE": str(tmp_path / "cache")}
    with attach(node.node, node.cookie.encode()) as remote:
        # The distribution's own first-contact atoms come with this call;
        # ERTS names its allocators ('B', 'T', ...: ~310) at the node's
        # first erlang:memory() from anyone.
        remote.call("erlang", "memory", [])
        since = remote.call("erlang", "system_info", [Atom("atom_count")])
    _run_all(node, env)
    with attach(node.node, node.cookie.encode()) as remote:
        gained = set(_atoms_since(remote, since))
    sources = [open(path).read() for path in
               glob.glob(os.path.join(HELPER_DIRS[-1], "*.erl"))]
    written = {m.group() for text in sources for m in _TOKEN.finditer(text)
               if m.lastgroup == "variable"}
    sent = {word for text in sources
            for word in re.findall(r"[A-Za-z_][A-Za-z0-9_@]*|'[^']*'",
                                   functions_only(text))}
    ours = {a for a in gained
            if a in sent or a.strip("'") in sent or f"'{a}'" in sent
            or re.fullmatch(r"V\d+|BeamProbeArg\d+|beam_probe_\d+@.*", a)}
    renamed = {a for a in ours if re.fullmatch(r"V\d+", a)}
    assert not (gained & (written - renamed)), sorted(gained & (written - renamed))
    # 208 when written (OTP 25): V1..V83 (the most variables one helper
    # function has), 8 pool names at most, the names of bindings, the map
    # keys and literals of the helpers; the node's own (dist_util's, what
    # erl_eval loads) are the other ~300.
    print(f"first contact: {len(gained)} atoms, {len(ours)} ours, "
          f"{len(renamed)} renamed variables")
    assert len(renamed) <= 100
    assert len(ours) <= 300, sorted(ours)
