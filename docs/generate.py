#!/usr/bin/env python3
"""Write the generated manual: docs/commands/*.md and docs/beam-probe.1,
from the commands' declarations (beam_probe/cli/manual.py does the work).

    python docs/generate.py           # write them (and remove stale pages)
    python docs/generate.py --check   # exit 1 naming each file that differs

Run it after changing a command's declaration, help or options, or
beam_probe/cli/reference.py; tests/test_manual.py fails until you do.
"""

from __future__ import annotations

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from beam_probe.cli.manual import generate, stale  # noqa: E402


def main(argv: list[str]) -> int:
    check = argv == ["--check"]
    if argv and not check:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    files = generate(ROOT)
    differ = []
    for path, text in sorted(files.items()):
        try:
            with open(path, encoding="utf-8") as f:
                same = f.read() == text
        except FileNotFoundError:
            same = False
        if same:
            continue
        differ.append(path)
        if not check:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
    for path in stale(ROOT, files):
        differ.append(path)
        if not check:
            os.remove(path)
    for path in differ:
        print(("differs: " if check else "wrote: ")
              + os.path.relpath(path, ROOT))
    return 1 if check and differ else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
