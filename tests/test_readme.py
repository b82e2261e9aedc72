"""The README's promises that can drift from the code."""

from __future__ import annotations

import os
import re

from beam_probe.errors import EXIT_CODES

README = os.path.join(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))), "README.md")


def test_exit_code_table_matches_the_code():
    text = open(README, encoding="utf-8").read()
    section = text.split("## Exit codes", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| (\d+) \| (.+?) \|$", section, re.M)
    assert [(int(code), meaning) for code, meaning in rows] == EXIT_CODES
