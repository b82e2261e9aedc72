"""`beam-probe top` on a terminal: a Textual app over a TopFeed.

The refreshes run in a thread of their own (a pass over a million
processes takes seconds, and the keys must answer meanwhile); each frame
is handed to the app's loop to draw. A key that changes what is asked
(the sort, the filter, the node) wakes the thread for a refresh at once.
What is drawn comes from text/top.py, as --once writes it.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, Callable

from rich.text import Text
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import DataTable, Footer, Input, OptionList, Static

from beam_probe.errors import ProbeError
from beam_probe.probes.top import MAX_FILTER, MAX_ROWS, MIN_FILTER
from beam_probe.text import top as words

if TYPE_CHECKING:
    from beam_probe.node.remote import Remote
    from beam_probe.probes.results import TopView
    from beam_probe.probes.top import TopFeed
    from beam_probe.text.syntax import Syntax
    from textual.timer import Timer

# Below this the header and a few rows no longer fit: the view says so
# rather than draw them cut.
MIN_WIDTH, MIN_HEIGHT = 60, 12
# Lines that are not rows: the header (up to five lines for one node),
# the table's heading and the footer.
CHROME = 9
# The filter applies as it is typed, once the typing pauses this long:
# each change is a pass over every process on the node (seconds with a
# million), so a name typed costs one or two passes, never one a key, and
# the refresh thread never runs two at once (its wake coalesces).
FILTER_SETTLE = 0.4


class TextScreen(ModalScreen[None]):
    """A text over the view (a process, the ETS tables, the help), loaded
    in a thread; Escape or q closes it."""

    BINDINGS = [Binding("escape,q", "dismiss", "close")]
    DEFAULT_CSS = """
    TextScreen { align: center middle; }
    TextScreen > VerticalScroll { width: 95%; height: 90%;
                                  border: round $accent;
                                  background: $surface; padding: 0 1; }
    """

    def __init__(self, title: str,
                 load: Callable[[Callable[[], bool]], str | None]) -> None:
        super().__init__()
        self.title_text, self.load = title, load
        # Closed before its text came: the work is not started if it has
        # not been yet (it waits for the connection behind a refresh).
        self.closed = threading.Event()

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Static(Text(self.title_text, style="bold"))
            yield Static(Text("loading..."), id="body")
            yield Footer()

    def on_mount(self) -> None:
        # A thread of our own, a daemon: Textual's thread workers run in
        # asyncio's executor, which the app's end waits for, so q would
        # wait on a node that does not answer.
        threading.Thread(target=self._loading, name="top-load",
                         daemon=True).start()

    def _loading(self) -> None:
        try:
            text = self.load(lambda: not self.closed.is_set())
        except ProbeError as exc:
            text = f"{exc.label}: {exc}"
        if text is None:
            return
        try:
            self.app.call_from_thread(self._loaded, text)
        except Exception:  # noqa: BLE001 - the app or the screen ended
            pass

    def _loaded(self, text: str) -> None:
        if self.closed.is_set() or not self.is_attached:
            return  # closed while its text was made
        self.query_one("#body", Static).update(Text(text))

    async def action_dismiss(self, result: Any = None) -> None:
        self.closed.set()
        self.dismiss(None)


class NodePicker(ModalScreen["str | None"]):
    """--cluster: all nodes, or one."""

    BINDINGS = [Binding("escape,q", "cancel", "close")]
    ALL = "all nodes"
    DEFAULT_CSS = """
    NodePicker { align: center middle; }
    NodePicker > OptionList { width: 60; height: auto; max-height: 80%;
                              border: round $accent; }
    """

    def __init__(self, nodes: list[str]) -> None:
        super().__init__()
        self.nodes = nodes

    def compose(self) -> ComposeResult:
        yield OptionList(self.ALL, *self.nodes)

    def on_option_list_option_selected(
            self, event: OptionList.OptionSelected) -> None:
        chosen = str(event.option.prompt)
        self.dismiss(None if chosen == self.ALL else chosen)

    def action_cancel(self) -> None:
        self.dismiss(self.app.feed.focus)  # type: ignore[attr-defined]


class TopApp(App[None]):
    """The view: the header, the processes, the keys."""

    CSS = """
    #header { height: auto; }
    #down { height: auto; color: $error; text-style: bold; }
    #small { display: none; height: 1fr; content-align: center middle; }
    #processes { height: 1fr; }
    #filter { dock: bottom; display: none; }
    """
    # The footer shows them in this order, as far as the width goes: the
    # rankings first, quit and help before the rest.
    BINDINGS = [
        Binding("m", "sort('memory')", "memory"),
        Binding("r", "sort('reductions')", "reductions"),
        Binding("b", "sort('binary_memory')", "binary"),
        Binding("l", "sort('message_queue_len')", "mailbox"),
        Binding("q", "quit", "quit"),
        Binding("question_mark", "help", "help"),
        Binding("slash", "filter", "filter"),
        Binding("p", "pause", "pause"),
        Binding("e", "ets", "ETS"),
        Binding("a", "alloc", "alloc"),
        Binding("n", "nodes", "nodes"),
        Binding("ctrl+c", "quit", "quit", show=False, priority=True),
        Binding("escape", "clear_filter", show=False),
    ]
    # Textual's command palette (ctrl+p) offers nothing top needs.
    ENABLE_COMMAND_PALETTE = False

    def __init__(self, feed: TopFeed, syntax: Syntax,
                 connect_member: Callable[[str], Remote],
                 colour: bool = True) -> None:
        # Without colour (NO_COLOR, TERM=dumb): the terminal's own ANSI
        # colours, then none at all. Textual alone, on NO_COLOR, turns
        # its colours into greys (38;5;253), which are colours still.
        super().__init__(ansi_color=None if colour else True)
        if not colour:
            from textual.filter import NoColor

            if not any(isinstance(f, NoColor) for f in self._filters):
                self._filters.append(NoColor())
        self.feed, self.syntax = feed, syntax
        self.connect_member = connect_member
        self.paused = False
        self.view: TopView | None = None
        self.drawn = 0  # frames drawn (tests wait on it)
        self.failure: Exception | None = None
        self._columns: list[str] = []
        self._settle: Timer | None = None  # a filter typed, not yet applied
        self._wake = threading.Event()
        self._stop = threading.Event()

    def compose(self) -> ComposeResult:
        yield Static(Text(f"connecting to {self.feed.node}..."), id="header")
        yield Static(id="down")
        yield Static(id="small")
        yield DataTable(id="processes", cursor_type="row", zebra_stripes=True)
        yield Input(id="filter", max_length=MAX_FILTER,
                    placeholder="filter by name: applies as you type, from "
                                f"{MIN_FILTER} characters (Enter closes, "
                                "Escape clears)")
        yield Footer()

    def on_mount(self) -> None:
        self._fit(self.size.width, self.size.height)
        # A daemon thread of our own, not a Textual thread worker: those
        # run in asyncio's executor, whose end the app waits for, and q
        # must not wait on a refresh from a node that does not answer.
        threading.Thread(target=self._refreshing, name="top-refresh",
                         daemon=True).start()

    # The refreshes, in their own thread.

    def _refreshing(self) -> None:
        while not self._stop.is_set():
            if not self.paused:
                try:
                    view = self.feed.refresh()
                except Exception as exc:  # noqa: BLE001 - said, then ends
                    # A node that answers what no node can (BadReply),
                    # or a bug of ours: no later refresh means more.
                    self._hand(self._fatal, exc)
                    return
                if self._stop.is_set() or not self._hand(self._show, view):
                    return
            self._wake.wait(self.feed.next_wait())
            self._wake.clear()

    def _hand(self, draw: Callable[..., None], *args: Any) -> bool:
        """``draw(*args)`` in the app's loop; False once the app ended."""
        try:
            self.call_from_thread(draw, *args)
        except Exception:  # noqa: BLE001 - the app ended meanwhile
            return False
        return True

    def _again(self) -> None:
        """A refresh now (what is asked changed)."""
        self._wake.set()

    def _fatal(self, exc: Exception) -> None:
        self.failure = exc
        self.exit()

    def on_unmount(self) -> None:
        self._stop.set()
        self._wake.set()

    # Drawing.

    def _show(self, view: TopView) -> None:
        if self.view is not None and \
                len(view["nodes"]) != len(self.view["nodes"]):
            self.refresh_bindings()  # n, now that there is a choice
        self.view = view
        self._draw_header()
        table = self.query_one("#processes", DataTable)
        cursor = self._cursor_key()
        columns = words.columns(view)
        align = [a == "r" for a in words.align(view)]
        # The columns made afresh each frame: a DataTable's column only
        # ever widens, so one long name once shown kept every figure off
        # the screen after its process was gone (issue 37). Their widths
        # are those of the rows shown now.
        table.clear(columns=True)
        table.add_columns(*(Text(title, justify="right") if right
                            else title
                            for title, right in zip(columns, align)))
        self._columns = columns
        keys = []
        # One node's rows name no node: they are its frame's.
        alone = view["frames"][0]["node"] if view["frames"] else ""
        for row in words.rows(view):
            key = f"{row.get('node', alone)} {row['pid']}"
            if key in keys:
                continue
            keys.append(key)
            table.add_row(*(Text(cell, justify="right") if right else cell
                            for cell, right in zip(
                                words.cells(view, row, self.syntax),
                                align)),
                          key=key)
        if cursor in keys:
            table.move_cursor(row=keys.index(cursor), animate=False)
        self.drawn += 1

    def _draw_header(self) -> None:
        if self.view is None:
            return
        lines = words.header_lines(self.view, self.paused)
        down = set(words.down_lines(self.view))
        # The rows left unnamed (before OTP 26.2), under the header.
        notes = [line for line in words.unnamed_lines(self.view) if line]
        self.query_one("#header", Static).update(
            Text("\n".join([line for line in lines if line not in down]
                           + notes)))
        self.query_one("#down", Static).update(Text("\n".join(
            line for line in lines if line in down)))

    def _cursor_key(self) -> str | None:
        table = self.query_one("#processes", DataTable)
        if not table.row_count:
            return None
        try:
            key = table.coordinate_to_cell_key(table.cursor_coordinate)
        except Exception:  # noqa: BLE001 - no row under the cursor
            return None
        return str(key.row_key.value)

    def on_resize(self, event: Any) -> None:
        self._fit(event.size.width, event.size.height)

    def _fit(self, width: int, height: int) -> None:
        """Rows for the height; a terminal too small says so."""
        small = width < MIN_WIDTH or height < MIN_HEIGHT
        for name in ("#header", "#down", "#processes"):
            self.query_one(name).display = not small
        message = self.query_one("#small", Static)
        message.display = small
        if small:
            message.update(Text(f"terminal too small ({width}x{height}): "
                                f"top needs at least {MIN_WIDTH}x"
                                f"{MIN_HEIGHT}"))
        self.feed.n = max(5, min(MAX_ROWS, height - CHROME))

    # Keys.

    def action_sort(self, key: str) -> None:
        if self.feed.sort != key:
            self.feed.sort = key
            self._again()

    def action_pause(self) -> None:
        self.paused = not self.paused
        self._draw_header()
        if not self.paused:
            self._again()

    def action_filter(self) -> None:
        field = self.query_one("#filter", Input)
        field.display = True
        field.value = self.feed.filter
        field.focus()

    def on_input_changed(self, event: Input.Changed) -> None:
        """A filter being typed: applied once the typing pauses."""
        if event.input.id != "filter":
            return
        if self._settle is not None:
            self._settle.stop()
        self._settle = self.set_timer(FILTER_SETTLE, self._apply_typed)

    def _apply_typed(self) -> None:
        self._settle = None
        field = self.query_one("#filter", Input)
        if not field.display:  # closed meanwhile (Enter, Escape)
            return
        text = field.value[:MAX_FILTER]
        # One character would match nearly every process (probes/top.py):
        # the filter in force stays until there are two.
        if 0 < len(text) < MIN_FILTER or text == self.feed.filter:
            return
        self.feed.filter = text
        self._again()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        text = event.value[:MAX_FILTER]
        if 0 < len(text) < MIN_FILTER:
            self.notify(f"a filter is at least {MIN_FILTER} characters")
            return
        self.feed.filter = text
        self._close_filter()
        self._again()

    def action_clear_filter(self) -> None:
        field = self.query_one("#filter", Input)
        if field.display or self.feed.filter:
            self.feed.filter = ""
            self._close_filter()
            self._again()

    def _close_filter(self) -> None:
        if self._settle is not None:
            self._settle.stop()
            self._settle = None
        field = self.query_one("#filter", Input)
        field.display = False
        self.query_one("#processes", DataTable).focus()

    def action_help(self) -> None:
        self.push_screen(TextScreen("beam-probe top",
                                    lambda wanted: words.help_text()))

    def check_action(self, action: str, parameters: tuple[object, ...]
                     ) -> bool | None:
        """n only where there are nodes to choose from (--cluster)."""
        # False hides a key from the footer (None would show it dimmed).
        return not (action == "nodes" and len(self.feed.members) < 2)

    def action_nodes(self) -> None:
        def chosen(node: str | None) -> None:
            if node != self.feed.focus:
                self.feed.focus = node
                self._again()

        self.push_screen(NodePicker(self.feed.members), chosen)

    def _on_node(self, node: str, work: Callable[[Remote], str],
                 wanted: Callable[[], bool]) -> str | None:
        """``work`` on ``node`` while still ``wanted``: over top's own
        connection for the node it attached to, else over one of its own
        to that member."""
        if node == self.feed.node:
            result: str | None = self.feed.using(work, wanted)
            return result
        if not wanted():
            return None
        with self.connect_member(node) as remote:
            return work(remote)

    def _focused_node(self) -> str:
        return self.feed.focus or self.feed.node

    def action_ets(self) -> None:
        from beam_probe.probes import ets
        from beam_probe.text.node import ets_text

        node = self._focused_node()
        self.push_screen(TextScreen(
            f"{node}: the largest ETS tables", lambda wanted: self._on_node(
                node, lambda r: ets_text(ets.largest(r, 25), self.syntax),
                wanted)))

    def action_alloc(self) -> None:
        from beam_probe.probes.alloc import alloc
        from beam_probe.text.node import alloc_text

        node = self._focused_node()
        self.push_screen(TextScreen(
            f"{node}: allocators", lambda wanted: self._on_node(
                node, lambda r: alloc_text(alloc(r), self.syntax), wanted)))

    def on_data_table_row_selected(self, event: DataTable.RowSelected
                                   ) -> None:
        node, _, pid = str(event.row_key.value).rpartition(" ")
        self.push_screen(TextScreen(
            f"{node}: {self.syntax.code(pid)}",
            lambda wanted: self._on_node(
                node, lambda r: self._process(r, pid), wanted)))

    def _process(self, remote: Remote, pid: str) -> str:
        """proc-info, then inspect: what it is, then what it holds."""
        from beam_probe.probes import inspect
        from beam_probe.probes.info import proc_info
        from beam_probe.text.inspect import inspect_text
        from beam_probe.text.node import proc_info_text

        parts = [proc_info_text(proc_info(remote, pid), self.syntax)]
        try:
            parts.append(inspect_text(inspect.process(remote, pid),
                                      self.syntax))
        except ProbeError as exc:
            parts.append(f"inspect: {exc.label}: {exc}")
        return "\n\n".join(parts)


def run_app(feed: TopFeed, syntax: Syntax,
            connect_member: Callable[[str], Remote],
            colour: bool = True) -> None:
    """The view until q (or Ctrl-C); a node that answered what no node
    can ends it with that error."""
    app = TopApp(feed, syntax, connect_member, colour)
    app.run()
    if app.failure is not None:
        raise app.failure


__all__ = ["TopApp", "run_app"]
