"""The options commands share: which node and how to reach it, limits,
output format, --jobs; and the attach they lead to."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Callable

import click

DEFAULT_TIMEOUT = 15.0
DEFAULT_CONNECT_TIMEOUT = 15.0
# Limits are finite: threading waits overflow past ~10^7 years, and a day is
# longer than any probe should wait.
MAX_SECONDS = 86400.0

EPILOG_NODE = """\b
Node: NODE (name@host, or a bare name on this host, as erl -sname names it)
if given, else --node, BEAM_PROBE_NODE, RELEASE_NODE.
Cookie: --cookie-file, --cookie, BEAM_PROBE_COOKIE, RELEASE_COOKIE,
~/.erlang.cookie (must be readable by its owner only).
TLS nodes (-proto_dist inet_tls): --ssl-dist-optfile FILE (the node's own),
or --tls with --certfile, --keyfile, --cacertfile."""
# For the commands a crash dump answers (declare.py adds it).
EPILOG_DUMP = """
A dead node: give its crash dump's path (with a /, or ending in .dump)
where NODE goes: the answer is read from the dump."""


class EnvOption(click.Option):
    """An option whose environment variable is read from the run's
    environment (cli/environment.py), not the process's."""

    def resolve_envvar_value(self, ctx: click.Context) -> str | None:
        from beam_probe.cli.environment import current

        names = [self.envvar] if isinstance(self.envvar, str) else \
            list(self.envvar or ())
        env = current().env
        for name in names:
            if env.get(name):
                return env[name]
        return None


if TYPE_CHECKING:  # generic in the click mypy checks against (8.2+)
    _FloatParam = click.ParamType[float]
else:
    _FloatParam = click.ParamType


class Seconds(_FloatParam):
    """A finite number of seconds within bounds (click's FloatRange lets
    inf and nan through, which end in an internal error later)."""

    name = "seconds"

    def __init__(self, minimum: float, maximum: float = MAX_SECONDS) -> None:
        self.minimum = minimum
        self.maximum = maximum

    def convert(self, value: Any, param: Any, ctx: Any) -> float:
        try:
            number = float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a number of seconds", param, ctx)
        if not (math.isfinite(number)
                and self.minimum <= number <= self.maximum):
            self.fail(f"{value!r} is not between {self.minimum:g} and "
                      f"{self.maximum:g} seconds", param, ctx)
        return number


# --certfile, --keyfile, --cacertfile: named as in OTP's ssl options.
TLS_FILE_OPTIONS = (
    ("certfile", "With --tls: our client certificate (PEM), for nodes that "
                 "require one."),
    ("keyfile", "With --tls: the key of --certfile, if not in that file."),
    ("cacertfile", "With --tls: the CA certificates that signed the node's "
                   "(default: the system's)."),
)


def node_options(default_timeout: float = DEFAULT_TIMEOUT,
                 formats: tuple[str, ...] = ("table", "json"),
                 live: bool = False, screen: bool = False) -> list[Any]:
    """The click options every command that attaches to a node shares; the
    first of ``formats`` is the default (for a ``live`` command: table on
    a terminal, json piped)."""
    return [
        click.option("--node", "-n", metavar="NODE",
                     help="Target node, name@host (or a bare name for this "
                          "host)."),
        click.option("--cookie-file", metavar="FILE",
                     help="Read the cookie from FILE (mode 400)."),
        click.option("--cookie", metavar="VALUE",
                     help="The cookie itself. Visible to other users in ps: "
                          "prefer --cookie-file or the environment."),
        click.option("--dist-port", type=click.IntRange(1, 65535),
                     metavar="PORT",
                     help="Connect straight to this distribution port "
                          "(nodes without EPMD)."),
        click.option("--tls", is_flag=True, envvar="BEAM_PROBE_TLS",
                     cls=EnvOption,
                     help="The node uses TLS distribution (-proto_dist "
                          "inet_tls). Its certificate and host name are "
                          "verified."),
        *(click.option(f"--{name}", metavar="FILE",
                       envvar=f"BEAM_PROBE_{name.upper()}", cls=EnvOption,
                       help=text)
          for name, text in TLS_FILE_OPTIONS),
        click.option("--tls-server-name", metavar="NAME",
                     help="With --tls: the name the node's certificate must "
                          "carry (default: the host of NODE)."),
        click.option("--ssl-dist-optfile", metavar="FILE",
                     envvar="BEAM_PROBE_SSL_DIST_OPTFILE", cls=EnvOption,
                     help="Use TLS with the {client, [...]} options of this "
                          "file, the one the node is started with."),
        click.option("--timeout", type=Seconds(0.1), default=default_timeout,
                     show_default=True, metavar="SECONDS",
                     help="Limit for each call to the node."),
        click.option("--connect-timeout", type=Seconds(0.1),
                     default=None, metavar="SECONDS",
                     help="Limit for connecting (EPMD, TLS and the "
                          "handshake, every read included). [default: "
                          f"{DEFAULT_CONNECT_TIMEOUT:g}, or --timeout if "
                          "less]"),
        format_option(formats, live, screen),
    ]


def format_option(formats: tuple[str, ...] = ("table", "json"),
                  live: bool = False, screen: bool = False) -> Any:
    """--format. A live command (watch) and a screen (top) have no
    default: what they write depends on whether stdout is a terminal."""
    if not (live or screen):
        return click.option("--format", "fmt", type=click.Choice(formats),
                            default=formats[0], show_default=True,
                            help="Output format.")
    # Live, not given: a view on a terminal, JSON lines piped; `--format
    # table` piped writes a line of text per sample instead.
    default = ("the view on a terminal; table, one frame, otherwise; json: "
               "one frame" if screen else
               "table on a terminal (redrawn in place), json piped; table "
               "piped: a line per sample")
    return click.option("--format", "fmt", type=click.Choice(formats),
                        default=None,
                        help=f"Output format. [default: {default}]")


SYNTAX_OPTION = click.option(
    "--syntax", type=click.Choice(("auto", "erlang", "elixir")),
    default="auto", show_default=True,
    help="How text shows names, functions and pids: as Elixir writes them "
         "(MyApp.Cache.loop/1, #PID<0.1.0>) or Erlang ('Elixir.MyApp."
         "Cache':loop/1, <0.1.0>); auto follows the node. JSON always uses "
         "Erlang's forms.")


JOBS_OPTION = click.option(
    "--jobs", "-j", type=click.IntRange(min=0), default=0, show_default=True,
    metavar="J",
    help="Split the pass over every process into J slices run at once on "
         "the node, each a short-lived process (0: two per online "
         "scheduler; 1: one scheduler, as recon does). The node uses at "
         "most four per online scheduler.")


CLUSTER_OPTIONS = (
    click.option("--cluster", is_flag=True,
                 help="Ask every node connected to NODE too, fanned out by "
                      "NODE itself over distribution (one connection, one "
                      "cookie): visible nodes, as erlang:nodes() lists "
                      "them. Each row names its node; a node that does not "
                      "answer gets a row saying why, and exit code 15."),
    click.option("--nodes", "cluster_nodes", metavar="NAME@HOST,...",
                 help="With --cluster (implied): exactly these nodes, "
                      "through NODE; a node NODE is not connected to is "
                      "its row (NODE never dials one)."),
    click.option("--include-hidden", is_flag=True,
                 help="With --cluster (implied): hidden nodes connected to "
                      "NODE too (remote shells, other tools; never "
                      "beam-probe's own)."),
    click.option("--connect", "dial", is_flag=True,
                 help="With --nodes: NODE dials the named nodes it is not "
                      "connected to, at most 16, each host looked up here "
                      "first (one that does not resolve within --timeout "
                      "is not dialled)."),
)


def cluster_request(request: Any) -> None:
    """--nodes and --include-hidden imply --cluster; --nodes read into a
    list of names, checked before anything connects."""
    from beam_probe.errors import UsageError
    from beam_probe.probes.cluster import Chosen, parse_names

    names = getattr(request, "cluster_nodes", None)
    dial = bool(getattr(request, "dial", False))
    if dial and names is None:
        raise UsageError("--connect goes with --nodes: it dials the nodes "
                         "named there")
    request.cluster_nodes = Chosen(parse_names(names), dial) \
        if names is not None else None
    request.cluster = bool(getattr(request, "cluster", False)
                           or names is not None
                           or getattr(request, "include_hidden", False))


def apply(options: list[Any], f: Callable[..., Any]) -> Callable[..., Any]:
    for option in reversed(options):
        f = option(f)
    return f


def split_node(args: tuple[str, ...]) -> tuple[str | None, list[str]]:
    """The first positional argument is the node when it contains '@' (a
    bare name is resolved by the command's declaration, which knows its
    other words)."""
    if args and "@" in args[0]:
        return args[0], list(args[1:])
    return None, list(args)


def attach(node_arg: str | None, opts: dict[str, Any]) -> Any:
    """The Remote for NODE (or --node, or the environment), by the node
    options; the caller closes it."""
    from beam_probe.node.remote import attach as attach_remote
    from beam_probe.node.address import (full_node_name, resolve_cookie, resolve_node,
                          resolve_tls)

    from beam_probe.cli.environment import current

    env = current().env
    node = full_node_name(node_arg, env) if node_arg else resolve_node(
        opts["node"], env)
    cookie = resolve_cookie(opts["cookie_file"], opts["cookie"], env)
    tls = resolve_tls(opts["tls"], opts["ssl_dist_optfile"],
                      certfile=opts["certfile"], keyfile=opts["keyfile"],
                      cacertfile=opts["cacertfile"],
                      server_name=opts["tls_server_name"])
    return attach_remote(node, cookie, timeout=opts["timeout"],
                         connect_timeout=connect_timeout(opts),
                         dist_port=opts["dist_port"], tls=tls)


def connect_timeout(opts: dict[str, Any]) -> float:
    """--connect-timeout, or when not given the default, but never more
    than --timeout: `--timeout 5` against a silent peer took 15 s."""
    given = opts.get("connect_timeout")
    if given is not None:
        return float(given)
    return min(DEFAULT_CONNECT_TIMEOUT, float(opts["timeout"]))


__all__ = ["DEFAULT_TIMEOUT", "EPILOG_DUMP", "EPILOG_NODE", "JOBS_OPTION", "Seconds",
           "apply", "attach", "format_option", "node_options", "split_node"]
