"""Commands as declarations: a name, positional arguments written as the
usage line writes them (``[NODE] ATTRIBUTE N``), a default call timeout,
whether --jobs applies, extra options, what to ask (the probe) and how to
draw the answer (the renderer). Everything between is done here, once:
parsing and checking the arguments (before connecting, so a typo costs no
connection), attaching, progress on a terminal, and the output.

    @command("proc-count", "[NODE] ATTRIBUTE N", timeout=300.0, jobs=True,
             render=render.proc_count_text,
             example="app@db1 binary_memory 3")
    def proc_count(remote, request, progress):
        '''The N processes with the largest ATTRIBUTE. ...'''
        return processes.proc_count(remote, request.attribute, request.n,
                                    progress, request.jobs)
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, Callable, Iterator

import click

from ..errors import UsageError
from . import options as opt
from .tty import Progress, write_out

Render = Callable[[Any], str]
Probe = Callable[[Any, SimpleNamespace, Progress], Any]


def _count(value: str, what: str, maximum: int | None = None) -> int:
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


def _rows(value: str) -> int:
    from ..probes.processes import check_n

    n = _count(value, "N")
    check_n(n)
    return n


def _attribute(value: str) -> str:
    from ..probes.processes import check_attribute

    check_attribute(value)
    return value


def _millis(value: str) -> int:
    from ..probes.processes import MAX_WINDOW_MS

    return _count(value, "MILLISECONDS", MAX_WINDOW_MS)


def _pid(value: str) -> str:
    from ..probes.info import target

    target(value)
    return value


# Positional arguments by the name the usage line gives them: how each is
# read and checked, and the attribute of the request it becomes.
ARGUMENTS: dict[str, tuple[str, Callable[[str], Any]]] = {
    "N": ("n", _rows),
    "ATTRIBUTE": ("attribute", _attribute),
    "MILLISECONDS": ("millis", _millis),
    "PID": ("pid", _pid),
}


class Rows:
    """A result whose rows arrive in chunks (proc-count --all): written as
    they come, so that neither the node nor we hold them all. ``head`` is
    the JSON object around the rows (they go under ``key``); ``summary``,
    which the chunks generator returns, is added after them."""

    def __init__(self, head: dict, key: str, chunks: Iterator[list],
                 title: str, table: Callable[[list], list],
                 headers: tuple[str, ...], align: str,
                 footer: Callable[[dict], str]) -> None:
        self.head, self.key, self.chunks = head, key, chunks
        self.title, self.table = title, table
        self.headers, self.align, self.footer = headers, align, footer


class Declaration:
    def __init__(self, name: str, args: str, probe: Probe, render: Render,
                 timeout: float, jobs: bool, options: tuple,
                 example: str, metavar: str | None,
                 check: Callable[[SimpleNamespace], None] | None) -> None:
        self.name, self.args, self.probe, self.render = name, args, probe, \
            render
        self.check = check
        self.timeout, self.jobs, self.options = timeout, jobs, options
        self.example = example
        self.metavar = metavar or args
        self.words = args.split()
        self.takes_node = bool(self.words) and self.words[0] == "[NODE]"
        if self.takes_node:
            self.words = self.words[1:]

    def parse(self, args: tuple[str, ...]) -> tuple[str | None, dict]:
        """NODE (or None) and the positional arguments by name; every error
        is a UsageError, raised before anything connects."""
        node, rest = opt.split_node(args)
        required = [w for w in self.words if not w.startswith("[")]
        if not len(required) <= len(rest) <= len(self.words):
            if not self.words:
                raise UsageError(f"unexpected argument {rest[0]!r}: NODE is "
                                 "name@host (a bare name goes in --node)")
            raise UsageError(f"expected {self.args}, e.g. beam-probe "
                             f"{self.name} {self.example}")
        values = {}
        for i, word in enumerate(self.words):
            attribute, read = ARGUMENTS[word.strip("[]")]
            values[attribute] = read(rest[i]) if i < len(rest) else None
        return node, values

    def click_command(self) -> click.Command:
        def callback(args: tuple[str, ...], **given: Any) -> None:
            node, values = self.parse(args)
            request = SimpleNamespace(**given, **values)
            if self.check is not None:
                self.check(request)
            run(self, node, request, given)

        params = list(self.options) + ([opt.JOBS_OPTION] if self.jobs
                                       else [])
        params += opt.node_options(default_timeout=self.timeout)
        callback = opt.apply(params, click.argument(
            "args", nargs=-1, metavar=self.metavar)(callback))
        return click.command(self.name, help=self.probe.__doc__,
                             epilog=opt.EPILOG_NODE)(callback)


DECLARED: list[Declaration] = []


def command(name: str, args: str, *, render: Render,
            timeout: float = opt.DEFAULT_TIMEOUT, jobs: bool = False,
            options: tuple = (), example: str = "app@db1",
            metavar: str | None = None,
            check: Callable[[SimpleNamespace], None] | None = None
            ) -> Callable[[Probe], Probe]:
    """Declare a command; its function is the probe it calls, and its
    docstring the command's help. ``check`` looks at the whole request
    (arguments and options together) before anything connects."""
    def declare(probe: Probe) -> Probe:
        DECLARED.append(Declaration(name, args, probe, render, timeout,
                                    jobs, options, example, metavar, check))
        return probe
    return declare


def run(declared: Declaration, node: str | None, request: SimpleNamespace,
        given: dict[str, Any]) -> None:
    """Attach, ask, and write the answer: parse -> one probe -> render."""
    from .. import render

    with opt.attach(node, given) as remote, Progress() as progress:
        result = declared.probe(remote, request, progress)
        if isinstance(result, Rows):
            _write_rows(result, given["fmt"], progress)
            return
    if given["fmt"] == "json":
        write_out(render.to_json(result))
    else:
        write_out(render.printable(declared.render(result)))


def _write_rows(rows: Rows, fmt: str, progress: Progress) -> None:
    """Each chunk as it arrives; JSON is the same object a whole result
    would be, written piece by piece."""
    import json

    from .. import render

    summary: dict = {}

    def chunks() -> Iterator[list]:
        summary.update((yield from rows.chunks))

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
    write_out(render.printable(rows.title))

    def table_chunks() -> Iterator[list]:
        for chunk in chunks():
            progress.pause()
            yield rows.table(chunk)

    for line in render.stream_table(rows.headers, table_chunks(),
                                    rows.align):
        write_out(render.printable(line))
    write_out(rows.footer(summary))


__all__ = ["ARGUMENTS", "DECLARED", "Declaration", "Rows", "command", "run"]
