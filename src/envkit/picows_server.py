"""The picows transport: the same app served by picows and uvloop instead of uvicorn.

`envkit serve TARGET --transport picows`. The WebSocket protocol, handshake headers, refusals,
close codes, idle reaping, keepalive and shutdown are those of the uvicorn transport; both take
the frame answering from `SessionHandler` and the HTTP documents from `Documents`. What differs
is the machinery underneath: frames arrive in picows callbacks, and a frame of a `RUN_INLINE`
environment is answered inside its callback, with no task per connection or per message (keepalive
pings come from the session pool's one sweep over all sessions).

Access (API keys, Origin, Host) is checked in the handshake by the app's own `AccessPolicy`, as on
uvicorn: a refused request gets the same status and JSON body, and a refused WebSocket is never
upgraded. Not supported: `max_sessions_per_client` (picows's handshake callback does not see the
client's address), so an app with that limit is refused at start-up; CORS preflights (picows answers
any method but GET with 400 before the app sees it), so a page on another allowed origin can read
the GET routes only with requests that need no preflight (no `X-API-Key` header from that page).

Differences from uvicorn: only `GET /health`, `/schema`, `/metadata`, `/tools` and `/metrics` are served
over HTTP (no `/docs`, no middleware, none of the surfaces in `NOT_SERVED`: no `/mcp`, no Open Reward
Standard routes, no `/web` page; `/metadata` says so, and `/` and `/web` answer 404 naming the uvicorn
transport), and the environment factory runs in the handshake on the event
loop for every environment (the handshake's headers depend on it), so an environment whose
constructor is slow stalls other sessions while it runs and is better served by uvicorn. At
capacity a connection waits (`capacity_wait_s`) only when a session is closing, since the wait must
follow the handshake; one refused after such a wait hears it in reply to its first message.

picows and uvloop are imported only here (`pip install 'envkit[bench]'`).
"""

from __future__ import annotations

import asyncio
import logging
import signal
import threading
import time
from contextlib import contextmanager
from typing import Callable, Iterator
from urllib.parse import parse_qs

import orjson
import uvloop
from picows import (
    WSCloseCode,
    WSFrame,
    WSListener,
    WSMsgType,
    WSTransport,
    WSUpgradeRequest,
    WSUpgradeResponse,
    WSUpgradeResponseWithListener,
    ws_create_server,
)
from picows.picows import _validate_upgrade_request   # the check picows applies after `route`; see _open_session

from .access import AccessPolicy
from .app import HANDSHAKE_TIMEOUT_S, MAX_FRAME_BYTES, EnvkitApp
from .environment import Environment
from .errors import ConfigurationError
from .metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from .protocol import FEATURES_HEADER, REFUSED_HEADER, SESSION_ID_HEADER, CloseCode, ErrorCode, Features, error_frame
from .inline_answers import InlineAnswers, run_eagerly
from .quiet_log import TransportLog
from .routes import Documents
from .sessions import Session, new_session_id
from .web import WEB_PATH
from .ws_handler import ATTACH_PARAMETER, Refusal, SessionHandler

__all__ = ["PicowsServer", "run_picows", "running_picows"]

#: picows's receive buffer per connection starts this small (its default is 16 kB) and grows for larger frames.
READ_BUFFER_BYTES = 2048
#: Time given to sockets to send their close frames and to environments to close at shutdown.
SHUTDOWN_GRACE_S = 5.0
#: How long a socket the server closes waits for the client's close frame before it is dropped anyway.
CLOSE_TIMEOUT_S = 2.0
_JSON = {"Content-Type": "application/json"}
#: What the access layer cannot do on this transport, as `/metadata` says it.
PICOWS_ACCESS_NOT_SUPPORTED = [
    "max_sessions_per_client: picows's handshake callback does not see the client's address (serve with uvicorn)",
    "CORS preflights: picows answers every method but GET with 400, so cross-origin pages cannot send a key header",
]

#: What picows logs about its clients: a kind of bad input to count, or None for routine chatter (DEBUG).
PICOWS_LOG_RULES: dict[str, str | None] = {
    "New connection accepted": None,
    "Disconnected": None,
    "Disconnect because HTTP request violated max_size": "handshake_too_big",
    "Handshake timeout": "handshake_timeout",
    "WS parser error": "bad_frame",
    "WS parser failure": "bad_frame",
    "on_ws_frame raised WSProtocolError": "bad_frame",
}


def send_refusal(transport: WSTransport, refusal: Refusal) -> None:
    """The one error frame of a refusal, then the close with its code."""
    transport.send(WSMsgType.TEXT, refusal.frame.encode())
    transport.send_close(WSCloseCode(refusal.code), refusal.reason.encode())
    transport.disconnect()


class RefusingListener(WSListener):
    """Refuses a connection as soon as its handshake is answered."""

    def __init__(self, refusal: Refusal) -> None:
        self.refusal = refusal

    def on_ws_connected(self, transport: WSTransport) -> None:
        send_refusal(transport, self.refusal)


class MessageListener(WSListener):
    """Puts fragmented messages together and answers control frames; subclasses take `on_message(raw)`."""

    def __init__(self, max_frame_bytes: int) -> None:
        self.max_frame_bytes = max_frame_bytes
        self.fragments: bytearray | None = None

    def on_message(self, raw: bytes) -> None:
        raise NotImplementedError

    def on_pong(self) -> None:
        """A pong came in (the keepalive's answer)."""

    def on_too_big(self) -> None:
        """A fragmented message grew past `max_frame_bytes`; the connection is being closed with 1009."""

    def on_ws_frame(self, transport: WSTransport, frame: WSFrame) -> None:
        kind = frame.msg_type
        if kind is WSMsgType.TEXT or kind is WSMsgType.BINARY:
            if not frame.fin:
                self.fragments = bytearray(frame.get_payload_as_memoryview())
                return
            raw = frame.get_payload_as_bytes()
        elif kind is WSMsgType.CONTINUATION and self.fragments is not None:
            self.fragments += frame.get_payload_as_memoryview()
            if len(self.fragments) > self.max_frame_bytes:
                self.fragments = None
                self.on_too_big()
                transport.send_close(WSCloseCode.MESSAGE_TOO_BIG, b"message too big")
                transport.disconnect()
                return
            if not frame.fin:
                return
            raw, self.fragments = bytes(self.fragments), None
        elif kind is WSMsgType.PONG:
            self.on_pong()
            return
        elif kind is WSMsgType.CLOSE:
            transport.send_close(frame.get_close_code())
            transport.disconnect()
            return
        else:
            return
        self.on_message(raw)


class SessionListener(InlineAnswers, MessageListener):
    """One session's connection: messages answered in order (`InlineAnswers`), the slot released once it has gone."""

    def __init__(self, handler: SessionHandler, env: Environment, features: Features, max_frame_bytes: int,
                 session_id: str | None = None) -> None:
        MessageListener.__init__(self, max_frame_bytes)
        InlineAnswers.__init__(self, handler, features)
        self.session = Session(handler.pool, env, self.close_socket, ping=self.send_ping, session_id=session_id)
        self.transport: WSTransport | None = None
        self.drop_later: asyncio.TimerHandle | None = None
        self.gone = False

    def on_ws_connected(self, transport: WSTransport) -> None:
        self.transport = transport

    # Backpressure: a client that sends frames and does not read the replies must not grow the server.
    # While the socket's write buffer is over its high-water mark, or frames wait to be answered, the
    # connection is not read; the client's own sends then block, as they do against uvicorn.

    def set_reading(self, paused: bool) -> None:
        transport = self.transport
        if transport is None or transport.is_disconnected:
            return
        if paused:
            transport.underlying_transport.pause_reading()
        else:
            transport.underlying_transport.resume_reading()

    def send_reply(self, reply: str) -> None:
        transport = self.transport
        if transport is not None and not transport.is_disconnected:
            transport.send(WSMsgType.TEXT, reply.encode())

    async def answered_all(self) -> None:
        if self.gone:
            await self._release()

    def on_too_big(self) -> None:
        self.handler.pool.metrics.bad_client_input("frame_too_big", "fragmented message over the frame limit")

    async def close_socket(self, code: int, reason: str) -> None:
        """Send the close frame; the connection goes when the client's close frame answers it.

        Dropping it at once would reset it if the client is still sending, and a reset can discard
        the close frame (and replies before it) before the client has read them.
        """
        transport = self.transport
        if transport is not None and not transport.is_disconnected:
            transport.send_close(WSCloseCode(code), reason.encode())
            self.drop_later = asyncio.get_running_loop().call_later(CLOSE_TIMEOUT_S, transport.disconnect)

    def send_ping(self) -> None:
        transport = self.transport
        if transport is not None and not transport.is_disconnected:
            transport.send_ping()

    def on_pong(self) -> None:
        self.session.pong_received()

    def on_ws_disconnected(self, transport: WSTransport) -> None:
        self.gone = True
        self.waiting.clear()
        if self.drop_later is not None:
            self.drop_later.cancel()
        if self.answering is None:   # else the frame being answered finishes first, then releases
            run_eagerly(self._release())

    async def _release(self) -> None:
        try:
            await self.session.end(CloseCode.NORMAL, "session closed")
        finally:
            self.handler.pool.release()


class WaitingListener(MessageListener):
    """A connection that found every slot taken while sessions were closing: it waits for one of their slots.

    picows answers the handshake before anything can be awaited, so the wait comes after it: the
    client's first messages are kept until a slot and an environment are ready, then answered in
    order. A connection still refused after `capacity_wait_s` (or at shutdown) gets the refusal's
    error frame and close code as the reply to its first message instead of at connect.
    """

    def __init__(self, server: PicowsServer, features: Features, session_id: str) -> None:
        super().__init__(server.max_frame_bytes)
        self.server = server
        self.features = features
        self.session_id = session_id
        self.transport: WSTransport | None = None
        self.early: list[bytes] = []
        self.session_listener: SessionListener | None = None
        self.waiter: asyncio.Task[None] | None = None   # held here so that the task is not collected
        self.gone = False

    def on_ws_connected(self, transport: WSTransport) -> None:
        self.transport = transport
        self.waiter = asyncio.get_running_loop().create_task(self._wait_for_slot())

    async def _wait_for_slot(self) -> None:
        handler = self.server.handler
        if not await handler.pool.wait_for_slot():
            if not self.gone:
                send_refusal(self.transport, handler.refusal())  # type: ignore[arg-type]
            return
        if self.gone:
            handler.pool.release()
            return
        opened = self.server.new_session(self.features, self.session_id)
        if isinstance(opened, Refusal):
            send_refusal(self.transport, opened)  # type: ignore[arg-type]
            return
        self.session_listener = opened
        opened.on_ws_connected(self.transport)  # type: ignore[arg-type]
        for raw in self.early:
            opened.on_message(raw)
        self.early.clear()

    def on_message(self, raw: bytes) -> None:
        if self.session_listener is not None:
            self.session_listener.on_message(raw)
        else:
            self.early.append(raw)

    def on_pong(self) -> None:
        if self.session_listener is not None:
            self.session_listener.on_pong()

    def pause_writing(self) -> None:
        if self.session_listener is not None:
            self.session_listener.pause_writing()

    def resume_writing(self) -> None:
        if self.session_listener is not None:
            self.session_listener.resume_writing()

    def on_ws_disconnected(self, transport: WSTransport) -> None:
        self.gone = True
        if self.session_listener is not None:
            self.session_listener.on_ws_disconnected(transport)


#: The app's surfaces this transport does not serve; `/metadata` lists them under `not_served`.
NOT_SERVED = ("/mcp", "Open Reward Standard routes", "/web")
#: What `/metadata` says about the Open Reward Standard here.
ORS_NOT_SERVED = {"served": False, "why": "the picows transport serves /ws and the JSON documents only; serve with "
                  "--transport uvicorn (the default) for the Open Reward Standard routes"}
#: What `/metadata` says about the `/web` page here, and what `/` and `/web` answer.
WEB_NOT_SERVED = {"served": False, "why": "the picows transport serves no /web page; serve with --transport uvicorn "
                  "(the default) to play and replay in a browser"}


class PicowsServer:
    """Serves an app made by `create_app` with picows: `/ws` and the HTTP documents on one port."""

    def __init__(self, app: EnvkitApp, max_frame_bytes: int = MAX_FRAME_BYTES) -> None:
        handler, documents = getattr(app, "session_handler", None), getattr(app, "documents", None)
        if handler is None or documents is None:
            raise TypeError(f"PicowsServer serves apps made by envkit.create_app, got {type(app).__name__}")
        if handler.pool.max_sessions_per_client is not None:
            raise ConfigurationError("the picows transport does not enforce max_sessions_per_client (it cannot see a "
                                     "client's address before answering the handshake); serve with uvicorn")
        self.app = app
        self.handler: SessionHandler = handler
        self.documents: Documents = documents
        self.access: AccessPolicy | None = getattr(app, "access", None)
        self.max_frame_bytes = max_frame_bytes
        self.pages: dict[bytes, bytes] = {}
        self.server: asyncio.Server | None = None

    def route(self, request: WSUpgradeRequest) -> WSListener | WSUpgradeResponseWithListener:
        """picows's listener factory: the access check, then HTTP documents by path, a session for `/ws`."""
        path, _, query = request.path.partition(b"?")
        cors: list[tuple[str, str]] = []
        access = self.access
        if access is not None:
            headers = request.headers
            refusal = access.check(path.decode("latin-1"), headers)
            if refusal is not None:
                self.handler.pool.metrics.refused(refusal.reason, refusal.message)
                return _http(WSUpgradeResponse.create_error_response(refusal.status, refusal.body(),
                                                                     dict(refusal.response_headers())))
            cors = access.cors_headers(headers)
        if path == b"/ws":
            if ATTACH_PARAMETER in parse_qs(query.decode("latin-1")):
                message = ("the picows transport serves no /mcp, so it has no sessions to attach to; serve with "
                           "--transport uvicorn")
                return _refused(Refusal("session", error_frame(ErrorCode.SESSION_UNAVAILABLE, message),
                                        CloseCode.SESSION_UNAVAILABLE, "session unavailable", message))
            return self._open_session(request)
        if path == b"/" or path == WEB_PATH.encode() or path.startswith(WEB_PATH.encode() + b"/"):
            return _http(WSUpgradeResponse.create_error_response(404, orjson.dumps({"detail": WEB_NOT_SERVED["why"]}),
                                                                 _JSON))
        if path.decode("latin-1") in NOT_SERVED:
            detail = f"the picows transport does not serve {path.decode('latin-1')}; serve with --transport uvicorn"
            return _http(WSUpgradeResponse.create_error_response(404, orjson.dumps({"detail": detail}), _JSON))
        if request.method != b"GET":
            return _http(WSUpgradeResponse.create_error_response(405, b'{"detail":"Method Not Allowed"}', _JSON))
        if path == b"/health":
            return _http(WSUpgradeResponse.create_ok_response(orjson.dumps(self.documents.health()),
                                                              {**_JSON, **dict(cors)}))
        if path == b"/metrics":
            return _http(WSUpgradeResponse.create_ok_response(self.documents.metrics().encode(),
                                                              {"Content-Type": METRICS_CONTENT_TYPE, **dict(cors)}))
        page = self.pages.get(path)
        if page is None:
            return _http(WSUpgradeResponse.create_error_response(404, b'{"detail":"Not Found"}', _JSON))
        return _http(WSUpgradeResponse.create_ok_response(page, {**_JSON, **dict(cors)}))

    def _open_session(self, request: WSUpgradeRequest) -> WSListener | WSUpgradeResponseWithListener:
        pool = self.handler.pool
        # picows checks the upgrade headers only after `route` returns, and a connection it then refuses never
        # reaches its listener; check them first, so that a plain HTTP request to /ws takes no slot.
        try:
            _validate_upgrade_request(request)
        except RuntimeError as error:
            pool.metrics.bad_client_input("bad_handshake", str(error))
            body = orjson.dumps({"detail": f"{error}; /ws takes WebSocket connections only"})
            return _http(WSUpgradeResponse.create_error_response(400, body, _JSON))
        features = Features.parse(request.headers.get(FEATURES_HEADER, ""), request.path.partition(b"?")[2])
        if not pool.try_reserve():
            if pool.capacity_wait_s > 0 and not pool.shutting_down and pool.closing > pool.waiting_for_slots:
                session_id = new_session_id()   # a slot is on its way back: wait for it (see WaitingListener)
                response = WSUpgradeResponse.create_101_response({SESSION_ID_HEADER: session_id})
                return WSUpgradeResponseWithListener(response, WaitingListener(self, features, session_id))
            return _refused(self.handler.refusal())
        opened = self.new_session(features)
        if isinstance(opened, Refusal):
            return _refused(opened)
        response = WSUpgradeResponse.create_101_response({SESSION_ID_HEADER: opened.session.id})
        return WSUpgradeResponseWithListener(response, opened)

    def new_session(self, features: Features, session_id: str | None = None) -> SessionListener | Refusal:
        """The session of a connection that holds a slot; if its environment cannot be built, the refusal
        (and the slot is given back)."""
        handler = self.handler
        try:
            env = handler.build()
        except Exception as error:
            handler.pool.release()
            return handler.factory_refusal(error)
        listener = SessionListener(handler, env, features, self.max_frame_bytes, session_id)
        handler.pool.add(listener.session)
        return listener

    async def start(self, host: str, port: int) -> int:
        """Listen on `host:port`; returns the bound port."""
        self.app.bind(host)
        self.pages = {b"/schema": orjson.dumps(self.documents.schema),
                      b"/metadata": orjson.dumps({**self.documents.metadata, "ors": ORS_NOT_SERVED,
                                                  "web": WEB_NOT_SERVED, "transport": "picows",
                                                  "not_served": list(NOT_SERVED),
                                                  "access": {**self.documents.metadata["access"],
                                                             "not_supported": PICOWS_ACCESS_NOT_SUPPORTED}}),
                      b"/tools": orjson.dumps(self.documents.tools)}
        # Keepalive is the session pool's sweep (see SessionPool), not picows's task per connection.
        # uvloop's own server rather than aiofastnet's: at the file-descriptor limit aiofastnet 0.x keeps retrying
        # accept() and logs an error with a traceback each time (tens of thousands of lines), where uvloop sheds
        # the connection quietly.
        log = TransportLog(logging.getLogger("envkit.picows"), self.handler.pool.metrics, PICOWS_LOG_RULES)
        self.server = await ws_create_server(
            self.route, host, port, backlog=4096, max_frame_size=self.max_frame_bytes,
            read_buffer_init_size=READ_BUFFER_BYTES, websocket_handshake_timeout=HANDSHAKE_TIMEOUT_S, logger_name=log,
            use_aiofastnet=False)
        return self.server.sockets[0].getsockname()[1]

    async def shutdown(self) -> None:
        """Stop listening, close every session with 1001 and its environment, then wait for the sockets to go."""
        pool = self.handler.pool
        assert self.server is not None
        self.server.close()
        await pool.shutdown()
        deadline = time.monotonic() + SHUTDOWN_GRACE_S
        while pool.active and time.monotonic() < deadline:
            await asyncio.sleep(0.01)


def _http(response: WSUpgradeResponse) -> WSUpgradeResponseWithListener:
    return WSUpgradeResponseWithListener(response, None)


def _refused(refusal: Refusal) -> WSUpgradeResponseWithListener:
    response = WSUpgradeResponse.create_101_response({REFUSED_HEADER: refusal.kind})
    return WSUpgradeResponseWithListener(response, RefusingListener(refusal))


async def serve(server: PicowsServer, host: str, port: int, stop: asyncio.Event,
                on_started: Callable[[int], None] | None = None) -> None:
    """Serve until `stop` is set, then shut down gracefully."""
    bound = await server.start(host, port)
    if on_started is not None:
        on_started(bound)
    await stop.wait()
    await server.shutdown()


def run_picows(app: EnvkitApp, host: str = "127.0.0.1", port: int = 8000, *,
               on_started: Callable[[int], None] | None = None) -> None:
    """Serve `app` with picows until SIGINT/SIGTERM; sessions are closed with 1001 before it stops."""

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop.set)
        await serve(PicowsServer(app), host, port, stop, on_started)

    uvloop.run(main())


@contextmanager
def running_picows(app: EnvkitApp, *, startup_timeout: float = 20.0) -> Iterator[str]:
    """`running_server` for the picows transport: a background thread; yields `http://127.0.0.1:PORT`."""
    server = PicowsServer(app)   # refuses an app it cannot serve here, not in the thread
    loop = uvloop.new_event_loop()
    stop = asyncio.Event()
    bound: list[int] = []
    started = threading.Event()

    def on_started(port: int) -> None:
        bound.append(port)
        started.set()

    def run() -> None:
        try:
            loop.run_until_complete(serve(server, "127.0.0.1", 0, stop, on_started))
        finally:
            started.set()
            loop.close()

    thread = threading.Thread(target=run, name="envkit-picows", daemon=True)
    thread.start()
    if not started.wait(startup_timeout) or not bound:
        raise RuntimeError("the embedded picows server did not start")
    try:
        yield f"http://127.0.0.1:{bound[0]}"
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(timeout=15)
