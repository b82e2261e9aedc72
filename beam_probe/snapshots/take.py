"""snapshot: the whole node at one moment, to a file, for diff and
leak-hunt (the three-snapshot method).

One call on the node (beam_probe_snapshot:snapshot/12) returns the memory
figures, every process as compressed row chunks, the ancestors of the
processes grouped by their place in the tree, every ETS table and port,
and the names of the newest atoms. The chunks go to the file as the node
made them: taking a snapshot decodes nothing but the header, and a
million processes make a file of a few MB.

The file itself: format.py.
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Any, Callable, Sequence

from beam_probe.erldist.terms import Atom
from beam_probe.node.forms import LIB, Local
from beam_probe.node.remote import Remote
from beam_probe.node.replies import BadReply, Reply, shown
from beam_probe.probes.watch import record
from beam_probe.snapshots.format import (FORMAT, MAX_ATOMS,
                                         file_name, header_problem,
                                         hunt_folder, write, write_in)

if TYPE_CHECKING:
    from beam_probe.files import Folder


HELPER = "beam_probe_snapshot"

# Rows the node reads, encodes and compresses at a time in a worker: what
# a worker holds at its peak is ~2.8 KB a row of the batch (measured: 2.8
# MB a worker for batches of 1,024, four workers: +50 MB for a snapshot
# of 300,000 processes on OTP 25; +24-29 MB in batches of 256, +36-43 in
# batches of 512). A file's chunk may hold up to format.CHUNK_ROWS (older
# snapshots' 5,000). The cost: the file is ~18% larger than in batches of
# 512 (1.26 MB against 1.07 at 300,000 processes).
NODE_CHUNK_ROWS = 256




# How far up the tree a group's nearest named ancestor is looked for, and
# for how many ancestors in all: a real application's workers sit two or
# three levels under a registered supervisor; the bounds hold the walk to
# a fraction of the process pass whatever the tree.
MAX_DEPTH = 8


MAX_ANCESTORS = 200_000


def take(remote: Remote, gc: str = "holders", jobs: int = 0,
         max_gc: int | None = None,
         progress: Callable[[str], None] = lambda text: None
         ) -> tuple[dict[str, Any], list[tuple[bytes, bytes]]]:
    """The header and the sections of one snapshot of the attached node.
    ``gc`` collects first as watch does (holders by default: the method
    wants each snapshot after a collection)."""
    from beam_probe.probes.watch import sample_node

    epoch = time.time()
    if gc != "none":
        progress(f"collecting ({gc})")
        processes = sample_node(remote, gc, max_gc, jobs).count(
            "process_count")
    else:
        processes = remote.call("erlang", "system_info",
                                [Atom("process_count")])
    progress("reading every process, table and port")
    if estimate(processes) > remote.fan_budget // 2:
        return read(remote.node, _through_a_fan_out(remote, jobs), epoch, gc)
    return _streamed(remote, jobs, epoch, gc)


def _streamed(remote: Remote, jobs: int, epoch: float, gc: str
              ) -> tuple[dict[str, Any], list[tuple[bytes, bytes]]]:
    """A snapshot whose process chunks come as the pass makes them, a
    slice's at a time, each sent once the last is taken: the node never
    holds every chunk of the pass (issue 39). Here they are held, within
    what one reply could have held: a node streaming more is refused."""
    wait_ms = int(remote.timeout * 1000)
    stream = remote.stream(
        HELPER, "snapshot", *args(jobs)[1:],
        address=lambda pid, tag: ((NODE_CHUNK_ROWS, (pid, tag, wait_ms)),))
    chunks: list[Any] = []
    held = 0
    while True:
        try:
            slice_chunks = next(stream)
        except StopIteration as end:
            reply = Reply(f"{HELPER}:snapshot", end.value)
            return read(remote.node, reply, epoch, gc, chunks)
        if not isinstance(slice_chunks, list):
            raise BadReply(f"{HELPER}:snapshot streamed "
                           f"{shown(slice_chunks)}, not a list of chunks")
        for chunk in slice_chunks:
            held += len(chunk) if isinstance(chunk, (bytes, bytearray)) \
                else 0
        if held > remote.conn.limits.max_bytes:
            stream.close()
            raise BadReply(f"{HELPER}:snapshot streamed over "
                           f"{remote.conn.limits.max_bytes} bytes of "
                           "processes")
        chunks.extend(slice_chunks)


# What a node's snapshot takes on the wire: its compressed chunks, ~4.4-
# 5.1 bytes a process in chunks of 256 rows (4.4 MB for 1,000,000 idle
# processes, 0.51 MB for 100,045, measured; ~3.4 in chunks of 5,000), and
# its tables, ports and atoms (tens of KB on a bare node).
SNAPSHOT_BYTES_A_PROCESS = 6
SNAPSHOT_BYTES_BASE = 64 * 1024


def estimate(processes: Any) -> int:
    """The bytes a snapshot of so many processes is expected to take."""
    count = processes if isinstance(processes, int) else 0
    return SNAPSHOT_BYTES_BASE + SNAPSHOT_BYTES_A_PROCESS * max(0, count)


def _through_a_fan_out(remote: Remote, jobs: int) -> Reply:
    """A snapshot too large for one frame by estimate (~2M processes and
    up), asked as a fan-out to the node itself: an answer over a frame
    stays on the node and is fetched a piece at a time (node/remote.py),
    where one reply would be refused."""
    from beam_probe.errors import RemoteError, TimedOut
    from beam_probe.probes.cluster import describe_failure

    (kind, value), = remote.fan_out([remote.node], HELPER, "snapshot",
                                    *args(jobs), timeout=remote.timeout)
    if kind == "ok":
        return Reply(f"{HELPER}:snapshot", value)
    why = describe_failure((kind, value), remote.timeout)
    if why.startswith("no answer within"):
        raise TimedOut(f"{HELPER}:snapshot: {why}")
    raise RemoteError(f"{HELPER}:snapshot: {why}")


def args(jobs: int) -> tuple[Any, ...]:
    """The snapshot helper's arguments: the same for one node or a
    fan-out (snapshots/cluster.py)."""
    return ((NODE_CHUNK_ROWS, Atom("none")), MAX_ATOMS, MAX_DEPTH,
            MAX_ANCESTORS, jobs,
            Local("pmap", LIB), Local("others", LIB), Local("top", LIB),
            Local("settled", LIB), Local("sample", "beam_probe_watch"),
            Local("rss", "beam_probe_alloc"), Local("parts", HELPER))


def read(node: str, reply: Reply, epoch: float, gc: str,
         streamed: Sequence[Any] = ()
         ) -> tuple[dict[str, Any], list[tuple[bytes, bytes]]]:
    """A snapshot helper's reply as a file's header and sections, each
    value checked as it is read, and the header as a file's is when read
    back (format.header_problem): what the node sent that no node can have
    is a BadReply here, never a file that diff then refuses. ``streamed``:
    the process chunks that came before the reply."""
    # From the helper, whose text holds the atom: a call of our own would
    # create 'otp_release' on a node that never asked for it, and the
    # first snapshot's diff would show it as an atom added.
    raw_sample = reply.map("sample")
    sample = record(node, raw_sample, epoch, gc, None)
    processes = [*streamed, *reply.list("processes")]
    header = {
        "format": FORMAT, "node": node,
        "otp_release": _text(reply, "otp_release"),
        "time": sample["time"], "epoch": sample["epoch"], "gc": gc,
        "wordsize": raw_sample.wordsize(),
        "items": _names(reply, "items"),
        "sample": sample,
        "atom_count": reply.count("atom_count"),
        "creation": reply.count("creation"),
        "elixir": reply["elixir"] is True,
        "atoms_from": reply.count("atoms_from"),
        "atoms": _names(reply, "atoms"),
        "chunks": len(processes),
        # Every process but ours, as the file holds them: one count
        # everywhere.
        "processes": reply.count("process_count"),
        # Names from the dictionary (beam_probe_snapshot.erl): on OTP 25
        # the proc_lib processes whose whole dictionary was copied for
        # their '$initial_call', and those left as proc_lib:init_p/N for
        # a heap past the cap (bytes).
        "dictionary_heap_cap": reply.count("dictionary_heap_cap", 1),
        "dictionaries_read": reply.count("dictionaries_read"),
        "dictionaries_unread": reply.count("dictionaries_unread"),
    }
    problem = header_problem(header, FORMAT)
    if problem:
        raise BadReply(f"{reply.helper}'s reply makes no snapshot: {problem}")
    sections = [(b"P", _binary(reply, "processes", chunk))
                for chunk in processes]
    sections += [(kind, _binary(reply, key, reply[key]))
                 for kind, key in ((b"A", "ancestors"), (b"T", "tables"),
                                   (b"O", "ports"))]
    return header, sections


def _text(reply: Reply, key: str) -> str:
    """A charlist (a str as decoded) or a binary, as text."""
    value = reply[key]
    if isinstance(value, (bytes, bytearray)):
        value = bytes(value).decode("latin-1")
    if not isinstance(value, str) or len(value) > 1024:
        raise BadReply(f"{reply.helper}'s {key} is {shown(value)}, not text")
    return str(value)


def _names(reply: Reply, key: str) -> list[str]:
    """A list of atoms, as text."""
    names = reply.list(key)
    if not all(isinstance(name, Atom) for name in names):
        raise BadReply(f"{reply.helper}'s {key} is not a list of atoms")
    return [str(name) for name in names]


def _binary(reply: Reply, key: str, value: Any) -> bytes:
    """A section as the node made it (term_to_binary's bytes): bytes(N)
    of a crafted integer would be N zero bytes."""
    if not isinstance(value, (bytes, bytearray)):
        raise BadReply(f"{reply.helper}'s {key} holds {shown(value)}, not "
                       "a binary")
    return bytes(value)


def snapshot(remote: Remote, path: str, gc: str, jobs: int,
             max_gc: int | None, progress: Callable[[str], None]) -> dict[Any, Any]:
    """Take one snapshot and write it to ``path``; what was written."""
    header, sections = take(remote, gc, jobs, max_gc, progress)
    size = write(path, header, sections)
    return {"node": header["node"], "file": path, "bytes": size,
            "time": header["time"], "gc": gc,
            "processes": header["processes"],
            "dictionaries_unread": header["dictionaries_unread"],
            "dictionary_heap_cap": header["dictionary_heap_cap"],
            "ets_tables": header["sample"]["ets_count"],
            "ports": header["sample"]["port_count"]}


def leak_hunt(remote: Remote, count: int, interval: float, gc: str,
              save: str | None, jobs: int, max_gc: int | None,
              progress: Callable[[str], None],
              sleep: Callable[[float], None] = time.sleep,
              kept_in: Callable[[str, bool], None] | None = None
              ) -> dict[Any, Any]:
    """The three-snapshot method in one go: ``count`` snapshots
    ``interval`` seconds apart, each after the chosen collection, then the
    diff of the first, the second and the last.

    What was taken is always kept, in ``save`` or else a new folder of the
    temporary directory (the result's "saved"): a node dying of memory is
    when the evidence matters most. Ctrl-C keeps what was taken and diffs
    it when there are two or more; so does a node that fails mid-way, and
    then EndedEarly carries that diff and the node's error. ``kept_in``
    is told the folder (and whether it is a temporary one) before the
    first snapshot."""
    with hunt_folder(save) as place:
        if kept_in is not None:
            kept_in(place.path, not save)
        return _hunt(remote, count, interval, gc, place, bool(save), jobs,
                     max_gc, progress, sleep)


def _hunt(remote: Remote, count: int, interval: float, gc: str,
          place: Folder, saved: bool, jobs: int, max_gc: int | None,
          progress: Callable[[str], None],
          sleep: Callable[[float], None]) -> dict[Any, Any]:
    from beam_probe.errors import EndedEarly, ProbeError
    from beam_probe.snapshots.columns import (Snapshot, check_taken,
                                              open_file)
    from beam_probe.snapshots.compare import heap_diff

    folder = place.path
    files: list[str] = []
    # The first, the second and the latest, as taken: their sections in
    # hand (~4 bytes a process, compressed), each checked as it is taken,
    # compared a chunk at a time at the end, never read back from disk.
    kept: dict[int, Snapshot] = {}
    interrupted = False
    failure: ProbeError | None = None
    elixir = False
    stamp = time.strftime("%Y%m%dT%H%M%S")
    try:
        for i in range(count):
            if i:
                progress(f"snapshot {i + 1} of {count} in "
                         f"{interval:g} s")
                sleep(interval)
            progress(f"snapshot {i + 1} of {count}")
            header, sections = take(remote, gc, jobs, max_gc, progress)
            path, _size = write_in(place, file_name(
                remote.node, f"-{stamp}-{i + 1}"), header, sections)
            files.append(path)
            elixir = header["elixir"]
            if i >= 3:
                kept.pop(i - 1, None)  # no longer the latest
            kept[i] = check_taken(path, header, sections)
    except KeyboardInterrupt:
        interrupted = True
    except ProbeError as exc:
        failure = exc
    if not files and not saved:
        os.rmdir(folder)  # nothing taken: no folder to name
    chosen = [0, 1, len(files) - 1] if len(files) > 3 else \
        list(range(len(files)))
    diff = None
    if len(chosen) >= 2:
        progress("comparing")
        # One cut short by Ctrl-C as it was checked is read from its file.
        snaps = [kept[i] if i in kept else open_file(files[i])
                 for i in chosen]
        try:
            diff = heap_diff(snaps)
        finally:
            for snap in snaps:
                snap.close()
    result = {"node": remote.node, "interval": interval, "gc": gc,
              "taken": len(files), "files": files,
              "saved": folder if files or saved else None,
              "interrupted": interrupted, "compared": len(chosen),
              "diff": diff}
    if failure is not None:
        result["error"] = f"{failure.label}: {failure}"
        raise EndedEarly(result, failure, elixir)
    return result


__all__ = ["args", "leak_hunt", "read", "snapshot", "take"]
