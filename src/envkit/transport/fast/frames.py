"""An open WebSocket connection's everyday frames, read and written without websockets' parser.

websockets' sans-I/O protocol reads each frame through a chain of generators and builds a `Frame` object for every
message and every reply (docs/benchmarks.md has what that costs a step). Once a connection is open, a client's
frames are nearly always of the simplest kind: final, masked, unextended text or binary frames, now and then a ping
or a pong. `FrameReader` reads those itself. At the first frame of any other kind (a close, a fragment, reserved
bits or opcodes, an unmasked frame, one over the size limit) it hands that frame and every byte after it to
websockets, which answers it exactly as it always did, and reads nothing more itself. `server_frame` writes the
server's side (final, unmasked).

It takes over only where websockets has nothing half-read (`between_frames`) and no extension such as
permessage-deflate was negotiated, and only where `envkit.transport.fast` found at start-up that websockets' parser, size
limits and `apply_mask` behave as this module reads them (the `frames` fast path).
"""

from __future__ import annotations

from typing import Callable

from websockets.frames import apply_mask
from websockets.protocol import Protocol
from websockets.streams import StreamReader

__all__ = ["FrameReader", "server_frame", "between_frames", "frame_size_limit", "TEXT", "BINARY", "PING", "PONG"]

#: A frame's first byte for each kind `FrameReader` reads: FIN set, no reserved bits, the opcode.
TEXT, BINARY, PING, PONG = 0x81, 0x82, 0x89, 0x8A
_READ = frozenset((TEXT, BINARY, PING, PONG))
_MAX_CONTROL_PAYLOAD = 125
_MASKED = 0x80


def server_frame(first_byte: int, payload: bytes) -> bytes:
    """One frame from the server (unmasked) with `payload`, e.g. `server_frame(TEXT, reply)`."""
    size = len(payload)
    if size < 126:
        head = bytes((first_byte, size))
    elif size < 1 << 16:
        head = bytes((first_byte, 126)) + size.to_bytes(2, "big")
    else:
        head = bytes((first_byte, 127)) + size.to_bytes(8, "big")
    return head + payload


def between_frames(conn: Protocol) -> bool:
    """Whether websockets' parser holds no unread bytes and waits for the start of a frame, so that the
    connection's next bytes may be read by `FrameReader` instead."""
    if conn.reader.buffer:
        return False
    waiting = conn.parser
    while getattr(waiting, "gi_yieldfrom", None) is not None:
        waiting = waiting.gi_yieldfrom
    return getattr(waiting, "gi_code", None) is StreamReader.at_eof.__code__


def frame_size_limit(conn: Protocol) -> int | None:
    """The largest frame websockets would take on `conn`: the smaller of its message and fragment limits."""
    sizes = [size for size in (conn.max_message_size, conn.max_fragment_size) if size is not None]
    return min(sizes, default=None)


class FrameReader:
    """Reads a client's frames from the bytes `feed` gets, calling `on_frame(first_byte, payload)` for each
    one of the kinds above (unmasked payload). At a frame of another kind, or when `on_frame` returns False,
    it calls `hand_over(rest)` with the bytes from that frame on (from the frame after, for False) and stops
    reading; so do callers: every later byte belongs to whoever got the rest."""

    __slots__ = ("max_size", "on_frame", "hand_over", "pending")

    def __init__(self, max_size: int | None, on_frame: Callable[[int, bytes], bool],
                 hand_over: Callable[[bytes], None]) -> None:
        self.max_size = max_size
        self.on_frame = on_frame
        self.hand_over = hand_over
        self.pending = b""   # the start of a frame whose end has not come yet

    def feed(self, data: bytes) -> None:
        if self.pending:
            data, self.pending = self.pending + data, b""
        end, start = len(data), 0
        max_size, on_frame = self.max_size, self.on_frame
        while end - start >= 2:
            first, second = data[start], data[start + 1]
            size = second & 0x7F
            if size < 126:
                mask_at = start + 2
            elif size == 126:
                mask_at = start + 4
                if mask_at > end:
                    break
                size = int.from_bytes(data[start + 2:mask_at], "big")
            else:
                mask_at = start + 10
                if mask_at > end:
                    break
                size = int.from_bytes(data[start + 2:mask_at], "big")
            if (first not in _READ or not second & _MASKED or (max_size is not None and size > max_size)
                    or (first >= PING and size > _MAX_CONTROL_PAYLOAD)):
                self.hand_over(data[start:])
                return
            payload_at = mask_at + 4
            frame_end = payload_at + size
            if frame_end > end:
                break
            payload = apply_mask(data[payload_at:frame_end], data[mask_at:payload_at])
            start = frame_end
            if not on_frame(first, payload):
                self.hand_over(data[start:])
                return
        if start < end:
            self.pending = data[start:]
