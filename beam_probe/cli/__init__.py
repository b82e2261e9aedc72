"""The beam-probe command line.

``commands.py`` declares each command in a few lines (its usage, defaults,
the probe it calls, the renderer of its answer); ``declare.py`` does for
all of them what every command does: parse, check, attach, show progress,
write the answer. ``check.py`` is the monitoring plugin, ``tty.py`` all
that is drawn on a terminal, ``app.py`` the group and the entry point.
"""

from beam_probe.cli.app import invoke, main, run

__all__ = ["invoke", "main", "run"]
