"""Everything drawn on a terminal, and writing output at all.

Progress lines and live views go to a terminal only; piped, a command's
output is plain (tables or JSON, one write per line). Output is written
here so that a closed or full stdout is known where it happens:
OutputFailed (one line, exit 11), or PipeClosed when the reader of a pipe
went away (`| head`: exit 141, nothing said).
"""

from __future__ import annotations

import threading
import time
from typing import Any

import click

from beam_probe.cli.environment import current
from beam_probe.errors import OutputFailed

# An error is one line; a peer controls some of what goes into it (an EPMD
# listing, a node's badrpc reason), so it is cut here.
MAX_ERROR_LINE = 1000


class PipeClosed(Exception):
    """The reader of our standard output went away (`| head`)."""


def write_out(text: str) -> None:
    """Text and a newline on stdout, flushed."""
    stream = current().stdout
    if stream is None:
        raise OutputFailed("standard output is closed")
    try:
        write_all(stream, text + "\n")
    except BrokenPipeError:
        raise PipeClosed() from None
    except OSError as exc:
        raise OutputFailed(f"cannot write to standard output: "
                           f"{exc.strerror or exc}") from None


def write_all(stream: Any, text: str) -> None:
    """All of ``text`` on ``stream``, flushed, or an OSError.

    Not stream.write alone: with PYTHONUNBUFFERED=1 (set in many
    containers' images) sys.stdout writes straight to the file, and a
    write(2) that the pipe's reader cut short (`| head -1` past the
    64 KiB a pipe holds: 73,728 of 315,681 bytes here) is taken as done:
    the rest was dropped and the run ended 0, not 141, with no error.
    So the bytes go to the binary layer, each partial write followed by
    the rest, and the next write meets EPIPE."""
    buffer = getattr(stream, "buffer", None)
    if buffer is None:  # a text stream of a test or a caller (StringIO)
        stream.write(text)
        stream.flush()
        return
    stream.flush()
    view = memoryview(text.encode(stream.encoding or "utf-8",
                                  stream.errors or "strict"))
    while view:
        try:
            written = buffer.write(view)
        except BlockingIOError as exc:  # a stdout left O_NONBLOCK
            written = exc.characters_written
            _writable(buffer)
        if written is None:  # the same, from an unbuffered stream
            _writable(buffer)
            continue
        view = view[written:]
    buffer.flush()


def _writable(buffer: Any) -> None:
    """Until ``buffer``'s file takes more (a reader that is slow must not
    lose bytes, and the caller's Ctrl-C still ends the wait)."""
    import select

    select.select([], [buffer.fileno()], [])


def error_line(text: str) -> None:
    """One line on stderr: control characters escaped, length capped."""
    from beam_probe.text.tables import printable

    line = printable(" ".join(text.split("\n")))
    if len(line) > MAX_ERROR_LINE:
        line = line[:MAX_ERROR_LINE - 15] + " ... (cut short)"
    stream = current().stderr
    if stream is not None:
        click.echo(line, file=stream)


def note_line(text: str) -> None:
    """A line for the operator that is not the answer (where files were
    kept): on stderr, as errors are, so stdout stays the answer."""
    error_line(text)


class Progress:
    """Stage and elapsed time on stderr while a long call runs, redrawn in
    place, on a terminal only. Call it with each stage's text."""

    def __init__(self) -> None:
        self.environment = current()
        self.enabled = self.environment.cursor_wanted("stderr")
        self.message = ""
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    def __call__(self, message: str) -> None:
        if not self.enabled:
            return
        self.message = message
        if self._thread is None:
            self._stop.clear()
            started = time.monotonic()

            stream: Any = self.environment.stderr

            def tick() -> None:
                while not self._stop.wait(0.25):
                    stream.write(f"\r\x1b[K{self.message} "
                                 f"({time.monotonic() - started:.1f} s)")
                    stream.flush()
            self._thread = threading.Thread(target=tick, daemon=True)
            self._thread.start()

    def pause(self) -> None:
        """Stop drawing and clear the line (output is about to start)."""
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
            stream: Any = self.environment.stderr
            stream.write("\r\x1b[K")
            stream.flush()

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc: object) -> None:
        self.pause()


class LiveView:
    """A view redrawn in place on the terminal, fitted to its size at each
    draw and redrawn when the terminal is resized (SIGWINCH). ``draw`` takes
    a function of (width, height) giving the lines; the view keeps it for
    redraws. It draws below what is already on the screen, moving back up
    over its last frame to redraw (what came before stays readable, as in
    the demo); after a resize, which rewraps the old frame, it starts again
    from the top of a cleared screen. The last frame stays when it
    closes."""

    def __init__(self, stream: Any = None, plain: bool = False) -> None:
        import signal

        self.environment = current()
        self.stream: Any = stream or self.environment.stdout
        # A terminal that cannot move its cursor (TERM=dumb) gets each
        # frame below the last, with no control codes at all.
        self.plain = plain
        self._make: Any = None
        self._drawing = self._resized = False
        self._started = False
        self._height = 0  # lines of the frame on the screen
        self._previous = None
        if hasattr(signal, "SIGWINCH"):
            self._previous = signal.signal(signal.SIGWINCH, self._on_resize)

    def size(self) -> tuple[int, int]:
        """The terminal's size now. Asked of the terminal itself before
        $COLUMNS and $LINES: those are set once, and a resize changes only
        the terminal's own figure."""
        import os
        import shutil

        if self.environment.terminal_size is not None:
            columns, rows = self.environment.terminal_size
            return max(20, columns), max(6, rows)
        try:
            columns, rows = os.get_terminal_size(self.stream.fileno())
        except (AttributeError, OSError, ValueError):
            columns, rows = 0, 0
        if not columns or not rows:
            # A terminal that does not know its size (script(1), some CI
            # and serial consoles report 0 x 0): $COLUMNS/$LINES, else 80 x
            # 24, rather than a 20-column sliver.
            fallback = shutil.get_terminal_size((80, 24))
            columns, rows = columns or fallback[0], rows or fallback[1]
        return max(20, columns), max(6, rows)

    def draw(self, make: Any) -> None:
        self._make = make
        self._drawing = True
        try:
            while True:
                resized, self._resized = self._resized, False
                width, height = self.size()
                lines = make(width, height - 1)
                if self.plain:
                    self._write(("\n" if self._started else "")
                                + "".join(line + "\n" for line in lines))
                    self._started = True
                    return
                if not self._started:
                    text = "\x1b[?25l"  # the cursor, hidden while we draw
                elif resized:
                    text = "\x1b[H\x1b[2J"
                else:
                    text = f"\r\x1b[{self._height}A" if self._height else ""
                text += "".join(line + "\x1b[K\n" for line in lines)
                text += "\x1b[J"
                self._started, self._height = True, len(lines)
                self._write(text)
                if not self._resized:
                    return
        finally:
            self._drawing = False

    def _on_resize(self, signum: int, frame: Any) -> None:
        self._resized = True
        if not self._drawing and self._make is not None:
            self.draw(self._make)

    def _write(self, text: str) -> None:
        try:
            write_all(self.stream, text)
        except BrokenPipeError:
            raise PipeClosed() from None
        except OSError as exc:
            raise OutputFailed(f"cannot write to standard output: "
                               f"{exc.strerror or exc}") from None

    def close(self) -> None:
        import signal

        if self._previous is not None:
            signal.signal(signal.SIGWINCH, self._previous)
            self._previous = None
        if self._started and not self.plain:
            self._write("\x1b[?25h")


__all__ = ["LiveView", "PipeClosed", "Progress", "error_line", "note_line",
           "write_all", "write_out"]
