"""diff of folders of snapshot --cluster whose nodes do not pair: a node
that joined or left between the snapshots (not in every folder), or one
with several files in a folder. The nodes in every folder once are
compared, the others named in a row and in the one line, exit 15."""

from __future__ import annotations

import json
import os
import shutil
import uuid

import pytest

from beam_probe.erldist.terms import Atom
from beam_probe.node.remote import attach
from conftest import one_line, run_here


@pytest.fixture(scope="module")
def folders(session_nodes, tmp_path_factory):
    """(entry, member, a, b): folders a and b of snapshot --cluster of a
    two-node cluster, a first."""
    tag = uuid.uuid4().hex[:6]
    entry, member = (session_nodes.start("25", prefix=f"{head}f{tag}",
                                         cookie=f"f{tag}")
                     for head in ("bp", "zz"))
    with attach(entry.node, entry.cookie.encode()) as remote:
        assert remote.call("net_kernel", "connect_node",
                           [Atom(member.node)]) is True
    base = tmp_path_factory.mktemp("folders")
    out = []
    for name in ("a", "b"):
        folder = str(base / name)
        r = run_here("snapshot", entry.node, "--cluster", "--gc", "none",
                     "-o", folder, node=entry)
        assert r.returncode == 0, r.stderr
        out.append(folder)
    return entry, member, *out


def _copy(folder: str, to: str, keep: dict[str, int]) -> str:
    """A copy of ``folder`` with ``keep[node]`` copies of each node's file
    (0: left out)."""
    os.makedirs(to)
    for node, copies in keep.items():
        for i in range(copies):
            shutil.copy(os.path.join(folder, f"{node}.snapshot"),
                        os.path.join(to, f"{node}-{i}.snapshot"))
    return to


@pytest.mark.parametrize("copies, why", [
    (0, "not in {b}"), (2, "2 snapshots in {b}")])
def test_a_node_not_once_in_every_folder_is_named_and_the_rest_compared(
        folders, tmp_path, copies, why):
    entry, member, a, b = folders
    b = _copy(b, str(tmp_path / "b"), {entry.node: 1, member.node: copies})
    why = why.format(b=b)
    r = run_here("diff", a, b, "--format", "json")
    line = one_line(r, 15, "compared 1 of 2 nodes", member.node, why)
    assert line.startswith("beam-probe: cluster: "), line
    result = json.loads(r.stdout)
    rows = {row["node"]: row for row in result["nodes"]}
    assert rows[member.node] == {"node": member.node, "error": why}
    assert rows[entry.node]["diff"]["after"]["node"] == entry.node
    assert result["across"]["nodes"] == 1
    text = run_here("diff", a, b)
    assert text.returncode == 15
    assert f"== {entry.node}" in text.stdout
    assert f"{member.node}: {why}" in text.stdout


def test_no_node_in_every_folder_is_still_one_line(folders, tmp_path):
    entry, member, a, b = folders
    a = _copy(a, str(tmp_path / "a"), {entry.node: 1})
    b = _copy(b, str(tmp_path / "b"), {member.node: 1})
    r = run_here("diff", a, b, "--format", "json")
    one_line(r, 15, "compared 0 of 2 nodes", f"not in {b}", "(and 1 more)")
    assert all("error" in row for row in json.loads(r.stdout)["nodes"])
    text = run_here("diff", a, b)
    assert text.returncode == 15 and f"{member.node}: not in {a}" in \
        text.stdout
