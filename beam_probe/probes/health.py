"""What `beam-probe check` measures, on one node or on a whole cluster.

One helper call per node (beam_probe_scan:health/3): erlang:memory(), the
process and atom counts, and one pass over every process for the largest
binary_memory and the longest message queue. For --cluster, the target
itself fans the same expression out to every node it is connected to with
erpc:multicall, so beam-probe needs one connection, and one cookie, for the
whole cluster.
"""

from __future__ import annotations

from typing import Any

from ..dist.terms import Atom, format_term
from ..remote import Local, Remote
from .processes import HELPER


def _values(reply: Any) -> dict[str, Any]:
    memory, process_count, atom_count, atom_limit, top_binary, max_queue = \
        reply
    memory = {str(key): value for key, value in memory}
    total = memory["total"]
    return {
        "total": total,
        "processes": memory["processes"],
        "binary": memory["binary"],
        "ets": memory["ets"],
        "atom": memory["atom"],
        "binary_share": round(100.0 * memory["binary"] / total, 2)
        if total else 0.0,
        "process_count": process_count,
        "top_binary_memory": top_binary,
        "max_queue": max_queue,
        "atom_use": round(100.0 * atom_count / atom_limit, 2),
    }


def measure(remote: Remote, jobs: int = 0) -> dict[str, Any]:
    """Every check value of the attached node."""
    reply = remote.run(HELPER, "health", jobs, Local("pmap"),
                       Local("values"))
    return {"node": remote.node, "values": _values(reply)}


def measure_cluster(remote: Remote, timeout: float,
                    jobs: int = 0) -> list[dict[str, Any]]:
    """Every check value of the attached node and of every node it is
    connected to (erlang:nodes()), fanned out by the node itself.

    A node that does not answer within ``timeout`` seconds, or fails, gets
    an "error" instead of "values".
    """
    others = remote.call("erlang", "nodes", [])
    nodes = [Atom(remote.node), *others]
    form, bindings = remote.expression(HELPER, "health", jobs, Local("pmap"),
                                       Local("values"))
    millis = max(1, int(timeout * 1000))
    replies = remote.call(
        "erpc", "multicall",
        [nodes, Atom("erl_eval"), Atom("expr"),
         [form, bindings, Atom("none"), Atom("none"), Atom("value")],
         millis],
        timeout=timeout + remote.timeout)
    results = []
    for node, reply in zip(nodes, replies):
        if reply[0] == Atom("ok"):
            results.append({"node": str(node), "values": _values(reply[1])})
        else:
            results.append({"node": str(node),
                            "error": _describe_failure(reply, timeout)})
    return results


def _describe_failure(reply: Any, timeout: float) -> str:
    # erpc:multicall's {Class, Reason}: {error, {erpc, timeout}},
    # {error, {erpc, noconnection}}, or an exception from the node.
    reason = reply[1] if len(reply) > 1 else reply
    if isinstance(reason, tuple) and reason[:1] == (Atom("erpc"),):
        what = str(reason[1])
        if what == "timeout":
            return f"no answer within {timeout:g} s"
        if what == "noconnection":
            return "connection to it lost"
        return f"erpc {what}"
    return f"failed: {format_term(reply)}"[:200]
