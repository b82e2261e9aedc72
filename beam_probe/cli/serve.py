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
    from beam_probe.exporter.webconfig import WebConfig

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
@click.option("--target", "patterns", multiple=True, metavar="NODE",
              help="Allow this node (name@host); repeat for more. Nothing "
                   "else is ever dialled. A pattern (* and ?; in the host, * "
                   "stays within one label and never matches an IP address) "
                   "needs --allow-target-patterns, or TLS distribution.")
@click.option("--allow-target-patterns", "allow_patterns", is_flag=True,
              default=None,
              help="Allow --target patterns without TLS distribution. The "
                   "risk: any user of a matching host can register a "
                   "matching name in its EPMD, ask for it here, and relay "
                   "our handshake to a real node of the same cookie, which "
                   "then runs what that user sends, as us (the handshake "
                   "binds no names). With TLS distribution a certificate "
                   "cannot be relayed, and patterns need no flag.")
@click.option("--web.config.file", "web_config_path", metavar="FILE",
              help="HTTPS and basic auth, in the exporter-toolkit's YAML "
                   "(tls_server_config, basic_auth_users with bcrypt "
                   "hashes), as every Prometheus exporter reads it.")
@click.option("--config", "config_path", metavar="FILE",
              help="A TOML file of [[target]] tables (match, cookie_file, "
                   "tls, ...) and settings; see docs/manual/monitoring.md.")
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
          allow_patterns: bool | None, web_config_path: str | None,
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
      beam-probe serve --target rabbit@mq1 --target rabbit@mq2
      beam-probe serve --listen :9149 --config /etc/beam-probe/serve.toml \\
          --web.config.file /etc/beam-probe/web.yml

    \b
    Then, as Prometheus would:
      curl 'localhost:9149/probe?target=rabbit@mq1'
      curl 'localhost:9149/probe?target=rabbit@mq1&module=top&n=5'
    """
    try:
        import prometheus_client  # noqa: F401
    except ImportError:
        raise UsageError("serve needs prometheus_client: pip install "
                         "'beam-probe[serve]'") from None
    settings, default_cookie, web_path = _settings(
        listen, patterns, allow_patterns, web_config_path, config_path,
        compat, timeout, timeout_offset, given)
    web = None
    if web_path:
        from beam_probe.exporter.webconfig import read_web_config

        web = read_web_config(web_path)
    from beam_probe.exporter.front import raise_file_limit
    from beam_probe.exporter.server import Exporter, make_server
    from beam_probe.exporter.targets import Pool

    raise_file_limit()
    pool = Pool(lambda: default_cookie or b"", jobs=given["jobs"],
                dial_timeout=settings.timeout)
    exporter = Exporter(settings, pool, cluster=cluster, log=error_line,
                        web=web)
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
    scheme = "https" if web is not None and web.tls is not None else "http"
    error_line(f"beam-probe: serving {scheme}://{shown}:{bound_port}/ "
               f"(targets: {', '.join(r.pattern for r in settings.rules)})")
    for line in warnings(settings, web, host):
        error_line(line)
    try:
        server.serve_forever(poll_interval=0.5)
    except (KeyboardInterrupt, Terminated):
        # A service's normal end (systemd stops with SIGTERM): exit 0.
        error_line("beam-probe: serve stopped")
    finally:
        server.server_close()
        pool.close()


def warnings(settings: Settings, web: WebConfig | None, host: str
             ) -> list[str]:
    """The lines serve says at start about what strangers could do."""
    from beam_probe.exporter.config import open_rules

    out = []
    if not _loopback(host) and (web is None or not web.protects):
        out.append(f"beam-probe: warning: listening on {settings.listen} "
                   "without a --web.config.file that asks for a password "
                   "or a client certificate: whoever reaches this port can "
                   "make it scrape every allowed node")
    risky = open_rules(settings.rules)
    if risky:
        shown = ", ".join(r.pattern for r in risky[:5])
        out.append(f"beam-probe: warning: target patterns without TLS "
                   f"distribution ({shown}): a user of a matching host who "
                   "registers a matching name in its EPMD can have this "
                   "exporter's handshake relayed to a node of the same "
                   "cookie, and run code there")
    if any(r.pattern.partition("@")[0].strip("*") == "" and
           r.pattern.partition("@")[2].strip("*") == "" for r in
           settings.rules):
        out.append("beam-probe: warning: a --target pattern allows every "
                   "node of every host")
    return out


def _loopback(host: str) -> bool:
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _settings(listen: str | None, patterns: tuple[str, ...],
              allow_patterns: bool | None, web_config_path: str | None,
              config_path: str | None, compat: bool | None,
              timeout: float | None, timeout_offset: float | None,
              given: dict[str, Any]
              ) -> tuple[Settings, bytes | None, str | None]:
    """The settings from the file, the options over them, the default
    cookie where some target needs it, and the web configuration's
    path."""
    from beam_probe.exporter.config import (Rule, Settings, check_pattern,
                                            check_rules, checked_tls,
                                            read_file, settings_from)
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
        raise UsageError("no target is allowed: give --target NODE "
                         "(rabbit@mq1) or a --config with [[target]] tables; "
                         "the exporter dials nothing else")
    allowed = bool(allow_patterns if allow_patterns is not None
                   else from_file.get("allow_target_patterns", False))
    check_rules(rules, allowed)
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
    web_path = web_config_path or from_file.get("web_config_file")
    return Settings(rules=tuple(rules), **chosen), default_cookie, web_path


def click_command() -> click.Command:
    return serve


__all__ = ["click_command", "parse_listen", "serve"]
