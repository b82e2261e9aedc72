"""Decoding a 20 MB reply of mixed terms: our codec against erlang-py.

Target (issue 2): at most 0.5x erlang-py's time on the same bytes.
Run: python tests/bench_decode.py [RUNS]
"""

from __future__ import annotations

import sys

import erlang as erlang_py
from benchlib import median_seconds, report, start_node

from beam_probe.erldist import etf
from beam_probe.node.remote import ReplyLimits, attach

SIZE = 20 * 1024 * 1024


def main(runs: int = 5) -> int:
    with start_node() as node:
        with attach(node.node, node.cookie.encode(), timeout=120,
                    limits=ReplyLimits(1 << 30, 1 << 30)) as remote:
            data = remote.call("beam_probe_test_terms", "mixed", [SIZE])
    print(f"reply: {len(data) / 1e6:.1f} MB of mixed terms")
    # A bulk reply: far over the default limits for one reply.
    limits = dict(max_items=1 << 30, max_uncompressed=1 << 30)
    ours = median_seconds(lambda: etf.decode(data, **limits), runs)
    base = median_seconds(lambda: erlang_py.binary_to_term(data), runs)
    ok = report(f"decode (median of {runs})", ours, base, 0.5)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(*(int(a) for a in sys.argv[1:])))
