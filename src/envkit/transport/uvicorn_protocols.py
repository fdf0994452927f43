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

`protocol_classes` takes the fast paths' mixins (`envkit.transport.fast`) and knows nothing else of them.
"""

from __future__ import annotations

import asyncio
import resource
from typing import Any

import orjson
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol

from ..app.asgi import HANDSHAKE_TIMEOUT_S
from ..core.metrics import ServerMetrics
from ..core.quiet_log import TransportLog
from ..protocol import CloseCode

try:
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
except ImportError:   # httptools is not installed: uvicorn parses with h11
    HttpToolsProtocol = None  # type: ignore[assignment,misc]

__all__ = ["HeadLimits", "protocol_classes", "MAX_HEAD_BYTES", "HttpToolsProtocol"]

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

    def head_arrived(self) -> None:
        """A request's head arrived in time: it is no longer timed (called by the fast path `at_once`)."""
        self._head_done()

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


class _QuietWebSocket(WebSocketsSansIOProtocol):
    """uvicorn's WebSocket protocol with `TransportLog`, counting the frames that break the protocol."""

    metrics: ServerMetrics | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.logger = TransportLog(self.logger, self.metrics, UVICORN_LOG_RULES)  # type: ignore[assignment]

    def handle_parser_exception(self) -> None:
        sent = self.conn.close_sent
        code = sent.code if sent is not None else None
        if self.metrics is not None:
            kind = {1007: "invalid_utf8", CloseCode.MESSAGE_TOO_BIG: "frame_too_big"}.get(code, "bad_frame")
            self.metrics.bad_client_input(kind, sent.reason if sent is not None and sent.reason else f"close {code}")
        super().handle_parser_exception()


def protocol_classes(limits: HeadLimits, http_mixins: tuple[type, ...] = (),
                     ws_mixins: tuple[type, ...] = ()) -> tuple[type[asyncio.Protocol], type[asyncio.Protocol]]:
    """uvicorn's `http` and `ws` protocol classes for one server: httptools (h11 without it) and websockets, with
    `limits`, and the fast paths' mixins (`envkit.transport.fast`) in front of uvicorn's own classes."""
    base = H11Protocol if HttpToolsProtocol is None else HttpToolsProtocol
    http = type(f"Limited{base.__name__}", (_LimitedHeads, *http_mixins, base), {"limits": limits})
    ws = type("QuietWebSocketsSansIOProtocol", (*ws_mixins, _QuietWebSocket), {"metrics": limits.metrics})
    return http, ws
