"""The Erlang that runs on inspected nodes: it compiles, every function has
a -spec (the contract Python reads replies by), and the forms we send keep
their meaning when their variables are renamed."""

from __future__ import annotations

import glob
import os
import subprocess

from beam_probe.erldist.terms import Atom
from beam_probe.node.forms import HelperForms, Local, canonical_variables
from conftest import HELPERS


def test_helpers_compile_with_a_spec_for_every_function(tmp_path):
    sources = glob.glob(os.path.join(HELPERS, "*.erl"))
    assert len(sources) >= 6
    for source in sources:
        r = subprocess.run(["erlc", "+warn_missing_spec",
                            "+warnings_as_errors", "-o", str(tmp_path),
                            source], capture_output=True, text=True)
        assert r.returncode == 0, r.stdout + r.stderr


def V(name):
    return (Atom("var"), 1, Atom(name))


def test_variables_are_renamed_one_to_one_in_order():
    clauses = [(Atom("clause"), 1, [V("Pids"), V("_")], [],
                [(Atom("match"), 2, V("Count"), V("Pids")),
                 (Atom("named_fun"), 3, Atom("Loop"),
                  [(Atom("clause"), 3, [V("Count")], [],
                    [(Atom("call"), 3, V("Loop"), [V("Pids")])])])])]
    renamed = canonical_variables(clauses)
    head, body = renamed[0][2], renamed[0][4]
    assert head == [V("V1"), V("_")]            # '_' is never renamed
    assert body[0] == (Atom("match"), 2, V("V2"), V("V1"))
    named = body[1]
    # A named fun's name is a variable in its body, written as an atom.
    assert named[2] == Atom("V3")
    assert named[3][0][4][0] == (Atom("call"), 3, V("V3"), [V("V1")])


def test_every_helper_function_still_runs_after_renaming(remote):
    """The renamed forms are what nodes run: a smoke run of the helpers
    that need no workload, on both releases."""
    forms = {**HelperForms(remote.call)._load("beam_probe_scan"),
             **HelperForms(remote.call)._load("beam_probe_lib")}
    names = {str(n) for clauses in forms.values()
             for n in _vars(clauses)}
    assert names and all(n == "_" or (n[0] == "V" and n[1:].isdigit())
                         for n in names)
    reply = remote.run("beam_probe_scan", "proc_info",
                       (Atom("names"), ["code_server"]),
                       Local("resolve", "beam_probe_lib"))
    assert reply["binary_count"] >= 0 and reply["items"]


def _vars(term):
    if isinstance(term, tuple):
        if len(term) == 3 and term[0] == "var":
            yield term[2]
        for item in term:
            yield from _vars(item)
    elif isinstance(term, list):
        for item in term:
            yield from _vars(item)


def test_only_functions_reach_the_scanner_their_variables_renamed():
    """The text the node's scanner reads: no comment, no attribute, no
    variable name as written; strings, quoted atoms, characters and
    numbers untouched; every line where it was."""
    from beam_probe.node.erlang_text import functions_only

    source = (
        "%% Module doc with Names.\n"
        "-module(m).\n"
        "-spec f(Pids) -> Pids.\n"
        "f(Pids) -> % trailing Comment\n"
        "    Split = fun Split([]) -> []; Split([_H | Rest]) -> Split(Rest) end,\n"
        "    {\"Str % not a comment. Pids\", 'Quoted.Atom Pids', $%, $\", $.,\n"
        "     1.5e3, 16#FF, Pids ++ Split(Pids)}.\n"
        "g(Pids, _) -> Pids.\n"
        "'h'(Ärger, Xé) -> {Ärger, Xé, ßa}.\n")
    text = functions_only(source)
    assert text.count("\n") == source.count("\n")
    assert text.splitlines()[:3] == ["", "", ""]
    assert text.splitlines()[3] == "f(V1) -> "
    assert "Split = " not in text and "fun V2([]) -> []; V2([V3 | V4])" in text
    assert "\"Str % not a comment. Pids\", 'Quoted.Atom Pids', $%, $\", $.," \
        in text
    assert "1.5e3, 16#FF, V1 ++ V2(V1)}." in text
    assert text.splitlines()[-2] == "g(V1, _) -> V1."
    assert text.splitlines()[-1] == "'h'(V1, V2) -> {V1, V2, ßa}."
