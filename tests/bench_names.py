"""What naming rows from their dictionary costs before OTP 26.2 (issue 38,
item 1; beam_probe_lib.erl's describe/1, beam_probe_top.erl's filter).

1. The copy itself, on a node of this machine's OTP (25 here): a proc_lib
   gen_server named only in its dictionary, with a heap of ~24 MB (a busy
   RabbitMQ queue's 16-24 MB), and process_info(Q, dictionary) timed on
   the node (median of RUNS): its time, its bytes (external_size;
   describe/1 charges the budget at most 16 times that) against the
   heap's, and a proc-count round trip that names the queue.
2. top's filter at SIZE processes, PROC_LIB of them proc_lib gen_servers
   named in their dictionaries: the pass with a filter that names them
   (each pass reads at most 2,000 unknown ones' dictionaries, then
   matches the names kept) against the pass without one, and how many
   passes until the filter has found every one.

Run:
    python tests/bench_names.py [--size 100000] [--proc-lib 5000] [--runs 7]
"""

from __future__ import annotations

import argparse
import statistics
import time

from benchlib import loaded_node

from beam_probe.erldist.terms import Atom
from beam_probe.probes.processes import proc_count
from beam_probe.probes.top import TopFeed

FIXTURE = "beam_probe_names_fixture"


def on_node(remote, module: str, function: str, args: list) -> float:
    """One call timed on the node (timer:tc), seconds."""
    micros, _ = remote.call("timer", "tc", [Atom(module), Atom(function),
                                            args], timeout=300)
    return micros / 1e6


def copy_cost(runs: int) -> None:
    with loaded_node(0) as (_node, remote, _count):
        queue, heap = remote.call(FIXTURE, "queue",
                                  [b"lq.104", (3_000_000, 0)], timeout=300)
        dictionary = remote.call("erlang", "process_info",
                                 [queue, Atom("dictionary")])
        size = remote.call("erlang", "external_size", [dictionary])
        took = statistics.median(
            on_node(remote, "erlang", "process_info",
                    [queue, Atom("dictionary")]) for _ in range(runs))
        heap_read = statistics.median(
            on_node(remote, "erlang", "process_info",
                    [queue, Atom("total_heap_size")]) for _ in range(runs))
        named = []
        for _ in range(runs):
            started = time.perf_counter()
            result = proc_count(remote, "memory", 40)
            named.append(time.perf_counter() - started)
        label = next((p["label"] for p in result["processes"]
                      if p.get("label")), "unnamed")
        print(f"a queue of {heap / 2**20:.1f} MiB of heap: its dictionary "
              f"copied in {took * 1e6:.0f} us, {size:,} bytes "
              f"(external_size; the budget is charged at most 16 times "
              f"that), its heap read "
              f"in {heap_read * 1e6:.0f} us; proc-count memory 40 naming it "
              f"({label}) {statistics.median(named) * 1000:.0f} ms "
              "round trip")


def filter_cost(size: int, proc_lib: int, runs: int) -> None:
    with loaded_node(size) as (_node, remote, count):
        for i in range(proc_lib):
            remote.call(FIXTURE, "queue",
                        [f"lq.{i}".encode(), (100, 0)], timeout=60)
        count += proc_lib
        plain = TopFeed(lambda: remote, interval=2.0, n=40)
        plain.open()
        plain.refresh()
        bare = [plain.refresh()["frames"][0]["pass_ms"]
                for _ in range(runs)]
        feed = TopFeed(lambda: remote, interval=2.0, n=40,
                       filter_text="bpt_queue")
        feed.open()
        passes, matched, filtered = 0, 0, []
        while matched < proc_lib and passes < 100:
            frame = feed.refresh()["frames"][0]
            passes, matched = passes + 1, frame["matched"]
            filtered.append(frame["pass_ms"])
        steady = [feed.refresh()["frames"][0]["pass_ms"]
                  for _ in range(runs)]
        b, f, s = (statistics.median(x) for x in (bare, filtered, steady))
        print(f"{count:,} processes, {proc_lib:,} proc_lib named in their "
              f"dictionaries: top's pass {b:.0f} ms without a filter; with "
              f"one, {f:.0f} ms while it reads (all {matched:,} found in "
              f"{passes} passes), {s:.0f} ms once every name is kept: "
              f"{f / b:.2f}x and {s / b:.2f}x")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--size", type=int, default=100_000)
    parser.add_argument("--proc-lib", type=int, default=5_000)
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    copy_cost(args.runs)
    filter_cost(args.size, args.proc_lib, args.runs)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
