"""Small answers that misled on a real broker: an atom change of +0
between two different counts, counts written two ways, a diff's JSON cut
without saying so, a bare short node name refused, a chart's legend over
its line and a cluster chart's leak shading tied to no node; and the
command each answer points to next."""

from __future__ import annotations

import json
import socket
from types import SimpleNamespace

import pytest

from beam_probe.snapshots import compare
from beam_probe.text import cluster as cluster_text
from beam_probe.text import diff as diff_text
from beam_probe.text import node as node_text
from beam_probe.text.syntax import ELIXIR, ERLANG
from conftest import run_here


def _atoms(before: int, after: int, names: list[str]) -> dict:
    a = SimpleNamespace(header={"atom_count": before})
    b = SimpleNamespace(header={"atom_count": after,
                                "atoms_from": after - len(names),
                                "atoms": names})
    return compare._atoms(a, b)


def _summary(atoms: int, processes: int) -> dict:
    return {"node": "app@db1", "time": "t", "memory": {"total": 1},
            "alloc_used": None, "alloc_allocated": None,
            "processes": processes, "ets_tables": 1349, "ports": 3,
            "atoms": atoms}


def _diff(atoms: dict, before: int, after: int) -> dict:
    return {"before": _summary(before, 1349), "after": _summary(after, 1972),
            "change": {"size_bytes": 0, "memory": {"total": 0},
                       "details": [], "groups": 0, "truncated": False},
            "ets": [], "atoms": atoms,
            "ports": {"before": 3, "after": 3, "new": [], "new_count": 0}}


def test_the_atom_row_changes_by_what_it_shows():
    # The one new atom is our own node name: the node's own change is 0,
    # but the row shows 46549 -> 46550 and must not say +0 alone.
    host = socket.gethostname().split(".")[0]
    atoms = _atoms(46549, 46550, [f"beam_probe_3@{host}"])
    assert (atoms["added"], atoms["ours"]) == (0, 1)
    text = diff_text.diff_text(_diff(atoms, 46549, 46550), ERLANG)
    row = next(line for line in text.splitlines()
               if line.startswith("atoms "))
    assert row.split()[1:4] == ["46,549", "46,550", "+1"], row
    assert "beam-probe's" in row
    # A change of the node's own: no aside.
    atoms = _atoms(46549, 46551, ["a", "b"])
    text = diff_text.diff_text(_diff(atoms, 46549, 46551), ERLANG)
    row = next(line for line in text.splitlines()
               if line.startswith("atoms "))
    assert row.split()[1:] == ["46,549", "46,551", "+2"], row


def test_counts_are_written_one_way_with_separators():
    text = diff_text.diff_text(_diff(_atoms(10, 10, []), 10, 10), ERLANG)
    row = next(line for line in text.splitlines()
               if line.startswith("processes "))
    assert row.split()[1:] == ["1,349", "1,972", "+623"], row
    one = {"node": "app@db1", "attribute": "memory", "scanned": 1349,
           "labels_read": True,
           "processes": [{"pid": "<0.1.0>", "value": 5, "name": None,
                          "label": None, "current_function": None,
                          "initial_call": None, "exited": False}]}
    assert "of 1,349 processes" in node_text.proc_count_text(one, ERLANG)
    many = {"entry": "app@db1", "attribute": "memory",
            "nodes": [{"node": "app@db1", "scanned": 1972}],
            "processes": [{"node": "app@db1", **one["processes"][0]}]}
    text = cluster_text.proc_count_text(many, ERLANG)
    assert "of 1,972 processes" in text and "1972" not in text
    taken = {"node": "app@db1", "processes": 1349, "ets_tables": 20,
             "ports": 4, "gc": "none", "file": "f", "bytes": 10}
    assert "1,349 processes" in diff_text.snapshot_text(taken, ERLANG)


def _suspects(**found) -> dict:
    return {"born_and_kept": [], "growing_processes": [],
            "groups_rising": [], "ets": [], "ports_born_and_kept": [],
            "atoms": {"added": [0, 0], "rising": False}, **found}


def test_each_suspect_points_to_inspect():
    # The leak hunt's next step after proc-info: what in the process, or
    # in the table, holds the memory, as a command to paste.
    grew = {"pid": "<0.91.0>", "name": "hoarder", "what": "x",
            "memory": [1, 2, 3], "binary_bytes": [1, 2, 3]}
    born = {"what": "w", "count": 2, "bytes": 1, "binary_bytes": 0,
            "growth": 0, "examples": ["<0.95.0>", "<0.96.0>"]}
    named = {"name": "sessions", "id": "sessions", "owner": "o",
             "rows": [1, 2, 3], "bytes": [1, 2, 3]}
    text = diff_text._suspects(_suspects(
        growing_processes=[grew], born_and_kept=[born], ets=[named]),
        "app@db1", True, ERLANG)
    assert "  what it holds: beam-probe inspect app@db1 '<0.91.0>' " in text
    assert "  what it holds: beam-probe inspect app@db1 '<0.95.0>' " in text
    assert "look closer: beam-probe inspect app@db1 --table sessions " \
        "(what its objects hold); beam-probe ets app@db1 " in text
    # An unnamed table by its id, quoted for the shell; pids as Elixir
    # writes them on an Elixir node.
    unnamed = dict(named, id="#Ref<0.1.2.3>")
    text = diff_text._suspects(_suspects(growing_processes=[grew],
                                         ets=[unnamed]),
                               "app@db1", True, ELIXIR)
    assert "inspect app@db1 --table '#Ref<0.1.2.3>' " in text
    assert "inspect app@db1 '#PID<0.91.0>' " in text
    # No table to name: the ets ranking alone, as before.
    text = diff_text._suspects(_suspects(ets=[dict(named, id=None)]),
                               "app@db1", True, ERLANG)
    assert "--table" not in text and "beam-probe ets app@db1" in text


def test_suspects_lead_to_the_code_that_fills_them():
    # Issue 40: from the field to the caller. A named table's inserts
    # narrowed to it; an unnamed one's by process, its owner named; the
    # grown process's senders; the atom makers, the node's language's first.
    grew = {"pid": "<0.91.0>", "name": "hoarder", "what": "x",
            "memory": [1, 2, 3], "binary_bytes": [1, 2, 3]}
    named = {"name": "sessions", "id": "sessions", "owner": "cache_owner",
             "rows": [1, 2, 3], "bytes": [1, 2, 3]}
    atoms = {"added": [5, 7], "rising": True}
    text = diff_text._suspects(_suspects(
        growing_processes=[grew], ets=[named], atoms=atoms),
        "app@db1", True, ERLANG)
    assert "  who fills it: beam-probe calls app@db1 ets:insert/2 --match " \
        "'sessions, _' (" in text
    assert "  who feeds it: beam-probe senders app@db1 hoarder (" in text
    assert "  who makes them: beam-probe calls app@db1 " \
        "erlang:list_to_atom/1 (or erlang:binary_to_atom/2)" in text
    # Each lead follows the line it continues.
    lines = text.splitlines()
    for lead, after in (("who feeds it", "what it holds"),
                        ("who fills it", "look closer: beam-probe inspect "
                                         "app@db1 --table"),
                        ("who makes them", "atoms added in both")):
        at = next(i for i, line in enumerate(lines) if lead in line)
        assert after in lines[at - 1], (lead, lines)
    quoted = dict(named, id="'my tab'")
    unnamed = dict(named, id="#Ref<0.1.2.3>")
    anonymous = dict(grew, name=None)
    text = diff_text._suspects(_suspects(
        growing_processes=[anonymous], ets=[unnamed], atoms=atoms),
        "app@db1", True, ELIXIR)
    assert "  who fills it: its owner cache_owner, or another process: " \
        "beam-probe calls app@db1 ets:insert/2 --by process (" in text
    assert "--match" not in text
    assert "who feeds it: beam-probe senders app@db1 '#PID<0.91.0>' (" \
        in text
    assert "who makes them: beam-probe calls app@db1 " \
        "erlang:binary_to_atom/2 (or erlang:list_to_atom/1)" in text
    # A quoted name, quoted for the shell around Erlang's quotes.
    text = diff_text._suspects(_suspects(ets=[quoted]), "app@db1", True,
                               ERLANG)
    assert "ets:insert/2 --match \"'my tab', _\" (" in text
    # A dead node (a crash dump) has no calls to trace; no leads asked
    # (look False), none given.
    for where, look, dead in (("/d/erl_crash.dump", True, True),
                              ("app@db1", False, False)):
        text = diff_text._suspects(_suspects(
            growing_processes=[grew], ets=[named], atoms=atoms),
            where, look, ERLANG, dead=dead)
        assert "who " not in text and "calls" not in text \
            and "senders" not in text, text


def test_a_ranking_ends_on_inspect_of_its_first_live_process():
    row = {"pid": "<0.1.0>", "value": 5, "name": None, "label": None,
           "current_function": None, "initial_call": None, "exited": False}
    ranking = {"node": "app@db1", "attribute": "binary_memory",
               "scanned": 9, "labels_read": True,
               "processes": [dict(row, pid="<0.7.0>", exited=True,
                                  binary_distinct=5),
                             dict(row, binary_distinct=5)]}
    text = node_text.proc_count_text(ranking, ERLANG)
    assert text.splitlines()[-1] == (
        "look closer: beam-probe inspect app@db1 '<0.1.0>' (what its "
        "state, dictionary and mailbox hold)")
    assert text.splitlines()[-2] == ""  # after the notes, apart
    assert "inspect app@db1 '#PID<0.1.0>'" in node_text.proc_count_text(
        ranking, ELIXIR)
    # Nothing ranked (all 0): nothing to point at.
    idle = dict(ranking, processes=[dict(row, value=0)])
    assert "inspect" not in node_text.proc_count_text(idle, ERLANG)
    # A ranking by mailbox also names who fills the first one (issue 40).
    mailboxes = dict(ranking, attribute="message_queue_len")
    lines = node_text.proc_count_text(mailboxes, ERLANG).splitlines()
    assert lines[-2].startswith("look closer: beam-probe inspect app@db1 "
                                "'<0.1.0>' ")
    assert lines[-1] == (
        "who fills its mailbox: beam-probe senders app@db1 '<0.1.0>' (the "
        "messages it is sent, by sender; --by shape: what they are)")
    assert "senders" not in node_text.proc_count_text(ranking, ERLANG)
    dump = dict(mailboxes, crash_dump={"file": "/d/erl_crash.dump"})
    assert "senders" not in node_text.proc_count_text(dump, ERLANG)


@pytest.fixture
def snapshots(nodes, tmp_path):
    """Two snapshots of a node, processes of several groups born between."""
    from beam_probe.node.remote import attach

    node = nodes.start()
    paths = [tmp_path / "a.snapshot", tmp_path / "b.snapshot"]
    r = run_here("snapshot", node.node, "-o", str(paths[0]), "--gc", "none",
                 node=node)
    assert r.returncode == 0, r.stderr
    with attach(node.node, node.cookie.encode()) as remote:
        remote.call("beam_probe_workload", "tree", [])
        remote.call("beam_probe_workload", "grow_tree", [2, 2])
        r = run_here("snapshot", node.node, "-o", str(paths[1]), "--gc",
                     "none", node=node)
    assert r.returncode == 0, r.stderr
    return node, [str(p) for p in paths]


def test_diff_json_says_when_it_cut_the_groups(snapshots, monkeypatch):
    _node, paths = snapshots
    whole = json.loads(run_here("diff", *paths, "--format", "json").stdout)
    change = whole["change"]
    assert change["truncated"] is False
    assert change["groups"] == len(change["details"]) > 2
    monkeypatch.setattr(compare, "TOP_GROUPS", 2)
    cut = json.loads(run_here("diff", *paths, "--format", "json").stdout)
    assert len(cut["change"]["details"]) == 2
    assert cut["change"]["truncated"] is True
    assert cut["change"]["groups"] == change["groups"]


def test_a_bare_short_name_is_this_hosts_node(snapshots):
    node, _paths = snapshots
    bare = node.node.split("@")[0]
    env = {"HOME": node.home}
    r = run_here("ping", bare, env=env)
    assert r.returncode == 0 and f"{node.node} is up" in r.stdout, r.stderr
    r = run_here("proc-count", bare, "memory", "2", "--format", "json",
                 env=env)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["node"] == node.node
    r = run_here("proc-count", bare, "memory", "--all", "--format", "json",
                 env=env)
    assert r.returncode == 0 and json.loads(r.stdout)["node"] == node.node
    r = run_here("ets", bare, "1", "--format", "json", env=env)
    assert r.returncode == 0 and json.loads(r.stdout)["node"] == node.node
    r = run_here("check", bare, env=env)
    assert r.returncode == 0 and node.node in r.stdout, r.stdout
    # The command's own words still come first: with the node from the
    # environment, "memory" is the attribute, not a node.
    r = run_here("proc-count", "memory", "2", "--format", "json",
                 env={**env, "BEAM_PROBE_NODE": node.node})
    assert r.returncode == 0 and json.loads(r.stdout)["node"] == node.node


def _overlay(leaky: str) -> dict:
    start = 1_700_000_000
    series = {name: [(start + i, (100 + i * (2 if name == leaky else 0))
                      * 1024 * 1024) for i in range(60)]
              for name in ("a@h", "b@h", "c@h")}
    return {"node": "3 nodes", "samples": 180, "skipped_lines": 0,
            "metrics": ("total",), "series": series, "floors": {},
            "first": start, "last": start + 59,
            "leaks": [(start + 40, leaky), (start + 50, leaky)]}


def test_a_png_legend_is_outside_the_lines_and_leaks_wear_their_node():
    pytest.importorskip("matplotlib")
    from matplotlib import pyplot
    from matplotlib.colors import to_rgba

    from beam_probe.text.plot import draw

    figure = draw(_overlay("b@h"))
    try:
        figure.canvas.draw()
        axes = figure.axes[0]
        renderer = figure.canvas.get_renderer()
        legend = axes.get_legend().get_window_extent(renderer)
        box = axes.get_window_extent(renderer)
        # Not over the plotting area (the top line starts at its top
        # left), and within the image, which keeps its size.
        assert legend.x0 >= box.x1, (legend, box)
        assert legend.x1 <= figure.bbox.x1 and box.x0 >= 0
        assert (figure.bbox.width, figure.bbox.height) == (1000, 500)
        colour = {line.get_label(): line.get_color()
                  for line in axes.get_lines()}
        spans = [p for p in axes.patches]
        assert len(spans) == 2
        for span in spans:
            assert to_rgba(span.get_facecolor())[:3] == \
                to_rgba(colour["b@h"])[:3]
        labels = [t.get_text() for t in axes.get_legend().get_texts()]
        assert "leak suspected: b@h" in labels
    finally:
        pyplot.close(figure)
