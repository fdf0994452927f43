"""Many sessions at once: isolation, and a slow environment does not stall the others."""

from __future__ import annotations

import asyncio
import threading

from sample_envs import CounterAction, CounterEnvironment, CounterObservation

from envkit import EnvClient, create_app
from envkit.testing import running_server


async def test_64_sessions_interleaving_each_see_only_their_own_state(echo_url: str) -> None:
    clients = [EnvClient(echo_url) for _ in range(64)]
    await asyncio.gather(*(client.reset(episode_id=f"episode-{i}") for i, client in enumerate(clients)))

    async def play(index: int, client: EnvClient) -> None:
        for step in range(1, 6):
            message = f"session {index} step {step}"
            result = await client.step({"message": message})
            assert result.observation["echoed_message"] == message
            assert result.observation["metadata"]["step"] == step
            await asyncio.sleep(0)   # let the others interleave
        state = await client.state()
        assert state == {"episode_id": f"episode-{index}", "step_count": 5}

    await asyncio.gather(*(play(i, client) for i, client in enumerate(clients)))
    await asyncio.gather(*(client.close() for client in clients))


def test_slow_synchronous_step_does_not_stall_other_sessions() -> None:
    app = create_app(CounterEnvironment, CounterAction, CounterObservation, max_concurrent_envs=4)
    with running_server(app) as url, EnvClient(url).sync() as slow, EnvClient(url).sync() as quick:
        slow.reset()
        quick.reset()
        slow_finished = threading.Event()

        def slow_call() -> None:
            slow.step({"sleep_s": 3, "amount": 1})
            slow_finished.set()

        caller = threading.Thread(target=slow_call)
        caller.start()
        totals = [quick.step({"amount": 1}).observation["total"] for _ in range(20)]
        assert totals == list(range(1, 21))
        assert not slow_finished.is_set(), "the quick session waited for the slow one"
        caller.join(10)
        assert slow_finished.is_set()
