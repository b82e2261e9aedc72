"""The manual's topic pages, for ``beam-probe help TOPIC``.

One copy of each: docs/manual/TOPIC.md in the repository, which the
wheel carries as the package data of beam_probe.manual (pyproject.toml
maps that package to docs/manual, as beam_probe.erl to erl_helpers). So
an installed beam-probe finds them beside its modules, and a checkout
in docs/manual.
"""

from __future__ import annotations

import os

_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Installed: beam_probe/manual; in a source checkout: docs/manual.
TOPIC_DIRS = (os.path.join(_PACKAGE, "manual"),
              os.path.join(os.path.dirname(_PACKAGE), "docs", "manual"))

# A page is small: a bound, so that a stray file is never read whole.
MAX_BYTES = 1 << 20


def _folder() -> str | None:
    for folder in TOPIC_DIRS:
        if os.path.isdir(folder):
            return folder
    return None


def names() -> list[str]:
    """The topics there are, sorted."""
    folder = _folder()
    if folder is None:
        return []
    return sorted(name[:-3] for name in os.listdir(folder)
                  if name.endswith(".md") and not name.startswith("."))


def read(topic: str) -> str | None:
    """The page of ``topic``, or None when there is no such topic (a name
    is only ever one of names(): never a path)."""
    if topic not in names():
        return None
    folder = _folder()
    assert folder is not None
    with open(os.path.join(folder, topic + ".md"), encoding="utf-8") as f:
        text = f.read(MAX_BYTES)
    # A generated page opens with a comment for its editors, not readers.
    if text.startswith("<!--") and "-->\n" in text:
        text = text.split("-->\n", 1)[1].lstrip("\n")
    return text


def title(topic: str) -> str:
    """A page's first heading, as the list of topics shows it."""
    text = read(topic) or ""
    for line in text.splitlines():
        if line.startswith("# "):
            return line[2:].strip()
    return topic


__all__ = ["TOPIC_DIRS", "names", "read", "title"]
