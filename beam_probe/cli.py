"""The beam-probe command line: parse, call one probe, render. Nothing more.

Imports are kept to what every command needs (click, errors, target); the
hidden node, the probes and the renderers are imported inside the commands
that use them, because start-up is most of a one-query run's time.
"""

from __future__ import annotations

import math
import os
import sys
from typing import Any, Callable

import click

from . import __version__
from .errors import OutputFailed, ProbeError, Terminated, UsageError

DEFAULT_TIMEOUT = 15.0
DEFAULT_CONNECT_TIMEOUT = 15.0
# Limits are finite: threading waits overflow past ~10^7 years, and a day is
# longer than any probe should wait.
MAX_SECONDS = 86400.0

# An error is one line; a peer controls some of what goes into it (an EPMD
# listing, a node's badrpc reason), so it is cut here.
MAX_ERROR_LINE = 1000

# exit codes of the ends that are not errors of ours: Ctrl-C, `| head`
# closing the pipe (as SIGPIPE would end us), SIGTERM.
EXIT_INTERRUPTED, EXIT_PIPE_CLOSED, EXIT_TERMINATED = 130, 141, 143

EPILOG_NODE = """\b
Node: NODE (name@host) if given, else --node, BEAM_PROBE_NODE, RELEASE_NODE.
Cookie: --cookie-file, --cookie, BEAM_PROBE_COOKIE, RELEASE_COOKIE,
~/.erlang.cookie (must be readable by its owner only).
TLS nodes (-proto_dist inet_tls): --ssl-dist-optfile FILE (the node's own),
or --tls with --certfile, --keyfile, --cacertfile."""


def error_line(text: str) -> None:
    """One line on stderr: control characters escaped, length capped."""
    from .render import printable

    line = printable(" ".join(text.split("\n")))
    if len(line) > MAX_ERROR_LINE:
        line = line[:MAX_ERROR_LINE - 15] + " ... (cut short)"
    click.echo(line, err=True)


class PipeClosed(Exception):
    """The reader of our standard output went away (`| head`)."""


def write_out(text: str) -> None:
    """Text and a newline on stdout, flushed, so that a closed or full
    stdout is known here: OutputFailed, or PipeClosed for a closed pipe."""
    stream = sys.stdout
    if stream is None:
        raise OutputFailed("standard output is closed")
    try:
        stream.write(text + "\n")
        stream.flush()
    except BrokenPipeError:
        raise PipeClosed() from None
    except OSError as exc:
        raise OutputFailed(f"cannot write to standard output: "
                           f"{exc.strerror or exc}") from None


class _Main(click.Group):
    """Turn every ProbeError into one line on stderr and its exit code."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except ProbeError as exc:
            error_line(f"beam-probe: {exc.label}: {exc}")
            ctx.exit(exc.exit_code)
        except PipeClosed:
            ctx.exit(EXIT_PIPE_CLOSED)
        except KeyboardInterrupt:
            error_line("beam-probe: interrupted")
            ctx.exit(EXIT_INTERRUPTED)
        except Terminated:
            error_line("beam-probe: terminated")
            ctx.exit(EXIT_TERMINATED)
        except (click.exceptions.Exit, click.ClickException, click.Abort):
            raise
        except Exception as exc:  # a bug of ours: still one line
            if os.environ.get("BEAM_PROBE_DEBUG"):
                raise
            error_line(f"beam-probe: internal error: {type(exc).__name__}: "
                       f"{exc} (set BEAM_PROBE_DEBUG=1 for a traceback)")
            ctx.exit(1)


class Seconds(click.ParamType):
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
                 formats: tuple[str, ...] = ("table", "json")) -> Callable:
    """The options every command that attaches to a node shares; the first
    of ``formats`` is the default."""
    def decorate(f: Callable) -> Callable:
        options = [
            click.option("--node", "-n", metavar="NODE",
                         help="Target node, name@host (or a bare name for "
                              "this host)."),
            click.option("--cookie-file", metavar="FILE",
                         help="Read the cookie from FILE (mode 400)."),
            click.option("--cookie", metavar="VALUE",
                         help="The cookie itself. Visible to other users in "
                              "ps: prefer --cookie-file or the environment."),
            click.option("--dist-port", type=click.IntRange(1, 65535),
                         metavar="PORT",
                         help="Connect straight to this distribution port "
                              "(nodes without EPMD)."),
            click.option("--tls", is_flag=True, envvar="BEAM_PROBE_TLS",
                         help="The node uses TLS distribution (-proto_dist "
                              "inet_tls). Its certificate and host name are "
                              "verified."),
            *(click.option(f"--{name}", metavar="FILE",
                           envvar=f"BEAM_PROBE_{name.upper()}", help=text)
              for name, text in TLS_FILE_OPTIONS),
            click.option("--tls-server-name", metavar="NAME",
                         help="With --tls: the name the node's certificate "
                              "must carry (default: the host of NODE)."),
            click.option("--ssl-dist-optfile", metavar="FILE",
                         envvar="BEAM_PROBE_SSL_DIST_OPTFILE",
                         help="Use TLS with the {client, [...]} options of "
                              "this file, the one the node is started with."),
            click.option("--timeout", type=Seconds(0.1),
                         default=default_timeout, show_default=True,
                         metavar="SECONDS",
                         help="Limit for each call to the node."),
            click.option("--connect-timeout", type=Seconds(0.1),
                         default=DEFAULT_CONNECT_TIMEOUT, show_default=True,
                         metavar="SECONDS",
                         help="Limit for connecting (EPMD, TLS and the "
                              "handshake, every read included)."),
            click.option("--format", "fmt", type=click.Choice(formats),
                         default=formats[0], show_default=True,
                         help="Output format."),
        ]
        for option in reversed(options):
            f = option(f)
        return f
    return decorate


def split_node(args: tuple[str, ...]) -> tuple[str | None, list[str]]:
    """The first positional argument is the node when it contains '@'."""
    if args and "@" in args[0]:
        return args[0], list(args[1:])
    return None, list(args)


def _attach(node_arg: str | None, opts: dict[str, Any]):
    from .remote import attach
    from .target import (full_node_name, resolve_cookie, resolve_node,
                         resolve_tls)

    node = full_node_name(node_arg) if node_arg else resolve_node(
        opts["node"])
    cookie = resolve_cookie(opts["cookie_file"], opts["cookie"])
    tls = resolve_tls(opts["tls"], opts["ssl_dist_optfile"],
                      certfile=opts["certfile"], keyfile=opts["keyfile"],
                      cacertfile=opts["cacertfile"],
                      server_name=opts["tls_server_name"])
    return attach(node, cookie, timeout=opts["timeout"],
                  connect_timeout=opts["connect_timeout"],
                  dist_port=opts["dist_port"], tls=tls)


def _emit(opts: dict[str, Any], data: Any, text: Callable[[], str]) -> None:
    from . import render

    write_out(render.to_json(data) if opts["fmt"] == "json"
              else render.printable(text()))


def _only_node(args: tuple[str, ...]) -> str | None:
    node, rest = split_node(args)
    if rest:
        raise UsageError(f"unexpected argument {rest[0]!r}: NODE is "
                         "name@host (a bare name goes in --node)")
    return node


@click.group(cls=_Main, context_settings={"help_option_names": ["-h",
                                                                 "--help"]})
@click.version_option(__version__, prog_name="beam-probe")
def main() -> None:
    """Find memory leaks in a running Erlang or Elixir node, from outside.

    beam-probe attaches as a hidden distribution node, runs only stock OTP
    code on the target (nothing is loaded there), and reports.

    \b
    Examples:
      beam-probe ping app@db1
      beam-probe memory app@db1 --cookie-file ~/.erlang.cookie
      RELEASE_NODE=app@db1 RELEASE_COOKIE=... beam-probe memory --format json
    """


@main.command(epilog=EPILOG_NODE)
@click.argument("args", nargs=-1, metavar="[NODE]")
@node_options()
def ping(args: tuple[str, ...], **opts: Any) -> None:
    """Check that NODE answers: its OTP release, ERTS version, round trip.

    \b
    Examples:
      beam-probe ping app@db1
      beam-probe ping --node app --format json
    """
    from . import render
    from .probes import basic

    with _attach(_only_node(args), opts) as remote:
        result = basic.ping(remote)
    _emit(opts, result, lambda: render.ping_text(result))


@main.command(epilog=EPILOG_NODE)
@click.argument("args", nargs=-1, metavar="[NODE]")
@node_options()
def memory(args: tuple[str, ...], **opts: Any) -> None:
    """Show erlang:memory() of NODE: bytes per kind, with human units.

    \b
    Examples:
      beam-probe memory app@db1
      beam-probe memory app@db1 --format json
    """
    from . import render
    from .probes import basic

    with _attach(_only_node(args), opts) as remote:
        result = basic.memory(remote)
    _emit(opts, {"node": remote.node, "memory": result},
          lambda: render.memory_text(remote.node, result))


class _Progress:
    """Stage and elapsed time on stderr while a scan runs, on a terminal only."""

    def __init__(self) -> None:
        self.enabled = sys.stderr is not None and sys.stderr.isatty()
        self.message = ""
        self._thread = None
        self._stop = None

    def __call__(self, message: str) -> None:
        if not self.enabled:
            return
        import threading
        import time

        self.message = message
        if self._thread is None:
            self._stop = threading.Event()
            started = time.monotonic()

            def tick() -> None:
                while not self._stop.wait(0.25):
                    sys.stderr.write(f"\r\x1b[K{self.message} "
                                     f"({time.monotonic() - started:.1f} s)")
                    sys.stderr.flush()
            self._thread = threading.Thread(target=tick, daemon=True)
            self._thread.start()

    def pause(self) -> None:
        """Stop drawing and clear the line (output is about to start)."""
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
            sys.stderr.write("\r\x1b[K")
            sys.stderr.flush()

    def __enter__(self) -> "_Progress":
        return self

    def __exit__(self, *exc: object) -> None:
        self.pause()


def _count(value: str, what: str = "N", maximum: int | None = None) -> int:
    try:
        n = int(value)
    except ValueError:
        raise UsageError(f"{what} must be a whole number, not {value!r}") \
            from None
    if n < 1:
        raise UsageError(f"{what} must be at least 1, not {n}")
    if maximum is not None and n > maximum:
        raise UsageError(f"{what} must be at most {maximum}, not {n}")
    return n


def _rows_count(value: str) -> int:
    from .probes.processes import MAX_N, check_n

    n = _count(value)
    if n > MAX_N:
        check_n(n)
    return n


def jobs_option(command: Callable) -> Callable:
    """--jobs: how many of the node's schedulers one pass may use."""
    return click.option(
        "--jobs", "-j", type=click.IntRange(min=0), default=0,
        show_default=True, metavar="J",
        help="Split the pass over every process into J slices run at once "
             "on the node, each a short-lived process (0: two per online "
             "scheduler; 1: one scheduler, as recon does). The node uses at "
             "most four per online scheduler.")(command)


@main.command("bin-leak", epilog=EPILOG_NODE)
@click.argument("args", nargs=-1, metavar="[NODE] N")
@click.option("--max-gc", type=click.IntRange(min=0), metavar="COUNT",
              help="Collect at most COUNT processes (largest binary holders "
                   "first).")
@click.option("--dry-run", is_flag=True,
              help="Count binary holders only: say how many processes would "
                   "be collected, and collect none.")
@jobs_option
@node_options(default_timeout=300.0)
def bin_leak(args: tuple[str, ...], max_gc: int | None, dry_run: bool,
             jobs: int, **opts: Any) -> None:
    """The N processes that free most refc binaries when collected.

    Like recon:bin_leak(N): counts each process's refc binary references,
    garbage-collects the processes that hold any, counts again, and shows
    the N whose count fell most (-5580: 5580 fewer references). A sharp
    drop in total and binary memory means idle refc binaries were held.

    Cost: one process_info pass over every process, and a GC of each
    binary holder. Run with --dry-run first to see how many processes
    that is, or proc-count binary_memory if a GC is too much.

    \b
    Examples:
      beam-probe bin-leak app@db1 5
      beam-probe bin-leak app@db1 5 --dry-run
      beam-probe bin-leak app@db1 10 --max-gc 1000 --jobs 2 --format json
    """
    from . import render
    from .probes import processes

    node, rest = split_node(args)
    if len(rest) != 1:
        raise UsageError("expected [NODE] N, e.g. beam-probe bin-leak "
                         "app@host 5")
    n = _rows_count(rest[0])
    with _attach(node, opts) as remote, _Progress() as progress:
        result = processes.bin_leak(remote, n, max_gc, progress, jobs,
                                    dry_run)
    _emit(opts, result, lambda: render.bin_leak_text(result))


@main.command("proc-count", epilog=EPILOG_NODE)
@click.argument("args", nargs=-1, metavar="[NODE] ATTRIBUTE (N | --all)")
@click.option("--all", "every", is_flag=True,
              help="Every process, largest first, streamed in chunks (N "
                   "is at most 10000 otherwise).")
@jobs_option
@node_options(default_timeout=300.0)
def proc_count(args: tuple[str, ...], every: bool, jobs: int,
               **opts: Any) -> None:
    """The N processes with the largest ATTRIBUTE.

    Like recon:proc_count(ATTRIBUTE, N). ATTRIBUTE is one of memory,
    reductions, message_queue_len, total_heap_size, heap_size, stack_size,
    binary_memory (the summed sizes of the refc binaries a process
    references). Cost: one process_info pass over every process; no GC.
    N is at most 10000; --all lists every process instead, streamed: the
    node sends the next chunk only when the last is written.

    \b
    Examples:
      beam-probe proc-count app@db1 binary_memory 3
      BEAM_PROBE_NODE=app@db1 beam-probe proc-count memory 10
      beam-probe proc-count app@db1 memory --all --format json > all.json
    """
    from . import render
    from .probes import processes

    node, rest = split_node(args)
    if len(rest) != (1 if every else 2):
        raise UsageError("expected [NODE] ATTRIBUTE N, or [NODE] ATTRIBUTE "
                         "--all, e.g. beam-probe proc-count app@host "
                         "binary_memory 3")
    attribute = rest[0]
    processes.check_attribute(attribute)
    if every:
        with _attach(node, opts) as remote, _Progress() as progress:
            _emit_stream(opts, remote.node, attribute,
                         processes.proc_count_all(remote, attribute,
                                                  progress, jobs), progress)
        return
    n = _rows_count(rest[1])
    with _attach(node, opts) as remote, _Progress() as progress:
        result = processes.proc_count(remote, attribute, n, progress, jobs)
    _emit(opts, result, lambda: render.proc_count_text(result))


def _emit_stream(opts: dict[str, Any], node: str, attribute: str,
                 chunks: Any, progress: "_Progress") -> None:
    """proc-count --all: each chunk written as it arrives, so neither the
    node nor we hold the whole ranking. JSON is the same object as for N,
    written piece by piece."""
    import json

    from . import render

    summary: dict[str, int] = {}

    def rows() -> Any:
        summary.update((yield from chunks))

    if opts["fmt"] == "json":
        write_out(f'{{"node": {json.dumps(node)}, "attribute": '
                  f'{json.dumps(attribute)}, "processes": [')
        first = True
        for chunk in rows():
            progress.pause()
            for row in chunk:
                write_out(("  " if first else ", ") + json.dumps(row))
                first = False
        write_out(f'], "scanned": {summary["scanned"]}, '
                  f'"sent": {summary["sent"]}}}')
        return
    write_out(render.printable(f"{node}: every process by {attribute}, "
                               "largest first"))

    def table_chunks() -> Any:
        for chunk in rows():
            progress.pause()
            yield render.process_rows(chunk, "value")

    for line in render.stream_table(
            ("pid", attribute, "name", "current function", "initial call"),
            table_chunks(), "lrlll"):
        write_out(render.printable(line))
    write_out(f"{summary['sent']} of {summary['scanned']} processes")


@main.command("proc-window", epilog=EPILOG_NODE)
@click.argument("args", nargs=-1, metavar="[NODE] ATTRIBUTE N MILLISECONDS")
@jobs_option
@node_options(default_timeout=300.0)
def proc_window(args: tuple[str, ...], jobs: int, **opts: Any) -> None:
    """The N processes whose ATTRIBUTE grew most over MILLISECONDS.

    Like recon:proc_window(ATTRIBUTE, N, MILLISECONDS), for the same
    attributes as proc-count; reductions shows who is busy right now.
    Processes born or dead inside the window are listed apart, never
    mixed into the increases. Cost: two proc-count passes; the node keeps
    the first snapshot meanwhile. --timeout counts on top of the window.

    \b
    Examples:
      beam-probe proc-window app@db1 reductions 5 1000
      beam-probe proc-window app@db1 binary_memory 10 60000 --format json
    """
    from . import render
    from .probes import processes

    node, rest = split_node(args)
    if len(rest) != 3:
        raise UsageError("expected [NODE] ATTRIBUTE N MILLISECONDS, e.g. "
                         "beam-probe proc-window app@host reductions 5 1000")
    attribute, n = rest[0], _rows_count(rest[1])
    millis = _count(rest[2], "MILLISECONDS")
    processes.check_attribute(attribute)
    with _attach(node, opts) as remote, _Progress() as progress:
        result = processes.proc_window(remote, attribute, n, millis,
                                       progress, jobs)
    _emit(opts, result, lambda: render.proc_window_text(result))


@main.command("proc-info", epilog=EPILOG_NODE)
@click.argument("args", nargs=-1, metavar="[NODE] PID")
@node_options()
def proc_info(args: tuple[str, ...], **opts: Any) -> None:
    """One process, grouped as recon:info/1 groups it.

    PID is as Erlang or Elixir prints it (<0.123.0>, #PID<0.123.0>, or
    0.123.0 without the brackets a shell would eat), or a registered name
    in either language's syntax (code_server, :code_server, 'my name',
    MyApp.Cache, Elixir.MyApp.Cache); names are looked up without
    creating an atom. Groups: meta, signals, location, memory_used (with
    the refc binaries it references), work. The mailbox and the process
    dictionary are never read.

    \b
    Examples:
      beam-probe proc-info app@db1 '<0.4612.0>'
      beam-probe proc-info app@db1 code_server --format json
      beam-probe proc-info app@db1 MyApp.Cache
    """
    from . import render
    from .probes import info

    node, rest = split_node(args)
    if len(rest) != 1:
        raise UsageError("expected [NODE] PID, e.g. beam-probe proc-info "
                         "app@host '<0.123.0>'")
    info.target(rest[0])
    with _attach(node, opts) as remote:
        result = info.proc_info(remote, rest[0])
    _emit(opts, result, lambda: render.proc_info_text(result))


@main.command()
def demo() -> None:
    """Start a local demo node that leaks binaries, probe it, stop it.

    Needs only Erlang (erl, erlc) on this machine. The node gets a unique
    name and a private cookie, and is stopped by its pid at the end.
    """
    from .demo import run_demo

    run_demo(click.echo)


class _PluginCommand(click.Command):
    """A monitoring plugin: bad arguments are UNKNOWN (3), said on stdout as
    a plugin line (Nagios shows stdout, and nothing else), not click's 2."""

    def make_context(self, *args: Any, **kwargs: Any) -> click.Context:
        try:
            return super().make_context(*args, **kwargs)
        except click.UsageError as exc:
            _plugin_exit(3, f"BEAM UNKNOWN - {exc.format_message()}")
            raise  # not reached


@main.command(cls=_PluginCommand, epilog=EPILOG_NODE + """

\b
Keys: total, processes, binary, ets, atom (bytes), binary_share and
atom_use (percent, at most 100), process_count, max_queue (counts),
top_binary_memory (bytes). Units: k, M, G, T and KB, MB, GB, TB are powers
of 1000; KiB, MiB, GiB, TiB powers of 1024.
Exit: 0 OK, 1 WARNING, 2 CRITICAL (also: node unreachable), 3 UNKNOWN.""")
@click.argument("args", nargs=-1, metavar="[NODE]")
@click.option("--warn", "warn_specs", multiple=True, metavar="KEY=VALUE",
              help="WARNING when KEY is at or above VALUE. Repeatable.")
@click.option("--crit", "crit_specs", multiple=True, metavar="KEY=VALUE",
              help="CRITICAL when KEY is at or above VALUE. Repeatable.")
@click.option("--textfile", metavar="PATH",
              help="Also write the node_exporter textfile PATH (atomically).")
@click.option("--history", metavar="FILE",
              help="Append one JSON line per node and run to FILE.")
@click.option("--trend", type=click.IntRange(min=1, max=1000), default=None,
              metavar="N", help="With --history: WARNING after N "
              "consecutive rises of binary memory [default: 5].")
@click.option("--cluster", is_flag=True,
              help="Also check every node connected to NODE, fanned out by "
                   "NODE itself over distribution.")
@jobs_option
@node_options(formats=("nagios", "json", "prometheus"))
def check(args: tuple[str, ...], warn_specs: tuple[str, ...],
          crit_specs: tuple[str, ...], textfile: str | None,
          history: str | None, trend: int | None, cluster: bool, jobs: int,
          **opts: Any) -> None:
    """A monitoring plugin: is NODE's memory within bounds?

    Measures erlang:memory(), the process count, the largest binary_memory
    of one process, the longest message queue and atom use, and compares
    them with the thresholds. With no thresholds: OK whenever the node
    answers. Output: a Nagios plugin line with perfdata (default), --format
    json, or --format prometheus (also --textfile for node_exporter).

    \b
    Examples:
      beam-probe check app@db1 --warn binary=500MB --crit binary=1GiB
      beam-probe check app@db1 --warn binary_share=40% --crit max_queue=10k
      beam-probe check app@db1 --history /var/lib/beam-probe/app.jsonl
      beam-probe check app@db1 --cluster --format prometheus \\
          --textfile /var/lib/node_exporter/textfile/beam.prom
    """
    from .checks.run import CheckRequest, run_check

    node, rest = split_node(args)
    if rest:
        _plugin_exit(3, f"BEAM UNKNOWN - unexpected argument {rest[0]!r}")
    if trend is not None and not history:
        _plugin_exit(3, "BEAM UNKNOWN - --trend needs --history FILE")
    request = CheckRequest(node=node, warn=warn_specs, crit=crit_specs,
                           fmt=opts["fmt"], textfile=textfile,
                           history=history, trend=trend, cluster=cluster,
                           jobs=jobs, timeout=opts["timeout"])
    try:
        code, text = run_check(lambda: _attach(node, opts), request)
    except (KeyboardInterrupt, Terminated):
        code, text = 3, "BEAM UNKNOWN - interrupted before the check ended"
    except Exception as exc:  # a bug of ours: UNKNOWN, as plugins report it
        if os.environ.get("BEAM_PROBE_DEBUG"):
            raise
        code, text = 3, (f"BEAM UNKNOWN - internal error: "
                         f"{type(exc).__name__}: {exc}")
    _plugin_exit(code, text)


def _plugin_exit(code: int, text: str) -> None:
    """Print the plugin's output and end with its status. Output that
    cannot be written still ends 0-3: UNKNOWN, said on stderr."""
    from .render import printable

    try:
        write_out(printable(text))
    except (OutputFailed, PipeClosed) as exc:
        error_line(f"BEAM UNKNOWN - {exc or 'standard output is closed'}")
        code = 3
    sys.exit(code)


def _terminate(signum: int, frame: Any) -> None:
    raise Terminated()


def run() -> None:
    """Entry point of the ``beam-probe`` script."""
    import signal

    # SIGTERM (kill, systemd, a scheduler's timeout) ends a run as Ctrl-C
    # does: one line, a documented code, connections closed on the way out.
    signal.signal(signal.SIGTERM, _terminate)
    try:
        main(prog_name="beam-probe")
        code = 0
    except SystemExit as exc:  # click ends every run this way
        code = exc.code if isinstance(exc.code, int) else (
            0 if exc.code is None else 1)
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except OSError:  # already reported where it was written
            pass
    # Skip interpreter finalization: by now every connection is closed and
    # every file written and closed. Tearing down modules and threads costs
    # ~5 ms, an eighth of a one-query run (measured; see tests/bench_startup).
    os._exit(code)


if __name__ == "__main__":  # pragma: no cover
    run()
