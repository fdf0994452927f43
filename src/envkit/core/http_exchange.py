"""One HTTP request and its response, for the per-call surfaces served as raw ASGI apps (`/mcp`, ORS).

A tool call over HTTP is one small JSON request after another, where FastAPI's routing, its
middleware stack and Starlette's `Request`/`Response` objects cost more server CPU than the
surface's own work. `EnvkitApp` therefore hands the paths of those surfaces straight to them, after
the access layer, as it hands `/ws` to the session handler; in an app with middleware of its own
they are ordinary routes to the same ASGI apps, so a request is answered the same either way.

A surface is an `ExchangeEndpoint`: it answers an `Exchange`, whatever carries it. `HttpExchange` is
one over ASGI; the default transport answers most calls without an ASGI cycle at all, with an
exchange of its own (`uvicorn_protocols`), and the surface's code is the same for both.
"""

from __future__ import annotations

import functools
from abc import ABC, abstractmethod
from typing import Any, AsyncIterator, Iterable

from starlette.types import Receive, Scope, Send

from ..protocol import to_json

__all__ = ["Exchange", "ExchangeEndpoint", "HttpExchange", "RawHeaders", "BodyTooLarge", "ClientGone", "respond",
           "response_headers", "response_head_lines", "JSON", "EVENT_STREAM"]

JSON = "application/json"
EVENT_STREAM = "text/event-stream"
_TEXT = "text/plain"


class BodyTooLarge(Exception):
    """The request body is longer than the surface accepts; what is past the limit is never read."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"request body of {size} bytes or more exceeds the server's limit of {limit} bytes")
        self.size = size
        self.limit = limit


class ClientGone(Exception):
    """The client disconnected before its request body arrived: there is no one to answer."""


class HeaderList:
    """Headers looked up by lower-case name in an ASGI scope's list (`raw_headers`), without building a mapping
    (most requests ask for a few headers, several of them absent)."""

    __slots__ = ()

    #: The request's headers, lower-case names, as an ASGI scope lists them.
    raw_headers: list[tuple[bytes, bytes]]

    def header(self, name: bytes) -> str | None:
        """The value of the first header `name` (lower-case bytes, e.g. `b"accept"`), or None."""
        for key, value in self.raw_headers:
            if key == name:
                return value.decode("latin-1")
        return None


class RawHeaders(HeaderList):
    """An ASGI scope's headers with `get(name)` (a `str` name), as the access layer reads them."""

    __slots__ = ("raw_headers",)

    def __init__(self, raw: list[tuple[bytes, bytes]]) -> None:
        self.raw_headers = raw

    def get(self, name: str, default: str | None = None) -> str | None:
        value = self.header(name.encode("latin-1"))
        return default if value is None else value


class Exchange(HeaderList, ABC):
    """One HTTP request to a surface and the means to answer it once: what every carrier of requests provides
    (its headers by `header(name)`)."""

    __slots__ = ()
    method: str
    path: str

    @abstractmethod
    async def body(self, limit: int) -> bytes:
        """The whole request body; raises `BodyTooLarge` once it passes `limit` bytes, `ClientGone` on a disconnect."""

    @abstractmethod
    async def respond(self, status: int, body: bytes = b"", content_type: str | None = None,
                      headers: Iterable[tuple[str, str]] = ()) -> None:
        """Answer with `body` in one piece (`content_type` None: no body type, as for 202 and 204)."""

    @abstractmethod
    async def stream(self, status: int, content_type: str, pieces: AsyncIterator[bytes],
                     headers: Iterable[tuple[str, str]] = ()) -> None:
        """Answer with a body sent piece by piece as `pieces` yields them (chunked transfer encoding)."""

    async def respond_json(self, status: int, payload: Any, headers: Iterable[tuple[str, str]] = ()) -> None:
        await self.respond(status, to_json(payload), JSON, headers)

    async def respond_text(self, status: int, text: str, headers: Iterable[tuple[str, str]] = ()) -> None:
        await self.respond(status, text.encode(), _TEXT, headers)


class ExchangeEndpoint(ABC):
    """A surface answering `Exchange`s (`answer`), served as a raw ASGI app too (`__call__`)."""

    #: Longest request body the surface reads.
    max_body_bytes: int

    @abstractmethod
    async def answer(self, exchange: Exchange) -> None:
        """Answer one request (every error included: nothing escapes but a server bug)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.answer(HttpExchange(scope, receive, send))


class HttpExchange(Exchange):
    """An `Exchange` over ASGI: the request's scope, `receive` and `send`."""

    __slots__ = ("scope", "receive", "send", "method", "path", "raw_headers")

    def __init__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.scope = scope
        self.receive = receive
        self.send = send
        self.method = scope["method"]
        self.path = scope["path"]
        self.raw_headers = scope["headers"]

    async def body(self, limit: int) -> bytes:
        declared = self.header(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            raise BodyTooLarge(int(declared), limit)
        message = await self.receive()
        if message["type"] != "http.request":
            raise ClientGone()
        body: bytes = message.get("body", b"")
        if not message.get("more_body", False):
            if len(body) > limit:
                raise BodyTooLarge(len(body), limit)
            return body
        chunks, size = [body], len(body)
        while True:
            message = await self.receive()
            if message["type"] != "http.request":
                raise ClientGone()
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                raise BodyTooLarge(size, limit)
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)

    async def respond(self, status: int, body: bytes = b"", content_type: str | None = None,
                      headers: Iterable[tuple[str, str]] = ()) -> None:
        await respond(self.send, status, body, content_type, headers)

    async def stream(self, status: int, content_type: str, pieces: AsyncIterator[bytes],
                     headers: Iterable[tuple[str, str]] = ()) -> None:
        send = self.send
        await send({"type": "http.response.start", "status": status,
                    "headers": response_headers(status, None, content_type, headers)})
        async for piece in pieces:
            await send({"type": "http.response.body", "body": piece, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})


def response_headers(status: int, body: bytes | None, content_type: str | None,
                     headers: Iterable[tuple[str, str]]) -> list[tuple[bytes, bytes]]:
    """A response's own headers as bytes: `headers` (a tuple of them is encoded once), its type and, for a whole
    `body` (not a stream), its length."""
    if type(headers) is tuple:
        raw = list(_encoded(headers))
    else:
        raw = [(name.encode("latin-1"), value.encode("latin-1")) for name, value in headers]
    if content_type is not None:
        raw.append((b"content-type", _with_charset(content_type)))
    if _has_length(status, body):
        raw.append((b"content-length", str(len(body)).encode()))
    return raw


def _has_length(status: int, body: bytes | None) -> bool:
    """Whether a response says its length: a whole `body` (not a stream), and not 1xx, 204 or 304 (they have none)."""
    return body is not None and status >= 200 and status not in (204, 304)


def response_head_lines(status: int, body: bytes | None, content_type: str | None,
                        headers: Iterable[tuple[str, str]]) -> bytes:
    """`response_headers` as the lines of a response head (`name: value\r\n` each); for constant headers (a
    tuple) all but the length is made once."""
    lines = _constant_lines(content_type, headers) if type(headers) is tuple else _lines(content_type, headers)
    if _has_length(status, body):
        lines += b"content-length: %d\r\n" % len(body)
    return lines


def _lines(content_type: str | None, headers: Iterable[tuple[str, str]]) -> bytes:
    """A response's own headers but its length, as head lines (no body given: the status does not matter)."""
    return b"".join(b"%s: %s\r\n" % pair for pair in response_headers(200, None, content_type, headers))


_constant_lines = functools.lru_cache(maxsize=64)(_lines)


async def respond(send: Send, status: int, body: bytes, content_type: str | None = None,
                  headers: Iterable[tuple[str, str]] = ()) -> None:
    """Send a whole response on an ASGI `send`: the head (with `content-length`) and the body."""
    await send({"type": "http.response.start", "status": status,
                "headers": response_headers(status, body, content_type, headers)})
    await send({"type": "http.response.body", "body": body})


@functools.lru_cache(maxsize=64)
def _encoded(headers: tuple[tuple[str, str], ...]) -> tuple[tuple[bytes, bytes], ...]:
    """Constant headers (a surface's fixed set, passed as a tuple) as bytes."""
    return tuple((name.encode("latin-1"), value.encode("latin-1")) for name, value in headers)


@functools.lru_cache(maxsize=64)
def _with_charset(content_type: str) -> bytes:
    """A text type says its charset (UTF-8), as Starlette's responses do."""
    if content_type.startswith("text/") and "charset=" not in content_type:
        content_type += "; charset=utf-8"
    return content_type.encode()
