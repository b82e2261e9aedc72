"""The shapes probes return: the seam between a probe and its renderers.

Renderers read these by key; JSON is each of them as it is (json.dumps).
They are TypedDicts rather than dataclasses because start-up is most of a
one-query run: twelve TypedDicts cost ~1 ms to define, twelve frozen
dataclasses ~13 ms (measured, click already loaded). At run time they are
plain dicts, so the JSON users read is the result, key for key and in
order (tests/test_json_shapes.py holds it).
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, TypedDict

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


class ProcessRow(TypedDict):
    """One process in a table of processes. The number is under "value"
    (proc-count, born), or "delta" (bin-leak, proc-window): one of them."""

    pid: str
    name: Optional[str]
    current_function: Optional[str]
    initial_call: Optional[str]
    exited: bool


class ProcCount(TypedDict):
    node: str
    attribute: str
    scanned: int
    processes: List[ProcessRow]


class ProcCountAllSummary(TypedDict):
    """The end of proc-count --all, whose rows are streamed."""

    scanned: int
    sent: int


class _BinLeak(TypedDict):
    node: str
    scanned: int
    holders: int
    collected: int
    memory_before: Memory
    memory_after: Memory
    processes: List[ProcessRow]


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
    processes: List[ProcessRow]
    born_count: int
    born: List[ProcessRow]
    dead_count: int
    dead: List[DeadRow]


class ProcInfo(TypedDict):
    """recon:info/1's groups, each a mapping of item to value."""

    node: str
    pid: str
    meta: Dict[str, object]
    signals: Dict[str, object]
    location: Dict[str, object]
    memory_used: Dict[str, object]
    work: Dict[str, object]


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


class _NodeHealth(TypedDict):
    node: str


class NodeHealth(_NodeHealth, total=False):
    """One node of a check: its values, or why there are none."""

    values: CheckValues
    error: str
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
    leaks: List[dict]


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


__all__ = ["AllocReport", "AllocType", "Carriers", "EtsReport", "EtsTable",
           "MsegCache", "Verdict", "BinLeak", "CheckValues", "DeadRow", "Memory", "MemoryResult",
           "NodeHealth", "Ping", "ProcCount", "ProcCountAllSummary",
           "ProcInfo", "ProcWindow", "ProcessRow", "Sample"]
