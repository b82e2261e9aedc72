"""What `inspect` costs the process and the node it looks into.

A gen_server whose state is a map of SIZE entries ({I => {I, <<"value">>}},
about 78 bytes an entry): `inspect` against the baseline every other tool
uses, sys:get_state/1 (observer, observer_cli and recon's state views),
run inside the node through erl_call, side by side, medians of RUNS. For
each: wall time, the rise of the node's erlang:memory(total) at its peak
(sampled every millisecond in the node), and the longest the gen_server
kept a caller waiting meanwhile (a process calling it every millisecond),
which is how long it was kept from its work.

Then a table of TABLE objects: `inspect --table`, sampled, its time
against --timeout, and the longest an insert and a lookup into the table
waited meanwhile (the table stays usable).

Then the hostile round's tables (tests/test_inspect_table.py tests them):
a compressed table read whole, and a table rewritten while it is read,
with the node's memory and pauses watched on the node.

Run: python tests/bench_inspect.py [SIZE] [--table TABLE] [--runs R]
     [--hostile OBJECTS] [--hostile-only]
Defaults: SIZE 1,000,000, TABLE 10,000,000 (about 1.5 GB of node memory),
OBJECTS 4,800 (95 MiB compressed, 1.5 GB as read).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

from benchlib import start_node
from conftest import run_measured

MB = 2 ** 20


def _erl_call(node, env: dict, *args: str, expr: str | None = None) -> str:
    return subprocess.run(["erl_call", "-sname", node.name, "-timeout",
                           "900", *args], input=expr, env=env, check=True,
                          capture_output=True, text=True).stdout.strip()


def _apply(node, env: dict, module: str, function: str, args: str) -> str:
    return _erl_call(node, env, "-a", f"{module} {function} {args}")


def _measured(node, env: dict, target: str, run) -> tuple[float, int, int]:
    """(seconds, peak memory rise in bytes, longest wait of a caller of
    ``target`` in microseconds) while ``run`` runs."""
    _apply(node, env, "beam_probe_workload", "peak_start", "[]")
    _apply(node, env, "beam_probe_inspect_fixture", "watch_start",
           f"[{target}]")
    time.sleep(0.2)
    started = time.perf_counter()
    run()
    elapsed = time.perf_counter() - started
    longest = int(_apply(node, env, "beam_probe_inspect_fixture",
                         "watch_stop", "[]"))
    rise = int(_apply(node, env, "beam_probe_workload", "peak_stop", "[]"))
    return elapsed, rise, longest


def _median(rows: list[tuple[float, int, int]], i: int) -> float:
    return statistics.median(row[i] for row in rows)


def bench_state(script: str, size: int, runs: int) -> None:
    with start_node() as node:
        env = dict(os.environ, HOME=node.home)
        _apply(node, env, "beam_probe_inspect_fixture", "big", f"[{size}]")
        # A process that has just been collected in full holds its data
        # in a young heap: the next collection, whoever's allocation
        # triggers it, moves it to an old heap (measured: 59 -> 81 MB, once;
        # flat after). The process settles with a first call, as it would
        # in service, before anything is measured.
        _erl_call(node, env, "-e", expr="erlang:garbage_collect("
                  "whereis(bp_big)), ok.\n")
        ours: list[tuple[float, int, int]] = []
        answers = []

        def inspect() -> None:
            code, out, err, _, _ = run_measured(
                [script, "inspect", node.node, "bp_big", "--format", "json",
                 "--timeout", "60"], env)
            if code != 0:
                raise SystemExit(f"inspect failed ({code}): {err}")
            answers.append(json.loads(out))

        def get_state() -> None:
            _erl_call(node, env, "-e", expr="_ = sys:get_state(bp_big), "
                      "ok.\n")
        def held() -> int:
            # erl_call -e answers {ok, Value}.
            answer = _erl_call(node, env, "-e", expr="element(2, "
                               "process_info(whereis(bp_big), memory)).\n")
            return int(answer.strip("{}").split(",")[-1])
        theirs: list[tuple[float, int, int]] = []
        settled = held()
        inspect()  # the first call after the full collection
        before = held()
        print(f"state of {size:,} entries: the gen_server holds "
              f"{settled / MB:.1f} MB after a full collection, "
              f"{before / MB:.1f} MB once a first inspect has made it "
              "collect again", flush=True)
        for _ in range(runs):
            ours.append(_measured(node, env, "bp_big", inspect))
        after = held()
        for _ in range(runs):
            theirs.append(_measured(node, env, "bp_big", get_state))
        state = answers[-1]["parts"][0]
        print(f"state of {size:,} entries: inspect "
              f"{_median(ours, 0):.2f} s (target < 2 s), node memory "
              f"+{_median(ours, 1) / MB:.2f} MB at its peak (target < 1 MB), "
              f"the gen_server kept a caller waiting "
              f"{_median(ours, 2) / 1000:.0f} ms at most (its own measure "
              f"of the walk: {statistics.median(a['total']['pause_ms'] for a in answers):.0f} ms); "
              f"estimated {state['bytes'] / MB:.1f} MB "
              f"({'sampled' if answers[-1]['total']['sampled'] else 'exact'})"
              f"; the gen_server's own memory {before / MB:.1f} MB before "
              f"{runs} runs, {after / MB:.1f} MB after", flush=True)
        print(f"state of {size:,} entries: sys:get_state/1 (baseline) "
              f"{_median(theirs, 0):.2f} s, node memory "
              f"+{_median(theirs, 1) / MB:.1f} MB at its peak, the "
              f"gen_server kept a caller waiting "
              f"{_median(theirs, 2) / 1000:.0f} ms at most", flush=True)
        print(f"ratios, inspect / sys:get_state: memory "
              f"{_median(ours, 1) / max(_median(theirs, 1), 1):.3f}, "
              f"longest wait {_median(ours, 2) / max(_median(theirs, 2), 1):.2f}",
              flush=True)


def bench_table(script: str, size: int, runs: int) -> None:
    with start_node() as node:
        env = dict(os.environ, HOME=node.home)
        started = time.perf_counter()
        _apply(node, env, "beam_probe_inspect_fixture", "big_table",
               f"[{size}]")
        print(f"table of {size:,} objects made in "
              f"{time.perf_counter() - started:.0f} s", flush=True)
        rows = []
        answers = []

        def inspect() -> None:
            code, out, err, _, _ = run_measured(
                [script, "inspect", node.node, "--table", "bp_big_table",
                 "--format", "json", "--timeout", "30"], env)
            if code != 0:
                raise SystemExit(f"inspect --table failed ({code}): {err}")
            answers.append(json.loads(out))
        for _ in range(runs):
            rows.append(_measured(node, env, "table", inspect))
        last = answers[-1]
        print(f"table of {size:,} objects: inspect --table "
              f"{_median(rows, 0):.2f} s (--timeout 30), "
              f"{last['seen']:,} objects read "
              f"({last['fraction']:.2%}, sampled: {last['sampled']}), "
              f"node memory +{_median(rows, 1) / MB:.1f} MB at its peak, "
              f"an insert and a lookup waited "
              f"{_median(rows, 2) / 1000:.1f} ms at most", flush=True)


def _watched(node, env: dict, script: str, table: str,
             *args: str) -> tuple[dict, dict]:
    """inspect --table TABLE, with the node watched meanwhile by
    tests/erl/beam_probe_table_fixture.erl (its memory, the table's
    words an object, a ticker's lateness, system_monitor's long_gc and
    long_schedule over 50 ms)."""
    _apply(node, env, "beam_probe_table_fixture", "watch_start", f"[{table}]")
    code, out, err, _, _ = run_measured(
        [script, "inspect", node.node, "--table", table, *args,
         "--format", "json", "--timeout", "300"], env)
    if code != 0:
        raise SystemExit(f"inspect --table failed ({code}): {err}")
    watched = _erl_call(node, env, "-a",
                        "beam_probe_table_fixture watch_stop []")
    figures = {k.strip(): int(v) for k, v in (
        item.split("=>") for item in watched.strip("#{}").split(","))}
    return json.loads(out), figures


def bench_hostile_tables(script: str, packed: int) -> None:
    """The hostile round's tables: a compressed one of ``packed`` objects
    of 20,000 small integers (20 KB stored, 320 KB read: 4,800 are the
    round's 95.5 MiB), read whole; and a table of 200,000 objects
    rewritten 100 times a millisecond while it is read."""
    with start_node() as node:
        env = dict(os.environ, HOME=node.home)
        words = int(_apply(node, env, "beam_probe_table_fixture", "packed",
                           f"[bp_packed, {packed}, 20000]"))
        before = int(_erl_call(node, env, "-a", "erlang memory [total]"))
        result, seen = _watched(node, env, script, "bp_packed",
                                "--budget", str(packed))
        print(f"compressed table of {words * 8 / MB:.1f} MiB stored "
              f"({packed * 20000 * 16 / MB:,.0f} MiB as read), node "
              f"{before / MB:.0f} MB: inspect --table read "
              f"{result['seen']:,} objects; node memory "
              f"+{seen['memory_rise'] / MB:.1f} MB at its peak (the round: "
              f"497 -> 2,868 MB), longest collection "
              f"{seen['long_gc_ms']} ms and run without a yield "
              f"{seen['long_schedule_ms']} ms (0: none over 50 ms), a "
              f"ticker late {seen['late_ms']} ms at most", flush=True)
        _apply(node, env, "beam_probe_table_fixture", "churn",
               "[bp_churn, 200000]")
        try:
            result, seen = _watched(node, env, script, "bp_churn",
                                    "--budget", "50000")
        finally:
            _erl_call(node, env, "-e", expr="beam_probe_table_fixture:"
                      "churn_stop(whereis(bp_churn_writer)).\n")
        print(f"table of 200,000 objects rewritten while read: "
              f"{result['seen']:,} objects read, the table's words an "
              f"object {seen['table_base'] / 1000:.1f} before and "
              f"{seen['table_peak'] / 1000:.1f} at most (the round, fixed: "
              f"64.5 -> 123 MB), node memory +{seen['memory_rise'] / MB:.1f} "
              f"MB, longest collection {seen['long_gc_ms']} ms, run without "
              f"a yield {seen['long_schedule_ms']} ms, a ticker late "
              f"{seen['late_ms']} ms at most; changed: {result['changed']}",
              flush=True)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("size", nargs="?", type=int, default=1_000_000)
    parser.add_argument("--table", type=int, default=10_000_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--hostile", type=int, default=4_800,
                        help="the compressed table's objects (0: skip)")
    parser.add_argument("--hostile-only", action="store_true")
    opts = parser.parse_args()
    script = os.path.join(os.path.dirname(sys.executable), "beam-probe")
    if not os.path.exists(script):
        script = shutil.which("beam-probe")
    if opts.hostile:
        bench_hostile_tables(script, opts.hostile)
    if opts.hostile_only:
        return 0
    bench_state(script, opts.size, max(1, opts.runs))
    if opts.table:
        bench_table(script, opts.table, max(1, opts.runs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
