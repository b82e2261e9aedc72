"""A scrape's figures as Prometheus metric families: pure, no I/O.

The names are prometheus.erl 6.x's (its VM collectors, renamed in 6.0 to
what promtool accepts: gauges without `_total`, counters with it), so a
dashboard built on an in-node exporter reads ours unchanged. ``compat``
adds the pre-6.0 names beside them, the ones RabbitMQ's bundled
Erlang-BEAM dashboard still queries (rabbitmq-server, deps/
rabbitmq_prometheus/docker/grafana/dashboards/Erlang-BEAM.json): a
counter named without `_total` is written untyped, since a typed counter
always gets the suffix in the exposition, and a gauge named `_total`
fails promtool's lint, as it did for prometheus.erl.

Ours are `beam_probe_*`: whether the node answered, how long the scrape
took, and what no in-node exporter gives: the allocators' usage and the
alloc verdict, the largest processes by name (opt-in), and the binary
memory held by large holders that did not run between two scrapes.
"""

from __future__ import annotations

from typing import Any, Iterable, Iterator, Mapping, Sequence

from prometheus_client.core import (CounterMetricFamily, GaugeMetricFamily,
                                    Metric, UnknownMetricFamily)

from beam_probe.probes.results import TopProcesses, ValueRow, VmFigures

GAUGE, COUNTER, UNTYPED = "gauge", "counter", "untyped"

# name: (type, help, label names). Counters' names carry `_total`.
SPECS: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "erlang_vm_memory_bytes": (
        GAUGE, "Memory allocated by the emulator: processes and system "
        "(erlang:memory/0).", ("kind",)),
    "erlang_vm_memory_system_bytes": (
        GAUGE, "Memory not directly related to a process, by use.",
        ("usage",)),
    "erlang_vm_memory_processes_bytes": (
        GAUGE, "Memory allocated for processes, used and free.", ("usage",)),
    "erlang_vm_memory_atom_bytes": (
        GAUGE, "Memory allocated for atoms, used and free.", ("usage",)),
    "erlang_vm_ets_tables": (GAUGE, "ETS tables.", ()),
    "erlang_vm_dets_tables": (
        GAUGE, "DETS tables (0 where the DETS server is not running).", ()),
    "erlang_vm_processes": (
        GAUGE, "Processes on the node, beam-probe's own left out.", ()),
    "erlang_vm_process_limit": (GAUGE, "The most processes at once.", ()),
    "erlang_vm_ports": (
        GAUGE, "Ports on the node, beam-probe's connection left out.", ()),
    "erlang_vm_port_limit": (GAUGE, "The most ports at once.", ()),
    "erlang_vm_atoms": (GAUGE, "Atoms in the atom table.", ()),
    "erlang_vm_atom_limit": (GAUGE, "The most atoms.", ()),
    "erlang_vm_ets_limit": (GAUGE, "The most ETS tables.", ()),
    "erlang_vm_schedulers": (GAUGE, "Scheduler threads.", ()),
    "erlang_vm_schedulers_online": (GAUGE, "Schedulers online.", ()),
    "erlang_vm_dirty_cpu_schedulers": (
        GAUGE, "Dirty CPU scheduler threads.", ()),
    "erlang_vm_dirty_cpu_schedulers_online": (
        GAUGE, "Dirty CPU schedulers online.", ()),
    "erlang_vm_dirty_io_schedulers": (
        GAUGE, "Dirty I/O scheduler threads.", ()),
    "erlang_vm_logical_processors": (
        GAUGE, "Logical processors configured.", ()),
    "erlang_vm_logical_processors_available": (
        GAUGE, "Logical processors available to the runtime.", ()),
    "erlang_vm_logical_processors_online": (
        GAUGE, "Logical processors online.", ()),
    "erlang_vm_thread_pool_size": (GAUGE, "Async threads.", ()),
    "erlang_vm_wordsize_bytes": (GAUGE, "Size of a term word.", ()),
    "erlang_vm_time_correction": (
        GAUGE, "1 if time correction is enabled.", ()),
    "erlang_vm_smp_support": (
        GAUGE, "1 if the emulator has SMP support (always, since OTP 21).",
        ()),
    "erlang_vm_threads": (
        GAUGE, "1 if the emulator has thread support (always, since OTP "
        "21).", ()),
    "erlang_vm_statistics_bytes_output_total": (
        COUNTER, "Bytes output to ports.", ()),
    "erlang_vm_statistics_bytes_received_total": (
        COUNTER, "Bytes received through ports.", ()),
    "erlang_vm_statistics_context_switches_total": (
        COUNTER, "Context switches since the node started.", ()),
    "erlang_vm_statistics_garbage_collection_number_of_gcs_total": (
        COUNTER, "Garbage collections since the node started.", ()),
    "erlang_vm_statistics_garbage_collection_words_reclaimed_total": (
        COUNTER, "Words reclaimed by garbage collection.", ()),
    "erlang_vm_statistics_garbage_collection_bytes_reclaimed_total": (
        COUNTER, "Bytes reclaimed by garbage collection.", ()),
    "erlang_vm_statistics_reductions_total": (
        COUNTER, "Reductions since the node started.", ()),
    # In milliseconds, as prometheus.erl 6.x writes them under these names
    # (its rename kept statistics/1's values): the same numbers as an
    # in-node exporter's, for the same dashboards and alerts.
    "erlang_vm_statistics_runtime_seconds_total": (
        COUNTER, "Run time of all the runtime's threads, in milliseconds "
        "despite the name, as prometheus.erl 6.x writes it.", ()),
    "erlang_vm_statistics_wallclock_time_seconds_total": (
        COUNTER, "Wall-clock time since the node started, in milliseconds "
        "despite the name, as prometheus.erl 6.x writes it.", ()),
    "erlang_vm_statistics_run_queues_length": (
        GAUGE, "Processes and ports ready to run on the normal run "
        "queues.", ()),
    "erlang_vm_statistics_dirty_cpu_run_queue_length": (
        GAUGE, "Length of the dirty CPU run queue.", ()),
    "erlang_vm_statistics_dirty_io_run_queue_length": (
        GAUGE, "Length of the dirty I/O run queue.", ()),
    "erlang_vm_allocators": (
        GAUGE, "Carriers and blocks of each allocator instance (erts_alloc): "
        "usage carriers and blocks are counts, carriers_size and "
        "blocks_size bytes.", ("alloc", "instance_no", "kind", "usage")),
    # Ours.
    "beam_probe_up": (GAUGE, "1 if the node answered the scrape.", ()),
    "beam_probe_scrape_duration_seconds": (
        GAUGE, "How long the scrape took, connecting included.", ()),
    "beam_probe_node_work_seconds": (
        GAUGE, "Time the node spent on the scrape's work.", ()),
    "beam_probe_node_info": (
        GAUGE, "The node's release (always 1).",
        ("otp_release", "erts_version")),
    "beam_probe_resident_memory_bytes": (
        GAUGE, "The node's resident set (VmRSS; Linux only).", ()),
    "beam_probe_allocator_used_bytes": (
        GAUGE, "Bytes in live blocks of each allocator type.", ("alloc",)),
    "beam_probe_allocator_allocated_bytes": (
        GAUGE, "Bytes in carriers of each allocator type.", ("alloc",)),
    "beam_probe_allocator_usage_ratio": (
        GAUGE, "Used over allocated, per allocator type.", ("alloc",)),
    "beam_probe_memory_verdict": (
        GAUGE, "alloc's verdict, 1 for the case that holds: in_use (find "
        "who holds it), fragmentation or peak (in alloc), outside (RSS far "
        "above the allocators: NIFs or drivers).", ("verdict", "alloc")),
    "beam_probe_processes_scanned": (
        GAUGE, "Processes the top module walked.", ()),
    "beam_probe_top_process_memory_bytes": (
        GAUGE, "The largest processes by memory (rank 1 is the largest).",
        ("rank", "process")),
    "beam_probe_top_process_binary_memory_bytes": (
        GAUGE, "The largest holders of refc binaries: the bytes each "
        "holds, each binary once (not recon's per-reference "
        "binary_memory).", ("rank", "process")),
    "beam_probe_top_process_message_queue_length": (
        GAUGE, "The longest message queues.", ("rank", "process")),
    "beam_probe_idle_holder_binary_bytes": (
        GAUGE, "Binary bytes held by the largest binary holders that did "
        "not run since the previous top scrape (no reductions: they have "
        "not collected either).", ()),
    "beam_probe_idle_holders": (
        GAUGE, "How many of the largest binary holders did not run since "
        "the previous top scrape.", ()),
}

# The pre-6.0 names (--compat): new name -> old name. A counter whose old
# name has no `_total` is written untyped under it, as a typed counter
# always gets the suffix in the exposition.
COMPAT: dict[str, str] = {
    "erlang_vm_memory_bytes": "erlang_vm_memory_bytes_total",
    "erlang_vm_memory_system_bytes": "erlang_vm_memory_system_bytes_total",
    "erlang_vm_memory_processes_bytes":
        "erlang_vm_memory_processes_bytes_total",
    "erlang_vm_memory_atom_bytes": "erlang_vm_memory_atom_bytes_total",
    "erlang_vm_processes": "erlang_vm_process_count",
    "erlang_vm_ports": "erlang_vm_port_count",
    "erlang_vm_atoms": "erlang_vm_atom_count",
    "erlang_vm_statistics_context_switches_total":
        "erlang_vm_statistics_context_switches",
    "erlang_vm_statistics_garbage_collection_number_of_gcs_total":
        "erlang_vm_statistics_garbage_collection_number_of_gcs",
    "erlang_vm_statistics_garbage_collection_words_reclaimed_total":
        "erlang_vm_statistics_garbage_collection_words_reclaimed",
    "erlang_vm_statistics_garbage_collection_bytes_reclaimed_total":
        "erlang_vm_statistics_garbage_collection_bytes_reclaimed",
    "erlang_vm_statistics_runtime_seconds_total":
        "erlang_vm_statistics_runtime_milliseconds",
    "erlang_vm_statistics_wallclock_time_seconds_total":
        "erlang_vm_statistics_wallclock_time_milliseconds",
    "erlang_vm_statistics_run_queues_length":
        "erlang_vm_statistics_run_queues_length_total",
    # RabbitMQ 3.8-3.13 write these (prometheus.erl before 6.0, its memory
    # collector): gauges of the ETS and DETS tables' counts (issue 38).
    "erlang_vm_ets_tables": "erlang_vm_memory_ets_tables",
    "erlang_vm_dets_tables": "erlang_vm_memory_dets_tables",
}
# The help prometheus.erl gave a pre-6.0 name, where it differs in kind
# from the 6.x one's.
COMPAT_HELP: dict[str, str] = {
    "erlang_vm_memory_ets_tables": "Erlang VM ETS Tables count.",
    "erlang_vm_memory_dets_tables": "Erlang VM DETS Tables count.",
}

VERDICTS = ("in_use", "fragmentation", "peak", "outside")
# Which of erlang:memory()'s kinds make up system memory's usages.
SYSTEM_USAGES = ("atom", "binary", "code", "ets")
# erlang_vm_allocators' usages: index in each kind's eight counters.
ALLOCATOR_USAGES = (("blocks", 0), ("blocks_size", 2), ("carriers", 4),
                    ("carriers_size", 6))
COUNTS = (("erlang_vm_processes", "process_count"),
          ("erlang_vm_process_limit", "process_limit"),
          ("erlang_vm_ports", "port_count"),
          ("erlang_vm_port_limit", "port_limit"),
          ("erlang_vm_atoms", "atom_count"),
          ("erlang_vm_atom_limit", "atom_limit"),
          ("erlang_vm_ets_tables", "ets_count"),
          ("erlang_vm_ets_limit", "ets_limit"),
          ("erlang_vm_schedulers", "schedulers"),
          ("erlang_vm_schedulers_online", "schedulers_online"),
          ("erlang_vm_dirty_cpu_schedulers", "dirty_cpu_schedulers"),
          ("erlang_vm_dirty_cpu_schedulers_online",
           "dirty_cpu_schedulers_online"),
          ("erlang_vm_dirty_io_schedulers", "dirty_io_schedulers"),
          ("erlang_vm_logical_processors", "logical_processors"),
          ("erlang_vm_logical_processors_available",
           "logical_processors_available"),
          ("erlang_vm_logical_processors_online",
           "logical_processors_online"),
          ("erlang_vm_thread_pool_size", "thread_pool_size"),
          ("erlang_vm_wordsize_bytes", "wordsize"))
STATISTICS = (("erlang_vm_statistics_bytes_output_total", "bytes_output"),
              ("erlang_vm_statistics_bytes_received_total",
               "bytes_received"),
              ("erlang_vm_statistics_context_switches_total",
               "context_switches"),
              ("erlang_vm_statistics_garbage_collection_number_of_gcs_total",
               "gcs"),
              ("erlang_vm_statistics_garbage_collection_words_reclaimed_total",
               "words_reclaimed"),
              ("erlang_vm_statistics_reductions_total", "reductions"),
              ("erlang_vm_statistics_run_queues_length", "run_queue"))
RANKED = (("beam_probe_top_process_memory_bytes", "memory"),
          ("beam_probe_top_process_binary_memory_bytes", "binary_memory"),
          ("beam_probe_top_process_message_queue_length",
           "message_queue_len"))


class Families:
    """The families of one exposition, filled series by series. ``extra``
    are label names every series carries first (``node`` for a cluster
    target); ``compat`` copies the 6.x series to their pre-6.0 names."""

    def __init__(self, extra: Sequence[str] = (), compat: bool = False
                 ) -> None:
        self.extra = tuple(extra)
        self.compat = compat
        # Gauge, Counter and Unknown families: each has add_metric.
        self._families: dict[str, Any] = {}

    def add(self, name: str, value: float, labels: Sequence[str] = (),
            extra: Sequence[str] = ()) -> None:
        self._family(name).add_metric([*extra, *labels], value)
        old = COMPAT.get(name) if self.compat else None
        if old is not None:
            self._family(old, name).add_metric([*extra, *labels], value)

    def _family(self, name: str, spec_of: str | None = None) -> Any:
        family = self._families.get(name)
        if family is None:
            kind, doc, labels = SPECS[spec_of or name]
            doc = COMPAT_HELP.get(name, doc)
            names = [*self.extra, *labels]
            if spec_of is not None and (kind == COUNTER
                                        or not name.endswith("_total")):
                # A pre-6.0 name: its counter had no `_total`, which a
                # typed counter always gets; untyped keeps it as it was.
                kind = UNTYPED if kind == COUNTER else kind
            cls = {GAUGE: GaugeMetricFamily, COUNTER: CounterMetricFamily,
                   UNTYPED: UnknownMetricFamily}[kind]
            family = self._families[name] = cls(name, doc, labels=names)
        return family

    def __iter__(self) -> Iterator[Metric]:
        return iter(self._families.values())


def vm_series(out: Families, figures: VmFigures,
              extra: Sequence[str] = ()) -> None:
    """The default scrape's series of one node."""
    memory = figures["memory"]

    def add(name: str, value: float, *labels: str) -> None:
        out.add(name, value, labels, extra)

    add("erlang_vm_memory_bytes", memory["system"], "system")
    add("erlang_vm_memory_bytes", memory["processes"], "processes")
    for usage in SYSTEM_USAGES:
        add("erlang_vm_memory_system_bytes", memory[usage], usage)
    add("erlang_vm_memory_system_bytes",
        max(0, memory["system"] - sum(memory[u] for u in SYSTEM_USAGES)),
        "other")
    add("erlang_vm_memory_processes_bytes", memory["processes_used"], "used")
    add("erlang_vm_memory_processes_bytes",
        max(0, memory["processes"] - memory["processes_used"]), "free")
    add("erlang_vm_memory_atom_bytes", memory["atom_used"], "used")
    add("erlang_vm_memory_atom_bytes",
        max(0, memory["atom"] - memory["atom_used"]), "free")
    add("erlang_vm_dets_tables", figures["dets_tables"])
    counts = figures["counts"]
    for name, key in COUNTS:
        value = counts.get(key)
        if value is not None:
            add(name, value)
    add("erlang_vm_time_correction", 1 if figures["time_correction"] else 0)
    add("erlang_vm_smp_support", 1)
    add("erlang_vm_threads", 1)
    stats = figures["statistics"]
    for name, key in STATISTICS:
        add(name, stats[key])
    wordsize = counts.get("wordsize") or 8
    add("erlang_vm_statistics_garbage_collection_bytes_reclaimed_total",
        stats["words_reclaimed"] * wordsize)
    add("erlang_vm_statistics_runtime_seconds_total", stats["runtime_ms"])
    add("erlang_vm_statistics_wallclock_time_seconds_total",
        stats["wall_clock_ms"])
    for name, key in (("erlang_vm_statistics_dirty_cpu_run_queue_length",
                       "dirty_cpu_run_queue"),
                      ("erlang_vm_statistics_dirty_io_run_queue_length",
                       "dirty_io_run_queue")):
        queue = figures[key]  # type: ignore[literal-required]
        if queue is not None:
            add(name, queue)
    for item in figures["allocators"]:
        for kind in ("mbcs", "mbcs_pool", "sbcs"):
            numbers: list[int] = item[kind]
            for usage, index in ALLOCATOR_USAGES:
                add("erlang_vm_allocators", numbers[index], item["type"],
                    str(item["instance"]), kind, usage)
    add("beam_probe_node_info", 1, figures["otp_release"],
        figures["erts_version"])
    if figures["rss"] is not None:
        add("beam_probe_resident_memory_bytes", figures["rss"])
    for t in figures["allocator_types"]:
        add("beam_probe_allocator_used_bytes", t["used"], t["type"])
        add("beam_probe_allocator_allocated_bytes", t["allocated"], t["type"])
        add("beam_probe_allocator_usage_ratio", t["usage"], t["type"])
    case = figures["verdict"]["case"]
    for verdict in VERDICTS:
        add("beam_probe_memory_verdict", 1 if verdict == case else 0,
            verdict, (figures["verdict"]["allocator"] or "")
            if verdict == case else "")
    add("beam_probe_node_work_seconds", figures["node_ms"] / 1000)


def process_label(row: ValueRow) -> str:
    """What names a process in a label: its kind, never which one. Its
    registered name; else its process_name's first element
    (rabbit_amqqueue_process for every queue, on every release: before
    OTP 26.2 read from a copy of the dictionary); else what started it
    (proc_lib's '$initial_call' where it was read, else the initial
    call). Never its pid, the rest of its process_name (<<"lq.104">>),
    nor the label a process gives itself (RabbitMQ's name a connection
    by its peer's address and port): any would make a series per process
    that ever ranked."""
    return row["name"] or row.get("kind") or row["initial_call"] or \
        "unknown"


def top_series(out: Families, found: TopProcesses,
               idle: tuple[int, int] | None,
               extra: Sequence[str] = ()) -> None:
    """The top module's series of one node; ``idle`` the idle-holder
    estimate (holders, bytes), None on a target's first top scrape."""
    out.add("beam_probe_processes_scanned", found["scanned"], (), extra)
    for name, key in RANKED:
        rows: list[ValueRow] = found[key]  # type: ignore[literal-required]
        for rank, row in enumerate(rows, 1):
            # An empty mailbox ranks nothing: which of the many empty
            # ones came out would only churn series.
            if not row["exited"] and (row["value"] or key != "message_queue_len"):
                out.add(name, row["value"], (str(rank), process_label(row)),
                        extra)
    if idle is not None:
        out.add("beam_probe_idle_holders", idle[0], (), extra)
        out.add("beam_probe_idle_holder_binary_bytes", idle[1], (), extra)
    out.add("beam_probe_node_work_seconds", found["node_ms"] / 1000, (),
            extra)


def idle_holders(before: Mapping[str, int] | None,
                 holders: Iterable[tuple[str, int, int]]
                 ) -> tuple[int, int] | None:
    """Of the holders now, those whose reductions did not change since
    the previous read (``before``: pid -> reductions): how many and their
    bytes. None without a previous read."""
    if before is None:
        return None
    count = held = 0
    for pid, size, reductions in holders:
        if before.get(pid) == reductions:
            count += 1
            held += size
    return count, held


def up_series(out: Families, up: bool, seconds: float,
              extra: Sequence[str] = ()) -> None:
    out.add("beam_probe_up", 1 if up else 0, (), extra)
    out.add("beam_probe_scrape_duration_seconds", round(seconds, 6), (),
            extra)


__all__ = ["COMPAT", "Families", "SPECS", "idle_holders", "process_label",
           "top_series", "up_series", "vm_series"]

