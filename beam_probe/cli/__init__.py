"""The beam-probe command line.

``commands.py`` declares each command in a few lines (its usage, defaults,
the probe it calls, the renderer of its answer); ``declare.py`` does for
all of them what every command does: parse, check, attach, show progress,
write the answer. ``check.py`` is the monitoring plugin, ``tty.py`` all
that is drawn on a terminal, ``app.py`` the group and the entry point.
"""

import gc

# No cyclic collection while the command line's modules load: imports make
# many objects and few cycles, and the collections they set off were ~3 ms
# of a one-query run (measured: click and ours, 49 -> 46 ms). Back on
# before anything runs, whoever imported us.
gc.disable()
try:
    from beam_probe.cli.app import invoke, main, run
finally:
    gc.enable()

__all__ = ["invoke", "main", "run"]
