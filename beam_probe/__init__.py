"""beam-probe: find memory leaks in a running BEAM node from outside it."""

# Kept literal rather than read from package metadata: importlib.metadata
# costs ~30 ms at start-up, a quarter of a one-query run's budget.
__version__ = "0.1.0"
