"""How `/ws` connections reach the session handler, and memory given back after a burst of sessions.

Real servers on 127.0.0.1 and real clients; nothing is mocked.
"""

from __future__ import annotations

import asyncio
import gc
import time
import weakref
from typing import Any

from envkit import EnvClient, create_app
from envkit.client import websocket_url
from envkit.memory import release_memory
from envkit.serving import resolve_target
from envkit.sessions import SessionPool
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
