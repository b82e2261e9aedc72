"""Elixir reads as Elixir: against a real Elixir node (Debian's elixir
package: its elixir application started in a node, and a module compiled
there by Elixir itself), text shows MyApp.Cache.loop/1, #PID<...> and
MyApp.Cache; --syntax erlang and JSON keep Erlang's forms; every form
either language prints is accepted where a process is named."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess

import time

import pytest

from beam_probe.erldist.terms import Atom
from beam_probe.node.remote import attach
from conftest import run_here

ELIXIR_CODE = """
defmodule MyApp.Cache do
  def loop(state) do
    receive do
      {:put, item} -> loop([item | state])
    end
  end
end
Process.register(spawn(fn -> MyApp.Cache.loop([]) end), MyApp.Cache)

defmodule MyApp.Store do
  use GenServer
  defstruct items: %{}, name: "store"
  def init(:ok) do
    :ets.new(__MODULE__, [:named_table, :public])
    :ets.insert(__MODULE__, {{:user, 1}, "one"})
    items = Map.new(1..20, fn i -> {"item:#{i}", :binary.part(<<i::32, 0::size(524256)>>, 0, 100)} end)
    {:ok, %MyApp.Store{items: items}}
  end
end
{:ok, _} = GenServer.start(MyApp.Store, :ok, name: MyApp.Store)
{:ok, _} = Agent.start(fn -> Enum.to_list(1..300) end, name: MyApp.Counter)
"""


def _elixir_ebin(otp: str) -> str | None:
    """The elixir application's ebin as the node of ``otp`` sees it: the
    host's Elixir 1.14 for OTP 25, Debian 13's 1.18 in the OTP 27 root."""
    from conftest import OTP27_ROOT, otp27_missing

    if otp == "27":
        if otp27_missing():
            return None
        command, root = ["chroot", OTP27_ROOT, "elixir"], OTP27_ROOT
    elif shutil.which("elixir"):
        command, root = ["elixir"], ""
    else:
        return None
    out = subprocess.run([*command, "-e", "IO.puts(:code.lib_dir(:elixir))"],
                         capture_output=True, text=True)
    ebin = os.path.join(os.path.realpath(root + out.stdout.strip()), "ebin")
    if out.returncode != 0 or not os.path.isdir(ebin):
        return None
    return ebin[len(os.path.realpath(root)) if root else 0:]


def start_elixir(factory, otp: str, request):
    """An Elixir node of release ``otp`` running ELIXIR_CODE, started by
    ``factory`` (skipped where this release has no Elixir here)."""
    if otp not in request.config.getoption("otp").split(","):
        pytest.skip(f"OTP {otp} is not among --otp")
    ebin = _elixir_ebin(otp)
    if ebin is None:
        from conftest import otp27_missing

        pytest.skip(otp27_missing() or "no elixir for this release here "
                    "(.ci/setup installs Debian's elixir package; it could "
                    "not be installed here)")
    code = ELIXIR_CODE.replace("\\", "\\\\").replace('"', '\\"')
    node = factory.start(otp, code_paths=(ebin,), eval_expr=(
        "{ok, _} = application:ensure_all_started(elixir), "
        f"'Elixir.Code':eval_string(<<\"{code}\">>)"))
    # The node answers before its -eval has compiled the module (~1 s).
    with attach(node.node, node.cookie.encode()) as remote:
        deadline = time.monotonic() + 60
        while remote.call("erlang", "whereis",
                          [Atom("Elixir.MyApp.Counter")]) == Atom("undefined"):
            assert time.monotonic() < deadline, "MyApp.Cache never started"
            time.sleep(0.1)
    return node


@pytest.fixture(scope="module", params=["25", "27"],
                ids=["elixir1.14-otp25", "elixir1.18-otp27"])
def elixir_node(request, session_nodes):
    return start_elixir(session_nodes, request.param, request)


def test_text_follows_the_node_and_json_keeps_erlang(elixir_node):
    node = elixir_node
    text = run_here("proc-info", node.node, "MyApp.Cache", node=node)
    assert text.returncode == 0, text.stderr
    assert re.search(r": #PID<0\.\d+\.\d+> ", text.stdout.splitlines()[0])
    assert re.search(r"registered_name +MyApp\.Cache$", text.stdout, re.M)
    assert "MyApp.Cache.loop/1" in text.stdout
    assert ":erlang.apply/2" in text.stdout  # its initial call
    assert "Elixir." not in text.stdout
    erlang = run_here("proc-info", node.node, "MyApp.Cache", "--syntax",
                     "erlang", node=node).stdout
    assert "'Elixir.MyApp.Cache':loop/1" in erlang and "#PID" not in erlang
    as_json = json.loads(run_here("proc-info", node.node, "MyApp.Cache",
                                 "--format", "json", node=node).stdout)
    assert as_json["meta"]["registered_name"] == "Elixir.MyApp.Cache"
    assert as_json["pid"].startswith("<0.")
    assert as_json["location"]["current_stacktrace"][0].startswith(
        "'Elixir.MyApp.Cache':loop/1")


def test_every_form_names_the_process(elixir_node):
    node = elixir_node
    pid = json.loads(run_here("proc-info", node.node, "MyApp.Cache",
                             "--format", "json", node=node).stdout)["pid"]
    for form in ("MyApp.Cache", "Elixir.MyApp.Cache", ":'Elixir.MyApp.Cache'",
                 ":\"Elixir.MyApp.Cache\"", "'Elixir.MyApp.Cache'", pid,
                 "#PID" + pid, pid.strip("<>")):
        r = run_here("proc-info", node.node, form, "--format", "json",
                    node=node)
        assert r.returncode == 0, (form, r.stderr)
        assert json.loads(r.stdout)["pid"] == pid, form
    r = run_here("proc-info", node.node, ":logger", "--format", "json",
                node=node)
    assert r.returncode == 0 and \
        json.loads(r.stdout)["meta"]["registered_name"] == "logger"


def test_tables_and_traces_read_as_elixir(elixir_node):
    node = elixir_node
    table = run_here("proc-count", node.node, "memory", "200", node=node)
    assert table.returncode == 0, table.stderr
    line = next(l for l in table.stdout.splitlines() if "MyApp.Cache" in l)
    assert "#PID<" in line and "MyApp.Cache.loop/1" in line
    assert ":code_server" in table.stdout
    trace = run_here("trace-gc", node.node, "MyApp.Cache", "--duration",
                    "0.3", node=node)
    assert trace.returncode == 0, trace.stderr
    assert re.search(r"#PID<0\.\d+\.\d+> MyApp\.Cache", trace.stdout)


def test_an_erlang_node_stays_in_erlang_syntax(target):
    plain = run_here("proc-count", target.node, "memory", "50", node=target)
    assert "code_server" in plain.stdout and ":code_server" not in \
        plain.stdout and "#PID" not in plain.stdout


def test_diff_of_an_elixir_nodes_snapshots_reads_as_elixir(elixir_node,
                                                           tmp_path):
    node = elixir_node
    files = [str(tmp_path / f"{i}.snapshot") for i in (1, 2)]
    for path in files:
        r = run_here("snapshot", node.node, "-o", path, node=node)
        assert r.returncode == 0, r.stderr
        # Between the two, the cache takes 1 MB: its group leads the diff.
        with attach(node.node, node.cookie.encode()) as remote:
            remote.call("erlang", "send", [
                Atom("Elixir.MyApp.Cache"),
                (Atom("put"), bytes(1_000_000))])
    text = run_here("diff", *files).stdout
    assert re.search(r"^MyApp\.Cache\s", text, re.M), text
    assert "Elixir.MyApp.Cache" not in text
    erlang = run_here("diff", *files, "--syntax", "erlang").stdout
    assert re.search(r"^Elixir\.MyApp\.Cache\s", erlang, re.M)
    assert json.loads(run_here("diff", *files, "--format", "json").stdout)[
        "elixir"] is True


def _tables(text: str) -> list[tuple[list[tuple[int, int]], list[str]]]:
    """Each table of a command's text: its columns (start, end), from the
    dashed rule under its header, and its lines below the rule."""
    lines = text.splitlines()
    found = []
    for i, line in enumerate(lines):
        if i and line and set(line) <= {"-", " "} and "--" in line:
            spans = [(m.start(), m.end()) for m in re.finditer(r"-+", line)]
            body = []
            for row in lines[i + 1:]:
                if not row.strip():
                    break
                body.append(row)
            found.append((spans, body))
    return found


def _misaligned(text: str) -> list[str]:
    """Rows of a table whose columns do not start where its rule says:
    the two spaces before each column are spaces in every row."""
    bad = []
    for spans, body in _tables(text):
        for row in body:
            for start, _end in spans[1:]:
                if len(row) > start and row[start - 2:start] != "  ":
                    bad.append(row)
                    break
    return bad


def test_every_table_lines_up_in_elixir(elixir_node, tmp_path):
    """Widths come from what is printed: an Elixir pid is four characters
    longer than Erlang's, a name like MyApp.Cache shorter than
    'Elixir.MyApp.Cache'."""
    node = elixir_node
    files = [str(tmp_path / f"{i}.snapshot") for i in (1, 2, 3)]
    for path in files:
        assert run_here("snapshot", node.node, "-o", path,
                       node=node).returncode == 0
    commands = [("proc-count", "memory", "30"), ("bin-leak", "30"),
                ("proc-window", "memory", "20", "300"), ("ets",),
                ("proc-info", "MyApp.Cache"), ("alloc",),
                ("trace-gc", "MyApp.Cache", "code_server", "--duration",
                 "0.3")]
    texts = []
    for command in commands:
        r = run_here(command[0], node.node, *command[1:], node=node)
        assert r.returncode == 0, (command, r.stderr)
        texts.append((command[0], r.stdout))
    r = run_here("diff", *files)
    assert r.returncode == 0, r.stderr
    texts.append(("diff", r.stdout))
    assert any("#PID<" in text for _name, text in texts)
    tables = {name: len(_tables(text)) for name, text in texts}
    for name, text in texts:
        assert _misaligned(text) == [], (name, text)
    # (bin-leak and proc-window on a quiet node say so in a line.)
    assert all(tables[name] for name in ("proc-count", "ets", "alloc",
                                         "trace-gc", "diff")), tables


def test_inspect_reads_a_genserver_struct_and_an_agent(elixir_node):
    """A GenServer whose state is a struct of slices pinning 64 KiB
    binaries, and an Agent: read in place, paths in Elixir's syntax."""
    node = elixir_node
    text = run_here("inspect", node.node, "MyApp.Store", node=node)
    assert text.returncode == 0, text.stderr
    assert "%MyApp.Store{}" in text.stdout
    assert re.search(r"^  state\.items +map +20 ", text.stdout, re.M)
    assert 'state.items["item:' in text.stdout
    assert "state.items |> Map.values()" not in text.stdout
    assert ":binary.copy/1" in text.stdout and "Elixir." not in text.stdout
    as_json = json.loads(run_here("inspect", node.node, "MyApp.Store",
                                  "--format", "json", node=node).stdout)
    assert as_json["kind"] == "gen_server"
    (pinned,) = as_json["pinned"]
    assert pinned["path_elixir"] == "state.items[_]"
    assert pinned["path"] == "State#{items}#{_}"
    assert pinned["count"] == 20 and pinned["bytes"] == 2000
    assert pinned["referenced_bytes"] >= 20 * 65536
    agent = json.loads(run_here("inspect", node.node, "MyApp.Counter",
                                "--format", "json", node=node).stdout)
    assert agent["kind"] == "gen_server"
    state = next(p for p in agent["parts"] if p["path"] == "State")
    assert state["kind"] == "list" and state["count"] == 300
    # A table named by its module, as :ets.new(__MODULE__, ...) names it,
    # in the syntax an Elixir user types.
    table = json.loads(run_here("inspect", node.node, "--table",
                                "MyApp.Store", "--format", "json",
                                node=node).stdout)
    assert table["table"] == "'Elixir.MyApp.Store'" and table["size"] == 1


@pytest.mark.parametrize("release", ["25", "27"],
                         ids=["elixir1.14-otp25", "elixir1.18-otp27"])
def test_a_dead_elixir_nodes_dump_reads_as_elixir(release, request,
                                                   beam_dir, tmp_path):
    """An Elixir node killed by erlang:halt/1: its dump's overview and
    the dead GenServer's size tree in Elixir's syntax."""
    from beam_probe.errors import ConnectionLost, ProbeError
    from conftest import NodeFactory

    otp = release
    factory = NodeFactory(beam_dir)
    try:
        node = start_elixir(factory, otp, request)
        with attach(node.node, node.cookie.encode()) as remote:
            try:
                remote.call("erlang", "halt",
                            [[ord(c) for c in "elixir app stopped"]])
            except (ConnectionLost, ProbeError):
                pass
        node.proc.wait(60)
        dump = str(tmp_path / "elixir.dump")
        shutil.copy(os.path.join(node.home, "erl_crash.dump"), dump)
    finally:
        factory.stop_all()
    overview = run_here("crashdump", dump)
    assert overview.returncode == 0, overview.stderr
    assert "slogan: elixir app stopped" in overview.stdout
    assert "#PID<0." in overview.stdout and "Elixir." not in overview.stdout
    as_json = json.loads(run_here("crashdump", dump, "--format",
                                  "json").stdout)
    assert as_json["elixir"] is True
    text = run_here("inspect", dump, "MyApp.Store")
    assert text.returncode == 0, text.stderr
    assert re.search(r"map +20 ", text.stdout)
    assert '["item:' in text.stdout and ":gen_server.loop/" in text.stdout
    result = json.loads(run_here("inspect", dump, "MyApp.Store",
                                 "--format", "json").stdout)
    if otp == "25":
        # OTP 25 leaves the slices' binaries out of its dumps.
        assert result["pinned"] == [] and "not in the dump" in \
            result["state"]
        return
    assert ":binary.copy/1" in text.stdout
    (pinned,) = result["pinned"]
    assert pinned["count"] == 20 and pinned["bytes"] == 2000
    assert pinned["referenced_bytes"] >= 20 * 65536
    assert pinned["path_elixir"].endswith("[_]")


def test_serve_scrapes_an_elixir_node(elixir_node):
    from test_serve import serve_env, serving

    node = elixir_node
    with serving("--target", node.node, env=serve_env(node.cookie)) as s:
        vm = s.probe(node.node)
        top = s.probe(node.node, module="top", n="20")
    assert vm["beam_probe_up"] == 1 and vm["erlang_vm_processes"] > 40
    assert top["beam_probe_up"] == 1
    # Names as Erlang writes them, as JSON does: Elixir's modules are
    # atoms named Elixir.*.
    assert "Elixir." in " ".join(k for k in top if "process=" in k)


def test_top_names_processes_as_elixir_does(elixir_node):
    """top's frame: a filter in Elixir's words finds the process, and
    the text shows it as Elixir writes it; JSON keeps Erlang's forms."""
    node = elixir_node
    text = run_here("top", node.node, "--once", "--interval", "0.5",
                    "--filter", "MyApp.Cache", node=node)
    assert text.returncode == 0, text.stderr
    row = text.stdout.splitlines()[-1]
    assert row.startswith("#PID<0.") and " MyApp.Cache " in row, row
    assert "MyApp.Cache.loop/1" in row and "Elixir." not in text.stdout
    as_json = json.loads(run_here("top", node.node, "--once", "--interval",
                                  "0.5", "--filter", "MyApp.Cache",
                                  "--format", "json", node=node).stdout)
    (process,) = as_json["frames"][0]["processes"]
    assert process["name"] == "Elixir.MyApp.Cache"
    assert process["current_function"] == "'Elixir.MyApp.Cache':loop/1"
