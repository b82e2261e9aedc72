"""What the manual says of each command beyond its declaration: what it
costs the node, the shape of its JSON, the exit codes of its own, and
what its positional words mean. A table beside the declarations
(commands.py), read only by the manual's generator (cli/manual.py, run
as ``python docs/generate.py``), never when a command runs: the help a
command prints comes from its declaration alone.

Every command the CLI lists must have a COSTS entry: the generator
refuses to write a page without one (a new command says what it costs
before it gets a manual page). The figures are the README's "What it
costs the node" (docs/manual/costs.md), measured on a 2-core machine;
that page has the whole of each measurement.
"""

from __future__ import annotations

# One paragraph a command: what running it once does on the node.
COSTS: dict[str, str] = {
    "ping": "Three trivial calls (the release, the ERTS version, a round "
            "trip). No pass over the processes.",
    "memory": "One call to erlang:memory/0. A crash dump is read here, "
              "costing no node anything.",
    "proc-count": "One process_info(Pid, Item) per process, in compiled code, "
                  "in slices of 128-2,048 processes handed to --jobs workers; "
                  "the node keeps at most 3N rows, never a row per process, "
                  "then describes the N shown. A pass over 300,000 processes "
                  "raised the node's memory by +17 MB (OTP 25) and +11 MB "
                  "(OTP 28) at its peak, against +64 MB and +73 MB for "
                  "recon's proc_count run inside the node. No collection. --all "
                  "streams the rows: the node sends a chunk only when the "
                  "last is written.",
    "bin-leak": "One process_info(Pid, binary) pass over every process, a "
                "garbage collection of each binary holder, and the holders "
                "read again. It changes the node (it frees memory): run "
                "--dry-run or proc-count binary_memory first, and cap it "
                "with --max-gc. The pass keeps a {count, pid} a holder it "
                "will collect: +104-126 MB at 600,000 holders without "
                "--max-gc, +39 MB with --max-gc 1000 (OTP 25).",
    "proc-window": "Two proc-count passes MILLISECONDS apart; the node keeps "
                   "the first pass's values compressed (~3.6 bytes a "
                   "process) meanwhile, then joins them a partition at a "
                   "time: +22-24 MB at 300,000 processes (OTP 25).",
    "proc-info": "One process_info/2 with a list of items, and one for its "
                 "binaries. Never its mailbox or its dictionary.",
    "inspect": "process_info/2 first (its heap cap, generations, "
               "dictionary size), then one system message and a walk of at "
               "most --budget terms inside the process, which it waits for "
               "(tens of milliseconds at the default 1,000): the walk runs on "
               "its own heap, and a process without the room for it has the "
               "budget cut or is sent nothing. --table reads the table in "
               "batches of about 2 MB, never fixing it or locking it for "
               "more than one ets:select/3 or lookup (the node rises about "
               "20 MB).",
    "crashdump": "Nothing on any node: the dump is memory-mapped here and "
                 "read a window at a time (18 MiB of memory for dumps of "
                 "94 MiB to 4.4 GiB).",
    "watch": "Per sample, counters only, in one round trip (about 1.5 ms of "
             "the node at any process count); --gc holders adds a "
             "process_info(P, binary) pass and a collection of the "
             "holders each sample, --gc all a collection of every process "
             "(0.1-0.3 s of the schedulers per 100,000 processes).",
    "plot": "Nothing on any node: it reads watch files and check "
            "histories.",
    "snapshot": "One pass of process_info/2 with ten items per process in "
                "--jobs slices, after the collection --gc asks for; "
                "ets:info/2 of every table and port_info/2 of every port. "
                "The rows are compressed on the node and sent a slice at a "
                "time, the next only once the last was taken: +20 MB at "
                "300,000 processes (OTP 25), +9 MB (OTP 28).",
    "diff": "Nothing on any node: it reads snapshot files (and a crash "
            "dump) here, a chunk of 5,000 rows at a time.",
    "leak-hunt": "--snapshots snapshots (three by default), --interval "
                 "seconds apart, each costing what snapshot costs; nothing "
                 "is left on the node between them.",
    "top": "Per refresh, one pass of process_info(Pid, [reductions, Item]) "
           "in --jobs slices, then the rows shown described: 1.4-1.6x a "
           "proc-count pass. Between refreshes, a keeper and its sentinel "
           "hold the last pass's reductions compressed (~2.3 bytes a "
           "process); both end within moments of top, or 60 s after the "
           "last refresh.",
    "alloc": "One erlang:system_info({allocator, Type}) per allocator type, "
             "folded on the node; no pass over the processes.",
    "ets": "Two ets:info/2 reads per table, in compiled code, then "
           "ets:info/1 and process_info/2 of the N shown.",
    "trace-gc": "Two trace messages per collection of each traced process, "
                "received by a fun on the node: ~8,300 reductions per "
                "collection, bounded by --max-events and --duration; at "
                "most 5,000 messages held for a reader that stops reading, "
                "and a backlog over 20,000 ends the trace (exit 14).",
    "calls": "A trace of FUNCTION's calls, counted on the node by a tracer "
             "(an erl_eval fun; nothing loaded) in an ets table of its "
             "own, ~0.8 us a call, and sent every 0.5 s: never a message "
             "per call over the network. It stops itself at --duration, "
             "--max, past --rate calls a second and when its mailbox or "
             "memory passes its bound; whatever ends it removes every "
             "trace it set within a second.",
    "senders": "A trace of the messages sent to PROCESS, counted on the "
               "node as calls counts (every message is copied to the "
               "tracer by the emulator, so its mailbox and memory are "
               "bounded and the trace stops itself past them); the same "
               "limits and clean-up as calls.",
    "check": "erlang:memory() and the counters, plus one process_info pass "
             "for the largest binary holder and the longest queue, as "
             "proc-count's: +17 MB at 300,000 processes (OTP 25), +7 MB "
             "(OTP 28).",
    "serve": "Per scrape of the default module, counters and limits and one "
             "system_info({allocator, Type}) per allocator type (about 2 ms "
             "of the node's time at any process count); module=top is one "
             "proc-count pass. Between scrapes, one idle hidden connection "
             "per target.",
    "demo": "A node of its own, started here and stopped by its pid at the "
            "end; no other node is touched.",
    "help": "Nothing: it prints help.",
}

# What applies to every command that reaches a node, said once at the
# end of each page's cost section.
COST_COMMON = (
    "It holds one TCP (or TLS) connection to the node while it runs; "
    "nothing of beam-probe's is loaded on the node, and anything it starts "
    "there watches the connection and ends within moments of it "
    "(`beam-probe help costs`).")
# serve says its own (a connection a target, kept between scrapes).
COST_COMMON_EXCEPT = frozenset({"serve"})

# The result types of beam_probe/probes/results.py that a command's
# --format json writes (tests/test_json_shapes.py holds the commands to
# them); a streaming command writes one per line, in the order given.
RESULTS: dict[str, tuple[str, ...]] = {
    "ping": ("Ping",),
    "memory": ("MemoryResult",),
    "proc-count": ("ProcCount", "ClusterProcCount"),
    "bin-leak": ("BinLeak", "ClusterBinLeak"),
    "proc-window": ("ProcWindow", "ClusterProcWindow"),
    "proc-info": ("ProcInfo",),
    "inspect": ("ProcessInspection", "TableInspection"),
    "crashdump": ("CrashDumpOverview",),
    "watch": ("Sample", "WatchSummary"),
    "plot": ("PlotData",),
    "snapshot": ("SnapshotTaken", "ClusterSnapshot"),
    "diff": ("Diff", "ClusterDiff"),
    "leak-hunt": ("LeakHunt", "ClusterLeakHunt"),
    "top": ("TopView",),
    "alloc": ("AllocReport", "ClusterAlloc"),
    "ets": ("EtsReport", "ClusterEts"),
    "trace-gc": ("TraceHeader", "Collection", "TraceSummary"),
    "calls": ("CountSample", "CountSummary"),
    "senders": ("CountSample", "CountSummary"),
    "check": ("CheckReport",),
}

# How a command that writes JSON lines lays them out (the others write
# one value: the first type of RESULTS or, with --cluster (inspect:
# --table), the second).
JSON_LINES: dict[str, str] = {
    "watch": 'a Sample a line, then {"summary": WatchSummary}',
    "trace-gc": 'a TraceHeader line, a Collection line each, then '
                '{"summary": TraceSummary}',
    "calls": 'a CountSample line an interval, then {"summary": '
             'CountSummary}',
    "senders": 'a CountSample line an interval, then {"summary": '
               'CountSummary}',
}

# Exit codes a command has beyond those of every command (0, 1, 2, 11,
# 130, 141, 143; 3-9 for one that reaches a node). A command with
# --cluster has 15 too.
OWN_EXITS: dict[str, tuple[int, ...]] = {
    "proc-info": (10,),
    "inspect": (10,),
    "trace-gc": (10, 14),
    "calls": (10, 14),
    "senders": (10, 14),
    "watch": (12, 13),
    "diff": (15,),
}

# check is a monitoring plugin: its own codes, in place of the others.
PLUGIN_EXITS = ((0, "OK"),
                (1, "WARNING (also: --textfile or --history not written)"),
                (2, "CRITICAL (also: the node could not be reached)"),
                (3, "UNKNOWN: bad arguments, or an answer it cannot judge"))

# The topic page (docs/manual/TOPIC.md, `beam-probe help TOPIC`) that
# tells a command's story: a page's "See also" links it.
TOPICS: dict[str, str] = {
    "ping": "reaching-a-node", "memory": "reaching-a-node",
    "proc-count": "refc-binaries", "bin-leak": "refc-binaries",
    "proc-window": "refc-binaries", "proc-info": "refc-binaries",
    "watch": "watch-and-plot", "plot": "watch-and-plot",
    "snapshot": "three-snapshots", "diff": "three-snapshots",
    "leak-hunt": "three-snapshots",
    "trace-gc": "gc-alloc-ets", "alloc": "gc-alloc-ets",
    "ets": "gc-alloc-ets",
    "inspect": "what-holds-it",
    "calls": "who-fills-it", "senders": "who-fills-it",
    "top": "processes-live", "crashdump": "dead-node",
    "check": "monitoring", "serve": "monitoring",
    "demo": "the-leak-hunt", "help": "output",
}

# The positional words of the usage lines.
ARGUMENT_HELP: dict[str, str] = {
    "NODE": "The node: name@host, or a bare name on this host (as erl "
            "-sname names it). Else --node, BEAM_PROBE_NODE, RELEASE_NODE. "
            "Where the command reads crash dumps, a dump's path may stand "
            "here.",
    "N": "How many rows: at most 10000.",
    "ATTRIBUTE": "One of memory, reductions, message_queue_len, "
                 "total_heap_size, heap_size, stack_size, binary_memory.",
    "MILLISECONDS": "The length of the window.",
    "PID": "A pid (<0.123.0>, #PID<0.123.0>, 0.123.0) or a registered name "
           "in Erlang's or Elixir's syntax.",
    "PROCESS": "A pid (<0.123.0>, #PID<0.123.0>, 0.123.0) or a registered "
               "name in Erlang's or Elixir's syntax.",
    "FUNCTION": "m:f/a, or Mod.f/a in Elixir's form; _ for any arity.",
    "FILE": "A file to read.",
    "FILE...": "The files to read, one or more.",
    "TARGET...": "Processes: pids or registered names (--top chooses them "
                 "instead).",
    "COMMAND": "A command's name, or a topic's.",
}

__all__ = ["ARGUMENT_HELP", "COSTS", "COST_COMMON", "COST_COMMON_EXCEPT",
           "JSON_LINES", "OWN_EXITS", "PLUGIN_EXITS", "RESULTS", "TOPICS"]
