"""Frames of `RUN_INLINE` environments answered inside the transport's callbacks (`envkit.transport.fast.inline`).

The default transport answers such frames without a task, except a frame whose answer must wait (here a tool
that is a coroutine): frames sent meanwhile are answered after it, in order, and a client that goes
away meanwhile has its session closed only once that answer is done.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import raw_ws

from envkit import Action, Environment, Observation, State, create_app, tool
from envkit.testing import running_server


class Add(Action):
    amount: int = 1


class Total(Observation):
    total: int = 0


class InlineCounter(Environment[Add, Total, State]):
    """Inline steps; a `pause` tool that waits on the event loop; every tool run and close is journaled."""

    SUPPORTS_CONCURRENT_SESSIONS = True
    RUN_INLINE = True
    journal: list[str] = []

    def __init__(self) -> None:
        self.total = 0

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> Total:
        self.total = 0
        return Total()

    def step(self, action: Add) -> Total:
        self.total += action.amount
        return Total(total=self.total)

    @property
    def state(self) -> State:
        return State(step_count=self.total)

    @tool
    async def pause(self, seconds: float) -> str:
        """Wait, then say so.

        Args:
            seconds: How long to wait.
        """
        InlineCounter.journal.append("pause started")
        await asyncio.sleep(seconds)
        InlineCounter.journal.append("pause done")
        return f"paused {seconds}"

    def close(self) -> None:
        InlineCounter.journal.append("closed")


def read_frames(sock: Any, count: int) -> list[dict[str, Any]]:
    return [json.loads(raw_ws.read_frame(sock)[1]) for _ in range(count)]


def test_frames_after_one_that_waits_are_answered_after_it_in_order() -> None:
    app = create_app(InlineCounter, Add, Total, max_concurrent_envs=4)
    with running_server(app) as url:
        sock = raw_ws.open_websocket(url)
        with sock:
            frames = [b'{"type":"reset"}', b'{"type":"call","data":{"tool":"pause","args":{"seconds":0.05}}}']
            frames += [b'{"type":"step","data":{"amount":1}}'] * 40   # more than the 16 that may wait unread
            sock.sendall(b"".join(raw_ws.frame(frame) for frame in frames))
            replies = read_frames(sock, len(frames))
    assert [reply["type"] for reply in replies[:2]] == ["observation", "tool_result"]
    assert replies[1]["data"]["result"] == "paused 0.05"
    assert [reply["data"]["observation"]["total"] for reply in replies[2:]] == list(range(1, 41))


def test_a_client_gone_during_an_answer_that_waits_is_closed_after_it() -> None:
    InlineCounter.journal = []
    app = create_app(InlineCounter, Add, Total, max_concurrent_envs=4)
    with running_server(app) as url:
        sock = raw_ws.open_websocket(url)
        sock.sendall(raw_ws.frame(b'{"type":"reset"}'))
        read_frames(sock, 1)
        sock.sendall(raw_ws.frame(b'{"type":"call","data":{"tool":"pause","args":{"seconds":0.3}}}'))
        time.sleep(0.1)
        sock.close()
        deadline = time.monotonic() + 5
        while "closed" not in InlineCounter.journal and time.monotonic() < deadline:
            time.sleep(0.02)
    assert InlineCounter.journal == ["pause started", "pause done", "closed"]


def test_an_app_with_middleware_sees_every_frame() -> None:
    """Inline answering skips the ASGI channels, so it is taken only where nothing else listens on them."""
    seen: list[str] = []

    def counting(app: Any) -> Any:
        async def middleware(scope: Any, receive: Any, send: Any) -> None:
            async def counted_receive() -> Any:
                message = await receive()
                seen.append(message["type"])
                return message
            await app(scope, counted_receive, send)
        return middleware

    app = create_app(InlineCounter, Add, Total, max_concurrent_envs=4)
    app.add_middleware(counting)
    with running_server(app) as url:
        sock = raw_ws.open_websocket(url)
        with sock:
            frames = [b'{"type":"reset"}'] + [b'{"type":"step","data":{"amount":2}}'] * 3
            sock.sendall(b"".join(raw_ws.frame(frame) for frame in frames))
            replies = read_frames(sock, len(frames))
    assert [reply["data"]["observation"]["total"] for reply in replies] == [0, 2, 4, 6]
    assert seen.count("websocket.receive") == 4
