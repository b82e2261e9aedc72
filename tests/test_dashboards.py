"""Grafana dashboards (issue 38, item 6): ours (dashboards/*.json) and
RabbitMQ's Erlang-BEAM, run query by query against a real Prometheus
(Debian's, .ci/prometheus-root) scraping a real `beam-probe serve` that
reads a real node shaped like a broker (tests/rabbit.py's broker_shapes:
a process with a mailbox, large holders of binaries, tables).

Grafana itself is not run: a panel's query is what Grafana sends to
Prometheus's query API, with its template variables replaced; each must
find data.
"""

from __future__ import annotations

import glob
import json
import os
import re
import subprocess
import time
import urllib.parse
import urllib.request
from typing import Any, Iterator

import pytest

from conftest import REPO
from test_serve import PROMETHEUS, _free_port, serve_env, serving

DASHBOARDS = sorted(glob.glob(os.path.join(REPO, "dashboards", "*.json")))
VARIABLES = {"datasource", "instance", "window"}

# RabbitMQ's Erlang-BEAM dashboard (rabbitmq-server, deps/
# rabbitmq_prometheus/docker/grafana/dashboards/Erlang-BEAM.json, as of
# commit b9dc0ea3b4, November 2024, in 4.1 and later): each panel's
# queries, hidden ones left out (Processes' process limit), and its Node
# variable. The README's compatibility statement is what this measures.
RABBITMQ_NODE_VARIABLE = "erlang_vm_process_count"
RABBITMQ_ERLANG_BEAM: dict[str, list[str]] = {
    "Erlang VM Run Queue Length": [
        'erlang_vm_statistics_run_queues_length{instance="$node"}',
        'erlang_vm_statistics_dirty_io_run_queue_length{instance="$node"}',
        'erlang_vm_statistics_dirty_cpu_run_queue_length{instance="$node"}'],
    "Load": [
        'irate(erlang_vm_statistics_context_switches{instance="$node"}'
        '[$interval])',
        'irate(erlang_vm_statistics_reductions_total{instance="$node"}'
        '[$interval])',
        'irate(erlang_vm_statistics_runtime_milliseconds{instance="$node"}'
        '[$interval])'],
    "ETS/DETS": [
        'erlang_vm_ets_limit{instance="$node"}',
        'erlang_vm_ets_tables{instance="$node"}',
        'erlang_vm_dets_tables{instance="$node"}'],
    "Processes": [
        'erlang_vm_process_count{instance="$node"}',
        'erlang_vm_statistics_run_queues_length_total{instance="$node"}'],
    "VM Memory": [
        'erlang_vm_memory_bytes_total{instance="$node", kind="processes"}',
        *(f'erlang_vm_memory_system_bytes_total{{instance="$node", '
          f'usage="{usage}"}}' for usage in ("atom", "binary", "code",
                                             "ets"))],
    "VM IO": [
        'irate(erlang_vm_statistics_bytes_output_total{instance="$node"}'
        '[$interval])',
        'irate(erlang_vm_statistics_bytes_received_total{instance="$node"}'
        '[$interval])'],
    "VM GC": [
        'irate(erlang_vm_statistics_garbage_collection_number_of_gcs'
        '{instance="$node"}[$interval])',
        'irate(erlang_vm_statistics_garbage_collection_bytes_reclaimed'
        '{instance="$node"}[$interval])'],
    "File Descriptors & Ports": [
        'process_open_fds{instance="$node"}',
        'process_max_fds{instance="$node"}',
        'erlang_vm_port_limit{instance="$node"}',
        'erlang_vm_port_count{instance="$node"}'],
}


def _load(path: str) -> dict[str, Any]:
    with open(path) as f:
        return json.load(f)


def _panels(board: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every panel that queries (rows hold none), nested ones included."""
    for panel in board["panels"]:
        if panel.get("type") != "row":
            yield panel
        yield from (p for p in panel.get("panels", ()))


def _targets(board: dict[str, Any]) -> Iterator[tuple[str, str, str]]:
    for panel in _panels(board):
        for target in panel["targets"]:
            yield panel["title"], target["refId"], target["expr"]


def test_there_are_a_memory_and_a_leak_hunt_dashboard():
    names = {os.path.basename(p) for p in DASHBOARDS}
    assert {"beam-probe-memory.json", "beam-probe-leak-hunt.json"} <= names


@pytest.mark.parametrize("path", DASHBOARDS, ids=os.path.basename)
def test_a_dashboard_loads_and_every_panel_reads_the_datasource_variable(
        path):
    board = _load(path)
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    # Per node, or every node at once (a cluster).
    assert variables["instance"]["multi"] and \
        variables["instance"]["includeAll"]
    assert variables["instance"]["datasource"]["uid"] == "${datasource}"
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids))
    panels = list(_panels(board))
    assert panels
    for panel in panels:
        assert panel["datasource"] == {"type": "prometheus",
                                       "uid": "${datasource}"}, panel["title"]
        assert panel["targets"], panel["title"]
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == "${datasource}"
            assert target["expr"].strip()
            # Every variable a query names is one the dashboard defines.
            used = set(re.findall(r"\$\{?(\w+)", target["expr"]))
            assert used <= set(variables), (panel["title"], used)
            assert "instance" in used, (panel["title"], target["expr"])


# Grafana's units for a rate: bytes and counts a second.
PER_SECOND = {"Bps", "cps"}


def _unit(panel: dict[str, Any], target: dict[str, Any]) -> str | None:
    """The unit Grafana shows a target's series in: the panel's, or an
    override whose regular expression matches the series' name (its
    legend, each {{label}} some value)."""
    name = re.sub(r"\{\{\s*\w+\s*\}\}", "x", target.get("legendFormat", ""))
    config = panel.get("fieldConfig", {})
    unit = config.get("defaults", {}).get("unit")
    for override in config.get("overrides", ()):
        matcher = override["matcher"]
        if matcher["id"] == "byRegexp" and \
                re.search(matcher["options"], name):
            unit = next((p["value"] for p in override["properties"]
                         if p["id"] == "unit"), unit)
    return unit


def _a_rate(expr: str) -> bool:
    """Whether a query's answer is a rate: its outermost function, past
    sum(...), sum by (...) (...) and topk(N, ...), is deriv, rate or
    irate (a time to a limit divides by a rate: it is a time)."""
    expr = expr.strip()
    while True:
        stripped = re.sub(r"^(?:sum|max)(?: by \([^)]*\))? *\(|^topk\(\d+, *",
                          "", expr, count=1)
        if stripped == expr:
            return re.match(r"(?:deriv|rate|irate)\(", expr) is not None
        expr = stripped


@pytest.mark.parametrize("path", DASHBOARDS, ids=os.path.basename)
def test_every_series_is_shown_in_its_unit(path):
    """A rate in bytes or counts a second, bytes in bytes: a series a
    panel shows in another unit reads wrong (the leak hunt showed the
    bytes idle holders keep as a count, its override meant for the
    holders' number matching both legends)."""
    for panel in _panels(_load(path)):
        for target in panel["targets"]:
            unit, expr = _unit(panel, target), target["expr"]
            assert unit, (panel["title"], expr)
            if _a_rate(expr):
                assert unit in PER_SECOND, (panel["title"], expr, unit)
            else:
                assert unit not in PER_SECOND, (panel["title"], expr, unit)
                if "_bytes" in expr and "/" not in expr:
                    assert unit == "bytes", (panel["title"], expr, unit)


def _query(port: int, expr: str) -> list[dict[str, Any]]:
    url = (f"http://127.0.0.1:{port}/api/v1/query?"
           + urllib.parse.urlencode({"query": expr}))
    with urllib.request.urlopen(url, timeout=30) as r:
        body = json.load(r)
    assert body["status"] == "success", (expr, body)
    return body["data"]["result"]


def _until(port: int, expr: str, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while True:
        try:
            if _query(port, expr):
                return
        except OSError:
            pass
        assert time.monotonic() < deadline, f"never any {expr}"
        time.sleep(0.5)


def _job(name: str, address: str, node: str, instance: str,
         module: str | None = None) -> str:
    params = f"    params:\n      module: [{module}]\n" if module else ""
    return (f"  - job_name: {name}\n    metrics_path: /probe\n{params}"
            f"    static_configs:\n      - targets: ['{node}']\n"
            f"    relabel_configs:\n"
            f"      - source_labels: [__address__]\n"
            f"        target_label: __param_target\n"
            f"      - target_label: instance\n"
            f"        replacement: '{instance}'\n"
            f"      - target_label: __address__\n"
            f"        replacement: {address}\n")


@pytest.mark.skipif(PROMETHEUS is None, reason="no prometheus: .ci/setup "
                    "unpacks Debian's prometheus into .ci/prometheus-root")
def test_every_panel_finds_data_and_rabbitmqs_dashboard_needs_compat(
        broker_shapes, otp, tmp_path):
    node = broker_shapes.node
    compat_instance = f"{node.node}-compat"
    env = serve_env(node.cookie)
    with serving("--target", node.node, env=env) as plain, \
            serving("--target", node.node, "--compat", env=env) as compat:
        config = tmp_path / "prometheus.yml"
        # The README's scrape job, at 1 s, plus the top module's and one
        # on a --compat serve (its own instance, so the two are told
        # apart); subqueries evaluated each second too.
        config.write_text(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
            "  evaluation_interval: 1s\nscrape_configs:\n"
            + _job("beam", plain.address, node.node, node.node)
            + _job("beam-top", plain.address, node.node, node.node, "top")
            + _job("beam-compat", compat.address, node.node,
                   compat_instance))
        port = _free_port()
        prom = subprocess.Popen(
            [PROMETHEUS, f"--config.file={config}",
             f"--storage.tsdb.path={tmp_path / 'data'}",
             f"--web.listen-address=127.0.0.1:{port}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            # Enough scrapes for a slope and a second top scrape (the idle
            # holders' series start there): generous deadlines, no speed.
            for expr in ('count_over_time(erlang_vm_processes'
                         f'{{instance="{node.node}"}}[1m]) >= 5',
                         f'beam_probe_idle_holders{{instance="{node.node}"}}',
                         'count_over_time(erlang_vm_process_count'
                         f'{{instance="{compat_instance}"}}[1m]) >= 5'):
                _until(port, expr, 120)
            # One node, then All: the cluster rows add the chosen nodes
            # up, and All is the variable's allValue (two instances here,
            # the default and the --compat job's: a cluster of two).
            ours = _run_ours(port, node.node)
            ours += _run_ours(port, None)
            every = _query(port, 'count(count by (instance) '
                           '(beam_probe_up{instance=~".+"}))')
            rabbitmq = _run_rabbitmq(port, node.node, compat_instance)
        finally:
            prom.terminate()
            prom.wait(20)
    assert not ours, f"queries that found no data: {ours}"
    # All selected both instances, so the cluster rows summed two.
    assert [float(r["value"][1]) for r in every] == [2.0], every
    plain_panels, compat_panels, listed = rabbitmq
    # RabbitMQ's Erlang-BEAM lists its nodes from a pre-6.0 name: serve
    # lists none by default, so the dashboard's Node list is empty;
    # with --compat it lists the node, and every panel has data.
    assert listed == [compat_instance]
    assert compat_panels == {title: "some" if title ==
                             "File Descriptors & Ports" else "all"
                             for title in RABBITMQ_ERLANG_BEAM}
    # By default (were the node typed in), 5 of 8 panels have data, 3 of
    # them whole.
    assert plain_panels == {
        "Erlang VM Run Queue Length": "all", "Load": "some",
        "ETS/DETS": "all", "Processes": "none", "VM Memory": "none",
        "VM IO": "all", "VM GC": "none",
        "File Descriptors & Ports": "some"}


def _run_ours(port: int, instance: str | None) -> list[str]:
    """Every query of every dashboard of ours, for one node (None: All,
    as Grafana sends it, the instance variable's allValue) and a window
    of a minute: those that found nothing."""
    empty = []
    for path in DASHBOARDS:
        board = _load(path)
        every = next(v["allValue"] for v in board["templating"]["list"]
                     if v["name"] == "instance")
        values = {"instance": every if instance is None
                  else re.escape(instance), "window": "1m"}
        for title, ref, expr in _targets(board):
            text = re.sub(r"\$\{?(\w+)\}?", lambda m: values[m.group(1)],
                          expr)
            if not _query(port, text):
                empty.append(f"{os.path.basename(path)}: {title} "
                             f"{ref}: {text}")
    return empty


def _run_rabbitmq(port: int, plain: str, compat: str
                  ) -> tuple[dict[str, str], dict[str, str], list[str]]:
    """Which of RabbitMQ's panels find data, by default and with --compat
    ("all", "some" or "none" of their queries), and the instances its
    Node variable would list."""
    def panels(node: str) -> dict[str, str]:
        out = {}
        for title, exprs in RABBITMQ_ERLANG_BEAM.items():
            found = [bool(_query(port, e.replace("$node", node).replace(
                "$interval", "1m"))) for e in exprs]
            out[title] = ("all" if all(found) else "some" if any(found)
                          else "none")
        return out
    url = (f"http://127.0.0.1:{port}/api/v1/label/instance/values?"
           + urllib.parse.urlencode({"match[]": RABBITMQ_NODE_VARIABLE}))
    with urllib.request.urlopen(url, timeout=30) as r:
        listed = sorted(json.load(r)["data"])
    return panels(plain), panels(compat), listed
