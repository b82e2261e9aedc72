"""TLS distribution against real nodes started with -proto_dist inet_tls.

The certificates are made here with the openssl command: a CA, the node's
certificate (for this host's short name, localhost and 127.0.0.1), a client
certificate from the same CA, a self-signed one the node does not trust, and
an encrypted copy of the client key. The nodes are OTP 25 from Debian 12
and OTP 27 from Debian 13 (erlang-ssl): the OTP 28 runtime the other tests
use comes from a wheel that carries no ssl application, so it cannot start
TLS distribution.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time

import pytest

from beam_probe.erldist.terms import Atom
from beam_probe.erldist.tls import TlsSettings
from beam_probe.errors import TlsError
from beam_probe.node.local import short_host
from beam_probe.node.remote import attach
from conftest import one_line, run_here

SUBJECT_ALT_NAMES = f"DNS:{short_host()},DNS:localhost,IP:127.0.0.1"


def _openssl(*args: str, cwd: str) -> None:
    result = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True,
                            text=True)
    assert result.returncode == 0, result.stderr


def _key_and_csr(folder: str, name: str) -> None:
    _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
             "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr",
             "-subj", f"/CN={name}", cwd=folder)


def _sign(folder: str, name: str) -> None:
    with open(os.path.join(folder, f"{name}.ext"), "w") as f:
        f.write(f"subjectAltName={SUBJECT_ALT_NAMES}\n"
                "extendedKeyUsage=serverAuth,clientAuth\n")
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey",
             "ca.key", "-CAcreateserial", "-out", f"{name}.pem", "-days", "2",
             "-extfile", f"{name}.ext", cwd=folder)


def _optfile(folder: str, name: str, server: str, client: str) -> str:
    path = os.path.join(folder, name)
    with open(path, "w") as f:
        f.write(f"%% written by test_tls.py\n"
                f"[{{server, [{server}]}},\n {{client, [{client}]}}].\n")
    return path


@pytest.fixture(scope="session")
def pki(tmp_path_factory) -> dict[str, str]:
    assert shutil.which("openssl"), "openssl is needed (.ci/setup installs it)"
    folder = str(tmp_path_factory.mktemp("pki"))
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt",
             "ec_paramgen_curve:P-256", "-nodes", "-keyout", "ca.key", "-out",
             "ca.pem", "-days", "2", "-subj", "/CN=beam-probe test CA",
             cwd=folder)
    for name in ("node", "client"):
        _key_and_csr(folder, name)
        _sign(folder, name)
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt",
             "ec_paramgen_curve:P-256", "-nodes", "-keyout", "rogue.key",
             "-out", "rogue.pem", "-days", "2", "-subj", "/CN=rogue",
             cwd=folder)
    _openssl("ec", "-in", "client.key", "-aes256", "-passout", "pass:s3cret",
             "-out", "client_enc.key", cwd=folder)
    files = {name: os.path.join(folder, name) for name in os.listdir(folder)}
    for name, path in files.items():
        if name.endswith(".key"):
            os.chmod(path, 0o600)
    node = (f'{{certfile, "{files["node.pem"]}"}}, '
            f'{{keyfile, "{files["node.key"]}"}}, '
            f'{{cacertfile, "{files["ca.pem"]}"}}, {{verify, verify_peer}}')
    versions = "{versions, ['tlsv1.2', 'tlsv1.3']}"
    files["node.conf"] = _optfile(
        folder, "node.conf",
        f"{node}, {{fail_if_no_peer_cert, true}}, {versions}",
        f"{node}, {versions}")
    files["encrypted.conf"] = _optfile(
        folder, "encrypted.conf", node,
        f'{{certfile, "{files["client.pem"]}"}}, '
        f'{{keyfile, "{files["client_enc.key"]}"}}, {{password, "s3cret"}}, '
        f'{{cacertfile, "{files["ca.pem"]}"}}, {{verify, verify_peer}}')
    files["tls12_no_cert.conf"] = _optfile(
        folder, "tls12_no_cert.conf", node,
        f'{{cacertfile, "{files["ca.pem"]}"}}, {{versions, [\'tlsv1.2\']}}')
    return files


@pytest.fixture(scope="session", params=["25", "27"])
def tls_node(request, session_nodes, pki):
    """A node on TLS distribution that requires client certificates
    (verify_peer, fail_if_no_peer_cert) and offers TLS 1.2 and 1.3: OTP 25
    (Debian 12's ssl) and OTP 27 (Debian 13's, in its root; the
    certificates are under /tmp, which it shares)."""
    if request.param not in request.config.getoption("otp").split(","):
        pytest.skip(f"OTP {request.param} is not among --otp")
    return session_nodes.start(request.param, args=(
        "-proto_dist", "inet_tls", "-ssl_dist_optfile", pki["node.conf"]))


def _mutual(pki) -> tuple[str, ...]:
    return ("--tls", "--certfile", pki["client.pem"], "--keyfile",
            pki["client.key"], "--cacertfile", pki["ca.pem"])




def test_mutual_tls_with_certificate_options(tls_node, pki):
    result = run_here("memory", tls_node.node, *_mutual(pki), "--format",
                     "json", node=tls_node)
    assert result.returncode == 0, result.stderr
    memory = json.loads(result.stdout)["memory"]
    assert memory["total"] > memory["binary"] > 0


def test_the_nodes_own_optfile_is_enough(tls_node, pki):
    # The node's file holds its own certificate in the client part, as a
    # node uses it to reach its peers: beam-probe connects the same way.
    result = run_here("bin-leak", tls_node.node, "3", "--ssl-dist-optfile",
                     pki["node.conf"], "--format", "json", node=tls_node)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["node"] == tls_node.node
    assert report["memory_before"]["binary"] > 0


def test_environment_variables_carry_the_settings(tls_node, pki):
    result = run_here("ping", tls_node.node, node=tls_node, env={
        "BEAM_PROBE_SSL_DIST_OPTFILE": pki["node.conf"]})
    assert result.returncode == 0, result.stderr
    assert "is up" in result.stdout


def test_an_encrypted_key_with_its_password_in_the_optfile(tls_node, pki):
    result = run_here("ping", tls_node.node, "--ssl-dist-optfile",
                     pki["encrypted.conf"], node=tls_node)
    assert result.returncode == 0, result.stderr


def test_an_encrypted_key_without_a_password_is_refused_not_prompted(
        tls_node, pki):
    # OpenSSL would otherwise ask on the terminal, and a cron job would hang.
    result = run_here("ping", tls_node.node, "--tls", "--certfile",
                     pki["client.pem"], "--keyfile", pki["client_enc.key"],
                     "--cacertfile", pki["ca.pem"], node=tls_node, timeout=20)
    assert result.returncode == 2
    assert "encrypted" in one_line(result)


def test_a_tls_node_without_tls_gets_one_clear_line(tls_node):
    result = run_here("ping", tls_node.node, node=tls_node)
    assert result.returncode == 5
    line = one_line(result)
    assert "-proto_dist inet_tls" in line and "--tls" in line


@pytest.mark.parametrize("case,args,expected", [
    # TLS 1.3: the node refuses after our side of the TLS handshake is done,
    # so the refusal arrives as we start the distribution handshake.
    ("no client certificate, TLS 1.3", ("--tls", "--cacertfile", "ca.pem"),
     "requires a client certificate"),
    # TLS 1.2: the refusal comes inside the TLS handshake itself.
    ("no client certificate, TLS 1.2",
     ("--ssl-dist-optfile", "tls12_no_cert.conf"),
     "requires a client certificate"),
    ("a certificate the node does not trust",
     ("--tls", "--certfile", "rogue.pem", "--keyfile", "rogue.key",
      "--cacertfile", "ca.pem"), "rejected our client certificate"),
    ("the node's CA unknown to us",
     ("--tls", "--certfile", "client.pem", "--keyfile", "client.key"),
     "cannot verify"),
    ("a certificate for another name",
     ("--tls", "--certfile", "client.pem", "--keyfile", "client.key",
      "--cacertfile", "ca.pem", "--tls-server-name", "db9.example"),
     "Hostname mismatch"),
])
def test_tls_failures_name_their_cause(tls_node, pki, case, args, expected):
    args = tuple(pki.get(a, a) for a in args)
    result = run_here("ping", tls_node.node, *args, node=tls_node)
    assert result.returncode == 5, (case, result.stderr)
    line = one_line(result)
    assert line.startswith("beam-probe: TLS: ") and expected in line, line


@pytest.mark.parametrize("args,expected", [
    (("--certfile", "client.pem"), "add --tls"),
    (("--ssl-dist-optfile", "node.conf", "--cacertfile", "ca.pem"),
     "one or the other"),
    (("--tls", "--certfile", "client.pem", "--keyfile", "rogue.key"),
     "key values mismatch"),
    (("--tls", "--certfile", "missing.pem"), "does not exist"),
    (("--ssl-dist-optfile", "ca.pem"), "cannot read"),
])
def test_unusable_tls_settings_are_usage_errors(tls_node, pki, args,
                                                expected):
    args = tuple(pki.get(a, a) for a in args)
    result = run_here("ping", tls_node.node, *args, node=tls_node)
    assert result.returncode == 2, result.stderr
    assert expected in one_line(result)


@pytest.mark.slow
def test_tls_against_a_plain_node_is_named(nodes, pki):
    plain = nodes.start("25")
    result = run_here("ping", plain.node, *_mutual(pki), "--connect-timeout", "2",
                     node=plain)
    assert result.returncode == 6
    assert "-proto_dist inet_tls" in one_line(result)


def test_library_calls_in_flight_together_over_tls(tls_node, pki):
    settings = TlsSettings(certfile=pki["client.pem"],
                           keyfile=pki["client.key"],
                           cacertfile=pki["ca.pem"])
    with attach(tls_node.node, tls_node.cookie.encode(), timeout=20,
                tls=settings) as remote:
        assert remote.conn.sock.version() in ("TLSv1.2", "TLSv1.3")
        # Several large answers at once: the reader thread decrypts while
        # calls encrypt and send, through the one TLS session.
        results = remote.calls([("lists", "seq", [1, 50_000 + i])
                                for i in range(8)])
        assert [len(r) for r in results] == [50_000 + i for i in range(8)]
        assert remote.call("erlang", "node", []) == tls_node.node
        # Hidden, as over TCP: not in nodes(), only in nodes(hidden).
        ours = remote.conn.our_node
        assert ours not in remote.call("erlang", "nodes", [])
        assert ours in remote.call("erlang", "nodes", [Atom("hidden")])


def test_library_refusal_is_a_tls_error(tls_node, pki):
    with pytest.raises(TlsError, match="requires a client certificate"):
        attach(tls_node.node, tls_node.cookie.encode(), timeout=10,
               tls=TlsSettings(cacertfile=pki["ca.pem"]))


def test_check_over_tls_and_its_plugin_codes(tls_node, pki):
    ok = run_here("check", tls_node.node, "--ssl-dist-optfile",
                 pki["node.conf"], "--warn", "binary=1TB", node=tls_node)
    assert ok.returncode == 0 and ok.stdout.startswith("BEAM OK"), ok
    plain = run_here("check", tls_node.node, node=tls_node)
    assert plain.returncode == 2 and "inet_tls" in plain.stdout, plain
    unusable = run_here("check", tls_node.node, "--ssl-dist-optfile",
                       pki["ca.pem"], node=tls_node)
    assert unusable.returncode == 3, unusable
    assert unusable.stdout.startswith("BEAM UNKNOWN"), unusable


class _DrippingTlsNode:
    """Completes TLS as a node would, then sends the first handshake
    message in one TLS record whose bytes leave one at a time, 0.8 s
    apart: each raw read then holds part of a record and no plaintext."""

    def __init__(self, pki: dict[str, str]) -> None:
        import socket
        import ssl
        import threading

        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.load_cert_chain(pki["node.pem"], pki["node.key"])
        self.server = socket.socket()
        self.server.bind(("127.0.0.1", 0))
        self.server.listen()
        self.port = self.server.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        import ssl
        import time

        try:
            conn, _ = self.server.accept()
        except OSError:
            return
        incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        tls = self.context.wrap_bio(incoming, outgoing, server_side=True)
        try:
            with conn:
                while True:
                    try:
                        tls.do_handshake()
                        break
                    except ssl.SSLWantReadError:
                        conn.sendall(outgoing.read())
                        incoming.write(conn.recv(65536))
                conn.sendall(outgoing.read())
                tls.write(b"\x00\x00\x00\x03sok")
                for byte in outgoing.read():
                    conn.sendall(bytes([byte]))
                    time.sleep(0.8)
        except (OSError, ssl.SSLError):
            pass

    def close(self) -> None:
        self.server.close()


@pytest.mark.slow
def test_a_record_dripped_over_tls_cannot_stretch_the_deadline(pki):
    import time

    peer = _DrippingTlsNode(pki)
    started = time.monotonic()
    try:
        result = run_here("ping", "x@127.0.0.1", "--dist-port", str(peer.port),
                         "--tls", "--cacertfile", pki["ca.pem"],
                         "--tls-server-name", "localhost",
                         "--connect-timeout", "2",
                         env={"BEAM_PROBE_COOKIE": "c"})
    finally:
        peer.close()
    assert result.returncode == 6, result.stderr
    assert time.monotonic() - started < 5


def test_serve_scrapes_a_tls_node_by_options_and_by_its_config(
        tls_node, pki, tmp_path):
    from test_serve import serve_env, serving

    with serving("--target", tls_node.node, *_mutual(pki),
                 env=serve_env(tls_node.cookie)) as s:
        assert s.probe(tls_node.node)["beam_probe_up"] == 1
    config = tmp_path / "serve.toml"
    config.write_text(
        f"[[target]]\nmatch = '{tls_node.node}'\n"
        f"cookie_file = '{tls_node.cookie_file}'\n"
        f"ssl_dist_optfile = '{pki['node.conf']}'\n")
    with serving("--config", str(config), env=serve_env()) as s:
        assert s.probe(tls_node.node)["beam_probe_up"] == 1
    # Without TLS the same node is down, and says why, in one line.
    with serving("--target", tls_node.node,
                 env=serve_env(tls_node.cookie)) as s:
        assert s.probe(tls_node.node)["beam_probe_up"] == 0
        time.sleep(0.2)
    assert len([line for line in s.errors if ": down: " in line]) == 1
