"""The start-up checks of `envkit.transport.fast`: each fast path's protocol classes fed known bytes on a
private loop.

Each check raises `FastPathBroken` (or whatever the changed internals raise) when what it is fed does not come
out exactly as uvicorn and websockets themselves would write it; it needs no socket and no app but its own.
"""

from __future__ import annotations

import asyncio
import base64
import logging
from typing import Any

import uvicorn
from uvicorn.server import ServerState
from websockets.frames import Frame, Opcode
from websockets.protocol import Protocol, Side

from ...core.http_exchange import Exchange, ExchangeEndpoint
from ...core.served_env import INLINE_FRAMES
from ..uvicorn_protocols import HeadLimits, protocol_classes
from .frames import PING, PONG, TEXT, FrameReader, between_frames, frame_size_limit, server_frame
from .inline import InlineWebSocket, InlineWebSocketReadingFrames

__all__ = ["FastPathBroken", "check_frames", "check_websocket", "check_http", "masked", "MemoryTransport",
           "connect_protocol", "probe_config", "run_until_idle"]

_MASK = b"\x1f\x2e\x3d\x4c"
#: The probes' protocols log nothing: what they are fed is not a client's. (Outside `logging`'s registry, which
#: uvicorn's logging set-up would enable again.)
_SILENT = logging.Logger("envkit.transport.fast.checks", logging.CRITICAL + 1)
_SILENT.disabled = True


class FastPathBroken(Exception):
    """What a fast path relies on does not behave as it expects."""


def expect(condition: bool, what: str) -> None:
    if not condition:
        raise FastPathBroken(what)


def masked(first_byte: int, payload: bytes, mask: bytes = _MASK) -> bytes:
    """A client's frame (masked), `first_byte` being FIN, reserved bits and opcode."""
    size = len(payload)
    if size < 126:
        head = bytes((first_byte, 0x80 | size))
    elif size < 1 << 16:
        head = bytes((first_byte, 0x80 | 126)) + size.to_bytes(2, "big")
    else:
        head = bytes((first_byte, 0x80 | 127)) + size.to_bytes(8, "big")
    return head + mask + bytes(byte ^ mask[i % 4] for i, byte in enumerate(payload))


class MemoryTransport(asyncio.Transport):
    """A transport that keeps what is written to it. Like a socket's, once closed it takes writes until the loop's
    next turn, then tells its protocol the connection is lost and drops them."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__()
        self.loop = loop
        self.written = bytearray()
        self.closed = False
        self.lost = False
        self.protocol: Any = None

    def write(self, data: bytes) -> None:  # type: ignore[override]
        if not self.lost:
            self.written += data

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.loop.call_soon(self.lose)

    def lose(self) -> None:
        """The connection is gone (closed, or the peer left): the protocol is told, once."""
        if not self.lost:
            self.lost = True
            self.protocol.connection_lost(None)

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"sockname": ("127.0.0.1", 8000), "peername": ("127.0.0.1", 40000)}.get(name, default)

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def get_protocol(self) -> Any:
        return self.protocol

    def set_protocol(self, protocol: Any) -> None:
        self.protocol = protocol

    def get_write_buffer_size(self) -> int:
        return 0

    def take(self) -> bytes:
        data = bytes(self.written)
        self.written.clear()
        return data


def run_until_idle(loop: asyncio.AbstractEventLoop, turns: int = 20) -> None:
    """Let the loop's tasks run as far as they go."""
    async def turn() -> None:
        for _ in range(turns):
            await asyncio.sleep(0)
    loop.run_until_complete(turn())


def probe_config(app: Any) -> uvicorn.Config:
    """uvicorn's settings for a probe serving `app`: no logging set-up, no lifespan, no pings."""
    config = uvicorn.Config(app, log_config=None, log_level=None, access_log=False, lifespan="off",
                            proxy_headers=False, ws_per_message_deflate=False, ws_ping_interval=None)
    config.load()
    return config


def connect_protocol(protocol_class: type, app: Any, loop: asyncio.AbstractEventLoop,
                     config: uvicorn.Config | None = None) -> tuple[Any, MemoryTransport]:
    """A uvicorn protocol of `protocol_class` serving `app` (with `config`, by default `probe_config(app)`) on `loop`,
    connected to a `MemoryTransport`, logging nothing."""
    config = probe_config(app) if config is None else config
    state = ServerState()
    state.default_headers = [(b"date", b"Thu, 01 Jan 2026 00:00:00 GMT"), (b"server", b"uvicorn")]
    protocol = protocol_class(config=config, server_state=state, app_state={}, _loop=loop)
    protocol.logger, protocol.access_log = _SILENT, False
    transport = MemoryTransport(loop)
    transport.protocol = protocol
    protocol.connection_made(transport)
    if getattr(protocol, "conn", None) is not None:   # websockets' own protocol logs too
        protocol.conn.logger = _SILENT
    return protocol, transport


# -- frames ---------------------------------------------------------------------------------------------------


def check_frames() -> None:
    """websockets' parser as `frames` reads it (between frames, its size limit, `apply_mask`), and the
    WebSocket protocol with `FrameReader` reading frames."""
    conn = Protocol(Side.SERVER, max_size=1000)
    expect(frame_size_limit(conn) == 1000, "websockets' size limit is not where the frames fast path reads it")
    expect(between_frames(conn), "a fresh websockets parser does not wait at the start of a frame")
    frame = masked(TEXT, b"hello")
    conn.receive_data(frame[:3])
    expect(not between_frames(conn), "websockets' parser looks between frames inside one")
    conn.receive_data(frame[3:])
    events = conn.events_received()
    expect(events == [Frame(Opcode.TEXT, b"hello")], f"websockets read {events!r}")
    expect(between_frames(conn), "websockets' parser does not wait at the start of the next frame")
    read: list[tuple[int, bytes]] = []
    reader = FrameReader(1000, lambda first, payload: read.append((first, payload)) is None, read.append)
    for piece in (frame[:1], frame[1:7], frame[7:] + masked(PING, b"p")):
        reader.feed(piece)
    expect(read == [(TEXT, b"hello"), (PING, b"p")], f"FrameReader read {read!r}")
    client = Protocol(Side.CLIENT)
    for size in (5, 300, 70_000):
        client.receive_data(server_frame(TEXT, b"x" * size))
        expect(client.events_received() == [Frame(Opcode.TEXT, b"x" * size)], f"a {size}-byte server frame")
    check_websocket(read_frames=True)


# -- inline answers over uvicorn's WebSocket protocol ----------------------------------------------------------

_KEY = base64.b64encode(b"envkit fast path").decode()
_HANDSHAKE = (f"GET /ws HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
              f"Sec-WebSocket-Key: {_KEY}\r\nSec-WebSocket-Version: 13\r\n\r\n").encode()


class _WebSocketApp:
    """Accepts the connection and takes `INLINE_FRAMES`, keeping every message it is given."""

    def __init__(self) -> None:
        self.messages: list[str | bytes] = []
        self.protocol: Any = None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        expect((await receive())["type"] == "websocket.connect", "no websocket.connect")
        await send({"type": "websocket.accept"})
        answer_inline = scope.get("extensions", {}).get(INLINE_FRAMES)
        expect(answer_inline is not None, "the handshake offered no inline answers")
        answers = answer_inline(None, None, None)
        answers.on_message = self.messages.append
        while (await receive())["type"] != "websocket.disconnect":
            pass


def check_websocket(*, read_frames: bool) -> None:
    """uvicorn's WebSocket protocol with inline answers (and `FrameReader`, if `read_frames`): a handshake,
    whole, fragmented, binary and control frames, a reply, then a close."""
    loop = asyncio.get_event_loop()
    mixin = InlineWebSocketReadingFrames if read_frames else InlineWebSocket
    app = _WebSocketApp()
    protocol, transport = connect_protocol(protocol_classes(HeadLimits(), (), (mixin,))[1], app, loop)
    protocol.data_received(_HANDSHAKE)
    run_until_idle(loop)
    expect(transport.take().startswith(b"HTTP/1.1 101 "), "the handshake was not accepted")
    expect((protocol.frame_reader is not None) == read_frames, "FrameReader did not take over as expected")
    protocol.data_received(masked(0x81, b"whole") + masked(0x89, b"ping"))
    expect(transport.take() == server_frame(PONG, b"ping"), "a ping was not answered")
    protocol.data_received(masked(0x01, b"in ") + masked(0x00, b"two"))
    protocol.data_received(masked(0x80, b" pieces")[:5])
    protocol.data_received(masked(0x80, b" pieces")[5:] + masked(0x82, b"\x00\x01"))
    protocol.send_text_now("reply")
    expect(transport.take() == server_frame(TEXT, b"reply"), "a reply was not written as one text frame")
    protocol.data_received(masked(0x81, b"after"))
    expect(app.messages == ["whole", "in two pieces", b"\x00\x01", "after"], f"messages read: {app.messages!r}")
    protocol.data_received(masked(0x88, (1000).to_bytes(2, "big")))
    run_until_idle(loop)
    expect(transport.take().startswith(b"\x88\x02\x03\xe8"), "a close was not answered with 1000")
    transport.lose()
    run_until_idle(loop)


# -- requests answered at once ----------------------------------------------------------------------------------


class _Reverse(ExchangeEndpoint):
    max_body_bytes = 64

    async def answer(self, exchange: Exchange) -> None:
        body = await exchange.body(self.max_body_bytes)
        await exchange.respond(200, body[::-1], "application/octet-stream")


class _HttpApp:
    """`/at-once` answered by a surface; everything through ASGI answers the same way."""

    surface = _Reverse()

    def surface_at_once(self, path: str, headers: Any, local_host: str | None) -> ExchangeEndpoint | None:
        return self.surface if path == "/at-once" else None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await self.surface(scope, receive, send)


def _request(path: str, body: bytes) -> bytes:
    return b"POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\ncontent-length: %d\r\n\r\n%s" % (path.encode(), len(body), body)


def _bodies(data: bytes) -> list[bytes]:
    """The bodies of the responses in `data`, each checked to be a 200 with uvicorn's default headers."""
    bodies = []
    while data:
        head_end = data.index(b"\r\n\r\n") + 4
        head = data[:head_end].lower()
        expect(head.startswith(b"http/1.1 200 ok\r\n"), f"a response began {data[:30]!r}")
        expect(b"\r\ndate: thu, 01 jan 2026" in head and b"\r\nserver: uvicorn\r\n" in head,
               "a response lacks uvicorn's default headers")
        length = int(head.split(b"content-length: ")[1].split(b"\r\n")[0])
        bodies.append(data[head_end:head_end + length])
        data = data[head_end + length:]
    return bodies


def check_http() -> None:
    """uvicorn's httptools protocol with requests answered at once: a request, its repeat, a request pipelined
    behind one that takes uvicorn's cycle, a body split across reads; every response in order."""
    from .at_once import AnsweredAtOnce   # ImportError: httptools is not installed, or uvicorn's module changed

    loop = asyncio.get_event_loop()
    http_class = protocol_classes(HeadLimits(), (AnsweredAtOnce,))[0]
    expect(hasattr(http_class, "_exchange_at_once"), "httptools is not installed")
    protocol, transport = connect_protocol(http_class, _HttpApp(), loop)
    for data in (_request("/at-once", b"abc"), _request("/at-once", b"hello"),
                 _request("/other", b"cycle") + _request("/at-once", b"behind"), _request("/at-once", b"split")[:-3],
                 b"lit", _request("/other", b"12") + _request("/other", b"345")):
        protocol.data_received(data)
        run_until_idle(loop)
    expected = [b"cba", b"olleh", b"elcyc", b"dniheb", b"tilps", b"21", b"543"]
    written = _bodies(transport.take())
    expect(written == expected, f"responses {written!r}, expected {expected!r}")
    transport.lose()
    run_until_idle(loop)
