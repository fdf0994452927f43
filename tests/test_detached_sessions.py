"""Detached sessions: the HTTP surfaces' episodes (no connection of their own) share the one pool with /ws."""

from __future__ import annotations

import asyncio

import pytest

from envkit import create_app
from envkit.app.targets import resolve_target
from envkit.core.served_env import SessionRefused


def echo_app(**settings):
    target = resolve_target("echo")
    return create_app(target.env_class, target.action_cls, target.observation_cls, **settings)


async def test_detached_sessions_count_against_the_limit_and_give_their_slot_back() -> None:
    app = echo_app(max_concurrent_envs=2, capacity_wait_s=0)
    served, pool = app.served, app.state.envkit_pool
    first, second = await served.open_detached(), await served.open_detached()
    with pytest.raises(SessionRefused) as refused:
        await served.open_detached()
    assert refused.value.refusal.kind == "capacity" and pool.active == 2
    await first.end(1000, "closed by client")
    assert pool.active == 1 and pool.get(first.id) is None and pool.get(second.id) is second
    assert pool.ended(first.id) == (1000, "closed by client") and pool.ended("never-seen") is None
    await pool.shutdown()
    assert pool.active == 0 and pool.ended(second.id)[0] == 1001


async def test_idle_detached_session_is_reaped_and_remembered_as_gone() -> None:
    app = echo_app(max_concurrent_envs=1, session_timeout_s=0.3)
    served, pool = app.served, app.state.envkit_pool
    session = await served.open_detached()
    async with session.in_use():
        await session.reset({})
    for _ in range(50):
        if pool.get(session.id) is None:
            break
        await asyncio.sleep(0.1)
    assert pool.active == 0 and pool.ended(session.id)[0] == 4408
    await pool.shutdown()


async def test_requests_of_a_detached_session_take_turns_in_order_and_survive_cancellation() -> None:
    """`Session.in_use()`: one request at a time, first come first served; a request cancelled while it waits leaves
    no trace, one cancelled just as its turn came passes the turn on, and the session is free again after them."""
    app = echo_app(max_concurrent_envs=1)
    session = await app.served.open_detached()
    order: list[str] = []

    async def request(name: str, hold_s: float = 0.0) -> None:
        async with session.in_use():
            order.append(name)
            assert session.busy
            await asyncio.sleep(hold_s)

    async def first_then_cancel_second() -> None:
        await request("first", 0.05)
        third.append(asyncio.create_task(request("third")))
        second.cancel()   # in the step that handed it its turn, before it could run: it passes the turn on

    third: list[asyncio.Task[None]] = []
    first = asyncio.create_task(first_then_cancel_second())
    await asyncio.sleep(0)
    cancelled_waiting = asyncio.create_task(request("cancelled while waiting"))
    second = asyncio.create_task(request("second"))
    await asyncio.sleep(0.01)
    cancelled_waiting.cancel()
    await first
    await third[0]
    assert order == ["first", "third"]
    assert cancelled_waiting.cancelled() and second.cancelled()
    assert not session.busy
    await request("after them")   # free again: taken at once
    assert order[-1] == "after them"
    await app.state.envkit_pool.shutdown()
