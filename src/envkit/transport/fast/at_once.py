"""Requests to `/mcp` and ORS answered inside the default transport's protocol, with no ASGI cycle.

On uvicorn, an HTTP request costs a `RequestResponseCycle`, an `asyncio.Event`, a task, ASGI
message dicts and two writes before the surface does anything (docs/benchmarks.md has what that costs). An MCP
`tools/call` or an ORS `/call` is one such request per step, so `AnsweredAtOnce` hands a request straight to its
surface (`ExchangeEndpoint.answer`) when the request is a plain one the app says it may (`surface_at_once`: a path
served directly, the access policy's yes with nothing to add), and runs the surface's coroutine inside
`data_received` until it finishes or first waits; one that waits (a slot, the session's previous
call, a worker thread) goes on in a task, and the connection's next request waits its turn
behind it, as uvicorn queues pipelined requests. The response bytes are uvicorn's: its status
line, its default headers (`date`, `server`), then the surface's; so is the access log line.

A connection's calls repeat one request but for its body. Once a request has been answered at once, a
read holding exactly one request whose head is the same bytes but for its `content-length` value is
that request again (the same request line and headers, so the same verdicts from httptools, the head
limits and the app), and is handed to its surface without httptools' callbacks (`_Repeat`); a read
that holds anything else, or any other head, goes to the parser.

Everything else takes uvicorn's path: other paths, `HEAD`, HTTP/1.0, `Connection: close`,
`Expect: 100-continue`, chunked bodies, bodies over the surface's limit, query strings, requests
the access layer refuses or must add CORS headers to, apps with middleware, per-client session
limits (they read the client address in a context variable set per request).
"""

from __future__ import annotations

import contextvars
import functools
import logging
from typing import Any, AsyncIterator, Callable, Coroutine, Iterable

from uvicorn.protocols.http.httptools_impl import STATUS_LINE

from ...app.asgi import EnvkitApp
from ...core.eager import Resumed
from ...core.http_exchange import BodyTooLarge, Exchange, ExchangeEndpoint, RawHeaders, response_head_lines

__all__ = ["AnsweredAtOnce", "ExchangeAtOnce", "surface_at_once"]

logger = logging.getLogger("envkit.server")

_METHODS = frozenset({b"GET", b"POST", b"DELETE"})
_CLOSE = b"connection: close\r\n"
_INTERNAL_ERROR = b"Internal Server Error"
SurfaceFinder = Callable[[str, list[tuple[bytes, bytes]], "str | None"], "ExchangeEndpoint | None"]


def surface_at_once(app: EnvkitApp, path: str, headers: list[tuple[bytes, bytes]],
                    local_host: str | None) -> ExchangeEndpoint | None:
    """The surface that answers this request with no ASGI cycle: a path `app` serves directly, in an app with no
    middleware, that the access policy lets through as it is (`admits_as_is`: no refusal to send, no CORS headers to
    add) and with no client to count. None: the request takes the ASGI path, which answers it."""
    endpoint = app.direct_http.get(path)
    if endpoint is None or app.user_middleware or app.root_path:
        return None
    if app.access is not None and not app.access.admits_as_is(path, RawHeaders(headers), local_host):
        return None
    served = app.served
    if served is not None and served.pool.max_sessions_per_client is not None:
        return None
    return endpoint


class _DefaultHeadersBlock:
    """uvicorn's default response headers (`date`, `server`) as bytes, remade when uvicorn renews them (each second)."""

    __slots__ = ("source", "block")

    def __init__(self) -> None:
        self.source: list[tuple[bytes, bytes]] | None = None
        self.block = b""

    def __call__(self, default_headers: list[tuple[bytes, bytes]]) -> bytes:
        if default_headers is not self.source:
            self.source = default_headers
            self.block = b"".join(name + b": " + value + b"\r\n" for name, value in default_headers)
        return self.block


_default_headers = _DefaultHeadersBlock()


class _NoEvent:
    """What uvicorn sets on a connection's current request when the connection is lost: nothing to wake here."""

    __slots__ = ()

    def set(self) -> None:
        pass


class ExchangeAtOnce(Exchange):
    """One request answered by its surface from the protocol's callback; while its answer waits, it is the
    connection's current request (uvicorn's `cycle`), so that requests behind it wait their turn."""

    __slots__ = ("protocol", "endpoint", "method", "path", "raw_headers", "chunks", "started", "response_complete",
                 "disconnected", "keep_alive")
    message_event = _NoEvent()

    def __init__(self, protocol: Any, endpoint: ExchangeEndpoint, method: str, path: str,
                 raw_headers: list[tuple[bytes, bytes]]) -> None:
        self.protocol = protocol
        self.endpoint = endpoint
        self.method = method
        self.path = path
        self.raw_headers = raw_headers
        self.chunks: list[bytes] = []
        self.started = False            # the response head is written
        self.response_complete = False
        self.disconnected = False       # set by uvicorn when the connection is lost while this answer waits
        self.keep_alive = True          # cleared by uvicorn's graceful shutdown while this answer waits

    # -- the request --------------------------------------------------------------------------

    async def body(self, limit: int) -> bytes:
        body = self.chunks[0] if len(self.chunks) == 1 else b"".join(self.chunks)
        if len(body) > limit:
            raise BodyTooLarge(len(body), limit)
        return body

    # -- the response -------------------------------------------------------------------------

    async def respond(self, status: int, body: bytes = b"", content_type: str | None = None,
                      headers: Iterable[tuple[str, str]] = ()) -> None:
        if self.started:
            return
        self._write(self._head(status, response_head_lines(status, body, content_type, headers)) + body)
        self._complete()

    async def stream(self, status: int, content_type: str, pieces: AsyncIterator[bytes],
                     headers: Iterable[tuple[str, str]] = ()) -> None:
        if self.started:
            return
        self._write(self._head(status, response_head_lines(status, None, content_type, headers)
                               + b"transfer-encoding: chunked\r\n"))
        flow = self.protocol.flow
        async for piece in pieces:
            if flow.write_paused and not self.protocol.transport.is_closing():
                await flow.drain()
            if piece:
                self._write(b"%x\r\n%s\r\n" % (len(piece), piece))
        self._write(b"0\r\n\r\n")
        self._complete()

    def _head(self, status: int, lines: bytes) -> bytes:
        """The response head: uvicorn's status line and default headers, then the response's own `lines`."""
        self.started = True
        protocol = self.protocol
        # uvicorn's access log line, as its cycle writes it when the response starts (made only if it will be logged)
        if protocol.access_log and protocol.access_logger.isEnabledFor(logging.INFO):
            client = protocol.client
            protocol.access_logger.info('%s - "%s %s HTTP/%s" %d', "%s:%d" % client if client else "", self.method,
                                        self.path, "1.1", status)
        head = STATUS_LINE[status] + _default_headers(protocol.server_state.default_headers) + lines
        return head + b"\r\n" if self.keep_alive else head + _CLOSE + b"\r\n"

    def _write(self, data: bytes) -> None:
        transport = self.protocol.transport
        if not transport.is_closing():
            transport.write(data)

    def _complete(self) -> None:
        """The response is written: the connection reads on, or closes if graceful shutdown asked it to."""
        self.response_complete = True
        protocol = self.protocol
        if not self.keep_alive:
            protocol.transport.close()
        protocol.on_response_complete()

    # -- running the surface ------------------------------------------------------------------

    def start(self) -> None:
        """Run the surface's answer now, as far as it goes without waiting; a task finishes it if it must wait.

        It runs in a context of its own, as a request's task would: context variables that the surface or the
        environment set stay with this request."""
        answer = self.endpoint.answer(self)
        context = contextvars.copy_context()
        try:
            waiting_on = context.run(answer.send, None)   # as `eager.first_step`, without its call
        except StopIteration:
            self._returned()
            return
        except Exception as error:   # a server bug: uvicorn's answer to an app that raised
            self._failed(error)
            return
        protocol = self.protocol
        protocol.cycle = self   # the connection's next request waits behind this one
        task = protocol.loop.create_task(self._resume(answer, waiting_on), context=context)
        task.add_done_callback(protocol.tasks.discard)
        protocol.tasks.add(task)

    async def _resume(self, answer: Coroutine[Any, Any, None], waiting_on: Any) -> None:
        try:
            await Resumed(answer, waiting_on)
        except Exception as error:
            self._failed(error)
            return
        self._returned()

    def _returned(self) -> None:
        if not self.response_complete:
            self._failed(RuntimeError(f"the surface at {self.path} returned without answering"))

    def _failed(self, error: BaseException) -> None:
        logger.error("%s %s failed", self.method, self.path, exc_info=error)
        if self.started:   # a response half written cannot be finished: the client sees the connection close
            self.protocol.transport.close()
            self.response_complete = True
            return
        self.keep_alive = False
        self._write(self._head(500, response_head_lines(500, _INTERNAL_ERROR, "text/plain", ())) + _INTERNAL_ERROR)
        self._complete()


class _Repeat:
    """A connection's last request answered at once, kept as the bytes of its head before and after its
    `content-length` value, with what the protocol made of them.

    A read that holds exactly one request whose head is these bytes again, with any length, is that request again
    but for its body: the same request line and headers, so the same verdict from httptools, the head limits and
    the app. `exchange_for` answers it without the parser's callbacks; anything else goes to the parser."""

    __slots__ = ("before", "after", "raw_headers", "length_at", "endpoint", "method", "path")

    def __init__(self, before: bytes, after: bytes, exchange: ExchangeAtOnce, length_at: int) -> None:
        self.before, self.after = before, after
        self.raw_headers, self.length_at = exchange.raw_headers, length_at
        self.endpoint, self.method, self.path = exchange.endpoint, exchange.method, exchange.path

    @classmethod
    def of(cls, data: bytes, exchange: ExchangeAtOnce) -> _Repeat | None:
        """`data`, one whole request just handed to `exchange`, as a repeat to look for; None if it will not do
        (no single `content-length`, or more or less than the request in `data`)."""
        head_end = data.find(b"\r\n\r\n") + 4
        if head_end < 4 or head_end + sum(map(len, exchange.chunks)) != len(data):
            return None
        lowered = data[:head_end].lower()
        name_at = lowered.find(b"\r\ncontent-length:")
        if name_at < 0 or lowered.find(b"\r\ncontent-length:", name_at + 1) >= 0:
            return None
        value_at = name_at + 17
        while data[value_at] in (0x20, 0x09):   # optional white space before the value
            value_at += 1
        value_end = data.index(b"\r\n", value_at)
        value = data[value_at:value_end]
        length_at = [name for name, _ in exchange.raw_headers].index(b"content-length")
        if not value.isdigit() or exchange.raw_headers[length_at][1] != value:
            return None
        return cls(data[:value_at], data[value_end:head_end], exchange, length_at)

    def exchange_for(self, protocol: Any, data: bytes) -> ExchangeAtOnce | None:
        """An exchange for `data` if it is exactly one repeat of this request, else None."""
        before = self.before
        if not data.startswith(before):
            return None
        value_at = len(before)
        value_end = data.find(b"\r\n", value_at, value_at + 12)
        if value_end < 0:
            return None
        value = data[value_at:value_end]
        if not value.isdigit() or not data.startswith(self.after, value_end):
            return None
        body_at, length = value_end + len(self.after), int(value)
        if body_at + length != len(data) or length > self.endpoint.max_body_bytes:
            return None
        headers = self.raw_headers.copy()
        headers[self.length_at] = (b"content-length", value)
        exchange = ExchangeAtOnce(protocol, self.endpoint, self.method, self.path, headers)
        if body_at < len(data):
            exchange.chunks.append(data[body_at:])
        return exchange


class AnsweredAtOnce:
    """Mixin for uvicorn's httptools protocol: the requests `surface_at_once` names are answered by
    `ExchangeAtOnce`, every other request by uvicorn's cycle as before."""

    app: Any
    cycle: Any
    parser: Any
    url: bytes
    headers: list[tuple[bytes, bytes]]
    server: tuple[str, int] | None
    flow: Any
    expect_100_continue: bool
    limit_concurrency: int | None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        app = self.app   # an `EnvkitApp`, or (the start-up check's) an app with a `surface_at_once` of its own
        self._surface_at_once: SurfaceFinder | None = (functools.partial(surface_at_once, app)
                                                       if isinstance(app, EnvkitApp)
                                                       else getattr(app, "surface_at_once", None))
        self._at_once: ExchangeAtOnce | None = None
        # The last request handed to a surface (its request line and every header but its length) and that surface:
        # a connection's calls usually repeat both, and the answer depends on nothing else (see `_surface_for`).
        self._last_request: list[Any] = []
        self._last_surface: ExchangeEndpoint | None = None
        self._repeat: _Repeat | None = None   # the last request answered at once, as bytes (`_Repeat`)
        self._between_messages = True        # httptools' parser holds no part of a request
        self._begun = 0                      # requests begun in the read being parsed
        self._admitted: ExchangeAtOnce | None = None   # the last of them handed to a surface

    def data_received(self, data: bytes) -> None:
        repeat, cycle = self._repeat, self.cycle
        if (repeat is not None and self._between_messages and (cycle is None or cycle.response_complete)
                and not self.pipeline and not self.flow.write_paused):  # type: ignore[attr-defined]
            exchange = repeat.exchange_for(self, data)
            if exchange is not None:   # the last request again: what the parser's callbacks would do, without them
                self._unset_keepalive_if_required()  # type: ignore[attr-defined]
                self.head_arrived()
                exchange.start()
                return
        between, self._begun, self._admitted = self._between_messages, 0, None
        super().data_received(data)  # type: ignore[misc]
        admitted = self._admitted
        if between and self._begun == 1 and admitted is not None and self._between_messages:
            self._repeat = _Repeat.of(data, admitted) or self._repeat

    def head_arrived(self) -> None:
        """A request's head arrived in time (`uvicorn_protocols` stops timing it)."""

    def on_message_begin(self) -> None:
        # uvicorn builds the request's ASGI scope here; a request answered at once needs none, so it is built only
        # for one that takes uvicorn's path (`on_headers_complete`)
        self._between_messages = False
        self._begun += 1
        self.url = b""
        self.expect_100_continue = False
        self.headers = []

    def on_headers_complete(self) -> None:
        self._unset_keepalive_if_required()  # type: ignore[attr-defined]  # no idle timeout under a request
        exchange = self._exchange_at_once()
        if exchange is not None:
            self._at_once = self._admitted = exchange
            self.head_arrived()
            return
        url, headers, expect_100_continue = self.url, self.headers, self.expect_100_continue
        super().on_message_begin()  # type: ignore[misc]  # the scope, and empty headers in it: refilled
        self.url, self.expect_100_continue = url, expect_100_continue
        self.headers.extend(headers)
        super().on_headers_complete()  # type: ignore[misc]

    def on_body(self, body: bytes) -> None:
        if self._at_once is None:
            super().on_body(body)  # type: ignore[misc]
        else:
            self._at_once.chunks.append(body)

    def on_message_complete(self) -> None:
        self._between_messages = True
        exchange = self._at_once
        if exchange is None:
            super().on_message_complete()  # type: ignore[misc]
        else:
            self._at_once = None
            exchange.start()

    def _exchange_at_once(self) -> ExchangeAtOnce | None:
        """An exchange for the request whose head was just read, if it may be answered at once."""
        if (self._surface_at_once is None or self.expect_100_continue or self.flow.write_paused
                or self.limit_concurrency is not None):
            return None
        cycle = self.cycle
        if cycle is not None and not cycle.response_complete:   # pipelined behind a request still being answered
            return None
        method, url = self.parser.get_method(), self.url
        length, request = 0, [method, self.parser.get_http_version(), url]
        for header in self.headers:
            name = header[0]
            if name == b"content-length":
                if not header[1].isdigit():
                    return None
                length = int(header[1])
            elif name == b"transfer-encoding":
                return None
            else:
                request.append(header)
        endpoint = self._surface_for(request)
        if endpoint is None or length > endpoint.max_body_bytes:
            return None
        return ExchangeAtOnce(self, endpoint, method.decode(), url.decode(), self.headers)

    def _surface_for(self, request: list[Any]) -> ExchangeEndpoint | None:
        """The surface that answers a plain request at once, or None. `request`: its method, HTTP version and target,
        then its headers but `content-length`.

        Whether a request is plain (HTTP/1.1, kept alive, no upgrade, a target with no query or escapes) and what the
        app answers (from the path, the `Host`, `Origin` and API key headers, and its own settings, which do not
        change while it serves) follow from `request` alone; so a request that repeats the connection's last
        admitted one gets the same surface without asking again."""
        if request == self._last_request:
            return self._last_surface
        method, version, url = request[0], request[1], request[2]
        parser = self.parser
        # `find`, not `in`: `b"?" in url` first tries b"?" as an integer, raising and clearing a TypeError each time
        if (method not in _METHODS or version != "1.1" or not parser.should_keep_alive() or parser.should_upgrade()
                or url.find(b"?") >= 0 or url.find(b"%") >= 0 or not url.isascii() or not url.startswith(b"/")):
            return None
        endpoint = self._surface_at_once(url.decode(), self.headers, self.server[0] if self.server else None)
        if endpoint is not None:
            self._last_request, self._last_surface = request, endpoint
        return endpoint
