"""Detached sessions: the HTTP surfaces' episodes (no connection of their own) share the one pool with /ws."""

from __future__ import annotations

import asyncio

import pytest

from envkit import create_app
from envkit.serving import resolve_target
from envkit.ws_handler import SessionRefused


def echo_app(**settings):
    target = resolve_target("echo")
    return create_app(target.env_class, target.action_cls, target.observation_cls, **settings)


async def test_detached_sessions_count_against_the_limit_and_give_their_slot_back() -> None:
    app = echo_app(max_concurrent_envs=2, capacity_wait_s=0)
    handler, pool = app.session_handler, app.state.envkit_pool
    first, second = await handler.open_detached(), await handler.open_detached()
    with pytest.raises(SessionRefused) as refused:
        await handler.open_detached()
    assert refused.value.refusal.kind == "capacity" and pool.active == 2
    await first.end(1000, "closed by client")
    assert pool.active == 1 and pool.get(first.id) is None and pool.get(second.id) is second
    assert pool.ended(first.id) == (1000, "closed by client") and pool.ended("never-seen") is None
    await pool.shutdown()
    assert pool.active == 0 and pool.ended(second.id)[0] == 1001


async def test_idle_detached_session_is_reaped_and_remembered_as_gone() -> None:
    app = echo_app(max_concurrent_envs=1, session_timeout_s=0.3)
    handler, pool = app.session_handler, app.state.envkit_pool
    session = await handler.open_detached()
    async with session.in_use():
        await session.reset({})
    for _ in range(50):
        if pool.get(session.id) is None:
            break
        await asyncio.sleep(0.1)
    assert pool.active == 0 and pool.ended(session.id)[0] == 4408
    await pool.shutdown()
