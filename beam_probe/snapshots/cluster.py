"""Snapshots of a whole cluster through one node (--cluster): a file per
node, taken at once through the entry node (probes/cluster.py); a diff of
such folders node by node, and across the nodes: what grew on every node
(the application's leak) apart from what grew on one (that node's own
state).

Memory: the snapshots cross the entry node and reach us BATCH nodes at a
time, and each node's is written to its file as soon as it arrives, then
dropped; a diff reads one node's files at a time. Neither the entry node
nor beam-probe holds the whole cluster's rows at once (docs/CONTRIBUTING.md
plans 50 nodes of a million processes).
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Any, Callable, Iterator, Sequence

from beam_probe.erldist.terms import Atom
from beam_probe.errors import (ClusterIncomplete, EndedEarly, ProbeError,
                               UsageError)
from beam_probe.node.remote import Remote
from beam_probe.probes import cluster
from beam_probe.snapshots.format import (SnapshotError, file_name,
                                         hunt_folder, open_folder, write_in)
from beam_probe.snapshots.take import HELPER, args, estimate, read

if TYPE_CHECKING:
    from beam_probe.files import Folder
    from beam_probe.probes.results import (Across, AcrossGroup, ClusterDiff,
                                           ClusterLeakHunt, ClusterSnapshot,
                                           NodeFailure)

# Nodes asked for their snapshots at once, at most. A snapshot of a
# million processes is ~3.4 MB of compressed chunks, so a batch is cut by
# bytes first: each node's process count is asked (counters only) and the
# batches filled to half of what one frame may carry by estimate
# (_batches). Where an estimate falls short, the entry passes on the
# answers that fit and beam-probe asks the others again in groups that fit
# (cluster.fan); a node whose snapshot alone is over a frame is its row.
# The entry node and we hold at most a frame's worth at a time.
BATCH = 8
# The groups the view across the nodes lists.
ACROSS_SHOWN = 50

Progress = Callable[[str], None]
Taken = tuple[dict[str, Any], list[tuple[bytes, bytes]]]


def _quiet(_text: str) -> None:
    pass


def take_all(remote: Remote, members: Sequence[str], connected: set[str],
             gc: str, jobs: int, max_gc: int | None,
             progress: Progress = _quiet
             ) -> Iterator[tuple[str, Taken | NodeFailure]]:
    """Each member's snapshot (header, sections), or why it has none, a
    batch of nodes at a time, each batch collected first as --gc asks
    (the method wants each snapshot after a collection)."""
    from beam_probe.probes.watch import NO_GC_LIMIT, SAMPLE_LOCALS

    batches, unsized = _batches(remote, members, connected)
    for batch in batches:
        failed: dict[str, NodeFailure] = {
            node: unsized[node] for node in batch if node in unsized}
        epoch = time.time()
        if gc != "none":
            progress(f"collecting ({gc}) on {len(batch)} nodes")
            for answer in cluster.fan(
                    remote, [n for n in batch if n not in failed],
                    "beam_probe_watch", "sample",
                    (Atom(gc), NO_GC_LIMIT if max_gc is None else max_gc,
                     jobs, *SAMPLE_LOCALS),
                    lambda node, reply: {"node": node}, remote.timeout,
                    connected):
                if cluster.failed(answer):
                    failed[answer["node"]] = answer  # type: ignore
        asked = [node for node in batch if node not in failed]
        progress(f"reading every process, table and port of {len(asked)} "
                 "nodes")
        answers = cluster.fan(
            remote, asked, HELPER, "snapshot", args(jobs),
            lambda node, reply: read(node, reply, epoch, gc),
            remote.timeout, connected) if asked else []
        found = dict(zip(asked, answers))
        for node in batch:
            yield node, failed.get(node) or found[node]


def _batches(remote: Remote, members: Sequence[str], connected: set[str]
             ) -> tuple[list[list[str]], dict[str, NodeFailure]]:
    """The members in batches whose snapshots should cross the entry in
    one frame together (at most half the fan-out's budget by estimate,
    from each node's process count, and at most BATCH nodes), in order;
    and the nodes that could not be asked their count, with why. An
    estimate that falls short costs a second round for the nodes that
    did not fit (cluster.fan), never an answer."""
    from beam_probe.probes.watch import SAMPLE_LOCALS

    # Counters only (--gc none): ~1.5 ms a node, no pass over processes.
    counts = cluster.fan(
        remote, members, "beam_probe_watch", "sample",
        (Atom("none"), 0, 0, *SAMPLE_LOCALS),
        lambda node, reply: reply.count("process_count"),
        remote.timeout, connected)
    most = remote.fan_budget // 2
    batches: list[list[str]] = []
    used = 0
    failed: dict[str, NodeFailure] = {}
    for node, answer in zip(members, counts):
        size = 0
        if isinstance(answer, int):
            size = estimate(answer)
        else:
            failed[node] = answer
        if not batches or used + size > most or len(batches[-1]) >= BATCH:
            batches.append([])
            used = 0
        batches[-1].append(node)
        used += size
    return batches, failed


# What -o names with --cluster, said when it names a file.
FOLDER_HINT = ": with --cluster, -o names a folder for a file per node"


def _folder(path: str) -> Folder:
    if os.path.exists(path) and not os.path.isdir(path):
        raise UsageError(f"{path} is not a folder{FOLDER_HINT}")
    return open_folder(path)


def snapshot_cluster(remote: Remote, folder: str,
                     nodes: Sequence[str] | None, include_hidden: bool,
                     gc: str, jobs: int, max_gc: int | None,
                     progress: Progress = _quiet) -> ClusterSnapshot:
    """A snapshot of every member, each to ``folder``/NODE.snapshot
    (format.file_name)."""
    with _folder(folder) as place:
        return _snapshot_cluster(remote, place, nodes, include_hidden, gc,
                                 jobs, max_gc, progress)


def _snapshot_cluster(remote: Remote, place: Folder,
                      nodes: Sequence[str] | None, include_hidden: bool,
                      gc: str, jobs: int, max_gc: int | None,
                      progress: Progress) -> ClusterSnapshot:
    members, connected = cluster.members(remote, nodes, include_hidden)
    rows: list[Any] = []
    for node, answer in take_all(remote, members, connected, gc, jobs,
                                 max_gc, progress):
        if isinstance(answer, dict):
            rows.append(answer)
            continue
        header, sections = answer
        path, size = write_in(place, file_name(node), header, sections)
        rows.append({"node": node, "file": path, "bytes": size,
                     "time": header["time"], "gc": gc,
                     "processes": header["processes"],
                     "dictionaries_unread": header["dictionaries_unread"],
                     "dictionary_heap_cap": header["dictionary_heap_cap"],
                     "ets_tables": header["sample"]["ets_count"],
                     "ports": header["sample"]["port_count"]})
    result: ClusterSnapshot = {"entry": remote.node, "folder": place.path,
                               "nodes": rows}
    return cluster.complete(result, rows)


def node_files(folder: str) -> dict[str, list[str]]:
    """The snapshot files of a folder by the node their header names,
    each node's in name order (a leak hunt's are numbered)."""
    from beam_probe.snapshots.format import read as read_file

    try:
        names = sorted(n for n in os.listdir(folder)
                       if n.endswith(".snapshot"))
    except OSError as exc:
        from beam_probe.files import error_text

        raise UsageError(f"{folder}: {error_text(exc)}") from None
    # A folder of snapshot --cluster holds a file a node, and a cluster
    # is at most MAX_NODES here; each node's diff is kept for the answer,
    # so the count of files bounds what a diff of folders holds (10,000
    # crafted files once took it to 460 MB, and its JSON to 1.45 GB).
    if len(names) > cluster.MAX_NODES:
        raise UsageError(f"{folder} holds {len(names):,} snapshot files: a "
                         "folder of snapshot --cluster holds one a node, at "
                         f"most {cluster.MAX_NODES:,}")
    found: dict[str, list[str]] = {}
    for name in names:
        path = os.path.join(folder, name)
        header, _sections = read_file(path)
        found.setdefault(str(header["node"]), []).append(path)
    if not found:
        raise UsageError(f"{folder} holds no snapshot files")
    return found


def diff_folders(folders: list[str], force: bool = False,
                 progress: Progress = _quiet) -> ClusterDiff:
    """Folders of snapshot --cluster, oldest first: each node's snapshots
    compared (two: HeapDiff; three: the three-snapshot rule), one node at
    a time, and the groups compared across the nodes."""
    from beam_probe.snapshots.compare import check_count, diff_files

    check_count(len(folders))
    per_folder = [node_files(f) for f in folders]
    order = list(dict.fromkeys(n for files in per_folder for n in files))
    rows: list[Any] = []
    for node in order:
        found = [len(files.get(node, ())) for files in per_folder]
        if found != [1] * len(folders):
            # Not one file in each: nothing to pair its files by. Named,
            # and the others compared (a node that joined or left between
            # the snapshots, or a leak hunt's folder of several rounds).
            rows.append({"node": node, "error": "; ".join(
                f"not in {folder}" if n == 0 else
                f"{n} snapshots in {folder}"
                for folder, n in zip(folders, found) if n != 1)})
            continue
        paths = [files[node][0] for files in per_folder]
        progress(f"comparing {node}")
        rows.append({"node": node, "files": paths,
                     "diff": diff_files(paths, force)})
    result: ClusterDiff = {"folders": folders, "nodes": rows,
                           "across": across(rows)}
    failures = [row for row in rows if "error" in row]
    if failures:
        first = failures[0]
        more = f" (and {len(failures) - 1} more)" if len(failures) > 1 \
            else ""
        raise EndedEarly(result, ClusterIncomplete(
            f"compared {len(rows) - len(failures)} of {len(rows)} nodes; "
            f"{first['node']}: {first['error']}{more}"))
    return result


def across(rows: Sequence[Any]) -> Across:
    """The groups of every node's diff side by side: with three snapshots,
    what was born between the first two and kept at the third (the
    rule's suspects); with two, the groups that grew in number. A group
    on every node is the application's; on one, that node's own."""
    diffs = [(r["node"], r["diff"]) for r in rows if r.get("diff")]
    three = any("suspects" in d for _, d in diffs)
    counts: dict[str, dict[str, int]] = {}
    for node, diff in diffs:
        if three:
            found = {g["what"]: g["count"]
                     for g in diff.get("suspects", {}).get("born_and_kept",
                                                           [])}
        else:
            found = {g["what"]: g["after"] - g["before"]
                     for g in diff["change"]["details"]
                     if g["after"] > g["before"]}
        for what, count in found.items():
            counts.setdefault(what, {})[node] = count
    everywhere = len(diffs)
    groups: list[AcrossGroup] = [
        {"what": what, "nodes": by_node,
         "on": "every node" if len(by_node) == everywhere > 1
         else "one node" if len(by_node) == 1
         else f"{len(by_node)} of {everywhere} nodes"}
        for what, by_node in counts.items()]
    groups.sort(key=lambda g: (-len(g["nodes"]), -sum(g["nodes"].values()),
                               g["what"]))
    return {"basis": "born_and_kept" if three else "grew",
            "nodes": everywhere, "groups": groups[:ACROSS_SHOWN],
            "groups_total": len(groups)}


def leak_hunt_cluster(remote: Remote, count: int, interval: float, gc: str,
                      save: str | None, jobs: int, max_gc: int | None,
                      nodes: Sequence[str] | None, include_hidden: bool,
                      progress: Progress = _quiet,
                      sleep: Callable[[float], None] = time.sleep,
                      kept_in: Callable[[str, bool], None] | None = None
                      ) -> ClusterLeakHunt:
    """The three-snapshot method on every node at once: ``count`` rounds
    ``interval`` seconds apart, each a snapshot of every member, then each
    node's first, second and last compared, and the groups across the
    nodes. What was taken is kept (``save``, else a new temporary
    folder); Ctrl-C or the entry node failing still compares what was
    taken, as leak_hunt does; ``kept_in`` as leak_hunt's."""
    with _folder(save) if save else hunt_folder(None) as place:
        if kept_in is not None:
            kept_in(place.path, not save)
        return _leak_hunt_cluster(remote, count, interval, gc, place, jobs,
                                  max_gc, nodes, include_hidden, progress,
                                  sleep)


def _leak_hunt_cluster(remote: Remote, count: int, interval: float, gc: str,
                       place: Folder, jobs: int, max_gc: int | None,
                       nodes: Sequence[str] | None, include_hidden: bool,
                       progress: Progress, sleep: Callable[[float], None]
                       ) -> ClusterLeakHunt:
    from beam_probe.snapshots.compare import diff_files

    folder = place.path
    members, connected = cluster.members(remote, nodes, include_hidden)
    files: dict[str, list[str]] = {node: [] for node in members}
    errors: dict[str, str] = {}
    stamp = time.strftime("%Y%m%dT%H%M%S")
    interrupted, failure, rounds = False, None, 0
    try:
        for i in range(count):
            if i:
                progress(f"round {i + 1} of {count} in {interval:g} s")
                sleep(interval)
            progress(f"round {i + 1} of {count}")
            for node, answer in take_all(remote, members, connected, gc,
                                         jobs, max_gc, progress):
                if isinstance(answer, dict):
                    errors.setdefault(node, f"round {i + 1}: "
                                            f"{answer['error']}")
                    continue
                path, _size = write_in(place, file_name(
                    node, f"-{stamp}-{i + 1}"), *answer)
                files[node].append(path)
            rounds += 1
    except KeyboardInterrupt:
        interrupted = True
    except ProbeError as exc:
        failure = exc
    rows: list[Any] = []
    for node in members:
        taken = files[node]
        chosen = [taken[0], taken[1], taken[-1]] if len(taken) > 3 \
            else taken
        row: dict[str, Any] = {"node": node, "files": taken, "diff": None}
        if len(chosen) >= 2:
            # One node's files at a time, read back: the cluster's rows
            # are never all in memory at once.
            progress(f"comparing {node}")
            try:
                row["diff"] = diff_files(chosen)
            except SnapshotError as exc:
                # What this node sent makes no snapshot a diff can read:
                # its row, as a node that did not answer.
                errors.setdefault(node, f"its snapshots sent values no "
                                        f"node has ({exc})")
        if node in errors:
            row["error"] = errors[node]
        rows.append(row)
    result: ClusterLeakHunt = {
        "entry": remote.node, "interval": interval, "gc": gc,
        "taken": rounds, "saved": folder, "interrupted": interrupted,
        "nodes": rows, "across": across(rows)}
    if failure is not None:
        # The entry node went: nothing left to ask how names are written.
        raise EndedEarly(result, failure, False)
    return cluster.complete(result, rows)


__all__ = ["BATCH", "across", "diff_folders", "leak_hunt_cluster",
           "node_files", "snapshot_cluster", "take_all"]
