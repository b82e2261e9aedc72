"""The whole cluster through one node: which nodes, and each one's answer.

beam-probe connects to one node, the entry. The entry runs the same helper
on every chosen node at once (Remote.fan_out: erpc:multicall of
erl_eval:expr/5, stock OTP only), each under a guard that watches the
entry's call, which our connection's guard watches in turn: one
connection and one cookie for the whole cluster, nothing loaded anywhere,
and when we go the work stops on every node. A bastion that reaches one
node reaches them all.

Each node's reply is read by the one-node probe's own reader, so a node's
answer means what it means alone; a node that fails (down, slow,
partitioned, refusing, or a malformed reply) becomes a row that says why,
and the others go on. The compositions for each command live with the
commands' probes; this module is the mechanics: the members, the fan-out,
the failures, the merge.

Cost to the entry node: one process running the fan-out, and every node's
reply passing through it (a ranking of N rows per node: N x nodes rows in
all, at most MAX_ROWS).
"""

from __future__ import annotations

from typing import (TYPE_CHECKING, Any, Callable, Iterable, Iterator,
                    Sequence, TypeVar, cast)

from beam_probe.erldist.terms import Atom, format_term
from beam_probe.errors import (ClusterIncomplete, EndedEarly, ProbeError,
                               ProtocolError, UsageError)
from beam_probe.node.replies import Reply, escaped, shown

if TYPE_CHECKING:
    from beam_probe.node.remote import FanReply, Remote
    from beam_probe.probes.results import NodeFailure

T = TypeVar("T")
S = TypeVar("S")

# A --nodes list is the user's to write; each name is an atom on the entry
# node, so the list has a bound. Clusters of a few hundred nodes exist;
# erlang:nodes() itself is not bounded by us (the cluster is what it is).
MAX_NODES = 1000
MAX_NAME = 255  # an atom's length in characters

# The names beam-probe itself connects as (erldist.dial.NAME_POOL): other
# probes attached to the same node are hidden nodes of ours, not members.
OUR_PREFIX = "beam_probe_"


def check_names(names: Sequence[str]) -> None:
    """A --nodes list, checked before anything connects."""
    if not names:
        raise UsageError("--nodes needs at least one name@host")
    if len(names) > MAX_NODES:
        raise UsageError(f"--nodes names at most {MAX_NODES} nodes, not "
                         f"{len(names)}")
    for name in names:
        if (name.count("@") != 1 or name.startswith("@")
                or name.endswith("@") or len(name) > MAX_NAME
                or not name.isprintable() or " " in name):
            raise UsageError(f"--nodes: {name[:60]!r} is not a node name "
                             "(name@host)")
        if _ours(name):
            # A probe's own hidden node runs no erl_eval: the entry's
            # spawn request would go unanswered until the timeout.
            raise UsageError(f"--nodes: {name} is a beam-probe connection, "
                             "not a node of the cluster")


class Chosen(list[str]):
    """A --nodes list; ``dial``: the entry may connect to those of them it
    is not connected to (--connect), within MAX_DIAL and after their hosts
    resolved here."""

    def __init__(self, names: Iterable[str], dial: bool = False) -> None:
        super().__init__(names)
        self.dial = dial


# --connect: how many nodes the entry may be asked to dial at once. An
# entry dialling looks each host up itself, inside net_kernel, and
# accepts no connection meanwhile (1,000 unresolvable names: ~90 s, and
# global cut off its cluster); a few, resolved here first, cost it a
# moment.
MAX_DIAL = 16


def parse_names(text: str) -> list[str]:
    """``a@h,b@h`` as a list, each checked; duplicates once, in order."""
    names = list(dict.fromkeys(n.strip() for n in text.split(",")
                               if n.strip()))
    check_names(names)
    return names


# A ranking's rows cross the entry node and reach us together: N rows a
# node. proc-count's own bound (10,000 rows, a few MB) holds for the whole
# cluster's reply, whatever the number of nodes.
MAX_ROWS = 10_000


def check_rows(n: int, nodes: int) -> None:
    """N rows from each of ``nodes`` nodes, within MAX_ROWS in all."""
    if n * nodes > MAX_ROWS:
        raise UsageError(f"N x nodes must be at most {MAX_ROWS:,} with "
                         f"--cluster, not {n} x {nodes}: ask for fewer "
                         "rows, or fewer nodes with --nodes")


def _ours(name: str) -> bool:
    head = name.split("@", 1)[0]
    return head.startswith(OUR_PREFIX) and head[len(OUR_PREFIX):].isdigit()


def connected_nodes(remote: Remote, args: list[Any]) -> list[str]:
    """erlang:nodes(Args...) of the entry, checked: a list of node names
    (a hostile entry's anything else is a ProtocolError, exit 8)."""
    found = remote.call("erlang", "nodes", args)
    if not isinstance(found, list) or len(found) > MAX_NODES * 100 or \
            not all(isinstance(n, Atom) and "@" in n for n in found):
        raise ProtocolError(f"the entry node's erlang:nodes() answered "
                            f"{shown(found)}, not a list of node names")
    if len(found) >= MAX_NODES:
        # Every node's answer is kept for ours: the cluster's size bounds
        # what we hold, as --nodes's own bound does.
        raise UsageError(f"the entry node is connected to {len(found):,} "
                         f"nodes; beam-probe asks at most {MAX_NODES:,} at "
                         "once: name them with --nodes")
    return [str(n) for n in found]


def members(remote: Remote, chosen: Sequence[str] | None = None,
            include_hidden: bool = False) -> tuple[list[str], set[str]]:
    """The nodes to ask, the entry first, and those the entry is connected
    to now. ``chosen``: exactly those (the fan-out asks only those the
    entry is connected to: it never dials one). Otherwise the entry and
    erlang:nodes(): visible nodes, hidden ones too with
    ``include_hidden`` (never beam-probe's own)."""
    kinds = [Atom("visible"), Atom("hidden")] if include_hidden \
        else [Atom("visible")]
    connected = set(connected_nodes(remote, [kinds]))
    connected.add(remote.node)
    if chosen and getattr(chosen, "dial", False):
        connected |= _dial(remote, [n for n in chosen if n not in connected])
    if chosen:
        return list(chosen), connected
    others = sorted(n for n in connected - {remote.node} if not _ours(n))
    return [remote.node, *others], connected


def _dial(remote: Remote, names: list[str]) -> set[str]:
    """--connect: the entry dials those of ``names`` whose hosts resolve
    here within the timeout; the ones it connected to."""
    if not names:
        return set()
    if len(names) > MAX_DIAL:
        raise UsageError(f"--connect dials at most {MAX_DIAL} nodes at "
                         f"once, not {len(names)}: connect the others "
                         "first, or name fewer")
    resolved = _resolving(sorted({n.split("@", 1)[1] for n in names}),
                          remote.timeout)
    asked = [n for n in names if n.split("@", 1)[1] in resolved]
    if not asked:
        return set()
    try:
        answers = remote.calls([("net_kernel", "connect_node", [Atom(n)])
                                for n in asked])
    except ProbeError:
        return set()  # each is then its row: not connected
    return {n for n, ok in zip(asked, answers) if ok is True}


def _resolving(hosts: list[str], timeout: float) -> set[str]:
    """The hosts that resolve here within ``timeout`` seconds in all
    (looked up at once: getaddrinfo has no timeout of its own, so a slow
    resolver's thread is left to finish by itself)."""
    import socket
    import threading
    import time

    found: set[str] = set()

    def look(host: str) -> None:
        try:
            socket.getaddrinfo(host, None)
            found.add(host)
        except (OSError, UnicodeError):
            pass

    threads = [threading.Thread(target=look, args=(host,), daemon=True)
               for host in hosts]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + timeout
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    return set(found)


def fan(remote: Remote, nodes: Sequence[str], helper: str, function: str,
        args: Iterable[Any], read: Callable[[str, Reply], T],
        timeout: float, connected: set[str] | None = None,
        wait: float | None = None) -> list[T | NodeFailure]:
    """``helper:function(args...)`` on every node at once, through the
    entry; each reply read by ``read(node, reply)``, in ``nodes``' order.
    ``timeout`` bounds each node; the whole waits ``wait``, by default a
    little longer, so a slow node is its row ("no answer within"), not
    the end of the run. Nodes whose answers did not fit in one frame
    beside the others' are asked again in groups that fit (their sizes
    known), once; a node's answer too large on its own is its row."""
    args = tuple(args)
    replies = dict(zip(nodes, remote.fan_out(list(nodes), helper, function,
                                             *args, timeout=timeout,
                                             wait=wait)))
    for node, (kind, size) in list(replies.items()):
        if kind == "crowded" and size > remote.fan_budget:
            # No node of ours sends that (encoded/2 drops it): not asked
            # again, it would only cross the entry twice.
            replies[node] = ("oversize", (size, remote.fan_budget))
    for group in _regroup({n: r[1] for n, r in replies.items()
                           if r[0] == "crowded"},
                          remote.fan_budget):
        replies.update(zip(group, remote.fan_out(
            group, helper, function, *args, timeout=timeout, wait=wait)))
    out: list[T | NodeFailure] = []
    for node in nodes:
        kind, value = replies[node]
        if kind == "ok":
            try:
                out.append(read(node, Reply(f"{helper}:{function} on {node}",
                                            value)))
            except ProtocolError as exc:
                out.append({"node": node, "error": str(exc)})
        else:
            out.append({"node": node, "error": describe_failure(
                (kind, value), timeout,
                connected is None or node in connected)})
    return out


def _regroup(sizes: dict[str, int], most: int) -> list[list[str]]:
    """Nodes of known answer sizes in groups of at most ``most`` bytes in
    all, largest first (first fit): a node alone is always a group."""
    groups: list[tuple[int, list[str]]] = []
    for node in sorted(sizes, key=lambda n: -sizes[n]):
        for i, (used, group) in enumerate(groups):
            if used + sizes[node] <= most:
                groups[i] = (used + sizes[node], group + [node])
                break
        else:
            groups.append((sizes[node], [node]))
    return [group for _, group in groups]


def describe_failure(reply: FanReply, timeout: float,
                     was_connected: bool = True) -> str:
    """A node's failed FanReply as one line."""
    kind, value = reply
    if kind == "not_connected":
        # beam-probe never makes the entry dial (beam_probe_lib:fan_out/5).
        return ("not connected to the entry node (down, of another cookie, "
                "or never connected: beam-probe does not make the entry "
                "dial; probe it directly)")
    if kind == "crowded":
        return (f"its answer ({value:,} bytes) did not fit beside the "
                "others' twice")
    if kind == "oversize":
        size, most = value
        return (f"its answer is {size:,} bytes, over the {most:,} "
                "beam-probe takes from one node")
    if kind == "unread":
        return (f"it answered with a term of {value:,} bytes, not as "
                "beam-probe's helpers answer: the entry did not pass it on")
    if kind in ("undecodable", "malformed"):
        return f"its answer could not be read: {_cut(value)}"
    reason = value[1] if isinstance(value, tuple) and len(value) > 1 \
        else value
    if isinstance(reason, tuple) and reason[:1] == (Atom("erpc"),) \
            and len(reason) > 1:
        what = _cut(reason[1])
        if what == "timeout":
            return f"no answer within {timeout:g} s"
        if what == "noconnection":
            return ("connection to it lost" if was_connected else
                    "the entry node cannot reach it (down, another cookie, "
                    "or no such node)")
        return f"erpc {what}"
    return f"failed: {_cut(value)}"


def _cut(value: Any) -> str:
    """A peer's term or text as part of one line: cut, control characters
    escaped (a row may be a plugin's line)."""
    text = value if isinstance(value, str) else format_term(value)
    return escaped(text[:200])[:200]


def failed(answer: Any) -> bool:
    return "error" in answer


def answered(answers: Sequence[T | NodeFailure]) -> list[T]:
    """The answers of the nodes that answered."""
    return [cast(T, a) for a in answers if not failed(a)]


def per_node(answers: Sequence[T | NodeFailure], summary: Callable[[T], S]
             ) -> list[S | NodeFailure]:
    """A row a node, in order: ``summary`` of its answer, or its failure."""
    return [cast("NodeFailure", a) if failed(a) else summary(cast(T, a))
            for a in answers]


def merged(answers: Sequence[T | NodeFailure],
           take: Callable[[T], Iterable[Any]]) -> Iterator[Any]:
    """The rows ``take`` gives of each answer, each with its node."""
    for answer in answered(answers):
        node = cast(Any, answer)["node"]
        for row in take(answer):
            yield {"node": node, **row}


def complete(result: T, answers: Sequence[Any]) -> T:
    """``result`` when every node answered; otherwise EndedEarly: the
    result is written (the failures in its rows), then exit 15 with one
    line naming the first failure."""
    failures = [a for a in answers if failed(a)]
    if not failures:
        return result
    first = failures[0]
    more = f" (and {len(failures) - 1} more)" if len(failures) > 1 else ""
    raise EndedEarly(result, ClusterIncomplete(
        f"{len(answers) - len(failures)} of {len(answers)} nodes answered; "
        f"{first['node']}: {first['error']}{more}"), elixir=None)


def top(rows: Iterable[Any], key: str, n: int, descending: bool = True
        ) -> list[Any]:
    """The first ``n`` of every node's rows by ``key``: largest first, or
    smallest (bin-leak's most negative) with ``descending`` false."""
    sign = -1 if descending else 1
    return sorted(rows, key=lambda r: sign * r[key])[:n]




__all__ = ["Chosen", "MAX_DIAL", "MAX_NODES", "MAX_ROWS", "check_rows", "answered", "check_names",
           "connected_nodes",
           "complete", "describe_failure", "failed", "fan", "members",
           "merged", "parse_names", "per_node", "top"]
