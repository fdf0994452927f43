"""How `/ws` connections and HTTP calls reach their handlers, and memory given back after a burst of sessions.

Real servers on 127.0.0.1 and real clients; nothing is mocked.
"""

from __future__ import annotations

import asyncio
import gc
import socket
import time
import weakref
from pathlib import Path
from typing import Any

import httpx

import envkit.surfaces.web

from envkit import EnvClient, create_app
from envkit.client import websocket_url
from envkit.core.memory import release_memory
from envkit.app.targets import resolve_target
from envkit.core.sessions import SessionPool
from envkit.testing import running_server


def echo_app() -> Any:
    target = resolve_target("echo")
    return create_app(target.env_class, target.action_cls, target.observation_cls, max_concurrent_envs=4)


class ScopeRecorder:
    """A plain ASGI middleware that notes the type of every scope passing through it."""

    def __init__(self, app: Any, seen: list[str]) -> None:
        self.app = app
        self.seen = seen

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        self.seen.append(scope["type"])
        await self.app(scope, receive, send)


def test_middleware_added_to_the_app_sees_websocket_sessions() -> None:
    app = echo_app()
    seen: list[str] = []
    app.add_middleware(ScopeRecorder, seen=seen)
    with running_server(app) as url, EnvClient(url).sync() as env:
        env.reset()
        assert env.step({"message": "through the middleware"}).observation["echoed_message"] == "through the middleware"
    assert "websocket" in seen


def test_sessions_are_served_without_middleware() -> None:
    with running_server(echo_app()) as url, EnvClient(url).sync() as env:
        env.reset()
        assert env.step({"message": "direct"}).observation["echoed_message"] == "direct"


class Cycle:
    def __init__(self) -> None:
        self.me = self


def _unreachable_cycle() -> weakref.ref[Cycle]:
    return weakref.ref(Cycle())


def test_release_memory_collects_cyclic_garbage() -> None:
    gc.disable()
    try:
        garbage = _unreachable_cycle()
        assert garbage() is not None
        release_memory()
        assert garbage() is None
    finally:
        gc.enable()


async def _burst(pool: SessionPool, sessions: int) -> None:
    for _ in range(sessions):
        assert pool.try_reserve()
    for _ in range(sessions):
        pool.release()


async def _collected_after_burst(sessions: int) -> bool:
    pool = SessionPool(max_sessions=1000, idle_timeout_s=None)
    gc.disable()
    try:
        garbage = _unreachable_cycle()
        await _burst(pool, sessions)
        deadline = time.monotonic() + pool.RECLAIM_AFTER_S + 2.0
        while garbage() is not None and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        return garbage() is None
    finally:
        gc.enable()
        await pool.shutdown()


async def test_memory_is_released_once_a_burst_of_sessions_has_closed() -> None:
    assert await _collected_after_burst(SessionPool.RECLAIM_MIN_CLOSED)


async def test_a_few_sessions_closing_do_not_pause_the_server_to_collect() -> None:
    assert not await _collected_after_burst(SessionPool.RECLAIM_MIN_CLOSED - 1)


async def test_envkit_serve_declines_compression_offered_by_openenv_style_clients() -> None:
    from websockets.asyncio.client import connect

    from envkit.testing import ServedProcess

    with ServedProcess("echo") as served:
        async with connect(websocket_url(served.url), compression="deflate") as ws:
            assert ws.protocol.extensions == []
            await ws.send('{"type": "reset"}')
            assert '"observation"' in await ws.recv()


def test_middleware_added_to_the_app_sees_mcp_and_ors_calls_which_still_play() -> None:
    """/mcp and the ORS routes are served straight to their surfaces, or through ordinary routes once the app has
    middleware: the same answers either way."""
    app = echo_app()
    seen: list[str] = []
    app.add_middleware(ScopeRecorder, seen=seen)
    with running_server(app) as url, httpx.Client(base_url=url, trust_env=False) as http:
        def mcp(name: str, **arguments: Any) -> dict[str, Any]:
            call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": name, "arguments": arguments}}
            return http.post("/mcp", json=call).json()["result"]

        episode = mcp("reset")["structuredContent"]["episode_id"]
        assert "via middleware" in mcp("echo", episode_id=episode, message="via middleware")["content"][0]["text"]
        sid = http.post("/create_session").text.split("data: ")[1].split("\n")[0]
        assert http.post("/create", headers={"X-Session-ID": sid}, json={"task_spec": {}}).json() == {"sid": sid}
        played = http.post("/call", headers={"X-Session-ID": sid},
                           json={"name": "echo_message", "input": {"message": "ors too"}})
        assert played.status_code == 200 and "ors too" in played.text
        assert http.get("/call").json()["reason"] == "method_not_allowed"
    assert seen.count("http") >= 5


def test_answered_http_requests_leave_no_reference_cycles_behind() -> None:
    """Every object of an answered request (`GET /health`, an MCP `tools/call`) is freed when the request is done,
    none left in a reference cycle for the garbage collector: one per request made it run every few requests."""
    call = (b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "echo_message", '
            b'"arguments": {"message": "hi"}}}')
    requests = [b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
                b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\ncontent-type: application/json\r\n"
                b"content-length: %d\r\n\r\n%s" % (len(call), call)]
    with running_server(echo_app()) as url:
        host, port = url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port))) as sock:
            def exchange(rounds: int) -> None:
                for _ in range(rounds):
                    for request in requests:
                        sock.sendall(request)
                        (head, body), = _read_responses(sock, [True])
                        assert head.startswith(b"HTTP/1.1 200"), head + body

            exchange(20)
            gc.collect()
            gc.disable()
            try:
                exchange(200)
                found = gc.collect()
            finally:
                gc.enable()
    # One left per request would be thousands (5,197 when the response wrapper held its cycle); fewer than one per
    # request leaves room for whatever else the process runs meanwhile.
    assert found < 400, f"{found} objects in reference cycles after 400 requests"


def _read_responses(sock: socket.socket, bodies: list[bool]) -> list[tuple[bytes, bytes]]:
    """(head, body) of one response per entry of `bodies` (False: an answer to HEAD, whose body is never sent)."""
    buffer, responses = b"", []
    sock.settimeout(5)
    for has_body in bodies:
        while b"\r\n\r\n" not in buffer:
            buffer += sock.recv(65536)
        head, buffer = buffer.split(b"\r\n\r\n", 1)
        length = int(next(line.split(b":")[1] for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")))
        length = length if has_body else 0
        while len(buffer) < length:
            buffer += sock.recv(65536)
        responses.append((head, buffer[:length]))
        buffer = buffer[length:]
    assert buffer == b""
    return responses


def test_pipelined_requests_and_answers_to_head_and_for_files_stay_whole() -> None:
    """Responses with a body, to HEAD and for a static file come back whole and in order on one connection,
    requests sent before any answer."""
    with running_server(echo_app()) as url:
        host, port = url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port))) as sock:
            sock.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
                         b"HEAD /web/static/style.css HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
                         b"GET /web/static/style.css HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
                         b"HEAD /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
                         b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            answers = _read_responses(sock, [True, False, True, False, True])
    (get_health, first), (head_css, _), (get_css, css), (head_405, _), (_, second) = answers
    assert get_health.startswith(b"HTTP/1.1 200") and first.endswith(b'"max_sessions":4}') and second == first
    assert head_css.startswith(b"HTTP/1.1 200") and get_css.startswith(b"HTTP/1.1 200")
    assert css == (Path(envkit.surfaces.web.__file__).parent / "static" / "style.css").read_bytes()
    assert head_405.startswith(b"HTTP/1.1 405")
