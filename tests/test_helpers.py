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
