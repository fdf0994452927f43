"""Requests to `/mcp` and ORS answered inside the default transport's protocol (`envkit.transport.fast.at_once`).

Real servers on 127.0.0.1 and real sockets. A few tests wrap `ExchangeAtOnce.start` or a surface's `answer` in
the server's own process to count what took which path, or to make a surface fail as a server bug would; nothing
else is replaced.
"""

from __future__ import annotations

import asyncio
import contextvars
import re
import socket
import time
from typing import Any, Iterator

import httpx
import orjson
import pytest

import envkit.transport.fast.at_once as at_once
from envkit import create_app, tool
from envkit.surfaces.mcp import McpEndpoint
from envkit.app.targets import resolve_target
from envkit.testing import ServedProcess, running_server
from envkit.transport.uvicorn_protocols import HeadLimits

from conftest import needs_fast_path
from sample_envs import CounterAction, CounterEnvironment, CounterObservation


class NappingCounter(CounterEnvironment):
    """A counter with a tool that takes its time on a worker thread."""

    @tool
    def nap(self, seconds: float) -> str:
        """Sleep, then say so.

        Args:
            seconds: How long to sleep.
        """
        time.sleep(seconds)
        return f"slept {seconds}"


MARK: contextvars.ContextVar[str] = contextvars.ContextVar("test_mark", default="unset")


class MarkingCounter(CounterEnvironment):
    """A counter answered inline whose tool sets a context variable, as instrumented code does."""

    RUN_INLINE = True

    @tool
    def mark(self) -> str:
        """Set a context variable and say what it was before."""
        before = MARK.get()
        MARK.set("set by an earlier call")
        return before


def echo_app(**settings: Any) -> Any:
    target = resolve_target("echo")
    return create_app(target.env_class, target.action_cls, target.observation_cls, max_concurrent_envs=8, **settings)


def napping_app() -> Any:
    return create_app(NappingCounter, CounterAction, CounterObservation, max_concurrent_envs=8)


@pytest.fixture
def answered_at_once(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The paths of the requests the server answered at once, in order."""
    needs_fast_path("at_once")
    paths: list[str] = []
    start = at_once.ExchangeAtOnce.start

    def counted(self: at_once.ExchangeAtOnce) -> None:
        paths.append(self.path)
        start(self)

    monkeypatch.setattr(at_once.ExchangeAtOnce, "start", counted)
    return paths


def mcp_call(name: str, request_id: int = 1, **arguments: Any) -> bytes:
    return orjson.dumps({"jsonrpc": "2.0", "id": request_id, "method": "tools/call",
                         "params": {"name": name, "arguments": arguments}})


def post(path: str, body: bytes, headers: bytes = b"") -> bytes:
    return (b"POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\ncontent-type: application/json\r\ncontent-length: %d\r\n%s\r\n%s"
            % (path.encode(), len(body), headers, body))


def read_response(sock: socket.socket, buffer: bytearray) -> tuple[bytes, dict[bytes, bytes], bytes]:
    """(status line, headers, body) of the next response on `sock` (bodies by content-length)."""
    while b"\r\n\r\n" not in buffer:
        chunk = sock.recv(65536)
        assert chunk, f"the server closed the connection; read so far: {bytes(buffer)!r}"
        buffer += chunk
    end = buffer.index(b"\r\n\r\n")
    status, *lines = bytes(buffer[:end]).split(b"\r\n")
    headers = dict(line.split(b": ", 1) for line in lines)
    del buffer[:end + 4]
    length = int(headers.get(b"content-length", b"0"))
    while len(buffer) < length:
        buffer += sock.recv(65536)
    body = bytes(buffer[:length])
    del buffer[:length]
    return status, headers, body


@pytest.fixture
def connect() -> Iterator[Any]:
    sockets: list[socket.socket] = []

    def opened(url: str) -> socket.socket:
        host, port = url.removeprefix("http://").split(":")
        sock = socket.create_connection((host, int(port)), timeout=10)
        sockets.append(sock)
        return sock

    yield opened
    for sock in sockets:
        sock.close()


def open_episode(http: httpx.Client) -> str:
    reply = http.post("/mcp", content=mcp_call("reset")).json()
    return reply["result"]["structuredContent"]["episode_id"]


def test_a_call_answered_at_once_is_answered_as_uvicorn_answers_it(answered_at_once: list[str], connect: Any) -> None:
    """The same MCP and ORS calls, at once and through uvicorn's cycle (a query string sends them there): the same
    status, headers (but the date) and body."""
    with running_server(echo_app()) as url, httpx.Client(base_url=url, trust_env=False) as http:
        episode = open_episode(http)
        sid = http.post("/create_session").text.split("data: ")[1].split("\n")[0]
        assert http.post("/create", headers={"X-Session-ID": sid}, json={"task_spec": {}}).status_code == 200
        answered_at_once.clear()
        sock, buffer = connect(url), bytearray()
        answers = {}
        for path in ("/mcp", "/mcp?through=uvicorn"):
            sock.sendall(post(path, mcp_call("echo", episode_id=episode, message="same either way"),
                              b"accept: application/json, text/event-stream\r\n"))
            answers[path] = read_response(sock, buffer)
        ors = {}
        for path in ("/call", "/call?through=uvicorn"):
            sock.sendall(post(path, b'{"name": "echo_message", "input": {"message": "same"}}',
                              b"x-session-id: %s\r\n" % sid.encode()))
            ors[path] = read_response(sock, buffer)
    assert answered_at_once == ["/mcp", "/call"]
    for (status, headers, body), (status_2, headers_2, body_2) in (answers.values(), ors.values()):
        assert status == status_2 == b"HTTP/1.1 200 OK"
        assert list(headers) == list(headers_2) and headers.pop(b"date") and headers_2.pop(b"date")
        assert headers == headers_2
        if b"task_id" in body:   # an ORS call's events name the call: its id differs, nothing else
            body, body_2 = body.split(b"\n", 2)[2], body_2.split(b"\n", 2)[2]
        assert body.replace(b'"step":2', b'"step":1') == body_2.replace(b'"step":2', b'"step":1')
    assert b"same either way" in answers["/mcp"][2] and b"same" in ors["/call"][2]


def test_requests_behind_an_answer_that_waits_are_answered_in_order(answered_at_once: list[str],
                                                                  connect: Any) -> None:
    """Three requests sent at once on one connection, the first a tool call that waits for its worker thread: the
    answers come back in the order asked, and the connection is kept alive for more."""
    with running_server(napping_app()) as url, httpx.Client(base_url=url, trust_env=False) as http:
        first, second = open_episode(http), open_episode(http)
        answered_at_once.clear()
        sock, buffer = connect(url), bytearray()
        sock.sendall(post("/mcp", mcp_call("nap", 1, episode_id=first, seconds=0.3))
                     + post("/mcp", mcp_call("peek", 2, episode_id=second))
                     + b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        replies = [read_response(sock, buffer) for _ in range(3)]
        assert [orjson.loads(body)["id"] for _, _, body in replies[:2]] == [1, 2]
        assert "slept 0.3" in orjson.loads(replies[0][2])["result"]["content"][0]["text"]
        assert "total is 0" in orjson.loads(replies[1][2])["result"]["content"][0]["text"]
        assert orjson.loads(replies[2][2])["status"] == "healthy"
        sock.sendall(post("/mcp", mcp_call("peek", 3, episode_id=first)))
        assert orjson.loads(read_response(sock, buffer)[2])["id"] == 3
    assert answered_at_once == ["/mcp", "/mcp"]   # the first and the last: the ones behind it waited in uvicorn's queue


@pytest.mark.parametrize("when", ["at once", "after waiting"])
def test_a_surface_that_raises_answers_500_and_the_server_carries_on(monkeypatch: pytest.MonkeyPatch, connect: Any,
                                                                      caplog: pytest.LogCaptureFixture,
                                                                      capsys: pytest.CaptureFixture[str],
                                                                      when: str) -> None:
    """A server bug in a surface answered at once: the client gets a plain 500 and a closed connection, the log the
    traceback, and every other client goes on. (With the fast path off, uvicorn's cycle answers and logs it, through
    its own handler on stderr.)"""
    answer = McpEndpoint.answer

    async def broken(self: McpEndpoint, exchange: Any) -> None:
        if exchange.header(b"x-break") is None:
            return await answer(self, exchange)
        if when == "after waiting":
            await exchange.body(1024)
            await asyncio.sleep(0.01)
        raise RuntimeError("a bug in the surface")

    monkeypatch.setattr(McpEndpoint, "answer", broken)
    with running_server(echo_app()) as url, httpx.Client(base_url=url, trust_env=False) as http:
        episode = open_episode(http)
        sock, buffer = connect(url), bytearray()
        sock.sendall(post("/mcp", mcp_call("echo", episode_id=episode, message="x"), b"x-break: yes\r\n"))
        status, headers, body = read_response(sock, buffer)
        assert (status, body, headers[b"connection"]) == (b"HTTP/1.1 500 Internal Server Error",
                                                           b"Internal Server Error", b"close")
        assert sock.recv(1) == b""
        reply = http.post("/mcp", content=mcp_call("echo", episode_id=episode, message="still here")).json()
        assert "still here" in reply["result"]["content"][0]["text"]
    assert "a bug in the surface" in caplog.text + capsys.readouterr().err


def test_a_client_gone_while_its_answer_waits_costs_nothing_else(connect: Any) -> None:
    """A client that closes its connection while its tool call runs: the call finishes, the server carries on and the
    episode can be played on from a new connection."""
    with running_server(napping_app()) as url, httpx.Client(base_url=url, trust_env=False) as http:
        episode = open_episode(http)
        sock = connect(url)
        sock.sendall(post("/mcp", mcp_call("nap", episode_id=episode, seconds=0.2)))
        sock.close()
        reply = http.post("/mcp", content=mcp_call("add", episode_id=episode, amount=2)).json()
        assert reply["result"]["structuredContent"]["data"]["observation"]["total"] == 2
        assert http.get("/health").json()["status"] == "healthy"


def test_a_kept_alive_connection_keeps_the_head_limit_after_an_answer_at_once(answered_at_once: list[str],
                                                                           connect: Any) -> None:
    """After a call answered at once, the next request head on the connection still has `head_timeout_s`: a
    slowloris gets 408."""
    app = echo_app()
    limits = HeadLimits(app.state.envkit_metrics, head_timeout_s=0.5)
    with running_server(app, head_limits=limits) as url:
        sock, buffer = connect(url), bytearray()
        sock.sendall(post("/mcp", b'{"jsonrpc": "2.0", "id": 1, "method": "ping"}'))
        assert read_response(sock, buffer)[0] == b"HTTP/1.1 200 OK"
        started = time.monotonic()
        sock.sendall(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        for _ in range(50):   # one header byte every 0.1 s, never finishing
            try:
                sock.sendall(b"X")
            except OSError:
                break
            time.sleep(0.1)
        assert read_response(sock, buffer)[0] == b"HTTP/1.1 408 Request Timeout"
        assert time.monotonic() - started < 3
    assert answered_at_once == ["/mcp"]


@pytest.mark.parametrize("request_head", [
    b"POST /mcp HTTP/1.0\r\nHost: 127.0.0.1\r\n",
    b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n",
    b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n",
], ids=["http/1.0", "connection close", "chunked"])
def test_requests_uvicorn_must_frame_are_answered_through_its_cycle(answered_at_once: list[str], connect: Any,
                                                                    request_head: bytes) -> None:
    body = b'{"jsonrpc": "2.0", "id": 7, "method": "ping"}'
    framed = b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body) if b"chunked" in request_head else body
    length = b"" if b"chunked" in request_head else b"content-length: %d\r\n" % len(body)
    with running_server(echo_app()) as url:
        sock, buffer = connect(url), bytearray()
        sock.sendall(request_head + length + b"\r\n" + framed)
        status, headers, reply = read_response(sock, buffer)
        if b"chunked" in request_head:   # a kept-alive connection: the server's reply is as it would be at once
            assert headers.get(b"connection") is None
        else:
            assert headers[b"connection"] == b"close" and sock.recv(1) == b""
    assert status.endswith(b"200 OK") and orjson.loads(reply) == {"jsonrpc": "2.0", "id": 7, "result": {}}
    assert answered_at_once == []


def test_a_refused_or_cross_origin_request_takes_the_access_layer_path(answered_at_once: list[str]) -> None:
    """A request the access policy refuses, or one from an allowed page that needs CORS headers, is answered through
    the app's access layer (refused with its status; CORS headers added): never at once."""
    app = echo_app(api_keys=["k"], allowed_origins=["https://page.example"])
    ping = b'{"jsonrpc": "2.0", "id": 1, "method": "ping"}'
    with running_server(app) as url, httpx.Client(base_url=url, trust_env=False) as http:
        assert http.post("/mcp", content=ping).status_code == 401
        allowed = http.post("/mcp", content=ping, headers={"x-api-key": "k", "origin": "https://page.example"})
        assert allowed.headers["access-control-allow-origin"] == "https://page.example"
        assert answered_at_once == []
        assert http.post("/mcp", content=ping, headers={"x-api-key": "k"}).json()["result"] == {}
    assert answered_at_once == ["/mcp"]


def test_a_connection_whose_requests_change_their_key_host_or_path_is_judged_afresh(answered_at_once: list[str],
                                                                                   connect: Any) -> None:
    """A kept-alive connection repeating an admitted request is not asked about again (`AnsweredAtOnce._surface_for`),
    but any change to its request line or headers is: a wrong or missing key, another Host, another surface, another
    method, HTTP/1.0 (which uvicorn answers, closing the connection after)."""
    ping = b'{"jsonrpc": "2.0", "id": 1, "method": "ping"}'

    def request(path: str, host: bytes, key: bytes | None, line: bytes = b"POST %s HTTP/1.1") -> bytes:
        key_line = b"x-api-key: %s\r\n" % key if key is not None else b""
        headers = b"host: %s\r\n%scontent-type: application/json\r\ncontent-length: %d\r\n" % (host, key_line, len(ping))
        return line % path.encode() + b"\r\n" + headers + b"\r\n" + ping

    with running_server(echo_app(api_keys=["k"])) as url:
        sock, buffer = connect(url), bytearray()
        port = url.rsplit(":", 1)[1].encode()
        host = b"127.0.0.1:" + port
        expected = [(("/mcp", host, b"k"), b"200"), (("/mcp", host, b"wrong"), b"401"), (("/mcp", host, None), b"401"),
                    (("/mcp", b"evil.example", b"k"), b"403"), (("/mcp", host, b"k"), b"200"),
                    (("/call", host, b"k"), b"400"), (("/mcp", host, b"k"), b"200")]
        for (path, host_header, key), status in expected:
            sock.sendall(request(path, host_header, key))
            status_line, _, body = read_response(sock, buffer)
            assert status_line.split(b" ")[1] == status, (path, host_header, key, body)
            if path == "/call":   # the ORS surface answered, not the MCP one the previous request went to
                assert orjson.loads(body)["reason"] == "input_validation" and b"X-Session-ID" in body
            elif status == b"200":
                assert orjson.loads(body)["result"] == {}
        sock.sendall(request("/mcp", host, b"k", b"GET %s HTTP/1.1"))   # the same headers, another method
        assert read_response(sock, buffer)[0] == b"HTTP/1.1 405 Method Not Allowed"
        sock.sendall(request("/mcp", host, b"k", b"POST %s HTTP/1.0"))
        status_line, headers, body = read_response(sock, buffer)
        assert status_line.split(b" ")[1] == b"200" and headers[b"connection"] == b"close"
        assert orjson.loads(body)["result"] == {}
    assert answered_at_once == ["/mcp", "/mcp", "/call", "/mcp", "/mcp"]


def test_each_call_answered_at_once_runs_in_a_context_of_its_own(answered_at_once: list[str]) -> None:
    """A context variable set while one call is answered is not seen by the next, as with a task per request."""
    app = create_app(MarkingCounter, CounterAction, CounterObservation, max_concurrent_envs=2)
    with running_server(app) as url, httpx.Client(base_url=url, trust_env=False) as http:
        episode = open_episode(http)
        seen = [http.post("/mcp", content=mcp_call("mark", episode_id=episode)).json()["result"]["content"][0]["text"]
                for _ in range(3)]
    assert seen == ["unset"] * 3
    assert answered_at_once.count("/mcp") == 4


def closed_within(sock: socket.socket, seconds: float) -> bool:
    """Whether the server closes `sock` within `seconds` (it sends nothing meanwhile)."""
    sock.settimeout(seconds)
    try:
        return sock.recv(1) == b""
    except TimeoutError:
        return False


@pytest.mark.parametrize("path", ["/mcp", "/health"])   # answered at once, and through uvicorn's cycle
def test_a_kept_alive_connection_is_closed_once_idle_for_the_keep_alive_timeout(connect: Any, path: str) -> None:
    """uvicorn's keep-alive timeout holds for requests answered at once as for the others: a connection busy for
    longer than the timeout stays open, and is closed the timeout after its last response."""
    with running_server(echo_app(), timeout_keep_alive=1) as url:
        sock, buffer = connect(url), bytearray()
        request = (post(path, orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping"})) if path == "/mcp"
                   else b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        started = time.monotonic()
        while time.monotonic() - started < 2.5:   # 2.5 timeouts' worth of requests, 0.4 s apart
            sock.sendall(request)
            assert read_response(sock, buffer)[0] == b"HTTP/1.1 200 OK"
            time.sleep(0.4)
        assert not closed_within(sock, 0.3)   # last response 0.4 + 0.3 s ago
        assert closed_within(sock, 1.5)


@pytest.mark.parametrize("level", ["info", "warning"])
def test_a_request_answered_at_once_gets_uvicorns_access_log_line_when_it_is_logged(level: str) -> None:
    """`envkit serve --log-level info` logs an MCP call answered at once as uvicorn logs any request; at `warning`,
    no access line is made at all."""
    with ServedProcess("echo", "--log-level", level) as served:
        reply = httpx.post(served.url + "/mcp", trust_env=False,
                           json={"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "reset"}})
        assert reply.status_code == 200 and reply.json()["result"]["isError"] is False
        httpx.get(served.url + "/health", trust_env=False)   # through uvicorn's cycle: its line comes after the first
        served.terminate()
    lines = [line for line in served.output if '"POST /mcp HTTP/1.1" 200' in line or '"GET /health' in line]
    if level == "info":
        assert len(lines) == 2 and re.search(r'127\.0\.0\.1:\d+ - "POST /mcp HTTP/1\.1" 200', lines[0]), lines
    else:
        assert lines == []


@pytest.fixture
def repeats_taken(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The paths of the requests answered as repeats of a connection's last request (`_Repeat.exchange_for`)."""
    needs_fast_path("at_once")
    taken: list[str] = []
    exchange_for = at_once._Repeat.exchange_for

    def counted(self: Any, protocol: Any, data: bytes) -> Any:
        exchange = exchange_for(self, protocol, data)
        if exchange is not None:
            taken.append(exchange.path)
        return exchange

    monkeypatch.setattr(at_once._Repeat, "exchange_for", counted)
    return taken


def test_a_repeated_request_is_answered_without_the_parser_and_anything_else_with_it(repeats_taken: list[str],
                                                                                   connect: Any) -> None:
    """A read holding exactly one request whose head repeats the connection's last request answered at once (any
    body length) skips httptools' callbacks (`_Repeat`); a head that differs in any byte, two requests in one read,
    a request split over reads, a partial body and garbage after a request all go through the parser, and every
    one is answered as it would be."""
    with running_server(echo_app(max_message_bytes=4096)) as url, \
            httpx.Client(base_url=url, trust_env=False) as http:
        episode = open_episode(http)
        sock, buffer = connect(url), bytearray()

        def call(message: str, headers: bytes = b"") -> bytes:
            return post("/mcp", mcp_call("echo", episode_id=episode, message=message), headers)

        def echoed(expected: str) -> None:
            status, _, body = read_response(sock, buffer)
            assert status == b"HTTP/1.1 200 OK", body
            assert orjson.loads(body)["result"]["structuredContent"]["data"]["observation"]["echoed_message"] == expected

        for message in ("a", "bb" * 5, "c" * 200, "d" * 1000, ""):   # lengths of 1 to 4 digits: repeats each time
            sock.sendall(call(message))
            echoed(message)
        assert len(repeats_taken) == 4   # the first taught the connection its request

        sock.sendall(call("other header", b"accept: application/json\r\n"))   # another head: parsed, then repeated
        echoed("other header")
        sock.sendall(call("other header again", b"accept: application/json\r\n"))
        echoed("other header again")
        assert len(repeats_taken) == 5

        sock.sendall(call("one") + call("two"))   # two requests in one read
        echoed("one"), echoed("two")
        request = call("split")
        sock.sendall(request[:40])   # the head in pieces, then the body
        time.sleep(0.05)
        sock.sendall(request[40:-5])
        time.sleep(0.05)
        sock.sendall(request[-5:])
        echoed("split")
        sock.sendall(call("x" * 5000))   # over the surface's limit: uvicorn's path, then the surface's 413
        assert read_response(sock, buffer)[0].split(b" ")[1] == b"413"
        sock.sendall(call("after") + b"BLAH\r\n\r\n")   # a repeat, then garbage in the same read
        echoed("after")
        assert read_response(sock, buffer)[0].split(b" ")[1] == b"400"
        assert len(repeats_taken) == 5
        assert http.get("/health").status_code == 200   # the server carries on
