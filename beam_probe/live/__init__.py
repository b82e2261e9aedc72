"""Long-running faces that draw a terminal: top's full-screen view.

Imported by `beam-probe top` alone, when it draws: Textual costs ~170 ms
to import (measured here), which no other command pays (bench_startup).
"""
