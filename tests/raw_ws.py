"""Raw sockets speaking just enough HTTP and WebSocket to misbehave: half-sent handshakes, broken frames,
clients that never read. The well-behaved clients of the other tests cannot send these."""

from __future__ import annotations

import base64
import os
import socket
import struct
from urllib.parse import urlsplit


def address(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    return parts.hostname or "127.0.0.1", parts.port or 80


def connect(url: str, timeout: float = 10.0) -> socket.socket:
    return socket.create_connection(address(url), timeout=timeout)


def handshake_request(path: str = "/ws") -> bytes:
    key = base64.b64encode(os.urandom(16)).decode()
    return (f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n").encode()


def open_websocket(url: str, timeout: float = 10.0) -> socket.socket:
    """A socket past a completed WebSocket handshake (101 read, nothing else)."""
    sock = connect(url, timeout)
    sock.sendall(handshake_request())
    head = read_head(sock)
    assert head.startswith(b"HTTP/1.1 101"), head
    return sock


def read_head(sock: socket.socket) -> bytes:
    """An HTTP response head, read byte by byte so that nothing after it is consumed."""
    data = b""
    while not data.endswith(b"\r\n\r\n"):
        try:
            byte = sock.recv(1)
        except ConnectionResetError:   # the server dropped the connection without a response
            break
        if not byte:
            break
        data += byte
    return data


def read_exactly(sock: socket.socket, size: int) -> bytes:
    """`size` bytes from `sock`, and nothing after them."""
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        assert chunk, f"the server closed the connection after {len(data)} of {size} bytes"
        data += chunk
    return data


def read_frame(sock: socket.socket) -> tuple[int, bytes]:
    """The next frame from the server (unmasked): its first byte (FIN and opcode) and its payload."""
    first, size = read_exactly(sock, 2)
    if size == 126:
        size = int.from_bytes(read_exactly(sock, 2), "big")
    elif size == 127:
        size = int.from_bytes(read_exactly(sock, 8), "big")
    return first, read_exactly(sock, size)


def read_response(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection."""
    chunks = []
    while True:
        try:
            chunk = sock.recv(65536)
        except (ConnectionResetError, socket.timeout):
            break
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks)


def frame(payload: bytes, opcode: int = 0x1, *, fin: bool = True, mask: bool = True) -> bytes:
    """One WebSocket frame as a client sends it (masked unless told otherwise)."""
    head = bytes([(0x80 if fin else 0) | opcode])
    mask_bit = 0x80 if mask else 0
    size = len(payload)
    if size < 126:
        head += bytes([mask_bit | size])
    elif size < 1 << 16:
        head += bytes([mask_bit | 126]) + struct.pack("!H", size)
    else:
        head += bytes([mask_bit | 127]) + struct.pack("!Q", size)
    if not mask:
        return head + payload
    key = os.urandom(4)
    masked = bytes(byte ^ key[index % 4] for index, byte in enumerate(payload)) if size < 4096 else _mask(payload, key)
    return head + key + masked


def _mask(payload: bytes, key: bytes) -> bytes:
    repeated = (key * (len(payload) // 4 + 1))[: len(payload)]
    return (int.from_bytes(payload, "big") ^ int.from_bytes(repeated, "big")).to_bytes(len(payload), "big")
