"""Moving a `SessionScript`'s frames over a WebSocket: picows (fast), raw (fastest to open), or websockets.

Both drivers offer the same three steps: `open()` connects and resets, `run_steps()` sends the
steps and returns when the session has ended, `close()` closes the socket (bounded in time).
Failures are recorded on the script, never raised.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Protocol

from ..protocol import key_headers
from .raw_client import RawWebSocket, endpoint, open_connection
from .script import SessionScript

__all__ = ["Driver", "PicowsDriver", "RawDriver", "WebsocketsDriver", "driver_class", "available_clients",
           "connect_failure"]

CLOSE_TIMEOUT_S = 5.0
MAX_FRAME_BYTES = 16 << 20


class Driver(Protocol):
    def __init__(self, url: str, script: SessionScript) -> None: ...
    async def open(self) -> None: ...
    async def run_steps(self) -> None: ...
    async def close(self) -> None: ...


def connect_failure(error: BaseException) -> str:
    """How a failed connection attempt is counted (one short reason per kind of failure)."""
    if isinstance(error, (asyncio.TimeoutError, TimeoutError)):
        return "connect: timed out"
    if isinstance(error, ConnectionRefusedError):
        return "connect: connection refused"
    if isinstance(error, OSError) and error.strerror:
        return f"connect: {error.strerror}"
    text = str(error).splitlines()[0][:80] if str(error) else ""
    return f"connect: {type(error).__name__}" + (f" ({text})" if text else "")


def settle(script: SessionScript, ready: asyncio.Future[None], done: asyncio.Future[None]) -> None:
    """Wake whoever waits for the session to be ready (its reset answered) or done (ended, however)."""
    if (script.ready or script.outcome is not None) and not ready.done():
        ready.set_result(None)
    if script.outcome is not None and not done.done():
        done.set_result(None)


try:
    from picows import WSCloseCode, WSListener, WSMsgType, WSTransport, ws_connect
except ImportError:  # the `bench` extra is not installed; the websockets driver still works
    WSListener = object  # type: ignore[assignment,misc]


class _PicowsListener(WSListener):  # type: ignore[misc,valid-type]
    """Answers each reply frame from picows's callback, so a step costs no task switch."""

    def __init__(self, script: SessionScript, ready: asyncio.Future[None], done: asyncio.Future[None]) -> None:
        self.script = script
        self.ready = ready
        self.done = done

    def on_ws_connected(self, transport: WSTransport) -> None:
        transport.send(WSMsgType.TEXT, self.script.reset_frame())

    def on_ws_frame(self, transport: WSTransport, frame: object) -> None:
        msg_type = frame.msg_type  # type: ignore[attr-defined]
        if msg_type is WSMsgType.TEXT or msg_type is WSMsgType.BINARY:
            reply = self.script.on_reply(frame.get_payload_as_bytes())  # type: ignore[attr-defined]
            if reply is not None:
                transport.send(WSMsgType.TEXT, reply)
                return
        elif msg_type is WSMsgType.CLOSE:
            self.script.closed(frame.get_close_code().value, frame.get_close_reason())  # type: ignore[attr-defined]
            transport.send_close(WSCloseCode.OK)
            transport.disconnect()
        else:
            return
        self._settle()

    def on_ws_disconnected(self, transport: WSTransport) -> None:
        self.script.closed(None)
        self._settle()

    def _settle(self) -> None:
        settle(self.script, self.ready, self.done)


class PicowsDriver:
    """A session over picows: replies are answered inside the frame callback."""

    name = "picows"

    def __init__(self, url: str, script: SessionScript) -> None:
        self.url = url
        self.script = script
        self.transport: WSTransport | None = None
        self.listener: _PicowsListener | None = None

    async def open(self) -> None:
        loop = asyncio.get_running_loop()
        ready, done = loop.create_future(), loop.create_future()
        self.script.connecting()
        try:
            self.transport, self.listener = await ws_connect(
                lambda: _PicowsListener(self.script, ready, done), self.url, max_frame_size=MAX_FRAME_BYTES,
                websocket_handshake_timeout=30, extra_headers=key_headers())
        except Exception as error:
            self.script.fail(connect_failure(error))
            return
        await ready

    async def run_steps(self) -> None:
        assert self.transport is not None and self.listener is not None
        if self.script.outcome is None:
            self.transport.send(WSMsgType.TEXT, self.script.step_frame())
        await self.listener.done

    async def close(self) -> None:
        transport = self.transport
        if transport is None or transport.is_disconnected:
            return
        if not transport.is_close_frame_sent:
            transport.send_close(WSCloseCode.OK)
        try:
            await asyncio.wait_for(transport.wait_disconnected(), CLOSE_TIMEOUT_S)
        except asyncio.TimeoutError:
            transport.disconnect(graceful=False)


class _ScriptedSocket(RawWebSocket):
    """A raw connection that plays a script: each reply is answered inside `data_received`."""

    def __init__(self, url: str, script: SessionScript, ready: asyncio.Future[None]) -> None:
        super().__init__(endpoint(url))
        self.script = script
        self.ready = ready
        self.done: asyncio.Future[None] = ready.get_loop().create_future()

    def on_open(self) -> None:
        self.send(self.script.reset_frame())

    def on_message(self, payload: bytes) -> None:
        reply = self.script.on_reply(payload)
        if reply is not None:
            self.send(reply)
        else:
            self._settle()

    def on_refused(self, status_line: str) -> None:
        self.script.fail(f"connect: server answered {status_line.partition(' ')[2] or repr(status_line)}")
        self._settle()

    def on_close(self, code: int | None, reason: str) -> None:
        self.script.closed(code, reason)
        self._settle()

    def on_lost(self) -> None:
        self.script.closed(None)
        self._settle()

    def _settle(self) -> None:
        settle(self.script, self.ready, self.done)


class RawDriver:
    """A session over `raw_client`: the cheapest connection setup, for churn runs; plain ws:// only."""

    name = "raw"

    def __init__(self, url: str, script: SessionScript) -> None:
        self.url = url
        self.script = script
        self.connection: _ScriptedSocket | None = None

    async def open(self) -> None:
        ready = asyncio.get_running_loop().create_future()
        self.script.connecting()
        try:
            self.connection = _ScriptedSocket(self.url, self.script, ready)
            await open_connection(self.connection)
        except Exception as error:
            self.connection = None
            self.script.fail(connect_failure(error))
            return
        await ready

    async def run_steps(self) -> None:
        assert self.connection is not None
        if self.script.outcome is None:
            self.connection.send(self.script.step_frame())
        await self.connection.done

    async def close(self) -> None:
        connection = self.connection
        if connection is None or connection.lost.done():
            return
        connection.send_close()
        give_up = asyncio.get_running_loop().call_later(CLOSE_TIMEOUT_S, connection.abort)
        try:
            await connection.lost
        finally:
            give_up.cancel()


class WebsocketsDriver:
    """A session over the `websockets` library: one coroutine per session, one await per reply."""

    name = "websockets"

    def __init__(self, url: str, script: SessionScript) -> None:
        self.url = url
        self.script = script
        self.connection: object | None = None

    async def open(self) -> None:
        from websockets.asyncio.client import connect

        self.script.connecting()
        try:
            self.connection = await connect(self.url, max_size=MAX_FRAME_BYTES, compression=None, ping_interval=None,
                                            additional_headers=key_headers(),
                                            open_timeout=30, close_timeout=CLOSE_TIMEOUT_S)
        except Exception as error:
            self.script.fail(connect_failure(error))
            return
        await self._exchange(self.script.reset_frame())

    async def run_steps(self) -> None:
        if self.script.outcome is None:
            await self._exchange(self.script.step_frame())

    async def _exchange(self, frame: bytes | None) -> None:
        from websockets.exceptions import ConnectionClosed

        connection = self.connection
        script = self.script
        try:
            while frame is not None:
                await connection.send(frame, text=True)  # type: ignore[attr-defined]
                frame = script.on_reply(await connection.recv(decode=False))  # type: ignore[attr-defined]
        except ConnectionClosed as closed:
            with contextlib.suppress(ConnectionClosed):  # a frame that came before the close says why
                script.on_reply(await connection.recv(decode=False))  # type: ignore[attr-defined]
            received = closed.rcvd
            script.closed(received.code if received else None, received.reason if received else "")

    async def close(self) -> None:
        if self.connection is not None:
            await self.connection.close()  # type: ignore[attr-defined]


def available_clients() -> list[str]:
    """Client libraries usable here, fastest stepping first."""
    try:
        import picows  # noqa: F401
    except ImportError:
        return ["raw", "websockets"]
    return ["picows", "raw", "websockets"]


def driver_class(client: str) -> type[PicowsDriver] | type[RawDriver] | type[WebsocketsDriver]:
    """The driver for `client` ("auto", "picows", "raw" or "websockets")."""
    if client == "auto":
        client = available_clients()[0]
    if client == "picows":
        if "picows" not in available_clients():
            raise ValueError("the picows client is not installed; pip install 'envkit[bench]' or use --client raw")
        return PicowsDriver
    if client == "raw":
        return RawDriver
    if client == "websockets":
        return WebsocketsDriver
    raise ValueError(f"unknown client {client!r}; choose auto, picows, raw or websockets")
