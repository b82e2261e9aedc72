"""One declaration per command: its usage, its defaults, the probe it calls
and the renderer that draws the answer (see declare.py). The probes are
imported inside each function: start-up is most of a one-query run."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import click

from .. import render
from ..errors import UsageError
from .declare import DECLARED, Rows, command
from .tty import Progress

SCAN_TIMEOUT = 300.0


@command("ping", "[NODE]", render=render.ping_text)
def ping(remote: Any, request: SimpleNamespace, progress: Progress) -> Any:
    """Check that NODE answers: its OTP release, ERTS version, round trip.

    \b
    Examples:
      beam-probe ping app@db1
      beam-probe ping --node app --format json
    """
    from ..probes import basic

    return basic.ping(remote)


@command("memory", "[NODE]", render=render.memory_text)
def memory(remote: Any, request: SimpleNamespace, progress: Progress) -> Any:
    """Show erlang:memory() of NODE: bytes per kind, with human units.

    \b
    Examples:
      beam-probe memory app@db1
      beam-probe memory app@db1 --format json
    """
    from ..probes import basic

    return basic.memory(remote)


@command("bin-leak", "[NODE] N", timeout=SCAN_TIMEOUT, jobs=True,
         render=render.bin_leak_text, example="app@db1 5", options=(
             click.option("--max-gc", type=click.IntRange(min=0),
                          metavar="COUNT",
                          help="Collect at most COUNT processes (largest "
                               "binary holders first)."),
             click.option("--dry-run", is_flag=True,
                          help="Count binary holders only: say how many "
                               "processes would be collected, and collect "
                               "none.")))
def bin_leak(remote: Any, request: SimpleNamespace,
             progress: Progress) -> Any:
    """The N processes that free most refc binaries when collected.

    Like recon:bin_leak(N): counts each process's refc binary references,
    garbage-collects the processes that hold any, counts again, and shows
    the N whose count fell most (-5580: 5580 fewer references). A sharp
    drop in total and binary memory means idle refc binaries were held.

    Cost: one process_info pass over every process, and a GC of each
    binary holder. Run with --dry-run first to see how many processes
    that is, or proc-count binary_memory if a GC is too much. N is at most
    10000.

    \b
    Examples:
      beam-probe bin-leak app@db1 5
      beam-probe bin-leak app@db1 5 --dry-run
      beam-probe bin-leak app@db1 10 --max-gc 1000 --jobs 2 --format json
    """
    from ..probes import processes

    return processes.bin_leak(remote, request.n, request.max_gc, progress,
                              request.jobs, request.dry_run)


def _n_or_all(request: SimpleNamespace) -> None:
    if (request.n is None) != request.every:
        raise UsageError("expected [NODE] ATTRIBUTE N, or [NODE] ATTRIBUTE "
                         "--all, e.g. beam-probe proc-count app@db1 "
                         "binary_memory 3")


@command("proc-count", "[NODE] ATTRIBUTE [N]", timeout=SCAN_TIMEOUT,
         jobs=True, render=render.proc_count_text, check=_n_or_all,
         example="app@db1 binary_memory 3",
         metavar="[NODE] ATTRIBUTE (N | --all)", options=(
             click.option("--all", "every", is_flag=True,
                          help="Every process, largest first, streamed in "
                               "chunks (N is at most 10000 otherwise)."),))
def proc_count(remote: Any, request: SimpleNamespace,
               progress: Progress) -> Any:
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
    from ..probes import processes

    if not request.every:
        return processes.proc_count(remote, request.attribute, request.n,
                                    progress, request.jobs)
    attribute = request.attribute
    return Rows(
        head={"node": remote.node, "attribute": attribute},
        key="processes",
        chunks=processes.proc_count_all(remote, attribute, progress,
                                        request.jobs),
        title=f"{remote.node}: every process by {attribute}, largest first",
        table=lambda chunk: render.process_rows(chunk, "value"),
        headers=("pid", attribute, "name", "current function",
                 "initial call"),
        align="lrlll",
        footer=lambda s: f"{s['sent']} of {s['scanned']} processes")


@command("proc-window", "[NODE] ATTRIBUTE N MILLISECONDS",
         timeout=SCAN_TIMEOUT, jobs=True, render=render.proc_window_text,
         example="app@db1 reductions 5 1000")
def proc_window(remote: Any, request: SimpleNamespace,
                progress: Progress) -> Any:
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
    from ..probes import processes

    return processes.proc_window(remote, request.attribute, request.n,
                                 request.millis, progress, request.jobs)


@command("proc-info", "[NODE] PID", render=render.proc_info_text,
         example="app@db1 '<0.123.0>'")
def proc_info(remote: Any, request: SimpleNamespace,
              progress: Progress) -> Any:
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
    from ..probes import info

    return info.proc_info(remote, request.pid)


__all__ = ["DECLARED", "bin_leak", "memory", "ping", "proc_count", "proc_info",
           "proc_window"]
