"""`beam-probe serve`: the Prometheus exporter, against real nodes, a real
Prometheus server and its promtool (Debian's prometheus, unpacked by
.ci/setup into .ci/prometheus-root)."""

from __future__ import annotations

import gzip
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from contextlib import contextmanager
from typing import Iterator

import pytest

from conftest import REPO, STEERING, one_line, run_cli, unique_name

from beam_probe.node.remote import attach

PROMETHEUS_ROOT = os.environ.get(
    "BEAM_PROBE_PROMETHEUS_ROOT",
    os.path.join(REPO, ".ci", "prometheus-root", "usr", "bin"))


def _tool(name: str) -> str | None:
    path = os.path.join(PROMETHEUS_ROOT, name)
    if os.access(path, os.X_OK):
        return path
    from shutil import which
    return which(name)


PROMETHEUS, PROMTOOL = _tool("prometheus"), _tool("promtool")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None, reason="no promtool: .ci/setup unpacks Debian's "
    "prometheus into .ci/prometheus-root")
needs_prometheus = pytest.mark.skipif(
    PROMETHEUS is None, reason="no prometheus: .ci/setup unpacks Debian's "
    "prometheus into .ci/prometheus-root")


class Served:
    """A `beam-probe serve` process on a free port."""

    def __init__(self, proc: subprocess.Popen, url: str) -> None:
        self.proc, self.url = proc, url
        self.address = url.split("//")[1].rstrip("/")
        self.errors: list[str] = []   # its stderr, line by line

    def _drain(self) -> None:
        for line in self.proc.stderr:
            self.errors.append(line.rstrip("\n"))

    def get(self, path: str, headers: dict | None = None,
            timeout: float = 30) -> tuple[int, dict, bytes]:
        request = urllib.request.Request(self.url + path.lstrip("/"),
                                         headers=headers or {})
        try:
            with urllib.request.urlopen(request, timeout=timeout) as r:
                return r.status, dict(r.headers), r.read()
        except urllib.error.HTTPError as exc:
            return exc.code, dict(exc.headers), exc.read()

    def probe(self, target: str, **params) -> dict[str, float]:
        """The samples of /probe?target=... as {series: value}."""
        query = urllib.parse.urlencode({"target": target, **params})
        code, _, body = self.get(f"probe?{query}")
        assert code == 200, body
        return samples(body.decode())

    def own(self) -> dict[str, float]:
        code, _, body = self.get("metrics")
        assert code == 200
        return samples(body.decode())


def samples(text: str) -> dict[str, float]:
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            series, _, value = line.rpartition(" ")
            out[series] = float(value)
    return out


def serve_env(cookie: str | None = None, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in STEERING}
    if cookie is not None:
        env["BEAM_PROBE_COOKIE"] = cookie
    env.update(extra)
    return env


@contextmanager
def serving(*args: str, env: dict | None = None) -> Iterator[Served]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "beam_probe", "serve", "--listen",
         "127.0.0.1:0", *args], env=env or serve_env(),
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stderr.readline()
        match = re.search(r"serving (https?://\S+/)", line)
        assert match, line + proc.stderr.read()
        served = Served(proc, match.group(1))
        # Drain stderr so that a chatty exporter never blocks on it.
        threading.Thread(target=served._drain, daemon=True).start()
        yield served
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    time.sleep(0.1)
    # Whatever happened, never a traceback.
    assert not any("Traceback" in line for line in served.errors), \
        served.errors


def promtool_problems(text: str) -> list[str]:
    run = subprocess.run([PROMTOOL, "check", "metrics"], input=text,
                         capture_output=True, text=True, timeout=60)
    return [line for line in (run.stdout + run.stderr).splitlines()
            if line.strip()]


def hidden_peers(node, cookie: str) -> list[str]:
    """The hidden nodes connected to ``node``, ours (the asker) left
    out."""
    with attach(node.node, cookie.encode(), timeout=10) as remote:
        peers = remote.call("erlang", "nodes", [_atom("hidden")])
        return [str(p) for p in peers if str(p) != remote.conn.our_node]


def _atom(text: str):
    from beam_probe.erldist.terms import Atom
    return Atom(text)


# -- the default scrape, by release ------------------------------------------


@needs_promtool
def test_a_scrape_gives_the_nodes_figures_that_promtool_accepts(nodes, otp):
    node = nodes.start(otp)
    with serving("--target", node.node, env=serve_env(node.cookie)) as s:
        first = s.probe(node.node)
        code, headers, body = s.get(
            "probe?" + urllib.parse.urlencode({"target": node.node}))
    assert first["beam_probe_up"] == 1
    with attach(node.node, node.cookie.encode(), timeout=10) as remote:
        def info(item):
            return remote.call("erlang", "system_info", [_atom(item)])
        for series, item in (("erlang_vm_process_limit", "process_limit"),
                             ("erlang_vm_atom_limit", "atom_limit"),
                             ("erlang_vm_ets_limit", "ets_limit"),
                             ("erlang_vm_port_limit", "port_limit"),
                             ("erlang_vm_schedulers", "schedulers")):
            assert first[series] == info(item), series
        # Our own processes are not the node's: the count is the node's
        # own, as every other command counts (within what the node itself
        # started or ended in the meantime).
        now = info("process_count")
        assert abs(first["erlang_vm_processes"] - now) <= 5, \
            (first["erlang_vm_processes"], now)
    memory = {k: v for k, v in first.items()
              if k.startswith("erlang_vm_memory_bytes")}
    assert set(memory) == {'erlang_vm_memory_bytes{kind="system"}',
                           'erlang_vm_memory_bytes{kind="processes"}'}
    assert first['beam_probe_memory_verdict{alloc="",verdict="in_use"}'] == 1
    allocators = [k for k in first if k.startswith("erlang_vm_allocators{")]
    assert any('alloc="binary_alloc"' in k and 'usage="carriers_size"' in k
               for k in allocators)
    assert first["erlang_vm_statistics_reductions_total"] > 0
    assert code == 200 and headers["Content-Type"].startswith("text/plain")
    assert promtool_problems(body.decode()) == []


@needs_promtool
def test_compat_adds_the_pre_6_names_and_top_names_processes(nodes, otp,
                                                             tmp_path):
    from beam_probe.erldist.terms import Atom
    from beam_probe.exporter.families import COMPAT
    from beam_probe.node.remote import attach

    # One DETS table open, held by a process of the node's own, so the
    # DETS counts are 1 and not a default 0.
    dets = str(tmp_path / "one.dets")
    node = nodes.start(otp, eval_expr=(
        "spawn(fun() -> {ok, _} = dets:open_file(bpt_i_dets, "
        f"[{{file, \"{dets}\"}}]), receive stop -> ok end end)"))
    with attach(node.node, node.cookie.encode()) as remote:
        deadline = time.monotonic() + 60
        while remote.call("ets", "info", [Atom("dets_registry"),
                                          Atom("size")]) != 1:
            assert time.monotonic() < deadline, "the DETS table never opened"
            time.sleep(0.1)
    with serving("--target", node.node, "--compat",
                 env=serve_env(node.cookie)) as s:
        _, _, body = s.get("probe?" + urllib.parse.urlencode(
            {"target": node.node}))
        _, _, top_body = s.get("probe?" + urllib.parse.urlencode(
            {"target": node.node, "module": "top", "n": "5"}))
    compat = samples(body.decode())
    # RabbitMQ's Erlang-BEAM dashboard's names, beside the 6.x ones.
    for old in ("erlang_vm_process_count", "erlang_vm_port_count",
                'erlang_vm_memory_bytes_total{kind="processes"}',
                'erlang_vm_memory_system_bytes_total{usage="binary"}',
                "erlang_vm_statistics_context_switches",
                "erlang_vm_statistics_runtime_milliseconds",
                "erlang_vm_statistics_run_queues_length_total",
                "erlang_vm_ets_tables", "erlang_vm_dets_tables",
                # RabbitMQ 3.8-3.13's table counts (issue 38).
                "erlang_vm_memory_ets_tables",
                "erlang_vm_memory_dets_tables"):
        assert old in compat, old
    assert compat["erlang_vm_process_count"] == compat["erlang_vm_processes"]
    assert compat["erlang_vm_memory_ets_tables"] > 10     # a node's own
    assert (compat["erlang_vm_memory_ets_tables"]
            == compat["erlang_vm_ets_tables"])
    assert (compat["erlang_vm_memory_dets_tables"]
            == compat["erlang_vm_dets_tables"] == 1)
    text = body.decode()
    assert "# TYPE erlang_vm_memory_ets_tables gauge" in text
    assert "# HELP erlang_vm_memory_dets_tables Erlang VM DETS Tables " in text
    # promtool objects to the old names, and to nothing else.
    problems = promtool_problems(body.decode())
    assert problems and all(p.split()[0] in set(COMPAT.values())
                            for p in problems), problems
    top = samples(top_body.decode())
    ranked = [k for k in top
              if k.startswith("beam_probe_top_process_memory_bytes")]
    assert len(ranked) == 5 and not any("<0." in k for k in ranked)
    assert 'process="code_server"' in " ".join(ranked)
    assert promtool_problems(top_body.decode()) == []


def test_openmetrics_and_gzip_are_negotiated(nodes):
    node = nodes.start("25")
    with serving("--target", node.node, env=serve_env(node.cookie)) as s:
        path = "probe?" + urllib.parse.urlencode({"target": node.node})
        code, headers, body = s.get(path, {
            "Accept": "application/openmetrics-text; version=1.0.0",
            "Accept-Encoding": "gzip"})
    assert code == 200
    assert headers["Content-Type"].startswith("application/openmetrics-text")
    assert headers["Content-Encoding"] == "gzip"
    text = gzip.decompress(body).decode()
    assert text.endswith("# EOF\n") and "beam_probe_up 1" in text


# -- connections --------------------------------------------------------------


def test_a_node_killed_and_restarted_is_down_then_up_on_one_connection(
        nodes):
    node = nodes.start("25")
    with serving("--target", node.node, env=serve_env(node.cookie)) as s:
        assert s.probe(node.node)["beam_probe_up"] == 1
        assert s.probe(node.node)["beam_probe_up"] == 1
        assert s.own()["beam_probe_exporter_dials_total{result=\"ok\"}"] == 1
        node.proc.kill()
        node.proc.wait()
        started = time.monotonic()
        assert s.probe(node.node)["beam_probe_up"] == 0
        # Down is said at once: no wait for a timeout.
        assert time.monotonic() - started < 2
        assert s.own()["beam_probe_exporter_connections"] == 0
        node.stop()
        node.start()
        deadline = time.monotonic() + 40
        while s.probe(node.node)["beam_probe_up"] != 1:
            assert time.monotonic() < deadline, "not up again within 40 s"
            time.sleep(0.5)
        for _ in range(3):
            assert s.probe(node.node)["beam_probe_up"] == 1
        own = s.own()
        assert own["beam_probe_exporter_connections"] == 1
        assert own["beam_probe_exporter_dials_total{result=\"ok\"}"] == 2
        # One connection on the node, whatever the number of scrapes.
        assert len(hidden_peers(node, node.cookie)) == 1


def test_many_targets_at_once_each_one_connection(nodes):
    cookie = f"c{os.getpid()}x{time.monotonic_ns()}"
    many = [nodes.start("25", cookie=cookie) for _ in range(4)]
    with serving(*(a for n in many for a in ("--target", n.node)),
                 env=serve_env(cookie)) as s:
        results: list[float] = []

        def scrape(node):
            for _ in range(3):
                results.append(s.probe(node.node)["beam_probe_up"])
        threads = [threading.Thread(target=scrape, args=(n,))
                   for n in many for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        own = s.own()
    assert results == [1.0] * 36
    assert own["beam_probe_exporter_connections"] == 4
    assert own["beam_probe_exporter_dials_total{result=\"ok\"}"] == 4
    for node in many:
        assert len(hidden_peers(node, cookie)) == 0  # serve has stopped


def test_a_slow_node_answers_up_0_within_the_scrape_timeout(nodes):
    node = nodes.start("25")
    with serving("--target", node.node, env=serve_env(node.cookie)) as s:
        assert s.probe(node.node)["beam_probe_up"] == 1
        path = "probe?" + urllib.parse.urlencode({"target": node.node})
        os.kill(node.proc.pid, signal.SIGSTOP)
        try:
            answers: list[tuple[float, dict]] = []

            def scrape():
                started = time.monotonic()
                code, _, body = s.get(path, {
                    "X-Prometheus-Scrape-Timeout-Seconds": "1.5"})
                answers.append((time.monotonic() - started,
                                samples(body.decode())))
            threads = [threading.Thread(target=scrape) for _ in range(4)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(30)
        finally:
            os.kill(node.proc.pid, signal.SIGCONT)
        # 1.5 s less the 0.5 s offset: each answers within about 1 s.
        assert len(answers) == 4
        for seconds, got in answers:
            assert got["beam_probe_up"] == 0
            assert 0.8 < seconds < 2.5, seconds
        # The connection survived the pause: no second dial.
        deadline = time.monotonic() + 10
        while s.probe(node.node)["beam_probe_up"] != 1:
            assert time.monotonic() < deadline
            time.sleep(0.2)
        assert s.own()["beam_probe_exporter_dials_total{result=\"ok\"}"] == 1


class _Listener:
    """A TCP port that counts who connects: an EPMD that answers nothing,
    and with ``hold``, keeps each connection open without a word."""

    def __init__(self, hold: bool = False) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        self.hold = hold
        self.held: list[socket.socket] = []
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            if self.hold:
                self.held.append(conn)
            else:
                conn.close()

    def close(self) -> None:
        self.sock.close()
        for conn in self.held:
            conn.close()


def test_a_target_outside_the_allow_list_is_refused_without_dialling():
    epmd = _Listener()
    env = serve_env("cookie", ERL_EPMD_PORT=str(epmd.port))
    with serving("--target", "allowed@127.0.0.1", env=env) as s:
        code, _, body = s.get("probe?target=other%40127.0.0.1")
        assert code == 403 and b"matches no --target" in body
        code, _, _ = s.get("probe?target=allowed%40127.0.0.2")
        assert code == 403
        time.sleep(0.3)
        assert epmd.accepted == 0
        assert s.own()['beam_probe_exporter_refused_total'
                       '{reason="not_allowed"}'] == 2
        # The same request for an allowed name does dial: the count above
        # would have seen it.
        assert s.probe("allowed@127.0.0.1")["beam_probe_up"] == 0
        assert epmd.accepted >= 1
    epmd.close()


def test_malformed_requests_are_400_and_other_paths_404():
    with serving("--target", "a@h", env=serve_env("cookie")) as s:
        for path in ("probe", "probe?target=", "probe?target=a%40h&module=x",
                     "probe?target=a%40h&n=21", "probe?target=a%40h&n=x",
                     "probe?target=a%40h&target=a%40h",
                     "probe?target=a%40h&cluster=maybe",
                     "probe?target=%40%40"):
            code, _, body = s.get(path)
            assert code == 400, (path, body)
            assert body.count(b"\n") == 1, body
        assert s.get("nothing")[0] == 404
        code, _, page = s.get("")
        assert code == 200 and b"__param_target" in page
        assert s.address.encode() in page


# -- cluster ------------------------------------------------------------------


def connected_pair(nodes) -> tuple[str, object, object]:
    """Two OTP 25 nodes of one cookie, the first connected to the second:
    a cluster's entry and its member."""
    cookie = f"c{os.getpid()}x{time.monotonic_ns()}"
    entry = nodes.start("25", cookie=cookie)
    member = nodes.start("25", cookie=cookie)
    with attach(entry.node, cookie.encode(), timeout=10) as remote:
        assert str(remote.call("net_adm", "ping", [_atom(member.node)])) \
            == "pong"
    return cookie, entry, member


def test_a_cluster_target_labels_every_nodes_series(nodes):
    cookie, entry, other = connected_pair(nodes)
    with serving("--target", entry.node, env=serve_env(cookie)) as s:
        got = s.probe(entry.node, cluster="1")
        top = s.probe(entry.node, cluster="1", module="top", n="3")
    for node in (entry, other):
        assert got[f'beam_probe_up{{node="{node.node}"}}'] == 1
        assert f'erlang_vm_processes{{node="{node.node}"}}' in got
        assert any(k.startswith("beam_probe_top_process_memory_bytes{")
                   and f'node="{node.node}"' in k for k in top)


# -- the command line ---------------------------------------------------------


@pytest.mark.parametrize("args, words", [
    ((), ("no target is allowed",)),
    (("--target", "nohost"), ("not a target pattern",)),
    (("--target", "a@h", "--listen", "nowhere"), ("--listen",)),
    (("--target", "a@h", "--listen", "127.0.0.1:99999"), ("--listen",)),
    (("--config", "/nonexistent.toml"), ("--config",)),
])
def test_bad_options_are_one_line_and_exit_2(args, words):
    one_line(run_cli("serve", *args, env={"BEAM_PROBE_COOKIE": "c"}), 2,
             *words)


def test_a_busy_port_is_one_line():
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        one_line(run_cli("serve", "--target", "a@h", "--listen",
                         f"127.0.0.1:{port}",
                         env={"BEAM_PROBE_COOKIE": "c"}), 2, "--listen")


@pytest.mark.parametrize("text, words", [
    ("target = 3", ("target",)),
    ("[[target]]\nmatch = 'a@h'\nbogus = 1", ("unknown key 'bogus'",)),
    ("[[target]]\ncookie_file = '/x'", ("no match",)),
    ("[[target]]\nmatch = 'a@h'\ncookie = 'secret'", ("others can read",)),
    ("[[target]]\nmatch = 'a@h'\ndist_port = 70000", ("dist_port",)),
    ("listen = [", ("not TOML",)),
    ("[[target]]\nmatch = 'a@h'\ntls = 'yes'", ("wrong type",)),
])
def test_a_bad_config_file_is_one_line(tmp_path, text, words):
    path = tmp_path / "serve.toml"
    path.write_text(text)
    path.chmod(0o644)
    one_line(run_cli("serve", "--config", str(path),
                     env={"BEAM_PROBE_COOKIE": "c"}), 2, *words)


def test_a_config_gives_each_target_its_cookie(nodes, tmp_path):
    first = nodes.start("25")
    second = nodes.start("25")
    config = tmp_path / "serve.toml"
    config.write_text(
        f"timeout = 5\n"
        f"[[target]]\nmatch = '{first.node}'\n"
        f"cookie_file = '{first.cookie_file}'\n"
        f"[[target]]\nmatch = '{second.node}'\ncookie = '{second.cookie}'\n")
    config.chmod(0o600)
    with serving("--config", str(config), env=serve_env()) as s:
        assert s.probe(first.node)["beam_probe_up"] == 1
        assert s.probe(second.node)["beam_probe_up"] == 1


def test_sigterm_ends_serve_with_0_and_its_connections(nodes):
    node = nodes.start("25")
    with serving("--target", node.node, env=serve_env(node.cookie)) as s:
        assert s.probe(node.node)["beam_probe_up"] == 1
        assert len(hidden_peers(node, node.cookie)) == 1
        s.proc.send_signal(signal.SIGTERM)
        assert s.proc.wait(10) == 0
    deadline = time.monotonic() + 2
    while hidden_peers(node, node.cookie):
        assert time.monotonic() < deadline, "our connection outlived serve"
        time.sleep(0.1)


# -- a real Prometheus ------------------------------------------------------


def readme_scrape_config() -> str:
    # serve's section moved from the README to the monitoring page.
    with open(os.path.join(REPO, "docs", "manual", "monitoring.md"),
              encoding="utf-8") as f:
        text = f.read()
    match = re.search(r"```yaml\n(scrape_configs:\n.*?)```", text, re.S)
    assert match, "docs/manual/monitoring.md shows no scrape configuration"
    return match.group(1)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@needs_prometheus
def test_prometheus_scrapes_nodes_through_the_readmes_configuration(
        nodes, otp, tmp_path):
    node = nodes.start(otp)
    config = readme_scrape_config()
    assert "127.0.0.1:9149" in config and "rabbit@mq1" in config
    with serving("--target", node.node, env=serve_env(node.cookie)) as s:
        config = config.replace("127.0.0.1:9149", s.address)
        config = re.sub(r"\[?'?rabbit@mq1'?.*?\]?$", f"['{node.node}']",
                        config, count=1, flags=re.M)
        path = tmp_path / "prometheus.yml"
        path.write_text("global:\n  scrape_interval: 1s\n"
                        "  scrape_timeout: 1s\n" + config)
        port = _free_port()
        prom = subprocess.Popen(
            [PROMETHEUS, f"--config.file={path}",
             f"--storage.tsdb.path={tmp_path / 'data'}",
             f"--web.listen-address=127.0.0.1:{port}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            found = _query_until(port, f'erlang_vm_processes{{instance='
                                 f'"{node.node}"}}', 60)
            up = _query_until(port, f'beam_probe_up{{instance='
                              f'"{node.node}"}}', 30)
            own = _query_until(port, 'up{job="beam-probe-exporter"}', 30)
        finally:
            prom.terminate()
            prom.wait(20)
    assert float(found[0]["value"][1]) > 10
    assert found[0]["metric"]["job"] == "beam"
    assert float(up[0]["value"][1]) == 1
    assert float(own[0]["value"][1]) == 1


def _query_until(port: int, query: str, seconds: float) -> list:
    deadline = time.monotonic() + seconds
    url = (f"http://127.0.0.1:{port}/api/v1/query?"
           + urllib.parse.urlencode({"query": query}))
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                result = json.load(r)["data"]["result"]
            if result:
                return result
        except (OSError, ValueError, KeyError):
            pass
        assert time.monotonic() < deadline, f"no {query} in Prometheus"
        time.sleep(0.5)


# -- pure parts ---------------------------------------------------------------


def test_the_deadline_is_prometheus_timeout_less_the_offset():
    from beam_probe.exporter.config import Rule, Settings
    from beam_probe.exporter.server import Exporter
    from beam_probe.exporter.targets import Pool

    settings = Settings(rules=(Rule("a@h"),), timeout=10.0,
                        timeout_offset=0.5)
    exporter = Exporter(settings, Pool(lambda: b"c"))
    assert exporter.deadline("3", 100.0) == pytest.approx(102.5)
    assert exporter.deadline(None, 100.0) == pytest.approx(110.0)
    assert exporter.deadline("60", 100.0) == pytest.approx(110.0)
    for bad in ("nan", "-1", "x", "0"):
        assert exporter.deadline(bad, 100.0) == pytest.approx(110.0)
    assert exporter.deadline("0.2", 100.0) == pytest.approx(100.1)


def test_idle_holders_are_those_whose_reductions_did_not_change():
    from beam_probe.exporter.families import idle_holders

    assert idle_holders(None, [("<0.1.0>", 10, 5)]) is None
    before = {"<0.1.0>": 5, "<0.2.0>": 7}
    assert idle_holders(before, [("<0.1.0>", 10, 5), ("<0.2.0>", 20, 8),
                                 ("<0.3.0>", 40, 1)]) == (1, 10)


def test_the_first_matching_rule_wins():
    from beam_probe.exporter.config import Rule, Settings

    settings = Settings(rules=(Rule("rabbit@mq-*"), Rule("*@mq-1")))
    assert settings.rule_for("rabbit@mq-1").pattern == "rabbit@mq-*"
    assert settings.rule_for("other@mq-1").pattern == "*@mq-1"
    assert settings.rule_for("other@mq-2") is None
    # Case matters, as node names' does.
    assert settings.rule_for("Rabbit@mq-1").pattern == "*@mq-1"



@needs_promtool
def test_the_docker_prometheus_config_is_valid_and_names_the_exporter():
    docker = os.path.join(REPO, "docker")
    run = subprocess.run([PROMTOOL, "check", "config",
                          os.path.join(docker, "prometheus.yml")],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stdout + run.stderr
    compose = open(os.path.join(docker, "compose.yaml")).read()
    config = open(os.path.join(docker, "prometheus.yml")).read()
    # The exporter service listens where Prometheus is told to ask, and
    # allows the node Prometheus asks for.
    assert '"serve", "--listen", "0.0.0.0:9149"' in compose
    assert "replacement: exporter:9149" in config
    assert '"--target", "demo@target"' in compose and "demo@target" in config
    assert "'/src[serve]'" in open(os.path.join(docker, "Dockerfile")).read()


def test_idle_connections_past_the_bound_shed_the_oldest_not_the_newest():
    """Connections that send nothing cost no thread; past PER_SOURCE from
    one address, the oldest are closed to make room, and a newcomer that
    sends its request is answered at once."""
    from beam_probe.exporter.front import PER_SOURCE

    with serving("--target", "a@h", env=serve_env("cookie")) as s:
        host, port = s.address.rsplit(":", 1)
        idle = [socket.create_connection((host, int(port)), timeout=5)
                for _ in range(PER_SOURCE + 20)]
        try:
            time.sleep(0.5)
            assert s.get("-/healthy", timeout=5)[0] == 200
            # The first 21 (20 past the bound, one more for the scrape)
            # were shed: each reads its end; the newest are still open.
            for sock in idle[:21]:
                assert sock.recv(100) == b""
            idle[-1].settimeout(0.2)
            with pytest.raises(socket.timeout):
                idle[-1].recv(100)
            shed = s.own()['beam_probe_exporter_http_refused_total'
                           '{reason="shed_oldest"}']
            assert shed >= 21
        finally:
            for sock in idle:
                sock.close()


def test_serve_listens_on_ipv6_loopback():
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
    except OSError:
        pytest.skip("no IPv6 loopback here")
    proc = subprocess.Popen(
        [sys.executable, "-m", "beam_probe", "serve", "--listen", "[::1]:0",
         "--target", "a@h"], env=serve_env("cookie"),
        stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stderr.readline()
        url = re.search(r"(http://\S+/)", line).group(1)
        assert url.startswith("http://[::1]:")
        with urllib.request.urlopen(url + "-/healthy", timeout=10) as r:
            assert r.status == 200
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0


def test_two_timeouts_in_a_row_redial(nodes):
    node = nodes.start("25")
    with serving("--target", node.node, env=serve_env(node.cookie)) as s:
        assert s.probe(node.node)["beam_probe_up"] == 1
        path = "probe?" + urllib.parse.urlencode({"target": node.node})
        os.kill(node.proc.pid, signal.SIGSTOP)
        try:
            for _ in range(2):
                # 2 s less the offset: long enough to count (a client's
                # 0.1 s scrape would not).
                _, _, body = s.get(path, {
                    "X-Prometheus-Scrape-Timeout-Seconds": "2"})
                assert samples(body.decode())["beam_probe_up"] == 0
                # A scrape interval: past the 2 s the node is given to end
                # the abandoned call, during which the target is busy.
                time.sleep(2.5)
            assert s.own()["beam_probe_exporter_connections"] == 0
        finally:
            os.kill(node.proc.pid, signal.SIGCONT)
        deadline = time.monotonic() + 20
        while s.probe(node.node)["beam_probe_up"] != 1:
            assert time.monotonic() < deadline
            time.sleep(0.2)
        assert s.own()["beam_probe_exporter_dials_total{result=\"ok\"}"] == 2
        assert len(hidden_peers(node, node.cookie)) == 1


def test_the_allocator_series_agree_with_alloc(nodes, otp):
    from beam_probe.probes.alloc import alloc

    node = nodes.start(otp)
    with serving("--target", node.node, env=serve_env(node.cookie)) as s:
        got = s.probe(node.node)
    with attach(node.node, node.cookie.encode(), timeout=10) as remote:
        report = alloc(remote)
    types = {t["type"]: t for t in report["types"]}
    for name, t in types.items():
        instances = {k for k in got if k.startswith("erlang_vm_allocators{")
                     and f'alloc="{name}"' in k
                     and 'kind="mbcs"' in k and 'usage="carriers"' in k}
        assert len(instances) == t["instances"], name
    # Long-lived carriers do not move on an idle node: the same bytes.
    for name in ("ll_alloc", "literal_alloc"):
        if name in types:
            assert got[f'beam_probe_allocator_allocated_bytes{{alloc="{name}"}}'
                       ] == types[name]["allocated"], name
    total = sum(v for k, v in got.items()
                if k.startswith("beam_probe_allocator_allocated_bytes"))
    assert abs(total - report["allocated"]) < 0.2 * report["allocated"]
    per_instance = sum(v for k, v in got.items()
                       if k.startswith("erlang_vm_allocators{")
                       and 'usage="carriers_size"' in k)
    assert per_instance == total


# -- what the review of the first version found --------------------------------


def test_a_host_wildcard_stays_within_one_label():
    from beam_probe.exporter.config import Rule, Settings

    settings = Settings(rules=(Rule("rabbit@mq*"), Rule("app@10.0.0.7"),
                               Rule("*@*.example.com")))
    for allowed in ("rabbit@mq1", "rabbit@MQ1", "app@10.0.0.7",
                    "web@db1.example.com", "web@DB1.Example.COM"):
        assert settings.rule_for(allowed) is not None, allowed
    for refused in ("rabbit@mq.attacker.net", "rabbit@mq1.", "app@10.0.0.1.x",
                    "app@10.0.0.1.attacker.net", "web@a.b.example.com",
                    "web@example.com", "Rabbit@mq1", "rabbit",
                    "app@10.0.0.07", "app@10.0.0.0x7"):
        assert settings.rule_for(refused) is None, refused


def test_a_lookalike_host_is_refused_without_dialling():
    epmd = _Listener()
    env = serve_env("cookie", ERL_EPMD_PORT=str(epmd.port))
    with serving("--target", "app@*.example", "--allow-target-patterns",
                 env=env) as s:
        for target in ("app@db.example.attacker.example", "app@db.example.",
                       "app@localhost", "app@127.0.0.1"):
            code, _, _ = s.get("probe?" + urllib.parse.urlencode(
                {"target": target}))
            # A trailing dot is no node name at all (400).
            assert code in ((400, 403) if target.endswith(".") else (403,)), \
                target
        code, _, _ = s.get("probe?target=app")
        assert code == 400
        time.sleep(0.3)
        assert epmd.accepted == 0
    epmd.close()


def test_compat_is_text_even_when_openmetrics_is_asked(nodes):
    from prometheus_client.parser import text_string_to_metric_families

    node = nodes.start("25")
    with serving("--target", node.node, "--compat",
                 env=serve_env(node.cookie)) as s:
        code, headers, body = s.get(
            "probe?" + urllib.parse.urlencode({"target": node.node}),
            {"Accept": "application/openmetrics-text; version=1.0.0"})
        assert code == 200 and headers["Content-Type"].startswith(
            "text/plain; version=0.0.4")
        names = {f.name for f in text_string_to_metric_families(
            body.decode())}
        assert "erlang_vm_statistics_context_switches" in names
        # A malformed Accept is answered in the text format, not a 500.
        code, headers, _ = s.get("metrics", {
            "Accept": "application/openmetrics-text; version=abc"})
        assert code == 200 and headers["Content-Type"].startswith(
            "text/plain")


def test_a_client_gone_mid_scrape_is_no_traceback_and_head_does_not_dial():
    epmd = _Listener(hold=True)
    env = serve_env("cookie", ERL_EPMD_PORT=str(epmd.port))
    with serving("--target", "app@127.0.0.1", "--timeout", "1",
                 env=env) as s:
        with pytest.raises(OSError):
            s.get("probe?target=app%40127.0.0.1", timeout=0.5)
        time.sleep(1.5)   # past the scrape's own 1 s: its answer is written
        request = urllib.request.Request(
            s.url + "probe?target=app%40127.0.0.1", method="HEAD")
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=5)
        assert refused.value.code == 405
    epmd.close()


def test_a_request_sent_a_byte_at_a_time_is_cut_off(monkeypatch):
    from beam_probe.exporter import front as front_module
    from beam_probe.exporter import server as server_module
    from beam_probe.exporter.config import Rule, Settings
    from beam_probe.exporter.targets import Pool

    monkeypatch.setattr(front_module, "HEAD_DEADLINE", 0.5)
    exporter = server_module.Exporter(Settings(rules=(Rule("a@h"),)),
                                      Pool(lambda: b"c"))
    httpd = server_module.make_server(exporter, "127.0.0.1", 0)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        slow = socket.create_connection(httpd.server_address[:2], timeout=5)
        started = time.monotonic()
        closed = False
        for byte in b"GET /metrics HTTP/1.0\r\n":
            try:
                slow.sendall(bytes([byte]))
            except OSError:
                closed = True
                break
            time.sleep(0.1)
        if not closed:
            closed = slow.recv(100) == b""
        assert closed and time.monotonic() - started < 3
        slow.close()
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_a_restart_between_scrapes_is_up_at_the_next_and_one_line_each(
        nodes):
    node = nodes.start("25")
    with serving("--target", node.node, env=serve_env(node.cookie)) as s:
        assert s.probe(node.node)["beam_probe_up"] == 1
        node.proc.kill()
        node.proc.wait()
        for _ in range(4):
            assert s.probe(node.node)["beam_probe_up"] == 0
        node.stop()
        node.start()
        deadline = time.monotonic() + 40
        while s.probe(node.node)["beam_probe_up"] != 1:
            assert time.monotonic() < deadline
            time.sleep(0.5)
        # Restarted with no scrape while it was gone: the dead connection
        # is seen as dead, and the next scrape dials, rather than say 0.
        node.proc.kill()
        node.proc.wait()
        deadline = time.monotonic() + 5
        while s.own()["beam_probe_exporter_connections"] != 0:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        node.stop()
        node.start()
        assert s.probe(node.node)["beam_probe_up"] == 1
        time.sleep(0.2)
    downs = [line for line in s.errors if ": down: " in line]
    ups = [line for line in s.errors if "up again" in line]
    assert len(downs) == 1 and len(ups) == 1, s.errors


def test_an_idle_target_is_let_go_without_further_scrapes(nodes):
    from beam_probe.exporter.config import Rule
    from beam_probe.exporter.targets import IDLE_CLOSE, Pool

    node = nodes.start("25")
    pool = Pool(lambda: node.cookie.encode())
    try:
        rule = Rule(node.node)
        outcome = pool.scrape(node.node, rule, "default", False, 10,
                              time.monotonic() + 10)
        assert outcome.up and pool.open_connections() == 1
        assert len(hidden_peers(node, node.cookie)) == 1
        pool.sweep(time.monotonic() + IDLE_CLOSE / 2)
        assert pool.open_connections() == 1
        pool.sweep(time.monotonic() + IDLE_CLOSE + 1)
        assert pool.known_targets() == 0
        deadline = time.monotonic() + 5
        while hidden_peers(node, node.cookie):
            assert time.monotonic() < deadline
            time.sleep(0.1)
    finally:
        pool.close()


def test_a_cluster_scrape_with_a_stopped_member_answers_in_time(nodes):
    cookie, entry, member = connected_pair(nodes)
    with serving("--target", entry.node, env=serve_env(cookie)) as s:
        assert s.probe(entry.node, cluster="1")[
            f'beam_probe_up{{node="{member.node}"}}'] == 1
        os.kill(member.proc.pid, signal.SIGSTOP)
        try:
            started = time.monotonic()
            code, _, body = s.get("probe?" + urllib.parse.urlencode(
                {"target": entry.node, "cluster": "1"}),
                {"X-Prometheus-Scrape-Timeout-Seconds": "2.5"})
            seconds = time.monotonic() - started
        finally:
            os.kill(member.proc.pid, signal.SIGCONT)
    got = samples(body.decode())
    assert code == 200 and seconds < 2.5, seconds
    assert got[f'beam_probe_up{{node="{entry.node}"}}'] == 1
    assert got[f'beam_probe_up{{node="{member.node}"}}'] == 0


def test_a_fifo_config_and_a_missing_ca_file_are_one_line(tmp_path):
    fifo = tmp_path / "fifo.toml"
    os.mkfifo(fifo)
    one_line(run_cli("serve", "--config", str(fifo), timeout=20), 2,
             "not a regular file")
    config = tmp_path / "serve.toml"
    config.write_text("[[target]]\nmatch = 'a@h'\ncookie_file = '/x'\n")
    config.write_text("[[target]]\nmatch = 'a@h'\ntls = true\n"
                      f"cacertfile = '{tmp_path / 'missing.pem'}'\n")
    one_line(run_cli("serve", "--config", str(config),
                     env={"BEAM_PROBE_COOKIE": "c"}), 2, "missing.pem")


# -- what a second review found (the pool, with a dial of our own) ------------


def test_a_target_let_go_dials_nothing_and_dials_are_bounded():
    from beam_probe.exporter.config import Rule
    from beam_probe.exporter.targets import DIALS, Pool, Target

    release = threading.Event()
    dialled: list[str] = []

    def dial(node, cookie, **kw):
        dialled.append(node)
        release.wait(10)
        from beam_probe.errors import ConnectFailed
        raise ConnectFailed("no")

    pool = Pool(lambda: b"c", dial=dial)
    try:
        gone = Target("a@h", Rule("a@h"), b"c")
        gone.gone = True
        assert "let this target go" in pool._connect(gone)
        assert dialled == []
        targets = [Target(f"n{i}@h", Rule("*@h"), b"c")
                   for i in range(DIALS + 1)]
        threads = [threading.Thread(target=pool._connect, args=(t,))
                   for t in targets[:DIALS]]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 5
        while len(dialled) < DIALS:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        # A target already connected would still find a worker: the
        # next dial is refused at once, not queued behind the stuck ones.
        assert "being dialled at once" in pool._connect(targets[-1])
        release.set()
        for t in threads:
            t.join(10)
    finally:
        release.set()
        pool.close()


def test_spellings_of_one_host_share_one_connection(nodes):
    node = nodes.start("25")
    alive, host = node.node.split("@")
    with serving("--target", node.node, env=serve_env(node.cookie)) as s:
        for spelling in (host, host.upper(), host.capitalize()):
            assert s.probe(f"{alive}@{spelling}")["beam_probe_up"] == 1
        own = s.own()
    assert own["beam_probe_exporter_dials_total{result=\"ok\"}"] == 1
    assert own["beam_probe_exporter_targets"] == 1


def test_kill_9_of_serve_leaves_nothing_on_the_node(nodes):
    node = nodes.start("25")
    with serving("--target", node.node, env=serve_env(node.cookie)) as s:
        assert s.probe(node.node, module="top", n="3")["beam_probe_up"] == 1
        assert len(hidden_peers(node, node.cookie)) == 1
        s.proc.kill()
        s.proc.wait(10)
    deadline = time.monotonic() + 2
    while hidden_peers(node, node.cookie):
        assert time.monotonic() < deadline, "our connection outlived serve"
        time.sleep(0.1)
