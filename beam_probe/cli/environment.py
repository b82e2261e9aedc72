"""What a run of the command line meets outside itself: its streams,
whether they are terminals, the environment variables, the clock.

The process's own by default. A test (or a program embedding beam-probe)
hands ``invoke`` another, as httpie's Environment is handed to its main:
the run writes to its streams, reads its variables, believes its
terminals and keeps its time, and nothing of the process is touched.
Read through ``current()`` at the moment of use, never kept in a module
at import, so that each run sees its own.
"""

from __future__ import annotations

import os
import sys
import time
from contextlib import contextmanager
from typing import IO, Any, Callable, Iterator, Mapping


class Environment:
    """Each field left out is the process's own, looked up when read (so
    pytest's capture, or a caller's redirect, is seen)."""

    def __init__(self, *, stdout: IO[str] | None = None,
                 stderr: IO[str] | None = None,
                 stdout_isatty: bool | None = None,
                 stderr_isatty: bool | None = None,
                 stdin_isatty: bool | None = None,
                 env: Mapping[str, str] | None = None,
                 clock: Callable[[], float] | None = None,
                 sleep: Callable[[float], None] | None = None,
                 terminal_size: tuple[int, int] | None = None) -> None:
        self._stdout, self._stderr = stdout, stderr
        self._stdout_isatty, self._stderr_isatty = stdout_isatty, \
            stderr_isatty
        self._stdin_isatty = stdin_isatty
        self._env = env
        self.clock: Callable[[], float] = clock or time.time
        self.sleep: Callable[[float], None] = sleep or time.sleep
        # Columns and rows of a terminal the test pretends to have.
        self.terminal_size = terminal_size

    @property
    def stdout(self) -> IO[str] | None:
        return sys.stdout if self._stdout is None else self._stdout

    @property
    def stderr(self) -> IO[str] | None:
        return sys.stderr if self._stderr is None else self._stderr

    @property
    def env(self) -> Mapping[str, str]:
        return os.environ if self._env is None else self._env

    @property
    def injected_streams(self) -> bool:
        return self._stdout is not None or self._stderr is not None

    def isatty(self, stream: str = "stdout") -> bool:
        """Whether "stdout", "stderr" or "stdin" is a terminal."""
        given = {"stdout": self._stdout_isatty, "stderr": self._stderr_isatty,
                 "stdin": self._stdin_isatty}[stream]
        if given is not None:
            return given
        if stream == "stdin" and self.injected_streams:
            return False  # a caller's own streams: no terminal's keys
        found: Any = {"stdout": self.stdout, "stderr": self.stderr,
                      "stdin": sys.stdin}[stream]
        try:
            return found is not None and bool(found.isatty())
        except (AttributeError, ValueError):  # closed, or not a file
            return False

    def cursor_wanted(self, stream: str = "stdout") -> bool:
        """A terminal that moves its cursor: not one whose TERM is dumb
        (Emacs' shell, some CI consoles print the codes)."""
        return self.isatty(stream) and self.env.get("TERM") != "dumb"

    def colour_wanted(self) -> bool:
        """Colour on stdout, unless the user said no: NO_COLOR set to
        anything but the empty string (no-color.org), or TERM=dumb."""
        return self.cursor_wanted("stdout") and not self.env.get("NO_COLOR")


_PROCESS = Environment()
_current = _PROCESS


def current() -> Environment:
    """The environment of the run under way (the process's own when none
    was handed in)."""
    return _current


@contextmanager
def using(environment: Environment | None) -> Iterator[Environment]:
    """Make ``environment`` the current one for a run."""
    global _current
    previous, _current = _current, environment or _PROCESS
    try:
        yield _current
    finally:
        _current = previous


__all__ = ["Environment", "current", "using"]
