"""``python -m beam_probe`` runs the command line."""

from beam_probe.cli import run

run()
