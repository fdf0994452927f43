"""A CPU-heavy environment for scale-out benchmarks: each step burns about 1 ms of CPU, then echoes.

Stands for a game engine or a simulator whose step is real work: one server process can do at
most about 1,000 of these steps a second, so more steps/s needs more cores.

    envkit serve burn_env:BurnEnvironment      (with benchmarks/cpu_env on PYTHONPATH)
"""

from __future__ import annotations

import time
from typing import Any

from pydantic import Field

from envkit import Action, Environment, Observation, State

#: CPU seconds each step burns (measured on the serving thread, so waiting for a core does not count).
BURN_S = 0.001


class BurnAction(Action):
    message: str = Field(default="", description="Echoed back once the step's work is done")


class BurnObservation(Observation):
    echoed_message: str = ""
    rounds: int = 0


class BurnEnvironment(Environment[BurnAction, BurnObservation, State]):
    """Each step burns about 1 ms of CPU (hashing), then echoes its message."""

    SUPPORTS_CONCURRENT_SESSIONS = True
    RUN_INLINE = True

    def __init__(self) -> None:
        self._state = State()

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> BurnObservation:
        self._state = State(episode_id=episode_id, step_count=0)
        return BurnObservation(reward=0.0)

    def step(self, action: BurnAction) -> BurnObservation:
        started = time.thread_time()
        rounds, value = 0, 0
        while time.thread_time() - started < BURN_S:
            for _ in range(200):
                value = (value * 1_103_515_245 + 12_345) & 0xFFFFFFFF
            rounds += 1
        self._state.step_count += 1
        return BurnObservation(echoed_message=action.message, rounds=rounds, reward=1.0)

    @property
    def state(self) -> State:
        return self._state
