"""A minimal WebSocket client on a bare asyncio protocol, for driving servers hard on loopback.

Opening a connection is where general-purpose clients spend their time (URL parsing, name
resolution, key generation and checking, transport wrappers); for a churn run, opening and
closing sessions as fast as possible, that cost would be measured instead of the server's.
This client does the least RFC 6455 allows a client to do: the address is resolved once per
URL, the handshake request is built once per URL (with a fresh key each time), the server's
101 is checked by status line, no extensions are offered, frames are masked, pings answered.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import random
import socket
import struct
from dataclasses import dataclass
from urllib.parse import urlsplit

from ..protocol import key_headers

__all__ = ["Endpoint", "RawWebSocket", "client_frame", "endpoint", "open_connection"]

TEXT, BINARY, CONTINUATION, CLOSE, PING, PONG = 0x1, 0x2, 0x0, 0x8, 0x9, 0xA
_SHORT, _MEDIUM = struct.Struct("!BB"), struct.Struct("!BBH")
_LONG = struct.Struct("!BBQ")


@dataclass(frozen=True)
class Endpoint:
    """Where a `ws://` URL points: a resolved address and the request line and headers for it."""

    family: int
    address: tuple
    request_head: bytes

    def request(self) -> bytes:
        key = base64.b64encode(random.randbytes(16))
        return self.request_head + b"Sec-WebSocket-Key: " + key + b"\r\n\r\n"


@functools.lru_cache(maxsize=16)
def endpoint(url: str) -> Endpoint:
    """Resolve `url` (`ws://host:port/path`) once; `wss://` is not supported (loopback benchmarking only)."""
    parts = urlsplit(url)
    if parts.scheme != "ws":
        raise ValueError(f"the raw client speaks plain ws:// only (use --client picows for wss://), got {url!r}")
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    family, _, _, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    host_header = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    head = (f"GET {target} HTTP/1.1\r\nHost: {host_header}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            "Sec-WebSocket-Version: 13\r\n" + "".join(f"{name}: {value}\r\n" for name, value in key_headers().items())
            ).encode()
    return Endpoint(family, address, head)


def client_frame(opcode: int, payload: bytes) -> bytes:
    """One final frame from a client: masked, as RFC 6455 requires of clients."""
    length = len(payload)
    if length < 126:
        header = _SHORT.pack(0x80 | opcode, 0x80 | length)
    elif length < 65536:
        header = _MEDIUM.pack(0x80 | opcode, 0x80 | 126, length)
    else:
        header = _LONG.pack(0x80 | opcode, 0x80 | 127, length)
    mask = random.randbytes(4)
    key = int.from_bytes((mask * (length // 4 + 1))[:length], "little")
    return header + mask + (int.from_bytes(payload, "little") ^ key).to_bytes(length, "little")


class RawWebSocket(asyncio.Protocol):
    """One client connection. Subclasses say what to do with messages and with the end of the connection.

    `on_open()` runs once the server's 101 has arrived, `on_message(payload)` for each complete
    data message, `on_refused(status_line)` when the server answers the handshake with anything
    but 101, `on_close(code, reason)` when the server sends a close frame, `on_lost()` when the
    connection is gone (always, last).
    """

    def __init__(self, endpoint: Endpoint) -> None:
        self.endpoint = endpoint
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.upgraded = False
        self.close_sent = False
        self.fragments: bytearray | None = None
        self.lost: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    # -- what a subclass overrides -----------------------------------------------------------

    def on_open(self) -> None: ...

    def on_message(self, payload: bytes) -> None: ...

    def on_refused(self, status_line: str) -> None: ...

    def on_close(self, code: int | None, reason: str) -> None: ...

    def on_lost(self) -> None: ...

    # -- sending -------------------------------------------------------------------------------

    def send(self, payload: bytes, opcode: int = TEXT) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(client_frame(opcode, payload))

    def send_close(self, code: int = 1000) -> None:
        if not self.close_sent:
            self.close_sent = True
            self.send(code.to_bytes(2, "big"), CLOSE)

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()

    # -- asyncio.Protocol ----------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        transport.write(self.endpoint.request())  # type: ignore[attr-defined]

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.lost.done():
            self.lost.set_result(None)
        self.on_lost()

    def data_received(self, data: bytes) -> None:
        buffer = self.buffer
        buffer += data
        if not self.upgraded:
            end = buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            status_line = bytes(buffer[:buffer.find(b"\r\n")]).decode("latin-1")
            if status_line.split(" ", 2)[1:2] != ["101"]:
                self.on_refused(status_line)
                self.transport.close()  # type: ignore[union-attr]
                return
            del buffer[:end + 4]
            self.upgraded = True
            self.on_open()
        self._read_frames(buffer)

    def _read_frames(self, buffer: bytearray) -> None:
        start = 0
        while len(buffer) - start >= 2:
            first, second = buffer[start], buffer[start + 1]
            length, offset = second & 0x7F, start + 2
            if length == 126:
                if len(buffer) - start < 4:
                    break
                length, offset = int.from_bytes(buffer[start + 2:start + 4], "big"), start + 4
            elif length == 127:
                if len(buffer) - start < 10:
                    break
                length, offset = int.from_bytes(buffer[start + 2:start + 10], "big"), start + 10
            if len(buffer) - offset < length:
                break
            payload = bytes(buffer[offset:offset + length])
            start = offset + length
            self._on_frame(first & 0x80, first & 0x0F, payload)
            if self.transport is None or self.transport.is_closing():
                break
        del buffer[:start]

    def _on_frame(self, final: int, opcode: int, payload: bytes) -> None:
        if opcode == TEXT or opcode == BINARY:
            if final:
                self.on_message(payload)
            else:
                self.fragments = bytearray(payload)
        elif opcode == CONTINUATION and self.fragments is not None:
            self.fragments += payload
            if final:
                message, self.fragments = bytes(self.fragments), None
                self.on_message(message)
        elif opcode == CLOSE:
            code = int.from_bytes(payload[:2], "big") if len(payload) >= 2 else None
            self.on_close(code, payload[2:].decode("utf-8", "replace"))
            self.send_close(code or 1000)
            self.transport.close()  # type: ignore[union-attr]
        elif opcode == PING:
            self.send(payload, PONG)


async def open_connection(protocol: RawWebSocket) -> None:
    """Connect `protocol` to its endpoint; raises OSError as `socket.connect` would."""
    where = protocol.endpoint
    loop = asyncio.get_running_loop()
    sock = socket.socket(where.family, socket.SOCK_STREAM)
    try:
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        await loop.sock_connect(sock, where.address)
        await loop.create_connection(lambda: protocol, sock=sock)
    except BaseException:
        sock.close()
        raise
