"""Framing and control messages after the handshake (pure, no I/O).

erl_dist_protocol, "Protocol between Connected Nodes": every message is
``Length:32 | Type:8 | ControlMessage | Message`` where a zero Length is a
tick (keep-alive). We negotiate neither DIST_HDR_ATOM_CACHE nor FRAGMENTS,
so Type is always 112 (pass-through) and ControlMessage and Message are
each a plain versioned external term.
"""

from __future__ import annotations

import struct
from typing import Any

from beam_probe.erldist import etf

PASS_THROUGH = 112
TICK = b"\x00\x00\x00\x00"

# Control message operations (erl_dist_protocol, "Control Messages").
LINK = 1
SEND = 2
EXIT = 3
UNLINK = 4
REG_SEND = 6
GROUP_LEADER = 7
EXIT2 = 8
SEND_TT = 12
EXIT_TT = 13
REG_SEND_TT = 16
EXIT2_TT = 18
MONITOR_P = 19
DEMONITOR_P = 20
MONITOR_P_EXIT = 21
SEND_SENDER = 22
SEND_SENDER_TT = 23
ALIAS_SEND = 33
ALIAS_SEND_TT = 34
UNLINK_ID = 35
UNLINK_ID_ACK = 36

# Operations whose frame carries a message term after the control term.
_WITH_PAYLOAD = {SEND, REG_SEND, SEND_TT, REG_SEND_TT, SEND_SENDER,
                 SEND_SENDER_TT, ALIAS_SEND, ALIAS_SEND_TT}

# The largest frame we accept by default. Our replies are small (scans send
# back a top N; bulk data comes in chunks of a few MB), and a frame costs
# twice its size while it is cut out of the stream, so a peer that claims
# more (up to the 4 GiB a 32-bit length allows) is refused at once, before
# any buffer is grown for it. A caller that expects more raises the limit.
MAX_FRAME = 16 * 1024 * 1024


class FrameError(Exception):
    """The peer sent a frame we cannot accept."""


class FrameReader:
    """Split a byte stream into frames. ``b""`` stands for a tick."""

    def __init__(self, max_frame: int = MAX_FRAME) -> None:
        self.max_frame = max_frame
        self._buffer = bytearray()
        self._need: int | None = None

    @property
    def pending(self) -> int:
        """Bytes of the frame now arriving (0 when between frames)."""
        return len(self._buffer)

    def feed(self, data: bytes) -> list[bytes]:
        buf = self._buffer
        buf += data
        frames = []
        start, end = 0, len(buf)
        # One copy per frame (a memoryview slice into bytes), and the bytes
        # consumed are dropped once, at the end.
        with memoryview(buf) as view:
            while True:
                if self._need is None:
                    if end - start < 4:
                        break
                    (length,) = struct.unpack_from(">I", buf, start)
                    if length > self.max_frame:
                        raise FrameError(
                            f"the node announced a frame of {length} bytes, "
                            f"over the {self.max_frame}-byte limit")
                    start += 4
                    self._need = length
                if end - start < self._need:
                    break
                frames.append(bytes(view[start:start + self._need]))
                start += self._need
                self._need = None
        del buf[:start]
        return frames


def parse(frame: bytes, **limits: int) -> tuple[tuple[Any, ...], Any]:
    """Split a non-tick frame into (control tuple, message or None);
    ``limits`` go to etf.decode_from for the message."""
    if frame[0] != PASS_THROUGH:
        raise FrameError(f"frame type {frame[0]}, expected pass-through "
                         "(112): atom cache headers were not negotiated")
    control, pos = etf.decode_from(frame, 1)
    if not isinstance(control, tuple) or not control or type(
            control[0]) is not int:
        raise FrameError("the control message is not a tuple with an "
                         "operation code")
    message = None
    if control[0] in _WITH_PAYLOAD:
        message, pos = etf.decode_from(frame, pos, **limits)
    if pos != len(frame):
        raise FrameError(f"{len(frame) - pos} stray bytes after a message")
    return control, message


def build(control: tuple[Any, ...], message: Any = None, *,
          with_message: bool = False) -> bytes:
    """A framed pass-through message, ready for the socket."""
    body = bytes((PASS_THROUGH,)) + etf.encode(control)
    if with_message or message is not None:
        body += etf.encode(message)
    return struct.pack(">I", len(body)) + body
