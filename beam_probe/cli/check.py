"""`beam-probe check`: the monitoring plugin. Its own command, because a
plugin speaks differently: every outcome is one line on stdout, and the
exit code is the status (0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN), bad
arguments and unwritable output included."""

from __future__ import annotations

import os
import sys
from typing import Any

import click

from beam_probe.errors import OutputFailed, Terminated
from beam_probe.cli import options as opt
from beam_probe.cli.environment import current
from beam_probe.cli.tty import PipeClosed, error_line, write_out


class PluginCommand(click.Command):
    """Bad arguments are UNKNOWN (3), said on stdout as a plugin line
    (Nagios shows stdout, and nothing else), not click's 2."""

    def make_context(self, *args: Any, **kwargs: Any) -> click.Context:
        try:
            return super().make_context(*args, **kwargs)
        except click.UsageError as exc:
            plugin_exit(3, f"BEAM UNKNOWN - {exc.format_message()}")
            raise  # not reached


def plugin_exit(code: int, text: str) -> None:
    """Print the plugin's output and end with its status. Output that
    cannot be written still ends 0-3: UNKNOWN, said on stderr."""
    from beam_probe.text.tables import printable

    try:
        write_out(printable(text))
    except (OutputFailed, PipeClosed) as exc:
        error_line(f"BEAM UNKNOWN - {exc or 'standard output is closed'}")
        code = 3
    sys.exit(code)


EPILOG = opt.EPILOG_NODE + """

\b
Keys: total, processes, binary, ets, atom (bytes), binary_share and
atom_use (percent, at most 100), process_count, max_queue (counts),
top_binary_memory (bytes: the most refc binary bytes one process
references, each binary once, so never more than the node's binary
memory). Units: k, M, G, T and KB, MB, GB, TB are powers
of 1000; KiB, MiB, GiB, TiB powers of 1024.
Exit: 0 OK, 1 WARNING, 2 CRITICAL (also: node unreachable), 3 UNKNOWN."""


def check(args: tuple[str, ...], warn_specs: tuple[str, ...],
          crit_specs: tuple[str, ...], textfile: str | None,
          history: str | None, trend: int | None, cluster: bool, jobs: int,
          **given: Any) -> None:
    """A monitoring plugin: is NODE's memory within bounds?

    Measures erlang:memory(), the process count, the most refc binary bytes
    one process references (each binary once), the longest message queue and atom use, and compares
    them with the thresholds; the two per-process figures name their
    process. With no thresholds: OK whenever the node
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
    from beam_probe.checks.run import CheckRequest, run_check

    node, rest = opt.split_node(args)
    if node is None and len(rest) == 1:
        # check takes NODE alone: a bare name is this host's node, as
        # erl -sname names it (check demo).
        node, rest = rest[0], []
    if rest:
        plugin_exit(3, f"BEAM UNKNOWN - unexpected argument {rest[0]!r}")
    if node is not None and ("/" in node or ".dump" in node
                             or os.path.isfile(node)):
        from beam_probe.crashdump.reader import DumpError, looks_like_dump

        try:
            if looks_like_dump(node):
                plugin_exit(3, "BEAM UNKNOWN - check asks a live node; read "
                               f"the crash dump {node} with beam-probe "
                               "crashdump")
        except DumpError as exc:
            plugin_exit(3, f"BEAM UNKNOWN - {exc}")
    if trend is not None and not history:
        plugin_exit(3, "BEAM UNKNOWN - --trend needs --history FILE")
    # A plugin's -t bounds its whole run (NRPE kills it at 10 s by
    # default): connecting takes its share of --timeout, never more.
    given["connect_timeout"] = min(given["connect_timeout"]
                                   or given["timeout"], given["timeout"])
    request = CheckRequest(node=node, warn=warn_specs, crit=crit_specs,
                           fmt=given["fmt"], textfile=textfile,
                           history=history, trend=trend, cluster=cluster,
                           jobs=jobs, timeout=given["timeout"])
    try:
        code, text = run_check(lambda: opt.attach(node, given), request)
    except (KeyboardInterrupt, Terminated):
        code, text = 3, "BEAM UNKNOWN - interrupted before the check ended"
    except Exception as exc:  # a bug of ours: UNKNOWN, as plugins report it
        if current().env.get("BEAM_PROBE_DEBUG"):
            raise
        code, text = 3, (f"BEAM UNKNOWN - internal error: "
                         f"{type(exc).__name__}: {exc}")
    plugin_exit(code, text)


def click_command() -> click.Command:
    params = [
        click.argument("args", nargs=-1, metavar="[NODE]"),
        click.option("--warn", "warn_specs", multiple=True,
                     metavar="KEY=VALUE",
                     help="WARNING when KEY is at or above VALUE. "
                          "Repeatable."),
        click.option("--crit", "crit_specs", multiple=True,
                     metavar="KEY=VALUE",
                     help="CRITICAL when KEY is at or above VALUE. "
                          "Repeatable."),
        click.option("--textfile", metavar="PATH",
                     help="Also write the node_exporter textfile PATH "
                          "(atomically)."),
        click.option("--history", metavar="FILE",
                     help="Append one JSON line per node and run to FILE."),
        click.option("--trend", type=click.IntRange(min=1, max=1000),
                     default=None, metavar="N",
                     help="With --history: WARNING after N consecutive "
                          "rises of binary memory [default: 5]."),
        click.option("--cluster", is_flag=True,
                     help="Also check every node connected to NODE, fanned "
                          "out by NODE itself over distribution."),
        opt.JOBS_OPTION,
        *opt.node_options(formats=("nagios", "json", "prometheus")),
    ]
    return click.command("check", cls=PluginCommand, help=check.__doc__,
                         epilog=EPILOG)(opt.apply(params, check))


__all__ = ["PluginCommand", "click_command", "plugin_exit"]
