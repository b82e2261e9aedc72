"""beam-probe check: thresholds, trend history, and plugin output."""
