"""Commands as declarations: a name, positional arguments written as the
usage line writes them (``[NODE] ATTRIBUTE N``), a default call timeout,
whether --jobs applies, extra options, what to ask (the probe) and how to
draw the answer (the renderer). Everything between is done here, once:
parsing and checking the arguments (before connecting, so a typo costs no
connection), attaching, progress on a terminal, and the output.

Three kinds of command share this: one question and its answer (the
default); ``live``, whose probe gets a way to connect (and to connect
again) and returns a stream of samples, drawn in place on a terminal and
written as JSON lines otherwise, which Ctrl-C ends as a normal stop (exit
0, with a summary); ``offline``, which reads files and attaches to
nothing.

    @command("proc-count", "[NODE] ATTRIBUTE N", timeout=300.0, jobs=True,
             render="node.proc_count_text",
             example="app@db1 binary_memory 3")
    def proc_count(remote, request, progress):
        '''The N processes with the largest ATTRIBUTE. ...'''
        return processes.proc_count(remote, request.attribute, request.n,
                                    progress, request.jobs)

A renderer is named "module.function" of beam_probe.text and imported only
when there is text to draw (a JSON run never imports it); it takes the
result and the Syntax to show names, functions and pids in.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import (TYPE_CHECKING, Any, Callable, Generator, Iterator,
                    Protocol, Union)

import click

from beam_probe.errors import OutputFailed, UsageError
from beam_probe.cli import options as opt
from beam_probe.cli.tty import Progress, write_out

if TYPE_CHECKING:
    # "module.function" of beam_probe.text, or the function itself.
    Render = Union[str, Callable[..., str]]
    Probe = Callable[[Any, SimpleNamespace, Progress], Any]
    DumpProbe = Callable[[Any, SimpleNamespace], Any]


def renderer(spec: Render | None) -> Callable[..., Any]:
    """The renderer a declaration names, imported now."""
    if callable(spec):
        return spec
    import importlib

    assert spec is not None, "a declaration without this renderer"
    module, _, name = spec.rpartition(".")
    found: Callable[..., Any] = getattr(
        importlib.import_module(f"beam_probe.text.{module}"), name)
    return found


# The readers turn words into values. Whether a value is valid is the
# probe's to say, in its own check (a declaration's ``check`` calls it
# before connecting, so a typo costs no connection).

def _whole(what: str) -> Callable[[str], int]:
    def read(value: str) -> int:
        try:
            return int(value)
        except ValueError:
            raise UsageError(f"{what} must be a whole number, not "
                             f"{value!r}") from None
    return read


# Positional arguments by the name the usage line gives them: how each is
# read and checked, and the attribute of the request it becomes. A last
# word ending in "..." takes the rest of the arguments, one or more (none
# or more when in brackets).
ARGUMENTS: dict[str, tuple[str, Callable[[str], Any]]] = {
    "N": ("n", _whole("N")),
    "ATTRIBUTE": ("attribute", str),
    "MILLISECONDS": ("millis", _whole("MILLISECONDS")),
    "PID": ("pid", str),
    "PROCESS": ("process", str),
    "FUNCTION": ("function", str),
    "FILE": ("file", str),
    "FILE...": ("files", str),
    "TARGET...": ("targets", str),
}


def _dump_word(word: str) -> bool:
    """A word that is a crash dump's path, not a node's name or the
    command's own argument: a '/', '.dump' without '@', or a file here
    that starts as a dump."""
    if "/" in word or (".dump" in word and "@" not in word):
        return True
    if _maybe_dump(word):
        from beam_probe.crashdump.reader import starts_as_dump

        return starts_as_dump(word)
    return False


def _maybe_dump(word: str) -> bool:
    """Whether a NODE may be a crash dump's path, before importing the
    reader (a node's name costs no import): reader.looks_like_dump says."""
    import os

    return "/" in word or ".dump" in word or os.path.isfile(word)


def _node_option(given: dict[str, Any]) -> str | None:
    """--node, else BEAM_PROBE_NODE: where a dump's path may be given
    too (RELEASE_NODE names a release's node, never a file)."""
    from beam_probe.cli.environment import current

    found = given.get("node") or current().env.get("BEAM_PROBE_NODE")
    return found if isinstance(found, str) and found else None


def refuse_dump(name: str, node: str | None) -> None:
    """A command that asks a live node, given a crash dump: one line."""
    if node is None or not _maybe_dump(node):
        return
    from beam_probe.crashdump.reader import looks_like_dump

    if looks_like_dump(node):
        raise UsageError(f"{name} asks a live node; a crash dump ({node}) "
                         f"answers {', '.join(DUMP_COMMANDS)}")


class Rows:
    """A result whose rows arrive in chunks (proc-count --all): written as
    they come, so that neither the node nor we hold them all. ``head`` is
    the JSON object around the rows (they go under ``key``); ``summary``,
    which the chunks generator returns, is added after them. ``text``
    names the text class that draws them (title, headers, rows, footer)."""

    def __init__(self, head: dict[str, Any], key: str,
                 chunks: Generator[list[Any], None, Any],
                 text: str) -> None:
        self.head, self.key, self.chunks, self.text = head, key, chunks, text


class Declaration:
    def __init__(self, name: str, args: str, probe: Probe, render: Render,
                 timeout: float, jobs: bool, options: tuple[Any, ...],
                 example: str, metavar: str | None,
                 check: Callable[[SimpleNamespace], None] | None,
                 kind: str = "call", summary: Render | None = None,
                 line: Render | None = None,
                 cluster: Render | None = None,
                 alone: str | None = None,
                 dump: DumpProbe | None = None) -> None:
        self.name, self.args, self.probe, self.render = name, args, probe, \
            render
        # What the command asks of a crash dump given where NODE goes
        # (crashdump/answers.py): the same result type as the probe's.
        self.dump = dump
        # An option that takes the place of the positional arguments
        # (inspect's --table): with it given, a lone bare word is NODE.
        self.alone = alone
        # The renderer of the --cluster answer; a command that has one
        # takes --cluster, --nodes and --include-hidden.
        self.cluster = cluster
        self.check, self.kind, self.summary = check, kind, summary
        self.line = line
        self.timeout, self.jobs, self.options = timeout, jobs, options
        self.example = example
        self.metavar = metavar or args
        self.words = args.split()
        self.takes_node = bool(self.words) and self.words[0] == "[NODE]"
        if self.takes_node:
            self.words = self.words[1:]

    def parse(self, args: tuple[str, ...], given: dict[str, Any] | None = None
              ) -> tuple[str | None, dict[Any, Any]]:
        """NODE (or None) and the positional arguments by name; every error
        is a UsageError, raised before anything connects.

        NODE is the first argument when it holds '@'. A bare first word is
        the command's own argument when the words read so, and otherwise
        the node's short name, as ``erl -sname demo`` names it (``ping
        demo``, ``proc-count demo memory 3``, ``ets demo``): refused
        before, though Elixir users and erl's own -sname write it so.
        ``proc-count memory 3`` with BEAM_PROBE_NODE set still reads
        memory as the attribute."""
        if self.kind == "offline":
            return None, self.values(list(args))
        node, rest = opt.split_node(args)
        if node is None and rest and self.takes_node and \
                _dump_word(rest[0]):
            # A crash dump's path stands where a node goes.
            node, rest = rest[0], rest[1:]
            return node, self.values(rest)
        if node is None and len(rest) == 1 and self.takes_node and \
                self.alone and (given or {}).get(self.alone) is not None:
            return rest[0], self.values([])
        if node is not None or not rest or not self.takes_node:
            return node, self.values(rest)
        try:
            return None, self.values(rest)
        except UsageError as own:
            try:
                return rest[0], self.values(rest[1:])
            except UsageError as as_node:
                # Too many words for the command: the node's reading says
                # what is wrong; otherwise the command's own.
                raise (as_node if len(rest) > len(self.words) else own) \
                    from None

    def values(self, rest: list[str]) -> dict[Any, Any]:
        """The positional arguments by name (NODE already taken)."""
        required = [w for w in self.words if not w.startswith("[")]
        variadic = bool(self.words) and \
            self.words[-1].rstrip("]").endswith("...")
        words: list[str | list[str]] = list(rest)
        if variadic and len(rest) >= len(self.words):
            # The last word takes the rest, as one list.
            words = [*rest[:len(self.words) - 1], rest[len(self.words) - 1:]]
        if not len(required) <= len(words) <= len(self.words):
            if not self.words:
                raise UsageError(f"unexpected argument {rest[-1]!r}: "
                                 f"{self.name} takes NODE alone (name@host, "
                                 "or a bare name on this host)")
            raise UsageError(f"expected {self.args}, e.g. beam-probe "
                             f"{self.name} {self.example}")
        values: dict[str, Any] = {}
        for i, word in enumerate(self.words):
            attribute, read = ARGUMENTS[word.strip("[]")]
            given = words[i] if i < len(words) else None
            if given is None:
                values[attribute] = None
            elif isinstance(given, list):
                values[attribute] = [read(item) for item in given]
            else:
                values[attribute] = read(given)
        return values

    def complete(self, ctx: click.Context, param: click.Parameter,
                 incomplete: str) -> list[Any]:
        """Shell completion of the positional words: attributes where the
        usage line has ATTRIBUTE, file names where it has FILE..., nothing
        for a node name (it cannot be known without asking EPMD)."""
        from click.shell_completion import CompletionItem

        if any(w.strip("[]") in ("FILE", "FILE...") for w in self.words):
            return [CompletionItem(incomplete, type="file")]
        if "ATTRIBUTE" in self.words and "@" not in incomplete:
            from beam_probe.probes.processes import ATTRIBUTES

            return [CompletionItem(a) for a in ATTRIBUTES
                    if a.startswith(incomplete)]
        return []

    def click_command(self) -> click.Command:
        def callback(args: tuple[str, ...], **given: Any) -> None:
            node, values = self.parse(args, given)
            request = SimpleNamespace(**given, **values)
            if self.cluster is not None:
                opt.cluster_request(request)
            if self.check is not None:
                self.check(request)
            {"call": run, "live": run_live, "screen": run_screen,
             "offline": run_offline}[self.kind](self, node, request, given)

        params = list(self.options) + ([opt.JOBS_OPTION] if self.jobs
                                       else []) + list(
            opt.CLUSTER_OPTIONS if self.cluster is not None else ()) + [
            opt.SYNTAX_OPTION]
        if self.kind == "offline":
            params.append(opt.format_option())
        else:
            params += opt.node_options(default_timeout=self.timeout,
                                       live=self.kind == "live",
                                       screen=self.kind == "screen")
        callback = opt.apply(params, click.argument(
            "args", nargs=-1, metavar=self.metavar,
            shell_complete=self.complete)(callback))
        epilog = opt.EPILOG_NODE if self.dump is None else \
            opt.EPILOG_NODE + opt.EPILOG_DUMP
        return click.command(self.name, help=self.probe.__doc__,
                             epilog=epilog)(callback)


DECLARED: list[Declaration] = []


def command(name: str, args: str, *, render: Render,
            timeout: float = opt.DEFAULT_TIMEOUT, jobs: bool = False,
            options: tuple[Any, ...] = (), example: str = "app@db1",
            metavar: str | None = None,
            check: Callable[[SimpleNamespace], None] | None = None,
            kind: str = "call", summary: Render | None = None,
            line: Render | None = None,
            cluster: Render | None = None,
            alone: str | None = None,
            dump: DumpProbe | None = None) -> Callable[[Probe], Probe]:
    """Declare a command; its function is the probe it calls, and its
    docstring the command's help. ``check`` looks at the whole request
    (arguments and options together) before anything connects. A ``live``
    command's probe takes a connect function instead of a node and returns
    a Live; ``render`` then draws a frame of it, (live, width, height) ->
    lines, ``line`` one sample as a line of text (for --format table when
    the output is not a terminal), and ``summary`` its summary. An
    ``offline`` command's probe gets no node. ``cluster`` names the
    renderer of the --cluster answer: a command that has one takes
    --cluster, --nodes and --include-hidden (the probe reads
    request.cluster and request.cluster_nodes). ``dump`` answers the
    command from a crash dump named where NODE goes: (dump, request) ->
    the probe's result type. A ``screen`` command's probe (top) takes a
    connect function and returns a feed: a full-screen view on a terminal
    (beam_probe/live/), one frame drawn by ``render`` otherwise."""
    def declare(probe: Probe) -> Probe:
        DECLARED.append(Declaration(name, args, probe, render, timeout,
                                    jobs, options, example, metavar, check,
                                    kind, summary, line, cluster, alone,
                                    dump))
        return probe
    return declare


def run(declared: Declaration, node: str | None, request: SimpleNamespace,
        given: dict[str, Any]) -> None:
    """Attach, ask, and write the answer: parse -> one probe -> render.
    A crash dump where NODE goes is read instead (run_dump)."""
    where = node if node is not None else _node_option(given)
    if where is not None and _maybe_dump(where):
        from beam_probe.crashdump.reader import looks_like_dump

        if looks_like_dump(where):
            run_dump(declared, where, request, given)
            return
    from beam_probe.errors import EndedEarly
    from beam_probe.probes.basic import runs_elixir
    from beam_probe.text.syntax import ERLANG, choose, shows_code
    from beam_probe.text.tables import printable, to_json

    failure: EndedEarly | None = None
    with opt.attach(node, given) as remote, Progress() as progress:
        try:
            result = declared.probe(remote, request, progress)
        except EndedEarly as ended:
            # Part of an answer, and a node that cannot be asked more:
            # written as any answer, then the error ends the run.
            failure, result = ended, ended.result
        if isinstance(result, Rows):
            syntax = ERLANG if given["fmt"] == "json" else choose(
                given["syntax"], lambda: runs_elixir(remote))
            _write_rows(result, given["fmt"], progress, syntax)
            return
        if given["fmt"] == "json":
            text = to_json(result)
        else:
            # Whether the node runs Elixir is asked only when the text
            # shows a pid or a function (not for ping or memory: a round
            # trip less); then the text is drawn again in its syntax.
            draw = renderer(declared.cluster if getattr(
                request, "cluster", False) else declared.render)
            text = draw(result, ERLANG)
            if given["syntax"] != "auto" or shows_code(text):
                syntax = choose(given["syntax"], (
                    lambda: runs_elixir(remote))
                    if failure is None or failure.elixir is None
                    else (lambda: bool(failure.elixir)))
                if syntax is not ERLANG:
                    text = draw(result, syntax)
            text = printable(text)
    write_out(text)
    if failure is not None:
        raise failure.error


# The commands a crash dump answers, for the line that refuses the others.
DUMP_COMMANDS = ("crashdump", "memory", "proc-count", "ets", "alloc",
                 "proc-info", "inspect", "diff")


def run_dump(declared: Declaration, path: str, request: SimpleNamespace,
             given: dict[str, Any]) -> None:
    """The command's question answered from a crash dump: the same result
    as from a live node, with where it comes from ("crash_dump": file,
    node, written) in JSON and as the first line of text."""
    from beam_probe.crashdump.answers import source
    from beam_probe.crashdump.reader import Dump
    from beam_probe.text.crashdump import source_line
    from beam_probe.text.syntax import choose
    from beam_probe.text.tables import printable, to_json

    answer = declared.dump
    if answer is None:
        raise UsageError(f"{declared.name} asks a live node; a crash dump "
                         f"({path}) answers {', '.join(DUMP_COMMANDS)}")
    if getattr(request, "cluster", False):
        raise UsageError("a crash dump is one dead node: leave out "
                         "--cluster and --nodes")
    with Progress() as progress:
        progress(f"reading {path}")
        with Dump(path) as dump:
            result = answer(dump, request)
            crash = source(dump)
    result["crash_dump"] = crash
    if given["fmt"] == "json":
        write_out(to_json(result))
        return
    syntax = choose(given["syntax"], lambda: bool(crash["elixir"]))
    write_out(printable(source_line(crash) + "\n"
                        + renderer(declared.render)(result, syntax)))


def run_offline(declared: Declaration, node: str | None,
                request: SimpleNamespace, given: dict[str, Any]) -> None:
    """Read, compute, write: no node involved. Part of an answer
    (EndedEarly: diff of folders where some node is not once in each) is
    written as any answer, then its error ends the run."""
    from beam_probe.errors import EndedEarly
    from beam_probe.text.syntax import choose
    from beam_probe.text.tables import printable, to_json

    failure: EndedEarly | None = None
    with Progress() as progress:
        try:
            result = declared.probe(None, request, progress)
        except EndedEarly as ended:
            failure, result = ended, ended.result
    if given["fmt"] == "json":
        write_out(to_json(result))
    else:
        # No node to ask: what the files say of it (a snapshot records
        # whether its node ran Elixir), else Erlang's forms.
        syntax = choose(given["syntax"], lambda: isinstance(result, dict)
                        and result.get("elixir") is True)
        write_out(printable(renderer(declared.render)(result, syntax)))
    if failure is not None:
        raise failure.error


class Live(Protocol):
    """What a live command's probe returns. One whose ``scrolls`` is true
    (trace-gc) is written a line per sample, as it comes, rather than
    redrawn in place: ``render`` then takes one sample."""

    def open(self) -> None: ...
    def samples(self) -> Iterator[dict[str, Any]]: ...
    def summary(self) -> dict[Any, Any]: ...
    def close(self) -> None: ...
    def exit_code(self) -> int: ...


def run_live(declared: Declaration, node: str | None,
             request: SimpleNamespace, given: dict[str, Any]) -> None:
    """Samples until the probe's count or duration is over, or Ctrl-C: on
    a terminal a view redrawn in place, else one JSON line a sample; then
    the summary. Ctrl-C is how a watch is meant to end: exit 0 (or the
    probe's own exit code, such as --fail-on-leak's)."""
    import json

    from beam_probe.cli.environment import current
    from beam_probe.cli.tty import LiveView
    from beam_probe.history.records import HistoryError, append
    from beam_probe.probes.basic import runs_elixir
    from beam_probe.text.syntax import ERLANG, choose
    from beam_probe.text.tables import printable

    refuse_dump(declared.name, node if node is not None
                else _node_option(given))
    live: Live = declared.probe(lambda: opt.attach(node, given), request,
                                Progress())
    environment = current()
    terminal = environment.isatty("stdout")
    scrolls = getattr(live, "scrolls", False)
    fmt = given["fmt"] or ("table" if terminal or scrolls else "json")
    # A line of text per sample: what scrolls (trace-gc), or text asked
    # for where no view can be drawn (a pipe, a file).
    lines = fmt == "table" and (scrolls or not terminal)
    line = renderer(declared.render if scrolls else declared.line) \
        if lines else None
    view = LiveView(plain=not environment.cursor_wanted("stdout")) \
        if fmt == "table" and not lines else None
    frame = renderer(declared.render) if view is not None else None
    colour = environment.colour_wanted()
    output = getattr(request, "output", None)
    syntax = ERLANG
    try:
        live.open()
        remote = getattr(live, "remote", None)
        if lines and remote is not None:
            syntax = choose(given["syntax"], lambda: runs_elixir(remote))
        for sample in live.samples():
            if output:
                try:
                    append(output, [sample])
                except HistoryError as exc:
                    raise OutputFailed(f"{output}: {exc}") from None
            if view is not None and frame is not None:
                view.draw(lambda width, height: frame(live, width, height,
                                                      colour))
            elif line is not None:
                write_out(printable(line(sample, syntax)))
            else:
                write_out(json.dumps(sample, separators=(",", ":")))
    except KeyboardInterrupt:
        pass
    finally:
        live.close()
        if view is not None:
            view.close()
    summary = live.summary()
    if view is not None or lines:
        write_out(printable(renderer(declared.summary)(summary, syntax)))
    else:
        write_out(json.dumps({"summary": summary}, separators=(",", ":")))
    code = live.exit_code()
    if code:
        raise click.exceptions.Exit(code)


def run_screen(declared: Declaration, node: str | None,
               request: SimpleNamespace, given: dict[str, Any]) -> None:
    """top: on a terminal (stdin and stdout), the full-screen view until
    q; with --once, --format json or output that is not a terminal, one
    frame as text (top -b -n 1) or JSON: two passes --interval apart, so
    that its reductions are those of an interval."""
    from beam_probe.cli.environment import current
    from beam_probe.probes.basic import runs_elixir
    from beam_probe.text.syntax import ERLANG, choose

    refuse_dump(declared.name, node if node is not None
                else _node_option(given))
    environment = current()
    feed = declared.probe(lambda: opt.attach(node, given), request,
                          Progress())
    once = request.once or given["fmt"] == "json" or not (
        environment.cursor_wanted("stdout") and environment.isatty("stdin"))
    try:
        with Progress() as progress:
            progress("connecting")
            feed.open()
            syntax = ERLANG if given["fmt"] == "json" else choose(
                given["syntax"], lambda: feed.using(runs_elixir))
            if once:
                progress("a pass, and another after the interval")
                feed.refresh()
                environment.sleep(feed.next_wait())
                view = feed.refresh()
        if once:
            _write_frame(declared, feed, view, given["fmt"], syntax)
            return
        try:
            from beam_probe.live.app import run_app
        except ImportError as exc:
            # textual, or rich (textual's own: a rich of its own was
            # removed, or never came), or theirs: the extra, said once.
            if (exc.name or "").partition(".")[0] == "beam_probe":
                raise
            raise UsageError("top's view needs the top extra (textual, "
                             "rich): pip install 'beam-probe[top]' "
                             "(--once needs nothing more); "
                             f"{exc}") from None
        run_app(feed, syntax,
                lambda member: opt.attach(member, {**given, "dist_port": None}),
                environment.colour_wanted())
    finally:
        feed.close()


def _write_frame(declared: Declaration, feed: Any, view: Any, fmt: str,
                 syntax: Any) -> None:
    """top's one frame; a node that did not answer ends the run with its
    error (a cluster's others written first, then exit 15), never a frame
    of stale rows and success."""
    from beam_probe.errors import ClusterIncomplete, ConnectionLost
    from beam_probe.text.tables import printable, to_json

    down = view["down"]
    if down and (not feed.cluster or len(down) == len(view["nodes"])):
        # Nothing but stale rows: the entry's error is the answer.
        gone = next((d for d in down if d["node"] == view["entry"]),
                    down[0])
        raise feed.errors.get(gone["node"]) or ConnectionLost(gone["error"])
    gone_nodes = {d["node"] for d in down}
    view = {**view, "frames": [f for f in view["frames"]
                               if f["node"] not in gone_nodes]}
    write_out(to_json(view) if fmt == "json" else
              printable(renderer(declared.render)(view, syntax)))
    if down:
        raise ClusterIncomplete(
            f"{len(down)} of {len(view['nodes'])} nodes did not answer: "
            + "; ".join(f"{d['node']}: {d['error']}" for d in down))


def _write_rows(rows: Rows, fmt: str, progress: Progress,
                syntax: Any) -> None:
    """Each chunk as it arrives; JSON is the same object a whole result
    would be, written piece by piece."""
    import json

    from beam_probe.text.tables import printable, stream_table

    summary: dict[Any, Any] = {}

    def chunks() -> Iterator[list[Any]]:
        summary.update((yield from rows.chunks) or {})

    if fmt == "json":
        head = json.dumps(rows.head)[:-1]
        write_out(f'{head}, "{rows.key}": [')
        first = True
        for chunk in chunks():
            progress.pause()
            for row in chunk:
                write_out(("  " if first else ", ") + json.dumps(row))
                first = False
        tail = "".join(f", {json.dumps(k)}: {json.dumps(v)}"
                       for k, v in summary.items())
        write_out(f"]{tail}}}")
        return
    text = renderer(rows.text)(rows.head, syntax)
    write_out(printable(text.title()))

    def table_chunks() -> Iterator[list[Any]]:
        for chunk in chunks():
            progress.pause()
            yield text.rows(chunk)

    for line in stream_table(text.headers, table_chunks(), text.align,
                             syntax):
        write_out(printable(line))
    write_out(text.footer(summary))


__all__ = ["ARGUMENTS", "DECLARED", "Declaration", "Live", "Rows", "command",
           "run", "run_live", "run_offline", "run_screen"]
