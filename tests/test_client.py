"""EnvClient, async and sync, against a real server."""

from __future__ import annotations

import asyncio

import pytest
from sample_envs import CounterObservation

from envkit import CapacityError, EnvClient, EnvConnectionError, EnvError, SessionLostError
from envkit.testing import free_port



async def test_async_episode(echo_url: str) -> None:
    async with EnvClient(echo_url) as env:
        assert env.session_id
        result = await env.reset(seed=1)
        assert result.observation["echoed_message"] == "Echo environment ready!"
        result = await env.step({"message": "hello"})
        assert (result.observation["echoed_message"], result.reward, result.done) == ("hello", pytest.approx(0.5), False)
        assert (await env.state())["step_count"] == 1


def test_sync_episode_mirrors_async(echo_url: str) -> None:
    from echo_env import EchoAction, EchoObservation

    with EnvClient(echo_url, observation_cls=EchoObservation).sync() as env:
        env.reset(seed=1)
        result = env.step(EchoAction(message="typed"))
        assert isinstance(result.observation, EchoObservation)
        assert result.observation.message_length == 5 and result.reward == pytest.approx(0.5)
        tool = env.call("echo", message="four")
        assert (tool.text, tool.reward, tool.done) == ("four", pytest.approx(0.4), False)
        assert isinstance(tool.observation, EchoObservation)
        assert [t["function"]["name"] for t in env.tools()] == ["echo", "echo_message", "echo_with_length"]
        assert env.call("echo_with_length", message="four").text == '{"message":"four","length":4}'
        assert env.health()["active_sessions"] == 1
    assert not env.connected


def test_env_errors_carry_code_and_keep_the_session(counter_url: str) -> None:
    with EnvClient(counter_url, observation_cls=CounterObservation).sync() as env:
        env.reset(tag="a")
        with pytest.raises(EnvError) as error:
            env.step({"fail": True})
        assert error.value.code == "EXECUTION_ERROR" and "asked to fail" in error.value.message
        with pytest.raises(EnvError) as error:
            env.step({"amount": "many"})
        assert error.value.code == "VALIDATION_ERROR" and error.value.details["errors"]
        assert env.step({"amount": 4}).observation.total == 4
        assert env.call("peek").text == "total is 4"


def test_unreachable_server_is_a_connection_error() -> None:
    port = free_port()
    with pytest.raises(EnvConnectionError) as error:
        EnvClient(f"http://127.0.0.1:{port}", connect_timeout=2).sync().connect()
    assert f"127.0.0.1:{port}" in str(error.value)
    assert not isinstance(error.value, CapacityError)


async def test_message_timeout_loses_the_session_instead_of_desynchronising(counter_url: str) -> None:
    env = EnvClient(counter_url, message_timeout=0.3)
    await env.reset()
    with pytest.raises(SessionLostError) as lost:
        await env.step({"sleep_s": 1.5})
    assert "no reply within 0.3s" in lost.value.reason
    with pytest.raises(SessionLostError):
        await env.step({"amount": 1})
    result = await env.reset(tag="fresh")   # a new episode on a new session
    assert result.observation["tag"] == "fresh"
    assert (await env.step({"amount": 2})).observation["total"] == 2
    await env.close()


async def test_url_forms_are_equivalent(echo_url: str) -> None:
    host = echo_url.removeprefix("http://")
    for url in (echo_url, f"ws://{host}", f"ws://{host}/ws", f"{echo_url}/", host):
        async with EnvClient(url) as env:
            assert (await env.reset()).reward == 0.0


async def test_reset_without_connect_opens_a_session(echo_url: str) -> None:
    env = EnvClient(echo_url)
    assert not env.connected
    await env.reset()
    assert env.connected
    await env.close()
    await env.close()   # closing twice is harmless
    await asyncio.sleep(0)


async def test_a_cancelled_call_never_hands_its_reply_to_the_next_call(echo_url: str) -> None:
    """Cancel a step at every point of its life (before it sent, while its reply travels): the next call gets
    its own reply or `SessionLostError`, never the cancelled one's, and `reset()` then starts afresh."""
    env = EnvClient(echo_url)
    lost = kept = 0
    for trial in range(20):
        await env.reset()
        cancelled = asyncio.ensure_future(env.step({"message": f"cancelled-{trial}"}))
        for _ in range(trial % 5):
            await asyncio.sleep(0)
        cancelled.cancel()
        try:
            finished = await cancelled   # the step may have finished first: then the reply was its own
            assert finished.observation["echoed_message"] == f"cancelled-{trial}"
        except asyncio.CancelledError:
            pass
        try:
            result = await env.step({"message": f"next-{trial}"})
        except SessionLostError as error:
            assert "cancelled before its reply arrived" in error.reason
            lost += 1
            with pytest.raises(SessionLostError):
                await env.state()   # lost stays lost until reset()
        else:
            assert result.observation["echoed_message"] == f"next-{trial}"
            kept += 1
        await env.reset()
        assert (await env.step({"message": f"after-{trial}"})).observation["echoed_message"] == f"after-{trial}"
    await env.close()
    assert lost and kept   # both sides of the race were exercised: cancelled before sending, and after


async def test_a_call_given_up_by_asyncio_timeout_ends_the_session(counter_url: str) -> None:
    env = EnvClient(counter_url)
    await env.reset(tag="first")
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.3):
            await env.step({"amount": 5, "sleep_s": 1.0})
    with pytest.raises(SessionLostError):
        await env.step({"amount": 1})
    assert (await env.reset(tag="second")).observation["tag"] == "second"
    assert (await env.step({"amount": 2})).observation["total"] == 2   # not the late reply (5) of the abandoned step
    await env.close()


def test_an_interrupted_sync_call_ends_the_session_like_a_cancelled_async_one(counter_url: str) -> None:
    import signal

    class Interrupted(Exception):
        pass

    def interrupt(*_: object) -> None:
        raise Interrupted

    with EnvClient(counter_url).sync() as env:
        env.reset(tag="first")
        previous = signal.signal(signal.SIGALRM, interrupt)
        try:
            signal.setitimer(signal.ITIMER_REAL, 0.3)
            with pytest.raises(Interrupted):
                env.step({"amount": 5, "sleep_s": 1.0})
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
        with pytest.raises(SessionLostError):
            env.step({"amount": 1})
        assert env.reset(tag="second").observation["tag"] == "second"
        assert env.step({"amount": 2}).observation["total"] == 2
