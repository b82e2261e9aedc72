"""The Erlang External Term Format: pure functions over bytes.

Tag numbers and layouts follow OTP's erl_ext_dist documentation. Decoding is
one recursive descent over a ``bytes`` object with explicit offsets and
``struct.unpack_from``; each handler takes ``(data, pos)`` and returns
``(value, new_pos)``. Every length field is checked against the bytes that
remain before anything is built from it, and any malformed input raises
:class:`DecodeError` and nothing else.
"""

from __future__ import annotations

import struct
import threading
import zlib
from typing import Any, Callable

from beam_probe.erldist.terms import (Atom, BitString, ExportFun, FrozenList, FrozenMap, Fun,
                    ImproperList, Pid, Port, Reference, freeze)

VERSION = 131

NEW_FLOAT_EXT = 70
BIT_BINARY_EXT = 77
COMPRESSED = 80
ATOM_CACHE_REF = 82
NEW_PID_EXT = 88
NEW_PORT_EXT = 89
NEWER_REFERENCE_EXT = 90
SMALL_INTEGER_EXT = 97
INTEGER_EXT = 98
FLOAT_EXT = 99
ATOM_EXT = 100
REFERENCE_EXT = 101
PORT_EXT = 102
PID_EXT = 103
SMALL_TUPLE_EXT = 104
LARGE_TUPLE_EXT = 105
NIL_EXT = 106
STRING_EXT = 107
LIST_EXT = 108
BINARY_EXT = 109
SMALL_BIG_EXT = 110
LARGE_BIG_EXT = 111
NEW_FUN_EXT = 112
EXPORT_EXT = 113
NEW_REFERENCE_EXT = 114
SMALL_ATOM_EXT = 115
MAP_EXT = 116
ATOM_UTF8_EXT = 118
V4_PORT_EXT = 120
LOCAL_EXT = 121
SMALL_ATOM_UTF8_EXT = 119

# A compressed term may claim any uncompressed size up to 4 GiB; a hostile
# peer could use that as a zip bomb. Replies beam-probe asks for are compact
# (scans reply with a top N, bulk data arrives in chunks), so the default
# limit is that of a frame (frames.MAX_FRAME); callers that ask for more
# pass a larger one.
MAX_UNCOMPRESSED = 16 * 1024 * 1024

# Items (list and tuple elements, map keys and values) one decode may
# create. Bytes on the wire do not bound Python's memory: a one-element
# tuple nested in a one-element tuple costs 2 bytes on the wire and 56 in
# Python, so a 16 MiB frame of them would take ~450 MB. 1M items is at most
# ~60 MB whatever their shape, and six times what any reply of ours holds
# (a 10,000-row table is ~150,000 items).
MAX_ITEMS = 1_000_000

# Interning atoms saves both the decode and the memory for the same few
# hundred atoms repeated across a large reply. The cap bounds what a peer
# sending endless distinct atoms can make us keep (per spelling table).
_ATOM_CACHE_MAX = 65536


class DecodeError(ValueError):
    """The bytes are not a well-formed external term."""


# Decoded atoms by their raw bytes, one table per spelling: latin-1 and
# UTF-8 spellings of the same bytes are different atoms. (One table with
# NUL-prefixed latin-1 keys let the UTF-8 atom '\0' meet the latin-1 atom
# '' under the same key; hypothesis found it.)
_atoms: dict[bytes, Any] = {}
_latin1_atoms: dict[bytes, Any] = {}

# What is left of the item budget of the decode under way. Decodes run one
# at a time (the lock), so a plain global serves: it costs one subtraction
# per list, tuple or map rather than an argument to every handler.
_items_left = 0
_limits = threading.Lock()
_max_uncompressed = MAX_UNCOMPRESSED
_inflate_left = MAX_UNCOMPRESSED
_unpack_I = struct.Struct(">I").unpack_from
_unpack_i = struct.Struct(">i").unpack_from
_unpack_H = struct.Struct(">H").unpack_from
_unpack_d = struct.Struct(">d").unpack_from
_unpack_Q = struct.Struct(">Q").unpack_from


def _need(data: bytes, pos: int, n: int) -> int:
    end = pos + n
    if end > len(data):
        raise DecodeError(f"length {n} at offset {pos} runs past the end "
                          f"of the data ({len(data)} bytes)")
    return end


def _atom_from(raw: bytes, utf8: bool) -> Any:
    cache = _atoms if utf8 else _latin1_atoms
    atom = cache.get(raw)
    if atom is None:
        name = raw.decode("utf-8" if utf8 else "latin-1")
        atom = True if name == "true" else False if name == "false" else \
            Atom(name)
        if len(cache) < _ATOM_CACHE_MAX:
            cache[raw] = atom
    return atom


# The four atom handlers are written out in full rather than sharing a helper:
# atoms are the most common term in a reply and each call layer costs ~8% of
# a decode (measured with tests/bench_decode.py).
def _d_small_atom_utf8(data: bytes, pos: int) -> tuple[Any, int]:
    end = pos + 1 + data[pos]
    raw = data[pos + 1:end]
    atom = _atoms.get(raw)
    if atom is None:
        if end > len(data):
            raise DecodeError(f"atom runs past the end of the data at {pos}")
        atom = _atom_from(raw, True)
    return atom, end


def _d_atom_utf8(data: bytes, pos: int) -> tuple[Any, int]:
    end = pos + 2 + (data[pos] << 8 | data[pos + 1])
    raw = data[pos + 2:end]
    atom = _atoms.get(raw)
    if atom is None:
        if end > len(data):
            raise DecodeError(f"atom runs past the end of the data at {pos}")
        atom = _atom_from(raw, True)
    return atom, end


def _d_small_atom_latin1(data: bytes, pos: int) -> tuple[Any, int]:
    end = pos + 1 + data[pos]
    raw = data[pos + 1:end]
    atom = _latin1_atoms.get(raw)
    if atom is None:
        if end > len(data):
            raise DecodeError(f"atom runs past the end of the data at {pos}")
        atom = _atom_from(raw, False)
    return atom, end


def _d_atom_latin1(data: bytes, pos: int) -> tuple[Any, int]:
    end = pos + 2 + (data[pos] << 8 | data[pos + 1])
    raw = data[pos + 2:end]
    atom = _latin1_atoms.get(raw)
    if atom is None:
        if end > len(data):
            raise DecodeError(f"atom runs past the end of the data at {pos}")
        atom = _atom_from(raw, False)
    return atom, end


def _node_name(data: bytes, pos: int) -> tuple[Any, int]:
    """Node names in pids, ports and references are atoms of any atom tag."""
    value, pos = _decode(data, pos)
    if not isinstance(value, Atom):
        raise DecodeError(f"expected a node name atom before offset {pos}")
    return value, pos


def _d_small_int(data: bytes, pos: int) -> tuple[Any, int]:
    return data[pos], pos + 1


def _d_int(data: bytes, pos: int) -> tuple[Any, int]:
    return _unpack_i(data, pos)[0], pos + 4


def _d_new_float(data: bytes, pos: int) -> tuple[Any, int]:
    return _unpack_d(data, pos)[0], pos + 8


def _d_float(data: bytes, pos: int) -> tuple[Any, int]:
    end = _need(data, pos, 31)
    try:
        return float(data[pos:end].split(b"\0", 1)[0]), end
    except ValueError:
        raise DecodeError(f"bad FLOAT_EXT text at offset {pos}") from None


def _big(data: bytes, pos: int, n: int) -> tuple[int, int]:
    sign = data[pos]
    end = _need(data, pos + 1, n)
    value = int.from_bytes(data[pos + 1:end], "little")
    return (-value if sign else value), end


def _d_small_big(data: bytes, pos: int) -> tuple[Any, int]:
    return _big(data, pos + 1, data[pos])


def _d_large_big(data: bytes, pos: int) -> tuple[Any, int]:
    (n,) = _unpack_I(data, pos)
    return _big(data, pos + 4, n)


def _d_nil(data: bytes, pos: int) -> tuple[Any, int]:
    return [], pos


def _d_string(data: bytes, pos: int) -> tuple[Any, int]:
    (n,) = _unpack_H(data, pos)
    end = _need(data, pos + 2, n)
    return data[pos + 2:end].decode("latin-1"), end


def _d_binary(data: bytes, pos: int) -> tuple[Any, int]:
    (n,) = _unpack_I(data, pos)
    end = _need(data, pos + 4, n)
    return data[pos + 4:end], end


def _d_bit_binary(data: bytes, pos: int) -> tuple[Any, int]:
    (n,) = _unpack_I(data, pos)
    bits = data[pos + 4]
    end = _need(data, pos + 5, n)
    if not 1 <= bits <= 8 or n == 0:
        raise DecodeError(f"bad bit count {bits} in BIT_BINARY_EXT at {pos}")
    if bits == 8:
        return data[pos + 5:end], end
    return BitString(data[pos + 5:end], bits), end


def _seq(data: bytes, pos: int, n: int) -> tuple[list[Any], int]:
    global _items_left
    # Each element takes at least one byte: a count beyond what remains is a
    # lie, refused before any work is done for it.
    if n > len(data) - pos:
        raise DecodeError(f"{n} elements claimed at offset {pos} but only "
                          f"{len(data) - pos} bytes remain")
    _items_left -= n
    if _items_left < 0:
        raise _over_budget()
    items: list[Any] = []
    append = items.append
    handlers = _HANDLERS
    for _ in range(n):
        value, pos = handlers[data[pos]](data, pos + 1)
        append(value)
    return items, pos


def _d_small_tuple(data: bytes, pos: int) -> tuple[Any, int]:
    items, pos = _seq(data, pos + 1, data[pos])
    return tuple(items), pos


def _d_large_tuple(data: bytes, pos: int) -> tuple[Any, int]:
    (n,) = _unpack_I(data, pos)
    items, pos = _seq(data, pos + 4, n)
    return tuple(items), pos


def _d_list(data: bytes, pos: int) -> tuple[Any, int]:
    (n,) = _unpack_I(data, pos)
    items, pos = _seq(data, pos + 4, n)
    if data[pos] == NIL_EXT:
        return items, pos + 1
    tail, pos = _decode(data, pos)
    if isinstance(tail, list):
        # A list tail that is itself a proper list is still a proper list.
        return items + tail, pos
    if isinstance(tail, ImproperList):
        return ImproperList(items + list(tail.items), tail.tail), pos
    return ImproperList(items, tail), pos


def _over_budget() -> DecodeError:
    return DecodeError("the term holds more items than the limit for this "
                       "reply")


def _d_map(data: bytes, pos: int) -> tuple[Any, int]:
    global _items_left
    (n,) = _unpack_I(data, pos)
    pos += 4
    if 2 * n > len(data) - pos:
        raise DecodeError(f"map of {n} pairs claimed at offset {pos} but only "
                          f"{len(data) - pos} bytes remain")
    _items_left -= 2 * n
    if _items_left < 0:
        raise _over_budget()
    result = {}
    decode = _decode
    for _ in range(n):
        key, pos = decode(data, pos)
        value, pos = decode(data, pos)
        try:
            result[key] = value
        except TypeError:
            result[freeze(key)] = value
    return result, pos


def _d_pid(data: bytes, pos: int, creation_size: int = 4) -> tuple[Any, int]:
    node, pos = _node_name(data, pos)
    pid_id, serial = struct.unpack_from(">II", data, pos)
    pos += 8
    if creation_size == 4:
        (creation,) = _unpack_I(data, pos)
    else:
        creation = data[pos]
    return Pid(node, pid_id, serial, creation), pos + creation_size


def _d_old_pid(data: bytes, pos: int) -> tuple[Any, int]:
    return _d_pid(data, pos, 1)


def _d_port_new(data: bytes, pos: int) -> tuple[Any, int]:
    node, pos = _node_name(data, pos)
    port_id, creation = struct.unpack_from(">II", data, pos)
    return Port(node, port_id, creation), pos + 8


def _d_port_v4(data: bytes, pos: int) -> tuple[Any, int]:
    node, pos = _node_name(data, pos)
    port_id, creation = struct.unpack_from(">QI", data, pos)
    return Port(node, port_id, creation), pos + 12


def _d_port_old(data: bytes, pos: int) -> tuple[Any, int]:
    node, pos = _node_name(data, pos)
    (port_id,) = _unpack_I(data, pos)
    return Port(node, port_id, data[pos + 4]), pos + 5


def _d_ref_old(data: bytes, pos: int) -> tuple[Any, int]:
    node, pos = _node_name(data, pos)
    (ref_id,) = _unpack_I(data, pos)
    return Reference(node, data[pos + 4], (ref_id,)), pos + 5


def _d_ref(data: bytes, pos: int, creation_size: int = 4) -> tuple[Any, int]:
    (n,) = _unpack_H(data, pos)
    if n > 5:
        # OTP uses at most 5 words (3 plus 2 for process-bound aliases).
        raise DecodeError(f"reference of {n} words at offset {pos}")
    node, pos = _node_name(data, pos + 2)
    if creation_size == 4:
        (creation,) = _unpack_I(data, pos)
    else:
        creation = data[pos]
    pos += creation_size
    end = _need(data, pos, 4 * n)
    ids = struct.unpack_from(f">{n}I", data, pos)
    return Reference(node, creation, ids), end


def _d_ref_new(data: bytes, pos: int) -> tuple[Any, int]:
    return _d_ref(data, pos, 1)


def _d_export(data: bytes, pos: int) -> tuple[Any, int]:
    module, pos = _decode(data, pos)
    function, pos = _decode(data, pos)
    arity, pos = _decode(data, pos)
    if not (isinstance(module, Atom) and isinstance(function, Atom)
            and type(arity) is int):
        raise DecodeError(f"malformed EXPORT_EXT ending at offset {pos}")
    return ExportFun(module, function, arity), pos


def _d_new_fun(data: bytes, pos: int) -> tuple[Any, int]:
    (size,) = _unpack_I(data, pos)
    end = _need(data, pos, size)
    arity = data[pos + 4]
    uniq = data[pos + 5:pos + 21]
    index, num_free = struct.unpack_from(">II", data, pos + 21)
    module, p = _decode(data, pos + 29)
    old_index, p = _decode(data, p)
    old_uniq, p = _decode(data, p)
    pid, p = _decode(data, p)
    free, p = _seq(data, p, num_free)
    if p != end or not isinstance(pid, Pid) or not isinstance(module, Atom):
        raise DecodeError(f"malformed NEW_FUN_EXT at offset {pos}")
    return Fun(arity, uniq, index, module, old_index, old_uniq, pid,
               tuple(free)), end


def _d_compressed(data: bytes, pos: int) -> tuple[Any, int]:
    global _inflate_left
    (size,) = _unpack_I(data, pos)
    # One budget for the whole decode, every nesting level included: a
    # term compressed inside a compressed term, each checked against the
    # limit alone, took ~130 MB a level (a hostile peer reached 1.2 GB).
    if size > _inflate_left:
        raise DecodeError(f"compressed terms claim more than the "
                          f"{_max_uncompressed}-byte limit in all")
    _inflate_left -= size
    inflater = zlib.decompressobj()
    try:
        # max_length bounds the output to the size the header claims.
        raw = inflater.decompress(memoryview(data)[pos + 4:], size)
    except zlib.error as exc:
        raise DecodeError(f"bad compressed term: {exc}") from None
    if len(raw) != size or not inflater.eof:
        raise DecodeError("compressed term does not match its stated size")
    value, used = _decode(raw, 0)
    if used != size:
        raise DecodeError("trailing bytes inside a compressed term")
    return value, len(data) - len(inflater.unused_data)


def _unknown(tag: int) -> Callable[..., Any]:
    def handler(data: bytes, pos: int) -> Any:
        if tag == ATOM_CACHE_REF:
            raise DecodeError("atom cache reference, but no atom cache was "
                              "negotiated")
        raise DecodeError(f"unknown term tag {tag} at offset {pos - 1}")
    return handler


_HANDLERS: list[Callable[[bytes, int], tuple[Any, int]]] = [_unknown(t) for t in range(256)]
for _tag, _fn in {
    NEW_FLOAT_EXT: _d_new_float, BIT_BINARY_EXT: _d_bit_binary,
    COMPRESSED: _d_compressed, NEW_PID_EXT: _d_pid, NEW_PORT_EXT: _d_port_new,
    NEWER_REFERENCE_EXT: _d_ref, SMALL_INTEGER_EXT: _d_small_int,
    INTEGER_EXT: _d_int, FLOAT_EXT: _d_float, ATOM_EXT: _d_atom_latin1,
    REFERENCE_EXT: _d_ref_old, PORT_EXT: _d_port_old, PID_EXT: _d_old_pid,
    SMALL_TUPLE_EXT: _d_small_tuple, LARGE_TUPLE_EXT: _d_large_tuple,
    NIL_EXT: _d_nil, STRING_EXT: _d_string, LIST_EXT: _d_list,
    BINARY_EXT: _d_binary, SMALL_BIG_EXT: _d_small_big,
    LARGE_BIG_EXT: _d_large_big, NEW_FUN_EXT: _d_new_fun,
    EXPORT_EXT: _d_export, NEW_REFERENCE_EXT: _d_ref_new,
    SMALL_ATOM_EXT: _d_small_atom_latin1, MAP_EXT: _d_map,
    ATOM_UTF8_EXT: _d_atom_utf8, SMALL_ATOM_UTF8_EXT: _d_small_atom_utf8,
    V4_PORT_EXT: _d_port_v4,
}.items():
    _HANDLERS[_tag] = _fn


def _decode(data: bytes, pos: int) -> tuple[Any, int]:
    decoded: tuple[Any, int] = _HANDLERS[data[pos]](data, pos + 1)
    return decoded


def decode_from(data: bytes, pos: int = 0, *, max_items: int = MAX_ITEMS,
                max_uncompressed: int = MAX_UNCOMPRESSED) -> tuple[Any, int]:
    """Decode one versioned term (131 ...) at ``pos``; return it and the end.

    At most ``max_items`` list, tuple and map items are made, and the
    compressed terms in it (nested ones included) may inflate to at most
    ``max_uncompressed`` bytes in all.
    Raises DecodeError, and only DecodeError, for any malformed input or a
    term over those limits.
    """
    global _items_left, _max_uncompressed, _inflate_left
    with _limits:
        _items_left = max_items
        _max_uncompressed = _inflate_left = max_uncompressed
        return _decode_versioned(data, pos)


def _decode_versioned(data: bytes, pos: int) -> tuple[Any, int]:
    try:
        if data[pos] != VERSION:
            raise DecodeError(f"expected version byte 131 at offset {pos}, "
                              f"got {data[pos]}")
        return _decode(data, pos + 1)
    except DecodeError:
        raise
    except (IndexError, struct.error):
        raise DecodeError("term truncated: data ends inside a term") from None
    except UnicodeDecodeError:
        raise DecodeError("atom is not valid UTF-8") from None
    except RecursionError:
        raise DecodeError("term nested too deeply to decode") from None
    except MemoryError:
        raise DecodeError("term too large to decode") from None


class Budget:
    """Items and inflated bytes that several decodes share: each takes
    what it used from it (decode_within). For replies that arrive
    together and are decoded one by one (a fan-out's nodes' answers),
    so that their number does not multiply the bounds of one decode."""

    __slots__ = ("items", "inflate")

    def __init__(self, items: int, inflate: int) -> None:
        self.items = items
        self.inflate = inflate


def decode_within(data: bytes, budget: Budget, inflate_each: int) -> Any:
    """Decode exactly one versioned term that fills ``data``, within what
    is left of ``budget`` (and at most ``inflate_each`` bytes inflated by
    this one), and take from it what the decode used."""
    global _items_left, _max_uncompressed, _inflate_left
    data = bytes(data)
    with _limits:
        _items_left = max(0, budget.items)
        _max_uncompressed = _inflate_left = max(0, min(inflate_each,
                                                       budget.inflate))
        start = _inflate_left
        try:
            value, end = _decode_versioned(data, 0)
        finally:
            budget.items = _items_left
            budget.inflate -= start - _inflate_left
    if end != len(data):
        raise DecodeError(f"{len(data) - end} trailing bytes after the term")
    return value


def decode(data: bytes, **limits: int) -> Any:
    """Decode exactly one versioned term that fills ``data``; ``limits`` as
    for decode_from."""
    data = bytes(data)
    value, end = decode_from(data, 0, **limits)
    if end != len(data):
        raise DecodeError(f"{len(data) - end} trailing bytes after the term")
    return value


# -- encoding -----------------------------------------------------------------

_pack_I = struct.Struct(">I").pack
_pack_H = struct.Struct(">H").pack


class Encoded:
    """A term encoded once and sent many times: written as it is wherever
    it appears in a term being encoded. For the abstract forms of helpers,
    which are the same at every call and cost milliseconds to encode (a
    12 KB form is ~25,000 small terms)."""

    __slots__ = ("data",)

    def __init__(self, term: Any) -> None:
        self.data = encode(term)[1:]


def encode(term: Any) -> bytes:
    """Encode ``term`` as a versioned external term (starts with 131)."""
    out = bytearray(b"\x83")
    _encode(term, out)
    return bytes(out)


def _encode_atom(name: str, out: bytearray) -> None:
    raw = name.encode("utf-8")
    if len(raw) < 256:
        out += bytes((SMALL_ATOM_UTF8_EXT, len(raw)))
    else:
        out.append(ATOM_UTF8_EXT)
        out += _pack_H(len(raw))
    out += raw


def _encode(term: Any, out: bytearray) -> None:
    kind = type(term)
    if kind is Atom:
        _encode_atom(term, out)
    elif kind is bool:
        _encode_atom("true" if term else "false", out)
    elif term is None:
        _encode_atom("undefined", out)
    elif kind is int:
        if 0 <= term < 256:
            out += bytes((SMALL_INTEGER_EXT, term))
        elif -2**31 <= term < 2**31:
            out.append(INTEGER_EXT)
            out += struct.pack(">i", term)
        else:
            magnitude = abs(term)
            digits = magnitude.to_bytes((magnitude.bit_length() + 7) // 8,
                                        "little")
            if len(digits) < 256:
                out += bytes((SMALL_BIG_EXT, len(digits)))
            else:
                out.append(LARGE_BIG_EXT)
                out += _pack_I(len(digits))
            out.append(1 if term < 0 else 0)
            out += digits
    elif kind is float:
        out.append(NEW_FLOAT_EXT)
        out += struct.pack(">d", term)
    elif kind is bytes or kind is bytearray:
        out.append(BINARY_EXT)
        out += _pack_I(len(term))
        out += term
    elif kind is tuple:
        if len(term) < 256:
            out += bytes((SMALL_TUPLE_EXT, len(term)))
        else:
            out.append(LARGE_TUPLE_EXT)
            out += _pack_I(len(term))
        for item in term:
            _encode(item, out)
    elif kind is list:
        if not term:
            out.append(NIL_EXT)
            return
        out.append(LIST_EXT)
        out += _pack_I(len(term))
        for item in term:
            _encode(item, out)
        out.append(NIL_EXT)
    elif kind is str:
        raw = None
        if len(term) < 65536:
            try:
                raw = term.encode("latin-1")
            except UnicodeEncodeError:
                pass
        if raw is None:
            _encode([ord(c) for c in term], out)
        elif not raw:
            out.append(NIL_EXT)
        else:
            out.append(STRING_EXT)
            out += _pack_H(len(raw))
            out += raw
    elif kind is dict:
        out.append(MAP_EXT)
        out += _pack_I(len(term))
        for key, value in term.items():
            _encode(key, out)
            _encode(value, out)
    elif kind is Encoded:
        out += term.data
    elif kind is Pid:
        out.append(NEW_PID_EXT)
        _encode_atom(term.node, out)
        out += struct.pack(">III", term.id, term.serial, term.creation)
    elif kind is Reference:
        out.append(NEWER_REFERENCE_EXT)
        out += _pack_H(len(term.ids))
        _encode_atom(term.node, out)
        out += _pack_I(term.creation)
        for word in term.ids:
            out += _pack_I(word)
    elif kind is Port:
        if term.id < 2**32:
            out.append(NEW_PORT_EXT)
            _encode_atom(term.node, out)
            out += struct.pack(">II", term.id, term.creation)
        else:
            out.append(V4_PORT_EXT)
            _encode_atom(term.node, out)
            out += struct.pack(">QI", term.id, term.creation)
    elif kind is ImproperList:
        out.append(LIST_EXT)
        out += _pack_I(len(term.items))
        for item in term.items:
            _encode(item, out)
        _encode(term.tail, out)
    elif kind is BitString:
        out.append(BIT_BINARY_EXT)
        out += _pack_I(len(term.data))
        out.append(term.bits)
        out += term.data
    elif kind is ExportFun:
        out.append(EXPORT_EXT)
        _encode_atom(term.module, out)
        _encode_atom(term.function, out)
        out += bytes((SMALL_INTEGER_EXT, term.arity))
    elif kind is Fun:
        body = bytearray()
        body.append(term.arity)
        body += term.uniq
        body += struct.pack(">II", term.index, len(term.free_vars))
        for part in (Atom(term.module), term.old_index, term.old_uniq,
                     term.pid, *term.free_vars):
            _encode(part, body)
        out.append(NEW_FUN_EXT)
        out += _pack_I(len(body) + 4)
        out += body
    elif isinstance(term, FrozenList):
        _encode(list(term), out)
    elif isinstance(term, FrozenMap):
        _encode(dict(term), out)
    else:
        # Subclasses (an IntEnum, a str subclass...) encode as their base type.
        bases: tuple[Callable[[Any], Any], ...] = (int, float, str, tuple,
                                                   list, dict)
        for base in bases:
            if isinstance(term, base):  # type: ignore[arg-type]
                _encode(base(term), out)
                return
        raise TypeError(f"cannot encode {kind.__name__} as an Erlang term")
