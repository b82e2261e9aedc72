"""What a run makes a node load: stock OTP modules only, never ours.

beam-probe sends its Erlang as text for erl_eval; nothing of ours is ever
loaded. But the stock code that runs for it may be loaded on first use,
on a node that had not yet needed it (erl_eval itself, erl_bits for a
binary pattern, erts_debug for a size): the README lists what this test
measures on a fresh plain node."""

from __future__ import annotations

import os
import time

from beam_probe.erldist.terms import Atom
from beam_probe.node.remote import attach
from conftest import run_cli

# Each command once, as an operator would run them on a node new to us.
COMMANDS = (["ping"], ["memory"], ["bin-leak", "3"],
            ["proc-count", "memory", "3"],
            ["proc-window", "reductions", "3", "50"],
            ["proc-info", "code_server"], ["inspect", "code_server"],
            ["check"], ["watch", "--count", "2", "--interval", "0.2",
                        "--gc", "holders"],
            ["leak-hunt", "--interval", "0", "--snapshots", "2"],
            ["alloc"], ["ets", "5"], ["top", "--once"],
            ["trace-gc", "code_server", "--duration", "0.3"],
            ["calls", "erlang:list_to_atom/1", "--duration", "0.3"],
            ["senders", "code_server", "--duration", "0.3"])


def _text(value) -> str:
    """A charlist, a binary or an atom as text."""
    if isinstance(value, list):
        return "".join(map(chr, value))
    if isinstance(value, bytes):
        return value.decode()
    return str(value)


def _loaded(remote) -> set[str]:
    return {str(m) for m, _ in remote.call("code", "all_loaded")}


def test_a_run_loads_stock_modules_only(nodes, otp, tmp_path):
    # A plain node: no test module on its path, nothing run on it yet.
    node = nodes.start(otp, code_paths=())
    env = {"BEAM_PROBE_CACHE": str(tmp_path / "cache"),
           "TMPDIR": str(tmp_path)}
    with attach(node.node, node.cookie.encode()) as remote:
        lib = _text(remote.call("code", "lib_dir", []))
        # The node answers before its boot has ended: what the boot still
        # loads (logger's handlers, kernel_config on OTP 28) is not ours.
        deadline = time.monotonic() + 120
        while remote.call("init", "get_status", []) != (
                Atom("started"), Atom("started")):
            assert time.monotonic() < deadline, "the node never booted"
            time.sleep(0.1)
        time.sleep(1)
        before = _loaded(remote)
    # A plain node has erl_eval and erl_parse loaded once booted (the
    # README says so); the list below is what comes on top of them.
    assert {"erl_eval", "erl_parse"} <= before, sorted(before)
    added: dict[str, list[str]] = {}
    seen = set(before)
    for args in COMMANDS:
        r = run_cli(args[0], node.node, *args[1:],
                    env={"HOME": node.home, **env})
        assert r.returncode == 0, (args, r.stderr)
        with attach(node.node, node.cookie.encode()) as remote:
            now = _loaded(remote)
            new = sorted(now - seen)
            for module in new:
                where = _text(remote.call("code", "which", [Atom(module)]))
                # Stock: a file of the release's own lib folder (or
                # preloaded in ERTS); never ours, never from elsewhere.
                assert not module.startswith("beam_probe"), (args, module)
                assert where == "preloaded" or os.path.realpath(
                    where).startswith(os.path.realpath(lib) + os.sep), \
                    (args, module, where, lib)
        seen |= now
        if new:
            added[" ".join(args)] = new
    print(f"OTP {otp}: loaded by a first run: "
          + "; ".join(f"{cmd}: {', '.join(mods)}"
                      for cmd, mods in added.items()))
    print(f"OTP {otp}: all: {', '.join(sorted(seen - before))}")
