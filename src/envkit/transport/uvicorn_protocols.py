"""uvicorn's HTTP and WebSocket protocols, with the limits a server on a public address needs and quiet logs.

uvicorn parses request heads (the request line and headers; for `/ws`, the WebSocket handshake)
with httptools, or h11 without it. h11 caps an incomplete head at 16 KiB; httptools has no cap at
all, and neither limits how long a head may take to arrive, so one connection can grow the server
by hundreds of MB of header line and a few thousand half-sent handshakes hold every file descriptor.
`protocol_classes` returns both protocols with these limits, applied by `envkit serve`,
`run_server` and `running_server` (plain `uvicorn module:app` does not apply them):

- a head may take `head_timeout_s` (10 s) from the connection's opening, or from the previous
  response on a kept-alive connection; past that the connection gets 408 and is closed (a kept-alive
  connection that sends nothing is closed by uvicorn's keep-alive timeout instead, 5 s by default);
- a head may be `max_head_bytes` (64 KiB) long; past that the connection gets 431 and is closed;
- a head that begins with two blank lines or more (`\r\n\r\n`: an empty request) gets 400 and the connection is
  closed at once (httptools and h11 would wait on for a request line);
- at most `max_pending_heads` connections may be waiting for their heads at once (a quarter of the
  process's file-descriptor limit); past that the oldest of them is closed with 503 if it has waited
  `min_evict_age_s` (1 s), so stalled handshakes never crowd out clients that complete theirs, while a
  burst of clients connecting at once (a trainer opening every rollout's session) is never evicted;
  `envkit.transport.listener` closes the oldest the same way (`make_room`) when the process's file descriptors run
  short.

Each refusal counts as bad client input in `ServerMetrics` (one WARNING per kind per minute), and
what uvicorn itself logs about clients (invalid UTF-8, invalid HTTP, every accepted WebSocket)
goes through `TransportLog` instead of producing tracebacks and a line per connection.

The fast paths built on uvicorn's internals (answers at once, the keep-alive timer, whole-response writes,
inline answers and `envkit.transport.ws_frames`) are used only where `envkit.transport.fast_paths` found them
working at start-up.
"""

from __future__ import annotations

import asyncio
import resource
from dataclasses import dataclass
from typing import Any

import orjson
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol
from websockets.exceptions import InvalidState
from websockets.frames import Frame, Opcode

from ..app.asgi import HANDSHAKE_TIMEOUT_S
from ..core.inline_answers import InlineAnswers
from ..core.metrics import ServerMetrics
from ..core.quiet_log import TransportLog
from ..core.sessions import Session
from ..protocol import CloseCode, Features
from ..surfaces.ws import INLINE_FRAMES, SessionHandler
from .ws_frames import BINARY, PING, PONG, TEXT, FrameReader, between_frames, frame_size_limit, server_frame

try:
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
except ImportError:   # httptools is not installed: uvicorn parses with h11
    HttpToolsProtocol = None  # type: ignore[assignment,misc]
try:
    from .http_at_once import AnsweredAtOnce, ExchangeAtOnce
    #: Requests of a connection that are not uvicorn's cycles, and so write no response through `_HeadWithBody`.
    _ANSWERED_AT_ONCE: tuple[type, ...] = (ExchangeAtOnce,)
    AT_ONCE_IMPORT_ERROR: str | None = None
except ImportError as error:   # no httptools, or its uvicorn module changed: the `at_once` fast path is off
    AnsweredAtOnce = None  # type: ignore[assignment,misc]
    _ANSWERED_AT_ONCE = ()
    AT_ONCE_IMPORT_ERROR = str(error)

__all__ = ["FastPaths", "HeadLimits", "protocol_classes", "MAX_HEAD_BYTES"]

MAX_HEAD_BYTES = 64 * 1024
MIN_EVICT_AGE_S = 1.0

#: What uvicorn logs about its clients: a kind of bad input to count, or None for routine chatter (DEBUG).
UVICORN_LOG_RULES: dict[str, str | None] = {
    "Invalid HTTP request received.": "invalid_http",
    "Unsupported upgrade request.": "bad_handshake",
    "Invalid UTF-8 sequence received from client.": None,   # counted with the close it causes (1007)
    '%s - "WebSocket %s" ': None,                           # one line per accepted or refused connection
}


def default_max_pending_heads() -> int:
    """A quarter of the file descriptors this process may open, between 64 and 4,096."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return 4096 if soft == resource.RLIM_INFINITY else max(64, min(4096, soft // 4))


@dataclass(frozen=True)
class FastPaths:
    """The fast paths in use, and why each one that is not is off (`off`: name -> reason)."""

    frames: bool = False
    inline: bool = False
    at_once: bool = False
    off: tuple[tuple[str, str], ...] = ()

    def describe(self) -> str | None:
        """The one log line for the paths that are off, or None when all are on."""
        if not self.off:
            return None
        reasons = "; ".join(f"{name}: {why}" for name, why in self.off)
        return f"envkit fast paths off, serving them with uvicorn's and websockets' own code ({reasons})"


class HeadLimits:
    """One server's head limits, the connections now waiting for their heads (oldest first) and its metrics."""

    def __init__(self, metrics: ServerMetrics | None = None, *, head_timeout_s: float = HANDSHAKE_TIMEOUT_S,
                 max_head_bytes: int = MAX_HEAD_BYTES, max_pending_heads: int | None = None,
                 min_evict_age_s: float = MIN_EVICT_AGE_S) -> None:
        self.metrics = metrics
        self.head_timeout_s = head_timeout_s
        self.max_head_bytes = max_head_bytes
        self.max_pending_heads = max_pending_heads or default_max_pending_heads()
        self.min_evict_age_s = min_evict_age_s
        #: Connections waiting for their request heads, oldest first, with the time each began to wait.
        self.pending: dict[_LimitedHeads, float] = {}

    def close_oldest(self, why: str) -> bool:
        """Close the connection that has waited longest for its head (503), if it has waited `min_evict_age_s`;
        whether one was closed."""
        if not self.pending:
            return False
        oldest, since = next(iter(self.pending.items()))
        if oldest.loop.time() - since < self.min_evict_age_s:
            return False
        oldest._refuse(503, "Service Unavailable", "handshake_evicted", f"{why}; closed the oldest")
        return True

    def make_room(self) -> bool:
        """`close_oldest` for `envkit.transport.listener`, when the process runs short of file descriptors."""
        return self.close_oldest("the server is near its file-descriptor limit")


class _LimitedHeads:
    """Mixin for uvicorn's HTTP protocols: the limits of `HeadLimits` on every request head."""

    limits: HeadLimits
    #: Whether a response's head waits for its body (`_HeadWithBody`): part of the `at_once` fast path.
    hold_heads: bool = False
    loop: asyncio.AbstractEventLoop
    transport: asyncio.Transport
    cycle: Any
    logger: Any

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.logger = TransportLog(self.logger, self.limits.metrics, UVICORN_LOG_RULES)
        self._head_since: float | None = None   # when the wait for the next request head began; None: none awaited
        self._head_bytes = 0
        self._head_tail = b""   # the last bytes of the head so far, to find its end across reads
        self._blank_lines: int | None = 0   # line ends before the awaited head's request line; None once it began
        self._head_timer: asyncio.TimerHandle | None = None   # set while the connection is in `limits.pending`

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)  # type: ignore[misc]
        self._await_head()
        self._watch_head()   # a new connection that sends nothing is a stalled head too

    def connection_lost(self, exc: Exception | None) -> None:
        self._head_done()
        super().connection_lost(exc)  # type: ignore[misc]

    def data_received(self, data: bytes) -> None:
        if self._head_since is not None:
            if self._blank_lines is not None and self._empty_request(data):
                self._refuse(400, "Bad Request", "invalid_http", "an empty request: a blank line where a request "
                             "line belongs")
                return
            self._head_bytes += self._head_part(data)
            if self._head_bytes > self.limits.max_head_bytes:
                self._refuse(431, "Request Header Fields Too Large", "handshake_too_big",
                             f"request head over {self.limits.max_head_bytes} bytes")
                return
        cycle = self.cycle
        super().data_received(data)  # type: ignore[misc]
        if self.hold_heads and self.cycle is not cycle and not isinstance(self.cycle, _ANSWERED_AT_ONCE):
            self.cycle.transport = _HeadWithBody(self.transport, self.cycle)   # its response head waits for the body
        if self._head_since is None:
            return
        if self.cycle is not cycle or self.transport.get_protocol() is not self:
            self._head_done()   # a request started, or the connection became a WebSocket
        elif self._head_timer is None and self._head_bytes:
            self._watch_head()   # part of a head came and the rest has not: it has until its deadline

    def _empty_request(self, data: bytes) -> bool:
        """Whether the awaited head began with two line ends or more (`\r\n\r\n`: an empty request). One is allowed
        before a request line (RFC 9112, 2.2); httptools and h11 skip any number and wait on for a request."""
        blank = self._blank_lines or 0
        lead = len(data) - len(data.lstrip(b"\r\n"))
        blank += data.count(b"\n", 0, lead)
        self._blank_lines = blank if lead == len(data) else None
        return blank >= 2

    def _head_part(self, data: bytes) -> int:
        """How many bytes of `data` belong to the request head: a body read with it is not the head's."""
        tail = self._head_tail
        end = (tail + data[:3]).find(b"\r\n\r\n") if tail else -1   # the head's end, across the previous read
        if end >= 0:
            part = max(0, end + 4 - len(tail))
        else:
            end = data.find(b"\r\n\r\n")
            part = len(data) if end < 0 else end + 4
        self._head_tail = (tail + data)[-3:] if len(data) < 3 else data[-3:]
        return part

    def on_response_complete(self) -> None:
        cycle, pipelined = self.cycle, bool(getattr(self, "pipeline", None))
        super().on_response_complete()  # type: ignore[misc]
        if self.cycle is cycle and not pipelined and not self.transport.is_closing():
            self._await_head()   # a kept-alive connection: the next head has the same limits

    def _await_head(self) -> None:
        """Wait for a request head from now. A kept-alive connection idles under uvicorn's keep-alive timeout, and is
        watched (`_watch_head`) once part of a head has come."""
        self._head_since = self.loop.time()
        self._head_bytes, self._head_tail, self._blank_lines = 0, b"", 0

    def _watch_head(self) -> None:
        """Time the awaited head out at its deadline, and count the connection among those waiting for heads."""
        limits, now = self.limits, self.loop.time()
        assert self._head_since is not None
        self._head_timer = self.loop.call_at(self._head_since + limits.head_timeout_s, self._head_timed_out)
        limits.pending[self] = now
        if len(limits.pending) > limits.max_pending_heads:
            limits.close_oldest(f"more than {limits.max_pending_heads} connections waiting for their request heads")

    def _head_done(self) -> None:
        self._head_since = None
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None
            self.limits.pending.pop(self, None)

    def _head_timed_out(self) -> None:
        self._refuse(408, "Request Timeout", "handshake_timeout",
                     f"no complete request head within {self.limits.head_timeout_s:g}s")

    def _refuse(self, status: int, phrase: str, kind: str, detail: str) -> None:
        self._head_done()
        if self.limits.metrics is not None:
            self.limits.metrics.bad_client_input(kind, detail)
        body = orjson.dumps({"detail": detail})
        head = (f"HTTP/1.1 {status} {phrase}\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n"
                "connection: close\r\n\r\n").encode()
        if not self.transport.is_closing():
            self.transport.write(head + body)
            self.transport.close()


class _KeepAliveTimer:
    """Mixin for uvicorn's httptools protocol: its keep-alive timeout (a kept-alive connection idle for
    `timeout_keep_alive` after a response is closed) with one timer per idle spell instead of one per request.

    uvicorn cancels its timer as each request's bytes arrive and arms a new one after each response (a
    `TimerHandle` made and unmade per request). Here the timer stays armed: a request marks the connection busy,
    and a timer that comes due while the connection is busy does nothing (the response arms one again), or,
    while it has been idle for less than the timeout, waits out the rest."""

    loop: asyncio.AbstractEventLoop
    transport: asyncio.Transport
    server_state: Any
    flow: Any
    pipeline: Any
    timeout_keep_alive: float
    timeout_keep_alive_task: asyncio.TimerHandle | None

    _idle_since: float | None = None   # when the last response was written, while no request has begun since

    def _unset_keepalive_if_required(self) -> None:   # uvicorn calls it as a request begins: busy from now
        self._idle_since = None

    def on_response_complete(self) -> None:
        # uvicorn's own, but for the keep-alive timer
        self.server_state.total_requests += 1
        if self.transport.is_closing():
            return
        if self.flow.read_paused:
            self.flow.resume_reading()
        if self.pipeline:   # the next request starts now: the connection stays busy
            cycle, app = self.pipeline.pop()
            self._start_asgi_task(cycle, app)  # type: ignore[attr-defined]
            return
        self._idle_since = now = self.loop.time()
        if self.timeout_keep_alive_task is None:
            self.timeout_keep_alive_task = self.loop.call_at(now + self.timeout_keep_alive, self._keep_alive_due)

    def _keep_alive_due(self) -> None:
        self.timeout_keep_alive_task = None
        since = self._idle_since
        if since is None:
            return
        due = since + self.timeout_keep_alive
        if due > self.loop.time():
            self.timeout_keep_alive_task = self.loop.call_at(due, self._keep_alive_due)
        else:
            self.timeout_keep_alive_handler()  # type: ignore[attr-defined]

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)  # type: ignore[misc]
        if self.timeout_keep_alive_task is not None:
            self.timeout_keep_alive_task.cancel()
            self.timeout_keep_alive_task = None


class _HeadWithBody:
    """A connection's transport as one response cycle writes to it: the head of a response with a
    `content-length` is held back until its body, so that a whole response leaves in one write (one system
    call and one TCP segment where uvicorn makes two). Streamed (chunked) responses, bodiless ones and
    answers to HEAD are written as uvicorn writes them.

    The cycle refers to this object as its transport, so this one lets go of the cycle once the head is
    written: a finished request then leaves no reference cycle behind. (Holding it left every request's objects
    to the garbage collector: 312 collections, 3 of them full, per 19,200 MCP calls, against 4 without.)"""

    __slots__ = ("transport", "cycle", "held")

    def __init__(self, transport: asyncio.Transport, cycle: Any) -> None:
        self.transport = transport
        self.cycle = cycle
        self.held: bytes | None = None

    def write(self, data: bytes) -> None:
        held = self.held
        if held is not None:
            self.held = None
            self.transport.write(held + data)
            return
        cycle = self.cycle
        if cycle is not None and cycle.response_started:   # the head: decided here, and the cycle let go of
            self.cycle = None
            if (cycle.chunked_encoding is False and cycle.expected_content_length > 0
                    and cycle.scope["method"] != "HEAD"):
                self.held = data   # the body follows in the cycle's next write
                return
        self.transport.write(data)

    def is_closing(self) -> bool:
        return self.transport.is_closing()

    def close(self) -> None:
        if self.held is not None and not self.transport.is_closing():
            self.transport.write(self.held)
        self.held = None
        self.transport.close()


class _QuietWebSocket(WebSocketsSansIOProtocol):
    """uvicorn's WebSocket protocol with `TransportLog`, counting the frames that break the protocol, and
    answering the frames of `RUN_INLINE` environments inside `data_received`.

    A connection's handshake offers `answer_inline` to the app (the scope extension `INLINE_FRAMES`);
    once `SessionHandler` takes it, each message goes straight to the session's `InlineAnswers`
    instead of through the ASGI queue and a task switch to the app, and each reply is written at once.
    From then on the connection's everyday frames are read and written by `envkit.transport.ws_frames` rather than
    websockets (unless an extension was negotiated); websockets gets every other frame, from the first
    one on. Disconnects and closes still reach the app through the queue.
    """

    metrics: ServerMetrics | None = None
    #: The fast paths `inline` (offer `INLINE_FRAMES`) and `frames` (read frames with `FrameReader`).
    inline_frames = False
    read_frames = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.logger = TransportLog(self.logger, self.metrics, UVICORN_LOG_RULES)  # type: ignore[assignment]
        self.inline: InlineAnswers | None = None
        self.frame_reader: FrameReader | None = None

    def handle_parser_exception(self) -> None:
        sent = self.conn.close_sent
        code = sent.code if sent is not None else None
        if self.metrics is not None:
            kind = {1007: "invalid_utf8", CloseCode.MESSAGE_TOO_BIG: "frame_too_big"}.get(code, "bad_frame")
            self.metrics.bad_client_input(kind, sent.reason if sent is not None and sent.reason else f"close {code}")
        super().handle_parser_exception()

    # -- frames answered inline ---------------------------------------------------------------

    def handle_connect(self, event: Any) -> None:
        super().handle_connect(event)
        if self.inline_frames and self.response.status_code == 101:
            self.scope["extensions"][INLINE_FRAMES] = self.answer_inline  # type: ignore[index]

    def answer_inline(self, handler: SessionHandler, session: Session, features: Features) -> InlineAnswers:
        """From now on, answer `session`'s frames inside `data_received` (the `INLINE_FRAMES` extension)."""
        self.inline = answers = _InlineOverUvicorn(self, handler, session, features)
        if not self.writable.is_set():
            answers.pause_writing()
        conn = self.conn
        if self.read_frames and not conn.extensions and not self.close_sent and between_frames(conn):
            self.frame_reader = FrameReader(frame_size_limit(conn), self.on_frame, self.read_through_websockets)
        return answers

    def data_received(self, data: bytes) -> None:
        reader = self.frame_reader
        if reader is None:
            super().data_received(data)
        elif self.close_sent:   # past the close: websockets reads on until the client's close frame
            self.read_through_websockets(reader.pending + data)
        else:
            reader.feed(data)

    def read_through_websockets(self, data: bytes) -> None:
        """Hand the connection back to websockets from `data` on (`FrameReader`'s `hand_over`)."""
        self.frame_reader = None
        if data:
            super().data_received(data)

    def on_frame(self, first_byte: int, payload: bytes) -> bool:
        """One frame read by `FrameReader`; False once websockets must read the rest."""
        if self.close_sent or self.transport.is_closing():
            return False
        answers = self.inline
        assert answers is not None
        if first_byte == TEXT:
            try:
                text = payload.decode()
            except UnicodeDecodeError:
                self.close_invalid_utf8()
                return False
            answers.on_message(text)
        elif first_byte == BINARY:
            answers.on_message(payload)
        elif first_byte == PING:
            self.transport.write(server_frame(PONG, payload))
        else:
            self.handle_pong(Frame(Opcode.PONG, payload))
        return True

    def send_receive_event_to_app(self) -> None:
        answers = self.inline
        if answers is None:
            super().send_receive_event_to_app()
            return
        frames = self.frames
        data = frames[0] if len(frames) == 1 else b"".join(frames)
        self.frames = []
        if self.close_sent:   # past the close: drop it, and keep reading until the client's close frame comes
            return
        if self.curr_msg_data_type == "text":
            try:
                text = data.decode()
            except UnicodeDecodeError:
                self.close_invalid_utf8()
                return
            answers.on_message(text)
        else:
            answers.on_message(data)

    def close_invalid_utf8(self) -> None:
        """A text message that is not UTF-8: close 1007, as uvicorn does."""
        self.logger.exception("Invalid UTF-8 sequence received from client.")
        self.conn.send_close(1007)
        self.handle_parser_exception()

    def send_text_now(self, text: str) -> None:
        """Write one text frame at once (a reply answered inline); nothing once the connection is closing."""
        if self.close_sent or self.transport.is_closing():
            return
        if self.frame_reader is not None:   # websockets has seen nothing past the handshake: the connection is open
            self.transport.write(server_frame(TEXT, text.encode()))
            return
        try:
            self.conn.send_text(text.encode())
        except InvalidState:   # the client's close frame came first
            return
        self.transport.write(b"".join(self.conn.data_to_send()))

    def pause_writing(self) -> None:
        super().pause_writing()
        if self.inline is not None:
            self.inline.pause_writing()

    def resume_writing(self) -> None:
        super().resume_writing()
        if self.inline is not None:
            self.inline.resume_writing()


class _InlineOverUvicorn(InlineAnswers):
    """`InlineAnswers` writing through a `_QuietWebSocket`."""

    def __init__(self, protocol: _QuietWebSocket, handler: SessionHandler, session: Session,
                 features: Features) -> None:
        super().__init__(handler, features)
        self.session = session
        self.protocol = protocol

    def send_reply(self, reply: str) -> None:
        self.protocol.send_text_now(reply)

    def set_reading(self, paused: bool) -> None:
        transport = self.protocol.transport
        if transport.is_closing():
            return
        if paused:
            transport.pause_reading()
        else:
            transport.resume_reading()


def protocol_classes(limits: HeadLimits, paths: FastPaths) -> tuple[type[asyncio.Protocol], type[asyncio.Protocol]]:
    """uvicorn's `http` and `ws` protocol classes for one server: httptools (h11 without it) and websockets.

    With the fast paths (`paths`: those `envkit.transport.fast_paths` found working): requests to `/mcp` and ORS
    are answered without an ASGI cycle (`envkit.transport.http_at_once`), the keep-alive timeout takes one timer per
    idle spell (`_KeepAliveTimer`), whole responses leave in one write (`_HeadWithBody`), and a `RUN_INLINE`
    environment's frames are answered and read inside the WebSocket protocol (`_QuietWebSocket`)."""
    at_once = paths.at_once and HttpToolsProtocol is not None and AnsweredAtOnce is not None
    if HttpToolsProtocol is None:
        bases: tuple[type, ...] = (_LimitedHeads, H11Protocol)
    elif at_once:
        bases = (_LimitedHeads, AnsweredAtOnce, _KeepAliveTimer, HttpToolsProtocol)
    else:
        bases = (_LimitedHeads, HttpToolsProtocol)
    http = type(f"Limited{bases[-1].__name__}", bases, {"limits": limits, "hold_heads": at_once})
    ws = type("QuietWebSocketsSansIOProtocol", (_QuietWebSocket,),
              {"metrics": limits.metrics, "inline_frames": paths.inline, "read_frames": paths.frames})
    return http, ws
