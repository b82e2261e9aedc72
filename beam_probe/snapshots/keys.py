"""The rows of one snapshot by pid key, in two arrays: what diff looks the
other snapshots' processes up in.

A dict of a million int keys and rows is ~100 MB (the keys and rows as
int objects, and its table); this holds 8 bytes a row for the keys and a
table of 2^k int32 slots, 2 to 4 per row (8-16 bytes a row): open
addressing with linear probing, its passes run over a whole chunk of keys
at once in C (map, compress), a Python statement per row costing ~0.1 s a
million.

The slot of a key is nearly its pid's data as the node numbers pids: the
low 16 bits of the number (15 bits on a node) and above them the low 16
of the serial, masked to the table. A node's live pids differ in their
data modulo its process table's size (each pid's slot in that table), so
at most two of them share a slot of a table as large, and a few one of a
smaller table. A crafted file may make every key collide: past a few
rounds that place fewer than half, or MAX_ROUNDS probes, the rest go to a
dict, so that nothing is quadratic.
"""

from __future__ import annotations

import sys
from array import array
from collections import deque
from itertools import compress, repeat
from operator import add, and_, eq, gt, ne, or_
from typing import Iterable

# Keys whose slots are found at once while the index is built.
_SLICE = 65536


# Probes per key before the rest go to a dict: with at most half the
# slots full, linear probing's longest run is tens of slots.
MAX_ROUNDS = 48


_EMPTY = -1


_FREE = _EMPTY.__eq__


def _flip(mask: bytes) -> bytes:
    """A 0/1 mask's complement."""
    return mask.translate(_NOT)


_NOT = bytes([1, 0]) + bytes(254)


def _slots(keys: array[int], mask: int) -> array[int]:
    """Each key's home slot, from the keys' bytes with no step per key
    (three shifts and a mask a key took 0.37 s a million): the low 16
    bits of the pid's number and above them the low 16 of its serial
    (each xor its high 16: numbers past 2^16 spread too), masked. A
    node's pid numbers are 15 bits, so this is the pid's data as the
    node numbers pids but for one bit."""
    if sys.byteorder == "big":
        keys = array("q", keys)
        keys.byteswap()
    raw = keys.tobytes()  # little-endian: number, then serial
    seeds = bytearray(len(raw) // 2)
    for at in (0, 4):  # the number, the serial
        low = bytearray(len(keys) * 2)
        high = bytearray(len(keys) * 2)
        low[0::2], low[1::2] = raw[at::8], raw[at + 1::8]
        high[0::2], high[1::2] = raw[at + 2::8], raw[at + 3::8]
        mixed = (int.from_bytes(low, "little")
                 ^ int.from_bytes(high, "little")).to_bytes(len(low),
                                                            "little")
        for i in (0, 1):
            part = mixed[i::2]
            byte_mask = (mask >> (8 * (i + at // 2))) & 0xFF
            if byte_mask != 0xFF:
                part = part.translate(_masks(byte_mask))
            seeds[at // 2 + i::4] = part
    out = array("I")
    out.frombytes(seeds)
    if sys.byteorder == "big":
        out.byteswap()
    return out


_MASKS: dict[int, bytes] = {}


def _masks(byte_mask: int) -> bytes:
    """A translate table that ANDs each byte with ``byte_mask``."""
    table = _MASKS.get(byte_mask)
    if table is None:
        table = _MASKS[byte_mask] = bytes(v & byte_mask for v in range(256))
    return table


class KeyIndex:
    """Each key's row in ``keys`` (the last row, for a key given twice)."""

    def __init__(self, keys: array[int]) -> None:
        self.keys = keys
        bits = max(4, (2 * len(keys)).bit_length())
        self._mask = (1 << bits) - 1
        self._table = array("i" if len(keys) < 2**31 else "q",
                            [_EMPTY]) * (1 << bits)
        self._extra: dict[int, int] = {}
        # An empty table: every row written to its slot, a later row over
        # an earlier one; then those not holding their slot probe on. A
        # slice of rows at a time: their slots are not all held at once.
        table = self._table
        for start in range(0, len(keys), _SLICE):
            rows = range(start, min(len(keys), start + _SLICE))
            deque(map(table.__setitem__, self._slots(keys[rows.start:
                                                          rows.stop]),
                      rows), maxlen=0)
        lost_rows, lost_slots = array("q"), array("q")
        for start in range(0, len(keys), _SLICE):
            rows = range(start, min(len(keys), start + _SLICE))
            slots = self._slots(keys[rows.start:rows.stop])
            lost = bytes(map(ne, map(table.__getitem__, slots), rows))
            if lost.count(1):
                lost_rows.extend(compress(rows, lost))
                lost_slots.extend(compress(slots, lost))
        self._insert(lost_rows, lost_slots)

    def _slots(self, keys: array[int]) -> array[int]:
        return _slots(keys, self._mask)

    def _insert(self, rows: array[int], slots: array[int]) -> None:
        table, keys, mask = self._table, self.keys, self._mask
        for _round in range(MAX_ROUNDS):
            if not rows:
                return
            free = bytes(map(_FREE, map(table.__getitem__, slots)))
            # The free slots taken, in row order: of two rows of one slot,
            # the later holds it.
            deque(map(table.__setitem__, compress(slots, free),
                      compress(rows, free)), maxlen=0)
            holders = array("q", map(table.__getitem__, slots))
            # A row is placed when its slot holds it or a row of its key
            # (the later row kept: a dict's answer for a key given twice).
            same = bytes(map(eq, map(keys.__getitem__, holders),
                             map(keys.__getitem__, rows)))
            later = bytes(map(gt, compress(rows, same),
                              compress(holders, same)))
            deque(map(table.__setitem__,
                      compress(compress(slots, same), later),
                      compress(compress(rows, same), later)), maxlen=0)
            moving = _flip(same)
            entered = len(rows)
            rows = array("q", compress(rows, moving))
            slots = array("q", map(and_, map(add, compress(slots, moving),
                                                 repeat(1)), repeat(mask)))
            if _round >= 2 and 2 * len(rows) > entered:
                break  # keys made to collide: the rest to the dict
        for row in rows:
            self._extra[keys[row]] = row

    def find(self, keys: array[int]) -> array[int]:
        """The row of each of ``keys``, -1 for a key not held."""
        out = array("q", [-1]) * len(keys)
        if not self.keys:
            return out
        table, held, mask = self._table, self.keys, self._mask
        wanted: Iterable[int] = range(len(keys))
        asked = keys
        slots = self._slots(keys)
        for _round in range(MAX_ROUNDS):
            if not slots:
                break
            holders = array("q", map(table.__getitem__, slots))
            # An empty slot (-1) reads the last key held: a key found
            # there is -1 all the same.
            found = bytes(map(eq, map(held.__getitem__, holders), asked))
            done = found.count(0) == 0
            # Neither found nor at an empty slot: on to the next slot.
            going = b"" if done else _flip(bytes(map(or_, found, map(
                _FREE, holders))))
            if _round == 0:  # most are found at their first slot
                out = holders
                deque(map(out.__setitem__, compress(wanted, _flip(found)),
                          repeat(-1)), maxlen=0)
            else:
                deque(map(out.__setitem__, compress(wanted, found),
                          compress(holders, found)), maxlen=0)
            if done:
                break
            wanted = array("q", compress(wanted, going))
            asked = array("q", map(keys.__getitem__, wanted))
            slots = array("q", map(and_, map(add, compress(slots, going),
                                                 repeat(1)), repeat(mask)))
        if self._extra:
            for i in compress(range(len(keys)), map(_FREE, out)):
                out[i] = self._extra.get(keys[i], -1)
        return out


__all__ = ["KeyIndex", "MAX_ROUNDS"]
