"""watch: what a sample costs the node and beam-probe, and how well it keeps
its interval.

1. The node's cost of a sample without GC, on idle nodes of SIZE processes
   (default 0, 100,000 and 1,000,000): the helper's own time on the node
   (node_ms), and the whole round trip less a plain rpc's, side by side.
   Bound: under 5 ms, and not growing with the process count.
2. beam-probe's own CPU per sample (decode, record, rule, chart series;
   bound: under 5 ms), apart from drawing a 120 x 40 frame of the live
   view (a terminal only), and its RSS after 1,000 and after 10,000
   samples: bounded buffers keep it flat.
   The leak rules alone at their worst: every category rising at every
   sample, so that the trend rule counts its Theil-Sen slopes each time
   (on the floors and on the raw values), against a steady series.
3. A watch at 0.2 s on an idle node: the intervals between samples.
   Bound: the mean within 10% of 0.2 s.

Medians throughout. Run: python tests/bench_watch.py [SIZE ...]
A node of 1M processes needs about 3 GB.
"""

from __future__ import annotations

import argparse
import io
import statistics
import time

from benchlib import loaded_node, start_node

from beam_probe.probes.watch import Watch, sample_node
from beam_probe.node.remote import attach
from beam_probe.text.watch import frame

BOUND_MS = 5.0


def rss() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def node_cost(size: int, runs: int) -> tuple[float, float]:
    with loaded_node(size) as (_node, remote, count):
        sample_node(remote)  # parse the helper once
        on_node, round_trip, plain = [], [], []
        for _ in range(runs):
            started = time.perf_counter()
            remote.call("erlang", "node")
            plain.append(time.perf_counter() - started)
            started = time.perf_counter()
            raw = sample_node(remote)
            round_trip.append(time.perf_counter() - started)
            on_node.append(raw["sample_us"] / 1000)
        extra = (statistics.median(round_trip)
                 - statistics.median(plain)) * 1000
        ms = statistics.median(on_node)
        print(f"{count:>9} processes: node_ms {ms:.2f}, round trip "
              f"{statistics.median(round_trip) * 1000:.2f} ms against "
              f"{statistics.median(plain) * 1000:.2f} ms for a plain rpc "
              f"(+{extra:.2f} ms)")
        return ms, extra


def own_cost(samples: int) -> tuple[float, float, int, int]:
    with start_node() as node:
        watch = Watch(lambda: attach(node.node, node.cookie.encode()),
                      interval=0.2, count=samples, sleep=lambda s: None)
        sink = io.StringIO()
        cpu, drawing = [], []
        marks = {}
        clock = time.process_time()
        for i, _ in enumerate(watch.samples(), 1):
            now = time.process_time()
            cpu.append(now - clock)
            sink.seek(0)
            sink.write("\n".join(frame(watch, 120, 40)))
            clock = time.process_time()
            drawing.append(clock - now)
            if i in (1000, samples):
                marks[i] = rss()
        watch.close()
    return (statistics.median(cpu) * 1000,
            statistics.median(drawing) * 1000, marks[1000], marks[samples])


def rule_cost(samples: int = 2000) -> tuple[float, float]:
    """The trend rule's milliseconds a sample, seven categories through
    floors confirmed by the raw values (as watch without --gc): every
    category rising, and every one steady."""
    import random
    import timeit

    from beam_probe.probes.trend import LEAK_CATEGORIES, TrendRule

    out = []
    rng = random.Random(1)
    for rising in (True, False):
        rule = TrendRule(confirm=True)
        values = (lambda i: {c: 1000 + i for c in LEAK_CATEGORIES}) \
            if rising else (lambda i: {c: 1000 + rng.randint(-5, 5)
                                       for c in LEAK_CATEGORIES})
        for i in range(200):  # a full window first
            rule.add(i, values(i), values(i))
        step = iter(range(200, 200 + 10 * samples))

        def one() -> None:
            i = next(step)
            seen = values(i)
            rule.add(i, seen, seen)

        out.append(min(timeit.repeat(one, number=samples // 5, repeat=5))
                   / (samples // 5) * 1000)
    return out[0], out[1]


def interval_keeping(count: int) -> tuple[float, float]:
    with start_node() as node:
        watch = Watch(lambda: attach(node.node, node.cookie.encode()),
                      interval=0.2, count=count)
        epochs = [s["epoch"] for s in watch.samples()]
        watch.close()
    gaps = [b - a for a, b in zip(epochs, epochs[1:])]
    return statistics.mean(gaps), max(gaps)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("sizes", nargs="*", type=int,
                        default=[0, 100_000, 1_000_000])
    parser.add_argument("--runs", type=int, default=21)
    parser.add_argument("--samples", type=int, default=10_000)
    opts = parser.parse_args()
    ok = True
    print("1. the node's cost of a sample, no GC")
    costs = [node_cost(size, opts.runs) for size in opts.sizes]
    worst = max(ms for ms, _ in costs)
    ok &= worst < BOUND_MS
    print(f"   worst node_ms {worst:.2f} (bound < {BOUND_MS}) "
          f"{'ok' if worst < BOUND_MS else 'OVER BOUND'}")
    print(f"2. beam-probe itself, {opts.samples} samples")
    cpu, drawing, at_1000, at_end = own_cost(opts.samples)
    grew = at_end / at_1000
    ok &= cpu < BOUND_MS and grew < 1.05
    print(f"   CPU per sample {cpu:.2f} ms (bound < {BOUND_MS}), drawing a "
          f"120 x 40 frame {drawing:.2f} ms more; RSS "
          f"{at_1000 / 2**20:.1f} MiB at 1000, {at_end / 2**20:.1f} MiB at "
          f"{opts.samples} ({grew:.3f}x, bound < 1.05)")
    worst_rule, quiet_rule = rule_cost()
    ok &= worst_rule < BOUND_MS
    print(f"   the trend rule: {worst_rule:.2f} ms a sample with all seven "
          f"categories rising, {quiet_rule:.3f} ms with none")
    print("3. interval at 0.2 s, 50 samples")
    mean, worst_gap = interval_keeping(50)
    ok &= abs(mean - 0.2) / 0.2 < 0.10
    print(f"   mean {mean * 1000:.1f} ms, longest {worst_gap * 1000:.1f} ms "
          f"(bound: mean within 10% of 200 ms)")
    print("all within bounds" if ok else "SOME OVER BOUND")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
