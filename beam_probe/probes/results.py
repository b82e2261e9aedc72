"""The shapes probes return: the seam between a probe and its renderers.

Renderers read these by key; JSON is each of them as it is (json.dumps).
They are TypedDicts rather than dataclasses because start-up is most of a
one-query run: twelve TypedDicts cost ~1 ms to define, twelve frozen
dataclasses ~13 ms (measured, click already loaded). At run time they are
plain dicts, so the JSON users read is the result, key for key and in
order (tests/test_json_shapes.py holds it).
"""

from __future__ import annotations

from typing import (TYPE_CHECKING, Any, Dict, List, Mapping, Optional, Tuple,
                    TypedDict, Union)

if TYPE_CHECKING:
    from typing_extensions import NotRequired
else:  # annotations are never evaluated at run time but by tests (3.11+)
    try:
        from typing import NotRequired
    except ImportError:  # pragma: no cover - Python 3.10
        NotRequired = Optional

# erlang:memory() in the node's own order: total, processes, ...
Memory = Dict[str, int]


class Ping(TypedDict):
    node: str
    otp_release: str
    erts_version: str
    rtt_ms: float


class MemoryResult(TypedDict):
    node: str
    memory: Memory


class ValueRow(TypedDict):
    """One process in a table of processes, by its value (proc-count,
    born); a process that exited before it was described says so."""

    pid: str
    value: int
    name: Optional[str]
    label: Optional[str]
    # process_name's first element (rabbit_amqqueue_process): what sort
    # of process, never which one.
    kind: NotRequired[Optional[str]]
    current_function: Optional[str]
    initial_call: Optional[str]
    exited: bool
    binary_distinct: NotRequired[int]


class DeltaRow(TypedDict):
    """One process by its change (bin-leak, proc-window)."""

    pid: str
    delta: int
    name: Optional[str]
    label: Optional[str]
    kind: NotRequired[Optional[str]]
    current_function: Optional[str]
    initial_call: Optional[str]
    exited: bool
    # bin-leak: the bytes it still holds after the collection, each
    # binary once (delta is recon's count of references).
    binary_distinct: NotRequired[int]


ProcessRow = Mapping[str, Any]  # a ValueRow or a DeltaRow, read by key


class Unnamed(TypedDict):
    """The rows shown without the names in their dictionary: before OTP
    26.2 a dictionary is copied whole, and only from a process whose heap
    (total_heap_size, bytes) is at most per_copy, while the copies of the
    command have cost under budget (beam_probe_lib.erl's describe/1)."""

    rows: int
    pids: List[str]
    largest_heap: int
    per_copy: int
    budget: int


class ProcCount(TypedDict):
    node: str
    attribute: str
    scanned: int
    processes: List[ValueRow]
    # Whether the node could read the dictionary keys that name a process
    # (OTP 26.2+: one key at a time; before, from a copy of the
    # dictionary of each row shown): without them a proc_lib process is
    # proc_lib:init_p/5. unnamed: the rows left without them, or None.
    labels_read: bool
    unnamed: Optional[Unnamed]


class ProcCountAllSummary(TypedDict):
    """The end of proc-count --all, whose rows are streamed."""

    scanned: int
    sent: int
    # The rows of every chunk left without their names, as proc-count's.
    unnamed: Optional[Unnamed]


class _BinLeak(TypedDict):
    node: str
    scanned: int
    holders: int
    collected: int
    memory_before: Memory
    memory_after: Memory
    processes: List[DeltaRow]
    labels_read: bool
    unnamed: Optional[Unnamed]


class BinLeak(_BinLeak, total=False):
    # --dry-run only
    dry_run: bool
    would_collect: int


class DeadRow(TypedDict):
    pid: str
    value: int


class ProcWindow(TypedDict):
    node: str
    attribute: str
    window_ms: int
    scanned_first: int
    scanned_last: int
    processes: List[DeltaRow]
    labels_read: bool
    unnamed: Optional[Unnamed]
    born_count: int
    born: List[ValueRow]
    dead_count: int
    dead: List[DeadRow]


class ProcInfo(TypedDict):
    """recon:info/1's groups, each a mapping of item to value."""

    node: str
    pid: str
    meta: Dict[str, Any]
    signals: Dict[str, Any]
    location: Dict[str, Any]
    memory_used: Dict[str, Any]
    work: Dict[str, Any]


class CheckValues(TypedDict):
    total: int
    processes: int
    binary: int
    ets: int
    atom: int
    binary_share: float
    process_count: int
    top_binary_memory: int
    max_queue: int
    atom_use: float
    rss: Optional[int]
    alloc_usage_min: float
    top_ets_memory: int


class Holder(TypedDict):
    """The process behind one of check's per-process figures: its name
    as a table's NAME column takes it (registered name, else its label
    or process_name, written as Erlang writes the term), its initial
    call ('$initial_call' where proc_lib set it)."""

    pid: str
    name: Optional[str]
    initial_call: Optional[str]


class _NodeHealth(TypedDict):
    node: str


class NodeHealth(_NodeHealth, total=False):
    """One node of a check: its values, or why there are none."""

    values: CheckValues
    error: str
    # It answered, with figures no node has (a bad reply): UNKNOWN, not
    # CRITICAL as a node that did not answer.
    unjudged: bool
    # Who holds top_binary_memory's bytes and max_queue's messages: None
    # where the figure is 0. Never a textfile label (one per process).
    top_binary_holder: Optional[Holder]
    max_queue_holder: Optional[Holder]
    # Per allocator type, used and allocated bytes (for the textfile).
    allocators: Dict[str, Dict[str, int]]


class _Sample(TypedDict):
    time: str
    epoch: float
    node: str


class Sample(_Sample, total=False):
    """One watch sample, one JSON line. The names check --history uses
    (total, processes, binary, ets, atom, binary_share, process_count,
    atom_use) mean the same here, so watch files and check histories mix.
    A sample of a node that could not be reached has ``down`` and
    ``error`` after the first three keys, and nothing else."""

    down: bool
    error: str
    total: int
    processes: int
    binary: int
    ets: int
    atom: int
    code: int
    system: int
    binary_share: float
    process_count: int
    process_limit: int
    port_count: int
    port_limit: int
    atom_count: int
    atom_limit: int
    atom_use: float
    ets_count: int
    ets_limit: int
    alloc_used: int
    alloc_allocated: int
    alloc_usage: float
    rss: Optional[int]
    gcs_per_s: Optional[float]
    reclaimed_per_s: Optional[int]
    gc: str
    collected: int
    gc_ms: float
    node_ms: float
    floor: Dict[str, int]
    leaks: List[RiseJson]


class Carriers(TypedDict):
    """One kind of carrier (multiblock or singleblock) of an allocator
    type, summed over its instances; *_max are the sums of each instance's
    maximum (an upper bound: the instances did not peak at once)."""

    blocks: int
    blocks_max: int
    block_bytes: int
    block_bytes_max: int
    carriers: int
    carriers_max: int
    carrier_bytes: int
    carrier_bytes_max: int
    average_block: int


class AllocType(TypedDict):
    type: str
    instances: int
    used: int
    allocated: int
    usage: float
    used_max: int       # sums of each instance's peak: upper bounds
    allocated_max: int
    mbcs: Carriers
    sbcs: Carriers


class Verdict(TypedDict):
    case: str  # in_use, fragmentation, peak or outside
    allocator: Optional[str]
    evidence: Dict[str, Any]  # the figures that show it (alloc.verdict)


class MsegCache(TypedDict):
    hits: int
    calls: int
    hit_rate: Optional[float]


class AllocReport(TypedDict):
    node: str
    used: int
    allocated: int
    usage: float
    memory_total: int
    rss: Optional[int]
    mseg_cache: MsegCache
    verdict: Verdict
    types: List[AllocType]
    raw: Optional[str]


class EtsTable(TypedDict):
    id: str
    name: str
    owner: str
    owner_name: Optional[str]
    owner_group: str
    size: int
    memory: int
    type: str
    protection: str


class EtsReport(TypedDict):
    node: str
    sort: str
    tables: int
    total_memory: int
    largest: List[EtsTable]


# -- the cluster through one node (--cluster) ---------------------------------

class NodeFailure(TypedDict):
    """A node that did not answer, and why, in one line."""

    node: str
    error: str


class NodeScan(TypedDict):
    node: str
    scanned: int
    labels_read: bool  # as ProcCount's
    unnamed: NotRequired[Optional[Unnamed]]  # as ProcCount's


class NodeValueRow(TypedDict):
    """A ValueRow of one of the cluster's nodes. (The Node* rows repeat
    their row's fields rather than inherit them: a subclass's keys come
    after its base's, and JSON shows the node first.)"""

    node: str
    pid: str
    value: int
    name: Optional[str]
    label: Optional[str]
    kind: NotRequired[Optional[str]]
    current_function: Optional[str]
    initial_call: Optional[str]
    exited: bool
    binary_distinct: NotRequired[int]


class NodeDeltaRow(TypedDict):
    node: str
    pid: str
    delta: int
    name: Optional[str]
    label: Optional[str]
    kind: NotRequired[Optional[str]]
    current_function: Optional[str]
    initial_call: Optional[str]
    exited: bool
    binary_distinct: NotRequired[int]  # bin-leak (DeltaRow)


class NodeDeadRow(TypedDict):
    node: str
    pid: str
    value: int


class ClusterProcCount(TypedDict):
    entry: str
    attribute: str
    nodes: List[Union[NodeScan, NodeFailure]]
    processes: List[NodeValueRow]


class NodeBinLeak(TypedDict):
    node: str
    scanned: int
    holders: int
    collected: int
    memory_before: Memory
    memory_after: Memory


class ClusterBinLeak(TypedDict):
    entry: str
    nodes: List[Union[NodeBinLeak, NodeFailure]]
    processes: List[NodeDeltaRow]


class NodeWindow(TypedDict):
    node: str
    scanned_first: int
    scanned_last: int
    born_count: int
    dead_count: int


class ClusterProcWindow(TypedDict):
    entry: str
    attribute: str
    window_ms: int
    nodes: List[Union[NodeWindow, NodeFailure]]
    processes: List[NodeDeltaRow]
    born: List[NodeValueRow]
    dead: List[NodeDeadRow]


class NodeEtsTable(TypedDict):
    node: str
    id: str
    name: str
    owner: str
    owner_name: Optional[str]
    owner_group: str
    size: int
    memory: int
    type: str
    protection: str


class NodeEts(TypedDict):
    node: str
    tables: int
    total_memory: int


class ClusterEts(TypedDict):
    entry: str
    sort: str
    nodes: List[Union[NodeEts, NodeFailure]]
    largest: List[NodeEtsTable]


class ClusterAlloc(TypedDict):
    entry: str
    nodes: List[Union[AllocReport, NodeFailure]]


# -- watch --------------------------------------------------------------------

class RiseJson(TypedDict):
    """A leak suspected in one category, and the rule that suspected it:
    "rises", memwatch's leak event (or, unconfirmed, the raw values'), as
    trend.Rise.as_json gives it: ``rises`` steps up in a row, over
    ``samples`` (rises + 1); or "trend", a rise over the window, as
    trend.Trend.as_json gives it: ``samples`` in the window, ``rises``
    steps up among them, ``growth`` and ``per_hour`` from the Theil-Sen
    slope, ``z`` Mann-Kendall's."""

    category: str
    rule: str
    rises: int
    samples: int
    growth: float
    seconds: float
    per_hour: Optional[float]
    z: NotRequired[float]


class CategoryStats(TypedDict):
    first: Optional[float]
    last: Optional[float]
    min: Optional[float]
    max: Optional[float]
    per_hour: Optional[float]


class WatchSummary(TypedDict):
    node: str
    samples: int
    down_samples: int
    seconds: float
    gc: str
    interval: float
    categories: Dict[str, CategoryStats]
    leaks: List[RiseJson]
    judged: bool
    to_judge: int
    unconfirmed: List[RiseJson]


# -- plot ---------------------------------------------------------------------

Point = Tuple[float, Optional[float]]


class _PlotData(TypedDict):
    node: str
    samples: int
    skipped_lines: int
    first: float
    last: float
    metrics: List[str]
    series: Dict[str, List[Point]]
    floors: Dict[str, List[Point]]
    leaks: List[Tuple[float, str]]


class PlotData(_PlotData, total=False):
    output: str  # the chart file, when one was drawn


# -- trace-gc -----------------------------------------------------------------

class Traced(TypedDict):
    pid: str
    name: Optional[str]
    # Its label or process_name (read from the dictionary, every release).
    label: NotRequired[Optional[str]]
    group: str


class Skipped(TypedDict):
    pid: str
    why: str  # not_alive, not_found or held
    held_by: NotRequired[List[str]]


class TraceHeader(TypedDict):
    """trace-gc's first line: what is traced, what was skipped and why."""

    node: str
    mode: str  # session or trace/3
    tracing: List[Traced]
    skipped: List[Skipped]
    duration: float
    max_events: int


class Collection(TypedDict):
    """One garbage collection, start and end paired; sizes in bytes."""

    time: float
    pid: str
    name: Optional[str]
    group: str
    type: str  # minor or major
    heap_before: int
    heap_after: int
    old_heap_before: int
    old_heap_after: int
    binary_before: int
    binary_after: int
    reclaimed: int
    duration_us: float


class TraceTrend(TypedDict):
    """The rise that made trace-gc's verdict: over how many majors, the
    heap's growth (bytes), its slope (bytes a major), Mann-Kendall's z."""
    majors: int
    growth: int
    per_major: float
    z: float


class TracedProcess(TypedDict):
    pid: str
    name: Optional[str]
    label: NotRequired[Optional[str]]
    group: str
    minor: int
    major: int
    reclaimed: int
    time_us: float
    heap_after_last: int
    collections: int
    longest_rise: int  # memwatch's count, shown; not the verdict
    judged: bool  # enough major collections for a verdict
    trend: Optional[TraceTrend]
    leak_suspected: bool


class TraceSummary(TypedDict):
    node: str
    mode: str
    collections: int
    ended_by: str
    tracer_messages: Optional[int]
    dropped_messages: Optional[int]
    tracer_reductions: Optional[int]
    processes: List[TracedProcess]


# -- snapshot, diff, leak-hunt ------------------------------------------------

class SnapshotTaken(TypedDict):
    node: str
    file: str
    bytes: int
    time: str
    gc: str
    processes: int
    # proc_lib processes left proc_lib:init_p/N, their heap past the cap
    # (bytes) on copying a dictionary for '$initial_call' (OTP 25).
    dictionaries_unread: int
    dictionary_heap_cap: int
    ets_tables: int
    ports: int


class SnapshotSummary(TypedDict):
    node: str
    time: Optional[str]
    memory: Dict[str, Optional[int]]
    alloc_used: Optional[int]
    alloc_allocated: Optional[int]
    processes: int
    ets_tables: int
    ports: int
    atoms: int
    # As SnapshotTaken's (a crash dump's as a live node of its release
    # would have read it); None where a file does not say (files before
    # issue 38).
    dictionaries_unread: Optional[int]
    dictionary_heap_cap: Optional[int]


GroupChange = TypedDict("GroupChange", {
    "what": str, "size_bytes": int, "binary_bytes": int, "+": int, "-": int,
    "before": int, "after": int, "examples": NotRequired[List[str]]})


class Change(TypedDict):
    size_bytes: int
    memory: Dict[str, int]
    details: List[GroupChange]
    groups: int      # every group that changed; details holds the first
    truncated: bool  # whether details left some out (TOP_GROUPS at most)


class TableChange(TypedDict):
    name: str
    id: str
    owner: str
    new: bool
    rows_before: int
    rows_after: int
    bytes_before: int
    bytes_after: int


class AtomsAdded(TypedDict):
    added: int       # the node's own: after - before, less ours
    ours: int        # beam-probe's node names the node met meanwhile
    names: List[str]
    all_named: bool


class PortsChange(TypedDict):
    before: int
    after: int
    new: List[str]
    new_count: int


class KeptGroup(TypedDict):
    what: str
    count: int
    bytes: int
    binary_bytes: int
    growth: int
    examples: List[str]


class GrowingProcess(TypedDict):
    pid: str
    what: str
    name: Optional[str]
    rising: List[str]
    memory: List[int]
    binary_bytes: List[int]


class RisingGroup(TypedDict):
    what: str
    counts: List[int]
    examples: List[str]


class KeptTable(TypedDict):
    name: str
    id: str
    owner: str
    born: bool
    rows: List[Optional[int]]
    bytes: List[Optional[int]]


class AtomsRising(TypedDict):
    added: List[int]
    rising: bool


class Suspects(TypedDict):
    born_and_kept: List[KeptGroup]
    growing_processes: List[GrowingProcess]
    groups_rising: List[RisingGroup]
    ets: List[KeptTable]
    ports_born_and_kept: List[str]
    atoms: AtomsRising


class Diff(TypedDict):
    """memwatch's HeapDiff of two snapshots; of three, with the middle one
    and the three-snapshot rule's suspects."""

    before: SnapshotSummary
    after: SnapshotSummary
    middle: NotRequired[SnapshotSummary]
    suspects: NotRequired[Suspects]
    change: Change
    ets: List[TableChange]
    atoms: AtomsAdded
    ports: PortsChange
    elixir: bool


class LeakHunt(TypedDict):
    node: str
    interval: float
    gc: str
    taken: int
    files: List[str]
    saved: Optional[str]
    interrupted: bool
    compared: int
    diff: Optional[Diff]
    error: NotRequired[str]  # the node's failure, when it went mid-way


class NodeDiff(TypedDict):
    node: str
    files: List[str]
    diff: Diff


class AcrossGroup(TypedDict):
    """A group in every node's diff: its count on each node where it is
    (born and kept, or grown in number), and on how many."""

    what: str
    nodes: Dict[str, int]
    on: str


class Across(TypedDict):
    basis: str       # "born_and_kept" (three snapshots) or "grew" (two)
    nodes: int       # the nodes compared
    groups: List[AcrossGroup]
    groups_total: int  # groups holds the first ACROSS_SHOWN of them


class ClusterSnapshot(TypedDict):
    entry: str
    folder: str
    nodes: List[Union[SnapshotTaken, NodeFailure]]


class ClusterDiff(TypedDict):
    folders: List[str]
    nodes: List[Union[NodeDiff, NodeFailure]]
    across: Across


class NodeHunt(TypedDict):
    node: str
    files: List[str]
    diff: Optional[Diff]
    error: NotRequired[str]  # a round it did not answer, the first


class ClusterLeakHunt(TypedDict):
    entry: str
    interval: float
    gc: str
    taken: int
    saved: str
    interrupted: bool
    nodes: List[NodeHunt]
    across: Across


# -- check --------------------------------------------------------------------

class TrendJson(TypedDict):
    rises: int
    growth_per_hour: Optional[float]
    since: str


class CheckNode(TypedDict):
    node: str
    values: NotRequired[CheckValues]
    error: NotRequired[str]
    top_binary_holder: NotRequired[Optional[Holder]]
    max_queue_holder: NotRequired[Optional[Holder]]
    allocators: NotRequired[Dict[str, Dict[str, int]]]
    status: str
    problems: List[str]
    trend: NotRequired[TrendJson]


class CheckReport(TypedDict):
    status: str
    exit_code: int
    nodes: List[CheckNode]
    history_skipped_lines: NotRequired[int]


class InspectPart(TypedDict):
    """One part of what a process holds. ``path`` in Erlang's syntax
    (``State#state.cache#{<<"k">>}``), ``path_elixir`` in Elixir's; a
    child's path extends its parent's, ``depth`` 0 is a root (State,
    Data, a gen_event handler, get(), Messages). ``bytes``: the words
    of its flat copy times the word size; ``binary_bytes``: the refc
    binary bytes it keeps alive; ``share`` of all the roots hold."""

    path: str
    path_elixir: str
    depth: int
    kind: str
    count: int
    bytes: int
    binary_bytes: int
    share: float


class InspectPin(TypedDict):
    """Slices that keep a much larger binary alive, by where they are."""

    path: str
    path_elixir: str
    count: int
    bytes: int
    referenced_bytes: int


class InspectTotal(TypedDict):
    # None where not measured: a state that was not read (refused, timed
    # out) leaves what its terms hold unknown; its binaries are then the
    # node's list's figure (``binaries``), where that was read.
    bytes: Optional[int]
    binary_bytes: Optional[int]
    memory: int
    message_queue_len: int
    # The refc binaries the process refers to, each once (the node's own
    # list; None past 8 MB of heap): every binary figure is at most this.
    binary_distinct: Optional[int]
    sampled: bool
    pause_ms: float
    # Parts whose figures are lower bounds: past the budget in a heap too
    # large to size in one call, or a list longer than it counts.
    unmeasured: NotRequired[int]
    # total_heap_size and heap_size (the young heap) in bytes, read from
    # outside (a live process; a dump has its own figures).
    heap_bytes: NotRequired[int]
    young_heap_bytes: NotRequired[int]


class InspectBinaries(TypedDict):
    """The refc binaries a process refers to, from the node's list
    (process_info(P, binary)), summed on the node, whatever its loop."""

    references: int    # entries in the list (a binary once per reference)
    count: int         # binaries, each once
    bytes: int         # their bytes, each once
    alone_bytes: int   # of those whose reference count is 1: this process's
    largest: List[int]  # the largest few, bytes


class ProcessInspection(TypedDict):
    node: str
    pid: str
    name: Optional[str]
    kind: str
    current_function: Optional[str]
    initial_call: Optional[str]
    parts: List[InspectPart]
    pinned: List[InspectPin]
    total: InspectTotal
    # Why a part was not read (None: it was).
    state: Optional[str]
    dictionary: Optional[str]
    mailbox: Optional[str]
    # The module whose loop it runs, from its stack (gen_server,
    # gen_server2, a plain loop's own); None while it hibernates.
    loop: NotRequired[Optional[str]]
    binaries: NotRequired[Optional[InspectBinaries]]
    binaries_note: NotRequired[Optional[str]]  # why not measured
    # Commands of the application's own that see what we cannot
    # (RabbitMQ's, for its processes).
    see_also: NotRequired[List[str]]
    # Its '$process_label' or process_name, as Erlang writes it.
    label: NotRequired[Optional[str]]


class TablePins(TypedDict):
    count: int
    bytes: int
    referenced_bytes: int


class TableFamily(TypedDict):
    # As the node writes it: Erlang's form, and Elixir's.
    family: str
    family_elixir: str
    count: int
    bytes: int
    binary_bytes: int
    pinned: TablePins


class TableObject(TypedDict):
    key: str
    key_elixir: str
    family: str
    family_elixir: str
    bytes: int
    binary_bytes: int


class TableInspection(TypedDict):
    node: str
    table: str
    name: Optional[str]
    type: str
    owner: Optional[str]
    size: int
    memory: int
    compressed: bool
    families: List[TableFamily]
    largest: List[TableObject]
    sampled: bool
    seen: int
    fraction: float
    late: bool
    changed: bool
    unread_keys: int
    unread_objects: int


class DumpProcess(TypedDict):
    """A process of a crash dump, as `crashdump` lists it."""

    pid: str
    name: Optional[str]
    memory: int
    message_queue_len: int
    reductions: int
    state: str
    current_function: Optional[str]
    initial_call: Optional[str]


class CrashDumpOverview(TypedDict):
    """`crashdump FILE`: why and when the node died, and what held its
    memory (beam_probe/crashdump/overview.py)."""

    file: str
    size: int
    node: str
    written: str
    slogan: str
    cause: Dict[str, Any]     # kind, allocator, request_bytes, type, explanation
    otp_release: Optional[str]
    erts_version: Optional[str]
    word_size: int
    elixir: bool
    complete: bool
    ending: str               # end, abort or truncated
    abort_reason: Optional[str]
    cut_in: Optional[str]     # the section a truncated dump ends inside
    memory: Memory
    processes: Dict[str, Any]  # count, by_memory, by_message_queue_len
    running: List[Dict[str, Any]]
    ets: Optional[EtsReport]
    allocators: Optional[AllocReport]
    counts: Dict[str, Any]
    next: List[str]


class AllocInstance(TypedDict):
    """One instance of an allocator type, unsummed: per kind of carrier
    (mbcs, mbcs_pool, sbcs) the eight counters of beam_probe_alloc's
    types/0: blocks, blocks_max, block bytes, block bytes max, carriers,
    carriers_max, carrier bytes, carrier bytes max."""

    type: str
    instance: int
    mbcs: List[int]
    mbcs_pool: List[int]
    sbcs: List[int]


class VmFigures(TypedDict):
    """The exporter's default scrape of one node (probes/vm.py)."""

    node: str
    otp_release: str
    erts_version: str
    memory: Dict[str, int]            # erlang:memory()'s nine kinds
    counts: Dict[str, Optional[int]]  # system_info counts; None: unknown
    time_correction: bool
    statistics: Dict[str, int]        # erlang:statistics/1's counters
    dirty_cpu_run_queue: Optional[int]
    dirty_io_run_queue: Optional[int]
    dets_tables: int
    allocators: List[AllocInstance]
    allocator_types: List[AllocType]
    verdict: Verdict
    rss: Optional[int]
    node_ms: float


class TopProcesses(TypedDict):
    """The exporter's `top` module: the N largest processes three ways,
    and the largest binary holders as (pid, bytes, reductions)."""

    node: str
    scanned: int
    memory: List[ValueRow]
    binary_memory: List[ValueRow]
    message_queue_len: List[ValueRow]
    holders: List[Tuple[str, int, int]]
    node_ms: float


class TopRow(TypedDict):
    """One process of a top refresh: what it is, and its columns (the
    sorted one as the pass read it, the others read again for the rows
    shown). reductions: done since the last refresh (None on the first).
    binary_memory: the refc binary bytes it holds, each binary once (not
    recon's per-reference sum, proc-count's). node: with --cluster."""

    pid: str
    name: Optional[str]
    label: Optional[str]
    current_function: Optional[str]
    initial_call: Optional[str]
    exited: bool
    memory: int
    binary_memory: int
    reductions: Optional[int]
    message_queue_len: int
    node: NotRequired[str]


class TopHeader(TypedDict):
    """A node's figures above its processes; the rates are per second over
    the window since the last refresh (None on the first)."""

    otp_release: str
    uptime_s: float
    memory: Memory
    process_count: int
    process_limit: int
    port_count: int
    port_limit: int
    atom_count: int
    atom_limit: int
    ets_count: int
    run_queue: int
    schedulers_online: int
    reductions_per_s: Optional[float]
    gcs_per_s: Optional[float]
    reclaimed_per_s: Optional[float]


class TopFrame(TypedDict):
    """One node's refresh (probes/top.py): its header and its N processes
    by ``sort``; matched is the processes the filter let through (all
    when none); window_s the time since the last pass (None on the
    first); pass_ms the pass's time on the node."""

    node: str
    time: float
    sort: str
    filter: str
    scanned: int
    matched: int
    window_s: Optional[float]
    pass_ms: float
    header: TopHeader
    processes: List[TopRow]
    labels_read: bool
    unnamed: Optional[Unnamed]


class TopDown(TypedDict):
    node: str
    since: float
    error: str


class TopView(TypedDict):
    """What top shows: the frames of the nodes asked (one node, a cluster
    member in focus, or all), and those that did not answer, each with
    when it stopped answering (its last frame is kept, in ``frames``).
    stretched: the interval in force when a pass took over a quarter of
    the one asked for."""

    entry: str
    interval: float
    stretched: Optional[float]
    sort: str
    filter: str
    focus: Optional[str]
    nodes: List[str]
    frames: List[TopFrame]
    down: List[TopDown]


# -- calls and senders (issue 40) -------------------------------------------

class CountRow(TypedDict, total=False):
    """One key's count: by caller (``caller``, and ``line`` or
    ``tail_call``), process (``process``, ``name``, ``initial_call``),
    args (``args``: a shape an argument), sender (``sender``, ``name``,
    ``initial_call``, and ``shape`` by shape). A shape is ``{"kind"}``
    with ``value`` (an atom, a small integer, a short binary), ``size``
    and ``tag`` (a tuple) or ``empty`` (a list)."""

    caller: Optional[str]
    line: str
    tail_call: bool
    process: str
    sender: str
    name: Optional[str]
    initial_call: Optional[str]
    args: List[Dict[str, Any]]
    shape: Dict[str, Any]
    count: int
    per_s: float   # over the last interval
    share: float   # of all counted


class CountSample(TypedDict):
    """A JSON line a interval: the run's counts so far, ranked."""

    node: str
    by: str
    elapsed: float
    counted: int
    other: int     # counted under keys not kept (over the bounds)
    rows: List[CountRow]


class CountSummary(TypedDict):
    node: str
    command: str   # calls or senders
    traced: str
    by: str
    mode: str      # session or trace/3
    target: Optional[Dict[str, Any]]  # senders: the receiver, named
    ended_by: str  # duration, max, rate, overload, removed or interrupted
    elapsed: float
    counted: int
    per_s: float
    other: int
    limits: Dict[str, Any]
    tracer_reductions: Optional[int]
    tracer_memory: Optional[int]
    tracer_backlog: Optional[int]
    rows: List[CountRow]



# -- reading the types themselves (the manual's JSON shapes, the tests'
# -- conformance check) ------------------------------------------------------

def is_typeddict(tp: Any) -> bool:
    """Whether ``tp`` is one of the TypedDicts above."""
    return isinstance(tp, type) and issubclass(tp, dict) and \
        hasattr(tp, "__annotations__")


def optional_keys(tp: Any) -> set[str]:
    """A TypedDict's keys that may be absent: total=False parts, and
    NotRequired (whose marks this module's string annotations hide from
    typing)."""
    optional = set(getattr(tp, "__optional_keys__", ()))
    for cls in reversed(tp.__mro__):
        for key, raw in getattr(cls, "__annotations__", {}).items():
            text = raw if isinstance(raw, str) else getattr(
                raw, "__forward_arg__", "")
            if text.startswith("NotRequired["):
                optional.add(key)
    return optional


__all__ = ["AllocInstance", "AllocReport", "AllocType", "BinLeak", "Carriers", "CategoryStats",
           "CrashDumpOverview", "DumpProcess",
           "Change", "CheckNode", "CheckReport", "CheckValues",
           "Collection", "CountRow", "CountSample", "CountSummary",
           "DeadRow", "DeltaRow", "Diff", "EtsReport",
           "EtsTable", "GroupChange", "InspectPart", "InspectPin",
           "InspectTotal", "InspectBinaries", "ProcessInspection", "TableFamily",
           "TableInspection", "TableObject", "TablePins", "KeptGroup", "LeakHunt", "Memory",
           "MemoryResult", "MsegCache", "NodeHealth", "Ping", "PlotData",
           "ProcCount", "ProcCountAllSummary", "ProcInfo", "ProcWindow",
           "ProcessRow", "RiseJson", "Sample", "SnapshotSummary",
           "SnapshotTaken", "Suspects", "TopDown", "TopFrame", "TopHeader", "TopProcesses",
           "TopRow", "TopView", "TraceHeader", "TraceSummary", "TraceTrend",
           "TracedProcess",
           "Unnamed", "ValueRow", "Verdict", "VmFigures", "WatchSummary",
           "is_typeddict", "optional_keys"]
