"""What `inspect` of a process costs the node, in the shapes issue 37's
tester used: a state of ~300 MB (fresh in its young heap with little room
left, then in its old heap), a dictionary of a million keys, a gen_event
of 2,000 handlers with a client calling it, processes capped by
max_heap_size.

For each, while inspect runs, the node's own figures from a ticker in it
(tests/erl/beam_probe_inspect_fixture.erl): the longest gap of a 1 ms
timer, the rise of erlang:memory(total) at its highest, and the longest
long_gc and long_schedule that erlang:system_monitor/2 reported (over 20
ms; 0 if none); and inspect's own measure of the pause it caused.

Run: PYTHONPATH=. python tests/bench_inspect_process.py [--erl ERL]
[--size N] (N list elements, 7,500,000 by default: ~300 MB of state;
PYTHONPATH so that the checkout's beam_probe runs, not an installed one).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from benchlib import start_node

from beam_probe.erldist.terms import Atom
from beam_probe.node.remote import attach
from conftest import run_here

FIXTURE = "beam_probe_inspect_fixture"
MB = 2 ** 20


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--erl", default="erl")
    parser.add_argument("--size", type=int, default=7_500_000)
    args = parser.parse_args()
    with start_node(erl=args.erl) as node, \
            attach(node.node, node.cookie.encode(), timeout=600) as remote:
        def call(function: str, *a):
            return remote.call(FIXTURE, function, list(a), timeout=600)

        def inspect(*a: str) -> dict:
            result = run_here("inspect", node.node, *a, "--format", "json",
                              node=node)
            assert result.returncode == 0, result.stderr
            return json.loads(result.stdout)

        def measured(label: str, run) -> dict:
            call("ticker_start")
            started = time.perf_counter()
            answer = run()
            wall = time.perf_counter() - started
            figures = {str(k): v for k, v in call("ticker_stop").items()}
            total = answer["total"]
            print(f"{label}: wall {wall:.2f} s, pause (inspect's own) "
                  f"{total['pause_ms']} ms, ticker gap "
                  f"{figures['gap_us'] / 1000:.1f} ms, node peak "
                  f"+{figures['peak_rise'] / MB:.1f} MB, long_gc "
                  f"{figures['long_gc']} ms, long_schedule "
                  f"{figures['long_schedule']} ms; "
                  f"{(answer['state'] or 'walked')[:70]}", flush=True)
            return answer

        def heap(pid) -> int:
            return remote.call("erlang", "process_info",
                               [pid, Atom("total_heap_size")])[1]

        release = remote.call("erlang", "system_info",
                              [Atom("otp_release")])
        print(f"node {release}, {os.cpu_count()} cores")
        pid = call("long_list", Atom("bp_long"), args.size)
        remote.call("erlang", "garbage_collect", [pid], timeout=600)
        gc = dict(remote.call("erlang", "process_info",
                              [pid, Atom("garbage_collection_info")])[1])
        free = gc[Atom("heap_block_size")] - gc[Atom("heap_size")] \
            - gc[Atom("stack_size")]
        remote.call("gen_server", "call",
                    [pid, (Atom("garbage"), max(0, free - 100_000)),
                     Atom("infinity")], timeout=600)
        print(f"a list of {args.size:,} elements, "
              f"{heap(pid) * 8 / MB:.0f} MB of heap")
        measured("  all in a full young heap", lambda: inspect("bp_long"))
        call("promote", Atom("bp_long"))
        for i in range(3):
            measured(f"  in its old heap, run {i + 1}",
                     lambda: inspect("bp_long"))
        remote.call("erlang", "exit", [pid, Atom("kill")])

        pid = call("many_keys", Atom("bp_keys"), 1_000_000)
        call("promote", Atom("bp_keys"))
        before = heap(pid)
        for i in range(2):
            measured(f"a dictionary of 1,000,000 keys, run {i + 1}",
                     lambda: inspect("bp_keys"))
        print(f"  its heap {before * 8 / MB:.0f} -> {heap(pid) * 8 / MB:.0f}"
              " MB")
        remote.call("erlang", "exit", [pid, Atom("kill")])

        call("handlers", Atom("bp_events"), 2000)
        call("caller_start", Atom("bp_events"))
        answer = measured("a gen_event of 2,000 handlers",
                          lambda: inspect("bp_events", "--width", "10"))
        calls = {str(k): v for k, v in call("caller_stop").items()}
        print(f"  its client: {calls}; {len(answer['parts'])} rows")

        for words, cap in ((480, 20_000), (480, 150_000),
                           (300_000, 600_000)):
            name = Atom(f"bp_cap_{words}_{cap}")
            pid = call("capped", name, words, cap)
            answer = inspect(str(name))
            alive = remote.call("erlang", "is_process_alive", [pid])
            said = (answer["state"] or "walked")[:90]
            print(f"capped at {cap:,} words, {heap(pid) if alive else 0:,} "
                  f"of heap: alive {alive}; {said}")


if __name__ == "__main__":
    sys.exit(main())
