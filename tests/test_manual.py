"""The manual beside the README (issue 41): the command pages and the man
page generated from the declarations and never drifting from them, the
man page rendering, help that points on, topic pages that come with an
installed beam-probe, click's shell completion, and links between the
pages that lead somewhere. No node is needed."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import pytest

from beam_probe.errors import EXIT_CODES
from conftest import run_here

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = os.path.join(ROOT, "docs")


def _command_names() -> list[str]:
    import click

    from beam_probe.cli.app import main

    return main.list_commands(click.Context(main))


# -- generated, and checked ----------------------------------------------

def test_the_committed_manual_is_what_the_declarations_generate():
    from beam_probe.cli.manual import generate, stale

    files = generate(ROOT)
    differ = []
    for path, text in files.items():
        try:
            with open(path, encoding="utf-8") as f:
                if f.read() == text:
                    continue
        except FileNotFoundError:
            pass
        differ.append(os.path.relpath(path, ROOT))
    differ += [os.path.relpath(p, ROOT) for p in stale(ROOT, files)]
    assert not differ, ("run `python docs/generate.py` and commit what it "
                        f"writes; these differ: {differ}")
    # A page a command, the index and the man page: nothing left out.
    names = _command_names()
    assert len(names) >= 20
    for name in names:
        assert os.path.join(DOCS, "commands", f"{name}.md") in files
    assert os.path.join(DOCS, "beam-probe.1") in files


def test_the_check_names_what_drifted_and_the_script_mends_it(tmp_path):
    """The check above can fail: a copy of the tree with one page edited
    by hand and one page of no command is refused by name, and the
    script puts both right."""
    for part in ("beam_probe", "docs", "erl_helpers"):
        shutil.copytree(os.path.join(ROOT, part), tmp_path / part,
                        ignore=shutil.ignore_patterns("__pycache__"))
    script = str(tmp_path / "docs" / "generate.py")
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    # The copy as generated (another engineer's edit to a declaration may
    # be in the tree and not yet in the pages).
    first = subprocess.run([sys.executable, script], env=env,
                           capture_output=True, text=True, timeout=120)
    assert first.returncode == 0, first.stderr
    page = tmp_path / "docs" / "commands" / "ping.md"
    page.write_text(page.read_text() + "a line written by hand\n")
    (tmp_path / "docs" / "commands" / "gone.md").write_text("# gone\n")
    check = subprocess.run([sys.executable, script, "--check"], env=env,
                           capture_output=True, text=True, timeout=120)
    assert check.returncode == 1, check
    assert sorted(check.stdout.splitlines()) == [
        "differs: docs/commands/gone.md",
        "differs: docs/commands/ping.md"], check.stdout
    mend = subprocess.run([sys.executable, script], env=env,
                          capture_output=True, text=True, timeout=120)
    assert mend.returncode == 0, mend.stderr
    assert not (tmp_path / "docs" / "commands" / "gone.md").exists()
    again = subprocess.run([sys.executable, script, "--check"], env=env,
                           capture_output=True, text=True, timeout=120)
    assert (again.returncode, again.stdout) == (0, ""), again


def test_every_page_has_what_the_issue_asks():
    """Its help, usage, arguments, options with defaults, examples, exit
    codes, JSON shape where the command declares one, and its cost."""
    from beam_probe.cli import reference

    for name in _command_names():
        with open(os.path.join(DOCS, "commands", f"{name}.md"),
                  encoding="utf-8") as f:
            text = f.read()
        assert text.count(f"\n# beam-probe {name}\n") == 1, name
        assert f"```text\nbeam-probe {name} [OPTIONS]" in text, name
        for section in ("## Options", "## Exit codes",
                        "## What it costs the node"):
            assert f"\n{section}\n" in text, (name, section)
        assert name in reference.COSTS, name
        assert ("\n## JSON\n" in text) == (name in reference.RESULTS), name
    proc_count = open(os.path.join(DOCS, "commands", "proc-count.md"),
                      encoding="utf-8").read()
    assert "* `--timeout SECONDS`: Limit for each call to the node.  " \
        "[default: 300.0]" in proc_count
    assert "* `ATTRIBUTE`: One of memory" in proc_count
    assert "beam-probe proc-count app@db1 binary_memory 3\n" in proc_count
    assert "| 15 | `--cluster`" in proc_count
    assert "| 10 |" not in proc_count
    assert "ProcCount\n  node: string\n" in proc_count
    assert "  kind (optional): string or null\n" in proc_count
    # Each page links the topic page that tells its command's story.
    from beam_probe.cli.reference import TOPICS

    assert set(TOPICS) == set(_command_names())
    assert "[refc-binaries](../manual/refc-binaries.md)" in proc_count
    check = open(os.path.join(DOCS, "commands", "check.md"),
                 encoding="utf-8").read()
    assert "| 2 | CRITICAL" in check


def test_the_pages_cost_figures_are_the_costs_page_s():
    """A figure a command's page gives (+17 MB) is one the costs page
    gives too: re-measured there, the table beside the declarations
    follows (or this fails)."""
    from beam_probe.cli.reference import COSTS

    costs = open(os.path.join(DOCS, "manual", "costs.md"),
                 encoding="utf-8").read()
    figures = [(name, figure) for name, text in COSTS.items()
               for figure in re.findall(r"\+[\d.]+(?:-[\d.]+)? MB", text)]
    assert len(figures) >= 8
    missing = [(name, figure) for name, figure in figures
               if figure not in costs]
    assert not missing, missing


def test_the_pages_json_shapes_are_the_result_types():
    """The JSON section lists each result type's keys in their declared
    order (what tests/test_json_shapes.py holds the output to)."""
    import typing

    from beam_probe.cli.manual import json_shapes
    from beam_probe.probes import results

    lines = json_shapes(("Ping",))
    assert lines[0] == "Ping"
    assert [line.split(":")[0].strip() for line in lines[1:]] == list(
        typing.get_type_hints(results.Ping))


def test_the_man_page_renders():
    """`man -l docs/beam-probe.1`, as the issue asks; where only groff is
    installed (groff-base, which .ci/setup adds when neither is there:
    man-db's install also builds its index), groff's own rendering."""
    page = os.path.join(DOCS, "beam-probe.1")
    env = dict(os.environ, MANWIDTH="80", LC_ALL="C.UTF-8", MANPAGER="cat",
               PAGER="cat")
    if shutil.which("man") is not None:
        command = ["man", "--warnings", "-l", page]
    elif shutil.which("groff") is not None:
        command = ["groff", "-man", "-Tutf8", "-ww", "-rLL=80n", "-P-cbou",
                   page]
    else:
        pytest.skip("neither man nor groff is installed here (Debian: "
                    "man-db, groff-base)")
    r = subprocess.run(command, env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    # groff's warnings (a bad escape, a request it does not know) go to
    # stderr: none.
    assert r.stderr == "", r.stderr
    sections = re.findall(r"^([A-Z][A-Z ]+)$", r.stdout, re.M)
    assert sections == ["NAME", "SYNOPSIS", "DESCRIPTION", "COMMANDS",
                        "OPTIONS", "EXIT STATUS", "FILES", "ENVIRONMENT",
                        "SEE ALSO"], sections
    for name in _command_names():
        assert re.search(rf"^   {re.escape(name)}$", r.stdout, re.M), name
        assert f"beam-probe {name} [OPTIONS]" in r.stdout, name
    # A hyphen in an option is a minus a shell can take: \- in roff.
    assert "--cookie-file FILE" in r.stdout
    for code, _ in EXIT_CODES:
        assert re.search(rf"^       {code} ", r.stdout, re.M), code


def test_the_roff_escapes_what_roff_would_read():
    from beam_probe.cli.manual import roff

    assert roff(".start\n'quote\nplain -x \\n") == \
        "\\&.start\n\\&'quote\nplain \\-x \\en"


# -- help that points on ---------------------------------------------------

@pytest.mark.parametrize("name", ["ping", "proc-count", "check", "serve",
                                  "demo", "help", "calls"])
def test_a_command_s_help_ends_with_its_page(name):
    r = run_here(name, "--help")
    assert r.returncode == 0, r.stderr
    last = " ".join(r.stdout.split("\n\n")[-1].split())
    assert last == (f"More: docs/commands/{name}.md in the repository; "
                    "beam-probe help topics"), r.stdout
    assert os.path.isfile(os.path.join(DOCS, "commands", f"{name}.md"))
    # Within 80 columns, unwrapped, for the longest name too.
    assert any(line.strip() == last for line in r.stdout.splitlines())


def test_every_command_points_on_once():
    for name in _command_names():
        first = run_here(name, "--help")
        again = run_here("help", name)
        assert first.returncode == again.returncode == 0, name
        assert first.stdout.count(f"docs/commands/{name}.md") == 1, name
        assert again.stdout.count(f"docs/commands/{name}.md") == 1, name


@pytest.mark.parametrize("topic", ["cookies", "costs", "exit-codes",
                                   "completion"])
def test_help_topic_prints_its_page(topic):
    r = run_here("help", topic)
    assert r.returncode == 0, r.stderr
    with open(os.path.join(DOCS, "manual", f"{topic}.md"),
              encoding="utf-8") as f:
        text = f.read()
    # A generated page's comment to its editors is not printed.
    if text.startswith("<!--"):
        text = text.split("-->\n", 1)[1].lstrip("\n")
    assert r.stdout == text.rstrip("\n") + "\n"
    assert not r.stdout.startswith("<!--")


def test_help_topics_lists_them_and_a_wrong_name_is_one_line():
    r = run_here("help", "topics")
    assert r.returncode == 0, r.stderr
    listed = [line.split()[0] for line in r.stdout.splitlines()]
    assert listed == sorted(name[:-3] for name in os.listdir(
        os.path.join(DOCS, "manual")) if name.endswith(".md"))
    assert {"cookies", "costs", "exit-codes"} <= set(listed)
    assert re.search(r"^cookies +Which cookie$", r.stdout, re.M), r.stdout
    for wrong in ("nope", "../README", "cookies.md"):
        r = run_here("help", wrong)
        assert r.returncode == 2 and r.stdout == "", r
        assert r.stderr.count("\n") == 1, r.stderr
        assert f"no command {wrong!r}, nor a topic" in r.stderr
        assert "beam-probe help topics" in r.stderr


def test_the_index_links_every_page_and_no_topic_is_a_command():
    index = open(os.path.join(DOCS, "index.md"), encoding="utf-8").read()
    topics = sorted(name[:-3] for name in os.listdir(
        os.path.join(DOCS, "manual")) if name.endswith(".md"))
    assert len(topics) >= 15, topics
    for topic in topics:
        assert f"](manual/{topic}.md)" in index, topic
    assert "](commands/README.md)" in index
    # `help NAME` shows a command first: a topic of that name would never
    # be printed.
    assert not set(topics) & set(_command_names())


def test_the_exit_codes_page_matches_the_code():
    text = open(os.path.join(DOCS, "manual", "exit-codes.md"),
                encoding="utf-8").read()
    rows = re.findall(r"^\| (\d+) \| (.+?) \|$", text, re.M)
    assert [(int(code), meaning) for code, meaning in rows] == EXIT_CODES


def test_the_topics_come_with_the_package_as_built(tmp_path):
    """Installed from a wheel there is no docs/: the pages travel as the
    package data of beam_probe.manual (pyproject.toml). setuptools'
    build_py lays the package out as a wheel holds it; help TOPIC run
    from there finds the page beside its modules."""
    source, built = tmp_path / "source", tmp_path / "built"
    # What docker/Dockerfile copies into /src before `pip install /src`:
    # the package must build from that alone.
    dockerfile = open(os.path.join(ROOT, "docker", "Dockerfile"),
                      encoding="utf-8").read()
    copied = []
    for line in dockerfile.splitlines():
        words = line.split()
        if words[:1] == ["COPY"] and words[-1].startswith("/src"):
            copied += words[1:-1]
    assert {"pyproject.toml", "beam_probe", "docs/manual"} <= set(copied)
    for part in copied:
        if os.path.isdir(os.path.join(ROOT, part)):
            shutil.copytree(os.path.join(ROOT, part), source / part,
                            ignore=shutil.ignore_patterns("__pycache__"))
        else:
            os.makedirs(source, exist_ok=True)
            shutil.copy(os.path.join(ROOT, part), source / part)
    r = subprocess.run([sys.executable, "-c",
                        "import setuptools; setuptools.setup()", "-q",
                        "build_py", "-d", str(built)], cwd=source,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert sorted(os.listdir(built / "beam_probe" / "manual")) == sorted(
        name for name in os.listdir(os.path.join(DOCS, "manual"))
        if name.endswith(".md"))
    assert not (built / "docs").exists()
    r = subprocess.run([sys.executable, "-m", "beam_probe", "help",
                        "cookies"], cwd=tmp_path, capture_output=True,
                       text=True, timeout=120,
                       env=dict(os.environ, PYTHONPATH=str(built)))
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("# Which cookie\n"), r.stdout


def test_a_command_s_start_imports_no_manual():
    """The generator, its table and the topics are read by `help` and
    docs/generate.py alone: a command's run starts as before
    (tests/bench_startup.py)."""
    code = ("import sys\n"
            "from beam_probe.cli.app import invoke\n"
            "invoke(['memory', '--help'])\n"
            "print(sorted(m for m in sys.modules if m in ("
            "'beam_probe.cli.manual', 'beam_probe.cli.reference', "
            "'beam_probe.cli.topics', 'beam_probe.probes.results')))\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[-1] == "[]", r.stdout


# -- shell completion ------------------------------------------------------

def _complete(env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "beam_probe"], cwd=ROOT,
                          env=dict(os.environ, **env), capture_output=True,
                          text=True, timeout=120)


@pytest.mark.parametrize("shell,mark", [
    ("bash", "complete -o nosort -F _beam_probe_completion beam-probe"),
    ("zsh", "#compdef beam-probe"),
    ("fish", "complete --no-files --command beam-probe"),
])
def test_each_shell_s_completion_script_is_produced(shell, mark):
    r = _complete({"_BEAM_PROBE_COMPLETE": f"{shell}_source"})
    assert r.returncode == 0, r.stderr
    assert mark in r.stdout, r.stdout


def test_pro_tab_completes_the_three_proc_commands():
    """click's protocol, as each shell's script speaks it."""
    want = ["proc-count", "proc-info", "proc-window"]
    bash = _complete({"_BEAM_PROBE_COMPLETE": "bash_complete",
                      "COMP_WORDS": "beam-probe pro", "COMP_CWORD": "1"})
    assert bash.stdout.splitlines() == [f"plain,{w}" for w in want], bash
    zsh = _complete({"_BEAM_PROBE_COMPLETE": "zsh_complete",
                     "COMP_WORDS": "beam-probe pro", "COMP_CWORD": "1"})
    lines = zsh.stdout.splitlines()
    assert lines[1::3] == want and set(lines[0::3]) == {"plain"}, zsh
    fish = _complete({"_BEAM_PROBE_COMPLETE": "fish_complete",
                      "COMP_WORDS": "beam-probe pro", "COMP_CWORD": "pro"})
    assert [line.split(",")[1].split("\t")[0]
            for line in fish.stdout.splitlines()] == want, fish
    # An attribute, where the usage line has ATTRIBUTE.
    attribute = _complete({"_BEAM_PROBE_COMPLETE": "bash_complete",
                           "COMP_WORDS": "beam-probe proc-count app@db1 bin",
                           "COMP_CWORD": "3"})
    assert attribute.stdout.splitlines() == ["plain,binary_memory"], \
        attribute


def test_bash_completes_through_the_documented_line(tmp_path):
    """The line docs/manual/completion.md gives, in a real bash: the
    script is evaluated, and its function fills COMPREPLY."""
    bash = shutil.which("bash")
    if bash is None:
        pytest.skip("bash is not installed here")
    text = open(os.path.join(DOCS, "manual", "completion.md"),
                encoding="utf-8").read()
    line = next(line.split("#")[0].strip() for line in text.splitlines()
                if "bash_source" in line and line.startswith("eval"))
    shim = tmp_path / "beam-probe"
    shim.write_text(f"#!/bin/sh\nexec {sys.executable} -m beam_probe "
                    "\"$@\"\n")
    shim.chmod(0o755)
    script = (f"{line}\n"
              "COMP_WORDS=(beam-probe pro); COMP_CWORD=1\n"
              "_beam_probe_completion beam-probe pro beam-probe\n"
              "printf '%s\\n' \"${COMPREPLY[@]}\"\n")
    r = subprocess.run([bash, "--norc", "--noprofile", "-c", script],
                       env=dict(os.environ, PYTHONPATH=ROOT,
                                PATH=f"{tmp_path}:{os.environ['PATH']}"),
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["proc-count", "proc-info",
                                     "proc-window"], r


# -- links -------------------------------------------------------------------

def _slug(heading: str) -> str:
    """The anchor GitHub gives a heading."""
    text = heading.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def _anchors(path: str) -> set[str]:
    found: set[str] = set()
    counts: dict[str, int] = {}
    fence = False
    for line in open(path, encoding="utf-8"):
        if line.startswith("```"):
            fence = not fence
        if fence or not line.startswith("#"):
            continue
        slug = _slug(line.lstrip("#"))
        n = counts.get(slug, 0)
        counts[slug] = n + 1
        found.add(slug if n == 0 else f"{slug}-{n}")
    return found


def _markdown_files() -> list[str]:
    files = [os.path.join(ROOT, "README.md")]
    for folder, _, names in os.walk(DOCS):
        files += [os.path.join(folder, n) for n in names if n.endswith(".md")]
    return sorted(files)


def test_every_link_between_the_pages_leads_somewhere():
    """README.md and docs/: a relative link names a file that exists, and
    its #anchor a heading there (the README's sections moved to docs/
    must take their links with them)."""
    broken = []
    for path in _markdown_files():
        text = open(path, encoding="utf-8").read()
        text = re.sub(r"```.*?```", "", text, flags=re.S)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue
            file, _, anchor = target.partition("#")
            where = os.path.normpath(os.path.join(os.path.dirname(path),
                                                  file)) if file else path
            if not os.path.exists(where):
                broken.append((os.path.relpath(path, ROOT), target))
            elif anchor and where.endswith(".md") and \
                    anchor not in _anchors(where):
                broken.append((os.path.relpath(path, ROOT), target))
    assert not broken, broken


def test_the_link_check_finds_a_broken_anchor(tmp_path):
    page = tmp_path / "a.md"
    page.write_text("# A heading, with `code`\n\n```\n# not one\n```\n")
    assert _anchors(str(page)) == {"a-heading-with-code"}
