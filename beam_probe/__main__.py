"""``python -m beam_probe`` runs the command line."""

from .cli import run

run()
