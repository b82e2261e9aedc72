"""The exporter's HTTP face, in blackbox_exporter's pattern.

    GET /probe?target=NODE[&module=top&n=10&cluster=1]
        scrape NODE now; always 200 with beam_probe_up 0 or 1, or 403 for
        a target outside the allow-list (nothing is dialled), 400 for a
        malformed request
    GET /metrics    the exporter's own figures
    GET /           a page with an example Prometheus configuration

prometheus_client writes the exposition, negotiates OpenMetrics and
compresses (its choose_encoder and gzip_accepted); front.py accepts and
reads each request head on one selector thread, then hands it to a
worker, where http.server's request handler parses and answers it. With
a web configuration's users (webconfig.py), every path asks for basic
auth, checked at the front door before a worker is taken (gate.py).
"""

from __future__ import annotations

import gzip
import html
import io
import threading
import time
from http.server import BaseHTTPRequestHandler
from typing import Any, Callable, Iterable
from urllib.parse import parse_qs, urlsplit

from prometheus_client import (CollectorRegistry, Counter, Gauge, Histogram,
                               PlatformCollector, ProcessCollector,
                               disable_created_metrics)
from prometheus_client.exposition import (choose_encoder, generate_latest,
                                          gzip_accepted)

from beam_probe import __version__
from beam_probe.errors import ProbeError
from beam_probe.exporter.auth import BasicAuth
from beam_probe.exporter.config import Settings, is_plain_host
from beam_probe.exporter.families import (Families, top_series, up_series,
                                          vm_series)
from beam_probe.exporter.front import Front, Pending
from beam_probe.exporter.gate import PasswordGate
from beam_probe.exporter.targets import MODULES, Outcome, Pool
from beam_probe.exporter.webconfig import WebConfig
from beam_probe.node.address import full_node_name
from beam_probe.probes.vm import MAX_TOP

# A query string of a target, a module and two flags is under 400 bytes.
MAX_QUERY = 2048
# Prometheus' header; blackbox_exporter takes 0.5 s off it for the reply
# to travel back (its --timeout-offset), as we do by default.
TIMEOUT_HEADER = "X-Prometheus-Scrape-Timeout-Seconds"
MIN_TIMEOUT = 0.1
DEFAULT_TOP = 10
# The text format as Prometheus has read it since 2014, and prometheus.erl
# before 6.0 wrote it (what choose_encoder gives when nothing else is
# asked for).
TEXT_0_0_4 = "text/plain; version=0.0.4; charset=utf-8"


class Own:
    """The exporter's own figures, on /metrics."""

    def __init__(self, pool: Pool) -> None:
        # A counter's _created series is one more series per label set
        # that no query of ours needs (serve is its own process).
        disable_created_metrics()  # type: ignore[no-untyped-call]
        self.registry = CollectorRegistry()
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        self.scrapes = Counter(
            "beam_probe_exporter_scrapes", "Scrapes of targets, by module "
            "and whether the node answered.", ["module", "result"],
            registry=self.registry)
        self.refused = Counter(
            "beam_probe_exporter_refused", "Probe requests refused: target "
            "outside the allow-list (403) or malformed (400).", ["reason"],
            registry=self.registry)
        self.duration = Histogram(
            "beam_probe_exporter_scrape_duration_seconds", "How long scrapes "
            "of targets took.", ["module"], registry=self.registry,
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5,
                     10, 30))
        connections = Gauge(
            "beam_probe_exporter_connections", "Open connections to "
            "targets (one per target at most).", registry=self.registry)
        connections.set_function(pool.open_connections)
        targets = Gauge(
            "beam_probe_exporter_targets", "Targets the exporter keeps state "
            "for.", registry=self.registry)
        targets.set_function(pool.known_targets)
        dials = Counter("beam_probe_exporter_dials", "Connections dialled, "
                        "by result.", ["result"], registry=self.registry)
        for result in ("ok", "failed"):
            dials.labels(result)
        pool.on_dial = lambda result: dials.labels(result).inc()
        self.http_refused = Counter(
            "beam_probe_exporter_http_refused", "HTTP connections closed or "
            "answered before their request was served: head_deadline (no "
            "whole request in time), shed_oldest (closed to make room for a "
            "newer one), too_large (431), busy (503), unauthorized (401), "
            "auth_busy (503: the password checks' queue was full).",
            ["reason"],
            registry=self.registry)


class _Families:
    """One scrape's families, as an object the encoder collects."""

    def __init__(self, families: Iterable[Any]) -> None:
        self._families = list(families)

    def collect(self) -> Iterable[Any]:
        return self._families


def exposition(outcome: Outcome, settings: Settings, node: str) -> Families:
    """The families of one probe."""
    if not outcome.cluster:
        out = Families(compat=settings.compat)
        up_series(out, outcome.up, outcome.seconds)
        for figures in outcome.vm:
            if "error" not in figures:
                vm_series(out, figures)
        for found in outcome.top:
            if "error" not in found:
                top_series(out, found,
                           outcome.idle.get(found["node"]))
        return out
    out = Families(extra=("node",), compat=settings.compat)
    answers: list[Any] = [*outcome.vm, *outcome.top]
    if not answers:
        up_series(out, False, outcome.seconds, (node,))
    for answer in answers:
        name = answer["node"]
        failed = "error" in answer
        up_series(out, not failed, outcome.seconds, (name,))
        if failed:
            continue
        if "allocators" in answer:
            vm_series(out, answer, (name,))
        else:
            top_series(out, answer, outcome.idle.get(name), (name,))
    return out


# Targets whose last state (up, or the reason for down) is kept to log
# changes only; past it, the record starts afresh.
MAX_LOGGED = 1000


class Exporter:
    """What the handlers share: the settings, the pool, the own figures."""

    def __init__(self, settings: Settings, pool: Pool,
                 cluster: bool = False, log: Any = None,
                 web: WebConfig | None = None) -> None:
        self.settings = settings
        self.pool = pool
        self.cluster = cluster
        self.own = Own(pool)
        self.log = log
        self.web = web
        self.auth = BasicAuth(web.users) if web is not None and web.users \
            else None
        # Where it is served, once bound (--listen may give port 0).
        self.address = settings.listen
        self._states: dict[str, bool] = {}
        self._states_lock = threading.Lock()

    def note(self, node: str, error: str | None) -> None:
        """Log a target's change of state: down (with why), up again. One
        line per change, not one per scrape of a node that stays down
        (whose reason changes with each backoff)."""
        up = error is None
        with self._states_lock:
            if len(self._states) >= MAX_LOGGED and node not in self._states:
                self._states.clear()
            before = self._states.get(node)
            self._states[node] = up
        if self.log is None or before == up:
            return
        if not up:
            self.log(f"beam-probe: {node}: down: {error}")
        elif before is not None:
            self.log(f"beam-probe: {node}: up again")

    def deadline(self, header: str | None, started: float) -> float:
        """When a scrape must have answered: Prometheus' scrape timeout
        less the offset, or --timeout, whichever is first."""
        seconds = self.settings.timeout
        if header:
            try:
                given = float(header)
            except ValueError:
                given = None
            if given is not None and given == given and given > 0:
                seconds = min(seconds,
                              given - self.settings.timeout_offset)
        return started + max(MIN_TIMEOUT, seconds)


def _one(params: dict[str, list[str]], key: str) -> str | None:
    values = params.get(key)
    if not values:
        return None
    if len(values) > 1:
        raise ValueError(f"{key} given {len(values)} times")
    return values[0]


def _flag(value: str | None, key: str) -> bool | None:
    if value is None:
        return None
    if value.lower() in ("1", "true", "yes"):
        return True
    if value.lower() in ("0", "false", "no"):
        return False
    raise ValueError(f"{key} must be true or false, not {value[:20]!r}")


class _Writer(io.BufferedIOBase):
    """The answer's bytes, each write sent whole (socketserver's
    _SocketWriter, which is private)."""

    def __init__(self, sock: Any) -> None:
        self._sock = sock

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        self._sock.sendall(data)
        return len(data)


class Handler(BaseHTTPRequestHandler):
    """One request, its head already read by the front door."""

    server_version = f"beam-probe/{__version__}"
    exporter: Exporter  # set on the subclass serve() makes
    request: Pending

    # -- plumbing ---------------------------------------------------------

    def setup(self) -> None:
        self.connection = self.request.sock
        self.rfile = io.BytesIO(bytes(self.request.head))
        self.wfile = _Writer(self.connection)

    def finish(self) -> None:
        self.rfile.close()

    def log_message(self, format: str, *args: Any) -> None:
        # Not a line per request: a scrape every few seconds per target
        # would bury the lines that matter (a target down, with why).
        pass

    def end_headers(self) -> None:
        web = self.exporter.web
        if web is not None:
            for name, value in web.headers:
                self.send_header(name, value)
        super().end_headers()

    def _send(self, code: int, body: bytes, content_type: str,
              headers: Iterable[tuple[str, str]] = ()) -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _text(self, code: int, text: str,
              headers: Iterable[tuple[str, str]] = ()) -> None:
        self._send(code, (text + "\n").encode(), "text/plain; charset=utf-8",
                   headers)

    def _metrics(self, collector: Any, compat: bool = False) -> None:
        # --compat: the text format always, as prometheus.erl before 6.0
        # wrote: OpenMetrics cannot hold a counter (context_switches,
        # written context_switches_total) and an untyped series of its
        # old name (context_switches) at once.
        encoder: Callable[..., bytes] = generate_latest
        content_type = TEXT_0_0_4
        if not compat:
            try:
                encoder, content_type = choose_encoder(
                    self.headers.get("Accept", ""))
            except (TypeError, ValueError):  # a malformed version
                pass
        body = encoder(collector)
        headers = []
        if gzip_accepted(self.headers.get("Accept-Encoding", "")):
            body = gzip.compress(body)
            headers.append(("Content-Encoding", "gzip"))
        self._send(200, body, content_type, headers)

    # -- routes -----------------------------------------------------------

    # Basic auth, where asked for, was checked before a worker was taken
    # (gate.py): a request here has passed it.

    def do_HEAD(self) -> None:
        # A HEAD of /probe would dial and scrape for nothing.
        if urlsplit(self.path).path == "/probe":
            self._text(405, "GET /probe")
        else:
            self._route()

    def do_GET(self) -> None:
        self._route()

    def _route(self) -> None:
        url = urlsplit(self.path)
        if url.path == "/probe":
            self._probe(url.query)
        elif url.path == "/metrics":
            self._metrics(self.exporter.own.registry)
        elif url.path in ("/", "/index.html"):
            self._send(200, landing(self.exporter.settings,
                                    self.exporter.address,
                                    self.exporter.web).encode(),
                       "text/html; charset=utf-8")
        elif url.path == "/-/healthy":
            self._text(200, "OK")
        else:
            self._text(404, "not found: try /, /probe?target=NODE or "
                       "/metrics")

    def _probe(self, query: str) -> None:
        exporter = self.exporter
        # From when its request was whole: the time it waited for a
        # worker is the scrape's too.
        started = self.request.arrived or time.monotonic()
        if len(query) > MAX_QUERY:
            exporter.own.refused.labels("malformed").inc()
            self._text(400, f"the query is over {MAX_QUERY} bytes")
            return
        try:
            params = parse_qs(query, keep_blank_values=True,
                              max_num_fields=16)
            target = _one(params, "target")
            module = _one(params, "module") or "default"
            cluster = _flag(_one(params, "cluster"), "cluster")
            n_text = _one(params, "n")
            if not target:
                raise ValueError("no target: /probe?target=name@host")
            if "@" not in target:
                # A bare name is this host's, which may take a DNS lookup
                # to name: before the allow-list, that is not for a
                # request to make.
                raise ValueError("target must be name@host")
            if module not in MODULES:
                raise ValueError(f"no module {module[:40]!r} (modules: "
                                 f"{', '.join(MODULES)})")
            n = int(n_text) if n_text is not None else DEFAULT_TOP
            if not 1 <= n <= MAX_TOP:
                raise ValueError(f"n must be 1 to {MAX_TOP}")
            node = full_node_name(target)
        except (ValueError, ProbeError) as exc:
            exporter.own.refused.labels("malformed").inc()
            self._text(400, f"bad request: {exc}")
            return
        if not is_plain_host(node.partition("@")[2]):
            # Refused before it is matched or looked up: the idna codec
            # reads U+3002, U+FF0E and U+FF61 as dots, so a host wildcard
            # would cross them (config.py).
            exporter.own.refused.labels("not_allowed").inc()
            self._text(403, f"{node}: a host is ASCII letters, digits, "
                       "'-', '_' and '.' (an international name in its "
                       "xn-- form); this one is not dialled")
            return
        rule = exporter.settings.rule_for(node)
        if rule is None:
            # Refused before anything is looked up or dialled: the
            # allow-list is what keeps the exporter from being a way to
            # try our cookie on any host.
            exporter.own.refused.labels("not_allowed").inc()
            self._text(403, f"{node} matches no --target pattern of this "
                       "exporter")
            return
        if cluster is None:
            cluster = rule.cluster or exporter.cluster
        deadline = exporter.deadline(self.headers.get(TIMEOUT_HEADER),
                                     started)
        outcome = exporter.pool.scrape(node, rule, module, cluster, n,
                                       deadline)
        exporter.own.scrapes.labels(module,
                                    "up" if outcome.up else "down").inc()
        exporter.own.duration.labels(module).observe(outcome.seconds)
        exporter.note(node, None if outcome.up else outcome.error)
        self._metrics(_Families(exposition(outcome, exporter.settings,
                                           node)), exporter.settings.compat)


LANDING = """<!doctype html>
<html><head><meta charset="utf-8"><title>beam-probe exporter</title></head>
<body>
<h1>beam-probe exporter</h1>
<p>Scrapes Erlang and Elixir nodes from outside, as a hidden node: nothing
is installed on them. Version {version}.</p>
<ul>
<li><a href="/metrics">/metrics</a>: the exporter's own figures</li>
<li>/probe?target=NODE: a node's figures (module=top for its largest
processes; cluster=1 for every node it is connected to)</li>
</ul>
<p>Allowed targets: {patterns}</p>
<h2>Prometheus configuration</h2>
<pre>{config}</pre>
</body></html>
"""


def scrape_config(listen: str, targets: Iterable[str] = ("app@host1",),
                  https: bool = False, password: bool = False) -> str:
    """A scrape job for this exporter, with the relabelling that makes
    each node a target (blackbox_exporter's pattern); with what its web
    configuration asks of a scraper."""
    security = []
    if https:
        security += ["    scheme: https",
                     "    tls_config:",
                     "      ca_file: /etc/prometheus/beam-probe-ca.pem"]
    if password:
        security += ["    basic_auth:",
                     "      username: prometheus",
                     "      password_file: /etc/prometheus/beam-probe.pass"]
    lines = ["scrape_configs:",
             "  - job_name: beam",
             "    metrics_path: /probe",
             *security,
             "    static_configs:",
             "      - targets:"]
    lines += [f"          - {t}" for t in targets]
    lines += ["    relabel_configs:",
              "      - source_labels: [__address__]",
              "        target_label: __param_target",
              "      - source_labels: [__param_target]",
              "        target_label: instance",
              "      - target_label: __address__",
              f"        replacement: {listen}",
              "  - job_name: beam-probe-exporter",
              *security,
              "    static_configs:",
              f"      - targets: ['{listen}']"]
    return "\n".join(lines) + "\n"


def landing(settings: Settings, address: str,
            web: WebConfig | None = None) -> str:
    patterns = ", ".join(f"<code>{html.escape(r.pattern)}</code>"
                         for r in settings.rules)
    config = scrape_config(address, https=web is not None and
                           web.tls is not None,
                           password=web is not None and bool(web.users))
    return LANDING.format(version=html.escape(__version__),
                          patterns=patterns, config=html.escape(config))


def make_server(exporter: Exporter, host: str, port: int) -> Front:
    handler = type("BoundHandler", (Handler,), {"exporter": exporter})
    web = exporter.web
    gate = PasswordGate(exporter.auth, web.headers if web is not None
                        else ()) if exporter.auth is not None else None
    front = Front((host, port),
                  lambda pending, front: handler(pending, pending.address,
                                                 front),
                  tls=web.tls if web is not None else None, log=exporter.log,
                  gate=gate)
    refused = exporter.own.http_refused
    for reason in ("head_deadline", "shed_oldest", "too_large", "busy"):
        refused.labels(reason)
    if exporter.auth is not None:
        for reason in ("unauthorized", "auth_busy"):
            refused.labels(reason)
    front.on_drop = lambda reason: refused.labels(reason).inc()
    return front


__all__ = ["Exporter", "Handler", "exposition", "landing", "make_server",
           "scrape_config"]
