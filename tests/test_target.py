"""How the node and the cookie are found: the operator's habits."""

from __future__ import annotations

import os
import socket

import pytest

from beam_probe.errors import CookieError, UsageError
from beam_probe.node.address import full_node_name, resolve_cookie, resolve_node

SHORT = socket.gethostname().split(".")[0]


def test_node_names():
    assert full_node_name("app@db1.example.com") == "app@db1.example.com"
    assert full_node_name("app@10.0.0.1") == "app@10.0.0.1"
    assert full_node_name("app", {}) == f"app@{SHORT}"
    assert full_node_name("app", {"RELEASE_DISTRIBUTION": "name"}) == \
        f"app@{socket.getfqdn()}"
    for bad in ("", "@host", "app@", "a@b@c"):
        with pytest.raises(UsageError):
            full_node_name(bad, {})


def test_node_order():
    env = {"BEAM_PROBE_NODE": "a@h", "RELEASE_NODE": "b@h"}
    assert resolve_node("c@h", env) == "c@h"
    assert resolve_node(None, env) == "a@h"
    assert resolve_node(None, {"RELEASE_NODE": "b"}) == f"b@{SHORT}"
    with pytest.raises(UsageError, match="no node"):
        resolve_node(None, {})


def write(path, text, mode):
    path.write_text(text)
    os.chmod(path, mode)
    return str(path)


def test_cookie_order(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    write(home / ".erlang.cookie", "fromhome\n", 0o400)
    f = write(tmp_path / "c", "fromfile", 0o600)
    env = {"HOME": str(home), "BEAM_PROBE_COOKIE": "bp",
           "RELEASE_COOKIE": "rel"}
    assert resolve_cookie(f, "opt", env) == b"fromfile"
    assert resolve_cookie(None, "opt", env) == b"opt"
    assert resolve_cookie(None, None, env) == b"bp"
    del env["BEAM_PROBE_COOKIE"]
    assert resolve_cookie(None, None, env) == b"rel"
    del env["RELEASE_COOKIE"]
    assert resolve_cookie(None, None, env) == b"fromhome"


@pytest.mark.parametrize("mode", [0o440, 0o404, 0o644, 0o700 | 0o001])
def test_cookie_file_readable_by_others_refused(tmp_path, mode):
    f = write(tmp_path / "c", "supersecret", mode)
    with pytest.raises(CookieError, match="group or others") as info:
        resolve_cookie(f, None, {})
    assert "supersecret" not in str(info.value)


def test_missing_cookie_says_where_it_looked(tmp_path):
    with pytest.raises(CookieError, match="no cookie"):
        resolve_cookie(None, None, {"HOME": str(tmp_path)})
    with pytest.raises(CookieError, match="does not exist"):
        resolve_cookie(str(tmp_path / "nope"), None, {})
