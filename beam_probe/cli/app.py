"""The ``beam-probe`` group, its error handling, and the entry point.

Every ProbeError ends as one line on stderr and its exit code; a bug of
ours as one line too (BEAM_PROBE_DEBUG=1 gives the traceback). ``invoke``
runs the command line in-process and returns its exit code (tests use it
for errors raised before connecting); ``run``, the script's entry point,
ends the process with ``os._exit`` once output is flushed.
"""

from __future__ import annotations

import functools
import os
import sys
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from typing import Any, Callable, Iterator

import click

from beam_probe import __version__
from beam_probe.errors import ProbeError, Terminated
from beam_probe.cli.environment import Environment, current, using
from beam_probe.cli.tty import PipeClosed, error_line

# exit codes of the ends that are not errors of ours: Ctrl-C, `| head`
# closing the pipe (as SIGPIPE would end us), SIGTERM.
EXIT_INTERRUPTED, EXIT_PIPE_CLOSED, EXIT_TERMINATED = 130, 141, 143


class Main(click.Group):
    """Turn every ProbeError, and click's own usage errors, into one line
    on stderr and its exit code."""

    def make_context(self, *args: Any, **kwargs: Any) -> click.Context:
        try:
            return super().make_context(*args, **kwargs)
        except click.UsageError as exc:
            _usage_line(exc)
            sys.exit(exc.exit_code)

    # The declared commands are made into click commands when named, not
    # at import: building all of them cost ~3 ms of every run's start-up
    # (python -X importtime), where a run uses one.
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(super().list_commands(ctx)) | set(_declared()))

    def get_command(self, ctx: click.Context,
                    cmd_name: str) -> click.Command | None:
        found = super().get_command(ctx, cmd_name)
        if found is None and cmd_name in _declared():
            found = _declared()[cmd_name]()
            self.add_command(found, cmd_name)
        if found is not None:
            _point_on(found, cmd_name)
        return found

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except click.UsageError as exc:
            # click would print the usage, a hint and the error: four
            # lines where every other failure is one.
            _usage_line(exc)
            ctx.exit(exc.exit_code)
        except ProbeError as exc:
            error_line(f"beam-probe: {exc.label}: {exc}")
            ctx.exit(exc.exit_code)
        except (PipeClosed, BrokenPipeError):
            # BrokenPipeError: what click.echo wrote itself (the demo).
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
            if current().env.get("BEAM_PROBE_DEBUG"):
                raise
            error_line(f"beam-probe: internal error: {type(exc).__name__}: "
                       f"{exc} (set BEAM_PROBE_DEBUG=1 for a traceback)")
            ctx.exit(1)


def more_line(name: str) -> str:
    """The last line of a command's --help: where the manual says more.
    A path in beam-probe's repository (the page is generated from the
    same declaration, docs/generate.py), and the topics that come with
    an installed beam-probe."""
    # Under 80 columns with click's indent, for the longest name.
    return (f"More: docs/commands/{name}.md in the repository; beam-probe "
            "help topics")


def _point_on(command: click.Command, name: str) -> None:
    """End the command's help with more_line, once."""
    line = more_line(name)
    epilog = command.epilog or ""
    if not epilog.endswith(line):
        command.epilog = f"{epilog}\n\n{line}" if epilog else line


def _usage_line(exc: click.UsageError) -> None:
    command = exc.ctx.command_path if exc.ctx is not None else "beam-probe"
    error_line(f"beam-probe: usage: {exc.format_message()} (see "
               f"`{command} --help`)")


@click.group(cls=Main, invoke_without_command=True,
             context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="beam-probe")
@click.pass_context
def main(ctx: click.Context) -> None:
    """Find memory leaks in a running Erlang or Elixir node, from outside.

    beam-probe attaches as a hidden distribution node, runs only stock OTP
    code on the target (nothing of ours is loaded there), and reports. New
    here? `beam-probe demo` is a guided tour on a node of its own.

    \b
    The leak hunt, in order:
      watch        is memory really growing? (after collections)
      proc-count   which processes hold it (memory, binary_memory, ...)
      bin-leak     would a collection free it?
      leak-hunt    what was made between snapshots and kept?
      proc-info    one process, closer; trace-gc its collections
      inspect      inside it: which part of its state, or of a table,
                   holds the bytes (pinned binaries named)
      calls        who fills it: the callers of a function (ets:insert/2,
                   list_to_atom/1); senders: who fills a mailbox
      alloc        leak, or fragmentation? ets: the largest tables
      top          the processes, live, a key to rank or open one
      check        the same figures for cron, Nagios, Prometheus
      crashdump    a dead node's erl_crash.dump: why it died, what held
                   its memory (give the dump where a node goes too)

    \b
    Examples:
      beam-probe ping app@db1
      beam-probe memory app@db1 --cookie-file ~/.erlang.cookie
      RELEASE_NODE=app@db1 RELEASE_COOKIE=... beam-probe memory --format json
      beam-probe help proc-count
      beam-probe help topics        (cookies, costs, exit-codes, ...)
    """
    if ctx.invoked_subcommand is None:
        # No command: the overview, as --help gives it, and success.
        click.echo(ctx.get_help(), file=current().stdout)


@main.command()
@click.option("--keep", is_flag=True,
              help="Leave the demo node running afterwards, and print how "
                   "to reach it and how to stop it.")
def demo(keep: bool) -> None:
    """A guided tour: a local node that leaks binaries, and the leak hunt.

    Nine steps, each a real command on the demo node and a few words on
    what its output shows: watch, proc-count, bin-leak, proc-info,
    trace-gc, leak-hunt, alloc, inspect, which names the cause (pinned
    binaries) and its fix, and calls, which names the code that fills the
    cache. Needs only Erlang (erl, erlc) on this
    machine. The node gets a unique name and a private cookie, and is
    stopped by its pid at the end (unless --keep).
    """
    from beam_probe.demo import run_demo

    run_demo(lambda text: click.echo(text, file=current().stdout), keep)


@main.command("help")
@click.argument("command", required=False)
@click.pass_context
def help_command(ctx: click.Context, command: str | None) -> None:
    """Show the help of COMMAND, a topic's page, or the overview.

    A topic is a page of the manual that comes with beam-probe (cookies,
    costs, exit-codes, ...); `beam-probe help topics` lists them.

    \b
    Examples:
      beam-probe help
      beam-probe help trace-gc
      beam-probe help cookies
      beam-probe help topics
    """
    group = ctx.parent.command if ctx.parent else main
    if command is None:
        click.echo(ctx.parent.get_help() if ctx.parent else "",
                   file=current().stdout)
        return
    found = group.get_command(ctx, command) if isinstance(
        group, click.Group) else None
    if found is None:
        _topic(command)
        return
    with click.Context(found, info_name=command,
                       parent=ctx.parent) as sub:
        click.echo(found.get_help(sub), file=current().stdout)


def _topic(name: str) -> None:
    """Print the topic page ``name``, or the list of topics for
    ``topics``; anything else is a usage error naming both lists."""
    from beam_probe.cli import topics
    from beam_probe.cli.tty import write_out

    if name == "topics":
        found = topics.names()
        width = max((len(topic) for topic in found), default=0)
        write_out("\n".join(f"{topic:<{width}}  {topics.title(topic)}"
                            for topic in found))
        return
    text = topics.read(name)
    if text is None:
        from beam_probe.errors import UsageError

        raise UsageError(f"no command {name!r}, nor a topic; `beam-probe "
                         "help` lists the commands, `beam-probe help "
                         "topics` the topics")
    write_out(text.rstrip("\n"))


@functools.cache
def _declared() -> dict[str, Callable[[], click.Command]]:
    """Each declared command's name and how to make its click command."""
    from beam_probe.cli import commands

    makers: dict[str, Callable[[], click.Command]] = {
        declared.name: declared.click_command
        for declared in commands.DECLARED}
    makers["check"] = _check_command
    makers["serve"] = _serve_command
    return makers


def _check_command() -> click.Command:
    from beam_probe.cli import check  # its thresholds and history: its own

    return check.click_command()


def _serve_command() -> click.Command:
    # prometheus_client is imported by serve alone, when it runs.
    from beam_probe.cli import serve

    return serve.click_command()


def _terminate(signum: int, frame: Any) -> None:
    raise Terminated()


def invoke(argv: list[str], environment: Environment | None = None) -> int:
    """Run the command line with ``argv``; its exit code. In-process: the
    interpreter goes on afterwards. ``environment``: the streams,
    variables, terminals and clock the run meets (the process's own by
    default; tests hand in their own)."""
    with using(environment) as env, _click_output(env):
        try:
            main(argv, prog_name="beam-probe")
            return 0
        except SystemExit as exc:  # click ends every run this way
            return exc.code if isinstance(exc.code, int) else (
                0 if exc.code is None else 1)


@contextmanager
def _click_output(env: Environment) -> Iterator[None]:
    """What click writes itself (--help, --version) to the run's streams
    too, when they are not the process's."""
    if not env.injected_streams:
        yield
        return
    with redirect_stdout(env.stdout), redirect_stderr(env.stderr):
        yield


def run() -> None:
    """Entry point of the ``beam-probe`` script."""
    import signal

    # SIGTERM (kill, systemd, a scheduler's timeout) ends a run as Ctrl-C
    # does: one line, a documented code, connections closed on the way out.
    signal.signal(signal.SIGTERM, _terminate)
    code = invoke(sys.argv[1:])
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


__all__ = ["invoke", "main", "more_line", "run"]
