"""ping and memory: the cheapest questions, one or two round trips."""

from __future__ import annotations

import time
from typing import Any, TYPE_CHECKING

from beam_probe.erldist.terms import Atom
from beam_probe.node.remote import Remote

if TYPE_CHECKING:
    from beam_probe.probes.results import MemoryResult, Ping


def _text(value: Any) -> str:
    return value if isinstance(value, str) else bytes(value).decode()


def ping(remote: Remote) -> Ping:
    """The node's name, OTP release, ERTS version, and one round-trip time.

    Cost to the node: three trivial calls.
    """
    started = time.perf_counter()
    remote.call("erlang", "node")
    rtt = time.perf_counter() - started
    release, version = remote.calls([
        ("erlang", "system_info", [Atom("otp_release")]),
        ("erlang", "system_info", [Atom("version")]),
    ])
    return {"node": remote.node, "otp_release": _text(release),
            "erts_version": _text(version), "rtt_ms": round(rtt * 1000, 3)}


def memory(remote: Remote) -> MemoryResult:
    """erlang:memory(), in the node's own order. Cost: one cheap call."""
    return {"node": remote.node,
            "memory": {str(key): value
                       for key, value in remote.call("erlang", "memory")}}


def runs_elixir(remote: Remote) -> bool:
    """Whether the node has the elixir application loaded (one call that
    names no new atom: application:loaded_applications/0): its text is
    then shown in Elixir's syntax."""
    loaded = remote.call("application", "loaded_applications", [])
    return any(isinstance(app, tuple) and app and str(app[0]) == "elixir"
               for app in loaded)
