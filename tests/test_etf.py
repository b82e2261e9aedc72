"""The codec against terms the node itself encodes, and against erlang-py."""

from __future__ import annotations

import struct

import erlang as erlang_py  # erlang-py, the test oracle
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from beam_probe.erldist import etf
from beam_probe.erldist.terms import (Atom, BitString, ExportFun, Fun,
                                   ImproperList, Pid, Port, Reference,
                                   format_term)


# -- normal forms shared by both decoders --------------------------------------

def ours_normal(v):
    if v is True or v is False:
        return ("atom", "true" if v else "false")
    if isinstance(v, Atom):
        return ("atom", str(v))
    if isinstance(v, (int, float)):
        return v
    if isinstance(v, bytes):
        return ("bin", v, 8)
    if isinstance(v, BitString):
        return ("bin", v.data, v.bits)
    if isinstance(v, str):
        return ("str", v.encode("latin-1"))
    if isinstance(v, tuple):
        return ("tuple",) + tuple(ours_normal(x) for x in v)
    if isinstance(v, list):
        return ("list", tuple(ours_normal(x) for x in v), ("nil",))
    if isinstance(v, ImproperList):
        return ("list", tuple(ours_normal(x) for x in v.items),
                ours_normal(v.tail))
    if isinstance(v, dict):
        return ("map", tuple(sorted((repr(ours_normal(k)), ours_normal(x))
                                    for k, x in v.items())))
    if isinstance(v, Pid):
        return ("pid", str(v.node), v.id, v.serial, v.creation)
    if isinstance(v, Port):
        return ("port", str(v.node), v.id, v.creation)
    if isinstance(v, Reference):
        return ("ref", str(v.node), v.ids, v.creation)
    if isinstance(v, (Fun, ExportFun)):
        return ("fun",)
    raise AssertionError(f"unexpected {v!r}")


def _int(raw: bytes) -> int:
    return int.from_bytes(raw, "big")


def oracle_normal(v):
    if v is None:
        return ("atom", "undefined")
    if v is True or v is False:
        return ("atom", "true" if v else "false")
    if isinstance(v, erlang_py.OtpErlangAtom):
        name = v.value
        return ("atom", name.decode("latin-1") if isinstance(name, bytes)
                else name)
    if isinstance(v, (int, float)):
        return v
    if isinstance(v, bytes):
        return ("str", v)
    if isinstance(v, erlang_py.OtpErlangBinary):
        return ("bin", v.value, v.bits)
    if isinstance(v, tuple):
        return ("tuple",) + tuple(oracle_normal(x) for x in v)
    if isinstance(v, list):
        return ("list", tuple(oracle_normal(x) for x in v), ("nil",))
    if isinstance(v, erlang_py.OtpErlangList):
        return ("list", tuple(oracle_normal(x) for x in v.value[:-1]),
                oracle_normal(v.value[-1]))
    if isinstance(v, dict):
        return ("map", tuple(sorted((repr(oracle_normal(k)),
                                     oracle_normal(x)) for k, x in v.items())))
    if isinstance(v, erlang_py.OtpErlangPid):
        return ("pid", oracle_normal(v.node)[1], _int(v.id), _int(v.serial),
                _int(v.creation))
    if isinstance(v, erlang_py.OtpErlangPort):
        return ("port", oracle_normal(v.node)[1], _int(v.id), _int(v.creation))
    if isinstance(v, erlang_py.OtpErlangReference):
        ids = struct.unpack(f">{len(v.id) // 4}I", v.id)
        return ("ref", oracle_normal(v.node)[1], ids, _int(v.creation))
    if isinstance(v, erlang_py.OtpErlangFunction):
        return ("fun",)
    raise AssertionError(f"unexpected oracle value {v!r}")


def oracle_decode(data: bytes):
    return oracle_normal(erlang_py.binary_to_term(data))


# -- the node's own encodings ---------------------------------------------------

@pytest.fixture(scope="module")
def corpus(remote):
    return remote.call("beam_probe_test_terms", "corpus")


def test_corpus_covers_every_tag(corpus, otp):
    """Decode the node's corpus through counting handlers: every tag the
    codec reads must have been met in a real encoding (a byte search would
    find letters like 'F' or 't' in any corpus)."""
    met = set()
    saved = list(etf._HANDLERS)
    for tag, handler in enumerate(saved):
        def counting(data, pos, tag=tag, handler=handler):
            met.add(tag)
            return handler(data, pos)
        etf._HANDLERS[tag] = counting
    try:
        for _name, data in corpus:
            etf.decode(data, max_items=1 << 30, max_uncompressed=1 << 30)
    finally:
        etf._HANDLERS[:] = saved
    expected = {
        etf.NEW_PID_EXT, etf.NEWER_REFERENCE_EXT, etf.NEW_FLOAT_EXT,
        etf.FLOAT_EXT, etf.BIT_BINARY_EXT, etf.NEW_FUN_EXT, etf.EXPORT_EXT,
        etf.MAP_EXT, etf.SMALL_BIG_EXT, etf.LARGE_BIG_EXT,
        etf.LARGE_TUPLE_EXT, etf.SMALL_TUPLE_EXT, etf.COMPRESSED,
        etf.SMALL_INTEGER_EXT, etf.INTEGER_EXT, etf.NIL_EXT, etf.STRING_EXT,
        etf.LIST_EXT, etf.BINARY_EXT, etf.SMALL_ATOM_UTF8_EXT,
        etf.ATOM_UTF8_EXT, etf.ATOM_EXT}
    # SMALL_ATOM_EXT (latin-1, minor version 1) is decoded too, but neither
    # release writes it in any encoding it offers us.
    if int(otp) >= 26:
        # OTP 26+ writes every port so; OTP 25 only ids past 32 bits.
        expected.add(etf.V4_PORT_EXT)
    assert expected - met == set()


def test_decode_then_encode_is_the_same_term_on_the_node(remote, corpus):
    """Every corpus term survives our decode and encode, judged by the node."""
    ours = [etf.encode(etf.decode(data)) for _name, data in corpus]
    verdicts = remote.calls([("beam_probe_test_terms", "same", [data, mine])
                             for (_n, data), mine in zip(corpus, ours)])
    failed = [name for (name, _d), ok in zip(corpus, verdicts) if ok is not True]
    assert failed == []


def test_corpus_agrees_with_erlang_py(corpus):
    for name, data in corpus:
        assert ours_normal(etf.decode(data)) == oracle_decode(data), name


def test_printing_like_erlang(remote):
    pid = remote.call("erlang", "whereis", [Atom("init")])
    assert str(pid) == "<0.0.0>"
    assert format_term((Atom("gen_server"), Atom("loop"), 7)) == \
        "{gen_server,loop,7}"
    ref = remote.call("erlang", "make_ref")
    text = remote.call("erlang", "ref_to_list", [ref])
    assert str(ref) == text


# -- hand-made old forms, which no modern node emits ----------------------------

OLD_FORMS = [
    # PID_EXT with an ATOM_EXT node, creation:8
    b"\x83g" + b"d\x00\x05a@b.c" + struct.pack(">IIB", 12, 3, 2),
    # PORT_EXT
    b"\x83f" + b"s\x05a@b.c" + struct.pack(">IB", 7, 1),
    # REFERENCE_EXT
    b"\x83e" + b"d\x00\x05a@b.c" + struct.pack(">IB", 99, 3),
    # NEW_REFERENCE_EXT, 3 words
    b"\x83r\x00\x03" + b"d\x00\x05a@b.c" + b"\x01" + struct.pack(">III", 1, 2,
                                                                  3),
    # V4_PORT_EXT with a 64-bit id
    b"\x83x" + b"w\x05a@b.c" + struct.pack(">QI", 2**40, 5),
]


@pytest.mark.parametrize("data", OLD_FORMS)
def test_old_forms_agree_with_erlang_py(data):
    assert ours_normal(etf.decode(data)) == oracle_decode(data)


# -- random terms ---------------------------------------------------------------

atoms = st.text(min_size=0, max_size=20).map(Atom)
leaves = st.one_of(
    st.integers(min_value=-2**70, max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    atoms, st.booleans(), st.binary(max_size=40),
    st.text(alphabet=st.characters(max_codepoint=255), max_size=10)
    .filter(bool),
    st.builds(BitString, st.binary(min_size=1, max_size=5),
              st.integers(1, 7)),
    st.builds(Pid, st.just(Atom("n@h")), st.integers(0, 2**32 - 1),
              st.integers(0, 2**32 - 1), st.integers(0, 2**32 - 1)),
    st.builds(Reference, st.just(Atom("n@h")), st.integers(0, 2**32 - 1),
              st.lists(st.integers(0, 2**32 - 1), min_size=1, max_size=5)
              .map(tuple)),
)
terms = st.recursive(
    leaves,
    lambda children: st.one_of(
        st.lists(children, max_size=6),
        st.lists(children, max_size=6).map(tuple),
        st.builds(ImproperList, st.lists(children, min_size=1, max_size=4),
                  leaves.filter(lambda x: not isinstance(x, str))),
        st.dictionaries(st.one_of(atoms, st.integers()), children,
                        max_size=4),
    ),
    max_leaves=30)


@settings(max_examples=300, deadline=None)
@given(terms)
def test_random_terms_agree_with_erlang_py(term):
    data = etf.encode(term)
    decoded = etf.decode(data)
    assert ours_normal(decoded) == oracle_decode(data)
    assert etf.encode(decoded) == data


# -- malformed input --------------------------------------------------------------

def test_every_truncation_raises_decode_error_only(corpus):
    data = dict(corpus)[("nested", "default")]
    for end in range(len(data)):
        with pytest.raises(etf.DecodeError):
            etf.decode(data[:end])


@pytest.mark.parametrize("data", [
    b"\x83m\xff\xff\xff\xff",                # binary claims 4 GiB
    b"\x83l\x7f\xff\xff\xff\x61\x01j",        # list claims 2**31 elements
    b"\x83t\x7f\xff\xff\xff",                 # map claims 2**31 pairs
    b"\x83i\xff\xff\xff\xff",                 # tuple claims 4 Gi elements
    b"\x83o\xff\xff\xff\xff\x00",             # big integer of 4 GiB
    b"\x83P\xff\xff\xff\xff" + b"x\x9c",      # compressed claims 4 GiB
    b"\x83R\x00",                              # atom cache ref, no cache
    b"\x83\x01",                               # unknown tag
    b"\x82a\x01",                              # wrong version
    b"\x83a\x01\x00",                          # trailing byte
    b"\x83w\x02\xff\xfe",                      # invalid UTF-8 atom
    b"\x83M\x00\x00\x00\x01\x09\xff",          # bit count 9
])
def test_hostile_lengths_and_tags(data):
    with pytest.raises(etf.DecodeError):
        etf.decode(data)


def test_deep_nesting_is_refused_not_crashed():
    depth = 300_000
    data = b"\x83" + b"l\x00\x00\x00\x01" * depth + b"j" + b"j" * depth
    with pytest.raises(etf.DecodeError, match="nested too deeply"):
        etf.decode(data)


def test_latin1_and_utf8_atom_tables_never_collide():
    # Found by hypothesis: the latin-1 atom '' once shared a cache key with
    # the UTF-8 atom '\0'.
    assert etf.decode(b"\x83s\x00") == Atom("")
    assert etf.decode(b"\x83w\x01\x00") == Atom("\x00")
    assert etf.decode(b"\x83d\x00\x01\xe9") == etf.decode(b"\x83w\x02\xc3\xa9")


def test_decodes_that_share_a_budget_share_its_bounds():
    """A fan-out's answers are decoded one by one within one budget: their
    number does not multiply what they may make or inflate to."""
    import zlib

    from beam_probe.erldist import etf

    many = etf.encode([None] * 600)  # 600 items each
    budget = etf.Budget(items=1000, inflate=1 << 20)
    etf.decode_within(many, budget, 1 << 20)
    assert budget.items == 400
    with pytest.raises(etf.DecodeError):
        etf.decode_within(many, budget, 1 << 20)
    raw = etf.encode(b"x" * 10_000)[1:]
    packed = bytes([131, 80]) + len(raw).to_bytes(4, "big") + \
        zlib.compress(raw)
    budget = etf.Budget(items=1000, inflate=15_000)
    assert etf.decode_within(packed, budget, 1 << 20) == b"x" * 10_000
    assert budget.inflate == 15_000 - len(raw)
    with pytest.raises(etf.DecodeError, match="limit"):
        etf.decode_within(packed, budget, 1 << 20)
    # Each alone: at most inflate_each, whatever the budget holds.
    with pytest.raises(etf.DecodeError, match="limit"):
        etf.decode_within(packed, etf.Budget(1000, 1 << 20), 5_000)
