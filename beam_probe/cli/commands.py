"""One declaration per command: its usage, its defaults, the probe it calls
and the renderer that draws the answer (see declare.py). The probes are
imported inside each function: start-up is most of a one-query run."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, Mapping

import click

from beam_probe.errors import UsageError
from beam_probe.cli.declare import DECLARED, Rows, command
from beam_probe.cli.options import Seconds
from beam_probe.cli.tty import Progress, error_line

SCAN_TIMEOUT = 300.0


@command("ping", "[NODE]", render="node.ping_text")
def ping(remote: Any, request: SimpleNamespace, progress: Progress) -> Any:
    """Check that NODE answers: its OTP release, ERTS version, round trip.

    \b
    Examples:
      beam-probe ping app@db1
      beam-probe ping --node app --format json
    """
    from beam_probe.probes import basic

    return basic.ping(remote)


def _memory_dump(dump: Any, request: SimpleNamespace) -> Any:
    from beam_probe.crashdump import answers

    return answers.memory(dump)


@command("memory", "[NODE]", render="node.memory_text", dump=_memory_dump)
def memory(remote: Any, request: SimpleNamespace, progress: Progress) -> Any:
    """Show erlang:memory() of NODE: bytes per kind, with human units.

    \b
    Examples:
      beam-probe memory app@db1
      beam-probe memory app@db1 --format json
      beam-probe memory ./erl_crash.dump
    """
    from beam_probe.probes import basic

    return basic.memory(remote)


def _scan_check(request: SimpleNamespace) -> None:
    from beam_probe.probes.processes import check_request

    check_request(getattr(request, "attribute", None), request.n,
                  getattr(request, "millis", None), request.jobs)


def _bin_leak_check(request: SimpleNamespace) -> None:
    if request.cluster and request.dry_run:
        raise UsageError("--dry-run asks one node: leave out --cluster")
    _scan_check(request)


@command("bin-leak", "[NODE] N", timeout=SCAN_TIMEOUT, jobs=True,
         render="node.bin_leak_text", cluster="cluster.bin_leak_text",
         check=_bin_leak_check, example="app@db1 5", options=(
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
      beam-probe bin-leak app@db1 10 --cluster
    """
    from beam_probe.probes import processes

    if request.cluster:
        return processes.bin_leak_cluster(
            remote, request.n, request.max_gc, request.cluster_nodes,
            request.include_hidden, progress, request.jobs)
    return processes.bin_leak(remote, request.n, request.max_gc, progress,
                              request.jobs, request.dry_run)


def _n_or_all(request: SimpleNamespace) -> None:
    if (request.n is None) != request.every:
        raise UsageError("expected [NODE] ATTRIBUTE N, or [NODE] ATTRIBUTE "
                         "--all, e.g. beam-probe proc-count app@db1 "
                         "binary_memory 3")
    if request.every and request.cluster:
        raise UsageError("--all streams one node's processes: leave out "
                         "--cluster, or give N")
    _scan_check(request)


def _proc_count_dump(dump: Any, request: SimpleNamespace) -> Any:
    from beam_probe.crashdump import answers

    if request.every:
        raise UsageError("--all streams a live node's processes: give N "
                         "for a crash dump")
    return answers.proc_count(dump, request.attribute, request.n)


@command("proc-count", "[NODE] ATTRIBUTE [N]", timeout=SCAN_TIMEOUT,
         jobs=True, render="node.proc_count_text", dump=_proc_count_dump,
         cluster="cluster.proc_count_text", check=_n_or_all,
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
      beam-probe proc-count app@db1 binary_memory 10 --cluster
      beam-probe proc-count ./erl_crash.dump memory 10
    """
    from beam_probe.probes import processes

    if request.cluster:
        return processes.proc_count_cluster(
            remote, request.attribute, request.n, request.cluster_nodes,
            request.include_hidden, progress, request.jobs)
    if not request.every:
        return processes.proc_count(remote, request.attribute, request.n,
                                    progress, request.jobs)
    attribute = request.attribute
    return Rows(head={"node": remote.node, "attribute": attribute},
                key="processes",
                chunks=processes.proc_count_all(remote, attribute, progress,
                                                request.jobs),
                text="node.EveryProcess")


@command("proc-window", "[NODE] ATTRIBUTE N MILLISECONDS",
         timeout=SCAN_TIMEOUT, jobs=True, render="node.proc_window_text",
         cluster="cluster.proc_window_text", check=_scan_check,
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
      beam-probe proc-window app@db1 reductions 5 1000 --nodes a@h1,b@h2
    """
    from beam_probe.probes import processes

    if request.cluster:
        return processes.proc_window_cluster(
            remote, request.attribute, request.n, request.millis,
            request.cluster_nodes, request.include_hidden, progress,
            request.jobs)
    return processes.proc_window(remote, request.attribute, request.n,
                                 request.millis, progress, request.jobs)


def _pid_check(request: SimpleNamespace) -> None:
    from beam_probe.probes.info import target

    target(request.pid)


def _proc_info_dump(dump: Any, request: SimpleNamespace) -> Any:
    from beam_probe.crashdump import answers

    return answers.proc_info(dump, request.pid)


@command("proc-info", "[NODE] PID", render="node.proc_info_text",
         check=_pid_check, dump=_proc_info_dump,
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
      beam-probe proc-info ./erl_crash.dump '<0.4612.0>'
    """
    from beam_probe.probes import info

    return info.proc_info(remote, request.pid)


def _inspect_check(request: SimpleNamespace) -> None:
    from beam_probe.probes.info import target
    from beam_probe.probes.inspect import check_bounds, table_spec

    if request.table is not None and request.process is not None:
        raise UsageError("give a PROCESS or --table TABLE, not both")
    if request.table is None and request.process is None:
        raise UsageError("expected [NODE] PROCESS or [NODE] --table TABLE, "
                         "e.g. beam-probe inspect app@db1 my_cache")
    check_bounds(request.depth, request.width, request.budget,
                 request.table is not None)
    if request.table is not None:
        table_spec(request.table)
    else:
        target(request.process)


def _inspect_dump(dump: Any, request: SimpleNamespace) -> Any:
    from beam_probe.crashdump.inspect import inspect as inspect_dump

    if request.table is not None:
        raise UsageError("a crash dump keeps no table's objects, only each "
                         "table's size: see beam-probe ets FILE")
    return inspect_dump(dump, request.process, request.depth, request.width)


@command("inspect", "[NODE] [PROCESS]", render="inspect.inspect_text",
         check=_inspect_check, alone="table", dump=_inspect_dump,
         example="app@db1 my_cache", options=(
             click.option("--table", metavar="TABLE",
                          help="Inspect this ETS table (its name, or its "
                               "id as ets prints it) instead of a "
                               "process."),
             click.option("--depth", type=int, default=3, show_default=True,
                          help="Levels of the size tree shown (0 to 10)."),
             click.option("--width", type=int, default=10, show_default=True,
                          help="Largest children shown per part, or "
                               "largest objects of a table (1 to 100)."),
             click.option("--budget", type=int, metavar="TERMS",
                          help="Work the walk may do: terms inside the "
                               "process (default 1,000, which pauses it "
                               "for tens of milliseconds; 1 to "
                               "1,000,000), objects of a table (default "
                               "20,000; 1 to 10,000,000). Past it, the "
                               "answer is a sample and says so.")))
def inspect(remote: Any, request: SimpleNamespace,
            progress: Progress) -> Any:
    """What in a process, or in a table, holds the memory.

    The step after proc-count, bin-leak and leak-hunt: a size tree of
    what PROCESS holds, largest first: its state (gen_server, gen_statem
    as State and Data, gen_event handlers, supervisors, Elixir GenServer
    and Agent), its dictionary (get()), its mailbox when short. Each part
    with its path in the node's syntax, kind, element count, bytes (its
    flat copy's words), binary (the refc binary bytes it keeps alive) and
    share; then pinned binaries: small slices that keep a large binary
    alive, the classic BEAM binary leak, with the fix.

    Values are never shown, only shapes, sizes and short keys. The state
    is measured inside the process (a replace_state system request whose
    fun measures and throws: the state stays as it was and is never
    copied out), so only processes that read system messages are asked;
    for any other, the dictionary and mailbox are read from outside and
    the reason is given. Large parts are sampled within --budget.

    With --table: the table's objects grouped by key family (a tuple
    key's first element, a record's tag, else the key's type), with
    their bytes, refc binaries and pinned slices, and its largest
    objects; read in chunks, the table usable throughout, sampled past
    --budget objects.

    PROCESS is a pid (<0.123.0>, #PID<0.123.0>, 0.123.0) or a registered
    name in Erlang's or Elixir's syntax (my_cache, MyApp.Cache).

    \b
    Examples:
      beam-probe inspect app@db1 my_cache
      beam-probe inspect app@db1 '<0.4612.0>' --depth 4 --width 5
      beam-probe inspect app@db1 MyApp.Cache --format json
      beam-probe inspect app@db1 --table sessions
      beam-probe inspect ./erl_crash.dump '<0.4612.0>'
    """
    from beam_probe.probes import inspect as probe

    if request.table is not None:
        return probe.table(remote, request.table, request.width,
                           request.budget)
    return probe.process(remote, request.process, request.depth,
                         request.width, request.budget)


@command("crashdump", "FILE", kind="offline", render="crashdump.overview_text",
         example="./erl_crash.dump")
def crashdump(remote: Any, request: SimpleNamespace,
              progress: Progress) -> Any:
    """A dead node's crash dump: why it died and what held its memory.

    The overview a person reads first: the slogan in words (which
    allocator failed and for how much, or why the node halted), when, the
    OTP release; whether the dump is whole or cut short; memory by kind;
    the processes that held most memory and the longest mailboxes; the
    process running or collecting as it died; the largest ETS tables;
    allocators; counts against limits; then the commands to look closer.
    Those take the dump where they take a node: memory, proc-count, ets,
    alloc, proc-info, inspect, and diff (a dump as the last of three).

    Reads the file through a memory map with one pass over it (no heap is
    read here): a dump of any size in a bounded memory. Format 0.5 (OTP
    20.3 to 28).

    \b
    Examples:
      beam-probe crashdump ./erl_crash.dump
      beam-probe crashdump /var/log/app/erl_crash.dump --format json
    """
    from beam_probe.crashdump.overview import overview
    from beam_probe.crashdump.reader import Dump

    progress(f"reading {request.file}")
    with Dump(request.file) as dump:
        return overview(dump)


@command("watch", "[NODE]", kind="live", jobs=True, render="watch.frame",
         summary="watch.summary_text", line="watch.sample_line",
         cluster="watch.cluster_frame", options=(
             click.option("--interval", type=Seconds(0.2), default=5.0,
                          show_default=True, metavar="SECONDS",
                          help="Time between samples (at least 0.2)."),
             click.option("--count", type=click.IntRange(min=1),
                          metavar="N", help="Stop after N samples."),
             click.option("--duration", type=Seconds(0.0), metavar="SECONDS",
                          help="Stop after this long."),
             click.option("--gc", type=click.Choice(("none", "holders",
                                                     "all")),
                          default="none", show_default=True,
                          help="Collect before each sample: none (follow "
                               "each category's floor instead), holders "
                               "(processes holding refc binaries), all "
                               "(every process: costly)."),
             click.option("--max-gc", type=click.IntRange(min=0),
                          metavar="COUNT",
                          help="With --gc holders: collect at most COUNT "
                               "processes (largest holders first)."),
             click.option("--leak-after", "rises", type=click.IntRange(1,
                                                                        1000),
                          default=5, show_default=True, metavar="N",
                          help="Suspect a leak after N consecutive rises."),
             click.option("--floor", type=click.IntRange(1, 10000),
                          default=12, show_default=True, metavar="SAMPLES",
                          help="Without --gc: the floor of a category is "
                               "its minimum over this many samples."),
             click.option("--fail-on-leak", is_flag=True,
                          help="Exit 12 if a leak was suspected (either "
                               "rule), 13 if the run ended before the rises "
                               "could judge."),
             click.option("--output", "-o", metavar="FILE",
                          help="Also append each sample to FILE as a JSON "
                               "line (plot reads it)."),
             click.option("--metric", type=click.Choice(
                 ("total", "processes", "binary", "ets")), default="total",
                 show_default=True,
                 help="With --cluster: the category the view charts, a "
                      "line a node.")))
def watch(connect: Any, request: SimpleNamespace, progress: Progress) -> Any:
    """Is it really a leak? Sample memory over time; apply memwatch's rule.

    Every --interval: erlang:memory(), garbage collections per second,
    process/port/ETS/atom counts, allocator use and the node's RSS, in one
    round trip that reads counters only (no pass over the processes
    unless --gc asks for collections). A category that rose over
    --leak-after consecutive samples, after collections or, without them,
    through its floor (its minimum over the last --floor samples, which a
    sawtooth leaves flat), is reported: "leak suspected: binary +48.2 MiB
    over 5 rises (25 s)", with its rate per hour over a minute or more.
    Beside it, a trend over the last 120 samples (Mann-Kendall, with its
    Theil-Sen slope; without --gc, the floors and the raw values alike)
    names growth in steps that never rises five times in a row: "leak
    suspected: process count +25 over 60 samples (1 m 58 s) (trend:
    +771/h, Mann-Kendall z 10.7)".

    On a terminal the view redraws in place with a chart; piped, or with
    --format json, one JSON line per sample (the field names of check
    --history), then a summary line; piped with --format table, a line of
    text per sample. Until the rule can judge (--leak-after + 1 samples
    after collections, --floor + --leak-after without), the view and the
    summary say so. Ctrl-C ends the watch with a summary (exit 0). If the
    node goes away, watch says so and reconnects when it is back.

    With --cluster, every node connected to NODE is sampled each interval
    through NODE (one connection): a sample per node (JSON lines carry
    "node"), the rule per node, a line per node in the view and the chart
    of --metric a series per node. A node that does not answer within four
    fifths of the interval is down for that sample; the others go on.

    \b
    Examples:
      beam-probe watch app@db1
      beam-probe watch app@db1 --interval 30 --gc holders -o app.jsonl
      beam-probe watch app@db1 --interval 1 --count 60 --fail-on-leak
      beam-probe watch app@db1 --cluster --gc holders --metric binary
    """
    from beam_probe.cli.environment import current
    from beam_probe.probes.watch import ClusterWatch, Watch

    if request.gc == "all":
        error_line("beam-probe: --gc all collects every process before "
                   "each sample: about 0.1-0.3 s of the node's schedulers "
                   "per 100,000 processes (measured, 2 cores)")
    if request.cluster:
        return ClusterWatch(
            connect, nodes=request.cluster_nodes,
            include_hidden=request.include_hidden, metric=request.metric,
            interval=request.interval, count=request.count,
            duration=request.duration, gc=request.gc, max_gc=request.max_gc,
            jobs=request.jobs, rises=request.rises, floor=request.floor,
            fail_on_leak=request.fail_on_leak, clock=current().clock,
            sleep=current().sleep)
    return Watch(connect, interval=request.interval, count=request.count,
                 duration=request.duration, gc=request.gc,
                 max_gc=request.max_gc, jobs=request.jobs,
                 rises=request.rises, floor=request.floor,
                 fail_on_leak=request.fail_on_leak,
                 clock=current().clock, sleep=current().sleep)


def _plot_check(request: SimpleNamespace) -> None:
    from beam_probe.history import series
    from beam_probe.text.plot import check_output

    request.metric = series.metrics(request.metric)
    request.since = None if request.since is None else series.parse_time(
        request.since, "--since")
    request.until = None if request.until is None else series.parse_time(
        request.until, "--until")
    check_output(request.output)


def _plot_text(data: dict[Any, Any], syntax: Any) -> str:
    import shutil

    from beam_probe.cli.environment import current
    from beam_probe.text.plot import plot_text

    environment = current()
    width, height = environment.terminal_size or \
        shutil.get_terminal_size((100, 24))
    return plot_text(data, syntax, width, height,
                     environment.colour_wanted())


@command("plot", "FILE...", kind="offline", render=_plot_text,
         check=_plot_check, example="app.jsonl", options=(
             click.option("--metric", default="total,processes,binary,ets",
                          show_default=True, metavar="NAMES",
                          help="Comma-separated fields to draw (total, "
                               "processes, binary, ets, atom, code, system, "
                               "process_count, port_count, atom_count, rss, "
                               "alloc_used, ...)."),
             click.option("--node", metavar="NODE",
                          help="The node to draw, when the files hold "
                               "several (watch --cluster, a cluster's check "
                               "history); all: the first --metric of "
                               "every node, a line each."),
             click.option("--since", metavar="TIME",
                          help="Only samples from TIME (ISO 8601, local "
                               "unless it says Z or +hh:mm; or epoch)."),
             click.option("--until", metavar="TIME",
                          help="Only samples up to TIME."),
             click.option("--output", "-o", metavar="FILE",
                          help="Write a PNG or SVG chart (needs pip "
                               "install 'beam-probe[plot]').")))
def plot(remote: Any, request: SimpleNamespace, progress: Progress) -> Any:
    """Chart watch files and check histories over time.

    In the terminal by default, with beam-probe's own line chart; with
    --output chart.png (or .svg) through matplotlib, one line per metric,
    the floor of a watch without --gc dashed, samples where a leak was
    suspected shaded. Lines that are not samples are skipped and counted.

    \b
    Examples:
      beam-probe plot app.jsonl
      beam-probe plot /var/lib/beam-probe/app.jsonl --metric binary,ets
      beam-probe plot history.jsonl --node app@db2 --since 2026-11-20
      beam-probe plot cluster.jsonl --node all --metric binary
      beam-probe plot app.jsonl -o app.png
    """
    from beam_probe.history import series

    data = series.load(request.files, request.metric, request.node,
                       request.since, request.until, progress)
    if request.output is not None:
        from beam_probe.text.plot import write_image

        progress(f"drawing {request.output}")
        write_image(data, request.output)
        data["output"] = request.output
    return data


GC_OPTION = click.option(
    "--gc", type=click.Choice(("none", "holders", "all")), default="holders",
    show_default=True,
    help="Collect before each snapshot: holders (processes holding refc "
         "binaries), all (every process: costly), none.")
MAX_GC_OPTION = click.option(
    "--max-gc", type=click.IntRange(min=0), metavar="COUNT",
    help="With --gc holders: collect at most COUNT processes.")


def _snapshot_check(request: SimpleNamespace) -> None:
    # Where the file (or folder) goes is checked before connecting: a scan
    # of a million processes is not taken to be thrown away.
    from beam_probe.snapshots.cluster import FOLDER_HINT
    from beam_probe.snapshots.format import check_place

    check_place(request.output, request.cluster, FOLDER_HINT)


def _leak_hunt_check(request: SimpleNamespace) -> None:
    from beam_probe.snapshots.format import check_place

    if request.save is not None:
        check_place(request.save, True, ": --save names a folder")


@command("snapshot", "[NODE]", timeout=SCAN_TIMEOUT, jobs=True,
         render="diff.snapshot_text", cluster="diff.cluster_snapshot_text",
         check=_snapshot_check,
         example="app@db1 -o a.snapshot", options=(
             click.option("--output", "-o", metavar="FILE", required=True,
                          help="The file to write (replaced if it "
                               "exists; made 0600); with --cluster, a "
                               "folder for a file per node (made 0700 if "
                               "missing)."),
             GC_OPTION, MAX_GC_OPTION))
def snapshot(remote: Any, request: SimpleNamespace,
             progress: Progress) -> Any:
    """The whole node at one moment, to a file, for diff.

    After the collection --gc asks for: erlang:memory(), allocator and
    count figures, every process (pid, group, registered name, memory,
    refc binary count and bytes, message queue length, heap, current
    function, initial call), every ETS table and port, and the newest
    atoms. A process's group is what made it: its label (OTP 27+), else
    proc_lib's '$initial_call' (read as that one key, OTP 26.2+), else its
    registered name, else its initial call, else its parent's name. The
    mailbox and the dictionary are never read. The pass runs in slices as
    proc-count's does; the file is compressed (a few MB for a million
    processes).

    \b
    Examples:
      beam-probe snapshot app@db1 -o a.snapshot
      beam-probe snapshot app@db1 -o b.snapshot --gc none
      beam-probe snapshot app@db1 --cluster -o before/
    """
    from beam_probe.snapshots import take as snapshots

    if request.cluster:
        from beam_probe.snapshots.cluster import snapshot_cluster

        return snapshot_cluster(remote, request.output,
                                request.cluster_nodes,
                                request.include_hidden, request.gc,
                                request.jobs, request.max_gc, progress)

    return snapshots.snapshot(remote, request.output, request.gc,
                              request.jobs, request.max_gc, progress)


@command("diff", "FILE...", kind="offline", render="diff.diff_text",
         example="a.snapshot b.snapshot c.snapshot", options=(
             click.option("--force", is_flag=True,
                          help="Compare snapshots of different nodes, or "
                               "of two runs of one node."),))
def diff(remote: Any, request: SimpleNamespace, progress: Progress) -> Any:
    """Compare two or three snapshots: what grew, by what made it.

    Two: memwatch's HeapDiff. Memory before, after and the change; per
    group (what made the processes), + born, - died, and the change in
    memory and refc binary bytes, largest growth first; ETS tables new or
    grown; atoms added (with their names when the node let them be read);
    ports. Three: the three-snapshot rule first: what was born between
    the first and the second and is still alive at the third, grouped;
    long-lived processes that grew in both intervals; groups whose count
    rose twice; ETS tables born and kept or growing twice; atoms added in
    both intervals. The files are given oldest first.

    Folders of snapshot --cluster (a file per node) are compared node by
    node, and across the nodes: groups on every node (the application's
    leak) apart from groups on one node (that node's own state).

    A crash dump may be the last file: what was born between the first
    two snapshots and was still alive when the node died.

    \b
    Examples:
      beam-probe diff a.snapshot b.snapshot
      beam-probe diff a.snapshot b.snapshot c.snapshot --format json
      beam-probe diff before/ after/
      beam-probe diff a.snapshot b.snapshot ./erl_crash.dump
    """
    import os

    from beam_probe.snapshots.compare import diff_files

    folders = [os.path.isdir(path) for path in request.files]
    if any(folders):
        if not all(folders):
            raise UsageError("give snapshot files, or folders of snapshot "
                             "--cluster, not both")
        from beam_probe.snapshots.cluster import diff_folders

        return diff_folders(request.files, request.force, progress)
    from beam_probe.crashdump.snapshot import snapshot_or_dump

    return diff_files(request.files, request.force, progress,
                      snapshot_or_dump)


@command("leak-hunt", "[NODE]", timeout=SCAN_TIMEOUT, jobs=True,
         render="diff.leak_hunt_text", cluster="diff.cluster_leak_hunt_text",
         check=_leak_hunt_check,
         example="app@db1 --interval 60", options=(
             click.option("--interval", type=Seconds(0.0), required=True,
                          metavar="SECONDS",
                          help="Time between snapshots."),
             click.option("--snapshots", type=click.IntRange(2, 100),
                          default=3, show_default=True, metavar="N",
                          help="How many snapshots to take."),
             GC_OPTION, MAX_GC_OPTION,
             click.option("--save", metavar="DIR",
                          help="Keep the snapshot files in DIR (made "
                               "0700 if missing; files 0600).")))
def leak_hunt(remote: Any, request: SimpleNamespace,
              progress: Progress) -> Any:
    """The three-snapshot method in one command.

    Takes --snapshots snapshots (3) --interval seconds apart, each after
    the collection --gc asks for (holders), then prints the diff of the
    first, the second and the last: the suspects first, each with the
    command to look closer. The snapshots are kept in --save DIR, else a
    new folder of the temporary directory ($TMPDIR, else /tmp), named on
    stderr as the hunt starts and again as it ends. They stay until you
    delete them: beam-probe never removes them, though the system may
    clear its temporary directory (at boot, or files unused for days,
    as systemd-tmpfiles does). Ctrl-C, or a node that goes mid-way,
    still diffs what was taken when there are two or more.

    \b
    Examples:
      beam-probe leak-hunt app@db1 --interval 60
      beam-probe leak-hunt app@db1 --interval 300 --save /tmp/hunt
      beam-probe leak-hunt app@db1 --interval 60 --cluster
    """
    from beam_probe.errors import EndedEarly
    from beam_probe.snapshots import take as snapshots

    if request.cluster:
        return _cluster_hunt(remote, request, progress)
    try:
        result = snapshots.leak_hunt(remote, request.snapshots,
                                     request.interval, request.gc,
                                     request.save, request.jobs,
                                     request.max_gc, progress,
                                     kept_in=_name_place)
    except EndedEarly as ended:
        _name_kept(ended.result)
        if ended.result["diff"] is None:
            raise ended.error from None
        raise
    _name_kept(result)
    return result


def _cluster_hunt(remote: Any, request: SimpleNamespace,
                  progress: Progress) -> Any:
    from beam_probe.errors import EndedEarly
    from beam_probe.snapshots.cluster import leak_hunt_cluster

    def kept(result: Mapping[str, Any]) -> None:
        _name_kept({"saved": result["saved"], "taken": sum(
            len(row["files"]) for row in result["nodes"])})

    try:
        result = leak_hunt_cluster(
            remote, request.snapshots, request.interval, request.gc,
            request.save, request.jobs, request.max_gc,
            request.cluster_nodes, request.include_hidden, progress,
            kept_in=_name_place)
    except EndedEarly as ended:
        kept(ended.result)
        if not any(row.get("diff") for row in ended.result["nodes"]):
            raise ended.error from None
        raise
    kept(result)
    return result


def _name_place(folder: str, temporary: bool) -> None:
    """Where the snapshots go and for how long, on stderr before the first
    (issue 38: a hunt of hours must not leave the operator guessing)."""
    from beam_probe.cli.tty import note_line

    note_line(f"beam-probe: snapshots go to {folder} and stay until you "
              "delete them"
              + (" (a temporary folder: the system may clear it)"
                 if temporary else ""))


def _name_kept(result: Mapping[str, Any]) -> None:
    """Where the snapshots are, on stderr: kept always, --save or not."""
    from beam_probe.cli.tty import note_line

    if result["saved"]:
        note_line(f"beam-probe: {result['taken']} snapshot"
                  f"{'s' if result['taken'] != 1 else ''} kept in "
                  f"{result['saved']}")


__all__ = ["DECLARED", "bin_leak", "diff", "inspect", "leak_hunt", "memory",
           "ping", "plot", "proc_count", "proc_info", "proc_window",
           "snapshot", "watch"]


def _alloc_check(request: SimpleNamespace) -> None:
    if request.cluster and request.raw:
        raise UsageError("--raw writes one node's data: leave out --cluster")


def _alloc_dump(dump: Any, request: SimpleNamespace) -> Any:
    from beam_probe.crashdump import answers

    if request.raw:
        raise UsageError("--raw reads a live node's allocators")
    return answers.alloc(dump)


def _top_check(request: SimpleNamespace) -> None:
    from beam_probe.probes.top import check_request

    check_request(request.sort, request.rows, request.filter or "",
                  request.interval, request.jobs)


@command("top", "[NODE]", kind="screen", jobs=True, render="top.frame_text",
         cluster="top.frame_text", check=_top_check, options=(
             click.option("--interval", type=Seconds(0.5), default=2.0,
                          show_default=True, metavar="SECONDS",
                          help="Time between refreshes (at least 0.5); "
                               "stretched while a pass takes over a "
                               "quarter of it."),
             click.option("--sort", type=click.Choice(
                 ("memory", "reductions", "binary_memory",
                  "message_queue_len")), default="memory",
                 show_default=True, help="The column ranked at the start "
                                         "(keys m, r, b, l change it)."),
             click.option("--filter", metavar="TEXT",
                          help="Only processes whose name (registered, "
                               "label, initial call) holds TEXT; case "
                               "matters."),
             click.option("--rows", "-N", type=int, default=40,
                          show_default=True, metavar="N",
                          help="Rows of one frame (--once); the view "
                               "fits its height."),
             click.option("--once", is_flag=True,
                          help="One frame as text and exit, as top -b -n "
                               "1 (also when the output is not a "
                               "terminal).")))
def top(connect: Any, request: SimpleNamespace, progress: Progress) -> Any:
    """A live view of the node's processes, as top shows a machine's.

    The node's release, uptime, memory by kind, counts against their
    limits, run queue, reductions and GC per second; below, its processes
    by memory, binary memory, reductions in the last interval or mailbox:
    pid, name (or what started it), the four figures and the current
    function. Single keys: m r b l sort, Enter opens a process
    (proc-info and inspect), e the ETS tables, a the allocators, / a
    filter, p pause, ? help, q quit.

    Each refresh is one pass on the node, made by a process of ours that
    keeps the last pass's reductions there, so only the rows shown cross;
    it ends when top does (q, Ctrl-C, kill -9, a closed terminal). A pass
    that takes over a quarter of --interval (a million processes)
    stretches it, and the header says so. A node that goes away keeps
    its last rows, marked down, until it is back.

    Not on a terminal, or with --once: one frame, after two passes
    --interval apart (so reductions are an interval's), as text or
    --format json. --cluster: every node through NODE, with a NODE column
    and a picker (n).

    \b
    Examples:
      beam-probe top app@db1
      beam-probe top app@db1 --sort binary_memory --interval 5
      beam-probe top app@db1 --once -N 20 > top.txt
      beam-probe top app@db1 --cluster
    """
    from beam_probe.cli.environment import current
    from beam_probe.probes.top import TopFeed

    return TopFeed(connect, interval=request.interval, sort=request.sort,
                   n=request.rows, filter_text=request.filter or "",
                   jobs=request.jobs, cluster_view=request.cluster,
                   nodes=request.cluster_nodes,
                   include_hidden=request.include_hidden,
                   clock=current().clock)


@command("alloc", "[NODE]", render="node.alloc_text",
         cluster="cluster.alloc_text", check=_alloc_check, dump=_alloc_dump,
         options=(
    click.option("--raw", metavar="FILE",
                 help="Also write every allocator's full "
                      "system_info({allocator, Type}) to FILE, as the "
                      "node's compressed external term (erlang:"
                      "binary_to_term/1 reads it)."),))
def alloc(remote: Any, request: SimpleNamespace, progress: Progress) -> Any:
    """Leak or fragmentation? The node's memory allocators, from outside.

    Per allocator type (binary_alloc, eheap_alloc, ets_alloc, ...,
    literal_alloc included): bytes used in blocks against bytes allocated
    in carriers, usage, multiblock and singleblock carriers, average
    block sizes now and at their maximum; the mseg_alloc cache hit rate;
    erlang:memory() total against the allocators against the node's RSS.
    Then one verdict: in use (usage near 1: find the holder with
    proc-count memory, bin-leak, ets), fragmentation (a large allocator
    mostly empty: "binary_alloc: 1.2 GiB allocated, 310 MiB used (25%)"),
    or memory outside the allocators (RSS far above them: NIFs, drivers).

    Cost: one read of each allocator type, folded on the node; the reply
    is a few hundred bytes whatever the number of schedulers. No pass
    over the processes.

    \b
    Examples:
      beam-probe alloc app@db1
      beam-probe alloc app@db1 --format json
      beam-probe alloc app@db1 --raw app-alloc.etf
      beam-probe alloc app@db1 --cluster
      beam-probe alloc ./erl_crash.dump
    """
    from beam_probe.probes import alloc as allocators

    if request.cluster:
        return allocators.alloc_cluster(remote, request.cluster_nodes,
                                        request.include_hidden)
    return allocators.alloc(remote, request.raw)


def _ets_check(request: SimpleNamespace) -> None:
    from beam_probe.probes.ets import check_n

    if request.n is not None:
        check_n(request.n)


def _ets_dump(dump: Any, request: SimpleNamespace) -> Any:
    from beam_probe.crashdump import answers

    return answers.ets(dump, request.n or 10, request.sort)


@command("ets", "[NODE] [N]", render="node.ets_text", example="app@db1 10",
         cluster="cluster.ets_text", dump=_ets_dump,
         check=_ets_check,
         options=(click.option("--sort", type=click.Choice(("memory",
                                                              "size")),
                               default="memory", show_default=True,
                               help="Rank by memory (bytes) or size "
                                    "(objects)."),))
def ets(remote: Any, request: SimpleNamespace, progress: Progress) -> Any:
    """The N (default 10) largest ETS tables, with their owners.

    Per table: name, id, owner (pid, and its registered name or group:
    label, proc_lib's initial call, initial call), size in objects,
    memory in bytes, type and protection. Tables that vanish mid-scan are
    skipped. Cost: two ets:info/2 reads per table, in compiled code; only
    the N kept are described. N is at most 10000.

    \b
    Examples:
      beam-probe ets app@db1
      beam-probe ets app@db1 5 --sort size
      beam-probe ets app@db1 20 --format json
      beam-probe ets app@db1 10 --cluster
      beam-probe ets ./erl_crash.dump
    """
    from beam_probe.probes import ets as tables

    if request.cluster:
        return tables.largest_cluster(remote, request.n or 10, request.sort,
                                      request.cluster_nodes,
                                      request.include_hidden)
    return tables.largest(remote, request.n or 10, request.sort)


@command("trace-gc", "[NODE] [TARGET...]", kind="live", jobs=True,
         render="trace.line", summary="trace.summary_text",
         example="app@db1 '<0.123.0>'",
         metavar="[NODE] [TARGET...] [--top N ATTRIBUTE]", options=(
             click.option("--top", type=(click.IntRange(min=1), str),
                          metavar="N ATTRIBUTE",
                          help="Also trace the N largest processes by a "
                               "proc-count attribute (--top 5 memory)."),
             click.option("--duration", type=Seconds(0.1), default=10.0,
                          show_default=True, metavar="SECONDS",
                          help="Stop tracing after this long."),
             click.option("--max-events", type=click.IntRange(min=1),
                          default=1000, show_default=True, metavar="M",
                          help="Stop after M collections.")))
def trace_gc(connect: Any, request: SimpleNamespace,
             progress: Progress) -> Any:
    """Every garbage collection of the chosen processes, as it happens.

    The BEAM's `node --trace-gc`. TARGET is a pid or a registered name, in
    any form proc-info takes; --top N ATTRIBUTE adds the N largest
    processes by that attribute. One line per collection: time, pid,
    process, minor or major, heap before -> after, old heap, binary
    virtual heap, bytes freed, how long it took (sizes in bytes). Then a
    summary per process: collections, bytes freed, time spent, and
    memwatch's rule: the heap left after a collection rising over 5
    collections in a row. --format json: one JSON line per collection,
    then the summary.

    A tracer runs on the node (nothing loaded) and sends batches. On OTP
    27+ it traces in a session of its own, which never disturbs dbg,
    recon_trace, observer or another beam-probe; on OTP 25-26 it traces
    only processes nobody else traces and says which it skipped. It stops
    and removes its traces at --duration, at --max-events, or within a
    moment of beam-probe going (Ctrl-C, kill -9, a lost network).

    \b
    Examples:
      beam-probe trace-gc app@db1 '<0.4612.0>'
      beam-probe trace-gc app@db1 MyApp.Cache --duration 30
      beam-probe trace-gc app@db1 --top 5 memory --format json
    """
    from beam_probe.probes.trace_gc import TraceGc

    return TraceGc(connect, list(request.targets or ()), request.top,
                   request.duration, request.max_events, request.jobs,
                   progress)


def _tracing_options(by: tuple[str, ...], default: str) -> tuple[Any, ...]:
    """calls' and senders' shared options: the key, the limits (enforced
    on the node), the rows shown."""
    from beam_probe.probes.calls import (DEFAULT_DURATION, DEFAULT_MAX,
                                         DEFAULT_RATE, DEFAULT_TOP)

    return (
        click.option("--by", type=click.Choice(by), default=default,
                     show_default=True, help="What the calls are counted "
                     "by."),
        click.option("--duration", type=Seconds(0.1),
                     default=DEFAULT_DURATION, show_default=True,
                     metavar="SECONDS", help="Stop tracing after this long."),
        click.option("--max", "max_calls", type=click.IntRange(min=1),
                     default=DEFAULT_MAX, show_default=True, metavar="N",
                     help="Stop after N calls (messages) counted."),
        click.option("--rate", default=str(DEFAULT_RATE), show_default=True,
                     metavar="N/s", help="Stop, and say so (exit 14), when "
                     "more than N a second come: the trace stops itself on "
                     "the node."),
        click.option("--top", type=click.IntRange(1, 1000),
                     default=DEFAULT_TOP, show_default=True, metavar="N",
                     help="Rows shown (and named) each interval."))


@command("calls", "[NODE] FUNCTION", kind="live", render="calls.frame",
         line="calls.line", summary="calls.summary_text",
         example="app@db1 ets:insert/2",
         options=_tracing_options(("caller", "process", "args"), "caller")
         + (click.option("--match", metavar="ARGS",
                         help="Count only calls whose arguments match, in "
                              "the function's syntax: 'sessions, _' "
                              "(Erlang), ':sessions, _' (Elixir). Checked "
                              "on the node, in the traced process."),
            click.option("--allow-broad", "allow", is_flag=True,
                         help="Trace what is refused by default: io or "
                              "lists, a whole hot module, what the tracer "
                              "itself calls (any module stays refused).")))
def calls(connect: Any, request: SimpleNamespace, progress: Progress) -> Any:
    """Who calls FUNCTION on the node, counted live, largest first.

    FUNCTION is m:f/a or, in Elixir's form, Mod.f/a (:mod.f/a for an
    Erlang module); _ for any arity. BIFs trace too (erlang:list_to_atom/1,
    ets:insert/2). --by caller (the default) names the function and line
    each call returns to; a call made as the last thing a function does (a
    tail call) returns past its caller, which is then unknown: the row
    says "tail call". --by process counts by the calling process, named as
    the other commands name them; --by args by each argument's kind, with
    its value only for atoms, small integers and binaries of up to 16
    bytes (never a whole argument). --match narrows the calls counted by
    their arguments, on the node.

    A tracer on the node (nothing loaded) counts the calls and sends the
    counts every 0.5 s: never a message per call over the network. It
    stops itself at --duration, at --max calls, past --rate calls a second
    (exit 14) and when its mailbox or memory passes its bound (exit 14);
    whatever ends it (those, Ctrl-C, kill -9 of beam-probe, a lost
    network) removes every trace it set within a second, and nothing
    else. OTP 27+: a trace session of its own, beside dbg, recon_trace or
    another beam-probe. OTP 25-26: refused (exit 10) when another tracer
    or a trace pattern is already at work on what it would touch. On a
    terminal the table redraws in place; piped, one JSON line an interval
    ({"rows": [{"caller": ..., "count": N, "per_s": ...}]}), then the
    summary; --format json forces JSON.

    \b
    Examples:
      beam-probe calls app@db1 erlang:list_to_atom/1
      beam-probe calls app@db1 ets:insert/2 --match 'sessions, _'
      beam-probe calls app@db1 'MyApp.Cache.put/2' --by process
      beam-probe calls app@db1 ets:insert/2 --by args --duration 30
    """
    from beam_probe.probes.calls import Counting, calls_request, rate_text

    return Counting(connect, "calls",
                    calls_request(request.function, request.match,
                                  request.by, request.allow),
                    request.duration, request.max_calls,
                    rate_text(request.rate), request.top, progress,
                    request.syntax)


@command("senders", "[NODE] PROCESS", kind="live", render="calls.frame",
         line="calls.line", summary="calls.summary_text",
         example="app@db1 my_server",
         options=_tracing_options(("sender", "shape"), "sender"))
def senders(connect: Any, request: SimpleNamespace,
            progress: Progress) -> Any:
    """Who sends messages to PROCESS, counted live, largest first.

    PROCESS is a pid or a registered name, as proc-info takes it. The
    mailbox that grows: who fills it. --by shape counts by sender and the
    message's shape too: a tuple's first element when an atom, and its
    size ({put, _, _}); else its kind, with the value of an atom or a
    small integer. Every message sent to PROCESS is copied to the tracer
    (the emulator's doing), so its mailbox and memory are bounded: past
    them the trace stops itself (exit 14).

    Limits, output and clean-up as for calls: counted on the node, sent
    every 0.5 s; --duration, --max, --rate; OTP 27+ in a trace session of
    its own; OTP 25-26 refused (exit 10) when another tracer is at work or
    the node's send pattern is not its default.

    \b
    Examples:
      beam-probe senders app@db1 my_server
      beam-probe senders app@db1 '<0.4612.0>' --by shape
      beam-probe senders app@db1 MyApp.Cache --duration 30 --format json
    """
    from beam_probe.probes.calls import Counting, rate_text, senders_request

    return Counting(connect, "senders",
                    senders_request(request.process, request.by),
                    request.duration, request.max_calls,
                    rate_text(request.rate), request.top, progress,
                    request.syntax)
