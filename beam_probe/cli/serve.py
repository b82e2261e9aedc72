"""`beam-probe serve`: a Prometheus exporter for nodes that run none.

Its own command, as check is: it runs until stopped, speaks HTTP, and is
the one command that imports prometheus_client (bench_startup keeps the
others' start-up as it was)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from beam_probe.cli import options as opt
from beam_probe.cli.environment import current
from beam_probe.cli.tty import error_line
from beam_probe.errors import Terminated, UsageError

if TYPE_CHECKING:
    from beam_probe.exporter.config import Settings

DEFAULT_LISTEN = "127.0.0.1:9149"

EPILOG = """\b
Modules (/probe?module=): default, the VM's figures, whose cost does not
grow with the node's processes; top, the largest processes by memory,
binary memory and mailbox (n=1..20, default 10), one pass over every
process. cluster=1: every node the target is connected to, labelled
node. Stop with Ctrl-C or SIGTERM (exit 0)."""


def parse_listen(text: str) -> tuple[str, int]:
    """HOST:PORT, [V6]:PORT or :PORT (every IPv4 interface)."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise UsageError(f"--listen {text!r}: expected HOST:PORT "
                         "(127.0.0.1:9149, [::1]:9149, :9149)")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host or "0.0.0.0", int(port)


@click.command("serve", epilog=EPILOG)
@click.option("--listen", metavar="HOST:PORT", default=None,
              help=f"Where to serve HTTP. [default: {DEFAULT_LISTEN}]")
@click.option("--target", "patterns", multiple=True, metavar="PATTERN",
              help="Allow nodes matching PATTERN (name@host, with * and ?; "
                   "in the host, * stays within one label); repeat for more. "
                   "Nothing else is ever dialled.")
@click.option("--config", "config_path", metavar="FILE",
              help="A TOML file of [[target]] tables (match, cookie_file, "
                   "tls, ...) and settings; see the README.")
@click.option("--compat", is_flag=True, default=None,
              help="Also write the pre-6.0 prometheus.erl names (RabbitMQ's "
                   "Erlang-BEAM dashboard).")
@click.option("--cluster", is_flag=True,
              help="Scrape every target as a cluster entry (cluster=1).")
@click.option("--timeout", type=opt.Seconds(0.1), default=None,
              metavar="SECONDS",
              help="The longest a scrape may take; Prometheus' own scrape "
                   "timeout, less --timeout-offset, when shorter. "
                   "[default: 10]")
@click.option("--timeout-offset", type=opt.Seconds(0.0, 60.0), default=None,
              metavar="SECONDS",
              help="Taken off Prometheus' scrape timeout. [default: 0.5]")
@click.option("--cookie-file", metavar="FILE",
              help="The cookie of targets whose rule names none.")
@click.option("--cookie", metavar="VALUE",
              help="The cookie itself (visible in ps: prefer --cookie-file "
                   "or BEAM_PROBE_COOKIE).")
@click.option("--tls", is_flag=True, envvar="BEAM_PROBE_TLS",
              cls=opt.EnvOption,
              help="--target nodes use TLS distribution.")
@lambda f: opt.apply([click.option(f"--{name}", metavar="FILE",
                                   envvar=f"BEAM_PROBE_{name.upper()}",
                                   cls=opt.EnvOption, help=text)
                      for name, text in opt.TLS_FILE_OPTIONS], f)
@click.option("--tls-server-name", metavar="NAME",
              help="With --tls: the name the certificates must carry.")
@click.option("--ssl-dist-optfile", metavar="FILE",
              envvar="BEAM_PROBE_SSL_DIST_OPTFILE", cls=opt.EnvOption,
              help="TLS with this -ssl_dist_optfile's client options.")
@opt.JOBS_OPTION
def serve(listen: str | None, patterns: tuple[str, ...],
          config_path: str | None, compat: bool | None, cluster: bool,
          timeout: float | None, timeout_offset: float | None,
          **given: Any) -> None:
    """Serve Prometheus metrics of the nodes it is asked for.

    A multi-target exporter, as blackbox_exporter: Prometheus asks
    /probe?target=NODE, and the node is read then, over one hidden
    connection kept open between scrapes. Nothing is installed on the
    node. /metrics has the exporter's own figures; / an example scrape
    configuration.

    \b
    Examples:
      beam-probe serve --target 'rabbit@*'
      beam-probe serve --listen :9149 --config /etc/beam-probe/serve.toml

    \b
    Then, as Prometheus would:
      curl 'localhost:9149/probe?target=rabbit@mq1'
      curl 'localhost:9149/probe?target=rabbit@mq1&module=top&n=5'
    """
    settings, default_cookie = _settings(listen, patterns, config_path,
                                         compat, timeout, timeout_offset,
                                         given)
    try:
        from beam_probe.exporter.server import Exporter, make_server
        from beam_probe.exporter.targets import Pool
    except ImportError as exc:
        if "prometheus_client" not in str(exc):
            raise
        raise UsageError("serve needs prometheus_client: pip install "
                         "'beam-probe[serve]'") from None
    pool = Pool(lambda: default_cookie or b"", jobs=given["jobs"],
                dial_timeout=settings.timeout)
    exporter = Exporter(settings, pool, cluster=cluster, log=error_line)
    host, port = parse_listen(settings.listen)
    try:
        server = make_server(exporter, host, port)
    except OSError as exc:
        raise UsageError(f"--listen {settings.listen}: "
                         f"{exc.strerror or exc}") from None
    bound_host, bound_port = (str(part) for part in
                              server.server_address[:2])
    shown = f"[{bound_host}]" if ":" in str(bound_host) else bound_host
    exporter.address = f"{shown}:{bound_port}"
    error_line(f"beam-probe: serving http://{shown}:{bound_port}/ "
               f"(targets: {', '.join(r.pattern for r in settings.rules)})")
    try:
        server.serve_forever(poll_interval=0.5)
    except (KeyboardInterrupt, Terminated):
        # A service's normal end (systemd stops with SIGTERM): exit 0.
        error_line("beam-probe: serve stopped")
    finally:
        server.server_close()
        pool.close()


def _settings(listen: str | None, patterns: tuple[str, ...],
              config_path: str | None, compat: bool | None,
              timeout: float | None, timeout_offset: float | None,
              given: dict[str, Any]) -> tuple[Settings, bytes | None]:
    """The settings from the file, the options over them, and the default
    cookie where some target needs it."""
    from beam_probe.exporter.config import (Rule, Settings, check_pattern,
                                            checked_tls, read_file,
                                            settings_from)
    from beam_probe.node.address import resolve_cookie, resolve_tls

    from_file: dict[str, Any] = {"rules": []}
    if config_path:
        from_file = settings_from(read_file(config_path), config_path)
    tls = checked_tls(resolve_tls(given["tls"], given["ssl_dist_optfile"],
                                  certfile=given["certfile"],
                                  keyfile=given["keyfile"],
                                  cacertfile=given["cacertfile"],
                                  server_name=given["tls_server_name"]))
    rules = [*from_file["rules"],
             *(Rule(check_pattern(p, "--target"), tls=tls)
               for p in patterns)]
    if not rules:
        raise UsageError("no target is allowed: give --target PATTERN "
                         "(rabbit@*) or a --config with [[target]] tables; "
                         "the exporter dials nothing else")
    chosen: dict[str, Any] = {
        "listen": listen or from_file.get("listen") or DEFAULT_LISTEN,
        "timeout": float(timeout if timeout is not None
                         else from_file.get("timeout", 10.0)),
        "timeout_offset": float(timeout_offset if timeout_offset is not None
                                else from_file.get("timeout_offset", 0.5)),
        "compat": bool(compat if compat is not None
                       else from_file.get("compat", False))}
    if not 0.1 <= chosen["timeout"] <= 3600:
        raise UsageError("timeout must be 0.1 to 3600 seconds")
    if not 0 <= chosen["timeout_offset"] <= 60:
        raise UsageError("timeout_offset must be 0 to 60 seconds")
    parse_listen(chosen["listen"])
    default_cookie = None
    if any(rule.cookie is None for rule in rules):
        default_cookie = resolve_cookie(given["cookie_file"],
                                        given["cookie"], current().env)
    return Settings(rules=tuple(rules), **chosen), default_cookie


def click_command() -> click.Command:
    return serve


__all__ = ["click_command", "parse_listen", "serve"]
