"""The house's plan, held: which room may import which (every import,
those inside functions and under TYPE_CHECKING too), no circle between
rooms, and a top level of a handful of modules. docs/CONTRIBUTING.md
("The rooms") says why each arrow points the way it does."""

from __future__ import annotations

import ast
import os

import pytest

PACKAGE = os.path.join(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))), "beam_probe")

SHARED = {"errors", "files"}

# What each room may import besides itself and SHARED. Rooms left out
# (cli, demo, __main__) sit on top and may import any.
MAY_IMPORT = {
    "erldist": set(),
    "node": {"erldist"},
    "probes": {"erldist", "node"},
    "snapshots": {"erldist", "node", "probes"},
    "history": {"probes"},
    "text": {"probes"},
    "checks": {"erldist", "node", "probes", "history", "text"},
    "crashdump": {"erldist", "probes", "snapshots"},
    "exporter": {"erldist", "node", "probes"},
    "live": {"erldist", "node", "probes", "text"},
}

TOP_LEVEL = {"__init__.py", "__main__.py", "errors.py", "files.py"}


def _imports(package: str = PACKAGE) -> dict[str, set[tuple[str, str]]]:
    """Room -> {(room it imports, file that does)}."""
    found: dict[str, set[tuple[str, str]]] = {}
    for folder, _dirs, files in os.walk(package):
        for name in files:
            if not name.endswith(".py"):
                continue
            path = os.path.join(folder, name)
            rel = os.path.relpath(path, package)
            room = rel.split(os.sep)[0].removesuffix(".py")
            with open(path, encoding="utf-8") as f:
                tree = ast.parse(f.read(), rel)
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom) and node.level:
                    raise AssertionError(f"{rel}: a relative import "
                                         "(the house uses absolute ones)")
                names = [node.module] if isinstance(node, ast.ImportFrom) \
                    and node.module else [a.name for a in node.names] \
                    if isinstance(node, ast.Import) else []
                for module in names:
                    parts = module.split(".")
                    if parts[0] == "beam_probe" and len(parts) > 1 and \
                            parts[1] != room:
                        found.setdefault(room, set()).add((parts[1], rel))
    return found


IMPORTS = _imports()


@pytest.mark.parametrize("room", sorted(MAY_IMPORT))
def test_a_room_imports_only_below_it(room):
    wrong = sorted((target, rel) for target, rel in IMPORTS.get(room, ())
                   if target not in MAY_IMPORT[room] | SHARED)
    assert not wrong, f"{room} imports what is above it: {wrong}"


def test_no_circle_between_rooms():
    graph = {room: {t for t, _ in edges} for room, edges in IMPORTS.items()}

    def reaches(start: str, goal: str, seen: set[str]) -> bool:
        for nxt in graph.get(start, ()):
            if nxt == goal or (nxt not in seen and
                               reaches(nxt, goal, seen | {nxt})):
                return True
        return False
    circles = [room for room in graph if reaches(room, room, set())]
    assert not circles, f"rooms in a circle: {circles}"


def test_the_shared_modules_import_no_room_above_the_protocol():
    for shared in SHARED:
        assert {t for t, _ in IMPORTS.get(shared, ())} <= {"erldist"}, \
            IMPORTS.get(shared)


def test_the_top_level_is_a_handful_of_modules():
    modules = {name for name in os.listdir(PACKAGE) if name.endswith(".py")}
    assert modules == TOP_LEVEL


def test_the_checker_sees_an_upward_import(tmp_path):
    """The rule can fail: a probe that imports text inside a function is
    caught."""
    (tmp_path / "probes").mkdir()
    (tmp_path / "probes" / "upward.py").write_text(
        "def f():\n    from beam_probe.text import tables\n")
    found = _imports(str(tmp_path))
    assert found == {"probes": {("text", os.path.join("probes",
                                                      "upward.py"))}}


def test_every_room_is_installed():
    """pyproject's package list names every folder of the package: one
    left out is missing from an installed beam-probe, and every command
    that imports it fails there (the crash dump reader once did)."""
    import tomllib

    root = os.path.dirname(PACKAGE)
    with open(os.path.join(root, "pyproject.toml"), "rb") as f:
        listed = set(tomllib.load(f)["tool"]["setuptools"]["packages"])
    folders = {"beam_probe." + name for name in os.listdir(PACKAGE)
               if os.path.isfile(os.path.join(PACKAGE, name, "__init__.py"))}
    assert folders <= listed, folders - listed
