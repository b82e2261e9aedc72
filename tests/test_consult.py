"""Erlang term text (file:consult), and the TLS settings read from a node's
-ssl_dist_optfile: pure, strings and temporary files only."""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings, strategies as st

from beam_probe.erldist.consult import ConsultError, parse_terms
from beam_probe.erldist.terms import Atom, ExportFun, ImproperList
from beam_probe.errors import TlsConfigError, UsageError


def test_the_shapes_config_files_use():
    text = """%% a comment, then two terms
    {a, 'Quoted atom', "tab\\there" " joined", 16#ff, -2#101, 1.5e3,
     $a, $\\n, <<"ab", 1>>, [1, 2 | [3]], [x | y], #{k => v},
     fun m:f/3, true, false, []}.
    "é\\x{263a}\\101".
    """
    first, second = parse_terms(text)
    assert first == (Atom("a"), Atom("Quoted atom"), "tab\there joined", 255,
                     -5, 1500.0, 97, 10, b"ab\x01", [1, 2, 3],
                     ImproperList([Atom("x")], Atom("y")),
                     {Atom("k"): Atom("v")}, ExportFun("m", "f", 3), True,
                     False, [])
    assert isinstance(first[0], Atom) and isinstance(first[1], Atom)
    assert second == "é\u263aA"


@pytest.mark.parametrize("text,where", [
    ("{a, B}.", "variable"),
    ("[1, 2", "expected"),
    ("{a}", "expected '.'"),
    ("{a} {b}.", "expected '.'"),
    ("1 + 2.", "cannot read '\\+ 2"),
    ("fun (X) -> X end.", "cannot read"),
    ("{fun m:f}.", "fun Module:Function/Arity"),
    ("<<a>>.", "strings and integers"),
    ("\n\n  ~.", "line 3"),
    ("37#1.", "bad number"),
    ("[" * 5000 + "]" * 5000 + ".", "nested too deeply"),
])
def test_what_is_not_a_term_is_refused_with_its_line(text, where):
    with pytest.raises(ConsultError, match=where):
        parse_terms(text)


@settings(max_examples=500, deadline=None)
@given(st.lists(st.sampled_from(
    list("{}[]<>|,.:/#=$%'\"\\ \n-+aZ_09xf") + ["fun ", "16#", "=>", "<<",
                                                 ">>", "#{", "m:f/1"]),
    max_size=40))
def test_any_text_parses_or_fails_as_consult_error(pieces):
    try:
        parse_terms("".join(pieces))
    except ConsultError:
        pass


def _optfile(tmp_path, text: str) -> str:
    path = os.path.join(tmp_path, "dist.conf")
    with open(path, "w") as f:
        f.write(text)
    return path


def test_optfile_client_options_are_ours(tmp_path):
    from beam_probe.node.address import settings_from_optfile

    path = _optfile(tmp_path, """
        [{server, [{certfile, "/s.pem"}, {verify, verify_peer}]},
         {client, [{certfile, "/c.pem"}, {keyfile, <<"/c.key">>},
                   {cacertfile, "/ca.pem"}, {password, "pw"},
                   {verify, verify_peer}, {versions, ['tlsv1.3']},
                   {server_name_indication, "db1.example"},
                   {verify_fun, {fun mydist:verify/3, []}},
                   {secure_renegotiate, true}]}].
    """)
    got = settings_from_optfile(path)
    assert (got.certfile, got.keyfile, got.cacertfile) == (
        "/c.pem", "/c.key", "/ca.pem")
    assert got.password == "pw" and got.verify and got.check_hostname
    assert got.server_name == "db1.example" and got.versions == ("tlsv1.3",)
    assert "pw" not in repr(got)


def test_optfile_sni_disable_and_verify_none(tmp_path):
    from beam_probe.node.address import settings_from_optfile

    got = settings_from_optfile(_optfile(tmp_path, """
        [{client, [{verify, verify_none},
                   {server_name_indication, disable}]}].
    """))
    assert not got.verify and not got.check_hostname
    assert got.server_name is None


@pytest.mark.parametrize("text,message", [
    ("[{server, [{certfile, \"/s.pem\"}]}].", "no {client"),
    ("{client, []}.", "must hold one term"),
    ("[{client, [{verify, maybe}]}].", "verify must be"),
    ("[{client, [{versions, ['sslv3']}]}].", "versions may name"),
    ("[{client, [{cert, <<1,2>>}]}].", "not supported"),
    ("[{client, [{certfile, certs}]}].", "must be a string"),
    ("[{client, [{certfile, X}]}].", "variable"),
])
def test_unusable_optfiles_are_named(tmp_path, text, message):
    from beam_probe.node.address import settings_from_optfile

    path = _optfile(tmp_path, text)
    with pytest.raises(TlsConfigError, match=message) as info:
        settings_from_optfile(path)
    assert isinstance(info.value, UsageError)   # exit 2


def test_missing_optfile(tmp_path):
    from beam_probe.node.address import settings_from_optfile

    with pytest.raises(TlsConfigError, match="cannot read"):
        settings_from_optfile(os.path.join(tmp_path, "nope.conf"))
